#include "report/table.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/format.hpp"

namespace latprof {

namespace {

// A plain text table: columns left- or right-aligned, widths from the content.
class Table {
 public:
  explicit Table(std::vector<std::string> header, std::string align)
      : header_(std::move(header)), align_(std::move(align)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void rule() { rows_.push_back({}); }
  std::string str() const {
    std::vector<size_t> w(header_.size(), 0);
    for (size_t i = 0; i < header_.size(); ++i) w[i] = header_[i].size();
    for (const auto& r : rows_)
      for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
    std::ostringstream o;
    auto line = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < w.size(); ++i) {
        const std::string& c = i < r.size() ? r[i] : std::string();
        const size_t pad = w[i] - c.size();
        if (i) o << "  ";
        if (align_[i] == 'r')
          o << std::string(pad, ' ') << c;
        else
          o << c << (i + 1 < w.size() ? std::string(pad, ' ') : "");
      }
      o << "\n";
    };
    size_t total = 0;
    for (size_t x : w) total += x + 2;
    line(header_);
    o << std::string(total - 2, '-') << "\n";
    for (const auto& r : rows_) {
      if (r.empty())
        o << std::string(total - 2, '-') << "\n";
      else
        line(r);
    }
    return o.str();
  }

 private:
  std::vector<std::string> header_;
  std::string align_;
  std::vector<std::vector<std::string>> rows_;
};

std::string intensity(double v) {
  return v > 0 ? fmt_fixed(v, v < 10 ? 2 : 1) : "-";
}
std::string or_dash(const std::string& s) {
  return s.empty() ? "-" : s;
}
// The spread of a row over the repeats: "fastest..slowest".
std::string range(double lo, double hi) {
  return fmt_ms(lo) + ".." + fmt_ms(hi);
}
// Inserts `cell` after the first `at` cells when the run has a spread to show.
std::vector<std::string> with(std::vector<std::string> row, size_t at, bool on, std::string cell) {
  if (on) row.insert(row.begin() + std::ptrdiff_t(at), std::move(cell));
  return row;
}
std::string with(std::string align, size_t at, bool on) {
  return on ? align.substr(0, at) + 'r' + align.substr(at) : align;
}

}  // namespace

std::vector<std::string> verdict_lines(const RunReport& r) {
  std::vector<std::string> out;
  const Row* top = nullptr;
  for (const auto& s : r.stages)
    if (!top || s.time_ms > top->time_ms) top = &s;
  if (!top) return out;
  std::ostringstream a;
  a << top->name << " dominates: " << fmt_ms(top->time_ms) << " of " << fmt_ms(r.metrics.e2e_ms)
    << " (" << fmt_pct(top->share) << ")";
  if (!top->bound.empty()) {
    a << "; it is " << top->bound << "-bound at " << fmt_pct(top->roofline_fraction)
      << " of its roofline floor (" << fmt_ms(top->floor_ms) << ")";
  }
  a << ".";
  out.push_back(a.str());
  // The op that costs most inside the dominant stage.
  const Row* op = nullptr;
  for (const auto& o : r.ops)
    if (o.stage == top->name && (!op || o.time_ms > op->time_ms)) op = &o;
  if (op && !op->bound.empty()) {
    std::ostringstream b;
    b << "Inside " << top->name << ", " << op->name << " takes " << fmt_pct(op->share)
      << " and runs at " << fmt_rate(op->achieved_bytes_per_s, "B/s") << " and "
      << fmt_rate(op->achieved_flops_per_s, "FLOP/s") << " (" << op->bound << "-bound, "
      << fmt_pct(op->roofline_fraction) << " of roofline).";
    out.push_back(b.str());
  }
  for (const auto& s : r.stages) {
    if (&s == top || s.bound.empty() || s.name == "sample") continue;
    std::ostringstream c;
    c << s.name << " is " << s.bound << "-bound: MFU " << fmt_pct(s.mfu) << ", MBU "
      << fmt_pct(s.mbu) << ", " << fmt_pct(s.roofline_fraction) << " of roofline.";
    out.push_back(c.str());
    break;
  }
  return out;
}

namespace {

// A number of a JSON object, 0 when absent or null.
double num(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

// The load's figures (run --requests): latencies over the requests and the latency classes.
std::string format_load(const RunReport& r) {
  std::ostringstream o;
  const nlohmann::json& s = r.summary;
  Table t({"per request", "mean", "p50", "p90", "p99", "max"}, "lrrrrr");
  for (const auto& [key, label] : {std::pair{"ttft_ms", "TTFT"},
                                   {"tpot_ms", "TPOT"},
                                   {"itl_ms", "ITL"},
                                   {"e2e_ms", "E2E"},
                                   {"queue_ms", "queue"}}) {
    const nlohmann::json& d = s.value(key, nlohmann::json());
    if (!d.is_object()) {
      t.add({label, "-", "-", "-", "-", "-"});
      continue;
    }
    t.add({label, fmt_ms(num(d, "mean")), fmt_ms(num(d, "p50")), fmt_ms(num(d, "p90")),
           fmt_ms(num(d, "p99")), fmt_ms(num(d, "max"))});
  }
  const nlohmann::json& c = s.value("classes_ms", nlohmann::json());
  if (c.is_object()) {
    t.rule();
    for (const char* k : {"compute", "memory", "communication", "scheduling"}) {
      const nlohmann::json& d = c.value(k, nlohmann::json());
      t.add({std::string("class: ") + k, fmt_ms(num(d, "mean")), fmt_ms(num(d, "p50")),
             fmt_ms(num(d, "p90")), fmt_ms(num(d, "p99")), fmt_ms(num(d, "max"))});
    }
  }
  o << t.str();
  o << fmt_fixed(num(s, "request_throughput"), 2) << " req/s   "
    << fmt_fixed(num(s, "output_tokens_per_s"), 1) << " output tok/s   goodput "
    << fmt_fixed(num(s, "goodput"), 2) << " req/s";
  if (s.contains("slo") && s["slo"].is_string())
    o << " (SLO " << s["slo"].get<std::string>() << ": " << fmt_pct(num(s, "slo_attainment"))
      << " of requests)";
  o << "   preemptions " << int64_t(num(s, "preemptions")) << "   prefix-cache hits "
    << int64_t(num(s, "prefix_hit_tokens")) << " tokens\n\n";
  return o.str();
}

}  // namespace

std::string format_run_table(const RunReport& r) {
  std::ostringstream o;
  const RunInfo& ri = r.run;
  const bool load = r.load.is_object();
  const std::string kv = kv_dtype_of(ri) == "fp16" ? "" : ", KV cache " + ri.kv_dtype;
  if (load) {
    const nlohmann::json& l = r.load;
    o << "latprof run --requests: " << ri.model << " " << ri.dtype << kv << " on " << ri.backend
      << " (" << ri.device << "), " << int64_t(num(l, "requests")) << " requests, rate "
      << (l["rate"].is_string() ? l["rate"].get<std::string>() : fmt_fixed(num(l, "rate"), 2))
      << "/s (" << l.value("arrival", std::string()) << "), input "
      << l.value("input", std::string()) << ", output " << l.value("output", std::string())
      << ", at most " << ri.batch << " sequences in a step";
  } else {
    o << "latprof run: " << ri.model << " " << ri.dtype << kv << " on " << ri.backend << " ("
      << ri.device << "), input " << ri.input_tokens << ", output " << ri.output_tokens
      << ", batch " << ri.batch << ", " << ri.repeat << " repeat(s)";
  }
  const bool spread = ri.repeat > 1;
  if (spread) o << ": tables show the repeat with the median E2E; range: fastest..slowest repeat";
  o << "\n";
  o << "ceilings (" << r.ceilings.source << "): memory "
    << fmt_rate(r.ceilings.mem_bw_bytes_per_s, "B/s");
  if (const auto& ci = r.ceilings_info;
      ci.is_object() && ci.contains("read_bandwidth_before") && ci.contains("read_bandwidth_after"))
    o << " (mean of " << fmt_rate(ci["read_bandwidth_before"].get<double>(), "B/s")
      << " before and " << fmt_rate(ci["read_bandwidth_after"].get<double>(), "B/s")
      << " after the run)";
  o << ", compute " << fmt_rate(r.ceilings.matmul_flops_per_s, "FLOP/s");
  if (r.ceilings.f16_tile_flops_per_s > 0)
    o << ", fp16 tiles " << fmt_rate(r.ceilings.f16_tile_flops_per_s, "FLOP/s");
  if (r.ceilings.int8_ops_per_s > 0) o << ", int8 " << fmt_rate(r.ceilings.int8_ops_per_s, "op/s");
  o << "\n\n";

  Table st(with({"stage", "time", "share", "FLOPs", "bytes", "FLOP/B", "bound", "MFU", "MBU",
                 "roofline"},
                2, spread, "range"),
           with("lrrrrrlrrr", 2, spread));
  for (const auto& s : r.stages) {
    const bool work = s.cost.bytes() > 0;
    st.add(with({s.name, fmt_ms(s.time_ms), fmt_pct(s.share), work ? fmt_count(s.cost.flops) : "-",
                 work ? fmt_bytes(s.cost.bytes()) : "-", intensity(s.arithmetic_intensity),
                 or_dash(s.bound), work ? fmt_pct(s.mfu) : "-", work ? fmt_pct(s.mbu) : "-",
                 work ? fmt_pct(s.roofline_fraction) : "-"},
                2, spread, range(s.time_min_ms, s.time_max_ms)));
  }
  st.rule();
  if (load)
    st.add({"run", fmt_ms(num(r.load, "duration_ms")), "100%", "", "", "", "", "", "", ""});
  else
    st.add(with({"end-to-end", fmt_ms(r.metrics.e2e_ms), "100%", "", "", "", "", "", "", ""}, 2,
                spread, range(r.metrics.e2e_repeats_ms.min, r.metrics.e2e_repeats_ms.max)));
  o << st.str() << "\n";

  Table ot(with({"stage", "op", "time", "share", "FLOPs", "bytes", "FLOP/B", "bound", "achieved",
                 "roofline"},
                3, spread, "range"),
           with("llrrrrrlrr", 3, spread));
  std::string last;
  for (const auto& op : r.ops) {
    if (!last.empty() && op.stage != last) ot.rule();
    last = op.stage;
    const std::string achieved = op.bound == "compute" ? fmt_rate(op.achieved_flops_per_s, "FLOP/s")
                                                       : fmt_rate(op.achieved_bytes_per_s, "B/s");
    ot.add(with({op.stage, op.name, fmt_ms(op.time_ms), fmt_pct(op.share), fmt_count(op.cost.flops),
                 fmt_bytes(op.cost.bytes()), intensity(op.arithmetic_intensity), or_dash(op.bound),
                 achieved, fmt_pct(op.roofline_fraction)},
                3, spread, range(op.time_min_ms, op.time_max_ms)));
  }
  o << ot.str() << "\n";

  const Metrics& m = r.metrics;
  if (load) {
    o << format_load(r);
  } else {
    o << "TTFT " << fmt_ms(m.ttft_ms) << "   TPOT " << fmt_ms(m.tpot_ms) << "   E2E "
      << fmt_ms(m.e2e_ms) << "   ITL p50 " << fmt_ms(m.itl_ms.p50) << " p95 "
      << fmt_ms(m.itl_ms.p95) << " p99 " << fmt_ms(m.itl_ms.p99) << " max " << fmt_ms(m.itl_ms.max)
      << "\n";
    o << "prefill " << fmt_fixed(m.prefill_tokens_per_s, 1) << " tok/s   decode "
      << fmt_fixed(m.decode_tokens_per_s, 2) << " tok/s   MFU " << fmt_pct(m.mfu) << "   MBU "
      << fmt_pct(m.mbu) << "   setup " << fmt_ms(m.setup_ms) << " (not in E2E)\n";
    if (m.decode_sync_ms >= 0) {
      o << "thread pool: " << fmt_ms(m.decode_sync_ms) << " of synchronisation per decode step ("
        << fmt_pct(m.decode_sync_share) << " of its forward pass";
      if (m.decode_sync_fork_ms >= 0)
        o << "; late starts " << fmt_ms(m.decode_sync_fork_ms) << ", the rest waits at barriers";
      o << ") over " << fmt_fixed(m.decode_parallel_regions, 0) << " parallel regions";
      const nlohmann::json& ci = r.ceilings_info;
      if (ci.is_object() && ci.contains("core_to_core_ns_before") &&
          ci["core_to_core_ns_before"].is_number()) {
        o << "; a cache line takes " << fmt_fixed(ci["core_to_core_ns_before"].get<double>(), 0)
          << " ns from one of its cores to another";
        if (ci.contains("core_to_core_ns_after") && ci["core_to_core_ns_after"].is_number())
          o << " (" << fmt_fixed(ci["core_to_core_ns_after"].get<double>(), 0)
            << " ns after the run)";
      }
      o << "\n";
    }
    if (m.decode_offcpu_ms >= 0)
      o << "off-CPU: the thread pool's threads were not running " << fmt_ms(m.decode_offcpu_ms)
        << " per decode step (" << fmt_pct(m.decode_offcpu_share) << " of the decode steps; "
        << fmt_ms(m.decode_offcpu_max_ms) << " in the worst step), " << fmt_ms(m.decode_runq_ms)
        << " of it waiting behind other processes, the rest taken by the hypervisor or asleep\n";
    o << "\n";
    for (const auto& v : verdict_lines(r)) o << v << "\n";
  }
  for (const auto& c : r.checks)
    o << (c.level == "error"     ? "CHECK FAILED"
          : c.level == "warning" ? "warning"
                                 : "note")
      << " (" << c.subject << "): " << c.message << "\n";
  for (const auto& n : r.notes) o << "note: " << n << "\n";
  o << "(times measured; FLOPs, bytes and floors from the cost model"
    << (load ? "; latency classes from both, see README" : "") << ")\n";
  return o.str();
}

}  // namespace latprof
