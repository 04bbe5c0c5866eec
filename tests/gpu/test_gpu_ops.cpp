// Every CUDA op against its CPU reference (kernels/cpu, the specification) on random data.
// Inputs are rounded to fp16 before the CPU sees them (that is what the GPU stores), outputs are
// poisoned before each op so an unwritten element fails, and every op declares its tolerance
// next to its table of shapes. Without a device every test is skipped with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"
#include "gpu/gpu_support.hpp"
#include "kernels/cpu/kernels.hpp"

namespace latprof::gputest {

namespace {

std::vector<uint16_t> to_half(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half(v[i]);
  return h;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * double(x);
  return v.empty() ? 0 : std::sqrt(s / double(v.size()));
}

}  // namespace

// ---- synthetic weights: bit-identical
// ------------------------------------------------------------
struct FillCase {
  WeightType type;
  int64_t n_out, n_in;
};
void PrintTo(const FillCase& c, std::ostream* os) {
  *os << (c.type == WeightType::f16 ? "f16 " : "i8 ") << c.n_out << "x" << c.n_in;
}
class GpuFill : public ::testing::TestWithParam<FillCase> {};

TEST_P(GpuFill, BitIdenticalToCpu) {
  LATPROF_REQUIRE_GPU(b);
  const FillCase c = GetParam();
  const uint64_t key = rng::tensor_key(1234, 7);
  const float amp = 0.037f;
  DeviceWeight w;
  w.type = c.type;
  w.n_out = c.n_out;
  w.n_in = c.n_in;
  DevBuf data(b, w.data_bytes()), scales(b, size_t(c.n_out) * 4);
  w.data = data.get();
  w.scales = c.type == WeightType::i8 ? scales.as<float>() : nullptr;
  b->fill_weight(w, key, amp);
  std::vector<uint8_t> got(w.data_bytes()), ref(w.data_bytes());
  b->copy_to_host(got.data(), w.data, got.size());
  if (c.type == WeightType::f16) {
    cpu::fill_f16(reinterpret_cast<uint16_t*>(ref.data()), c.n_out * c.n_in, key, amp);
  } else {
    std::vector<float> ref_scales(static_cast<size_t>(c.n_out)), got_scales(size_t(c.n_out));
    cpu::fill_i8(reinterpret_cast<int8_t*>(ref.data()), ref_scales.data(), c.n_out, c.n_in, key,
                 amp);
    b->copy_to_host(got_scales.data(), w.scales, got_scales.size() * 4);
    EXPECT_EQ(0, std::memcmp(got_scales.data(), ref_scales.data(), got_scales.size() * 4));
  }
  EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), got.size())) << "weights differ from the CPU's";

  // fp32 vectors (norm weights): also bit-identical.
  DevBuf f(b, 1001 * 4);
  b->fill_f32(f.as<float>(), 1001, key, 1.0f, 0.1f);
  std::vector<float> fg(1001), fr(1001);
  b->copy_to_host(fg.data(), f.get(), 1001 * 4);
  cpu::fill_f32(fr.data(), 1001, key, 1.0f, 0.1f);
  EXPECT_EQ(0, std::memcmp(fg.data(), fr.data(), 1001 * 4));
}

std::string type_name(WeightType t) {
  return t == WeightType::f16 ? "f16" : "i8";
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuFill,
                         ::testing::Values(FillCase{WeightType::f16, 1, 1},
                                           FillCase{WeightType::f16, 333, 517},
                                           FillCase{WeightType::i8, 1, 3},
                                           FillCase{WeightType::i8, 257, 1111}),
                         [](const ::testing::TestParamInfo<FillCase>& i) {
                           return type_name(i.param.type) + "_" + std::to_string(i.param.n_out) +
                                  "x" + std::to_string(i.param.n_in);
                         });

// ---- embed: exact (a row copy of fp16)
// ------------------------------------------------------------
TEST(GpuOps, EmbedExact) {
  LATPROF_REQUIRE_GPU(b);
  for (int64_t dim : {64, 77}) {
    const int64_t vocab = 101, rows = 9;
    std::vector<float> table = round_f16(random_vector(size_t(vocab * dim), 1, -1, 1));
    std::vector<uint16_t> th = to_half(table);
    DevBuf t(b, th.size() * 2);
    b->copy_to_device(t.get(), th.data(), th.size() * 2);
    DeviceWeight w;
    w.data = t.get();
    w.n_out = vocab;
    w.n_in = dim;
    std::vector<int32_t> tok = {0, 5, 100, 7, 7, 42, 99, 1, 3};
    DevBuf dt(b, tok.size() * 4), out(b, size_t(rows * dim) * 2);
    b->copy_to_device(dt.get(), tok.data(), tok.size() * 4);
    poison(b, out);
    b->embed(w, dt.as<int32_t>(), rows, out.get());
    std::vector<float> ref(static_cast<size_t>(rows * dim));
    cpu::embed(th.data(), tok.data(), rows, dim, ref.data());
    EXPECT_TRUE(all_close(download_act(b, out.get(), rows * dim), ref, 0, 0)) << "dim " << dim;
  }
}

// ---- rmsnorm: fp32 statistics, fp16 output -> one fp16 rounding (rel 2^-11) plus slack
// --------------
TEST(GpuOps, RmsNorm) {
  LATPROF_REQUIRE_GPU(b);
  for (auto [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{{1, 4096}, {7, 333}, {3, 1}}) {
    std::vector<float> x = round_f16(random_vector(size_t(rows * dim), 2, -3, 3));
    std::vector<float> g = random_vector(size_t(dim), 3, 0.5f, 1.5f);
    auto dx = upload_act(b, x);
    DevBuf dg(b, g.size() * 4), out(b, size_t(rows * dim) * 2);
    b->copy_to_device(dg.get(), g.data(), g.size() * 4);
    poison(b, out);
    b->rmsnorm(dx->get(), dg.as<float>(), rows, dim, 1e-5f, out.get());
    std::vector<float> ref(x.size());
    cpu::rmsnorm(x.data(), g.data(), rows, dim, 1e-5f, ref.data());
    EXPECT_TRUE(all_close(download_act(b, out.get(), rows * dim), ref, 1e-3, 2e-3))
        << rows << "x" << dim;
  }
}

// ---- matmul: GEMV (m <= 8) and cuBLASLt GEMM, fp16 and int8
// --------------------------------------- Tolerance: fp32 accumulation in a different order
// (relative ~1e-6) and one fp16 rounding of the output (relative 4.9e-4): atol 3e-3 x rms(ref)
// catches near-zero outputs, rtol 3e-3.
struct MatmulCase {
  WeightType type;
  int64_t m, n_out, n_in;
};
void PrintTo(const MatmulCase& c, std::ostream* os) {
  *os << (c.type == WeightType::f16 ? "f16" : "i8") << " m=" << c.m << " " << c.n_out << "x"
      << c.n_in;
}
class GpuMatmul : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(GpuMatmul, MatchesCpu) {
  LATPROF_REQUIRE_GPU(b);
  const MatmulCase c = GetParam();
  const uint64_t key = rng::tensor_key(99, uint64_t(c.m * 7 + c.n_in));
  const float amp = 1.0f / std::sqrt(float(c.n_in));
  DeviceWeight w;
  w.type = c.type;
  w.n_out = c.n_out;
  w.n_in = c.n_in;
  std::vector<uint8_t> wh(w.data_bytes());
  std::vector<float> sh(static_cast<size_t>(c.n_out));
  cpu::Weight cw;
  cw.data = wh.data();
  cw.n_out = c.n_out;
  cw.n_in = c.n_in;
  if (c.type == WeightType::f16) {
    cpu::fill_f16(reinterpret_cast<uint16_t*>(wh.data()), c.n_out * c.n_in, key, amp);
    cw.type = cpu::WType::f16;
  } else {
    cpu::fill_i8(reinterpret_cast<int8_t*>(wh.data()), sh.data(), c.n_out, c.n_in, key, amp);
    cw.type = cpu::WType::i8;
    cw.scales = sh.data();
  }
  DevBuf dw(b, wh.size()), ds(b, sh.size() * 4);
  w.data = dw.get();
  w.scales = c.type == WeightType::i8 ? ds.as<float>() : nullptr;
  b->upload_weight(w, wh.data(), sh.data());

  std::vector<float> x = round_f16(random_vector(size_t(c.m * c.n_in), 5, -1, 1));
  auto dx = upload_act(b, x);
  DevBuf dy(b, size_t(c.m * c.n_out) * 2);
  poison(b, dy);
  b->matmul(w, dx->get(), c.m, dy.get());
  std::vector<float> ref(static_cast<size_t>(c.m * c.n_out));
  cpu::matmul(cw, x.data(), c.m, ref.data());
  const std::vector<float> got = download_act(b, dy.get(), c.m * c.n_out);
  EXPECT_TRUE(all_close(got, ref, 3e-3 * rms(ref), 3e-3));
  EXPECT_LT(normalized_error(got, ref), 2e-3);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuMatmul,
    ::testing::Values(
        // GEMV vector path (n_in % 16 == 0), odd n_out, every m of the dispatch
        MatmulCase{WeightType::f16, 1, 4097, 4096}, MatmulCase{WeightType::f16, 3, 331, 1024},
        MatmulCase{WeightType::f16, 8, 255, 4112}, MatmulCase{WeightType::i8, 1, 4097, 4096},
        MatmulCase{WeightType::i8, 5, 333, 11008}, MatmulCase{WeightType::i8, 8, 17, 512},
        // GEMV scalar path (odd n_in)
        MatmulCase{WeightType::f16, 2, 129, 1001}, MatmulCase{WeightType::i8, 1, 77, 333},
        // prefill: cuBLASLt FP16 GEMM; INT8 through dequantize + GEMM; odd shapes
        MatmulCase{WeightType::f16, 500, 1024, 4096}, MatmulCase{WeightType::f16, 500, 333, 1000},
        MatmulCase{WeightType::f16, 9, 513, 771}, MatmulCase{WeightType::i8, 500, 1024, 4096},
        MatmulCase{WeightType::i8, 37, 129, 333}),
    [](const ::testing::TestParamInfo<MatmulCase>& i) {
      const MatmulCase& c = i.param;
      return type_name(c.type) + "_m" + std::to_string(c.m) + "_" + std::to_string(c.n_out) + "x" +
             std::to_string(c.n_in);
    });

// ---- rope: angles in double on both sides; fp16 rounding of the output
// -----------------------------
TEST(GpuOps, Rope) {
  LATPROF_REQUIRE_GPU(b);
  struct C {
    int64_t n_seq, n_new;
    int32_t pos0;
    int heads, kv, hd;
    bool scaled = false;  // a frequency table with rope scaling applied
  };
  for (C c : {C{1, 1, 0, 4, 2, 64}, C{2, 17, 5, 8, 2, 128}, C{1, 3, 70000, 4, 4, 96},
              C{1, 3, 70000, 4, 4, 96, true}}) {
    const int64_t rows = c.n_seq * c.n_new;
    std::vector<float> q = round_f16(random_vector(size_t(rows * c.heads * c.hd), 6, -2, 2));
    std::vector<float> k = round_f16(random_vector(size_t(rows * c.kv * c.hd), 7, -2, 2));
    auto dq = upload_act(b, q);
    auto dk = upload_act(b, k);
    DevBuf dp(b, 4);
    b->copy_to_device(dp.get(), &c.pos0, 4);
    AttentionShape s{c.heads, c.kv, c.hd, 10000.f, {}, 0};
    if (c.scaled) {  // as llama3 scaling: high frequencies kept, low ones divided
      s.rope_inv_freq = s.inv_freq();
      for (size_t i = 0; i < s.rope_inv_freq.size(); ++i)
        s.rope_inv_freq[i] /= i < 10 ? 1.0 : i < 20 ? 3.0 : 8.0;
    }
    b->rope(dq->get(), dk->get(), c.n_seq, c.n_new, dp.as<int32_t>(), s);
    std::vector<int32_t> pos(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) pos[size_t(r)] = c.pos0 + int32_t(r % c.n_new);
    const std::vector<double> inv_freq = s.inv_freq();
    cpu::rope(q.data(), k.data(), pos.data(), rows, c.heads, c.kv, c.hd, inv_freq.data());
    EXPECT_TRUE(all_close(download_act(b, dq->get(), int64_t(q.size())), q, 4e-3, 2e-3));
    EXPECT_TRUE(all_close(download_act(b, dk->get(), int64_t(k.size())), k, 4e-3, 2e-3));
  }
}

// ---- attention: prefill tiles and split-context decode, GQA, long contexts
// ------------------------- Outputs are convex combinations of V rows in [-1, 1]; fp32 softmax on
// both sides; the GPU rounds the output to fp16 (4.9e-4 relative): atol 2e-3, rtol 4e-3.
struct AttnCase {
  int64_t n_seq, n_new, pos0, ctx_cap;
  int heads, kv, hd;
  int64_t window = 0;  // sliding window; 0: none
};
void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << "seq=" << c.n_seq << " new=" << c.n_new << " pos0=" << c.pos0 << " cap=" << c.ctx_cap
      << " heads=" << c.heads << "/" << c.kv << " dim=" << c.hd;
}
class GpuAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(GpuAttention, MatchesCpu) {
  LATPROF_REQUIRE_GPU(b);
  const AttnCase c = GetParam();
  const int64_t q_dim = int64_t(c.heads) * c.hd, kv_dim = int64_t(c.kv) * c.hd;
  const int64_t rows = c.n_seq * c.n_new;
  // Cache holding positions [0, pos0) already, as fp16.
  std::vector<float> kc = round_f16(random_vector(size_t(c.n_seq * c.ctx_cap * kv_dim), 8, -1, 1));
  std::vector<float> vc = round_f16(random_vector(size_t(c.n_seq * c.ctx_cap * kv_dim), 9, -1, 1));
  std::vector<uint16_t> kch = to_half(kc), vch = to_half(vc);
  std::vector<float> q = round_f16(random_vector(size_t(rows * q_dim), 10, -2, 2));
  std::vector<float> k = round_f16(random_vector(size_t(rows * kv_dim), 11, -2, 2));
  std::vector<float> v = round_f16(random_vector(size_t(rows * kv_dim), 12, -1, 1));

  DevBuf dkc(b, kch.size() * 2), dvc(b, vch.size() * 2), dp(b, 4),
      dout(b, size_t(rows * q_dim) * 2);
  b->copy_to_device(dkc.get(), kch.data(), kch.size() * 2);
  b->copy_to_device(dvc.get(), vch.data(), vch.size() * 2);
  const int32_t pos0 = int32_t(c.pos0);
  b->copy_to_device(dp.get(), &pos0, 4);
  auto dq = upload_act(b, q);
  auto dk = upload_act(b, k);
  auto dv = upload_act(b, v);
  poison(b, dout);
  KvLayer kv{dkc.get(), dvc.get(), c.ctx_cap, kv_dim};
  AttentionShape s{c.heads, c.kv, c.hd, 10000.f, {}, c.window};
  b->attention(dq->get(), dk->get(), dv->get(), kv, c.n_seq, c.n_new, dp.as<int32_t>(), s,
               dout.get());

  cpu::kv_store(k.data(), v.data(), c.n_seq, c.n_new, c.pos0, c.ctx_cap, kv_dim, kch.data(),
                vch.data());
  std::vector<float> ref(static_cast<size_t>(rows * q_dim));
  cpu::attention(q.data(), kch.data(), vch.data(), c.n_seq, c.n_new, c.pos0, c.ctx_cap, c.heads,
                 c.kv, c.hd, ref.data(), c.window);
  EXPECT_TRUE(all_close(download_act(b, dout.get(), rows * q_dim), ref, 2e-3, 4e-3));
  // The appended K rows landed in the cache.
  std::vector<uint16_t> kgot(kch.size());
  b->copy_to_host(kgot.data(), dkc.get(), kgot.size() * 2);
  EXPECT_EQ(0, std::memcmp(kgot.data(), kch.data(), kgot.size() * 2));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuAttention,
    ::testing::Values(
        // prefill (tiled kernel): odd lengths, GQA, several head sizes, a chunk after a prefix
        AttnCase{2, 77, 0, 80, 4, 2, 64}, AttnCase{1, 300, 0, 310, 8, 8, 128},
        AttnCase{1, 45, 20, 70, 6, 2, 96}, AttnCase{2, 33, 0, 33, 2, 1, 256},
        AttnCase{1, 2, 1000, 1010, 8, 1, 128},
        // decode (split-context kernel + reduction): short, exactly one split, long, GQA 8
        AttnCase{1, 1, 0, 16, 4, 4, 128}, AttnCase{2, 1, 127, 128, 8, 2, 128},
        AttnCase{1, 1, 3000, 4096, 32, 8, 128}, AttnCase{3, 1, 700, 701, 16, 2, 64},
        AttnCase{1, 1, 200, 300, 6, 2, 80},
        // sliding window (cpu::attention with a window): prefill tiles that start past the
        // window, decode splits before the window skipped, window inside one split
        AttnCase{1, 300, 0, 310, 8, 8, 128, 50}, AttnCase{1, 45, 20, 70, 6, 2, 96, 30},
        AttnCase{1, 1, 3000, 4096, 32, 8, 128, 1000}, AttnCase{2, 1, 127, 128, 8, 2, 128, 64},
        AttnCase{3, 1, 700, 701, 16, 2, 64, 129}, AttnCase{1, 4, 500, 510, 8, 2, 64, 3}),
    [](const ::testing::TestParamInfo<AttnCase>& i) {
      const AttnCase& c = i.param;
      return std::string(c.n_new == 1 ? "decode" : "prefill") + "_seq" + std::to_string(c.n_seq) +
             "_new" + std::to_string(c.n_new) + "_pos" + std::to_string(c.pos0) + "_h" +
             std::to_string(c.heads) + "kv" + std::to_string(c.kv) + "_d" + std::to_string(c.hd) +
             (c.window > 0 ? "_w" + std::to_string(c.window) : "");
    });

// ---- swiglu and add: fp32 math, fp16 output
// ---------------------------------------------------------
TEST(GpuOps, SwigluAndAdd) {
  LATPROF_REQUIRE_GPU(b);
  for (int64_t n : {int64_t(1), int64_t(11008), int64_t(12345)}) {
    std::vector<float> g = round_f16(random_vector(size_t(n), 13, -6, 6));
    std::vector<float> u = round_f16(random_vector(size_t(n), 14, -3, 3));
    auto dg = upload_act(b, g);
    auto du = upload_act(b, u);
    DevBuf out(b, size_t(n) * 2);
    poison(b, out);
    b->swiglu(dg->get(), du->get(), n, out.get());
    std::vector<float> ref(static_cast<size_t>(n));
    cpu::swiglu(g.data(), u.data(), n, ref.data());
    // __expf (2 ulp) and one fp16 rounding.
    EXPECT_TRUE(all_close(download_act(b, out.get(), n), ref, 2e-3, 3e-3)) << "swiglu n " << n;

    b->add(dg->get(), du->get(), n);
    std::vector<float> sum = g;
    cpu::add(sum.data(), u.data(), n);
    // fp32 sum of two fp16 values, rounded once to fp16: exact to half an ulp.
    EXPECT_TRUE(all_close(download_act(b, dg->get(), n), sum, 1e-6, 4.9e-4)) << "add n " << n;
  }
}

// ---- gather_last: exact; aliasing allowed
// --------------------------------------------------------
TEST(GpuOps, GatherLast) {
  LATPROF_REQUIRE_GPU(b);
  const int64_t n_seq = 3, n_new = 5, dim = 4099;
  std::vector<float> x = round_f16(random_vector(size_t(n_seq * n_new * dim), 15, -1, 1));
  std::vector<float> ref(static_cast<size_t>(n_seq * dim));
  for (int64_t s = 0; s < n_seq; ++s)
    std::memcpy(ref.data() + s * dim, x.data() + ((s + 1) * n_new - 1) * dim, size_t(dim) * 4);
  auto dx = upload_act(b, x);
  DevBuf out(b, size_t(n_seq * dim) * 2);
  poison(b, out);
  b->gather_last(dx->get(), n_seq, n_new, dim, out.get());
  EXPECT_TRUE(all_close(download_act(b, out.get(), n_seq * dim), ref, 0, 0));
  b->gather_last(dx->get(), n_seq, n_new, dim, dx->get());  // in place
  EXPECT_TRUE(all_close(download_act(b, dx->get(), n_seq * dim), ref, 0, 0));
}

// ---- sample: greedy is exact (first index on ties); stochastic is the CPU's algorithm
// -------------
TEST(GpuOps, SampleArgmax) {
  LATPROF_REQUIRE_GPU(b);
  for (int64_t vocab : {int64_t(1), int64_t(32000), int64_t(50257)}) {
    const int64_t n_seq = 3;
    // Coarse values so fp16 ties are frequent.
    std::vector<float> l = round_f16(random_vector(size_t(n_seq * vocab), 16, -8, 8));
    for (float& x : l) x = std::round(x * 4) / 4;
    auto dl = upload_act(b, l);
    DevBuf dt(b, size_t(n_seq) * 4);
    b->sample(dl->get(), n_seq, vocab, SamplingParams{}, 0, dt.as<int32_t>());
    std::vector<int32_t> got(static_cast<size_t>(n_seq));
    b->copy_to_host(got.data(), dt.get(), got.size() * 4);
    for (int64_t s = 0; s < n_seq; ++s)
      EXPECT_EQ(got[size_t(s)], cpu::argmax(l.data() + s * vocab, vocab))
          << "vocab " << vocab << " seq " << s;
  }
  // Temperature / top-k copies the logits to the host; the token must be in the top k.
  const int64_t vocab = 1000;
  std::vector<float> l = round_f16(random_vector(size_t(vocab), 17, -4, 4));
  auto dl = upload_act(b, l);
  DevBuf dt(b, 4);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 5;
  p.seed = 3;
  b->sample(dl->get(), 1, vocab, p, 4, dt.as<int32_t>());
  int32_t tok = -1;
  b->copy_to_host(&tok, dt.get(), 4);
  ASSERT_GE(tok, 0);
  int larger = 0;
  for (float x : l) larger += x > l[size_t(tok)];
  EXPECT_LT(larger, 5);
}

// ---- decode steps through run_step: eager, captured, replayed -- all equal the CPU
// ---------------
TEST(GpuOps, DecodeStepGraphReplayMatchesCpu) {
  LATPROF_REQUIRE_GPU(b);
  b->set_graph_enabled(true);
  const int heads = 8, kvh = 2, hd = 128;
  const int64_t ctx_cap = 600, kv_dim = int64_t(kvh) * hd, q_dim = int64_t(heads) * hd;
  std::vector<float> kc = round_f16(random_vector(size_t(ctx_cap * kv_dim), 18, -1, 1));
  std::vector<float> vc = round_f16(random_vector(size_t(ctx_cap * kv_dim), 19, -1, 1));
  std::vector<uint16_t> kch = to_half(kc), vch = to_half(vc);
  DevBuf dkc(b, kch.size() * 2), dvc(b, vch.size() * 2), dp(b, 4), dout(b, size_t(q_dim) * 2);
  b->copy_to_device(dkc.get(), kch.data(), kch.size() * 2);
  b->copy_to_device(dvc.get(), vch.data(), vch.size() * 2);
  std::vector<float> q = round_f16(random_vector(size_t(q_dim), 20, -2, 2));
  std::vector<float> k = round_f16(random_vector(size_t(kv_dim), 21, -2, 2));
  std::vector<float> v = round_f16(random_vector(size_t(kv_dim), 22, -1, 1));
  auto dq = upload_act(b, q);
  auto dk = upload_act(b, k);
  auto dv = upload_act(b, v);
  KvLayer kv{dkc.get(), dvc.get(), ctx_cap, kv_dim};
  AttentionShape s{heads, kvh, hd, 10000.f, {}, 0};
  for (int32_t pos : {100, 229, 230, 599}) {  // eager, captured, replayed, replayed
    b->copy_to_device(dp.get(), &pos, 4);
    const int e0 = b->record_event();
    b->run_step([&] {
      b->attention(dq->get(), dk->get(), dv->get(), kv, 1, 1, dp.as<int32_t>(), s, dout.get());
    });
    const int e1 = b->record_event();
    b->synchronize();
    EXPECT_GE(b->elapsed_ms(e0, e1), 0.0);
    cpu::kv_store(k.data(), v.data(), 1, 1, pos, ctx_cap, kv_dim, kch.data(), vch.data());
    std::vector<float> ref(static_cast<size_t>(q_dim));
    cpu::attention(q.data(), kch.data(), vch.data(), 1, 1, pos, ctx_cap, heads, kvh, hd,
                   ref.data());
    EXPECT_TRUE(all_close(download_act(b, dout.get(), q_dim), ref, 2e-3, 4e-3)) << "pos " << pos;
  }
  EXPECT_TRUE(b->graph_enabled()) << "the step fell back to eager launches";
  b->reset_events();
}

// ---- memory check, profiling hooks, ceilings
// ---------------------------------------------------------
TEST(GpuBackend, AllocBeyondMemoryIsAUsageError) {
  LATPROF_REQUIRE_GPU(b);
  try {
    b->alloc(size_t(1) << 50, "a petabyte");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("need"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("available"), std::string::npos) << e.what();
  }
}

TEST(GpuBackend, TracingAttributesKernelsToRanges) {
  LATPROF_REQUIRE_GPU(b);
  std::string why;
  if (!b->enable_tracing(true, &why)) GTEST_SKIP() << "tracing refused: " << why;
  std::vector<float> x = random_vector(4096, 23, -1, 1);
  auto dx = upload_act(b, x);
  DevBuf dg(b, 4096 * 4);
  b->fill_f32(dg.as<float>(), 4096, 1, 1.f, 0.f);
  b->range_push("test.norm", 4242);
  b->rmsnorm(dx->get(), dg.as<float>(), 1, 4096, 1e-5f, dx->get());
  b->range_pop();
  const std::string js = b->take_profile_json();
  b->enable_tracing(false, nullptr);
  ASSERT_FALSE(js.empty());
  EXPECT_NE(js.find("\"kernel_count\""), std::string::npos) << js.substr(0, 400);
  EXPECT_NE(js.find("4242"), std::string::npos) << "range id missing: " << js.substr(0, 800);
  EXPECT_NE(js.find("rmsnorm"), std::string::npos) << js.substr(0, 800);
}

TEST(GpuBackend, CountersWorkOrSayWhy) {
  LATPROF_REQUIRE_GPU(b);
  std::string why;
  if (!b->enable_counters(true, &why)) {
    EXPECT_FALSE(why.empty());
    GTEST_SKIP() << "counters refused (allowed): " << why;
  }
  std::vector<float> x = random_vector(1 << 20, 24, -1, 1);
  auto dx = upload_act(b, x);
  auto dy = upload_act(b, x);
  b->range_push("test.add", 1);
  b->add(dx->get(), dy->get(), 1 << 20);
  b->range_pop();
  const std::string js = b->take_profile_json();
  b->enable_counters(false, nullptr);
  EXPECT_NE(js.find("dram__bytes_read.sum"), std::string::npos) << js;
  EXPECT_NE(js.find("test.add"), std::string::npos) << js;
}

TEST(GpuBackend, CeilingsAreMeasured) {
  LATPROF_REQUIRE_GPU(b);
  const std::string js = b->measure_ceilings_json();
  EXPECT_NE(js.find("memory_bandwidth_bytes_per_s"), std::string::npos) << js;
  EXPECT_EQ(js.find("memory_bandwidth_error"), std::string::npos) << js;
  EXPECT_EQ(js.find("fp16_error"), std::string::npos) << js;
  std::cout << "[ info ] ceilings: " << js << "\n";
}

}  // namespace latprof::gputest
