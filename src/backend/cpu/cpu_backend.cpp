// The CPU backend: host memory, kernels/cpu, std::chrono::steady_clock for time (CPU ops are
// synchronous, so a time stamp after an op is a valid event).
#include "backend/cpu/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "backend/cpu/host_arena.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/host.hpp"
#include "core/sampling.hpp"
#include "kernels/cpu/kernels.hpp"

namespace latprof {

namespace {

cpu::Weight as_cpu(const DeviceWeight& w) {
  cpu::Weight c;
  c.data = w.data;
  c.scales = w.scales;
  c.type = w.type == WeightType::f16  ? cpu::WType::f16
           : w.type == WeightType::i8 ? cpu::WType::i8
                                      : cpu::WType::i8a8;
  c.n_out = w.n_out;
  c.n_in = w.n_in;
  c.rows4 = w.interleaved;
  return c;
}

// Whether INT8 weight data is kept with its rows interleaved in fours: W8A16 where the decode GEMV
// reads that layout (AVX512-VNNI; why: kernels/cpu/kernels.hpp), the shape fits and the CPU runs
// it faster (StreamTuning::i8_rows4: not on Intel, where row-major ran as fast at 1-3 activation
// rows and faster at 4-8), else row-major. W8A8 weights stay row-major: interleaved, its GEMV was
// faster at one activation row (0.91 / 0.98 of the FP16 stream against 0.84 / 0.89) but slower at 2
// and 8 rows (0.63-0.70 against 0.77-0.87, 0.25 against 0.35; reports/cpu-kernels.md). The data is
// written straight into the layout (no pass over it afterwards).
bool rows4_layout(const DeviceWeight& w) {
  return w.type == WeightType::i8 && cpu::gemv_int8_dot() && cpu::stream_tuning().i8_rows4 &&
         cpu::rows4_fits(w.n_out, w.n_in);
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& opt) : kv_(opt.kv) {
    check_threads(opt.threads, "--threads");
    threads_ = opt.threads > 0 ? opt.threads : int(std::thread::hardware_concurrency());
    if (threads_ <= 0) threads_ = 1;
    omp_set_num_threads(threads_);
  }

  std::string matmul_note(WeightType t) const override {
    const std::string rows = std::to_string(cpu::gemv_max_rows());
    if (t == WeightType::f16)
      return "fp16 on the CPU: each matmul multiplies the FP16 weights by its activations rounded "
             "to FP16 (to nearest even; a row with an element beyond +-65504 is left as is), "
             "products summed in FP32, as GPU FP16 matmuls and llama.cpp's F16 path do" +
             (cpu::amx_f16_active()
                  ? "; steps of more than " + rows +
                        " rows on the AMX-BF16 tiles, each fp16 value split exactly into two bf16 "
                        "(four tile products, the same products), judged against a quarter of "
                        "the AMX BF16 peak"
                  : std::string());
    const bool dot = cpu::gemv_int8_dot();
    // Where the GEMM runs on the AMX tiles, steps past the GEMV's rows take them (and their roof).
    const bool amx = cpu::amx_int8_active();
    if (t == WeightType::i8)
      return dot ? "int8 (W8A16) on the CPU: every matmul multiplies the int8 weights by "
                   "activations rounded to int16, one scale per row, in int32 sums (AVX512-VNNI "
                   "vpdpwssd" +
                       (amx ? "; steps of more than " + rows +
                                  " rows on the AMX tiles, each int16 as its high and low bytes, "
                                  "two tile products), judged against half the AMX INT8 peak"
                            : std::string("), judged against the int16 dot-product peak"))
             : cpu::active_isa() == cpu::Isa::avx2
                 ? "int8 (W8A16) on the CPU: steps of up to " + rows +
                       " rows multiply the int8 weights by activations rounded to int16, one scale "
                       "per row, in int32 sums (AVX2 vpmaddwd); larger steps (prefill) dequantise "
                       "the weights to FP32"
                 : "int8 (W8A16) on the CPU: weights dequantised to FP32 in every matmul";
    return dot ? "int8-w8a8 on the CPU: steps of up to " + rows +
                     " rows multiply int8 weights by int8 activations (AVX512-VNNI vpdpbusd), "
                     "larger steps (prefill) " +
                     (amx ? "on the AMX tiles (tdpbssd)"
                          : "the same int8 values held as int16 (vpdpwssd)") +
                     ", all in exact int32 sums, judged against the " +
                     (amx ? "AMX INT8 peak" : "INT8 roof")
               : "int8-w8a8 on the CPU: no AVX512-VNNI here, so every matmul multiplies the "
                 "int8-rounded activations in FP32 FMAs, judged against the INT8 roof all the same";
  }

  DeviceInfo device() const override {
    DeviceInfo d;
    d.backend = "cpu";
    d.name = host_cpu_name();
    d.memory_total_bytes = host_memory_total_bytes();
    d.memory_available_bytes = host_memory_available_bytes();
    std::ostringstream s;
    s << d.name << ", " << threads_ << " thread(s) of " << std::thread::hardware_concurrency()
      << ", kernels " << cpu::isa_name(cpu::active_isa())
      << (cpu::has_vnni() ? " (VNNI present)" : "")
      << (cpu::amx_int8_active() && cpu::amx_f16_active()
              ? " (AMX-INT8 and AMX-BF16 tiles for the INT8 and FP16 GEMMs"
          : cpu::amx_int8_active() ? " (AMX-INT8 tiles for the INT8 GEMM"
          : cpu::amx_f16_active()  ? " (AMX-BF16 tiles for the FP16 GEMM"
                                   : "")
      // An fp16 cache's prefill attention runs on the AMX-BF16 tiles too (head sizes that are
      // multiples of 32: kernels/cpu/attention_amx_bf16_avx512.cpp).
      << (cpu::amx_f16_active() && cpu_kv() == cpu::KvType::f16 ? " and the prefill attention" : "")
      << (cpu::amx_int8_active() || cpu::amx_f16_active() ? ")" : "");
    d.details = s.str();
    return d;
  }
  int act_bytes() const override { return 4; }
  // The kernels' slice of hd elements is kv_slice_bytes(kv, hd): hd x kv_bytes() +
  // kv_scale_bytes().
  int kv_bytes() const override {
    return int(cpu::kv_slice_bytes(cpu_kv(), 1) - cpu::kv_slice_bytes(cpu_kv(), 0));
  }
  int kv_scale_bytes() const override { return int(cpu::kv_slice_bytes(cpu_kv(), 0)); }
  KvType kv_type() const override { return kv_; }
  bool supports_kv(KvType, std::string*) const override { return true; }

  void* alloc(size_t bytes, const char* what) override {
    const double avail = host_memory_available_bytes();
    if (avail > 0 && double(bytes) > avail)
      usage_error(std::string("not enough memory for ") + what + ": need " + fmt_bytes(bytes) +
                  ", available " + fmt_bytes(avail) +
                  "; use a smaller model, --dtype int8, or fewer tokens");
    // Large and mid-sized buffers on transparent huge pages (host_arena.hpp): fewer page faults
    // while the weights are written, fewer TLB misses and no prefetch stopping every 4 KiB while
    // decode streams them.
    void* p = arena_.allocate(bytes);
    if (!p)
      usage_error(std::string("allocation of ") + fmt_bytes(bytes) + " for " + what +
                  " failed (available " + fmt_bytes(avail) + ")");
    return p;
  }
  void release(void* p) override { arena_.release(p); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void activations_to_host(float* dst, const void* src, int64_t n) override {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
  }

  void fill_weight(DeviceWeight& w, uint64_t key, float amplitude) override {
    if (w.type == WeightType::f16)
      cpu::fill_f16(static_cast<uint16_t*>(w.data), w.n_out * w.n_in, key, amplitude);
    else {
      w.interleaved = rows4_layout(w);
      cpu::fill_i8(static_cast<int8_t*>(w.data), w.scales, w.n_out, w.n_in, key, amplitude,
                   w.interleaved);
    }
  }
  void fill_f32(float* dst, int64_t n, uint64_t key, float center, float amplitude) override {
    cpu::fill_f32(dst, n, key, center, amplitude);
  }
  void upload_weight(DeviceWeight& w, const void* host_data, const float* host_scales) override {
    w.interleaved = rows4_layout(w);
    if (w.interleaved)
      cpu::pack_rows4(static_cast<const int8_t*>(host_data), static_cast<int8_t*>(w.data), w.n_out,
                      w.n_in);
    else
      std::memcpy(w.data, host_data, w.data_bytes());
    if (int8_storage(w.type) && host_scales)
      std::memcpy(w.scales, host_scales, size_t(w.n_out) * sizeof(float));
  }

  void embed(const DeviceWeight& table, const int32_t* tokens, int64_t rows, void* out) override {
    cpu::embed(static_cast<const uint16_t*>(table.data), tokens, rows, table.n_in,
               static_cast<float*>(out));
  }
  void rmsnorm(const void* x, const float* w, int64_t rows, int64_t dim, float eps,
               void* out) override {
    cpu::rmsnorm(static_cast<const float*>(x), w, rows, dim, eps, static_cast<float*>(out));
  }
  SyncTime take_sync_time() override {
    const cpu::SyncStats s = cpu::take_sync_stats();
    SyncTime t;
    t.available = true;
    t.regions = s.regions;
    t.fork_ms = s.fork_ns * 1e-6;  // already wall-equivalent (per region, over its team)
    t.wait_ms = s.wait_ns * 1e-6;
    if (const cpu::OffCpuStats o = cpu::take_offcpu_stats(); o.available) {
      t.offcpu_ms = o.offcpu_ns * 1e-6;
      t.runq_ms = o.runq_ns * 1e-6;
    }
    return t;
  }
  void matmul(const DeviceWeight& w, const void* x, int64_t rows, void* y) override {
    cpu::matmul(as_cpu(w), static_cast<const float*>(x), rows, static_cast<float*>(y));
  }
  void matmul_group(std::span<const DeviceWeight* const> ws, const void* x, int64_t rows,
                    std::span<void* const> ys) override {
    constexpr size_t kMax = cpu::kMatmulGroupMax;
    for (size_t j = 0; j < ws.size(); j += kMax) {
      const size_t n = std::min(kMax, ws.size() - j);
      cpu::Weight cw[kMax];
      float* cy[kMax];
      for (size_t i = 0; i < n; ++i) {
        cw[i] = as_cpu(*ws[j + i]);
        cy[i] = static_cast<float*>(ys[j + i]);
      }
      cpu::matmul_group(cw, int(n), static_cast<const float*>(x), rows, cy);
    }
  }
  void rope(void* q, void* k, const StepDesc& st, const AttentionShape& s) override {
    // The model's frequencies as they are (no copy a call), or the unscaled ones.
    std::vector<double> unscaled;
    if (s.rope_inv_freq.empty()) unscaled = s.inv_freq();
    const double* inv_freq = s.rope_inv_freq.empty() ? unscaled.data() : s.rope_inv_freq.data();
    cpu::rope(static_cast<float*>(q), static_cast<float*>(k), st.positions, st.n_tokens, s.n_heads,
              s.n_kv_heads, s.head_dim, inv_freq);
  }
  void attention(const void* q, const void* k, const void* v, KvLayer& kv, const StepDesc& st,
                 const AttentionShape& s, void* out) override {
    // fp16 K in 16-position tiles where the blocks hold whole tiles (kernels.hpp's KLayout).
    const cpu::KLayout kl = cpu::k_layout_for(cpu_kv(), st.block_size);
    cpu::kv_store_paged(static_cast<const float*>(k), static_cast<const float*>(v), st.n_tokens,
                        st.slots, s.n_kv_heads, s.head_dim, cpu_kv(), kv.k, kv.v, kl);
    const cpu::RaggedBatch rb{st.n_seqs,       st.query_start, st.positions,
                              st.block_tables, st.max_blocks,  st.block_size};
    cpu::attention_paged(static_cast<const float*>(q), cpu_kv(), kv.k, kv.v, rb, s.n_heads,
                         s.n_kv_heads, s.head_dim, s.sliding_window, static_cast<float*>(out), kl);
  }
  void swiglu(const void* gate, const void* up, int64_t n, void* out) override {
    cpu::swiglu(static_cast<const float*>(gate), static_cast<const float*>(up), n,
                static_cast<float*>(out));
  }
  void add(void* x, const void* y, int64_t n) override {
    cpu::add(static_cast<float*>(x), static_cast<const float*>(y), n);
  }
  void gather_rows(const void* x, const int32_t* rows, int64_t n, int64_t dim, void* out) override {
    const float* src = static_cast<const float*>(x);
    float* dst = static_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + i * dim, src + int64_t(rows[i]) * dim, size_t(dim) * sizeof(float));
  }
  void sample(const void* logits, int64_t n, int64_t vocab, const SamplingParams& p,
              const SampleKey* keys, int32_t* tokens_out) override {
    const float* l = static_cast<const float*>(logits);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = l + i * vocab;
      tokens_out[i] = p.temperature <= 0.f
                          ? cpu::argmax(row, vocab)
                          : sample_top_k(row, vocab, p.temperature, p.top_k, p.seed,
                                         keys[i].token_index, keys[i].stream);
    }
  }

  int record_event() override {
    events_.push_back(std::chrono::steady_clock::now());
    return int(events_.size()) - 1;
  }
  void synchronize() override {}
  double elapsed_ms(int from, int to) override {
    return std::chrono::duration<double, std::milli>(events_.at(size_t(to)) -
                                                     events_.at(size_t(from)))
        .count();
  }
  void reset_events() override { events_.clear(); }
  std::string clock_name() const override { return "steady_clock"; }

 private:
  cpu::KvType cpu_kv() const {
    return kv_ == KvType::bf16 ? cpu::KvType::bf16
           : kv_ == KvType::i8 ? cpu::KvType::i8
                               : cpu::KvType::f16;
  }

  KvType kv_ = KvType::f16;
  int threads_ = 1;
  std::vector<std::chrono::steady_clock::time_point> events_;
  HostArena arena_;  // every buffer alloc() hands out
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(opt);
}

}  // namespace latprof
