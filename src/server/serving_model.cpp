#include "server/serving_model.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "model/cost_model.hpp"

namespace latprof::server {

int32_t sample_logits(const float* logits, int64_t vocab, const RequestSampling& s,
                      int64_t token_index) {
  if (s.temperature <= 0) return int32_t(std::max_element(logits, logits + vocab) - logits);
  const int64_t k = (s.top_k > 0 && s.top_k < vocab) ? s.top_k : vocab;
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  // Ties keep the lower id first, so the order (and the draw) is deterministic.
  auto more_likely = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), more_likely);
  const double mx = logits[idx[0]];
  std::vector<double> p(static_cast<size_t>(k));
  double sum = 0;
  for (int64_t i = 0; i < k; ++i)
    sum += p[size_t(i)] = std::exp((logits[idx[size_t(i)]] - mx) / s.temperature);
  // Nucleus: the most likely tokens whose probabilities reach top_p (at least one).
  int64_t n = k;
  if (s.top_p < 1.0) {
    double acc = 0;
    for (int64_t i = 0; i < k; ++i) {
      acc += p[size_t(i)] / sum;
      if (acc >= s.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += p[size_t(i)];
  std::mt19937_64 gen(s.seed * 0x9e3779b97f4a7c15ull + uint64_t(token_index) * 1315423911ull + 1);
  double r = std::uniform_real_distribution<double>(0, total)(gen);
  for (int64_t i = 0; i < n; ++i) {
    r -= p[size_t(i)];
    if (r <= 0) return idx[size_t(i)];
  }
  return idx[size_t(n - 1)];
}

namespace {

using SteadyClock = std::chrono::steady_clock;

void check_engine_flags(const ServeModelOptions& o, const ModelConfig& cfg) {
  latprof::check_engine_flags(o.kv_block_size, o.max_batched_tokens, o.max_seqs, o.max_model_len,
                              cfg.max_seq_len);
  check_threads(o.threads, "--threads");
}

}  // namespace

ServingModel::ServingModel(const ServeModelOptions& o) {
  const auto t0 = SteadyClock::now();
  if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda")
    usage_error("unknown backend '" + o.backend + "'; use auto, cpu or cuda");
  const Precision wanted = precision_for(o.dtype, 4, 2);
  const WeightType wtype = weight_type_for(wanted.weights);
  const KvType kv = kv_type_for(o.kv_dtype);
  om_ = open_model(o.model, o.seed);
  const ModelConfig& cfg = om_.config;
  check_engine_flags(o, cfg);

  BackendOptions bo;
  bo.kind = o.backend;
  bo.threads = o.threads;
  bo.graphs = o.graphs;
  bo.kv = kv;
  backend_ = create_backend(bo, &why_not_cuda_);
  threads_ = o.threads > 0 ? o.threads : std::max(1, int(std::thread::hardware_concurrency()));
  Backend& b = *backend_;
  b.set_graph_enabled(o.graphs);
  check_backend_runs(b, wtype);
  check_backend_kv(b, kv);

  prefix_cache_ = o.prefix_cache;
  EngineShape& e = shape_;
  e.block_size = o.kv_block_size;
  e.max_model_len = o.max_model_len > 0 ? o.max_model_len : cfg.max_seq_len;
  e.max_step_tokens =
      o.max_batched_tokens > 0 ? o.max_batched_tokens : default_max_batched_tokens(b);
  e.max_seqs = o.max_seqs;
  const Precision p = backend_precision(o.dtype, b);
  const double block_bytes = kv_bytes_per_token(cfg, p) * double(e.block_size);
  const int64_t per_request = e.max_blocks();  // one request of max_model_len positions
  const int64_t useful = per_request * e.max_seqs;
  double blocks = 0;
  if (!o.kv_cache_memory.empty()) {
    blocks = std::floor(parse_bytes(o.kv_cache_memory, "--kv-cache-memory") / block_bytes);
    if (blocks < 1)
      usage_error("--kv-cache-memory " + o.kv_cache_memory + " holds no KV block of " +
                  std::to_string(e.block_size) + " tokens (" + fmt_bytes(block_bytes) +
                  " each); give it more memory");
  } else {
    e.kv_blocks = 1;
    const Footprint without = LoadedModel::footprint(cfg, wtype, b, e);
    const double avail = b.device().memory_available_bytes;
    const double budget = avail > 0
                              ? kKvMemoryFraction * avail - without.weights - without.activations
                              : double(useful) * block_bytes;
    blocks = std::min(double(useful), std::floor(budget / block_bytes));
    if (blocks < double(per_request))
      usage_error("the KV cache that fits beside the weights (" + fmt_bytes(without.weights) +
                  ") and activations (" + fmt_bytes(without.activations) + ") in " +
                  std::to_string(int(kKvMemoryFraction * 100)) + "% of the " + fmt_bytes(avail) +
                  " available holds fewer than the " + std::to_string(per_request) +
                  " blocks one request of --max-model-len " + std::to_string(e.max_model_len) +
                  " positions needs; lower --max-model-len or --max-batched-tokens, use "
                  "--dtype int8 or a smaller model");
  }
  e.kv_blocks =
      int64_t(std::min(blocks, double(std::numeric_limits<int32_t>::max() / e.block_size)));
  kv_bytes_ = double(e.kv_blocks) * block_bytes;
  model_ = std::make_unique<LoadedModel>(cfg, wtype, b, e);  // checks that it all fits
  model_->load(*om_.weights, [](int64_t, int64_t) {});
  load_ms_ = std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

ServingExecutor::ServingExecutor(ServingModel& m) : m_(m), prof_(m.backend()) {
  prof_.set_instrumented(false);  // no per-op events: a server runs for days
  runner_ = std::make_unique<ModelRunner>(m.model(), prof_, SamplingParams{});
}

void ServingExecutor::set_sampling(int64_t id, const RequestSampling& s) {
  if (s.temperature <= 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  sampling_[id] = s;
}

void ServingExecutor::erase_sampling(int64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  sampling_.erase(id);
}

std::vector<int32_t> ServingExecutor::execute(const engine::StepBatch& b) {
  Backend& be = m_.backend();
  // OpenMP's thread count is a setting of each thread: the engine's own thread inherits none of
  // what the backend set on the thread that created it, and would run every parallel region on
  // all cores (oversubscribed and many times slower with --threads below the core count).
  thread_local bool threads_set = false;
  if (!threads_set) {
    omp_set_num_threads(m_.threads());
    threads_set = true;
  }
  // The runner keeps a record per step and the backend an event per mark: start both afresh
  // now and then, so memory stays flat however long the server runs.
  if (runner_->history().size() >= 4096) {
    runner_ = std::make_unique<ModelRunner>(m_.model(), prof_, SamplingParams{});
  }
  be.reset_events();
  std::vector<int32_t> out = runner_->execute(b);
  last_forward_ms_ = runner_->last().forward_ms;
  last_offcpu_ms_ = runner_->last().sync.offcpu_ms;
  last_runq_ms_ = runner_->last().sync.runq_ms;
  std::lock_guard<std::mutex> lk(mu_);
  if (sampling_.empty()) return out;
  const int64_t V = m_.config().vocab_size;
  row_.resize(size_t(V));
  const auto* logits = static_cast<const uint8_t*>(m_.model().logits);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto it = sampling_.find(b.sample_streams[i]);
    if (it == sampling_.end()) continue;
    be.activations_to_host(row_.data(), logits + size_t(int64_t(i) * V * be.act_bytes()), V);
    out[i] = sample_logits(row_.data(), V, it->second, b.sample_index[i]);
  }
  return out;
}

}  // namespace latprof::server
