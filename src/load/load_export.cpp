#include "load/load_export.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace latprof::load {

namespace {

constexpr size_t kMaxChunkEvents = 200000;  // instants beyond this are left out of the trace

double num(const nlohmann::json& v, double fallback = 0) {
  return v.is_number() ? v.get<double>() : fallback;
}

void add_point(nlohmann::json& ev, const nlohmann::json& point, int pid, const std::string& name,
               size_t& chunk_events) {
  ev.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}});
  std::vector<std::pair<double, int>> in_flight;  // (ms, +1 / -1)
  for (const auto& q : point["requests"]) {
    const int tid = q["id"].get<int>() + 1;
    ev.push_back({{"ph", "M"},
                  {"name", "thread_name"},
                  {"pid", pid},
                  {"tid", tid},
                  {"args", {{"name", "request " + std::to_string(tid - 1)}}}});
    auto slice = [&](const std::string& n, double ts_ms, double dur_ms, nlohmann::json args) {
      ev.push_back({{"ph", "X"},
                    {"name", n},
                    {"pid", pid},
                    {"tid", tid},
                    {"ts", ts_ms * 1e3},
                    {"dur", std::max(0.0, dur_ms) * 1e3},
                    {"args", std::move(args)}});
    };
    const double intended = num(q["intended_ms"]), sent = num(q["arrival_ms"]);
    const double done = num(q["done_ms"], sent);
    in_flight.push_back({sent, 1});
    in_flight.push_back({done, -1});
    if (num(q["client_queue_ms"]) > 0)
      slice("client queue", intended, sent - intended, nlohmann::json::object());
    if (!q["error"].is_null()) {
      slice("failed: " + q["error"]["kind"].get<std::string>(), sent, done - sent, q["error"]);
      continue;
    }
    const double ttft = num(q["ttft_ms"]), e2e = num(q["e2e_ms"]);
    slice("to first token", sent, ttft, {{"ttft_ms", ttft}, {"phases_ms", q["phases_ms"]}});
    slice("streaming", sent + ttft, e2e - ttft,
          {{"output_tokens", q["output_tokens"]},
           {"tpot_ms", q["tpot_ms"]},
           {"chain_ms", q["chain_ms"]}});
    double t = sent + ttft;
    auto chunk = [&](double at) {
      if (chunk_events++ >= kMaxChunkEvents) return;
      ev.push_back({{"ph", "i"},
                    {"s", "t"},
                    {"name", "chunk"},
                    {"pid", pid},
                    {"tid", tid},
                    {"ts", at * 1e3}});
    };
    chunk(t);
    if (q["chunk_gap_ms"].is_array())
      for (const auto& g : q["chunk_gap_ms"]) chunk(t += num(g));
  }
  std::sort(in_flight.begin(), in_flight.end());
  int n = 0;
  for (const auto& [ms, d] : in_flight) {
    n += d;
    ev.push_back({{"ph", "C"},
                  {"name", "requests in flight"},
                  {"pid", pid},
                  {"ts", ms * 1e3},
                  {"args", {{"in flight", n}}}});
  }
  const auto& m = point["server_metrics"];
  if (m.is_object())
    for (const auto& s : m["samples"]) {
      nlohmann::json args = nlohmann::json::object();
      for (const char* k : {"running", "waiting"})
        if (s[k].is_number()) args[k] = s[k];
      if (!args.empty())
        ev.push_back({{"ph", "C"},
                      {"name", "server requests"},
                      {"pid", pid},
                      {"ts", num(s["t_ms"]) * 1e3},
                      {"args", args}});
      if (s["kv_cache_usage"].is_number())
        ev.push_back({{"ph", "C"},
                      {"name", "server KV cache use"},
                      {"pid", pid},
                      {"ts", num(s["t_ms"]) * 1e3},
                      {"args", {{"kv_cache_usage", s["kv_cache_usage"]}}}});
    }
}

std::string point_name(const nlohmann::json& p) {
  if (p.contains("rate"))
    return "rate " + (p["rate"].is_string() ? p["rate"].get<std::string>() : p["rate"].dump());
  if (p.contains("concurrency")) return "concurrency " + p["concurrency"].dump();
  return "run";
}

}  // namespace

nlohmann::json load_trace_json(const nlohmann::json& report) {
  nlohmann::json ev = nlohmann::json::array();
  size_t chunk_events = 0;
  if (report.contains("points")) {
    int pid = 1;
    for (const auto& p : report["points"]) add_point(ev, p, pid++, point_name(p), chunk_events);
  } else if (report.contains("max_rate")) {
    int pid = 1;
    for (const auto& p : report["max_rate"]["probes"])
      add_point(ev, p, pid++, point_name(p), chunk_events);
  } else {
    add_point(ev, report, 1, "load", chunk_events);
  }
  return {{"traceEvents", std::move(ev)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"tool", "latprof load"},
            {"created_utc", report["created_utc"]},
            {"target", report["target"]}}}};
}

std::string load_jsonl_line(const nlohmann::json& report) {
  nlohmann::json j = report;
  auto strip = [](nlohmann::json& p) {
    p.erase("requests");
    if (p.contains("server_metrics") && p["server_metrics"].is_object())
      p["server_metrics"].erase("samples");
  };
  strip(j);
  if (j.contains("points"))
    for (auto& p : j["points"]) strip(p);
  if (j.contains("max_rate"))
    for (auto& p : j["max_rate"]["probes"]) strip(p);
  return j.dump();
}

}  // namespace latprof::load
