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
#include "tests/support/attention_case.hpp"

namespace latprof::cuemutest {

using test::attn_case_name;
using test::AttnCase;
using test::cpu_attention;

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
// Each row at its own position (a ragged step: a decode row, chunks at nonzero starts, a position
// past 65535).
TEST(EmuOps, Rope) {
  struct C {
    std::vector<int32_t> pos;
    int heads, kv, hd;
  };
  std::vector<int32_t> chunk(17);
  for (int i = 0; i < 17; ++i) chunk[size_t(i)] = 5 + i;
  std::vector<int32_t> mixed = {40};  // one decode row, then a chunk at 0, then one at 70000
  for (int i = 0; i < 9; ++i) mixed.push_back(i);
  for (int i = 0; i < 3; ++i) mixed.push_back(70000 + i);
  for (const C& c : {C{{0}, 4, 2, 64}, C{chunk, 8, 2, 128}, C{mixed, 4, 4, 96}}) {
    SCOPED_TRACE("hd " + std::to_string(c.hd) + " rows " + std::to_string(c.pos.size()));
    const int64_t rows = int64_t(c.pos.size());
    const std::vector<float> q0 = round_f16(random_vector(size_t(rows * c.heads * c.hd), 6, -2, 2));
    const std::vector<float> k0 = round_f16(random_vector(size_t(rows * c.kv * c.hd), 7, -2, 2));
    std::vector<float> q = q0, k = k0;
    std::vector<double> inv(size_t(c.hd / 2));
    for (int i = 0; i < c.hd / 2; ++i) inv[size_t(i)] = std::pow(10000.0, -2.0 * i / c.hd);
    cpu::rope(q.data(), k.data(), c.pos.data(), rows, c.heads, c.kv, c.hd, inv.data());
    auto dp = upload(c.pos);
    under_schedules(5, [&] {
      auto dq = upload_act(q0);
      auto dk = upload_act(k0);
      cuda::rope(H(dq), H(dk), dp->as<int32_t>(), rows, c.heads, c.kv, c.hd, inv.data(), nullptr);
      EXPECT_TRUE(all_close(download_act(*dq, int64_t(q.size())), q, 4e-3, 2e-3));
      EXPECT_TRUE(all_close(download_act(*dk, int64_t(k.size())), k, 4e-3, 2e-3));
    });
  }
}

// ---- attention over the paged cache: kv_store_paged, then the tiled or split-context kernel ---
// Cases, start caches and reference from support/attention_case.hpp; ragged steps
// (support/paged_batch.hpp): shuffled block ids, -1 past each sequence's blocks,
// spare blocks poisoned with NaN (a read of a block the sequence does not own fails), decode
// rows next to prefill chunks at nonzero starts, sliding windows, GQA. Reference:
// cpu::kv_store_paged + cpu::attention_paged. Outputs are convex combinations of V rows in
// [-1, 1]: atol 2e-3, rtol 4e-3 (as on the GPU). A step whose sequences all decode one row runs
// the decode kernel (the CUDA backend's choice when the GQA group is at most 8) and the tiled one.
class EmuAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(EmuAttention, MatchesCpu) {
  const AttnCase& c = GetParam();
  const test::AttnInputs in = test::attn_inputs(c);
  const test::PagedBatch& pb = in.pb;
  const int64_t rows = in.rows, q_dim = in.q_dim, kv_dim = in.kv_dim;
  std::vector<uint16_t> kch = in.k_cache, vch = in.v_cache;
  std::vector<float> ref;
  cpu_attention(pb, in.q, in.k, in.v, c.heads, c.kv, c.hd, c.window, kch, vch, ref);
  auto dq = upload_act(in.q);
  auto dk = upload_act(in.k);
  auto dv = upload_act(in.v);
  auto dqs = upload(pb.query_start);
  auto dpos = upload(pb.positions);
  auto dslots = upload(pb.slots);
  auto dtables = upload(pb.block_tables);
  const bool decode = pb.max_query_len == 1;
  under_schedules(uint64_t(rows + c.hd), [&] {
    for (bool use_decode : {false, true}) {
      if (use_decode && !(decode && c.heads / c.kv <= cuda::kDecodeMaxGroup)) continue;
      SCOPED_TRACE(use_decode ? "decode kernel" : "tiled kernel");
      auto dkc = upload(in.k_cache);
      auto dvc = upload(in.v_cache);
      DevBuf dout(size_t(rows * q_dim) * 2);
      poison(dout);
      cuda::kv_store_paged(H(dk), H(dv), dslots->as<int32_t>(), rows, kv_dim, H(dkc), H(dvc),
                           nullptr);
      cuda::AttnArgs a;
      a.q = H(dq);
      a.k_cache = H(dkc);
      a.v_cache = H(dvc);
      a.out = H(dout);
      a.query_start = dqs->as<int32_t>();
      a.positions = dpos->as<int32_t>();
      a.block_tables = dtables->as<int32_t>();
      a.n_tokens = rows;
      a.n_seqs = pb.n_seqs;
      a.max_blocks = pb.max_blocks;
      a.block_size = pb.block_size;
      a.n_heads = c.heads;
      a.n_kv_heads = c.kv;
      a.hd = c.hd;
      a.window = c.window;
      if (use_decode) {
        DevBuf scratch(size_t(cuda::attention_decode_scratch_floats(pb.n_seqs, c.heads, c.hd,
                                                                    a.max_context())) *
                       4);
        cuda::attention_decode(a, scratch.as<float>(), nullptr);
      } else {
        cuda::attention_prefill(a, nullptr);
      }
      EXPECT_TRUE(all_close(download_act(dout, rows * q_dim), ref, 2e-3, 4e-3));
      EXPECT_EQ(download<uint16_t>(*dkc, kch.size()), kch) << "K rows not stored by slot";
      EXPECT_EQ(download<uint16_t>(*dvc, vch.size()), vch) << "V rows not stored by slot";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmuAttention,
    ::testing::Values(
        // mixed steps: a decode row next to prefill chunks from 0 and from nonzero starts
        AttnCase{{{37, 1}, {0, 45}, {20, 19}}, 4, 2, 64, 16},
        AttnCase{{{0, 30}, {61, 1}, {9, 14}}, 6, 2, 96, 4},
        AttnCase{{{100, 1}, {50, 40}}, 8, 2, 128, 16, 30},
        AttnCase{{{0, 33}, {5, 20}}, 2, 1, 256, 16}, AttnCase{{{500, 4}, {3, 2}}, 8, 2, 64, 4, 3},
        // one long prefill (several tiles), with and without a window that tiles start past
        AttnCase{{{0, 100}}, 8, 8, 128, 16}, AttnCase{{{0, 100}}, 4, 2, 64, 16, 20},
        // decode steps (split-context kernel + reduction, and the tiled kernel): short, exactly
        // one split, several splits, GQA 8, head sizes 64..256, block sizes 16 and 4, a grid far
        // past the contexts, windows that skip splits or sit inside one
        AttnCase{{{0, 1}, {127, 1}, {300, 1}}, 8, 1, 128, 16, 0, 512},
        AttnCase{{{200, 1}, {64, 1}}, 16, 2, 64, 4, 100},
        AttnCase{{{1100, 1}}, 16, 4, 128, 16, 600, 2048},
        AttnCase{{{700, 1}, {130, 1}, {5, 1}}, 16, 2, 64, 16, 129},
        AttnCase{{{200, 1}}, 6, 2, 80, 4}, AttnCase{{{300, 1}}, 8, 1, 256, 16},
        // GQA 16: decode rows on the tiled kernel (the backend's choice past a group of 8)
        AttnCase{{{40, 1}, {7, 1}}, 16, 1, 64, 16}),
    attn_case_name);

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

// ---- gather_rows: exact (a row copy), any rows in any order, repeats ---------------------------
TEST(EmuOps, GatherRows) {
  for (int64_t dim : {4099, 64}) {  // the element and the half2 kernel
    SCOPED_TRACE("dim " + std::to_string(dim));
    const int64_t n_rows = 7;
    const std::vector<int32_t> pick = {6, 0, 3, 3, 1};
    const int64_t n = int64_t(pick.size());
    std::vector<float> x = round_f16(random_vector(size_t(n_rows * dim), 15, -1, 1));
    std::vector<float> ref(static_cast<size_t>(n * dim));
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(ref.data() + i * dim, x.data() + pick[size_t(i)] * dim, size_t(dim) * 4);
    auto dx = upload_act(x);
    auto dr = upload(pick);
    under_schedules(7, [&] {
      DevBuf out(size_t(n * dim) * 2);
      poison(out);
      cuda::gather_rows(H(dx), dr->as<int32_t>(), n, dim, H(out), nullptr);
      EXPECT_TRUE(all_close(download_act(out, n * dim), ref, 0, 0));
    });
  }
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
  auto pos = upload(std::vector<int32_t>{5, 6});
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
    cuda::rope(H(x16), H(y16), pos->as<int32_t>(), 2, 2, 1, 64, inv.data(), nullptr);
  }
  // Paged attention: one sequence of 2 rows at positions 5, 6 in blocks {1, 0} of 4 positions.
  DevBuf kc(8 * 64 * 2), vc(8 * 64 * 2), scratch(1 << 16);
  auto qs = upload(std::vector<int32_t>{0, 2});
  auto slots = upload(std::vector<int32_t>{1, 2});
  auto table = upload(std::vector<int32_t>{1, 0});
  cuda::kv_store_paged(H(x16), H(y16), slots->as<int32_t>(), 2, 64, H(kc), H(vc), nullptr);
  cuda::AttnArgs a;
  a.q = H(x16);
  a.k_cache = H(kc);
  a.v_cache = H(vc);
  a.out = H(out);
  a.query_start = qs->as<int32_t>();
  a.positions = pos->as<int32_t>();
  a.block_tables = table->as<int32_t>();
  a.n_tokens = 2;
  a.n_seqs = 1;
  a.max_blocks = 2;
  a.block_size = 4;
  a.n_heads = 2;
  a.n_kv_heads = 1;
  a.hd = 64;
  cuda::attention_prefill(a, nullptr);
  auto qs1 = upload(std::vector<int32_t>{0, 1});  // the decode kernel: one row
  a.query_start = qs1->as<int32_t>();
  a.n_tokens = 1;
  cuda::attention_decode(a, scratch.as<float>(), nullptr);
  for (int64_t n : {64, 63}) {
    cuda::swiglu(H(x16), H(y16), n, H(out), nullptr);
    cuda::add(H(out), H(y16), n, nullptr);
  }
  for (int64_t dim : {64, 63})
    cuda::gather_rows(H(x16), tok->as<int32_t>(), 2, dim, H(out), nullptr);
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
