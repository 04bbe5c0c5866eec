// CPU kernels against simple double-precision references, on every ISA path this CPU has and on
// 1 and 2 threads. Outputs are poisoned with NaN before each call so an element the kernel never
// writes fails. Tolerances are declared next to each check with the reason.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/half.hpp"
#include "core/rng.hpp"
#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/kernels.hpp"
#include "support/param_names.hpp"

namespace latprof::cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint16_t kHalfNaN = 0x7e00;

std::vector<float> random_f32(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = d(gen);
    while (x == 0.0f);  // non-zero values: a dropped term always changes the result
  }
  return v;
}

std::vector<uint16_t> random_f16(size_t n, uint32_t seed) {
  const std::vector<float> f = random_f32(n, seed);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float_to_half(f[i]);
  return h;
}

// Compares got against ref element by element: |got - ref| <= atol + rtol * scale[i] (scale
// defaults to |ref|). Reports the worst element (NaN counts as infinitely wrong).
::testing::AssertionResult close(const std::vector<double>& ref, const float* got, double atol,
                                 double rtol, const std::vector<double>* scale = nullptr) {
  double worst = -1;
  size_t wi = 0;
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double s = scale ? (*scale)[i] : std::fabs(ref[i]);
    const double err = std::isfinite(got[i]) ? std::fabs(double(got[i]) - ref[i])
                                             : std::numeric_limits<double>::infinity();
    const double excess = err - (atol + rtol * s);
    if (excess > 0) ++bad;
    if (excess > worst || i == 0) {
      worst = excess;
      wi = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const double s = scale ? (*scale)[wi] : std::fabs(ref[wi]);
  return ::testing::AssertionFailure()
         << bad << " of " << ref.size() << " elements out of tolerance; worst [" << wi << "]: got "
         << got[wi] << ", want " << ref[wi] << " (tolerance " << atol + rtol * s << ")";
}

// ---- parameterisation: ISA x threads ------------------------------------------------------------
using Param = std::tuple<Isa, int>;

class Kernels : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    isa_ = std::get<0>(GetParam());
    threads_ = std::get<1>(GetParam());
    if (int(isa_) > int(detected_isa())) GTEST_SKIP() << isa_name(isa_) << " not on this CPU";
    saved_threads_ = omp_get_max_threads();
    force_isa(isa_);
    ASSERT_EQ(active_isa(), isa_);
    omp_set_num_threads(threads_);
  }
  void TearDown() override {
    force_isa(detected_isa());
    if (saved_threads_ > 0) omp_set_num_threads(saved_threads_);
  }
  Isa isa_ = Isa::scalar;
  int threads_ = 1;
  int saved_threads_ = 0;
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(isa_name(std::get<0>(info.param))) + "_t" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllIsas, Kernels,
                         ::testing::Combine(::testing::Values(Isa::scalar, Isa::avx2, Isa::avx512),
                                            ::testing::Values(1, 2)),
                         param_name);

// ---- linear layers ------------------------------------------------------------------------------
struct LinearCase {
  WType type;
  int64_t n_out, n_in;
  // INT8 rows interleaved in fours (kernels.hpp), as the CPU backend stores them.
  bool rows4 = false;
};

struct LinearData {
  std::vector<uint16_t> w16;
  std::vector<int8_t> w8;
  std::vector<float> scales;
  Weight w;
  std::vector<double> wd;  // dequantised weights, exact
};

LinearData make_weight(const LinearCase& c, uint32_t seed) {
  LinearData d;
  const size_t n = size_t(c.n_out * c.n_in);
  d.wd.resize(n);
  if (c.type == WType::f16) {
    d.w16 = random_f16(n, seed);
    for (size_t i = 0; i < n; ++i) d.wd[i] = half_to_float(d.w16[i]);
    d.w.data = d.w16.data();
  } else {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> q(-127, 127);
    d.w8.resize(n);
    for (auto& v : d.w8) {
      do v = int8_t(q(gen));
      while (v == 0);
    }
    d.scales = random_f32(size_t(c.n_out), seed + 1, 0.001f, 0.02f);
    for (size_t i = 0; i < n; ++i) d.wd[i] = double(d.w8[i]) * d.scales[i / size_t(c.n_in)];
    if (c.rows4) {
      interleave_rows4(d.w8.data(), c.n_out, c.n_in);
      d.w.rows4 = true;
    }
    d.w.data = d.w8.data();
    d.w.scales = d.scales.data();
  }
  d.w.type = c.type;
  d.w.n_out = c.n_out;
  d.w.n_in = c.n_in;
  return d;
}

const char* type_name(WType t) {
  return t == WType::f16 ? "f16" : t == WType::i8 ? "i8" : "i8a8";
}

// W8A8's activations as the kernels must see them (kernels.hpp, WType::i8a8), written out from the
// definition: per row s = max|x| / 127 (1 for a zero row), q = nearest-even(clamp(x * (1 / s),
// -127, 127)) in fp32; returns q * s exactly (in double).
std::vector<double> rounded_i8(const std::vector<float>& x, int64_t m, int64_t n) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < m; ++i) {
    float mx = 0;
    for (int64_t k = 0; k < n; ++k) mx = std::max(mx, std::fabs(x[size_t(i * n + k)]));
    const float s = mx > 0 ? mx / 127.0f : 1.0f, inv = 1.0f / s;
    for (int64_t k = 0; k < n; ++k) {
      const float v = std::min(127.0f, std::max(-127.0f, x[size_t(i * n + k)] * inv));
      out[size_t(i * n + k)] = double(std::nearbyint(v)) * double(s);
    }
  }
  return out;
}

// x rounded to the nearest fp16 (ties to even), written out from the format: 11 significant bits
// for |x| >= 2^-14, steps of 2^-24 below. Finite inputs within fp16's range only.
double rounded_f16(double v) {
  if (v == 0) return 0;
  int e = 0;
  std::frexp(v, &e);  // |v| = f * 2^e, f in [0.5, 1): the leading bit is 2^(e - 1)
  const double ulp = std::ldexp(1.0, std::max(e - 1, -14) - 10);
  return std::nearbyint(v / ulp) * ulp;
}

void check_linear(const LinearCase& c, int64_t m, uint32_t seed,
                  std::vector<float> x = std::vector<float>()) {
  const LinearData d = make_weight(c, seed);
  if (x.empty()) x = random_f32(size_t(m * c.n_in), seed + 7);
  // W8A8: the reference is the exact product of the rounded activations (the rounding itself is
  // judged against the unrounded product in LinearW8A8WithinHalfAStep).
  std::vector<double> xd(x.begin(), x.end());
  if (c.type == WType::i8a8) xd = rounded_i8(x, m, c.n_in);
  // FP16 weights: every path rounds each activation row to fp16 unless an element is beyond
  // fp16's range (kernels.hpp); the reference is the exact product of those rows.
  if (c.type == WType::f16)
    for (int64_t i = 0; i < m; ++i) {
      bool in_range = true;
      for (int64_t k = 0; k < c.n_in; ++k)
        in_range &= std::fabs(x[size_t(i * c.n_in + k)]) <= 65504;
      if (in_range)
        for (int64_t k = 0; k < c.n_in; ++k)
          xd[size_t(i * c.n_in + k)] = rounded_f16(xd[size_t(i * c.n_in + k)]);
    }
  auto reference = [&](const std::vector<double>& xs, std::vector<double>& ref,
                       std::vector<double>& mag) {
    ref.assign(size_t(m * c.n_out), 0);
    mag.assign(ref.size(), 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t o = 0; o < c.n_out; ++o) {
        double s = 0, a = 0;
        for (int64_t k = 0; k < c.n_in; ++k) {
          const double p = xs[size_t(i * c.n_in + k)] * d.wd[size_t(o * c.n_in + k)];
          s += p;
          a += std::fabs(p);
        }
        ref[size_t(i * c.n_out + o)] = s;
        mag[size_t(i * c.n_out + o)] = a;
      }
  };
  std::vector<double> ref, mag;
  reference(xd, ref, mag);
  if (c.type == WType::i8) {
    // The AVX512-VNNI path quantises each activation row to int16 (step max|x| / 32767): each
    // product may be off by |w| * step / 2, so the bound grows by step / 2 * sum|w|. Added to the
    // magnitude in units of the 1e-5 relative tolerance used below; a dropped term is still far
    // outside it.
    for (int64_t i = 0; i < m; ++i) {
      double mx = 0;
      for (int64_t k = 0; k < c.n_in; ++k)
        mx = std::max(mx, double(std::fabs(x[size_t(i * c.n_in + k)])));
      for (int64_t o = 0; o < c.n_out; ++o) {
        double sw = 0;
        for (int64_t k = 0; k < c.n_in; ++k) sw += std::fabs(d.wd[size_t(o * c.n_in + k)]);
        mag[size_t(i * c.n_out + o)] += 0.5 * mx / 32767.0 * sw / 1e-5;
      }
    }
  }
  const char* names[] = {"gemv", "gemm", "matmul"};
  void (*fns[])(const Weight&, const float*, int64_t, float*) = {gemv, gemm, matmul};
  for (int f = 0; f < 3; ++f) {
    std::vector<float> y(ref.size(), kNaN);
    fns[f](d.w, x.data(), m, y.data());
    // fp32 accumulation of n_in products (blocked / several partial sums): the rounding error
    // stays below ~sqrt(n_in) * 2^-24 * sum|x w|; 1e-5 * sum|x w| leaves margin, and a single
    // dropped or doubled term (~sum|x w| / n_in, n_in <= 4113) is still far outside it.
    EXPECT_TRUE(close(ref, y.data(), 1e-30, 1e-5, &mag))
        << names[f] << " " << type_name(c.type) << (c.rows4 ? " rows4" : "") << " n_out=" << c.n_out
        << " n_in=" << c.n_in << " m=" << m;
  }
}

TEST_P(Kernels, LinearOddShapes) {
  uint32_t seed = 100;
  for (WType t : {WType::f16, WType::i8, WType::i8a8}) {
    check_linear({t, 33, 4096 + 17}, 1, seed++);
    check_linear({t, 33, 4096 + 17}, 3, seed++);
    check_linear({t, 130, 33}, 7, seed++);
    check_linear({t, 5, 1}, 9, seed++);
    check_linear({t, 257, 100}, 65, seed++);
    check_linear({t, 70, 513}, 130, seed++);
    // The AVX2 GEMM walks x in row blocks of 72 rows (gemm_avx2.cpp kMcPanels): 155 rows make
    // two whole blocks and a partial last panel, over two k slices.
    check_linear({t, 40, 300}, 155, seed++);
    check_linear({t, 1, 31}, 2, seed++);
    check_linear({t, 61, 4113}, 33, seed++);  // three passes of the GEMV: 16 + 16 + 1
    check_linear({t, 13, 7}, 16, seed++);
    // One activation row reads one row at a time (gemv_avx512.cpp / gemv_vnni_avx512.cpp
    // row_stream): rows longer than one int32 flush of the VNNI chains (8,192 weights), a tail
    // past the 64-weight steps, and rows shorter than one step.
    check_linear({t, 9, 8192 + 64 + 31}, 1, seed++);
    check_linear({t, 3, 31}, 1, seed++);
    // Several activation rows over rows that long: the blocked kernels' flushes (VNNI: every
    // 4,096 weights, fp32 sums in memory) and a partial last step, for 6 and 8 rows at once.
    check_linear({t, 11, 8192 + 64 + 31}, 6, seed++);
    check_linear({t, 11, 8192 + 64 + 31}, 8, seed++);
    // 2-4 rows: one linear stream while the activations fit kLinearActivationBytes (16 KiB),
    // R-row blocks beyond (both VNNI kernels).
    check_linear({t, 13, 2048 + 31}, 3, seed++);
    check_linear({t, 13, 8192 + 64 + 31}, 2, seed++);
    check_linear({t, 13, 8192 + 64 + 31}, 4, seed++);
    // W8A8 (VNNI) reduces its int32 lanes every 65,536 weights: rows past two of those.
    check_linear({t, 5, 2 * 65536 + 64 + 31}, 1, seed++);
    check_linear({t, 5, 2 * 65536 + 64 + 31}, 3, seed++);  // its linear stream of 2-4 rows
    check_linear({t, 5, 2 * 65536 + 64 + 31}, 7, seed++);
  }
  // FP16 rows with an element beyond fp16's range stay fp32: finite, exact results (rounded to
  // fp16 they would hold an inf); the other rows of the step are still rounded. One row (the
  // AVX-512 fp16-row kernel), a few (GEMV), many (GEMM), and enough that all threads round them
  // (round_rows_f16: 2^18 elements and up).
  for (const int64_t m : {1, 3, 40, 130})
    for (const float big : {7e4f, -1e6f}) {
      std::vector<float> x = random_f32(size_t(m * (2048 + 5)), seed);
      x[17] = big;
      check_linear({WType::f16, 40, 2048 + 5}, m, seed++, x);
    }
}

// FP16 weights at every activation row count of the GEMV: the fp16 activations in R-row blocks
// for 2-7 rows (R = 2, 4 or 3, and the rows left over one at a time), the fp32 blocks for groups
// of 8, and a pass of 15 rows that takes both (8 + 7).
TEST_P(Kernels, LinearF16EveryRowCount) {
  uint32_t seed = 700;
  for (int64_t m : {2, 3, 4, 5, 6, 7, 8, 9, 15})
    check_linear({WType::f16, 37, 2048 + 17}, m, seed++);
}

// INT8 rows interleaved in fours, as the CPU backend stores them where rows4_fits: every path
// (the VNNI W8A16 GEMV's 4-row streams, split in two from 5 activation rows, and its 1-row
// tails; the W8A8 GEMV's 4-, 3- and 2-row blocks; the AVX-512 GEMM's packing; the row-major
// copies the other ISAs take) against the same reference.
TEST_P(Kernels, LinearRowsInterleavedInFours) {
  uint32_t seed = 900;
  for (WType t : {WType::i8, WType::i8a8}) {
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17}) check_linear({t, 36, 2048, true}, m, seed++);
    check_linear({t, 8, 8192 + 64, true}, 1, seed++);     // 5 panels, the last 64 wide
    check_linear({t, 520, 4096 + 192, true}, 1, seed++);  // 3 panels, several chunks and threads
    check_linear({t, 20, 4096 + 192, true}, 3, seed++);
    check_linear({t, 20, 4096 + 192, true}, 40, seed++);  // the GEMM's packing across panels
    check_linear({t, 12, 8192 + 64, true}, 6, seed++);
    check_linear({t, 12, 8192 + 64, true}, 7, seed++);      // 4 + 3 rows a group, 5 panels
    check_linear({t, 4, 2 * 65536 + 64, true}, 1, seed++);  // past W8A8's int32 reductions
    check_linear({t, 516, 256, true}, 1, seed++);           // several GEMV chunks and threads
    check_linear({t, 40, 576, true}, 40, seed++);           // the GEMM: a partial KC slice
    check_linear({t, 260, 320, true}, 130, seed++);
  }
}

// A group of three weights of one n_in and type t (40, 300 and 17 rows of 600) in one gemm_group
// call gives each weight's gemm bits exactly: the AMX GEMMs share one rounded (or split) copy of
// the rows across the group. Seeds seed .. seed + 3.
void expect_group_as_singles(WType t, uint32_t seed) {
  const LinearData d[3] = {make_weight({t, 40, 600}, seed), make_weight({t, 300, 600}, seed + 1),
                           make_weight({t, 17, 600}, seed + 2)};
  const int64_t m = 37;
  const std::vector<float> x = random_f32(size_t(m * 600), seed + 3);
  const Weight ws[3] = {d[0].w, d[1].w, d[2].w};
  std::vector<float> y[3], one[3];
  float* ys[3];
  for (int i = 0; i < 3; ++i) {
    y[i].assign(size_t(m * ws[i].n_out), kNaN);
    one[i].assign(y[i].size(), kNaN);
    ys[i] = y[i].data();
    gemm(ws[i], x.data(), m, one[i].data());
  }
  gemm_group(ws, 3, x.data(), m, ys);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(y[i], one[i]) << "weight " << i << " amx " << (amx_int8_active() || amx_f16_active());
}

// INT8 weights in the GEMM on the AMX tiles (gemm_amx_avx512.cpp) where the CPU has them, and the
// VNNI GEMM there with AMX switched off, against the same reference (the other tests run the
// GEMM with AMX on where it is present). The AMX GEMM's edges: row panels of 16 (15, 16, 17,
// 33 rows), k slices of 512 in 64-byte steps (a partial step, two slices and a partial one),
// C blocks of 32 columns (one tile of 16 or fewer, 17-31) and column blocks of 256, jobs of
// several row blocks (1,000 rows over 5 column blocks), rows too wide to pack whole (16,448), a
// group of three weights sharing the rounded rows, and the rows interleaved in fours.
TEST_P(Kernels, LinearInt8GemmAmxOnAndOff) {
  if (isa_ != Isa::avx512) GTEST_SKIP() << "the AMX and VNNI GEMMs are AVX-512 paths";
  uint32_t seed = 1200;
  for (const bool amx : {true, false}) {
    if (amx && !has_amx_int8()) continue;  // said once below
    set_amx_enabled(amx);
    EXPECT_EQ(amx_int8_active(), amx);
    for (WType t : {WType::i8, WType::i8a8}) {
      for (const int64_t m : {15, 16, 17, 33}) check_linear({t, 48, 1024 + 64 + 5}, m, seed++);
      check_linear({t, 16, 100}, 40, seed++);
      check_linear({t, 7, 64}, 40, seed++);
      check_linear({t, 290, 520}, 50, seed++);
      check_linear({t, 20, 4096 + 192, true}, 40, seed++);
      check_linear({t, 1024 + 40, 64}, 1000, seed++);  // spans of two row blocks
      check_linear({t, 20, 16384 + 64}, 40, seed++);   // k packed slice by slice
    }
    expect_group_as_singles(WType::i8, seed);
    seed += 4;
  }
  set_amx_enabled(true);
  if (!has_amx_int8()) GTEST_SKIP() << "no AMX-INT8 here (or the OS refused the tile state)";
}

// FP16 weights in the GEMM on the AMX-BF16 tiles (gemm_f16_amx_bf16_avx512.cpp) where the CPU
// has them, and the FMA GEMM there with AMX switched off, against the same reference. The tiles'
// edges: row panels in pairs of 16 (33, 47, 64, 65 rows), k slices of 1,024 in 32-element steps (a
// partial step, several slices and a partial one), C blocks of 32 columns (7, 16, 17, 48) and
// column blocks of 256 (290), jobs of several row blocks of 256 (1,000 rows over 5 column
// blocks), rows too wide to pack whole (16,416), a group of three weights sharing the split rows. A
// row with an element beyond fp16's range (kept in fp32 by the rounding, so not two bf16 exactly)
// and a row with a NaN make the call fall back to the FMA GEMM: the same bits as with AMX off.
TEST_P(Kernels, LinearF16GemmAmxOnAndOff) {
  if (isa_ != Isa::avx512) GTEST_SKIP() << "the AMX and FMA GEMMs compared are AVX-512 paths";
  uint32_t seed = 1300;
  for (const bool amx : {true, false}) {
    if (amx && !has_amx_bf16()) continue;  // said once below
    set_amx_enabled(amx);
    EXPECT_EQ(amx_f16_active(), amx);
    for (const int64_t m : {33, 47, 64, 65})
      check_linear({WType::f16, 48, 1024 + 64 + 5}, m, seed++);
    check_linear({WType::f16, 16, 100}, 40, seed++);
    check_linear({WType::f16, 7, 32}, 40, seed++);
    check_linear({WType::f16, 17, 31}, 34, seed++);
    check_linear({WType::f16, 290, 520}, 50, seed++);
    check_linear({WType::f16, 20, 4096 + 192}, 40, seed++);
    check_linear({WType::f16, 1024 + 40, 64}, 1000, seed++);  // spans of two row blocks
    check_linear({WType::f16, 20, 16384 + 32}, 40, seed++);   // k packed slice by slice
    expect_group_as_singles(WType::f16, seed);
    seed += 4;
  }
  // Every product exact: x = w = 1 + 2^-8 (bf16 hi 1, lo 2^-8), 64 of them a row, so every
  // partial sum (k + k 2^-7 + k 2^-16) and the sum 64 + 2^-1 + 2^-10 are exact in fp32 and y
  // must be exactly that; a dropped lo x lo product (2^-16 each) misses it by 2^-10.
  {
    const int64_t m = 40, n_out = 20, n_in = 64;
    const std::vector<uint16_t> wh(size_t(n_out * n_in), uint16_t(0x3C04));
    const std::vector<float> x1(size_t(m * n_in), 1.0f + 0x1p-8f);
    const Weight w{wh.data(), nullptr, WType::f16, n_out, n_in};
    for (const bool amx : {true, false}) {
      set_amx_enabled(amx);
      std::vector<float> y(size_t(m * n_out), kNaN);
      gemm(w, x1.data(), m, y.data());
      for (float v : y) ASSERT_EQ(v, 64.0f + 0x1p-1f + 0x1p-10f) << "amx " << amx;
    }
  }
  // Rows that are not fp16: the FMA GEMM's result, bit for bit, with or without AMX.
  const LinearData d = make_weight({WType::f16, 70, 300}, seed++);
  const int64_t m = 40;
  std::vector<float> x = random_f32(size_t(m * 300), seed++);
  x[5 * 300 + 17] = 1e6f;
  check_linear({WType::f16, 70, 300}, m, 1399, x);
  std::vector<float> on(size_t(m * 70), kNaN), off(on.size(), kNaN);
  for (const bool nan : {false, true}) {
    if (nan) x[9 * 300 + 3] = std::numeric_limits<float>::quiet_NaN();
    set_amx_enabled(true);
    gemm(d.w, x.data(), m, on.data());
    set_amx_enabled(false);
    gemm(d.w, x.data(), m, off.data());
    for (size_t i = 0; i < on.size(); ++i) {
      ASSERT_TRUE(std::memcmp(&on[i], &off[i], sizeof(float)) == 0) << i << " nan " << nan;
    }
    if (nan) {
      EXPECT_TRUE(std::isnan(on[9 * 70]));
    }
  }
  set_amx_enabled(true);
  if (!has_amx_bf16()) GTEST_SKIP() << "no AMX-BF16 here (or the OS refused the tile state)";
}

// The kernels' scratch buffers (the GEMV's activation copies among them) start on a 64-byte line
// whatever their element type and size, and keep their memory while they are big enough.
TEST(Kernels, AlignedScratch) {
  detail::Aligned64<int16_t> a;
  detail::Aligned64<uint16_t> b;
  detail::AlignedFloats c;
  for (const size_t n : {size_t(1), size_t(7), size_t(100), size_t(4099), size_t(70000)}) {
    a.reserve(n);
    b.reserve(n + 3);
    c.reserve(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.p) % 64, 0u) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.p) % 64, 0u) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.p) % 64, 0u) << n;
    EXPECT_GE(a.n, n);
    EXPECT_GE(b.n, n + 3);
    EXPECT_GE(c.n, n);
    a.p[n - 1] = 1;  // the whole range is there (ASan / valgrind would see a short block)
    c.p[n - 1] = 1.0f;
  }
  const int16_t* before = a.p;
  a.reserve(5);
  EXPECT_EQ(a.p, before);
}

// The GEMV copies (rounds or quantises) its activations into aligned scratch: where the caller's
// rows start on the line does not change a bit of the result, on any path (FP16 one row, the fp16
// rows of 2-7, the fp32 rows of 8+; W8A16; W8A8).
TEST(Kernels, GemvAnyActivationAlignment) {
  for (const WType t : {WType::f16, WType::i8, WType::i8a8})
    for (const int64_t m : {1, 3, 8, 11}) {
      const int64_t n_out = 40, n_in = 256;
      LinearData d = make_weight({t, n_out, n_in, int8_storage(t)}, 500 + uint32_t(m));
      const std::vector<float> x = random_f32(size_t(m * n_in), 600 + uint32_t(m));
      std::vector<float> want(size_t(m * n_out), kNaN);
      std::vector<float> buf(size_t(m * n_in) + 16);
      for (int off = 0; off < 16; off += 3) {
        std::copy(x.begin(), x.end(), buf.begin() + off);
        std::vector<float> y(size_t(m * n_out), kNaN);
        gemv(d.w, buf.data() + off, m, y.data());
        if (off == 0) want = y;
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(std::memcmp(&y[i], &want[i], sizeof(float)), 0)
              << type_name(t) << " m=" << m << " offset " << off << " at " << i;
        EXPECT_FALSE(std::isnan(y[0])) << type_name(t) << " m=" << m;
      }
    }
}

// The VNNI W8A16 rows of an interleaved weight from a row that is not a group's first (gemv hands
// out whole groups; the kernel takes any range): the same values as the whole product, and no
// write outside the range.
TEST(Kernels8, InterleavedRowsFromAnyRow) {
  if (!gemv_int8_dot()) GTEST_SKIP() << "no AVX512-VNNI here: the W8A16 VNNI GEMV does not run";
  const int64_t n_out = 12, n_in = 128;
  for (const int64_t m : {1, 3, 6}) {
    LinearData d = make_weight({WType::i8, n_out, n_in, true}, 31 + uint32_t(m));
    const std::vector<float> x = random_f32(size_t(m * n_in), 41 + uint32_t(m));
    std::vector<float> whole(size_t(m * n_out), kNaN), part(whole.size(), kNaN);
    gemv(d.w, x.data(), m, whole.data());
    std::vector<int16_t> xq(size_t(m * n_in));
    std::vector<float> xs(size_t(m), 0.0f);
    detail::quantize_activations_i16(x.data(), m, n_in, n_in, xq.data(), xs.data());
    detail::gemv_rows_i8_vnni(d.w, xq.data(), n_in, xs.data(), m, part.data(), 1, 11);
    for (int64_t j = 0; j < m; ++j)
      for (int64_t r = 0; r < n_out; ++r) {
        const float p = part[size_t(j * n_out + r)], w = whole[size_t(j * n_out + r)];
        if (r < 1 || r >= 11)
          EXPECT_TRUE(std::isnan(p)) << "row " << r << " written, m=" << m;
        else
          EXPECT_NEAR(p, w, 1e-6f * std::fabs(w) + 1e-30f) << "row " << r << " m=" << m;
      }
  }
}

// The decode's vendor-dependent choices (StreamTuning, kernels.hpp) forced each way: by default
// they follow the CPU's vendor, so one machine runs one of the two. The setting itself switches
// each way and returns to the vendor's default. The GEMVs': the INT8 1-2 row streams with and
// without their software prefetch, and one FP16 activation row read as fp16 or as fp32 of the
// same rounded values, give the same results bit for bit. (The attention's:
// AttentionTiledMhaEitherTuning.)
TEST(Kernels8, StreamTuningEitherWay) {
  const StreamTuning vendor = vendor_stream_tuning();
  for (const bool v : {false, true}) {  // each choice set each way
    StreamTuning t;
    t.i8_prefetch = v;
    t.f16_one_row_f32_max_in = v ? 0 : 9000;
    t.mha_k_prefetch = v;
    t.i8_rows4 = !v;
    t.bf16_kv_dot = v;
    set_stream_tuning(t);
    EXPECT_EQ(stream_tuning().bf16_kv_dot, t.bf16_kv_dot);
    EXPECT_EQ(bf16_kv_dot_in_use(),
              v && has_avx512_bf16() && active_isa() == Isa::avx512);  // allow_kv_dot is on
    EXPECT_EQ(stream_tuning().i8_prefetch, t.i8_prefetch);
    EXPECT_EQ(stream_tuning().i8_rows4, t.i8_rows4);
    EXPECT_EQ(stream_tuning().f16_one_row_f32_max_in, t.f16_one_row_f32_max_in);
    EXPECT_EQ(stream_tuning().mha_k_prefetch, t.mha_k_prefetch);
  }
  reset_stream_tuning();
  EXPECT_EQ(stream_tuning().i8_prefetch, vendor.i8_prefetch);
  EXPECT_EQ(stream_tuning().f16_one_row_f32_max_in, vendor.f16_one_row_f32_max_in);
  EXPECT_EQ(stream_tuning().mha_k_prefetch, vendor.mha_k_prefetch);
  EXPECT_EQ(stream_tuning().i8_rows4, vendor.i8_rows4);
  EXPECT_EQ(stream_tuning().bf16_kv_dot, vendor.bf16_kv_dot);
  uint32_t seed = 950;
  for (WType type : {WType::f16, WType::i8, WType::i8a8})
    for (const int64_t m : {1, 2})
      for (const int64_t n_in : {int64_t(2048), int64_t(8192 + 64)}) {
        if (type != WType::f16 && !gemv_int8_dot()) continue;  // no interleaved VNNI GEMVs here
        const LinearData d = make_weight({type, 520, n_in, type != WType::f16}, seed++);
        const std::vector<float> x = random_f32(size_t(m * n_in), seed++);
        std::vector<float> y[2];
        for (int on = 0; on < 2; ++on) {
          StreamTuning s = vendor;
          s.i8_prefetch = on != 0;
          s.f16_one_row_f32_max_in = on ? 0 : n_in;  // fp16 or fp32 activations
          set_stream_tuning(s);
          y[on].assign(size_t(m * 520), kNaN);
          gemv(d.w, x.data(), m, y[on].data());
        }
        reset_stream_tuning();
        for (size_t i = 0; i < y[0].size(); ++i) {
          ASSERT_FALSE(std::isnan(y[0][i])) << type_name(type) << " m=" << m << " n_in=" << n_in;
          ASSERT_EQ(y[1][i], y[0][i])
              << type_name(type) << " m=" << m << " n_in=" << n_in << " " << i;
        }
      }
}

// More columns than a panel (kernels.hpp, kRows4Panel): panels one after the other, the last one
// narrower, each interleaved in fours over its own width; copied back row-major whole.
TEST(Fill, RowsInterleavedInFoursInPanels) {
  const int64_t n_out = 8, n_in = 2 * kRows4Panel + 192;
  std::vector<int8_t> a(size_t(n_out * n_in));
  for (size_t i = 0; i < a.size(); ++i) a[i] = int8_t(i * 37 % 251 - 125);
  std::vector<int8_t> b = a;
  interleave_rows4(b.data(), n_out, n_in);
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t k = 0; k < n_in; ++k)
      ASSERT_EQ(b[size_t(i8_offset(true, n_out, n_in, r, k))], a[size_t(r * n_in + k)])
          << r << " " << k;
  // Row 5, column 2 * kRows4Panel + 70 (the last panel, 192 wide, piece 1): at the panel's start
  // 2 * kRows4Panel * n_out, then group 1 (4 * 192), piece 1 (256), row 1 of the group (64), 6.
  EXPECT_EQ(b[size_t(2 * kRows4Panel * n_out + 4 * 192 + 256 + 64 + 6)],
            a[size_t(5 * n_in + 2 * kRows4Panel + 70)]);
  // Row 2, column kRows4Panel + 130: the middle panel (full width), group 0, piece 2, row 2.
  EXPECT_EQ(b[size_t(kRows4Panel * n_out + 256 * 2 + 64 * 2 + 2)],
            a[size_t(2 * n_in + kRows4Panel + 130)]);
  std::vector<float> scales(size_t(n_out), 1.0f);
  const Weight w{b.data(), scales.data(), WType::i8, n_out, n_in, true};
  std::vector<int8_t> buf;
  detail::row_major_rows(w, 0, n_out, buf);
  EXPECT_EQ(buf, a);
}

TEST(Fill, RowsInterleavedInFoursAndCopiedBack) {
  const int64_t n_out = 12, n_in = 192;
  std::vector<int8_t> a(size_t(n_out * n_in));
  for (size_t i = 0; i < a.size(); ++i) a[i] = int8_t(i * 37 % 251 - 125);
  std::vector<int8_t> b = a;
  ASSERT_TRUE(rows4_fits(n_out, n_in));
  EXPECT_FALSE(rows4_fits(10, n_in));
  EXPECT_FALSE(rows4_fits(n_out, 96));
  interleave_rows4(b.data(), n_out, n_in);
  EXPECT_NE(a, b);
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t k = 0; k < n_in; ++k)
      ASSERT_EQ(b[size_t(i8_offset(true, n_out, n_in, r, k))], a[size_t(r * n_in + k)])
          << r << " " << k;
  // The layout as documented: row 4g + i, piece c at 4g * n_in + 256c + 64i.
  EXPECT_EQ(b[size_t(4 * n_in + 256 * 2 + 64 * 3 + 5)], a[size_t(7 * n_in + 2 * 64 + 5)]);
  // Rows 3-8 copied back row-major (the paths without an interleaved form), scales from row 3.
  std::vector<float> scales(size_t(n_out), 0.0f);
  std::iota(scales.begin(), scales.end(), 1.0f);
  const Weight w{b.data(), scales.data(), WType::i8, n_out, n_in, true};
  std::vector<int8_t> buf;
  const Weight v = detail::row_major_rows(w, 3, 9, buf);
  EXPECT_FALSE(v.rows4);
  EXPECT_EQ(v.n_out, n_out);  // the output's row stride
  EXPECT_EQ(v.scales[0], 4.0f);
  EXPECT_EQ(buf, std::vector<int8_t>(a.begin() + 3 * n_in, a.begin() + 9 * n_in));
}

// Weights written straight into the interleaved layout: a synthetic fill is byte for byte a
// row-major fill interleaved in place, and a packed row-major matrix holds every element at its
// documented offset; one panel or several (the last one narrower), on every thread count; every
// byte of the destination is written (poisoned first).
TEST(Fill, StraightIntoRowsInterleavedInFours) {
  for (const int64_t n_in : {int64_t(192), 2 * kRows4Panel + 192}) {
    for (const int threads : {1, 3}) {
      SCOPED_TRACE("n_in " + std::to_string(n_in) + ", threads " + std::to_string(threads));
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      const int64_t n_out = 12;
      std::vector<int8_t> want(size_t(n_out * n_in)), got(want.size(), int8_t(-128));
      std::vector<float> want_s(static_cast<size_t>(n_out)), got_s(want_s.size(), kNaN);
      fill_i8(want.data(), want_s.data(), n_out, n_in, 99, 0.25f);
      const std::vector<int8_t> row_major = want;
      interleave_rows4(want.data(), n_out, n_in);
      fill_i8(got.data(), got_s.data(), n_out, n_in, 99, 0.25f, true);
      EXPECT_EQ(got, want);
      EXPECT_EQ(got_s, want_s);
      std::vector<int8_t> packed(want.size(), int8_t(-128));
      pack_rows4(row_major.data(), packed.data(), n_out, n_in);
      for (int64_t r = 0; r < n_out; ++r)
        for (int64_t k = 0; k < n_in; ++k)
          ASSERT_EQ(packed[size_t(i8_offset(true, n_out, n_in, r, k))],
                    row_major[size_t(r * n_in + k)])
              << r << " " << k;
      omp_set_num_threads(saved);
    }
  }
}

TEST_P(Kernels, SyncStatsCountEachParallelRegion) {
  // One GEMV of several chunks and one GEMM: one parallel region each, run by every thread, with
  // non-negative late starts and barrier waits below the wall time.
  const int64_t n_out = 512, n_in = 1024;  // 1 MB of fp16 weights: four 256 KB chunks
  std::vector<uint16_t> wd(size_t(n_out * n_in));
  fill_f16(wd.data(), n_out * n_in, 5, 0.1f);
  const Weight w{wd.data(), nullptr, WType::f16, n_out, n_in};
  std::vector<float> x(size_t(64 * n_in)), y(size_t(64 * n_out));
  fill_f32(x.data(), int64_t(x.size()), 6, 0.0f, 1.0f);
  take_sync_stats();
  const auto t0 = std::chrono::steady_clock::now();
  gemv(w, x.data(), 1, y.data());
  gemm(w, x.data(), 64, y.data());
  const double wall_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  const SyncStats s = take_sync_stats();
  EXPECT_EQ(s.regions, 2);
  EXPECT_EQ(s.thread_regions, 2 * threads_);
  EXPECT_GE(s.fork_ns, 0);
  EXPECT_GE(s.wait_ns, 0);
  // Wall-equivalent (each region's thread time over its team): never more than the wall time,
  // however the threads were scheduled.
  EXPECT_LT(s.fork_ns + s.wait_ns, wall_ns);
  // Taken: the next take starts from zero.
  const SyncStats again = take_sync_stats();
  EXPECT_EQ(again.regions, 0);
  EXPECT_EQ(again.wait_ns, 0);
}

// The team's time off its CPUs: threads asleep are off them for as long as they sleep, threads
// spinning are not but for what the machine takes meanwhile: other processes (another test, run
// alongside: the run-queue wait, runq_ns, says how much) or the hypervisor (up to twenty tries, one
// of which must lose little besides the run-queue wait: a 2-vCPU guest here lost bursts of ~35 ms
// every few seconds; with five tries the test failed once under ctest -j2, while the host had
// halved the guest's memory bandwidth, and passed alone); the first call of a thread, or of a
// changed team, starts the count.
TEST(OffCpu, CountsTheTeamsTimeNotRunning) {
  const int saved = omp_get_max_threads();
  for (int n : {1, std::min(2, std::max(1, int(std::thread::hardware_concurrency())))}) {
    SCOPED_TRACE("threads " + std::to_string(n));
    omp_set_num_threads(n);
    EXPECT_FALSE(take_offcpu_stats().available);  // a new team: counting starts here
    const OffCpuStats first = take_offcpu_stats();
    ASSERT_TRUE(first.available);
    EXPECT_EQ(first.threads, n);
    EXPECT_GE(first.offcpu_ns, 0);
    EXPECT_LE(first.offcpu_ns, first.wall_ns);
    take_offcpu_stats();
    constexpr double kMs = 1e6;
#pragma omp parallel num_threads(n)
    std::this_thread::sleep_for(std::chrono::milliseconds(80));
    const OffCpuStats slept = take_offcpu_stats();
    ASSERT_TRUE(slept.available);
    EXPECT_GE(slept.offcpu_ns, 75 * kMs);
    EXPECT_LE(slept.offcpu_ns, slept.wall_ns);
    EXPECT_GE(slept.runq_ns, 0);
    EXPECT_LE(slept.runq_ns, slept.offcpu_ns);
    double least = 1e300;
    for (int attempt = 0; attempt < 20 && least >= 20 * kMs; ++attempt) {
      take_offcpu_stats();
#pragma omp parallel num_threads(n)
      {
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(80)) {
        }
      }
      const OffCpuStats spun = take_offcpu_stats();
      ASSERT_TRUE(spun.available);
      EXPECT_GE(spun.wall_ns, 80 * kMs);
      EXPECT_LE(spun.runq_ns, spun.offcpu_ns);
      least = std::min(least, spun.offcpu_ns - spun.runq_ns);
    }
    EXPECT_LT(least, 20 * kMs);
  }
  omp_set_num_threads(saved);
}

// matmul_group (q, k, v; gate, up) computes each product exactly as matmul does, bit for bit, in
// one parallel region (the GEMV with several chunks, the AVX-512 GEMM); weights of another n_in
// are applied one by one, still exactly.
TEST_P(Kernels, LinearGroupMatchesOneByOne) {
  uint32_t seed = 700;
  for (WType t : {WType::f16, WType::i8, WType::i8a8})
    for (int64_t m : {1, 5, 12, 33, 70}) {
      // n_in 600: fp16 rows of 1,200 bytes, 216-row chunks, so the second weight has two and,
      // on two threads, the first run of chunks (half of the four) spans the first weight and
      // the second's first chunk: one kernel call each.
      const LinearData a = make_weight({t, 300, 600}, seed++),
                       b = make_weight({t, 40, 600}, seed++), c = make_weight({t, 7, 600}, seed++),
                       d = make_weight({t, 9, 64}, seed++);
      const std::vector<float> x = random_f32(size_t(m * 600), seed++);
      for (const bool mixed : {false, true}) {
        SCOPED_TRACE(std::string(type_name(t)) + " m=" + std::to_string(m) +
                     (mixed ? " mixed n_in" : ""));
        const LinearData& third = mixed ? d : c;
        const Weight ws[] = {b.w, a.w, third.w};
        std::vector<std::vector<float>> want(3), got(3);
        float* ys[3];
        for (int i = 0; i < 3; ++i) {
          want[size_t(i)].assign(size_t(m * ws[i].n_out), kNaN);
          got[size_t(i)].assign(size_t(m * ws[i].n_out), kNaN);
          ys[i] = got[size_t(i)].data();
        }
        // (The mixed case's third weight reads x as rows of 64.)
        for (int i = 0; i < 3; ++i) matmul(ws[i], x.data(), m, want[size_t(i)].data());
        take_sync_stats();
        matmul_group(ws, 3, x.data(), m, ys);
        const SyncStats st = take_sync_stats();
        for (int i = 0; i < 3; ++i)
          EXPECT_EQ(0, std::memcmp(want[size_t(i)].data(), got[size_t(i)].data(),
                                   want[size_t(i)].size() * sizeof(float)))
              << "weight " << i;
        // One region: the GEMV (m <= 16 here is one pass) and the AVX-512 and AVX2 GEMMs; the
        // portable GEMM (m > 8 off AVX-512) runs one per weight, as does a mixed group.
        const Isa isa = std::get<0>(GetParam());
        if (!mixed) {
          EXPECT_EQ(st.regions, isa != Isa::scalar || m <= 8 ? 1 : 3);
        }
      }
    }
}

// More weights than one parallel region takes (kMatmulGroupMax): run in groups, still exact.
TEST_P(Kernels, LinearGroupLargerThanOneRegion) {
  const int n = kMatmulGroupMax + 1;
  for (WType t : {WType::f16, WType::i8, WType::i8a8})
    for (int64_t m : {3, 40}) {
      std::vector<LinearData> d;
      std::vector<Weight> ws;
      for (int i = 0; i < n; ++i) d.push_back(make_weight({t, 20 + i, 48}, uint32_t(800 + i)));
      for (const auto& e : d) ws.push_back(e.w);
      const std::vector<float> x = random_f32(size_t(m * 48), 899);
      std::vector<std::vector<float>> want(n), got(n);
      std::vector<float*> ys;
      for (int i = 0; i < n; ++i) {
        want[size_t(i)].assign(size_t(m * ws[size_t(i)].n_out), kNaN);
        got[size_t(i)].assign(want[size_t(i)].size(), kNaN);
        matmul(ws[size_t(i)], x.data(), m, want[size_t(i)].data());
        ys.push_back(got[size_t(i)].data());
      }
      matmul_group(ws.data(), n, x.data(), m, ys.data());
      for (int i = 0; i < n; ++i)
        EXPECT_EQ(want[size_t(i)], got[size_t(i)]) << "weight " << i << " m=" << m;
    }
}

TEST_P(Kernels, LinearLongerThanTheLongestRun) {
  // A thread's run of chunks is capped at 16 (4 MB): 1,100 x 4,096 fp16 (32-row chunks) and
  // 2,200 x 4,096 int8 (64-row chunks) are 35 chunks each, several capped runs on two threads.
  check_linear({WType::f16, 1100, 4096}, 1, 950);
  check_linear({WType::i8, 2200, 4096}, 1, 951);
  check_linear({WType::f16, 1100, 4096}, 3, 952);
}

TEST_P(Kernels, LinearEveryDecodeBatch) {
  // Every m the GEMV takes in one pass over the weights (1..16: one or two groups of activation
  // rows per band of weight rows) plus the first one past it. 37 x 301 is one chunk and one band;
  // 61 x 4113 (fp16: 28-row chunks in 12-row bands, so partial bands and chunks; int8: past the
  // VNNI path's 4096-weight flush) is several of each, run on both threads.
  uint32_t seed = 300;
  for (WType t : {WType::f16, WType::i8, WType::i8a8})
    for (int64_t m = 1; m <= 17; ++m) {
      check_linear({t, 37, 301}, m, seed++);
      check_linear({t, 61, 4113}, m, seed++);
    }
}

// W8A8 against the product with the unrounded activations (the FP32 reference the dtype is judged
// by): each activation moves by at most half a step (max|x| / 254), so each output by at most that
// times sum|w| (plus fp32 rounding); on uniform random activations the error is ~0.4% of the
// outputs' RMS (step / sqrt(12) against sqrt(1/3)), and must stay below 1%. An activation row with
// one large outlier coarsens its step: still inside the bound.
TEST_P(Kernels, LinearW8A8WithinHalfAStep) {
  const int64_t n_out = 64, n_in = 1000;
  for (int64_t m : {1, 5, 8, 40}) {
    const LinearData d = make_weight({WType::i8a8, n_out, n_in}, uint32_t(900 + m));
    std::vector<float> x = random_f32(size_t(m * n_in), uint32_t(950 + m));
    x[size_t(m - 1) * size_t(n_in) + 17] = 20.0f;  // the last row: one outlier
    std::vector<float> y(size_t(m * n_out), kNaN);
    matmul(d.w, x.data(), m, y.data());
    double err2 = 0, ref2 = 0;
    for (int64_t i = 0; i < m; ++i) {
      double mx = 0;
      for (int64_t k = 0; k < n_in; ++k)
        mx = std::max(mx, double(std::fabs(x[size_t(i * n_in + k)])));
      for (int64_t o = 0; o < n_out; ++o) {
        double ref = 0, sw = 0, sxw = 0;
        for (int64_t k = 0; k < n_in; ++k) {
          const double w = d.wd[size_t(o * n_in + k)];
          ref += double(x[size_t(i * n_in + k)]) * w;
          sw += std::fabs(w);
          sxw += std::fabs(double(x[size_t(i * n_in + k)]) * w);
        }
        const double err = std::fabs(double(y[size_t(i * n_out + o)]) - ref);
        EXPECT_LE(err, 0.5 * mx / 127.0 * sw * (1 + 1e-4) + 1e-5 * sxw)
            << "m=" << m << " row " << i << " output " << o;
        if (i < m - 1 || m == 1) {  // the rows without the outlier (m = 1: it is the only row)
          err2 += err * err;
          ref2 += ref * ref;
        }
      }
    }
    if (m > 1) {
      EXPECT_LT(std::sqrt(err2 / ref2), 0.01) << "m=" << m;
    }
    EXPECT_GT(std::sqrt(err2 / ref2), 0.0) << "m=" << m << ": the activations were not rounded";
  }
}

// ---- attention ----------------------------------------------------------------------------------
struct AttnCase {
  int64_t n_seq, n_new, pos0, ctx_cap;
  int n_heads, n_kv_heads, hd;
  int64_t window = 0;  // sliding window (keys); 0: none
  KvType kv = KvType::f16;
  KLayout kl = KLayout::rows;  // the K cache's (tiled16: ctx_cap a multiple of 16)
  float value(uint16_t x) const { return kv == KvType::bf16 ? bf16_to_float(x) : half_to_float(x); }
  uint16_t store(float x) const { return kv == KvType::bf16 ? float_to_bf16(x) : float_to_half(x); }
  uint16_t nan() const { return kv == KvType::bf16 ? uint16_t(0x7fc0) : kHalfNaN; }
  // The first key a query at position p sees.
  int64_t first_key(int64_t p) const { return window > 0 && p >= window ? p - window + 1 : 0; }
};

// Double-precision causal GQA over a cache of values kc, vc [n_seq * ctx_cap, kv_dim], keys
// [first_key(p), p] for a query at position p.
std::vector<double> attention_ref(const AttnCase& c, const std::vector<float>& q,
                                  const std::vector<double>& kc, const std::vector<double>& vc) {
  const int64_t kv_dim = int64_t(c.n_kv_heads) * c.hd;
  const int group = c.n_heads / c.n_kv_heads;
  std::vector<double> out(size_t(c.n_seq * c.n_new * c.n_heads * c.hd));
  for (int64_t s = 0; s < c.n_seq; ++s)
    for (int64_t t = 0; t < c.n_new; ++t)
      for (int h = 0; h < c.n_heads; ++h) {
        const int64_t row = (s * c.n_new + t) * c.n_heads + h;
        const int kvh = h / group;
        const int64_t n_keys = c.pos0 + t + 1, first = c.first_key(c.pos0 + t);
        std::vector<double> sc(static_cast<size_t>(n_keys), -INFINITY);
        double mx = -1e300;
        for (int64_t j = first; j < n_keys; ++j) {
          double dot = 0;
          for (int d = 0; d < c.hd; ++d)
            dot += double(q[size_t(row * c.hd + d)]) *
                   kc[size_t((s * c.ctx_cap + j) * kv_dim + kvh * c.hd + d)];
          sc[size_t(j)] = dot / std::sqrt(double(c.hd));
          mx = std::max(mx, sc[size_t(j)]);
        }
        double den = 0;
        for (auto& v : sc) den += (v = std::exp(v - mx));  // exp(-inf) = 0 outside the window
        for (int d = 0; d < c.hd; ++d) {
          double o = 0;
          for (int64_t j = first; j < n_keys; ++j)
            o += sc[size_t(j)] * vc[size_t((s * c.ctx_cap + j) * kv_dim + kvh * c.hd + d)];
          out[size_t(row * c.hd + d)] = o / den;
        }
      }
  return out;
}

// The same over a 2-byte cache (its values are exact in double).
std::vector<double> attention_ref(const AttnCase& c, const std::vector<float>& q,
                                  const std::vector<uint16_t>& kc,
                                  const std::vector<uint16_t>& vc) {
  std::vector<double> kd(kc.size()), vd(vc.size());
  for (size_t i = 0; i < kc.size(); ++i) {
    kd[i] = c.value(kc[i]);
    vd[i] = c.value(vc[i]);
  }
  return attention_ref(c, q, kd, vd);
}

// The kernels' one attention API is the paged one; these tests use a contiguous cache
// [n_seq, ctx_cap, kv_dim], which is a paged one with one block of ctx_cap positions per sequence.
struct Contiguous {
  std::vector<int32_t> query_start, positions, tables, slots;
  RaggedBatch batch;
  Contiguous(int64_t n_seq, int64_t n_new, int64_t pos0, int64_t ctx_cap) {
    for (int64_t s = 0; s <= n_seq; ++s) query_start.push_back(int32_t(s * n_new));
    for (int64_t s = 0; s < n_seq; ++s) {
      tables.push_back(int32_t(s));
      for (int64_t t = 0; t < n_new; ++t) {
        positions.push_back(int32_t(pos0 + t));
        slots.push_back(int32_t(s * ctx_cap + pos0 + t));
      }
    }
    batch = {n_seq, query_start.data(), positions.data(), tables.data(), 1, ctx_cap};
  }
};

// k, v: [n_seq * n_new, kv_dim] fp32 (sequence-major); token t of sequence s goes to position
// pos0 + t of the contiguous cache of a 2-byte type (whose rows do not depend on the heads: one
// head of kv_dim).
void kv_store(const float* k, const float* v, int64_t n_seq, int64_t n_new, int64_t pos0,
              int64_t ctx_cap, int64_t kv_dim, uint16_t* k_cache, uint16_t* v_cache,
              KvType kv = KvType::f16, KLayout kl = KLayout::rows) {
  const Contiguous c(n_seq, n_new, pos0, ctx_cap);
  kv_store_paged(k, v, n_seq * n_new, c.slots.data(), 1, int(kv_dim), kv, k_cache, v_cache, kl);
}

// q, out: [n_seq * n_new, n_heads * hd] fp32; token t of sequence s is at position pos0 + t.
void attention(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, int64_t n_seq,
               int64_t n_new, int64_t pos0, int64_t ctx_cap, int n_heads, int n_kv_heads, int hd,
               float* out, int64_t window, KvType kv = KvType::f16, KLayout kl = KLayout::rows) {
  const Contiguous c(n_seq, n_new, pos0, ctx_cap);
  attention_paged(q, kv, k_cache, v_cache, c.batch, n_heads, n_kv_heads, hd, window, out, kl);
}

// A K cache of rows [rows, kv_dim] in layout kl (to_layout), and back (from_layout).
std::vector<uint16_t> to_layout(const std::vector<uint16_t>& k, int64_t kv_dim, KLayout kl) {
  std::vector<uint16_t> out(k.size());
  for (int64_t r = 0; r < int64_t(k.size()) / kv_dim; ++r)
    for (int64_t i = 0; i < kv_dim; ++i)
      out[size_t(k_cache_index(kl, r, i, kv_dim))] = k[size_t(r * kv_dim + i)];
  return out;
}
std::vector<uint16_t> from_layout(const std::vector<uint16_t>& k, int64_t kv_dim, KLayout kl) {
  std::vector<uint16_t> out(k.size());
  for (int64_t r = 0; r < int64_t(k.size()) / kv_dim; ++r)
    for (int64_t i = 0; i < kv_dim; ++i)
      out[size_t(r * kv_dim + i)] = k[size_t(k_cache_index(kl, r, i, kv_dim))];
  return out;
}

// atol, rtol: the output's tolerance against the double-precision reference over the same cache.
void check_attention(const AttnCase& c, uint32_t seed, double atol = 2e-5, double rtol = 1e-5) {
  const int64_t kv_dim = int64_t(c.n_kv_heads) * c.hd;
  // Cache: random halves for the positions already written by earlier steps [0, pos0); NaN for
  // everything later, so a kernel that reads a position it must not see (a causal-mask bug, or a
  // position kv_store did not write) produces NaN. With a sliding window, the positions no new
  // token sees are NaN too.
  std::vector<uint16_t> kc(size_t(c.n_seq * c.ctx_cap * kv_dim), c.nan()), vc = kc;
  std::vector<uint16_t> k_old = random_f16(kc.size(), seed),
                        v_old = random_f16(kc.size(), seed + 1);
  if (c.kv == KvType::bf16)
    for (size_t i = 0; i < k_old.size(); ++i) {
      k_old[i] = float_to_bf16(half_to_float(k_old[i]));
      v_old[i] = float_to_bf16(half_to_float(v_old[i]));
    }
  const int64_t first_seen = c.first_key(c.pos0);
  for (int64_t s = 0; s < c.n_seq; ++s)
    for (int64_t p = first_seen; p < c.pos0; ++p)
      for (int64_t i = 0; i < kv_dim; ++i) {
        const size_t at = size_t((s * c.ctx_cap + p) * kv_dim + i);
        kc[at] = k_old[at];
        vc[at] = v_old[at];
      }
  const int64_t rows = c.n_seq * c.n_new;
  // Scores ~ N(0, 3^2) after scaling: a peaked softmax, so the max-subtraction matters.
  const std::vector<float> k_new = random_f32(size_t(rows * kv_dim), seed + 2, -3, 3);
  const std::vector<float> v_new = random_f32(size_t(rows * kv_dim), seed + 3);
  const std::vector<float> q = random_f32(size_t(rows * c.n_heads * c.hd), seed + 4, -3, 3);
  // The K cache in the case's layout while kv_store and the kernel use it; kc: its rows.
  std::vector<uint16_t> kp = to_layout(kc, kv_dim, c.kl);
  kv_store(k_new.data(), v_new.data(), c.n_seq, c.n_new, c.pos0, c.ctx_cap, kv_dim, kp.data(),
           vc.data(), c.kv, c.kl);
  kc = from_layout(kp, kv_dim, c.kl);
  // kv_store: exact round-to-nearest-even values at pos0 + t, nothing else touched.
  for (int64_t s = 0; s < c.n_seq; ++s)
    for (int64_t p = 0; p < c.ctx_cap; ++p)
      for (int64_t i = 0; i < kv_dim; ++i) {
        const size_t at = size_t((s * c.ctx_cap + p) * kv_dim + i);
        uint16_t want_k = c.nan(), want_v = c.nan();
        if (p < first_seen) {
        } else if (p < c.pos0) {
          want_k = k_old[at];
          want_v = v_old[at];
        } else if (p < c.pos0 + c.n_new) {
          const size_t src = size_t((s * c.n_new + p - c.pos0) * kv_dim + i);
          want_k = c.store(k_new[src]);
          want_v = c.store(v_new[src]);
        }
        ASSERT_EQ(kc[at], want_k) << "k_cache s=" << s << " pos=" << p << " i=" << i;
        ASSERT_EQ(vc[at], want_v) << "v_cache s=" << s << " pos=" << p << " i=" << i;
      }
  const std::vector<double> ref = attention_ref(c, q, kc, vc);
  std::vector<float> out(ref.size(), kNaN);
  attention(q.data(), kp.data(), vc.data(), c.n_seq, c.n_new, c.pos0, c.ctx_cap, c.n_heads,
            c.n_kv_heads, c.hd, out.data(), c.window, c.kv, c.kl);
  // Outputs are convex combinations of |v| <= 1: fp32 dot products of hd terms, fp32 exp
  // (vectorised: a few ulp) and fp32 sums over <= a few hundred keys give errors ~1e-6.
  EXPECT_TRUE(close(ref, out.data(), atol, rtol))
      << "n_seq=" << c.n_seq << " n_new=" << c.n_new << " pos0=" << c.pos0 << " heads=" << c.n_heads
      << "/" << c.n_kv_heads << " hd=" << c.hd << " window=" << c.window;
}

TEST_P(Kernels, AttentionGqaCausal) {
  check_attention({2, 5, 7, 20, 8, 2, 64}, 11);      // GQA 8/2, prefill chunk at pos0 > 0
  check_attention({1, 1, 0, 4, 8, 2, 64}, 12);       // first token: one key
  check_attention({3, 1, 150, 160, 4, 4, 128}, 13);  // decode over several key blocks (MHA)
  check_attention({1, 40, 90, 140, 6, 3, 40}, 14);   // hd not a multiple of 16, 3 token chunks
  check_attention({2, 3, 1, 8, 2, 1, 8}, 15);        // MQA, tiny head
  check_attention({1, 4, 300, 310, 8, 2, 64}, 16);   // small n_new, GQA, many key chunks
  check_attention({2, 2, 70, 80, 4, 1, 40}, 17);     // chunk merge, MQA, hd % 16 != 0
  // The decode paths' head tiles: without GQA, hd % 16 != 0 (masked last vector) over 3 tokens,
  // hd 256 (two 8-vector passes) and hd 8; groups of 3 (a pair and a lone head) and 16 (two
  // 8-head P·V tiles).
  check_attention({2, 3, 100, 120, 4, 4, 40}, 18);
  check_attention({1, 1, 70, 80, 2, 2, 256}, 19);
  check_attention({2, 1, 30, 40, 2, 2, 8}, 20);
  check_attention({1, 2, 200, 210, 6, 2, 64}, 21);
  check_attention({1, 1, 100, 110, 16, 1, 64}, 22);
  // Without GQA, heads beyond one 16-head reduction (16 + 4) over two tokens, hd % 16 != 0.
  check_attention({1, 2, 100, 110, 20, 20, 40}, 23);
  // GQA decode with K and V converted in registers: groups of 8 (tinyllama's: 8-head score
  // tiles of 2 keys) and 7 (4 + 2 + 1 heads), over two tokens, hd 64 and hd 40 (masked).
  check_attention({1, 2, 200, 210, 16, 2, 64}, 24);
  check_attention({2, 1, 130, 140, 14, 2, 40}, 25);
  // Decodes split over keys at tinyllama's heads (32 on 4, hd 64), on 1 and on 2 threads: one
  // sequence of 2,101 keys cut at key 1,040 (a multiple of 16, not of the 64-key blocks); two such
  // sequences sharing 4 chunks, each cut there.
  check_attention({1, 1, 2100, 2110, 32, 4, 64}, 26);
  check_attention({2, 1, 2100, 2110, 32, 4, 64}, 27);
}

// A bf16 cache: stored exactly (round to nearest even) and read by the widening paths (every
// ISA), and on AVX512-BF16 CPUs by the vdpbf16ps GQA decode, which rounds q and the probabilities
// to bf16 (2^-9 relative each): scores of ~N(0, 3^2) move by up to ~1e-2, the outputs (convex
// combinations of |v| <= 1) by about as much. The vdpbf16ps path is turned on by hand
// (StreamTuning::bf16_kv_dot; off by default on Intel, where it is slower).
TEST_P(Kernels, AttentionBf16Cache) {
  const KvType b = KvType::bf16;
  for (const bool dot : {false, true}) {
    SCOPED_TRACE(dot ? "vdpbf16ps allowed" : "widened");
    allow_kv_dot(dot);
    StreamTuning t = vendor_stream_tuning();
    t.bf16_kv_dot = true;
    set_stream_tuning(t);
    EXPECT_EQ(bf16_kv_dot_in_use(), dot && has_avx512_bf16() && active_isa() == Isa::avx512);
    const double atol = dot ? 6e-3 : 2e-5, rtol = dot ? 6e-3 : 1e-5;
    check_attention({2, 5, 7, 20, 8, 2, 64, 0, b}, 71, atol, rtol);      // prefill chunk
    check_attention({3, 1, 150, 160, 4, 4, 128, 0, b}, 72, atol, rtol);  // MHA decode
    // MHA decodes (key-major, widened): 20 heads (16 + 4 per reduction) over two tokens; a
    // window starting mid-block.
    check_attention({1, 2, 100, 110, 20, 20, 64, 0, b}, 80, atol, rtol);
    check_attention({2, 1, 300, 310, 4, 4, 96, 100, b}, 81, atol, rtol);
    // GQA decodes: groups of 8 over two tokens (odd key counts: a lone last key), 7 (4 + 2 + 1
    // heads), 16 (16-head score tiles, two 8-head P·V tiles); hd 256 (P·V in passes of 32-dim
    // chunks) and 96 (three chunks); a window starting mid-block; hd 40 (no vdpbf16ps path).
    check_attention({1, 2, 200, 210, 16, 2, 64, 0, b}, 73, atol, rtol);
    check_attention({2, 1, 130, 140, 14, 2, 64, 0, b}, 74, atol, rtol);
    check_attention({1, 1, 100, 110, 16, 1, 64, 0, b}, 75, atol, rtol);
    check_attention({1, 1, 70, 80, 4, 2, 256, 0, b}, 76, atol, rtol);
    check_attention({1, 1, 64, 70, 8, 2, 96, 0, b}, 77, atol, rtol);
    check_attention({1, 4, 300, 310, 8, 2, 64, 101, b}, 78, atol, rtol);
    check_attention({2, 1, 33, 40, 8, 2, 40, 0, b}, 79, atol, rtol);
  }
  allow_kv_dot(true);
  reset_stream_tuning();
}

// An int8 cache: kv_store_paged's slices (hd int8 values, then their fp32 scale) hold max |x| /
// 127 and values within half a step of x, and every path reads them back: the widening paths to
// the fp32 tolerance of the other caches, and on AVX512-VNNI CPUs the GQA decode's vpdpbusd
// scores, which round q to int8 per head (q ~ U(-3, 3) / 8 after the 1 / sqrt(hd): steps of
// ~3e-3, ~1e-2 on scores of N(0, 3^2) over 64 dimensions), moving the outputs (convex
// combinations of |v| <= 1) by up to ~1e-2 (1.4e-2 measured); its int16 P·V (hd 64, 128) adds
// ~3e-6.
void check_attention_i8(const AttnCase& c, uint32_t seed, double atol, double rtol) {
  ASSERT_EQ(c.kv, KvType::i8);
  const int64_t kv_dim = int64_t(c.n_kv_heads) * c.hd, rb = kv_row_bytes(c.kv, c.n_kv_heads, c.hd);
  const int64_t slice = c.hd + 4;
  // 0xff everywhere: values -1 with a NaN scale, so a slice read that was never written is NaN.
  std::vector<int8_t> kc(size_t(c.n_seq * c.ctx_cap * rb), int8_t(-1)), vc = kc;
  const int64_t first_seen = c.first_key(c.pos0);
  // Each sequence's positions [first_seen, pos0 + n_new): the old ones, then the new tokens.
  const int64_t n_old = c.pos0 - first_seen, rows = c.n_seq * c.n_new;
  const std::vector<float> k_old = random_f32(size_t(c.n_seq * n_old * kv_dim), seed, -3, 3),
                           v_old = random_f32(k_old.size(), seed + 1);
  if (n_old > 0) {
    std::vector<int32_t> slots;
    for (int64_t s = 0; s < c.n_seq; ++s)
      for (int64_t p = first_seen; p < c.pos0; ++p) slots.push_back(int32_t(s * c.ctx_cap + p));
    kv_store_paged(k_old.data(), v_old.data(), int64_t(slots.size()), slots.data(), c.n_kv_heads,
                   c.hd, c.kv, kc.data(), vc.data());
  }
  const std::vector<float> k_new = random_f32(size_t(rows * kv_dim), seed + 2, -3, 3);
  const std::vector<float> v_new = random_f32(size_t(rows * kv_dim), seed + 3);
  const std::vector<float> q = random_f32(size_t(rows * c.n_heads * c.hd), seed + 4, -3, 3);
  const Contiguous cb(c.n_seq, c.n_new, c.pos0, c.ctx_cap);
  kv_store_paged(k_new.data(), v_new.data(), rows, cb.slots.data(), c.n_kv_heads, c.hd, c.kv,
                 kc.data(), vc.data());
  // The stored slices against their sources; the values the reference reads.
  std::vector<double> kd(size_t(c.n_seq * c.ctx_cap * kv_dim), kNaN), vd = kd;
  for (int64_t s = 0; s < c.n_seq; ++s)
    for (int64_t p = 0; p < c.ctx_cap; ++p)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const int64_t at = (s * c.ctx_cap + p) * rb + h * slice;
        const float* src_k = nullptr;
        const float* src_v = nullptr;
        if (p >= first_seen && p < c.pos0) {
          const int64_t r = s * n_old + p - first_seen;
          src_k = &k_old[size_t(r * kv_dim + h * c.hd)];
          src_v = &v_old[size_t(r * kv_dim + h * c.hd)];
        } else if (p >= c.pos0 && p < c.pos0 + c.n_new) {
          const int64_t r = s * c.n_new + p - c.pos0;
          src_k = &k_new[size_t(r * kv_dim + h * c.hd)];
          src_v = &v_new[size_t(r * kv_dim + h * c.hd)];
        }
        for (int w = 0; w < 2; ++w) {
          const int8_t* x = (w == 0 ? kc.data() : vc.data()) + at;
          const float* src = w == 0 ? src_k : src_v;
          std::vector<double>& dst = w == 0 ? kd : vd;
          float scale;
          std::memcpy(&scale, x + c.hd, sizeof scale);
          if (!src) {  // not written: still the poison
            for (int64_t b = 0; b < slice; ++b)
              ASSERT_EQ(x[b], int8_t(-1)) << "s=" << s << " pos=" << p << " head=" << h;
            continue;
          }
          float amax = 0;
          for (int d = 0; d < c.hd; ++d) amax = std::max(amax, std::fabs(src[d]));
          ASSERT_EQ(scale, amax / 127.0f) << "s=" << s << " pos=" << p << " head=" << h;
          int top = 0;
          for (int d = 0; d < c.hd; ++d) {
            top = std::max(top, std::abs(int(x[d])));
            ASSERT_LE(std::fabs(double(x[d]) * scale - src[d]), (0.5 + 2e-5) * scale)
                << "s=" << s << " pos=" << p << " head=" << h << " d=" << d;
            dst[size_t((s * c.ctx_cap + p) * kv_dim + h * c.hd + d)] = double(x[d]) * scale;
          }
          ASSERT_EQ(top, 127) << "s=" << s << " pos=" << p << " head=" << h;
        }
      }
  const std::vector<double> ref = attention_ref(c, q, kd, vd);
  std::vector<float> out(ref.size(), kNaN);
  attention_paged(q.data(), c.kv, kc.data(), vc.data(), cb.batch, c.n_heads, c.n_kv_heads, c.hd,
                  c.window, out.data());
  EXPECT_TRUE(close(ref, out.data(), atol, rtol))
      << "n_seq=" << c.n_seq << " n_new=" << c.n_new << " pos0=" << c.pos0 << " heads=" << c.n_heads
      << "/" << c.n_kv_heads << " hd=" << c.hd << " window=" << c.window;
}

TEST_P(Kernels, AttentionInt8Cache) {
  const KvType i8 = KvType::i8;
  for (const bool dot : {false, true}) {
    SCOPED_TRACE(dot ? "vpdpbusd allowed" : "widened");
    allow_kv_dot(dot);
    const double tol = dot ? 2e-2 : 2e-5;
    check_attention_i8({2, 5, 7, 20, 8, 2, 64, 0, i8}, 91, tol, tol);       // prefill chunk
    check_attention_i8({3, 1, 150, 160, 4, 4, 128, 0, i8}, 92, tol, tol);   // MHA decode
    check_attention_i8({1, 2, 100, 110, 20, 20, 40, 0, i8}, 93, tol, tol);  // MHA, hd % 16 != 0
    check_attention_i8({1, 40, 90, 140, 6, 3, 40, 0, i8}, 94, tol, tol);    // prefill, hd 40
    // GQA decodes: tinyllama's group of 8 over two tokens; 7 (4 + 2 + 1 heads); 16 (two 8-head
    // tiles); hd 128 (two 64-byte groups), 40 and 36 (a masked last group; hd % 16 != 0); a
    // window starting mid-block; MQA; split over keys at tinyllama's heads (2,101 keys).
    check_attention_i8({1, 2, 200, 210, 16, 2, 64, 0, i8}, 95, tol, tol);
    check_attention_i8({2, 1, 130, 140, 14, 2, 64, 0, i8}, 96, tol, tol);
    check_attention_i8({1, 1, 100, 110, 16, 1, 64, 0, i8}, 97, tol, tol);
    check_attention_i8({1, 1, 70, 80, 4, 2, 128, 0, i8}, 98, tol, tol);
    check_attention_i8({2, 1, 33, 40, 8, 2, 40, 0, i8}, 99, tol, tol);
    check_attention_i8({1, 3, 50, 60, 8, 4, 36, 0, i8}, 100, tol, tol);
    check_attention_i8({1, 4, 300, 310, 8, 2, 64, 101, i8}, 101, tol, tol);
    check_attention_i8({2, 3, 1, 8, 2, 1, 8, 0, i8}, 102, tol, tol);
    check_attention_i8({1, 1, 2100, 2110, 32, 4, 64, 0, i8}, 103, tol, tol);
    // MHA decodes (widened) at hd 64 and 128: 20 heads (16 + 4 per reduction) over two tokens;
    // three tokens; a window starting at an odd key; split over keys (2,101).
    check_attention_i8({1, 2, 100, 110, 20, 20, 64, 0, i8}, 104, tol, tol);
    check_attention_i8({1, 3, 150, 160, 4, 4, 64, 0, i8}, 105, tol, tol);
    check_attention_i8({2, 1, 300, 310, 4, 4, 128, 100, i8}, 106, tol, tol);
    check_attention_i8({1, 1, 2100, 2110, 8, 8, 64, 0, i8}, 107, tol, tol);
  }
  allow_kv_dot(true);
}

TEST_P(Kernels, AttentionSlidingWindow) {
  check_attention({1, 40, 0, 48, 8, 2, 64, 7}, 51);      // prefill, window < prompt
  check_attention({2, 20, 100, 130, 4, 2, 40, 70}, 52);  // prefill at pos0 > 0, across blocks
  check_attention({1, 70, 10, 90, 4, 4, 16, 64}, 53);    // window = one key block exactly
  check_attention({3, 1, 150, 160, 4, 4, 128, 64}, 54);  // decode, window inside the context
  check_attention({1, 1, 300, 310, 8, 2, 64, 100}, 55);  // decode, window starts mid-block
  check_attention({1, 4, 300, 310, 8, 2, 64, 1}, 56);    // each token sees only itself
  check_attention({2, 3, 200, 210, 6, 3, 40, 130}, 57);  // chunk merge under a window
  check_attention({2, 5, 7, 20, 8, 2, 64, 100}, 58);     // window larger than the context
}

// An fp16 K cache in 16-position tiles (the CPU backend's layout at block sizes of 16 and more):
// kv_store's scattered stores, the prefill tile's conversion of whole tiles, the decode's scores
// with the keys in the vector lanes (16, 8, 4, 2 and 1 heads a tile, hd % 16 != 0, hd 8), chunks
// and windows that start inside a tile.
TEST_P(Kernels, AttentionTiledK) {
  const KvType f = KvType::f16;
  const KLayout t = KLayout::tiled16;
  check_attention({2, 5, 7, 32, 8, 2, 64, 0, f, t}, 91);         // prefill chunk at pos0 > 0
  check_attention({1, 1, 0, 16, 8, 2, 64, 0, f, t}, 92);         // first token: one key
  check_attention({3, 1, 150, 160, 4, 4, 128, 0, f, t}, 93);     // MHA decode
  check_attention({1, 40, 90, 144, 6, 3, 40, 0, f, t}, 94);      // prefill, hd 40
  check_attention({2, 3, 1, 16, 2, 1, 8, 0, f, t}, 95);          // MQA, hd 8
  check_attention({2, 3, 100, 112, 4, 4, 40, 0, f, t}, 96);      // MHA over 3 tokens, hd 40
  check_attention({1, 1, 100, 112, 16, 1, 64, 0, f, t}, 97);     // 16 heads a tile
  check_attention({2, 1, 130, 144, 14, 2, 40, 0, f, t}, 98);     // 4 + 2 + 1 heads
  check_attention({1, 2, 200, 208, 6, 2, 64, 0, f, t}, 99);      // 2 + 1 heads, two tokens
  check_attention({1, 2, 100, 112, 20, 20, 40, 0, f, t}, 100);   // MHA, 20 heads
  check_attention({1, 1, 2100, 2112, 32, 4, 64, 0, f, t}, 101);  // tinyllama's heads, chunks
  check_attention({2, 1, 2100, 2112, 32, 4, 64, 0, f, t}, 102);
  check_attention({1, 1, 300, 320, 8, 2, 64, 100, f, t}, 103);  // window starts mid-tile
  check_attention({1, 4, 300, 320, 8, 2, 64, 1, f, t}, 104);    // each token sees only itself
  check_attention({2, 3, 200, 224, 6, 3, 40, 130, f, t}, 105);  // chunk merge under a window
  check_attention({2, 20, 100, 144, 4, 2, 40, 70, f, t}, 106);  // prefill under a window
  // AVX2's 6-row tiles and their 5-row remainder: a group of 5 (a decode, K and V converted in
  // the multiply-adds) and 11 tokens without GQA (widened).
  check_attention({2, 1, 60, 80, 10, 2, 64, 0, f, t}, 107);
  check_attention({1, 11, 20, 48, 2, 2, 40, 0, f, t}, 108);
}

// The prefill attention's tiles on the AMX-BF16 tiles (attention_amx_bf16_avx512.cpp: an fp16
// cache, hd a multiple of 32) where the CPU has them, and the multiply-add tiles with AMX
// switched off, against the same reference, in both K layouts: tiles of 15 rows (padded to 32),
// 512 and 48 (tinyllama's 8-head groups over 70 tokens), 40 (hd 128 without GQA), 512 + 18, hd 32
// and 256, chunks at positions inside a 64-key block, several blocks, windows that start
// mid-block, two sequences.
TEST_P(Kernels, AttentionPrefillAmxOnAndOff) {
  if (isa_ != Isa::avx512) GTEST_SKIP() << "the AMX and multiply-add tiles are AVX-512 paths";
  const KvType f = KvType::f16;
  uint32_t seed = 1400;
  for (const bool amx : {true, false}) {
    if (amx && !has_amx_bf16()) continue;  // said once below
    SCOPED_TRACE(amx ? "AMX on" : "AMX off");
    set_amx_enabled(amx);
    EXPECT_EQ(amx_f16_active(), amx);
    for (const KLayout kl : {KLayout::rows, KLayout::tiled16}) {
      check_attention({2, 5, 7, 32, 6, 2, 64, 0, f, kl}, seed++);       // 15 rows, pos0 > 0
      check_attention({1, 70, 500, 576, 32, 4, 64, 0, f, kl}, seed++);  // 64-row tiles, 9 blocks
      check_attention({1, 40, 90, 144, 4, 4, 128, 0, f, kl}, seed++);   // MHA, hd 128
      check_attention({2, 20, 100, 128, 4, 2, 32, 70, f, kl}, seed++);  // hd 32, window
      check_attention({1, 9, 60, 80, 2, 1, 256, 0, f, kl}, seed++);     // hd 256
      check_attention({1, 33, 0, 48, 8, 8, 64, 0, f, kl}, seed++);      // first chunk
      check_attention({1, 530, 0, 544, 2, 2, 64, 0, f, kl}, seed++);    // 512 + 18 rows
    }
  }
  set_amx_enabled(true);
  if (!has_amx_bf16()) GTEST_SKIP() << "no AMX-BF16 here (or the OS refused the tile state)";
}

// The same cache paged in blocks of bs positions, the physical blocks in a shuffled order: every
// path reads the same keys in the same order through the block table, so the outputs are
// bit-identical to the contiguous cache's (one block of ctx_cap positions per sequence).
void check_paged_matches_contiguous(const AttnCase& c, int64_t bs, uint32_t seed) {
  SCOPED_TRACE("block size " + std::to_string(bs) + ", heads " + std::to_string(c.n_heads) + "/" +
               std::to_string(c.n_kv_heads) + ", hd " + std::to_string(c.hd));
  const int64_t kv_dim = int64_t(c.n_kv_heads) * c.hd, qd = int64_t(c.n_heads) * c.hd;
  const int64_t nb = (c.ctx_cap + bs - 1) / bs;
  // Positions past the last query token hold NaN: a key read past the causal end shows.
  std::vector<uint16_t> kc = random_f16(size_t(c.n_seq * c.ctx_cap * kv_dim), seed),
                        vc = random_f16(kc.size(), seed + 1);
  for (int64_t s = 0; s < c.n_seq; ++s)
    for (int64_t p = c.pos0 + c.n_new; p < c.ctx_cap; ++p)
      for (int64_t i = 0; i < kv_dim; ++i)
        kc[size_t((s * c.ctx_cap + p) * kv_dim + i)] =
            vc[size_t((s * c.ctx_cap + p) * kv_dim + i)] = kHalfNaN;
  const std::vector<float> q = random_f32(size_t(c.n_seq * c.n_new * qd), seed + 2, -3, 3);
  std::vector<float> want(q.size(), kNaN), got(q.size(), kNaN);
  attention(q.data(), to_layout(kc, kv_dim, c.kl).data(), vc.data(), c.n_seq, c.n_new, c.pos0,
            c.ctx_cap, c.n_heads, c.n_kv_heads, c.hd, want.data(), c.window, c.kv, c.kl);

  std::vector<int32_t> table(size_t(c.n_seq * nb));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(seed + 3));
  std::vector<uint16_t> kp(size_t(c.n_seq * nb * bs * kv_dim), kHalfNaN), vp = kp;
  for (int64_t s = 0; s < c.n_seq; ++s)
    for (int64_t p = 0; p < c.ctx_cap; ++p) {
      const int64_t dst = (int64_t(table[size_t(s * nb + p / bs)]) * bs + p % bs) * kv_dim;
      const int64_t src = (s * c.ctx_cap + p) * kv_dim;
      std::copy_n(&kc[size_t(src)], kv_dim, &kp[size_t(dst)]);
      std::copy_n(&vc[size_t(src)], kv_dim, &vp[size_t(dst)]);
    }
  std::vector<int32_t> query_start, positions;
  for (int64_t s = 0; s <= c.n_seq; ++s) query_start.push_back(int32_t(s * c.n_new));
  for (int64_t s = 0; s < c.n_seq; ++s)
    for (int64_t t = 0; t < c.n_new; ++t) positions.push_back(int32_t(c.pos0 + t));
  const RaggedBatch batch{c.n_seq, query_start.data(), positions.data(), table.data(), nb, bs};
  attention_paged(q.data(), KvType::f16, to_layout(kp, kv_dim, c.kl).data(), vp.data(), batch,
                  c.n_heads, c.n_kv_heads, c.hd, c.window, got.data(), c.kl);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << "element " << i << ": " << got[i] << " vs " << want[i];
}

// The MHA decode over a tiled K cache with its K prefetch on and off (StreamTuning::mha_k_prefetch
// follows the CPU's vendor, so one machine would run only one of the two): each way against the
// reference, over several tiles per thread and with the keys ending mid-tile.
TEST_P(Kernels, AttentionTiledMhaEitherTuning) {
  const KvType f = KvType::f16;
  const KLayout t = KLayout::tiled16;
  for (const bool on : {false, true}) {
    SCOPED_TRACE(on ? "mha_k_prefetch on" : "mha_k_prefetch off");
    StreamTuning st = vendor_stream_tuning();
    st.mha_k_prefetch = on;
    set_stream_tuning(st);
    check_attention({1, 1, 1100, 1104, 8, 8, 128, 0, f, t}, 110);
    check_attention({2, 1, 150, 160, 4, 4, 128, 0, f, t}, 111);
    check_attention({1, 2, 300, 320, 6, 6, 40, 100, f, t}, 112);
  }
  reset_stream_tuning();
}

TEST_P(Kernels, AttentionPagedMatchesContiguous) {
  for (int64_t bs : {1, 5, 16}) {
    check_paged_matches_contiguous({2, 1, 300, 310, 8, 2, 64}, bs, 61);       // decode, GQA
    check_paged_matches_contiguous({2, 3, 150, 160, 4, 4, 40}, bs, 62);       // decode, MHA
    check_paged_matches_contiguous({1, 2, 200, 210, 6, 2, 64}, bs, 63);       // decode, group 3
    check_paged_matches_contiguous({1, 2, 300, 310, 8, 2, 64, 100}, bs, 64);  // decode, window
    check_paged_matches_contiguous({1, 20, 90, 120, 6, 3, 40}, bs, 65);       // prefill tile
  }
  // K in 16-position tiles, blocks of 16 and 32 positions (whole tiles): the same keys in the
  // same order as the contiguous tiled cache.
  const KvType f = KvType::f16;
  const KLayout t = KLayout::tiled16;
  for (int64_t bs : {16, 32}) {
    check_paged_matches_contiguous({2, 1, 300, 320, 8, 2, 64, 0, f, t}, bs, 66);
    check_paged_matches_contiguous({2, 3, 150, 160, 4, 4, 40, 0, f, t}, bs, 67);
    check_paged_matches_contiguous({1, 2, 300, 320, 8, 2, 64, 100, f, t}, bs, 68);
    check_paged_matches_contiguous({1, 20, 90, 128, 6, 3, 40, 0, f, t}, bs, 69);
  }
}

// A prompt processed in one prefill call and the same prompt fed one token at a time must give
// the same outputs for every token: same cache, same keys visible.
void check_prefill_matches_decode(const AttnCase& c) {
  SCOPED_TRACE("window " + std::to_string(c.window));
  const int64_t kv_dim = int64_t(c.n_kv_heads) * c.hd, qd = int64_t(c.n_heads) * c.hd;
  const int64_t rows = c.n_seq * c.n_new;
  const std::vector<float> k = random_f32(size_t(rows * kv_dim), 21, -3, 3);
  const std::vector<float> v = random_f32(size_t(rows * kv_dim), 22);
  const std::vector<float> q = random_f32(size_t(rows * qd), 23, -3, 3);
  std::vector<uint16_t> kc(size_t(c.n_seq * c.ctx_cap * kv_dim), kHalfNaN), vc = kc;
  std::vector<float> prefill(size_t(rows * qd), kNaN);
  kv_store(k.data(), v.data(), c.n_seq, c.n_new, 0, c.ctx_cap, kv_dim, kc.data(), vc.data(), c.kv,
           c.kl);
  attention(q.data(), kc.data(), vc.data(), c.n_seq, c.n_new, 0, c.ctx_cap, c.n_heads, c.n_kv_heads,
            c.hd, prefill.data(), c.window, c.kv, c.kl);

  std::vector<uint16_t> kc2(kc.size(), kHalfNaN), vc2 = kc2;
  std::vector<double> decode(prefill.size());
  for (int64_t t = 0; t < c.n_new; ++t) {
    std::vector<float> kt(size_t(c.n_seq * kv_dim)), vt(kt.size()), qt(size_t(c.n_seq * qd));
    for (int64_t s = 0; s < c.n_seq; ++s) {
      std::copy_n(&k[size_t((s * c.n_new + t) * kv_dim)], kv_dim, &kt[size_t(s * kv_dim)]);
      std::copy_n(&v[size_t((s * c.n_new + t) * kv_dim)], kv_dim, &vt[size_t(s * kv_dim)]);
      std::copy_n(&q[size_t((s * c.n_new + t) * qd)], qd, &qt[size_t(s * qd)]);
    }
    std::vector<float> ot(qt.size(), kNaN);
    kv_store(kt.data(), vt.data(), c.n_seq, 1, t, c.ctx_cap, kv_dim, kc2.data(), vc2.data(), c.kv,
             c.kl);
    attention(qt.data(), kc2.data(), vc2.data(), c.n_seq, 1, t, c.ctx_cap, c.n_heads, c.n_kv_heads,
              c.hd, ot.data(), c.window, c.kv, c.kl);
    for (int64_t s = 0; s < c.n_seq; ++s)
      for (int64_t i = 0; i < qd; ++i)
        decode[size_t((s * c.n_new + t) * qd + i)] = ot[size_t(s * qd + i)];
  }
  EXPECT_EQ(kc, kc2);
  EXPECT_EQ(vc, vc2);
  // Same keys visible: the prefill tile (AVX-512: query rows in the vector lanes) and the decode
  // split sum the same fp32 terms in different orders, so they agree to the reference tests'
  // tolerance (a few ulp of the scores, amplified by exp); one key wrongly visible or hidden moves
  // an output by ~|v| / n_keys, >= 1e-2 here.
  EXPECT_TRUE(close(decode, prefill.data(), 2e-5, 1e-5));
}

TEST_P(Kernels, AttentionPrefillMatchesDecode) {
  for (const KLayout kl : {KLayout::rows, KLayout::tiled16})
    for (int64_t window : {0, 5, 20})
      check_prefill_matches_decode({2, 37, 0, 48, 8, 2, 64, window, KvType::f16, kl});
}

// ---- small ops ----------------------------------------------------------------------------------
TEST_P(Kernels, RmsNorm) {
  const int64_t m = 5, dim = 4096 + 3;
  const std::vector<float> x = random_f32(size_t(m * dim), 31, -2, 2);
  const std::vector<float> w = random_f32(size_t(dim), 32);
  std::vector<double> ref(x.size());
  const float eps = 1e-5f;
  for (int64_t t = 0; t < m; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[size_t(t * dim + i)]) * x[size_t(t * dim + i)];
    const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i)
      ref[size_t(t * dim + i)] = double(x[size_t(t * dim + i)]) * inv * w[size_t(i)];
  }
  std::vector<float> out(x.size(), kNaN);
  rmsnorm(x.data(), w.data(), m, dim, eps, out.data());
  // A few fp32 roundings per element (the scale, two products): ~3 ulp of |ref|, plus a floor for
  // tiny outputs.
  EXPECT_TRUE(close(ref, out.data(), 1e-7, 1e-6));
  std::vector<float> inplace = x;  // out aliasing x
  rmsnorm(inplace.data(), w.data(), m, dim, eps, inplace.data());
  EXPECT_TRUE(close(ref, inplace.data(), 1e-7, 1e-6)) << "in place";
}

TEST_P(Kernels, Rope) {
  const int64_t m = 6;
  const int n_heads = 4, n_kv_heads = 2, hd = 64;
  const float theta = 10000.0f;
  const std::vector<int32_t> pos = {0, 1, 17, 255, 4095, 70000};
  std::vector<float> q = random_f32(size_t(m * n_heads * hd), 41);
  std::vector<float> k = random_f32(size_t(m * n_kv_heads * hd), 42);
  auto ref_of = [&](const std::vector<float>& v, int heads) {
    std::vector<double> r(v.size());
    for (int64_t t = 0; t < m; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < hd / 2; ++i) {
          const double ang = double(pos[size_t(t)]) * std::pow(double(theta), -2.0 * i / hd);
          const size_t a = size_t((t * heads + h) * hd + i), b = a + size_t(hd / 2);
          r[a] = v[a] * std::cos(ang) - v[b] * std::sin(ang);
          r[b] = v[b] * std::cos(ang) + v[a] * std::sin(ang);
        }
    return r;
  };
  const std::vector<double> rq = ref_of(q, n_heads), rk = ref_of(k, n_kv_heads);
  rope(q.data(), k.data(), pos.data(), m, n_heads, n_kv_heads, hd, theta);
  // |v| <= 1: fp32 cos/sin (rounded from double) and two fp32 products and a sum: ~3e-7; a
  // float-computed angle at pos 70000 would be off by ~4e-3 and fail.
  EXPECT_TRUE(close(rq, q.data(), 1e-6, 0)) << "q";
  EXPECT_TRUE(close(rk, k.data(), 1e-6, 0)) << "k";
}

// A decode's calls (one to four tokens, once a layer): the angles kept from the previous call are
// used only for the same positions and frequencies. Calls in turn with the same positions, new
// positions, other frequencies and a different head size, each against the double reference.
TEST_P(Kernels, RopeSmallCallsInTurn) {
  struct Call {
    std::vector<int32_t> pos;
    int hd;
    float theta;
  };
  const std::vector<Call> calls = {{{7}, 64, 10000.f},
                                   {{7}, 64, 10000.f},
                                   {{8}, 64, 10000.f},
                                   {{8, 300, 2}, 64, 10000.f},
                                   {{8, 301, 2, 9}, 64, 10000.f},
                                   {{8, 301, 2, 9}, 64, 500000.f},
                                   {{8, 301}, 128, 500000.f},
                                   {{8}, 64, 10000.f}};
  const int heads = 4, kv_heads = 2;
  uint32_t seed = 2000;
  for (const Call& c : calls) {
    const int64_t m = int64_t(c.pos.size());
    std::vector<float> q = random_f32(size_t(m * heads * c.hd), seed++);
    std::vector<float> k = random_f32(size_t(m * kv_heads * c.hd), seed++);
    auto ref_of = [&](const std::vector<float>& v, int nh) {
      std::vector<double> r(v.size());
      for (int64_t t = 0; t < m; ++t)
        for (int h = 0; h < nh; ++h)
          for (int i = 0; i < c.hd / 2; ++i) {
            const double ang =
                double(c.pos[size_t(t)]) * std::pow(double(c.theta), -2.0 * i / c.hd);
            const size_t a = size_t((t * nh + h) * c.hd + i), b = a + size_t(c.hd / 2);
            r[a] = v[a] * std::cos(ang) - v[b] * std::sin(ang);
            r[b] = v[b] * std::cos(ang) + v[a] * std::sin(ang);
          }
      return r;
    };
    const std::vector<double> rq = ref_of(q, heads), rk = ref_of(k, kv_heads);
    rope(q.data(), k.data(), c.pos.data(), m, heads, kv_heads, c.hd, c.theta);
    EXPECT_TRUE(close(rq, q.data(), 1e-6, 0))
        << "q, first position " << c.pos[0] << ", hd " << c.hd;
    EXPECT_TRUE(close(rk, k.data(), 1e-6, 0))
        << "k, first position " << c.pos[0] << ", hd " << c.hd;
  }
}

TEST_P(Kernels, RopeScaledFrequencies) {
  // A frequency table with scaling applied (as ModelConfig::rope_inv_freq gives it: linear
  // divides all frequencies, llama3 only the low ones): the kernel rotates pair i by
  // pos * inv_freq[i], whatever the table.
  const int64_t m = 4;
  const int n_heads = 2, n_kv_heads = 1, hd = 16;
  const std::vector<int32_t> pos = {0, 3, 1000, 131071};
  std::vector<double> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i)
    inv_freq[size_t(i)] = std::pow(500000.0, -2.0 * i / hd) / (i < 3 ? 1.0 : i < 5 ? 2.5 : 8.0);
  std::vector<float> q = random_f32(size_t(m * n_heads * hd), 43);
  std::vector<float> k = random_f32(size_t(m * n_kv_heads * hd), 44);
  auto ref_of = [&](const std::vector<float>& v, int heads) {
    std::vector<double> r(v.size());
    for (int64_t t = 0; t < m; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < hd / 2; ++i) {
          const double ang = double(pos[size_t(t)]) * inv_freq[size_t(i)];
          const size_t a = size_t((t * heads + h) * hd + i), b = a + size_t(hd / 2);
          r[a] = v[a] * std::cos(ang) - v[b] * std::sin(ang);
          r[b] = v[b] * std::cos(ang) + v[a] * std::sin(ang);
        }
    return r;
  };
  const std::vector<double> rq = ref_of(q, n_heads), rk = ref_of(k, n_kv_heads);
  std::vector<float> q_plain = q;
  rope(q.data(), k.data(), pos.data(), m, n_heads, n_kv_heads, hd, inv_freq.data());
  EXPECT_TRUE(close(rq, q.data(), 1e-6, 0)) << "q";
  EXPECT_TRUE(close(rk, k.data(), 1e-6, 0)) << "k";
  // And the table matters: the unscaled frequencies give other values.
  std::vector<float> k_plain(k.size(), 0.f);
  rope(q_plain.data(), k_plain.data(), pos.data(), m, n_heads, n_kv_heads, hd, 500000.f);
  EXPECT_FALSE(close(rq, q_plain.data(), 1e-3, 0));
}

TEST_P(Kernels, Embed) {
  const int64_t vocab = 50, dim = 4096 + 5, m = 7;
  std::vector<uint16_t> table = random_f16(size_t(vocab * dim), 51);
  table[3] = 0x0001;  // a subnormal and an infinity convert exactly too
  table[4] = 0x7c00;
  const std::vector<int32_t> tokens = {0, 49, 3, 3, 17, 0, 25};
  std::vector<float> out(size_t(m * dim), kNaN);
  embed(table.data(), tokens.data(), m, dim, out.data());
  for (int64_t t = 0; t < m; ++t)
    for (int64_t i = 0; i < dim; ++i)  // exact: every half is a float
      ASSERT_EQ(out[size_t(t * dim + i)], half_to_float(table[size_t(tokens[size_t(t)] * dim + i)]))
          << "t=" << t << " i=" << i;
}

TEST_P(Kernels, SwigluAddArgmax) {
  const int64_t n = 3 * 11008 + 5;
  const std::vector<float> g = random_f32(size_t(n), 61, -8, 8), u = random_f32(size_t(n), 62);
  std::vector<double> ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ref[size_t(i)] = double(g[size_t(i)]) / (1.0 + std::exp(-double(g[size_t(i)]))) * u[size_t(i)];
  std::vector<float> out(size_t(n), kNaN);
  swiglu(g.data(), u.data(), n, out.data());
  // fp32 exp (~1 ulp), a division and two products: a few ulp of |ref|.
  EXPECT_TRUE(close(ref, out.data(), 1e-30, 1e-6));
  std::vector<float> alias = g;
  swiglu(alias.data(), u.data(), n, alias.data());
  EXPECT_TRUE(close(ref, alias.data(), 1e-30, 1e-6)) << "out aliasing gate";

  std::vector<float> x = random_f32(size_t(n), 63);
  const std::vector<float> y = random_f32(size_t(n), 64);
  std::vector<float> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[size_t(i)] = x[size_t(i)] + y[size_t(i)];
  add(x.data(), y.data(), n);
  EXPECT_EQ(x, want);  // one fp32 addition: exact same rounding

  std::vector<float> logits = random_f32(32000, 65);
  logits[777] = 5.0f;
  logits[31999] = 5.0f;
  logits[20000] = 4.9f;
  EXPECT_EQ(argmax(logits.data(), 32000), 777);  // first on ties
  logits[5] = 6.0f;
  EXPECT_EQ(argmax(logits.data(), 32000), 5);
  EXPECT_EQ(argmax(logits.data(), 1), 0);
}

// ---- synthetic weights --------------------------------------------------------------------------
// bf16 conversions against double arithmetic: every bf16 value round-trips; a float rounds to the
// nearer of its two bf16 neighbours, ties to the even one; overflow gives infinity, NaN stays NaN.
// The branch-free float -> fp16 conversion (core/half.hpp) equals the reference on every 61st
// bit pattern (70 M floats: every exponent, subnormals, the overflow boundary, NaNs), and on
// both sides of every fp16 rounding boundary.
TEST(Half, BranchFreeEqualsReference) {
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 61) {
    const float f = std::bit_cast<float>(uint32_t(b));
    ASSERT_EQ(float_to_half_branch_free(f), float_to_half(f)) << std::hex << b;
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // halfway between h and h + 1, and its neighbours
    const float mid =
        float((double(half_to_float(uint16_t(h))) + double(half_to_float(uint16_t(h + 1)))) / 2);
    for (const float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)})
      for (const float s : {f, -f}) ASSERT_EQ(float_to_half_branch_free(s), float_to_half(s)) << s;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_float(uint16_t(b));
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f)))) << b;
    else
      ASSERT_EQ(float_to_bf16(f), uint16_t(b)) << b;
  }
  std::mt19937 gen(5);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = gen();
    const float f = std::bit_cast<float>(bits);
    if (!std::isfinite(f)) continue;
    const uint16_t lo = uint16_t(bits >> 16);  // truncated toward zero
    if ((lo & 0x7fff) == 0x7f7f) continue;     // the next one up is infinity (checked below)
    const double a = bf16_to_float(lo), b = bf16_to_float(uint16_t(lo + 1)), x = f;
    const uint16_t got = float_to_bf16(f);
    const double da = std::fabs(x - a), db = std::fabs(b - x);
    const uint16_t want = da < db    ? lo
                          : db < da  ? uint16_t(lo + 1)
                          : (lo & 1) ? uint16_t(lo + 1)
                                     : lo;
    ASSERT_EQ(got, want) << std::hexfloat << f;
  }
  EXPECT_EQ(float_to_bf16(3.4e38f), 0x7f80);  // above the largest bf16 (3.39e38): infinity
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
}

TEST(Fill, DeterministicAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  const int64_t n_out = 257, n_in = 1031, n = n_out * n_in;
  std::vector<uint16_t> h[2];
  std::vector<int8_t> q[2];
  std::vector<float> s[2], f[2];
  for (int r = 0; r < 2; ++r) {
    omp_set_num_threads(r + 1);
    h[r].assign(size_t(n), 0);
    q[r].assign(size_t(n), 0);
    s[r].assign(size_t(n_out), kNaN);
    f[r].assign(size_t(n), kNaN);
    fill_f16(h[r].data(), n, 1234, 0.05f);
    fill_i8(q[r].data(), s[r].data(), n_out, n_in, 5678, 0.3f);
    fill_f32(f[r].data(), n, 91011, 1.0f, 0.25f);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(h[0], h[1]);
  EXPECT_EQ(q[0], q[1]);
  EXPECT_EQ(s[0], s[1]);
  EXPECT_EQ(f[0], f[1]);
  // And the values are the documented functions of (key, index).
  for (int64_t i : {int64_t(0), int64_t(1), n / 2, n - 1}) {
    EXPECT_EQ(h[0][size_t(i)], float_to_half(0.05f * rng::uniform_pm1(1234, uint64_t(i))));
    EXPECT_EQ(q[0][size_t(i)], rng::uniform_i8(5678, uint64_t(i)));
    EXPECT_EQ(f[0][size_t(i)], 1.0f + 0.25f * rng::uniform_pm1(91011, uint64_t(i)));
  }
  for (float v : s[0]) EXPECT_EQ(v, 0.3f / 127.0f);
  EXPECT_NE(h[0][0], h[0][1]);
}

// The AVX-512 generators (16 elements at a time) give every element the scalar formula's value:
// fp16 over amplitudes that reach fp16 subnormals, its largest finite values and infinity
// (rounding to nearest even throughout), int8 row-major and in the rows-in-fours layout; lengths
// that leave a tail.
// Each vector ISA the CPU has (AVX-512: 16 at a time; AVX2: 8, its 64-bit multiplies built from
// vpmuludq), against the scalar generator.
class FillIsa : public ::testing::TestWithParam<Isa> {};
INSTANTIATE_TEST_SUITE_P(VectorIsas, FillIsa, ::testing::Values(Isa::avx2, Isa::avx512),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

TEST_P(FillIsa, VectorisedMatchesScalar) {
  if (int(detected_isa()) < int(GetParam()))
    GTEST_SKIP() << isa_name(GetParam()) << " not on this CPU";
  force_isa(GetParam());
  const int64_t n = (int64_t(1) << 20) + 13;
  for (const float amp : {1e-4f, 0.05f, 65000.0f, 70000.0f}) {
    std::vector<uint16_t> h(size_t(n), 0x1234);
    fill_f16(h.data(), n, 4242, amp);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(h[size_t(i)], float_to_half(amp * rng::uniform_pm1(4242, uint64_t(i))))
          << "amplitude " << amp << ", element " << i;
  }
  const int64_t n_out = 64, n_in = 2 * kRows4Panel + 192 + 8;  // row-major: a tail of 8
  std::vector<int8_t> q(size_t(n_out * n_in), 99);
  std::vector<float> s(size_t(n_out), kNaN);
  fill_i8(q.data(), s.data(), n_out, n_in, 777, 0.3f);
  for (int64_t i = 0; i < n_out * n_in; ++i)
    ASSERT_EQ(q[size_t(i)], rng::uniform_i8(777, uint64_t(i))) << "element " << i;
  const int64_t n_in4 = 2 * kRows4Panel + 192;
  std::vector<int8_t> q4(size_t(n_out * n_in4), 99);
  fill_i8(q4.data(), s.data(), n_out, n_in4, 778, 0.3f, true);
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t k = 0; k < n_in4; ++k)
      ASSERT_EQ(q4[size_t(i8_offset(true, n_out, n_in4, r, k))],
                rng::uniform_i8(778, uint64_t(r * n_in4 + k)))
          << r << " " << k;
  force_isa(detected_isa());
}

TEST(Fill, QuantizeRows) {
  const int64_t n_out = 9, n_in = 1000;
  std::vector<uint16_t> src = random_f16(size_t(n_out * n_in), 71);
  for (int64_t i = 0; i < n_in; ++i) src[size_t(4 * n_in + i)] = 0;  // an all-zero row
  std::vector<int8_t> q(src.size(), 99);
  std::vector<float> scales(size_t(n_out), kNaN);
  quantize_rows_f16(src.data(), n_out, n_in, q.data(), scales.data());
  for (int64_t r = 0; r < n_out; ++r) {
    float amax = 0;
    for (int64_t i = 0; i < n_in; ++i)
      amax = std::max(amax, std::fabs(half_to_float(src[size_t(r * n_in + i)])));
    ASSERT_EQ(scales[size_t(r)], amax / 127.0f) << "row " << r;
    for (int64_t i = 0; i < n_in; ++i) {
      const float x = half_to_float(src[size_t(r * n_in + i)]);
      const int want = amax > 0 ? int(std::nearbyint(x / scales[size_t(r)])) : 0;
      ASSERT_EQ(int(q[size_t(r * n_in + i)]), std::clamp(want, -127, 127)) << r << "," << i;
      // Dequantisation error is at most half a step.
      ASSERT_LE(std::fabs(q[size_t(r * n_in + i)] * scales[size_t(r)] - x),
                0.5f * scales[size_t(r)] * 1.0001f);
    }
  }
}

// ---- machine probes (sanity only, not performance) ----------------------------------------------
// The read probe's loops, plain, prefetched and in kProbeStreams runs side by side, read every
// element once: their sums are the sum of the buffer (small integers: exact in fp32), whatever
// the length's remainder.
TEST(Probe, ReadLoopsSumEveryElementWithOrWithoutPrefetch) {
  for (size_t n : {size_t(0), size_t(5), size_t(128), size_t(1000), size_t(4099), size_t(70001)}) {
    std::vector<float> v(n);
    double want = 0;
    for (size_t i = 0; i < n; ++i) want += double(v[i] = float(int(i % 7) - 3));
    if (detected_isa() == Isa::avx512) {
      EXPECT_EQ(detail::read_streams_avx512(v.data(), n), want) << n;
    }
    if (detected_isa() >= Isa::avx2) {
      EXPECT_EQ(detail::read_streams_avx2(v.data(), n), want) << n;
    }
    for (bool pf : {false, true}) {
      if (detected_isa() == Isa::avx512) {
        EXPECT_EQ(detail::read_sum_avx512(v.data(), n, pf), want) << n << " prefetch " << pf;
      }
      if (detected_isa() >= Isa::avx2) {
        EXPECT_EQ(detail::read_sum_avx2(v.data(), n, pf), want) << n << " prefetch " << pf;
      }
    }
  }
}

TEST(Probe, ResultsArePositiveAndFinite) {
  auto ok = [](const ProbeResult& r, const char* what) {
    EXPECT_TRUE(std::isfinite(r.value) && r.value > 0) << what << " " << r.value;
    EXPECT_TRUE(std::isfinite(r.median) && r.median > 0) << what << " " << r.median;
    EXPECT_LE(r.median, r.value) << what;
    EXPECT_GT(r.bytes_or_ops, 0) << what;
    EXPECT_EQ(r.repetitions, 3) << what;
  };
  ok(probe_read_bandwidth(size_t(64) << 20, 3), "read");
  ok(probe_triad_bandwidth(size_t(48) << 20, 3), "triad");
  ok(probe_fma_peak(3), "fma");
  ok(probe_int8_peak(3), "int8");
  const ProbeResult i16 = probe_int16_peak(3);
  if (detected_isa() == Isa::avx512 && __builtin_cpu_supports("avx512vnni"))
    ok(i16, "int16");
  else
    EXPECT_EQ(i16.value, 0.0) << "an int16 peak on a CPU without AVX512-VNNI";
  const ProbeResult bf16 = probe_bf16_peak(3);
  if (detected_isa() == Isa::avx512 && has_avx512_bf16())
    ok(bf16, "bf16");
  else
    EXPECT_EQ(bf16.value, 0.0) << "a bf16 peak on a CPU without AVX512-BF16";
  const ProbeResult amx = probe_amx_int8_peak(3);
  if (amx_int8_active()) {
    ok(amx, "amx int8");
    // 16 x 16 x 64 multiply-adds an instruction: the tiles outrun the vector dot products.
    EXPECT_GT(amx.value, probe_int8_peak(3).value) << "AMX below the vector int8 peak";
  } else {
    EXPECT_EQ(amx.value, 0.0) << "an AMX peak where the GEMM does not use the tiles";
  }
  const ProbeResult amx16 = probe_amx_bf16_peak(3);
  if (amx_f16_active()) {
    ok(amx16, "amx bf16");
    // 16 x 16 x 32 multiply-adds an instruction: a quarter of it (the FP16 GEMM's roof) still
    // outruns the FP32 FMAs.
    EXPECT_GT(amx16.value / 4, probe_fma_peak(3).value) << "AMX-BF16 below 4x the FMA peak";
  } else {
    EXPECT_EQ(amx16.value, 0.0) << "an AMX-BF16 peak where the GEMM does not use the tiles";
  }
  set_amx_enabled(false);
  EXPECT_EQ(probe_amx_int8_peak(1).value, 0.0) << "an AMX peak with the tiles switched off";
  EXPECT_EQ(probe_amx_bf16_peak(1).value, 0.0) << "an AMX-BF16 peak with the tiles switched off";
  set_amx_enabled(true);
}

// The ping-pong of one cache line between two threads: a latency in nanoseconds (the lowest
// repetition the value, so value <= median), nothing with one thread. (A machine busy enough
// can end the probe after fewer repetitions, and make each transfer take a scheduler slice.)
TEST(Probe, CoreToCoreLatencyBetweenTwoThreads) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 hardware threads";
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  const ProbeResult two = probe_core_to_core(3);
  omp_set_num_threads(1);
  const ProbeResult one = probe_core_to_core(3);
  omp_set_num_threads(saved);
  EXPECT_GE(two.repetitions, 1);
  EXPECT_LE(two.repetitions, 3);
  EXPECT_EQ(two.bytes_or_ops, 4000.0);  // transfers a repetition at most: 2,000 round trips
  EXPECT_GT(two.value, 1.0);            // a cache line does not cross cores in under 1 ns
  EXPECT_LE(two.value, two.median);
  EXPECT_LT(two.median, 1e9);
  EXPECT_EQ(one.value, 0.0);
  EXPECT_EQ(one.repetitions, 0);
}

TEST(Isa, NamesAndForcing) {
  EXPECT_STREQ(isa_name(Isa::scalar), "scalar");
  EXPECT_STREQ(isa_name(Isa::avx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::avx512), "avx512");
  force_isa(Isa::avx512);  // clamps to what the CPU has
  EXPECT_EQ(active_isa(), detected_isa());
  force_isa(Isa::scalar);
  EXPECT_EQ(active_isa(), Isa::scalar);
  force_isa(detected_isa());
  EXPECT_EQ(active_isa(), detected_isa());
}

}  // namespace
}  // namespace latprof::cpu
