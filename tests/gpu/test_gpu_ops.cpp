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
#include "core/sampling.hpp"
#include "gpu/gpu_support.hpp"
#include "kernels/cpu/kernels.hpp"
#include "support/attention_case.hpp"

namespace latprof::gputest {

using test::attn_case_name;
using test::AttnCase;
using test::cpu_attention;

namespace {

// An engine step's int32 arrays on the device at fixed addresses (as the runner's step buffer),
// for up to cap_tokens rows and cap_seqs sequences of max_blocks blocks; set() writes a step
// into them and returns its StepDesc.
class DeviceStep {
 public:
  DeviceStep(Backend* b, int64_t cap_tokens, int64_t cap_seqs, int64_t max_blocks)
      : b_(b),
        cap_tokens_(cap_tokens),
        cap_seqs_(cap_seqs),
        max_blocks_(max_blocks),
        positions_(b, size_t(cap_tokens) * 4),
        slots_(b, size_t(cap_tokens) * 4),
        seq_of_token_(b, size_t(cap_tokens) * 4),
        query_start_(b, size_t(cap_seqs + 1) * 4),
        context_lens_(b, size_t(cap_seqs) * 4),
        tables_(b, size_t(cap_seqs * max_blocks) * 4) {}
  // max_query_len / max_context_len: the hints; 0 takes the step's own.
  StepDesc set(const test::PagedBatch& pb, int64_t max_query_len = 0, int64_t max_context_len = 0) {
    EXPECT_LE(pb.n_tokens, cap_tokens_);
    EXPECT_LE(pb.n_seqs, cap_seqs_);
    EXPECT_EQ(pb.max_blocks, max_blocks_);
    put(positions_, pb.positions);
    put(slots_, pb.slots);
    put(seq_of_token_, pb.seq_of_token);
    put(query_start_, pb.query_start);
    put(context_lens_, pb.context_lens);
    put(tables_, pb.block_tables);
    StepDesc st;
    st.n_tokens = pb.n_tokens;
    st.n_seqs = pb.n_seqs;
    st.n_logits = 0;
    st.max_query_len = max_query_len > 0 ? max_query_len : pb.max_query_len;
    st.max_context_len = max_context_len > 0 ? max_context_len : pb.max_context_len;
    st.block_size = pb.block_size;
    st.max_blocks = pb.max_blocks;
    st.positions = positions_.as<int32_t>();
    st.slots = slots_.as<int32_t>();
    st.seq_of_token = seq_of_token_.as<int32_t>();
    st.query_start = query_start_.as<int32_t>();
    st.context_lens = context_lens_.as<int32_t>();
    st.block_tables = tables_.as<int32_t>();
    return st;
  }

 private:
  void put(DevBuf& d, const std::vector<int32_t>& v) {
    if (!v.empty()) b_->copy_to_device(d.get(), v.data(), v.size() * 4);
  }
  Backend* b_;
  int64_t cap_tokens_, cap_seqs_, max_blocks_;
  DevBuf positions_, slots_, seq_of_token_, query_start_, context_lens_, tables_;
};

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
// ----------------------------- Each row at its own position (st.positions): a chunk, a ragged
// step with a decode row and chunks at nonzero starts, positions past 65535, a scaled table.
TEST(GpuOps, Rope) {
  LATPROF_REQUIRE_GPU(b);
  struct C {
    std::vector<int32_t> pos;
    int heads, kv, hd;
    bool scaled = false;  // a frequency table with rope scaling applied
  };
  std::vector<int32_t> chunk(17), mixed = {40};
  for (int i = 0; i < 17; ++i) chunk[size_t(i)] = 5 + i;
  for (int i = 0; i < 9; ++i) mixed.push_back(i);
  for (int i = 0; i < 3; ++i) mixed.push_back(70000 + i);
  for (const C& c :
       {C{{0}, 4, 2, 64}, C{chunk, 8, 2, 128}, C{mixed, 4, 4, 96}, C{mixed, 4, 4, 96, true}}) {
    const int64_t rows = int64_t(c.pos.size());
    std::vector<float> q = round_f16(random_vector(size_t(rows * c.heads * c.hd), 6, -2, 2));
    std::vector<float> k = round_f16(random_vector(size_t(rows * c.kv * c.hd), 7, -2, 2));
    auto dq = upload_act(b, q);
    auto dk = upload_act(b, k);
    DevBuf dp(b, c.pos.size() * 4);
    b->copy_to_device(dp.get(), c.pos.data(), c.pos.size() * 4);
    AttentionShape s{c.heads, c.kv, c.hd, 10000.f, {}, 0};
    if (c.scaled) {  // as llama3 scaling: high frequencies kept, low ones divided
      s.rope_inv_freq = s.inv_freq();
      for (size_t i = 0; i < s.rope_inv_freq.size(); ++i)
        s.rope_inv_freq[i] /= i < 10 ? 1.0 : i < 20 ? 3.0 : 8.0;
    }
    StepDesc st;
    st.n_tokens = rows;
    st.positions = dp.as<int32_t>();
    b->rope(dq->get(), dk->get(), st, s);
    const std::vector<double> inv_freq = s.inv_freq();
    cpu::rope(q.data(), k.data(), c.pos.data(), rows, c.heads, c.kv, c.hd, inv_freq.data());
    EXPECT_TRUE(all_close(download_act(b, dq->get(), int64_t(q.size())), q, 4e-3, 2e-3));
    EXPECT_TRUE(all_close(download_act(b, dk->get(), int64_t(k.size())), k, 4e-3, 2e-3));
  }
}

// ---- attention over the paged KV cache: prefill tiles and split-context decode, ragged steps
// ------------------------- Steps from support/paged_batch.hpp: shuffled block ids, -1 past each
// sequence's blocks, spare blocks poisoned with NaN (a read of a block the sequence does not own
// fails), decode rows next to prefill chunks at nonzero starts, GQA, windows, long contexts.
// Outputs are convex combinations of V rows in [-1, 1]; fp32 softmax on both sides; the GPU
// rounds the output to fp16 (4.9e-4 relative): atol 2e-3, rtol 4e-3.
class GpuAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(GpuAttention, MatchesCpu) {
  LATPROF_REQUIRE_GPU(b);
  const AttnCase& c = GetParam();
  const test::AttnInputs in = test::attn_inputs(c);
  const test::PagedBatch& pb = in.pb;
  const int64_t rows = in.rows, q_dim = in.q_dim, kv_dim = in.kv_dim;
  std::vector<uint16_t> kch = in.k_cache, vch = in.v_cache;

  DevBuf dkc(b, kch.size() * 2), dvc(b, vch.size() * 2), dout(b, size_t(rows * q_dim) * 2);
  b->copy_to_device(dkc.get(), kch.data(), kch.size() * 2);
  b->copy_to_device(dvc.get(), vch.data(), vch.size() * 2);
  auto dq = upload_act(b, in.q);
  auto dk = upload_act(b, in.k);
  auto dv = upload_act(b, in.v);
  poison(b, dout);
  DeviceStep ds(b, rows, pb.n_seqs, pb.max_blocks);
  const StepDesc st = ds.set(pb);
  KvLayer kv{dkc.get(), dvc.get(), pb.num_blocks, pb.block_size, kv_dim};
  AttentionShape s{c.heads, c.kv, c.hd, 10000.f, {}, c.window};
  b->attention(dq->get(), dk->get(), dv->get(), kv, st, s, dout.get());

  std::vector<float> ref;
  cpu_attention(pb, in.q, in.k, in.v, c.heads, c.kv, c.hd, c.window, kch, vch, ref);
  EXPECT_TRUE(all_close(download_act(b, dout.get(), rows * q_dim), ref, 2e-3, 4e-3));
  // The new K and V rows landed in their slots, nothing else changed.
  std::vector<uint16_t> got(kch.size());
  b->copy_to_host(got.data(), dkc.get(), got.size() * 2);
  EXPECT_EQ(0, std::memcmp(got.data(), kch.data(), got.size() * 2)) << "K cache";
  b->copy_to_host(got.data(), dvc.get(), got.size() * 2);
  EXPECT_EQ(0, std::memcmp(got.data(), vch.data(), got.size() * 2)) << "V cache";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuAttention,
    ::testing::Values(
        // mixed steps (tiled kernel): a decode row next to prefill chunks from 0 and from nonzero
        // starts, odd lengths, GQA, several head and block sizes
        AttnCase{{{37, 1}, {0, 45}, {20, 19}}, 4, 2, 64, 16},
        AttnCase{{{0, 30}, {61, 1}, {9, 14}}, 6, 2, 96, 4},
        AttnCase{{{0, 33}, {5, 20}}, 2, 1, 256, 16}, AttnCase{{{1000, 2}}, 8, 1, 128, 16},
        // one long prefill (many tiles), and a chunk after a prefix
        AttnCase{{{0, 300}}, 8, 8, 128, 16}, AttnCase{{{20, 45}}, 6, 2, 96, 16},
        // decode steps (split-context kernel + reduction): short, exactly one split, long, GQA 8,
        // a grid far past the contexts, block size 4
        AttnCase{{{0, 1}, {127, 1}, {300, 1}}, 8, 1, 128, 16, 0, 512},
        AttnCase{{{3000, 1}}, 32, 8, 128, 16, 0, 4096},
        AttnCase{{{700, 1}, {130, 1}, {5, 1}}, 16, 2, 64, 16}, AttnCase{{{200, 1}}, 6, 2, 80, 4},
        AttnCase{{{300, 1}}, 8, 1, 256, 16},
        // GQA 16: decode rows on the tiled kernel (the backend's choice past a group of 8)
        AttnCase{{{40, 1}, {7, 1}}, 16, 1, 64, 16},
        // sliding window: prefill tiles that start past the window, decode splits before the
        // window skipped, a window inside one split, a window of 3
        AttnCase{{{0, 300}}, 8, 8, 128, 16, 50}, AttnCase{{{100, 1}, {50, 40}}, 8, 2, 128, 16, 30},
        AttnCase{{{3000, 1}}, 32, 8, 128, 16, 1000, 4096},
        AttnCase{{{200, 1}, {64, 1}}, 16, 2, 64, 4, 100},
        AttnCase{{{700, 1}, {130, 1}, {5, 1}}, 16, 2, 64, 16, 129},
        AttnCase{{{500, 4}, {3, 2}}, 8, 2, 64, 4, 3}),
    attn_case_name);

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

// ---- gather_rows: exact (a row copy); any rows, in any order, repeated
// -------------------------------
TEST(GpuOps, GatherRows) {
  LATPROF_REQUIRE_GPU(b);
  for (int64_t dim : {4099, 64}) {
    const int64_t n_rows = 7;
    const std::vector<int32_t> pick = {6, 0, 3, 3, 1};
    const int64_t n = int64_t(pick.size());
    std::vector<float> x = round_f16(random_vector(size_t(n_rows * dim), 15, -1, 1));
    std::vector<float> ref(static_cast<size_t>(n * dim));
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(ref.data() + i * dim, x.data() + pick[size_t(i)] * dim, size_t(dim) * 4);
    auto dx = upload_act(b, x);
    DevBuf dr(b, pick.size() * 4), out(b, size_t(n * dim) * 2);
    b->copy_to_device(dr.get(), pick.data(), pick.size() * 4);
    poison(b, out);
    b->gather_rows(dx->get(), dr.as<int32_t>(), n, dim, out.get());
    EXPECT_TRUE(all_close(download_act(b, out.get(), n * dim), ref, 0, 0)) << "dim " << dim;
  }
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
    const std::vector<SampleKey> keys(static_cast<size_t>(n_seq));
    b->sample(dl->get(), n_seq, vocab, SamplingParams{}, keys.data(), dt.as<int32_t>());
    std::vector<int32_t> got(static_cast<size_t>(n_seq));
    b->copy_to_host(got.data(), dt.get(), got.size() * 4);
    for (int64_t s = 0; s < n_seq; ++s)
      EXPECT_EQ(got[size_t(s)], cpu::argmax(l.data() + s * vocab, vocab))
          << "vocab " << vocab << " seq " << s;
  }
  // Temperature / top-k copies the logits to the host and runs the CPU backend's sampler: each
  // row's token is in its top k and is the token the CPU picks for the same key (stream, index).
  const int64_t vocab = 1000, n = 3;
  std::vector<float> l = round_f16(random_vector(size_t(n * vocab), 17, -4, 4));
  auto dl = upload_act(b, l);
  DevBuf dt(b, size_t(n) * 4);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 5;
  p.seed = 3;
  const std::vector<SampleKey> keys = {{0, 4}, {7, 0}, {2, 11}};
  b->sample(dl->get(), n, vocab, p, keys.data(), dt.as<int32_t>());
  std::vector<int32_t> got(static_cast<size_t>(n));
  b->copy_to_host(got.data(), dt.get(), got.size() * 4);
  std::vector<int32_t> want(static_cast<size_t>(n));  // what CpuBackend::sample picks
  for (int64_t r = 0; r < n; ++r)
    want[size_t(r)] = sample_top_k(l.data() + r * vocab, vocab, p.temperature, p.top_k, p.seed,
                                   keys[size_t(r)].token_index, keys[size_t(r)].stream);
  EXPECT_EQ(got, want) << "the CPU backend's sampler picks other tokens for the same keys";
  for (int64_t r = 0; r < n; ++r) {
    const int32_t tok = got[size_t(r)];
    ASSERT_GE(tok, 0);
    ASSERT_LT(tok, vocab);
    int larger = 0;
    for (int64_t i = 0; i < vocab; ++i)
      larger += l[size_t(r * vocab + i)] > l[size_t(r * vocab + tok)];
    EXPECT_LT(larger, 5) << "row " << r;
  }
}

// ---- steps through run_step: graph keys eager, captured, replayed; eager steps between --------
// One cache and one set of step arrays at fixed addresses (as the runner's); every step writes
// new contents into them: new positions, new shuffled block tables, new q/k/v. Keys 1 and 3
// (all-decode steps of 1 and 3 sequences) interleave with an eager mixed step; the first step of
// key 3 grows the attention scratch, which drops key 1's graph (captured again later). Every
// step equals the CPU.
TEST(GpuOps, StepGraphsReplayMatchCpu) {
  LATPROF_REQUIRE_GPU(b);
  b->set_graph_enabled(true);
  const int heads = 8, kvh = 2, hd = 128;
  const int64_t bs = 16, max_context = 600, max_blocks = max_context / bs + 1, cap_seqs = 3,
                cap_tokens = 8, num_blocks = cap_seqs * max_blocks + 2;
  const int64_t kv_dim = int64_t(kvh) * hd, q_dim = int64_t(heads) * hd;
  const int64_t cache_rows = num_blocks * bs;
  std::vector<uint16_t> kch = to_half(random_vector(size_t(cache_rows * kv_dim), 18, -1, 1));
  std::vector<uint16_t> vch = to_half(random_vector(size_t(cache_rows * kv_dim), 19, -1, 1));
  DevBuf dkc(b, kch.size() * 2), dvc(b, vch.size() * 2);
  b->copy_to_device(dkc.get(), kch.data(), kch.size() * 2);
  b->copy_to_device(dvc.get(), vch.data(), vch.size() * 2);
  DevBuf dq(b, size_t(cap_tokens * q_dim) * 2), dk(b, size_t(cap_tokens * kv_dim) * 2),
      dv(b, size_t(cap_tokens * kv_dim) * 2), dout(b, size_t(cap_tokens * q_dim) * 2);
  DeviceStep ds(b, cap_tokens, cap_seqs, max_blocks);
  KvLayer kv{dkc.get(), dvc.get(), num_blocks, bs, kv_dim};
  AttentionShape s{heads, kvh, hd, 10000.f, {}, 0};
  // (graph key, positions of the sequences' new tokens; -1: the eager mixed step)
  const std::vector<int64_t> keys = {1, 1, 1, 1, -1, 3, 3, 3, 3, 1, 1, 1};
  for (size_t i = 0; i < keys.size(); ++i) {
    const int64_t key = keys[i];
    const int64_t p = 100 + 37 * int64_t(i);
    std::vector<test::PagedSeq> seqs;
    if (key < 0)
      seqs = {{p, 5}, {p + 1, 1}};  // a prefill chunk next to a decode row
    else
      for (int64_t q = 0; q < key; ++q) seqs.push_back({p + 50 * q, 1});
    const test::PagedBatch pb =
        test::make_paged_batch(seqs, bs, max_context, 1000 + i, 0, num_blocks);
    ASSERT_EQ(pb.num_blocks, num_blocks);
    // A captured step passes the hints of its key: one query per sequence, the whole table.
    const StepDesc st = key >= 0 ? ds.set(pb, 1, max_blocks * bs) : ds.set(pb);
    const int64_t rows = pb.n_tokens;
    std::vector<float> q = round_f16(random_vector(size_t(rows * q_dim), 20 + i, -2, 2));
    std::vector<float> k = round_f16(random_vector(size_t(rows * kv_dim), 40 + i, -2, 2));
    std::vector<float> v = round_f16(random_vector(size_t(rows * kv_dim), 60 + i, -1, 1));
    const std::vector<uint16_t> qh = to_half(q), kh = to_half(k), vh = to_half(v);
    b->copy_to_device(dq.get(), qh.data(), qh.size() * 2);
    b->copy_to_device(dk.get(), kh.data(), kh.size() * 2);
    b->copy_to_device(dv.get(), vh.data(), vh.size() * 2);
    poison(b, dout);
    const int e0 = b->record_event();
    b->run_step(key, [&] { b->attention(dq.get(), dk.get(), dv.get(), kv, st, s, dout.get()); });
    const int e1 = b->record_event();
    b->synchronize();
    EXPECT_GE(b->elapsed_ms(e0, e1), 0.0);
    std::vector<float> ref;
    cpu_attention(pb, q, k, v, heads, kvh, hd, 0, kch, vch, ref);
    EXPECT_TRUE(all_close(download_act(b, dout.get(), rows * q_dim), ref, 2e-3, 4e-3))
        << "step " << i << " key " << key;
  }
  std::vector<uint16_t> got(kch.size());
  b->copy_to_host(got.data(), dkc.get(), got.size() * 2);
  EXPECT_EQ(0, std::memcmp(got.data(), kch.data(), got.size() * 2)) << "K cache";
  EXPECT_TRUE(b->graph_enabled()) << "the steps fell back to eager launches";
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
