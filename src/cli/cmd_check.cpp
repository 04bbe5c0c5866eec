// latprof check: is a claimed latency or throughput physically possible? One line per claim:
// possible or impossible, by how much it beats the roofline floor, and which assumption would
// have to be wrong. Exit status 0: all possible; 1: at least one impossible.
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "roofline/flags.hpp"

namespace latprof::cli {

namespace {

constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();

struct CheckArgs {
  ScenarioFlags f;
  double tpot_ms = kUnset, ttft_ms = kUnset, prefill_ms = kUnset, decode_tps = kUnset;
};

enum class Metric { tpot, ttft, prefill, decode_tps };

struct Claim {
  Metric metric;
  double value;
  const char* label;  // "TPOT"
  bool time() const { return metric != Metric::decode_tps; }
  std::string show(double v) const { return time() ? fmt_ms(v) : fmt_fixed(v, 1) + " tokens/s"; }
  double of(const Times& t) const {
    switch (metric) {
      case Metric::tpot:
        return t.tpot_ms;
      case Metric::ttft:
        return t.ttft_ms;
      case Metric::prefill:
        return t.prefill_ms;
      case Metric::decode_tps:
        return t.decode_tokens_per_s;
    }
    return 0;
  }
  // Does a floor allow the claim?
  bool allows(double floor) const { return time() ? value >= floor : value <= floor; }
  // > 1: how many times faster than physics the claim is
  double beats(double floor) const { return time() ? floor / value : value / floor; }
};

// Smallest x in [lo, hi] with pred true (pred monotone false -> true); 0 if none.
int64_t first_true(int64_t lo, int64_t hi, const std::function<bool(int64_t)>& pred) {
  if (!pred(hi)) return 0;
  int64_t bad = lo - 1, good = hi;
  for (int64_t x = lo; x < hi; x *= 2) {
    if (pred(x)) {
      good = x;
      break;
    }
    bad = x;
  }
  while (good - bad > 1) {
    const int64_t mid = bad + (good - bad) / 2;
    (pred(mid) ? good : bad) = mid;
  }
  return good;
}

Scenario with_dtype(Scenario s, const std::string& dtype) {
  s.precision = precision_for(dtype, s.precision.act_bytes, s.precision.kv_bytes);
  return s;
}

// The what-ifs that would make an impossible claim possible, as one clause.
std::string what_would_have_to_change(const Claim& c, const Scenario& s, double floor) {
  std::vector<std::string> ways;
  const bool decode_claim = c.metric == Metric::tpot || c.metric == Metric::decode_tps;

  // 1. fewer bytes per weight: the floor is linear in the bytes of a linear-layer weight
  //    between the fp16 (2 B) and int8 (1 B + scales) cost models.
  {
    const Scenario s8 = with_dtype(s, "int8");
    const double f8 = c.of(floor_times(s8));
    const double f16 = c.of(floor_times(with_dtype(s, "fp16")));
    // Weight bytes only matter when they move the floor (memory-bound work).
    const bool weight_bound = f16 > 0 && (f16 - f8) / f16 > 0.1;
    if (!weight_bound) {
      // compute-bound: bytes per weight do not move the floor
    } else if (s.precision.weight_bytes == 2 && c.allows(f8)) {
      ways.push_back("int8 weights (W8A16: floor " + c.show(f8) + ")");
    } else if (c.time()) {
      // f(b) = f8 + (b - 1)(f16 - f8)
      const double b = 1 + (c.value - f8) / (f16 - f8);
      if (b > 0)
        ways.push_back("weights of at most " + fmt_fixed(b * 8, 1) + " bits each (int8 gives " +
                       c.show(f8) + (b >= 0.5 ? "; a 4-bit format would do" : "") + ")");
      else
        ways.push_back(
            "no weight format: the bytes that are not weights (KV cache, "
            "activations) alone exceed it");
    }
    if (s.precision.weights != WeightFormat::int8_w8a8 && !decode_claim) {
      const double fw = c.of(floor_times(with_dtype(s, "int8-w8a8")));
      if (c.allows(fw))
        ways.push_back("INT8 W8A8 matmuls on the INT8 peak (floor " + c.show(fw) + ")");
    }
  }

  // 2. a larger batch: TPOT as step time / batch, or tokens/s summed over the batch
  if (decode_claim) {
    auto ok = [&](int64_t b) {
      Scenario sb = s;
      sb.batch = b;
      const Times t = floor_times(sb);
      return c.metric == Metric::tpot ? c.allows(t.tpot_ms / double(b))
                                      : c.allows(t.decode_tokens_per_s);
    };
    const int64_t b = first_true(s.batch + 1, 1 << 16, ok);
    if (b > 0) {
      Scenario sb = s;
      sb.batch = b;
      const std::string fit = max_batch_that_fits(sb) >= b ? "" : ", which does not fit in memory";
      ways.push_back(c.metric == Metric::tpot
                         ? "a batch of at least " + std::to_string(b) +
                               " with the claim read as step time / batch (per-sequence latency "
                               "cannot drop below one step)" +
                               fit
                         : "a batch of at least " + std::to_string(b) + fit);
    }
  }

  // 2b. a shorter prompt (prefill and TTFT grow with the input)
  if (!decode_claim && s.input > 1) {
    auto too_slow = [&](int64_t n) {
      Scenario sn = s;
      sn.input = n;
      return !c.allows(c.of(floor_times(sn)));
    };
    const int64_t first_bad = first_true(1, s.input, too_slow);
    if (first_bad > 1)
      ways.push_back("a prompt of at most " + std::to_string(first_bad - 1) + " tokens");
  }

  // 3. a smaller model: the largest built-in whose floor allows it
  {
    const ModelConfig* best = nullptr;
    double best_floor = 0;
    const auto models = builtin_models();
    for (const auto& m : models) {
      if (m.params_total() >= s.model.params_total()) continue;
      Scenario sm = s;
      sm.model = m;
      if (sm.input + sm.output > m.max_seq_len) continue;
      const double fm = c.of(floor_times(sm));
      if (c.allows(fm) && (!best || m.params_total() > best->params_total())) {
        best = &m;
        best_floor = fm;
      }
    }
    const double k = c.time() ? c.value / floor : floor / c.value;  // < 1
    std::string w = "a model of about " + fmt_count(double(s.model.params_total()) * k) +
                    " parameters or fewer";
    if (best) w += " (e.g. " + best->name + ": floor " + c.show(best_floor) + ")";
    ways.push_back(w);
  }

  // 4. a faster device from the database
  {
    std::string devs;
    for (const auto& h : builtin_hardware()) {
      if (h.measure) continue;
      Scenario sh = s;
      sh.ceilings = to_ceilings(h);
      const double fh = c.of(floor_times(sh));
      if (c.allows(fh)) devs += (devs.empty() ? "" : ", ") + h.name + " (" + c.show(fh) + ")";
    }
    if (!devs.empty()) ways.push_back("another device: " + devs);
  }
  std::string out;
  for (size_t i = 0; i < ways.size(); ++i)
    out += (i == 0 ? "" : i + 1 == ways.size() ? ", or " : ", or ") + ways[i];
  return out;
}

}  // namespace

CommandFn add_check_command(CLI::App& app) {
  auto a = std::make_shared<CheckArgs>();
  CLI::App* sub = app.add_subcommand(
      "check",
      "Is a claimed number physically possible? Compares it with the roofline floor; exit 0 "
      "possible, 1 impossible");
  add_scenario_flags(sub, a->f, false);
  sub->add_option("--tpot-ms", a->tpot_ms, "Claimed time per output token (ms)");
  sub->add_option("--ttft-ms", a->ttft_ms, "Claimed time to first token (ms)");
  sub->add_option("--prefill-ms", a->prefill_ms, "Claimed prefill time (ms)");
  sub->add_option("--decode-tokens-per-s", a->decode_tps,
                  "Claimed decode throughput over the batch (tokens/s)");
  return [a, sub]() -> int {
    std::vector<Claim> claims;
    auto add = [&](double v, Metric m, const char* label, const char* flag) {
      if (sub->count(flag) == 0) return;  // not given (a given NaN is refused below)
      if (!(v > 0) || !std::isfinite(v))
        usage_error(std::string(flag) + " must be a positive number");
      claims.push_back({m, v, label});
    };
    add(a->tpot_ms, Metric::tpot, "TPOT", "--tpot-ms");
    add(a->ttft_ms, Metric::ttft, "TTFT", "--ttft-ms");
    add(a->prefill_ms, Metric::prefill, "prefill", "--prefill-ms");
    add(a->decode_tps, Metric::decode_tps, "decode throughput", "--decode-tokens-per-s");
    if (claims.empty())
      usage_error(
          "nothing to check: give --tpot-ms, --ttft-ms, --prefill-ms or "
          "--decode-tokens-per-s");
    ScenarioFlags f = a->f;
    for (const auto& c : claims)
      if ((c.metric == Metric::tpot || c.metric == Metric::decode_tps) && f.output < 2) {
        if (f.output != 1) break;
        usage_error(
            "--output must be at least 2 to check a decode claim (the first token comes "
            "from prefill)");
      }
    const Scenario s = make_scenario(f);
    const Times fl = floor_times(s);
    const Prediction pr = predict(s);
    const std::string subject = s.model.name + " " + s.precision.name() + " on " +
                                s.ceilings.device + " (batch " + std::to_string(s.batch) +
                                ", input " + std::to_string(s.input) + ")";
    bool any_impossible = false;
    for (const auto& c : claims) {
      const double floor = c.of(fl);
      const double expected = c.of(pr.expected);
      std::string why;
      if (c.metric == Metric::tpot || c.metric == Metric::decode_tps)
        why = "each decode step moves " + fmt_bytes(pr.decode_cost.bytes() / double(s.output - 1)) +
              " at " + fmt_rate(s.ceilings.mem_bw_bytes_per_s, "B/s");
      else
        why = "prefill executes " + fmt_count(pr.prefill_cost.flops) + "FLOP and moves " +
              fmt_bytes(pr.prefill_cost.bytes()) + " (" + pr.prefill_floor.bound + "-bound)";
      if (!pr.fits) {
        any_impossible = true;
        if (pr.max_batch > 0)
          std::printf(
              "impossible: %s: weights + KV cache (%s) do not fit in %s; the largest "
              "batch that fits is %lld\n",
              subject.c_str(), fmt_bytes(pr.working_set_bytes).c_str(),
              fmt_bytes(s.ceilings.memory_bytes).c_str(), (long long)pr.max_batch);
        else
          std::printf("impossible: %s: the weights alone (%s) do not fit in %s\n", subject.c_str(),
                      fmt_bytes(pr.weight_bytes).c_str(),
                      fmt_bytes(s.ceilings.memory_bytes).c_str());
        continue;
      }
      if (c.allows(floor)) {
        std::string note = c.time() ? "" : "";
        const bool beyond_expected = c.time() ? c.value < expected : c.value > expected;
        std::printf("possible: %s %s for %s respects the roofline floor %s (%s); %s\n", c.label,
                    c.show(c.value).c_str(), subject.c_str(), c.show(floor).c_str(), why.c_str(),
                    beyond_expected ? ("but better than the expected " + c.show(expected) +
                                       " at the stated efficiency factors")
                                          .c_str()
                                    : ("the expected value is " + c.show(expected)).c_str());
      } else {
        any_impossible = true;
        std::printf(
            "impossible: %s %s for %s beats the roofline floor %s by %sx (%s): likely a "
            "measurement error, unless one assumption is wrong: %s\n",
            c.label, c.show(c.value).c_str(), subject.c_str(), c.show(floor).c_str(),
            fmt_fixed(c.beats(floor), 2).c_str(), why.c_str(),
            what_would_have_to_change(c, s, floor).c_str());
      }
    }
    return any_impossible ? 1 : 0;
  };
}

}  // namespace latprof::cli
