#pragma once
// A deliberately plain Llama forward pass in double precision, written from the architecture
// (RMSNorm, rotate_half RoPE, causal GQA attention, SwiGLU), for checking latprof's forward pass.
// It reads the weights latprof loaded (fp16 or int8 + scales) and keeps its own fp64 KV cache.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/half.hpp"
#include "runner/model.hpp"

namespace naive {

using Vec = std::vector<double>;

inline double weight_at(const latprof::DeviceWeight& w, int64_t r, int64_t c) {
  if (w.type == latprof::WeightType::f16)
    return latprof::half_to_float(static_cast<const uint16_t*>(w.data)[r * w.n_in + c]);
  return double(static_cast<const int8_t*>(w.data)[r * w.n_in + c]) * double(w.scales[r]);
}

inline Vec matvec(const latprof::DeviceWeight& w, const Vec& x) {
  Vec y(static_cast<size_t>(w.n_out), 0.0);
  for (int64_t r = 0; r < w.n_out; ++r) {
    double s = 0;
    for (int64_t c = 0; c < w.n_in; ++c) s += weight_at(w, r, c) * x[size_t(c)];
    y[size_t(r)] = s;
  }
  return y;
}

inline Vec rmsnorm(const Vec& x, const float* w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * double(w[i]);
  return y;
}

inline void rope(Vec& v, int64_t heads, int64_t hd, int64_t pos, double theta) {
  for (int64_t h = 0; h < heads; ++h) {
    double* p = v.data() + h * hd;
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double ang = double(pos) * std::pow(theta, -2.0 * double(i) / double(hd));
      const double a = p[i], b = p[i + hd / 2];
      p[i] = a * std::cos(ang) - b * std::sin(ang);
      p[i + hd / 2] = a * std::sin(ang) + b * std::cos(ang);
    }
  }
}

class Llama {
 public:
  explicit Llama(const latprof::LoadedModel& m) : m_(m), c_(m.config()) {
    kcache_.resize(size_t(c_.n_layers));
    vcache_.resize(size_t(c_.n_layers));
  }
  // Feeds one token at the next position, returns the logits.
  Vec step(int32_t token) {
    const int64_t d = c_.dim, hd = c_.head_dim(), H = c_.n_heads, KV = c_.n_kv_heads;
    Vec x(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i)
      x[size_t(i)] = latprof::half_to_float(
          static_cast<const uint16_t*>(m_.tok_embeddings.data)[int64_t(token) * d + i]);
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      const auto& w = m_.layers[size_t(l)];
      Vec h = rmsnorm(x, w.attn_norm, c_.norm_eps);
      Vec q = matvec(w.wq, h), k = matvec(w.wk, h), v = matvec(w.wv, h);
      rope(q, H, hd, pos_, c_.rope_theta);
      rope(k, KV, hd, pos_, c_.rope_theta);
      kcache_[size_t(l)].push_back(k);
      vcache_[size_t(l)].push_back(v);
      Vec att(static_cast<size_t>(H * hd), 0.0);
      const size_t T = kcache_[size_t(l)].size();
      for (int64_t qh = 0; qh < H; ++qh) {
        const int64_t kh = qh / (H / KV);
        std::vector<double> s(T);
        double mx = -1e300;
        for (size_t t = 0; t < T; ++t) {
          double dot = 0;
          for (int64_t i = 0; i < hd; ++i)
            dot += q[size_t(qh * hd + i)] * kcache_[size_t(l)][t][size_t(kh * hd + i)];
          s[t] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[t]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (size_t t = 0; t < T; ++t)
          for (int64_t i = 0; i < hd; ++i)
            att[size_t(qh * hd + i)] += s[t] / sum * vcache_[size_t(l)][t][size_t(kh * hd + i)];
      }
      Vec o = matvec(w.wo, att);
      for (int64_t i = 0; i < d; ++i) x[size_t(i)] += o[size_t(i)];
      Vec h2 = rmsnorm(x, w.ffn_norm, c_.norm_eps);
      Vec g = matvec(w.w_gate, h2), u = matvec(w.w_up, h2);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      Vec dn = matvec(w.w_down, g);
      for (int64_t i = 0; i < d; ++i) x[size_t(i)] += dn[size_t(i)];
    }
    ++pos_;
    return matvec(m_.output, rmsnorm(x, m_.final_norm, c_.norm_eps));
  }

 private:
  const latprof::LoadedModel& m_;
  const latprof::ModelConfig& c_;
  int64_t pos_ = 0;
  std::vector<std::vector<Vec>> kcache_, vcache_;
};

}  // namespace naive
