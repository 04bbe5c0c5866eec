// Every CUDA kernel of kernels/cuda, run on the CPU under the emulation (cuemu.hpp), against its
// CPU reference (kernels/cpu, the specification). The cases and tolerances are those of
// tests/gpu/test_gpu_ops.cpp (a few shapes smaller, so that the suite stays within CI's time),
// the kernels are called through their launchers as the CUDA backend calls them, outputs are
// poisoned, and each case runs under three thread schedules with shared-memory races, reads of
// unwritten shared memory and out-of-bounds accesses failing the test.
#include "kernels/cpu/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "core/rng.hpp"
#include "kernels/cuda/kernels.hpp"
#include "support.hpp"

namespace latprof::cuemutest {

namespace {

__half* H(const DevBuf& b) {
  return b.as<__half>();
}
__half* H(const std::unique_ptr<DevBuf>& b) {
  return b->as<__half>();
}

}  // namespace

// ---- synthetic weights: bit-identical ------------------------------------------------------
struct FillCase {
  bool i8;
  int64_t n_out, n_in;
};
class EmuFill : public ::testing::TestWithParam<FillCase> {};

TEST_P(EmuFill, BitIdenticalToCpu) {
  const FillCase c = GetParam();
  const uint64_t key = rng::tensor_key(1234, 7);
  const float amp = 0.037f;
  const size_t n = size_t(c.n_out * c.n_in);
  under_schedules(1, [&] {
    if (!c.i8) {
      DevBuf d(n * 2);
      poison(d);
      cuda::fill_f16(H(d), int64_t(n), key, amp, nullptr);
      std::vector<uint16_t> ref(n);
      cpu::fill_f16(ref.data(), int64_t(n), key, amp);
      EXPECT_EQ(download<uint16_t>(d, n), ref) << "weights differ from the CPU's";
    } else {
      DevBuf d(n), s(size_t(c.n_out) * 4);
      poison(d);
      poison(s);
      cuda::fill_i8(d.as<int8_t>(), s.as<float>(), c.n_out, c.n_in, key, amp, nullptr);
      std::vector<int8_t> ref(n);
      std::vector<float> ref_s(static_cast<size_t>(c.n_out));
      cpu::fill_i8(ref.data(), ref_s.data(), c.n_out, c.n_in, key, amp);
      EXPECT_EQ(download<int8_t>(d, n), ref) << "weights differ from the CPU's";
      const std::vector<float> got_s = download<float>(s, size_t(c.n_out));
      EXPECT_EQ(0, std::memcmp(got_s.data(), ref_s.data(), got_s.size() * 4));
    }
    // fp32 vectors (norm weights): also bit-identical.
    DevBuf f(1001 * 4);
    poison(f);
    cuda::fill_f32(f.as<float>(), 1001, key, 1.0f, 0.1f, nullptr);
    std::vector<float> fr(1001);
    cpu::fill_f32(fr.data(), 1001, key, 1.0f, 0.1f);
    const std::vector<float> fg = download<float>(f, 1001);
    EXPECT_EQ(0, std::memcmp(fg.data(), fr.data(), 1001 * 4));
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmuFill,
                         ::testing::Values(FillCase{false, 1, 1}, FillCase{false, 333, 517},
                                           FillCase{true, 1, 3}, FillCase{true, 257, 1111}),
                         [](const ::testing::TestParamInfo<FillCase>& i) {
                           return std::string(i.param.i8 ? "i8_" : "f16_") +
                                  std::to_string(i.param.n_out) + "x" +
                                  std::to_string(i.param.n_in);
                         });

// ---- embed: exact (a row copy of fp16); tokens outside the vocabulary give 0 -----------------
TEST(EmuOps, EmbedExact) {
  for (int64_t dim : {64, 77}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const int64_t vocab = 101, rows = 9;
    std::vector<float> table = round_f16(random_vector(size_t(vocab * dim), 1, -1, 1));
    std::vector<uint16_t> th = to_half(table);
    std::vector<int32_t> tok = {0, 5, 100, 7, 7, 42, 99, 1, 3};
    auto dt = upload(th);
    auto dtok = upload(tok);
    std::vector<float> ref(static_cast<size_t>(rows * dim));
    cpu::embed(th.data(), tok.data(), rows, dim, ref.data());
    under_schedules(2, [&] {
      DevBuf out(size_t(rows * dim) * 2);
      poison(out);
      cuda::embed(H(dt), vocab, dtok->as<int32_t>(), rows, dim, H(out), nullptr);
      EXPECT_TRUE(all_close(download_act(out, rows * dim), ref, 0, 0));
    });
    // Out-of-range tokens: zero rows (the kernel's contract; the CPU reference assumes valid ids).
    std::vector<int32_t> bad = {-1, 101, 5};
    auto dbad = upload(bad);
    DevBuf out(size_t(3 * dim) * 2);
    poison(out);
    cuda::embed(H(dt), vocab, dbad->as<int32_t>(), 3, dim, H(out), nullptr);
    const std::vector<float> got = download_act(out, 3 * dim);
    for (int64_t i = 0; i < 2 * dim; ++i) ASSERT_EQ(got[size_t(i)], 0.f) << i;
    for (int64_t i = 0; i < dim; ++i)
      ASSERT_EQ(got[size_t(2 * dim + i)], table[size_t(5 * dim + i)]);
    expect_no_faults();
  }
}

// ---- rmsnorm: fp32 statistics, fp16 output -> one fp16 rounding plus slack -------------------
TEST(EmuOps, RmsNorm) {
  for (auto [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{{1, 4096}, {7, 333}, {3, 1}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(dim));
    std::vector<float> x = round_f16(random_vector(size_t(rows * dim), 2, -3, 3));
    std::vector<float> g = random_vector(size_t(dim), 3, 0.5f, 1.5f);
    std::vector<float> ref(x.size());
    cpu::rmsnorm(x.data(), g.data(), rows, dim, 1e-5f, ref.data());
    auto dg = upload(g);
    under_schedules(3, [&] {
      auto dx = upload_act(x);
      DevBuf out(size_t(rows * dim) * 2);
      poison(out);
      cuda::rmsnorm(H(dx), dg->as<float>(), rows, dim, 1e-5f, H(out), nullptr);
      EXPECT_TRUE(all_close(download_act(out, rows * dim), ref, 1e-3, 2e-3));
      // In place (out may alias x).
      cuda::rmsnorm(H(dx), dg->as<float>(), rows, dim, 1e-5f, H(dx), nullptr);
      EXPECT_TRUE(all_close(download_act(*dx, rows * dim), ref, 1e-3, 2e-3)) << "in place";
    });
  }
}

// ---- matmul: GEMV (m <= 8, the vector and scalar paths) and the CUDA-core GEMM ---------------
// Tolerance as on the GPU: atol 3e-3 x rms(ref), rtol 3e-3, normalized error < 2e-3.
struct MatmulCase {
  bool i8;
  int64_t m, n_out, n_in;
};
class EmuMatmul : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(EmuMatmul, MatchesCpu) {
  const MatmulCase c = GetParam();
  const uint64_t key = rng::tensor_key(99, uint64_t(c.m * 7 + c.n_in));
  const float amp = 1.0f / std::sqrt(float(c.n_in));
  std::vector<uint8_t> wh(size_t(c.n_out * c.n_in) * (c.i8 ? 1 : 2));
  std::vector<float> sh(static_cast<size_t>(c.n_out));
  cpu::Weight cw;
  cw.data = wh.data();
  cw.n_out = c.n_out;
  cw.n_in = c.n_in;
  if (!c.i8) {
    cpu::fill_f16(reinterpret_cast<uint16_t*>(wh.data()), c.n_out * c.n_in, key, amp);
    cw.type = cpu::WType::f16;
  } else {
    cpu::fill_i8(reinterpret_cast<int8_t*>(wh.data()), sh.data(), c.n_out, c.n_in, key, amp);
    cw.type = cpu::WType::i8;
    cw.scales = sh.data();
  }
  auto dw = upload(wh);
  auto ds = upload(sh);
  std::vector<float> x = round_f16(random_vector(size_t(c.m * c.n_in), 5, -1, 1));
  auto dx = upload_act(x);
  std::vector<float> ref(static_cast<size_t>(c.m * c.n_out));
  cpu::matmul(cw, x.data(), c.m, ref.data());
  under_schedules(uint64_t(c.n_out), [&] {
    DevBuf dy(size_t(c.m * c.n_out) * 2);
    poison(dy);
    if (c.m <= cuda::kGemvMaxRows) {  // what the CUDA backend runs for decode
      if (c.i8)
        cuda::gemv_i8(dw->as<int8_t>(), ds->as<float>(), H(dx), c.m, c.n_out, c.n_in, H(dy),
                      nullptr);
      else
        cuda::gemv_f16(H(dw), H(dx), c.m, c.n_out, c.n_in, H(dy), nullptr);
    } else {
      // Prefill: cuBLASLt cannot run here; its fallback GEMM can, on fp16 weights (INT8 is
      // dequantized first, as the backend does) and on int8 weights directly.
      if (c.i8) {
        DevBuf deq(size_t(c.n_out * c.n_in) * 2);
        poison(deq);
        cuda::dequantize_i8(dw->as<int8_t>(), ds->as<float>(), c.n_out, c.n_in, H(deq), nullptr);
        cuda::gemm_fallback(deq.get(), nullptr, false, H(dx), c.m, c.n_out, c.n_in, H(dy), nullptr);
        const std::vector<float> via_deq = download_act(dy, c.m * c.n_out);
        EXPECT_TRUE(all_close(via_deq, ref, 3e-3 * rms(ref), 3e-3)) << "dequantize + GEMM";
        poison(dy);
      }
      cuda::gemm_fallback(dw->get(), c.i8 ? ds->as<float>() : nullptr, c.i8, H(dx), c.m, c.n_out,
                          c.n_in, H(dy), nullptr);
    }
    const std::vector<float> got = download_act(dy, c.m * c.n_out);
    EXPECT_TRUE(all_close(got, ref, 3e-3 * rms(ref), 3e-3));
    EXPECT_LT(normalized_error(got, ref), 2e-3);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmuMatmul,
    ::testing::Values(
        // GEMV vector path (n_in % 16 == 0), odd n_out, every m of the dispatch
        MatmulCase{false, 1, 4097, 4096}, MatmulCase{false, 3, 331, 1024},
        MatmulCase{false, 8, 255, 4112}, MatmulCase{true, 1, 4097, 4096},
        MatmulCase{true, 5, 333, 11008}, MatmulCase{true, 8, 17, 512},
        MatmulCase{false, 2, 64, 512}, MatmulCase{false, 4, 33, 256}, MatmulCase{true, 6, 9, 128},
        MatmulCase{true, 7, 31, 160},
        // GEMV scalar path (odd n_in)
        MatmulCase{false, 2, 129, 1001}, MatmulCase{true, 1, 77, 333},
        // prefill through the CUDA-core GEMM (smaller than the GPU's cuBLASLt shapes)
        MatmulCase{false, 9, 513, 771}, MatmulCase{true, 37, 129, 333},
        MatmulCase{false, 40, 100, 64}, MatmulCase{true, 17, 48, 256}),
    [](const ::testing::TestParamInfo<MatmulCase>& i) {
      const MatmulCase& c = i.param;
      return std::string(c.i8 ? "i8" : "f16") + "_m" + std::to_string(c.m) + "_" +
             std::to_string(c.n_out) + "x" + std::to_string(c.n_in);
    });

// ---- dequantize_i8: exact (one fp32 product rounded to fp16) --------------------------------
TEST(EmuOps, DequantizeI8Exact) {
  for (auto [n_out, n_in] : std::vector<std::pair<int64_t, int64_t>>{{33, 64}, {7, 333}}) {
    SCOPED_TRACE(std::to_string(n_out) + "x" + std::to_string(n_in));
    std::vector<int8_t> w(size_t(n_out * n_in));
    std::vector<float> s(static_cast<size_t>(n_out));
    cpu::fill_i8(w.data(), s.data(), n_out, n_in, 77, 0.5f);
    std::vector<float> ref(w.size());
    for (size_t i = 0; i < w.size(); ++i)
      ref[i] = half_to_float(float_to_half(float(w[i]) * s[i / size_t(n_in)]));
    auto dw = upload(w);
    auto ds = upload(s);
    under_schedules(4, [&] {
      DevBuf out(w.size() * 2);
      poison(out);
      cuda::dequantize_i8(dw->as<int8_t>(), ds->as<float>(), n_out, n_in, H(out), nullptr);
      EXPECT_TRUE(all_close(download_act(out, n_out * n_in), ref, 0, 0));
    });
  }
}

// ---- rope: angles in double on both sides; fp16 rounding of the output ----------------------
TEST(EmuOps, Rope) {
  struct C {
    int64_t n_seq, n_new;
    int32_t pos0;
    int heads, kv, hd;
  };
  for (C c : {C{1, 1, 0, 4, 2, 64}, C{2, 17, 5, 8, 2, 128}, C{1, 3, 70000, 4, 4, 96}}) {
    SCOPED_TRACE("hd " + std::to_string(c.hd) + " pos0 " + std::to_string(c.pos0));
    const int64_t rows = c.n_seq * c.n_new;
    const std::vector<float> q0 = round_f16(random_vector(size_t(rows * c.heads * c.hd), 6, -2, 2));
    const std::vector<float> k0 = round_f16(random_vector(size_t(rows * c.kv * c.hd), 7, -2, 2));
    std::vector<float> q = q0, k = k0;
    std::vector<int32_t> pos(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) pos[size_t(r)] = c.pos0 + int32_t(r % c.n_new);
    std::vector<double> inv(size_t(c.hd / 2));
    for (int i = 0; i < c.hd / 2; ++i) inv[size_t(i)] = std::pow(10000.0, -2.0 * i / c.hd);
    cpu::rope(q.data(), k.data(), pos.data(), rows, c.heads, c.kv, c.hd, inv.data());
    auto dp = upload(std::vector<int32_t>{c.pos0});
    under_schedules(5, [&] {
      auto dq = upload_act(q0);
      auto dk = upload_act(k0);
      cuda::rope(H(dq), H(dk), rows, c.n_new, dp->as<int32_t>(), c.heads, c.kv, c.hd, inv.data(),
                 nullptr);
      EXPECT_TRUE(all_close(download_act(*dq, int64_t(q.size())), q, 4e-3, 2e-3));
      EXPECT_TRUE(all_close(download_act(*dk, int64_t(k.size())), k, 4e-3, 2e-3));
    });
  }
}

// ---- attention: kv_store, then prefill tiles or split-context decode, GQA ---------------------
// Outputs are convex combinations of V rows in [-1, 1]: atol 2e-3, rtol 4e-3 (as on the GPU).
struct AttnCase {
  int64_t n_seq, n_new, pos0, ctx_cap;
  int heads, kv, hd;
};
class EmuAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(EmuAttention, MatchesCpu) {
  const AttnCase c = GetParam();
  const int64_t q_dim = int64_t(c.heads) * c.hd, kv_dim = int64_t(c.kv) * c.hd;
  const int64_t rows = c.n_seq * c.n_new;
  std::vector<float> kc = round_f16(random_vector(size_t(c.n_seq * c.ctx_cap * kv_dim), 8, -1, 1));
  std::vector<float> vc = round_f16(random_vector(size_t(c.n_seq * c.ctx_cap * kv_dim), 9, -1, 1));
  const std::vector<uint16_t> kch0 = to_half(kc), vch0 = to_half(vc);
  std::vector<float> q = round_f16(random_vector(size_t(rows * q_dim), 10, -2, 2));
  std::vector<float> k = round_f16(random_vector(size_t(rows * kv_dim), 11, -2, 2));
  std::vector<float> v = round_f16(random_vector(size_t(rows * kv_dim), 12, -1, 1));
  std::vector<uint16_t> kch = kch0, vch = vch0;
  cpu::kv_store(k.data(), v.data(), c.n_seq, c.n_new, c.pos0, c.ctx_cap, kv_dim, kch.data(),
                vch.data());
  std::vector<float> ref(static_cast<size_t>(rows * q_dim));
  cpu::attention(q.data(), kch.data(), vch.data(), c.n_seq, c.n_new, c.pos0, c.ctx_cap, c.heads,
                 c.kv, c.hd, ref.data());
  auto dq = upload_act(q);
  auto dk = upload_act(k);
  auto dv = upload_act(v);
  auto dp = upload(std::vector<int32_t>{int32_t(c.pos0)});
  under_schedules(uint64_t(c.pos0 + c.n_new), [&] {
    auto dkc = upload(kch0);
    auto dvc = upload(vch0);
    DevBuf dout(size_t(rows * q_dim) * 2);
    poison(dout);
    cuda::kv_store(H(dk), H(dv), c.n_seq, c.n_new, dp->as<int32_t>(), c.ctx_cap, kv_dim, H(dkc),
                   H(dvc), nullptr);
    cuda::AttnArgs a;
    a.q = H(dq);
    a.k_cache = H(dkc);
    a.v_cache = H(dvc);
    a.out = H(dout);
    a.pos = dp->as<int32_t>();
    a.n_seq = c.n_seq;
    a.n_new = c.n_new;
    a.ctx_cap = c.ctx_cap;
    a.n_heads = c.heads;
    a.n_kv_heads = c.kv;
    a.hd = c.hd;
    if (c.n_new == 1 && c.heads / c.kv <= 8) {  // the CUDA backend's choice
      DevBuf scratch(
          size_t(cuda::attention_decode_scratch_floats(c.n_seq, c.heads, c.hd, c.ctx_cap)) * 4);
      cuda::attention_decode(a, scratch.as<float>(), nullptr);
    } else {
      cuda::attention_prefill(a, nullptr);
    }
    EXPECT_TRUE(all_close(download_act(dout, rows * q_dim), ref, 2e-3, 4e-3));
    EXPECT_EQ(download<uint16_t>(*dkc, kch.size()), kch) << "K rows not appended to the cache";
    EXPECT_EQ(download<uint16_t>(*dvc, vch.size()), vch) << "V rows not appended to the cache";
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmuAttention,
    ::testing::Values(
        // prefill (tiled kernel): odd lengths, GQA, several head sizes, a chunk after a prefix
        AttnCase{2, 77, 0, 80, 4, 2, 64}, AttnCase{1, 300, 0, 310, 8, 8, 128},
        AttnCase{1, 45, 20, 70, 6, 2, 96}, AttnCase{2, 33, 0, 33, 2, 1, 256},
        AttnCase{1, 2, 1000, 1010, 8, 1, 128}, AttnCase{1, 1, 40, 64, 16, 1, 64},
        // decode (split-context kernel + reduction): short, exactly one split, long, GQA 8
        AttnCase{1, 1, 0, 16, 4, 4, 128}, AttnCase{2, 1, 127, 128, 8, 2, 128},
        AttnCase{1, 1, 3000, 4096, 32, 8, 128}, AttnCase{3, 1, 700, 701, 16, 2, 64},
        AttnCase{1, 1, 200, 300, 6, 2, 80}, AttnCase{1, 1, 300, 400, 8, 1, 256}),
    [](const ::testing::TestParamInfo<AttnCase>& i) {
      const AttnCase& c = i.param;
      return std::string(c.n_new == 1 && c.heads / c.kv <= 8 ? "decode" : "prefill") + "_seq" +
             std::to_string(c.n_seq) + "_new" + std::to_string(c.n_new) + "_pos" +
             std::to_string(c.pos0) + "_h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv) +
             "_d" + std::to_string(c.hd);
    });

// ---- swiglu and add: fp32 math, fp16 output --------------------------------------------------
TEST(EmuOps, SwigluAndAdd) {
  for (int64_t n : {int64_t(1), int64_t(11008), int64_t(12345)}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> g = round_f16(random_vector(size_t(n), 13, -6, 6));
    std::vector<float> u = round_f16(random_vector(size_t(n), 14, -3, 3));
    std::vector<float> ref(static_cast<size_t>(n));
    cpu::swiglu(g.data(), u.data(), n, ref.data());
    std::vector<float> sum = g;
    cpu::add(sum.data(), u.data(), n);
    under_schedules(6, [&] {
      auto dg = upload_act(g);
      auto du = upload_act(u);
      DevBuf out(size_t(n) * 2);
      poison(out);
      cuda::swiglu(H(dg), H(du), n, H(out), nullptr);
      EXPECT_TRUE(all_close(download_act(out, n), ref, 2e-3, 3e-3)) << "swiglu";
      cuda::add(H(dg), H(du), n, nullptr);
      EXPECT_TRUE(all_close(download_act(*dg, n), sum, 1e-6, 4.9e-4)) << "add";
    });
  }
}

// ---- gather_last: exact; aliasing allowed ------------------------------------------------------
TEST(EmuOps, GatherLast) {
  const int64_t n_seq = 3, n_new = 5, dim = 4099;
  std::vector<float> x = round_f16(random_vector(size_t(n_seq * n_new * dim), 15, -1, 1));
  std::vector<float> ref(static_cast<size_t>(n_seq * dim));
  for (int64_t s = 0; s < n_seq; ++s)
    std::memcpy(ref.data() + s * dim, x.data() + ((s + 1) * n_new - 1) * dim, size_t(dim) * 4);
  under_schedules(7, [&] {
    auto dx = upload_act(x);
    DevBuf out(size_t(n_seq * dim) * 2);
    poison(out);
    cuda::gather_last(H(dx), n_seq, n_new, dim, H(out), nullptr);
    EXPECT_TRUE(all_close(download_act(out, n_seq * dim), ref, 0, 0));
    cuda::gather_last(H(dx), n_seq, n_new, dim, H(dx), nullptr);  // in place
    EXPECT_TRUE(all_close(download_act(*dx, n_seq * dim), ref, 0, 0)) << "in place";
  });
}

// ---- argmax: exact, first index on ties, over 1,024 threads ------------------------------------
TEST(EmuOps, SampleArgmax) {
  for (int64_t vocab : {int64_t(1), int64_t(32000), int64_t(50257)}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const int64_t n_seq = 3;
    // Coarse values so fp16 ties are frequent.
    std::vector<float> l = round_f16(random_vector(size_t(n_seq * vocab), 16, -8, 8));
    for (float& x : l) x = std::round(x * 4) / 4;
    auto dl = upload_act(l);
    under_schedules(8, [&] {
      DevBuf dt(size_t(n_seq) * 4);
      poison(dt);
      cuda::argmax(H(dl), n_seq, vocab, dt.as<int32_t>(), nullptr);
      const std::vector<int32_t> got = download<int32_t>(dt, size_t(n_seq));
      for (int64_t s = 0; s < n_seq; ++s)
        EXPECT_EQ(got[size_t(s)], cpu::argmax(l.data() + s * vocab, vocab)) << "seq " << s;
    });
  }
}

// ---- every kernel of kernels/cuda runs under the emulation ----------------------------------
// Each launcher once, on small shapes and on every path of its dispatch; the names of the kernels
// that ran must cover every __global__ function of kernels/cuda/*.cu. A new kernel fails this
// test until a case runs it (here, and with its CPU reference above or in tests/gpu).
TEST(EmuOps, EveryKernelOfKernelsCudaRuns) {
  const auto f16 = [](size_t n) { return upload_act(random_vector(n, 30, -1, 1)); };
  auto w16 = f16(64 * 48), x16 = f16(8 * 64), y16 = f16(8 * 64);
  std::vector<int8_t> w8(64 * 48, 3);
  auto dw8 = upload(w8);
  auto sc = upload(std::vector<float>(64, 0.01f));
  auto g32 = upload(std::vector<float>(64, 1.f));
  auto tok = upload(std::vector<int32_t>{1, 2, 3});
  auto pos = upload(std::vector<int32_t>{5});
  DevBuf out(64 * 64 * 2), f32(64 * 4), i8(64 * 48), toks(12);
  cuda::fill_f16(H(out), 100, 1, 0.1f, nullptr);
  cuda::fill_i8(i8.as<int8_t>(), f32.as<float>(), 4, 12, 1, 0.1f, nullptr);
  cuda::fill_f32(f32.as<float>(), 64, 1, 1.f, 0.1f, nullptr);
  for (int64_t dim : {48, 47}) cuda::embed(H(w16), 64, tok->as<int32_t>(), 3, dim, H(out), nullptr);
  for (int64_t dim : {64, 63})
    cuda::rmsnorm(H(x16), g32->as<float>(), 2, dim, 1e-5f, H(out), nullptr);
  for (int64_t n_in : {48, 47}) {
    cuda::gemv_f16(H(w16), H(x16), 2, 64, n_in, H(out), nullptr);
    cuda::gemv_i8(dw8->as<int8_t>(), sc->as<float>(), H(x16), 2, 64, n_in, H(out), nullptr);
    cuda::dequantize_i8(dw8->as<int8_t>(), sc->as<float>(), 64, n_in, H(out), nullptr);
    cuda::gemm_fallback(w16->get(), nullptr, false, H(x16), 8, 64, n_in, H(out), nullptr);
  }
  {
    std::vector<double> inv(32);
    for (int i = 0; i < 32; ++i) inv[size_t(i)] = std::pow(10000.0, -2.0 * i / 64);
    cuda::rope(H(x16), H(y16), 2, 2, pos->as<int32_t>(), 2, 1, 64, inv.data(), nullptr);
  }
  DevBuf kc(16 * 64 * 2), vc(16 * 64 * 2), scratch(1 << 16);
  cuda::kv_store(H(x16), H(y16), 1, 2, pos->as<int32_t>(), 16, 64, H(kc), H(vc), nullptr);
  cuda::AttnArgs a;
  a.q = H(x16);
  a.k_cache = H(kc);
  a.v_cache = H(vc);
  a.out = H(out);
  a.pos = pos->as<int32_t>();
  a.n_seq = 1;
  a.n_new = 2;
  a.ctx_cap = 16;
  a.n_heads = 2;
  a.n_kv_heads = 1;
  a.hd = 64;
  cuda::attention_prefill(a, nullptr);
  a.n_new = 1;
  cuda::attention_decode(a, scratch.as<float>(), nullptr);
  for (int64_t n : {64, 63}) {
    cuda::swiglu(H(x16), H(y16), n, H(out), nullptr);
    cuda::add(H(out), H(y16), n, nullptr);
  }
  cuda::gather_last(H(x16), 2, 2, 64, H(out), nullptr);
  cuda::argmax(H(x16), 2, 64, toks.as<int32_t>(), nullptr);
  expect_no_faults();

  // The __global__ functions of kernels/cuda/*.cu.
  std::set<std::string> declared;
  const std::regex global(R"(__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\()");
  for (const auto& e : std::filesystem::directory_iterator(CUEMU_KERNELS_DIR)) {
    if (e.path().extension() != ".cu") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    for (std::sregex_iterator it(text.begin(), text.end(), global), end; it != end; ++it)
      declared.insert((*it)[1]);
  }
  EXPECT_GE(declared.size(), 20u) << "the __global__ scan of " << CUEMU_KERNELS_DIR << " is broken";
  const std::vector<std::string> ran = cuemu::launched_kernels();
  for (const std::string& k : declared)
    EXPECT_NE(std::find(ran.begin(), ran.end(), k), ran.end())
        << "kernel " << k << " of kernels/cuda never ran under the emulation: add a case";
}

}  // namespace latprof::cuemutest
