#pragma once
// The one backend interface. The forward pass (src/runner/forward.cpp) is written once against it;
// the CPU backend (src/backend/cpu/) and the CUDA backend (src/backend/cuda/, a dlopened module)
// implement it. All pointers below are the backend's "device" memory (host memory for the CPU),
// obtained from alloc(). Ops may run asynchronously; synchronize() waits for all of them.
//
// Layouts (row-major):
//   activations: [rows, width] in the backend's activation type (act_bytes() per element);
//   linear weights: [n_out, n_in], fp16 or int8 with one fp32 scale per output row;
//   KV cache of one layer: paged, num_blocks * block_size rows for K and for V of kv_dim elements
//   (kv_bytes() each) and n_kv_heads scales (kv_scale_bytes() each; int8: each kv head's hd
//   values, then their fp32 scale); position p of a sequence lives in row
//   block_table[p / block_size] * block_size + p % block_size.
//
// Work comes as engine steps (src/engine): the tokens of one step, flattened sequence by
// sequence, each with its position, KV slot and sequence (StepDesc). There is no separate
// prefill and decode path in this interface; a backend picks kernels by the step's shape.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace latprof {

// i8a8: stored as i8 (int8, one fp32 scale per output row); the matmul rounds each activation row
// to int8 first (W8A8, `--dtype int8-w8a8`). Backend::supports says where it runs.
enum class WeightType { f16 = 0, i8 = 1, i8a8 = 2 };
inline bool int8_storage(WeightType t) {
  return t != WeightType::f16;
}
// The CLI's name of a weight type: "fp16", "int8", "int8-w8a8".
inline const char* dtype_name(WeightType t) {
  return t == WeightType::f16 ? "fp16" : t == WeightType::i8 ? "int8" : "int8-w8a8";
}

// The KV cache's element type: fp16, bf16 (`--kv-dtype bf16`; CPU backend) or int8
// (`--kv-dtype int8`; CPU backend: each position's slice of a kv head is hd int8 values and their
// fp32 scale).
enum class KvType { f16 = 0, bf16 = 1, i8 = 2 };
// The CLI's name of a KV type: "fp16", "bf16", "int8".
inline const char* kv_dtype_name(KvType t) {
  return t == KvType::f16 ? "fp16" : t == KvType::bf16 ? "bf16" : "int8";
}

struct DeviceWeight {
  void* data = nullptr;
  float* scales = nullptr;  // [n_out] for i8 and i8a8
  WeightType type = WeightType::f16;
  int64_t n_out = 0;
  int64_t n_in = 0;
  // How the backend laid the data out when it wrote it (fill_weight, upload_weight): row-major
  // [n_out, n_in] unless the backend chose otherwise (the CPU backend: INT8 rows interleaved in
  // fours for its decode GEMV, kernels/cpu/kernels.hpp). Only the backend that set it reads it.
  bool interleaved = false;
  size_t data_bytes() const {
    return size_t(n_out) * size_t(n_in) * (type == WeightType::f16 ? 2 : 1);
  }
};

// The paged KV cache of one layer.
struct KvLayer {
  void* k = nullptr;  // [num_blocks * block_size] rows of row_bytes
  void* v = nullptr;
  int64_t num_blocks = 0;
  int64_t block_size = 0;  // positions per block
  int64_t kv_dim = 0;
  int64_t row_bytes = 0;
};

// One engine step on the device (engine::StepBatch uploaded by the runner). The arrays are
// device int32 at addresses that stay the same from step to step, so a captured step (CUDA
// graph) replays with new contents. Kernels may size their launches from n_tokens, n_seqs,
// max_blocks and block_size only; lengths that vary per step are read from the arrays, and
// max_query_len / max_context_len are hints for choosing a kernel (a step captured for replay
// passes 1 and max_blocks * block_size).
struct StepDesc {
  int64_t n_tokens = 0;         // T: rows of the step's activations
  int64_t n_seqs = 0;           // S
  int64_t n_logits = 0;         // rows whose logits are needed
  int64_t max_query_len = 0;    // most tokens of one sequence in this step (1: all decode)
  int64_t max_context_len = 0;  // longest context after this step
  int64_t block_size = 0;
  int64_t max_blocks = 0;                 // row stride of block_tables (fixed for a model)
  const int32_t* tokens = nullptr;        // [T] token ids
  const int32_t* positions = nullptr;     // [T] position of each token in its sequence
  const int32_t* slots = nullptr;         // [T] KV row each token's K and V are written to
  const int32_t* seq_of_token = nullptr;  // [T] sequence of each token, 0..S-1
  const int32_t* query_start = nullptr;   // [S + 1] tokens of sequence s: [qs[s], qs[s + 1])
  const int32_t* context_lens = nullptr;  // [S] positions in the cache after this step
  const int32_t* block_tables = nullptr;  // [S, max_blocks]; -1 past a sequence's blocks
  const int32_t* logits_rows = nullptr;   // [n_logits] rows whose logits are sampled
};

// What seeds the stochastic sampler for one sampled row: the request (stream) and the index of
// the token being sampled in it, so a request samples the same tokens whatever it shares a step
// with.
struct SampleKey {
  int64_t stream = 0;
  int64_t token_index = 0;
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
  // Bytes per position and kv head beside the elements, K and V each (an int8 cache's scale).
  virtual int kv_scale_bytes() const { return 0; }
  // How this backend computes matmuls of weight type t, a sentence for the report ("": nothing
  // to say).
  virtual std::string matmul_note(WeightType t) const {
    (void)t;
    return "";
  }
  // Whether this backend runs matmuls of weight type t; if not, *why says so in a sentence.
  virtual bool supports(WeightType t, std::string* why) const {
    (void)t;
    (void)why;
    return true;
  }
  // The KV cache's element type (BackendOptions::kv), and whether this backend has it: if not,
  // *why says so in a sentence.
  virtual KvType kv_type() const { return KvType::f16; }
  virtual bool supports_kv(KvType t, std::string* why) const {
    if (t == KvType::f16) return true;
    if (why) *why = "this backend keeps its KV cache in fp16 only";
    return false;
  }

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
  // ys[i][rows, ws[i]->n_out] = x · ws[i]ᵀ for weights sharing x (q, k and v; gate and up). A
  // backend may run them as one kernel; by default, one matmul each.
  virtual void matmul_group(std::span<const DeviceWeight* const> ws, const void* x, int64_t rows,
                            std::span<void* const> ys) {
    for (size_t i = 0; i < ws.size(); ++i) matmul(*ws[i], x, rows, ys[i]);
  }
  // q: [T, n_heads*hd], k: [T, n_kv*hd]; row r rotated at st.positions[r]. Frequencies:
  // s.inv_freq(). In place.
  virtual void rope(void* q, void* k, const StepDesc& st, const AttentionShape& s) = 0;
  // Writes k, v [T, kv_dim] to the cache rows st.slots, then attention of each row r of q over
  // its sequence's cache positions [0, st.positions[r]] (the last s.sliding_window of them when
  // it is set), writing out: [T, n_heads*hd]. Causal within a sequence's tokens of the step.
  // Every row is stored before any is read: with prefix caching a sequence may read cache rows
  // that another sequence of the same step writes (engine::Scheduler registers blocks when it
  // plans the step that fills them).
  virtual void attention(const void* q, const void* k, const void* v, KvLayer& kv,
                         const StepDesc& st, const AttentionShape& s, void* out) = 0;
  virtual void swiglu(const void* gate, const void* up, int64_t n, void* out) = 0;
  virtual void add(void* x, const void* y, int64_t n) = 0;
  // Picks the next token of each of n rows of logits [n, vocab]; writes device int32 [n]. keys:
  // host [n], what seeds the stochastic sampler for each row (greedy ignores them).
  virtual void sample(const void* logits, int64_t n, int64_t vocab, const SamplingParams& p,
                      const SampleKey* keys, int32_t* tokens_out) = 0;
  // out[i, :] = x[rows[i], :] for i < n; rows: device int32 [n]; out must not alias x.
  virtual void gather_rows(const void* x, const int32_t* rows, int64_t n, int64_t dim,
                           void* out) = 0;

  // ---- time
  // -------------------------------------------------------------------------------------- Marks a
  // point in the stream after all work issued so far; returns its id.
  virtual int record_event() = 0;
  virtual void synchronize() = 0;
  // Milliseconds between two recorded events; valid after synchronize().
  virtual double elapsed_ms(int from, int to) = 0;
  virtual void reset_events() = 0;
  virtual std::string clock_name() const = 0;  // "steady_clock", "cudaEvent"

  // ---- step graphs ------------------------------------------------------------------------------
  // Runs one step whose work `enqueue` issues. graph_key >= 0 names a step shape that may be
  // captured once and replayed (CUDA graphs; the runner passes the sequence count of a step in
  // which every sequence decodes one token); -1 runs it eagerly. Inside a replay, events recorded
  // by enqueue are not meaningful. The default just calls enqueue().
  virtual void run_step(int64_t graph_key, const std::function<void()>& enqueue) {
    (void)graph_key;
    enqueue();
  }
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

  // The host thread pool's synchronisation since the last call, in wall-equivalent ms (thread
  // time divided by the threads): parallel regions' late starts (fork) and threads' idle time at
  // their barriers after their share (wait). Backends without a host thread pool: unavailable.
  // offcpu_ms: how long the pool's threads were not running on a CPU since the last call
  // (wall-equivalent; the hypervisor's steal, other processes, sleep), runq_ms the part of it
  // waiting for a CPU behind other tasks; -1 where not measured (kernels.hpp: OffCpuStats).
  struct SyncTime {
    bool available = false;
    int64_t regions = 0;
    double fork_ms = 0, wait_ms = 0;
    double offcpu_ms = -1, runq_ms = -1;
  };
  virtual SyncTime take_sync_time() { return {}; }

  // Free-form measurement notes the report carries (e.g. "CUDA graph replay", counters status).
  virtual std::vector<std::string> notes() const { return {}; }
};

struct BackendOptions {
  std::string kind = "auto";  // auto | cpu | cuda
  int threads = 0;            // CPU threads; 0: all cores
  bool graphs = true;         // CUDA graphs for decode
  int device_index = 0;
  KvType kv = KvType::f16;  // the KV cache's element type (a backend without it: supports_kv)
};

// Creates the backend; "auto" picks CUDA when the module loads and a device is present, else the
// CPU. Throws UsageError when an explicitly requested backend is not available (with the reason).
// `why_not_cuda` (optional) receives the reason CUDA was not used under "auto".
std::unique_ptr<Backend> create_backend(const BackendOptions& opt, std::string* why_not_cuda);
// Backends compiled in and devices seen, one line each (for `latprof hw`).
std::vector<std::string> describe_backends();

}  // namespace latprof
