// The CUDA backend: device memory, kernels/cuda, cuBLASLt, CUDA events and graphs, CUPTI.
//
// Numerics: activations are fp16 (act_bytes 2) with fp32 arithmetic inside every kernel
// (GEMV/GEMM accumulate in fp32, norms and softmax in fp32); the KV cache is fp16; norm weights
// fp32. fp16 activations are what the tensor-core GEMM consumes and halve activation traffic.
//
// Linear layers: m <= 8 rows -> custom W16A16 / W8A16 GEMV (kernels/cuda/gemv.cu); more rows ->
// cuBLASLt FP16 GEMM on tensor cores (CUBLAS_COMPUTE_32F). INT8 prefill dequantises the int8
// weight to fp16 in a scratch buffer and then runs the same FP16 GEMM: W8A16 keeps the INT8
// model's accuracy (activations stay fp16, no per-token activation quantisation), and cuBLASLt has
// no mixed int8-weight x fp16-activation GEMM (A and B types must match). The cost is an extra
// read of the int8 weight and a write + read of its fp16 copy per prefill matmul.
//
// Engine steps: attention over the paged KV cache picks the split-context decode kernel when every
// sequence of the step has one query row (StepDesc::max_query_len == 1) and the tiled kernel
// otherwise. run_step(key >= 0) keeps one CUDA graph per key (the runner's key: the batch size of
// an all-decode step): the first step of a key runs eagerly (lazy module loading, scratch
// buffers, cuBLASLt plans), the second is captured and every later one replays it. The step's
// arrays (positions, slots, block tables, ...) live at fixed device addresses, so one graph
// serves every step of its key. An op that cannot be captured (a host copy, a stochastic sampler,
// an allocation) aborts the capture: graphs are then turned off with a note and the step runs
// eagerly. Growing a scratch buffer, release() and set_graph_enabled() drop every graph (their
// pointers may die); each key is then warmed up and captured again.
#include "backend/cuda/cuda_backend.hpp"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "backend/cuda/activity_trace.hpp"
#include "backend/cuda/ceilings.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/lt_gemm.hpp"
#include "backend/cuda/range_counters.hpp"
// Default visibility for the error types so that the host catches them across the module.
#pragma GCC visibility push(default)
#include "core/error.hpp"
#pragma GCC visibility pop
#include "core/half.hpp"
#include "core/sampling.hpp"
#include "kernels/cuda/kernels.hpp"

namespace latprof::cuda {

namespace {

std::string bytes_text(double b) {
  char buf[64];
  const char* unit = "B";
  double v = b;
  for (const char* u : {"kB", "MB", "GB", "TB"}) {
    if (v < 1000) break;
    v /= 1000;
    unit = u;
  }
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, unit);
  return buf;
}

// Thrown by an op that cannot be recorded into a CUDA graph; run_step falls back to eager.
struct CaptureUnsafe : std::runtime_error {
  using std::runtime_error::runtime_error;
};

nvtxDomainHandle_t nvtx_domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("latprof");
  return d;
}

struct NvtxRange {
  explicit NvtxRange(const char* name) {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;
    nvtxDomainRangePushEx(nvtx_domain(), &a);
  }
  ~NvtxRange() { nvtxDomainRangePop(nvtx_domain()); }
};

// External-correlation id of decode steps in the activity trace (above the runner's ids).
constexpr uint64_t kStepRangeId = uint64_t(1) << 62;

struct StepTraceRange {
  explicit StepTraceRange(bool on) : on_(on) {
    if (!on_) return;
    ActivityTrace::instance().name_range(kStepRangeId, "decode_step");
    ActivityTrace::instance().push(kStepRangeId);
  }
  ~StepTraceRange() {
    if (on_) ActivityTrace::instance().pop();
  }
  StepTraceRange(const StepTraceRange&) = delete;
  StepTraceRange& operator=(const StepTraceRange&) = delete;
  bool on_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& opt) : dev_(opt.device_index), graphs_(opt.graphs) {
    int n = 0;
    LP_CHECK(cudaGetDeviceCount(&n));
    if (dev_ < 0 || dev_ >= n)
      usage_error("CUDA device " + std::to_string(dev_) + " does not exist (" + std::to_string(n) +
                  " device(s))");
    LP_CHECK(cudaSetDevice(dev_));
    LP_CHECK(cudaGetDeviceProperties(&prop_, dev_));
    LP_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    gemm_ = std::make_unique<LtGemm>();
  }

  ~CudaBackend() override {
    counters_.disable();
    if (tracing_) ActivityTrace::instance().disable();
    drop_graphs();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    gemm_.reset();
    if (decode_scratch_) cudaFree(decode_scratch_);
    if (dequant_scratch_) cudaFree(dequant_scratch_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  DeviceInfo device() const override {
    DeviceInfo d;
    d.backend = "cuda";
    d.name = prop_.name;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      d.memory_total_bytes = double(total_b);
      d.memory_available_bytes = double(free_b);
    }
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    std::ostringstream s;
    s << prop_.name << ", compute capability " << prop_.major << "." << prop_.minor << ", "
      << prop_.multiProcessorCount << " SMs, " << bytes_text(double(prop_.totalGlobalMem))
      << ", L2 " << bytes_text(double(prop_.l2CacheSize)) << ", driver " << driver / 1000 << "."
      << (driver % 1000) / 10 << ", runtime " << runtime / 1000 << "." << (runtime % 1000) / 10;
    d.details = s.str();
    return d;
  }
  int act_bytes() const override { return 2; }
  int kv_bytes() const override { return 2; }

  // ---- memory
  // ------------------------------------------------------------------------------------
  void* alloc(size_t bytes, const char* what) override {
    not_capturing("alloc");
    size_t free_b = 0, total_b = 0;
    LP_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (bytes > free_b)
      usage_error(std::string("not enough GPU memory for ") + what + ": need " +
                  bytes_text(double(bytes)) + ", available " + bytes_text(double(free_b)) + " of " +
                  bytes_text(double(total_b)) + " on " + prop_.name +
                  "; use --dtype int8, a smaller model or fewer tokens");
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (e != cudaSuccess) {
      cudaGetLastError();
      usage_error(std::string("cudaMalloc of ") + bytes_text(double(bytes)) + " for " + what +
                  " failed (" + error_text(e) + "; " + bytes_text(double(free_b)) + " were free)");
    }
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    not_capturing("release");
    drop_graphs();  // a graph may point into p
    LP_CHECK(cudaStreamSynchronize(stream_));
    LP_CHECK(cudaFree(p));
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    not_capturing("copy_to_device");
    LP_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    LP_CHECK(cudaStreamSynchronize(stream_));  // src is pageable host memory the caller owns
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    not_capturing("copy_to_host");
    LP_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    LP_CHECK(cudaStreamSynchronize(stream_));
  }
  void activations_to_host(float* dst, const void* src, int64_t n) override {
    host_half_.resize(size_t(std::max<int64_t>(n, 0)));
    copy_to_host(host_half_.data(), src, host_half_.size() * 2);
    for (size_t i = 0; i < host_half_.size(); ++i) dst[i] = half_to_float(host_half_[i]);
  }

  // ---- weights
  // -----------------------------------------------------------------------------------
  void fill_weight(DeviceWeight& w, uint64_t key, float amplitude) override {
    if (w.type == WeightType::f16)
      cuda::fill_f16(static_cast<__half*>(w.data), w.n_out * w.n_in, key, amplitude, stream_);
    else
      cuda::fill_i8(static_cast<int8_t*>(w.data), w.scales, w.n_out, w.n_in, key, amplitude,
                    stream_);
  }
  void fill_f32(float* dst, int64_t n, uint64_t key, float center, float amplitude) override {
    cuda::fill_f32(dst, n, key, center, amplitude, stream_);
  }
  void upload_weight(DeviceWeight& w, const void* host_data, const float* host_scales) override {
    copy_to_device(w.data, host_data, w.data_bytes());
    if (int8_storage(w.type) && host_scales)
      copy_to_device(w.scales, host_scales, size_t(w.n_out) * sizeof(float));
  }

  // ---- operations
  // --------------------------------------------------------------------------------
  void embed(const DeviceWeight& table, const int32_t* tokens, int64_t rows, void* out) override {
    LATPROF_ASSERT(table.type == WeightType::f16, "the embedding table is fp16");
    cuda::embed(static_cast<const __half*>(table.data), table.n_out, tokens, rows, table.n_in,
                static_cast<__half*>(out), stream_);
  }
  void rmsnorm(const void* x, const float* w, int64_t rows, int64_t dim, float eps,
               void* out) override {
    cuda::rmsnorm(static_cast<const __half*>(x), w, rows, dim, eps, static_cast<__half*>(out),
                  stream_);
  }
  void matmul(const DeviceWeight& w, const void* x, int64_t rows, void* y) override {
    const auto* xh = static_cast<const __half*>(x);
    auto* yh = static_cast<__half*>(y);
    if (rows <= 0) return;
    if (rows <= kGemvMaxRows) {
      if (w.type == WeightType::f16)
        gemv_f16(static_cast<const __half*>(w.data), xh, rows, w.n_out, w.n_in, yh, stream_);
      else
        gemv_i8(static_cast<const int8_t*>(w.data), w.scales, xh, rows, w.n_out, w.n_in, yh,
                stream_);
      return;
    }
    const __half* wh = static_cast<const __half*>(w.data);
    if (int8_storage(w.type)) {
      __half* tmp = dequant_scratch(size_t(w.n_out) * size_t(w.n_in));
      dequantize_i8(static_cast<const int8_t*>(w.data), w.scales, w.n_out, w.n_in, tmp, stream_);
      wh = tmp;
    }
    if (!gemm_->gemm_f16(wh, xh, rows, w.n_out, w.n_in, yh, stream_))
      gemm_fallback(wh, nullptr, false, xh, rows, w.n_out, w.n_in, yh, stream_);
  }
  void rope(void* q, void* k, const StepDesc& st, const AttentionShape& s) override {
    const std::vector<double> inv_freq = s.inv_freq();
    cuda::rope(static_cast<__half*>(q), static_cast<__half*>(k), st.positions, st.n_tokens,
               s.n_heads, s.n_kv_heads, s.head_dim, inv_freq.data(), stream_);
  }
  void attention(const void* q, const void* k, const void* v, KvLayer& kv, const StepDesc& st,
                 const AttentionShape& s, void* out) override {
    LATPROF_ASSERT(kv.block_size == st.block_size, "the step's block size is not the cache's");
    kv_store_paged(static_cast<const __half*>(k), static_cast<const __half*>(v), st.slots,
                   st.n_tokens, kv.kv_dim, static_cast<__half*>(kv.k), static_cast<__half*>(kv.v),
                   stream_);
    AttnArgs a;
    a.q = static_cast<const __half*>(q);
    a.k_cache = static_cast<const __half*>(kv.k);
    a.v_cache = static_cast<const __half*>(kv.v);
    a.out = static_cast<__half*>(out);
    a.query_start = st.query_start;
    a.positions = st.positions;
    a.block_tables = st.block_tables;
    a.n_tokens = st.n_tokens;
    a.n_seqs = st.n_seqs;
    a.max_blocks = st.max_blocks;
    a.block_size = st.block_size;
    a.n_heads = s.n_heads;
    a.n_kv_heads = s.n_kv_heads;
    a.hd = s.head_dim;
    a.window = s.sliding_window;
    const int group = s.n_kv_heads > 0 ? s.n_heads / s.n_kv_heads : 0;
    if (st.max_query_len == 1 && group <= kDecodeMaxGroup) {
      float* scratch = decode_scratch(size_t(
          attention_decode_scratch_floats(st.n_seqs, s.n_heads, s.head_dim, a.max_context())));
      attention_decode(a, scratch, stream_);
    } else {
      attention_prefill(a, stream_);
    }
  }
  void swiglu(const void* gate, const void* up, int64_t n, void* out) override {
    cuda::swiglu(static_cast<const __half*>(gate), static_cast<const __half*>(up), n,
                 static_cast<__half*>(out), stream_);
  }
  void add(void* x, const void* y, int64_t n) override {
    cuda::add(static_cast<__half*>(x), static_cast<const __half*>(y), n, stream_);
  }
  void sample(const void* logits, int64_t n, int64_t vocab, const SamplingParams& p,
              const SampleKey* keys, int32_t* tokens_out) override {
    if (n <= 0) return;
    if (p.temperature <= 0.f) {
      argmax(static_cast<const __half*>(logits), n, vocab, tokens_out, stream_);
      return;
    }
    // Temperature / top-k: on the host, the CPU backend's algorithm (reproducible by seed, and
    // per row by its key: the request's stream and the index of the token in it).
    not_capturing("stochastic sampling");
    std::vector<float> row(static_cast<size_t>(n * vocab));
    activations_to_host(row.data(), logits, n * vocab);
    std::vector<int32_t> toks(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      toks[size_t(i)] = sample_top_k(row.data() + i * vocab, vocab, p.temperature, p.top_k, p.seed,
                                     keys[i].token_index, keys[i].stream);
    copy_to_device(tokens_out, toks.data(), toks.size() * sizeof(int32_t));
  }
  void gather_rows(const void* x, const int32_t* rows, int64_t n, int64_t dim, void* out) override {
    cuda::gather_rows(static_cast<const __half*>(x), rows, n, dim, static_cast<__half*>(out),
                      stream_);
  }

  // ---- time
  // --------------------------------------------------------------------------------------
  int record_event() override {
    const size_t id = next_event_++;
    if (id == events_.size()) {
      cudaEvent_t e;
      LP_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
      event_valid_.push_back(0);
    }
    // Inside a capture the event would not be recorded at replay: mark it meaningless.
    event_valid_[id] = capturing_ ? 0 : 1;
    if (!capturing_) LP_CHECK(cudaEventRecord(events_[id], stream_));
    return int(id);
  }
  void synchronize() override {
    not_capturing("synchronize");
    LP_CHECK(cudaStreamSynchronize(stream_));
  }
  // 0 for events recorded during a graph capture (they carry no time).
  double elapsed_ms(int from, int to) override {
    LATPROF_ASSERT(from >= 0 && to >= 0 && size_t(from) < next_event_ && size_t(to) < next_event_,
                   "unknown event id");
    if (!event_valid_[size_t(from)] || !event_valid_[size_t(to)]) return 0.0;
    float ms = 0;
    LP_CHECK(cudaEventElapsedTime(&ms, events_[size_t(from)], events_[size_t(to)]));
    return double(ms);
  }
  void reset_events() override { next_event_ = 0; }
  std::string clock_name() const override { return "cudaEvent"; }

  // ---- graphs
  // ------------------------------------------------------------------------------------
  void run_step(int64_t graph_key, const std::function<void()>& enqueue) override {
    if (counters_.enabled()) {
      // Counter pass: one counter range per step, launched eagerly (its times are never used,
      // and the range must see the kernels).
      counters_.pop();
      counters_.push(std::to_string(counter_ranges_++) +
                     (graph_key >= 0 ? ":decode_step" : ":step"));
      in_step_ = true;
      enqueue();
      in_step_ = false;
      counters_.pop();
      return;
    }
    if (graph_key < 0) {  // eager: the runner's op ranges attribute its kernels
      enqueue();
      return;
    }
    // Kernels of a replayed graph are attributed to this id in the activity trace.
    StepTraceRange trace_range(tracing_);
    if (!graphs_) {
      enqueue();
      return;
    }
    StepGraph& g = graphs_by_key_[graph_key];
    if (g.exec) {
      LP_CHECK(cudaGraphLaunch(g.exec, stream_));
      return;
    }
    if (!g.warmed) {
      enqueue();
      // By name again: a scratch buffer that grew during this step dropped every graph (and
      // this entry); the buffers now fit this key, so its next step is captured.
      graphs_by_key_[graph_key].warmed = true;
      return;
    }
    NvtxRange r("latprof.graph_capture");
    LP_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    std::string failure;
    try {
      enqueue();
    } catch (const CaptureUnsafe& e) {
      failure = e.what();
    } catch (const std::exception& e) {
      failure = std::string("capture failed: ") + e.what();
    }
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (failure.empty() && end != cudaSuccess) failure = "cudaStreamEndCapture: " + error_text(end);
    cudaGraphExec_t exec = nullptr;
    if (failure.empty()) {
      const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
      if (inst != cudaSuccess) failure = "cudaGraphInstantiate: " + error_text(inst);
    }
    if (graph) cudaGraphDestroy(graph);
    if (!failure.empty()) {
      cudaGetLastError();  // clear the sticky-free capture error
      if (exec) cudaGraphExecDestroy(exec);
      drop_graphs();
      graphs_ = false;
      graph_note_ = "CUDA graphs turned off, decode steps launched kernel by kernel: " + failure;
      enqueue();  // the captured work never ran: run the step now
      return;
    }
    graphs_by_key_[graph_key].exec = exec;
    LP_CHECK(cudaGraphLaunch(exec, stream_));
  }
  bool graph_enabled() const override { return graphs_; }
  bool supports(WeightType t, std::string* why) const override {
    if (t != WeightType::i8a8) return true;
    if (why)
      *why = "the CUDA backend has no W8A8 kernels; run --dtype int8-w8a8 with --backend cpu";
    return false;
  }
  void set_graph_enabled(bool on) override {
    drop_graphs();
    graphs_ = on;
  }

  // ---- profiling
  // ---------------------------------------------------------------------------------
  // Tracing: every range is an external-correlation id. Counters: ops outside a decode step are
  // grouped into one counter range from the first op after a step (or the start) until the next
  // step, e.g. [prefill + first sample], [decode_step 1], [sample 1], [decode_step 2], ...; range
  // names are "<index>:<first op name>" and "<index>:decode_step".
  void range_push(const char* name, uint64_t id) override {
    if (tracing_) {
      ActivityTrace::instance().name_range(id, name);
      ActivityTrace::instance().push(id);
    }
    if (counters_.enabled() && !in_step_ && !counters_.range_open())
      counters_.push(std::to_string(counter_ranges_++) + ":" + (name ? name : "ops"));
  }
  void range_pop() override {
    if (tracing_) ActivityTrace::instance().pop();
  }
  bool enable_tracing(bool on, std::string* why) override {
    if (!on) {
      if (tracing_) ActivityTrace::instance().disable();
      tracing_ = false;
      return true;
    }
    tracing_ = ActivityTrace::instance().enable(why);
    return tracing_;
  }
  bool enable_counters(bool on, std::string* why) override {
    if (!on) {
      // Collect now: take_profile_json() after this returns what the pass measured.
      if (counters_.enabled()) {
        LP_CHECK(cudaStreamSynchronize(stream_));
        counters_json_ = counters_.take_json(/*restart=*/false);
      }
      counters_.disable();
      return true;
    }
    LP_CHECK(cudaStreamSynchronize(stream_));
    counters_json_.clear();
    counter_ranges_ = 0;
    const bool ok = counters_.enable(dev_, why);
    counters_note_ = ok ? "hardware counters: CUPTI range profiler (separate pass)"
                        : "hardware counters unavailable: " + counters_.last_error();
    return ok;
  }
  std::string take_profile_json() override {
    using nlohmann::json;
    json j = json::object();
    if (tracing_) {
      const std::string t = ActivityTrace::instance().take_json();
      if (!t.empty()) j["trace"] = json::parse(t);
    }
    if (counters_.enabled()) {
      LP_CHECK(cudaStreamSynchronize(stream_));
      counters_json_ = counters_.take_json();
    }
    if (!counters_json_.empty()) j["counters"] = json::parse(counters_json_);
    counters_json_.clear();
    return j.empty() ? "" : j.dump();
  }
  std::string measure_ceilings_json() override {
    not_capturing("measure_ceilings_json");
    NvtxRange r("latprof.ceilings");
    return cuda::measure_ceilings_json(*gemm_, stream_);
  }

  std::vector<std::string> notes() const override {
    std::vector<std::string> n;
    n.push_back("activations fp16 with fp32 accumulation; KV cache fp16; norm weights fp32");
    if (graphs_)
      n.push_back(
          "decode steps timed as CUDA graph replays (one graph per batch size, captured on its "
          "second step)");
    else if (!graph_note_.empty())
      n.push_back(graph_note_);
    else
      n.push_back("decode steps launched kernel by kernel (--no-graph)");
    n.push_back(
        "decode matmuls: custom W16A16/W8A16 GEMV; prefill: cuBLASLt FP16 GEMM (FP32 "
        "accumulate)");
    n.push_back(
        "INT8 prefill: dequantize to fp16 + FP16 GEMM (W8A16 accuracy; cuBLASLt has no "
        "int8 x fp16 GEMM)");
    if (!counters_note_.empty()) n.push_back(counters_note_);
    return n;
  }

 private:
  void not_capturing(const char* what) {
    if (capturing_) throw CaptureUnsafe(std::string(what) + " cannot be recorded in a CUDA graph");
  }
  // Destroys every captured step graph; each key warms up and is captured again.
  void drop_graphs() {
    for (auto& [key, g] : graphs_by_key_)
      if (g.exec) cudaGraphExecDestroy(g.exec);
    graphs_by_key_.clear();
  }
  // The split-context attention scratch grows (to at least twice its size, so that a batch
  // growing one sequence at a time reallocates rarely); the graphs captured with the old buffer
  // are dropped.
  float* decode_scratch(size_t floats) {
    if (floats > decode_scratch_floats_) {
      not_capturing("growing the attention scratch");
      floats = std::max(floats, 2 * decode_scratch_floats_);
      LP_CHECK(cudaStreamSynchronize(stream_));
      drop_graphs();
      if (decode_scratch_) LP_CHECK(cudaFree(decode_scratch_));
      decode_scratch_ = nullptr;
      LP_CHECK(cudaMalloc(reinterpret_cast<void**>(&decode_scratch_), floats * sizeof(float)));
      decode_scratch_floats_ = floats;
    }
    return decode_scratch_;
  }
  __half* dequant_scratch(size_t elems) {
    if (elems > dequant_scratch_elems_) {
      not_capturing("growing the dequantisation scratch");
      LP_CHECK(cudaStreamSynchronize(stream_));
      drop_graphs();
      if (dequant_scratch_) LP_CHECK(cudaFree(dequant_scratch_));
      dequant_scratch_ = nullptr;
      LP_CHECK(cudaMalloc(reinterpret_cast<void**>(&dequant_scratch_), elems * sizeof(__half)));
      dequant_scratch_elems_ = elems;
    }
    return dequant_scratch_;
  }
  int dev_ = 0;
  cudaDeviceProp prop_{};
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<LtGemm> gemm_;
  std::vector<cudaEvent_t> events_;
  std::vector<char> event_valid_;
  size_t next_event_ = 0;
  bool graphs_ = true;
  bool capturing_ = false;
  // One graph per run_step key; a key seen once is warmed (its next step is captured).
  struct StepGraph {
    bool warmed = false;
    cudaGraphExec_t exec = nullptr;
  };
  std::map<int64_t, StepGraph> graphs_by_key_;
  std::string graph_note_;
  bool tracing_ = false;
  RangeCounters counters_;
  std::string counters_note_;
  std::string counters_json_;  // collected when the counter pass ended
  int counter_ranges_ = 0;
  bool in_step_ = false;
  float* decode_scratch_ = nullptr;
  size_t decode_scratch_floats_ = 0;
  __half* dequant_scratch_ = nullptr;
  size_t dequant_scratch_elems_ = 0;
  std::vector<uint16_t> host_half_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt) {
  return std::make_unique<CudaBackend>(opt);
}

}  // namespace latprof::cuda
