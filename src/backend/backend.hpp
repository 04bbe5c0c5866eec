#pragma once
// The one backend interface. The forward pass (src/runner/forward.cpp) is written once against it;
// the CPU backend (src/backend/cpu/) and the CUDA backend (src/backend/cuda/, a dlopened module)
// implement it. All pointers below are the backend's "device" memory (host memory for the CPU),
// obtained from alloc(). Ops may run asynchronously; synchronize() waits for all of them.
//
// Layouts (row-major):
//   activations: [rows, width] in the backend's activation type (act_bytes() per element);
//   linear weights: [n_out, n_in], fp16 or int8 with one fp32 scale per output row;
//   KV cache of one layer: [n_seq, ctx_cap, kv_dim] in the backend's KV type (kv_bytes()).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace latprof {

enum class WeightType { f16 = 0, i8 = 1 };

struct DeviceWeight {
  void* data = nullptr;
  float* scales = nullptr;  // [n_out] for i8
  WeightType type = WeightType::f16;
  int64_t n_out = 0;
  int64_t n_in = 0;
  size_t data_bytes() const {
    return size_t(n_out) * size_t(n_in) * (type == WeightType::f16 ? 2 : 1);
  }
};

struct KvLayer {
  void* k = nullptr;
  void* v = nullptr;
  int64_t ctx_cap = 0;  // positions per sequence
  int64_t kv_dim = 0;
};

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float rope_theta = 10000.f;
  // Rotary frequencies [head_dim / 2] in radians per position, rope scaling applied
  // (ModelConfig::rope_inv_freq); empty: the unscaled rope_theta^(-2i/head_dim).
  std::vector<double> rope_inv_freq;
  // Sliding-window attention: a query at position p sees keys [p - W + 1, p]; 0: all of [0, p].
  int64_t sliding_window = 0;

  // rope_inv_freq, or the unscaled frequencies when it is empty.
  std::vector<double> inv_freq() const {
    if (!rope_inv_freq.empty()) return rope_inv_freq;
    std::vector<double> f(static_cast<size_t>(head_dim / 2));
    for (int i = 0; i < head_dim / 2; ++i)
      f[size_t(i)] = std::pow(double(rope_theta), -2.0 * double(i) / double(head_dim));
    return f;
  }
};

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy (argmax)
  int top_k = 0;            // 0: whole vocabulary
  uint64_t seed = 0;
};

struct DeviceInfo {
  std::string backend;  // "cpu", "cuda"
  std::string name;     // e.g. "Intel(R) Xeon(R) Processor", "NVIDIA H200"
  double memory_total_bytes = 0;
  double memory_available_bytes = 0;
  std::string details;  // ISA, compute capability, driver, ...
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceInfo device() const = 0;
  virtual int act_bytes() const = 0;  // bytes per activation element
  virtual int kv_bytes() const = 0;   // bytes per KV-cache element

  // ---- memory --------------------------------------------------------------------------------
  // Throws UsageError with the bytes needed and available when it cannot allocate.
  virtual void* alloc(size_t bytes, const char* what) = 0;
  virtual void release(void* p) = 0;
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  // Activations <-> host fp32 (for tests and logits inspection).
  virtual void activations_to_host(float* dst, const void* src, int64_t n) = 0;

  // ---- synthetic weights (deterministic from the key, see src/core/rng.hpp) ------------------
  virtual void fill_weight(DeviceWeight& w, uint64_t key, float amplitude) = 0;
  virtual void fill_f32(float* dst, int64_t n, uint64_t key, float center, float amplitude) = 0;
  // Upload a host fp16 weight (real checkpoints); i8 weights upload data and scales.
  virtual void upload_weight(DeviceWeight& w, const void* host_data, const float* host_scales) = 0;

  // ---- operations ------------------------------------------------------------------------------
  // tokens: device int32 [rows]; table: fp16 [vocab, dim]
  virtual void embed(const DeviceWeight& table, const int32_t* tokens, int64_t rows, void* out) = 0;
  virtual void rmsnorm(const void* x, const float* w, int64_t rows, int64_t dim, float eps,
                       void* out) = 0;
  // y[rows, n_out] = x[rows, n_in] · Wᵀ
  virtual void matmul(const DeviceWeight& w, const void* x, int64_t rows, void* y) = 0;
  // q: [n_seq*n_new, n_heads*hd], k: [n_seq*n_new, n_kv*hd]; pos: device int32 scalar holding the
  // position of the first new token (the same for every sequence). Frequencies: s.inv_freq().
  virtual void rope(void* q, void* k, int64_t n_seq, int64_t n_new, const int32_t* pos,
                    const AttentionShape& s) = 0;
  // Appends k, v to the cache at positions pos..pos+n_new-1, then causal attention of q over the
  // cache (within s.sliding_window keys when it is set), writing out: [n_seq*n_new, n_heads*hd].
  virtual void attention(const void* q, const void* k, const void* v, KvLayer& kv, int64_t n_seq,
                         int64_t n_new, const int32_t* pos, const AttentionShape& s, void* out) = 0;
  virtual void swiglu(const void* gate, const void* up, int64_t n, void* out) = 0;
  virtual void add(void* x, const void* y, int64_t n) = 0;
  // Picks the next token of each sequence from logits [n_seq, vocab]; writes device int32 [n_seq].
  // step: the index of the token being sampled (seeds the stochastic sampler).
  virtual void sample(const void* logits, int64_t n_seq, int64_t vocab, const SamplingParams& p,
                      int64_t step, int32_t* tokens_out) = 0;
  // Gathers rows (last token of each sequence) from x [n_seq*n_new, dim] into out [n_seq, dim].
  virtual void gather_last(const void* x, int64_t n_seq, int64_t n_new, int64_t dim, void* out) = 0;

  // ---- time
  // -------------------------------------------------------------------------------------- Marks a
  // point in the stream after all work issued so far; returns its id.
  virtual int record_event() = 0;
  virtual void synchronize() = 0;
  // Milliseconds between two recorded events; valid after synchronize().
  virtual double elapsed_ms(int from, int to) = 0;
  virtual void reset_events() = 0;
  virtual std::string clock_name() const = 0;  // "steady_clock", "cudaEvent"

  // ---- decode-step graphs
  // ------------------------------------------------------------------------ Runs one decode step
  // whose work `enqueue` issues. A backend may capture it once and replay it (CUDA graphs); then
  // events recorded inside are not meaningful and supports_op_events_in_step() says so. The default
  // just calls enqueue().
  virtual void run_step(const std::function<void()>& enqueue) { enqueue(); }
  virtual bool graph_enabled() const { return false; }
  virtual void set_graph_enabled(bool) {}

  // ---- profiling hooks -------------------------------------------------------------------------
  // The runner's stage and op scopes call these around the work they issue (after opening the
  // NVTX range of the same name), e.g. for CUPTI external correlation. id: a stable number for
  // (stage, op). Default: nothing.
  virtual void range_push(const char* name, uint64_t id) {
    (void)name;
    (void)id;
  }
  virtual void range_pop() {}
  // Activity tracing (kernel timeline) during the timed passes; counters during a separate pass
  // whose times are never used. Each returns false and sets `why` when unavailable.
  virtual bool enable_tracing(bool on, std::string* why) {
    if (why) *why = "the " + device().backend + " backend has no activity tracing";
    (void)on;
    return false;
  }
  virtual bool enable_counters(bool on, std::string* why) {
    if (why) *why = "the " + device().backend + " backend has no hardware counters";
    (void)on;
    return false;
  }
  // What tracing/counters collected since they were enabled, as a JSON object text (kernels,
  // copies, busy time, gaps, per-range DRAM bytes ...); "" when nothing.
  virtual std::string take_profile_json() { return ""; }
  // Measured ceilings of the device (copy bandwidth, GEMM rate) as a JSON object text; "" when the
  // host probe applies (CPU).
  virtual std::string measure_ceilings_json() { return ""; }

  // Free-form measurement notes the report carries (e.g. "CUDA graph replay", counters status).
  virtual std::vector<std::string> notes() const { return {}; }
};

struct BackendOptions {
  std::string kind = "auto";  // auto | cpu | cuda
  int threads = 0;            // CPU threads; 0: all cores
  bool graphs = true;         // CUDA graphs for decode
  int device_index = 0;
};

// Creates the backend; "auto" picks CUDA when the module loads and a device is present, else the
// CPU. Throws UsageError when an explicitly requested backend is not available (with the reason).
// `why_not_cuda` (optional) receives the reason CUDA was not used under "auto".
std::unique_ptr<Backend> create_backend(const BackendOptions& opt, std::string* why_not_cuda);
// Backends compiled in and devices seen, one line each (for `latprof hw`).
std::vector<std::string> describe_backends();

}  // namespace latprof
