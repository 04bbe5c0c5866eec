#include "runner/run_common.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <thread>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/host.hpp"
#include "core/nvtx.hpp"
#include "core/progress.hpp"
#include "latprof/build_info.hpp"
#include "report/physics.hpp"
#include "runner/host_ceilings.hpp"

namespace latprof::run_detail {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Writes every byte of the KV cache once (zeros), so its pages are resident before anything is
// timed. Returns the bytes written.
double touch_kv_cache(LoadedModel& m) {
  Backend& b = m.backend();
  const std::vector<uint8_t> zeros(size_t(1) << 20, 0);
  double total = 0;
  for (KvLayer& l : m.kv) {
    const size_t bytes = size_t(l.num_blocks) * size_t(l.block_size) * size_t(l.row_bytes);
    for (void* base : {l.k, l.v})
      for (size_t off = 0; off < bytes; off += zeros.size())
        b.copy_to_device(static_cast<uint8_t*>(base) + off, zeros.data(),
                         std::min(zeros.size(), bytes - off));
    total += 2.0 * double(bytes);
  }
  b.synchronize();
  return total;
}

// 1-minute load average of the machine (-1 when unknown).
double load_average() {
  std::ifstream in("/proc/loadavg");
  double l = -1;
  in >> l;
  return l;
}

nlohmann::json machine_json(const Backend& b) {
  nlohmann::json j;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  j["hostname"] = host;
  j["cpu"] = host_cpu_name();
  j["cores"] = std::thread::hardware_concurrency();
  j["memory_bytes"] = host_memory_total_bytes();
  utsname u{};
  if (uname(&u) == 0) j["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  const DeviceInfo d = b.device();
  j["device"] = {{"backend", d.backend},
                 {"name", d.name},
                 {"memory_bytes", d.memory_total_bytes},
                 {"details", d.details}};
  j["backends"] = describe_backends();
  return j;
}

nlohmann::json tool_json() {
  return {{"name", "latprof"},
          {"version", build::kVersion},
          {"git_commit", build::kGitCommit},
          {"git_dirty", build::kGitDirty},
          {"build_type", build::kBuildType},
          {"compiler", build::kCompiler},
          {"nvtx", kNvtxCompiled}};
}

// Ceilings of the device the run uses: measured by the backend (GPU) or the host probe (CPU).
void measure_ceilings(Backend& b, const RunOptions& o, int threads, RunReport& r) {
  const std::string gpu = b.measure_ceilings_json();
  if (!gpu.empty()) {
    const nlohmann::json j = nlohmann::json::parse(gpu);
    Ceilings& c = r.ceilings;
    c.device = b.device().name;
    c.source = "measured on the device: " + j.value("method", std::string("backend probe"));
    c.mem_bw_bytes_per_s = j.value("memory_bandwidth_bytes_per_s", 0.0);
    c.matmul_flops_per_s = j.value("fp16_flops_per_s", 0.0);
    c.vector_flops_per_s = j.value("fp32_flops_per_s", 0.0);
    c.int8_ops_per_s = j.value("int8_ops_per_s", 0.0);
    c.memory_bytes = b.device().memory_total_bytes;
    c.cache_bytes = j.value("l2_bytes", 0.0);
    r.ceilings_info = j;
    return;
  }
  HostCeilings h = host_ceilings(threads, o.reprobe, o.quiet);
  r.ceilings = h.ceilings;
  r.ceilings_info = h.info;
  r.ceilings_info["triad_bytes_per_s"] = h.triad_bytes_per_s;
  // The memory roof is measured again now and after the timed part (settle_read_bandwidth):
  // the cached figure may be hours old, and a shared machine's bandwidth drifts.
  const double before = read_bandwidth_now(threads);
  r.ceilings_info["read_bandwidth_cached"] = h.ceilings.mem_bw_bytes_per_s;
  r.ceilings_info["read_bandwidth_before"] = before;
  r.ceilings_info["read_bandwidth_threads"] = threads;
  if (const double ns = core_to_core_ns_now(threads); ns > 0)
    r.ceilings_info["core_to_core_ns_before"] = ns;
  r.ceilings.mem_bw_bytes_per_s = before;
  if (h.info.value("measured_busy", false))
    r.checks.push_back({"warning", "ceilings",
                        "the ceilings were measured while the machine was busy, so they are likely "
                        "low (and MBU/MFU high); they are measured again by the first run on a "
                        "quiet machine, or now with --reprobe"});
}

void fill_sync_metrics(RunReport& r) {
  std::vector<double> ms, fork, regions, share;
  for (const StepRow& s : r.steps)
    if (s.pure_decode() && s.sync_ms >= 0) {
      ms.push_back(s.sync_ms);
      fork.push_back(std::max(0.0, s.sync_fork_ms));
      regions.push_back(double(s.parallel_regions));
      if (s.forward_ms > 0) share.push_back(s.sync_ms / s.forward_ms);
    }
  Metrics& mt = r.metrics;
  if (ms.empty()) return;  // no pure decode step, or no host thread pool (CUDA)
  mt.decode_sync_ms = percentiles(ms).p50;
  mt.decode_sync_fork_ms = percentiles(fork).p50;
  mt.decode_parallel_regions = percentiles(regions).p50;
  mt.decode_sync_share = share.empty() ? 0 : percentiles(share).p50;
  // Off-CPU time: a mean, not a median (it comes in bursts: a step or two that lost half its
  // time), so that it adds up against tpot_ms.
  double off = 0, runq = 0, worst = 0, time = 0;
  int64_t n = 0;
  for (const StepRow& s : r.steps)
    if (s.pure_decode() && s.offcpu_ms >= 0) {
      off += s.offcpu_ms;
      runq += std::max(0.0, s.runq_ms);
      worst = std::max(worst, s.offcpu_ms);
      time += s.time_ms;
      ++n;
    }
  if (n == 0) return;
  mt.decode_offcpu_ms = off / double(n);
  mt.decode_offcpu_max_ms = worst;
  mt.decode_offcpu_share = time > 0 ? off / time : 0;
  mt.decode_runq_ms = runq / double(n);
  // A step that lost its CPUs for a while is as slow as the machine made it, not the engine.
  constexpr double kOffCpuWarnShare = 0.05;
  if (mt.decode_offcpu_share >= kOffCpuWarnShare)
    r.checks.push_back(
        {"warning", "metrics.decode_offcpu_ms",
         "the machine took " + fmt_pct(mt.decode_offcpu_share) +
             " of the decode steps' time from latprof's threads (" + fmt_ms(mt.decode_offcpu_ms) +
             " per step on average, " + fmt_ms(mt.decode_offcpu_max_ms) + " in the worst; " +
             fmt_ms(mt.decode_runq_ms) +
             " of it waiting behind other processes, the rest taken by the hypervisor (steal) or "
             "asleep): tpot_ms, mbu and the ITL tail include it; steps[].offcpu_ms says which "
             "steps lost it"});
}

void settle_read_bandwidth(RunReport& r) {
  if (!r.ceilings_info.is_object() || !r.ceilings_info.contains("read_bandwidth_before")) return;
  const double before = r.ceilings_info["read_bandwidth_before"].get<double>();
  const double after = read_bandwidth_now(r.ceilings_info.value("read_bandwidth_threads", 0));
  r.ceilings_info["read_bandwidth_after"] = after;
  if (r.ceilings_info.contains("core_to_core_ns_before"))
    if (const double ns = core_to_core_ns_now(r.ceilings_info.value("read_bandwidth_threads", 0));
        ns > 0)
      r.ceilings_info["core_to_core_ns_after"] = ns;
  r.ceilings.mem_bw_bytes_per_s = 0.5 * (before + after);
  r.ceilings_info["read_bandwidth_method"] =
      "memory roof = mean of the read bandwidth measured just before and just after the timed "
      "part (best of 3 reads of max(256 MiB, 8x the last-level cache) each)";
}

// A row's floor and bound from its roofline point, and its rates against `peak` and the
// bandwidth when it took time.
void fill_rates(Row& row, const RooflinePoint& rp, double peak, const Ceilings& c) {
  row.floor_ms = rp.floor_ms;
  row.bound = rp.bound;
  if (row.time_ms > 0) {
    const double s = row.time_ms / 1e3;
    row.achieved_flops_per_s = row.cost.flops / s;
    row.achieved_bytes_per_s = row.cost.bytes() / s;
    row.roofline_fraction = row.floor_ms / row.time_ms;
    row.mfu = peak > 0 ? row.cost.model_flops / s / peak : 0;
    row.mbu = c.mem_bw_bytes_per_s > 0 ? row.cost.bytes() / s / c.mem_bw_bytes_per_s : 0;
  }
}

// Fills the derived columns of a row from its time, cost and the ceilings.
void derive(Row& row, const Ceilings& c, const Precision& p, Op op_for_peak, bool has_cost) {
  if (!has_cost || row.cost.bytes() <= 0) return;
  row.arithmetic_intensity = row.cost.intensity();
  const double peak = c.peak_for(op_for_peak, p);
  const RooflinePoint rp = roofline_point(row.cost, peak, c.mem_bw_bytes_per_s);
  fill_rates(row, rp, peak, c);
}

// A stage's bound: the larger of the summed compute and memory floors of its ops.
void derive_stage(Row& row, const OpCosts& ops, const Ceilings& c, const Precision& p) {
  if (row.cost.bytes() <= 0) return;
  const RooflinePoint rp = roofline_ops(ops, c, p);
  row.arithmetic_intensity = row.cost.intensity();
  fill_rates(row, rp, c.matmul_peak(p), c);
}

StepRow step_row(const engine::StepRecord& rec, double begin_ms, double forward_ms,
                 double sample_ms, const Backend::SyncTime& sync, const Cost& work,
                 const Ceilings& c, const Precision& p) {
  StepRow row;
  if (sync.available) {
    row.sync_ms = sync.fork_ms + sync.wait_ms;
    row.sync_fork_ms = sync.fork_ms;
    row.parallel_regions = sync.regions;
    row.offcpu_ms = sync.offcpu_ms;
    row.runq_ms = sync.runq_ms;
  } else {
    row.sync_ms = -1;
    row.parallel_regions = -1;
  }
  row.index = rec.index;
  row.start_ms = begin_ms;
  row.time_ms = rec.end_ms - begin_ms;
  row.schedule_ms = rec.schedule_ms;
  row.forward_ms = forward_ms;
  row.sample_ms = sample_ms;
  row.prefill_tokens = rec.prefill_tokens;
  row.decode_tokens = rec.decode_tokens;
  row.seqs = rec.seqs;
  row.kv_blocks_used = rec.kv_blocks_used;
  row.kv_usage = rec.kv_usage;
  row.preempted = rec.preempted;
  row.flops = work.flops;
  row.bytes = work.bytes();
  if (row.time_ms > 0) {
    const double sec = row.time_ms / 1e3;
    const double peak = c.matmul_peak(p);
    row.mfu = peak > 0 ? work.model_flops / sec / peak : 0;
    row.mbu = c.mem_bw_bytes_per_s > 0 ? work.bytes() / sec / c.mem_bw_bytes_per_s : 0;
  }
  return row;
}

void finish_report(RunReport& r, const Backend& b, double total_ms) {
  double stage_sum = 0;
  for (const auto& st : r.stages) stage_sum += st.time_ms;
  r.setup["unattributed_ms"] = total_ms - stage_sum;
  r.notes.push_back(std::string("times measured with ") + b.clock_name() +
                    "; FLOPs and bytes from the cost model; ceilings " + r.ceilings.source);
  for (const auto& n : b.notes()) r.notes.push_back(n);
  add_physics_checks(r);
}

void open_run_model(const RunOptions& o, RunSetup& s) {
  s.r.created_utc = utc_now();
  s.r.tool = tool_json();
  s.start = Clock::now();
  s.load_before = load_average();
  if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda")
    usage_error("unknown backend '" + o.backend + "'; use auto, cpu or cuda");
  const Precision wanted = precision_for(o.dtype, 4, 2);
  (void)kv_type_for(o.kv_dtype);  // a bad --kv-dtype fails before the model opens
  s.om = open_model(o.model, o.seed);
  s.wtype = weight_type_for(wanted.weights);
  if (const std::string n = file_dtype_note(s.om.file_dtype, s.wtype, o.dtype_implied); !n.empty())
    s.r.notes.push_back(n);
}

BackendOptions run_backend_options(const RunOptions& o) {
  BackendOptions bo;
  bo.kind = o.backend;
  bo.threads = o.threads;
  bo.graphs = o.graphs;
  bo.kv = kv_type_for(o.kv_dtype);
  return bo;
}

void open_run_backend(const RunOptions& o, RunSetup& s) {
  const BackendOptions bo = run_backend_options(o);
  std::string why_not_cuda;
  s.backend = create_backend(bo, &why_not_cuda);
  Backend& b = *s.backend;
  b.set_graph_enabled(o.graphs);
  check_backend_runs(b, s.wtype);
  check_backend_kv(b, bo.kv);
  if (const std::string n = b.matmul_note(s.wtype); !n.empty()) s.r.notes.push_back(n);
  s.dev = b.device();
  if (!why_not_cuda.empty() && o.backend == "auto")
    s.r.notes.push_back("CUDA backend not used: " + why_not_cuda);
  s.threads = s.dev.backend == "cpu"
                  ? (o.threads > 0 ? o.threads : int(std::thread::hardware_concurrency()))
                  : o.threads;
  s.p = backend_precision(o.dtype, b);
  // Ceilings first, before the weights take memory and caches.
  const auto t0 = Clock::now();
  measure_ceilings(b, o, s.threads, s.r);
  s.ceilings_ms = ms_since(t0);
}

void load_run_weights(const RunOptions& o, RunSetup& s, const EngineShape& es) {
  const auto ta0 = Clock::now();
  s.model = std::make_unique<LoadedModel>(s.om.config, s.wtype, *s.backend, es);
  s.alloc_ms = ms_since(ta0);
  const auto tw0 = Clock::now();
  {
    Progress bar("weights", 1000, !o.quiet);
    s.model->load(*s.om.weights,
                  [&](int64_t done, int64_t total) { bar.set(done * 1000 / total); });
    bar.finish();
  }
  s.weights_ms = ms_since(tw0);
  s.fp = LoadedModel::footprint(s.om.config, s.wtype, *s.backend, es);
}

void fill_run_identity(const RunOptions& o, RunSetup& s, const EngineShape& es) {
  RunReport& r = s.r;
  const ModelConfig& cfg = s.om.config;
  RunInfo& ri = r.run;
  ri.model = cfg.name;
  ri.model_source = s.om.source;
  ri.weights = s.om.weights->describe();
  ri.dtype = s.p.name();
  ri.kv_dtype = kv_dtype_name(s.backend->kv_type());
  ri.backend = s.dev.backend;
  ri.device = s.dev.name;
  ri.batch = o.batch;
  ri.threads = s.threads;
  ri.warmup = o.warmup;
  ri.seed = o.seed;
  ri.temperature = o.temperature;
  ri.top_k = o.top_k;
  ri.graphs = s.backend->graph_enabled();
  ri.tokenizer = s.om.tokenizer->name();
  ri.argv = o.argv;
  r.model_config = model_to_json(cfg);
  r.model_config["weight_bytes"] = s.fp.weights;
  r.machine = machine_json(*s.backend);
  r.machine["load_average_1min_before"] = s.load_before;
  // Other work on the CPU cores makes CPU timings (and the host side of GPU timings) unreliable:
  // a parallel region waits for its slowest thread, so a thread that loses its core stalls all.
  if (const unsigned cores = std::thread::hardware_concurrency();
      s.load_before >= 0 && cores > 0 && s.load_before > 0.5 * cores)
    r.checks.push_back({"warning", "machine.load_average_1min_before",
                        "the machine was busy before the run (load average " +
                            fmt_fixed(s.load_before, 2) + " on " + std::to_string(cores) +
                            " cores): other processes compete for the cores, so these times "
                            "are likely slower and noisier than this machine can do"});
  r.setup = {{"ceilings_ms", s.ceilings_ms},
             {"allocate_ms", s.alloc_ms},
             {"weights_ms", s.weights_ms},
             {"weights_source", s.om.weights->describe()},
             {"weights_bytes", s.fp.weights},
             {"weights_bytes_read", s.om.weights->bytes_read()},
             {"weights_bytes_per_s", s.weights_ms > 0 ? s.fp.weights / (s.weights_ms / 1e3) : 0.0},
             {"kv_cache_bytes", s.fp.kv_cache},
             {"activation_bytes", s.fp.activations}};
  r.setup["engine"] = {
      {"kv_block_size", es.block_size},           {"kv_blocks", es.kv_blocks},
      {"kv_cache_bytes", s.fp.kv_cache},          {"max_model_len", es.max_model_len},
      {"max_batched_tokens", es.max_step_tokens}, {"max_seqs", es.max_seqs}};
}

}  // namespace latprof::run_detail
