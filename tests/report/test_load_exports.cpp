// The exports of a load-mode report (`run --requests`): CSV one row per request, the trace's
// request and engine tracks, the JSON Lines summary figures and the HTML charts, on a hand-made
// report and on a real `latprof run --requests`; the single-request exports keep their form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "cli/cli_util.hpp"
#include "report/csv.hpp"
#include "report/exports.hpp"
#include "report/html.hpp"
#include "report/report_fixture.hpp"
#include "report/trace.hpp"

namespace {

using namespace latprof;
using nlohmann::json;

using report_test::lines_of;

// The CSV as one map per row, by column name; every row has the header's cells.
std::vector<std::map<std::string, std::string>> parse_csv(const std::string& text) {
  const auto lines = lines_of(text);
  EXPECT_FALSE(lines.empty());
  std::vector<std::map<std::string, std::string>> rows;
  if (lines.empty()) return rows;
  const auto head = csv_split(lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    const auto cells = csv_split(lines[i]);
    EXPECT_EQ(cells.size(), head.size()) << lines[i];
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < head.size() && c < cells.size(); ++c) row[head[c]] = cells[c];
    rows.push_back(row);
  }
  return rows;
}

// The CSV of a load-mode report against its JSON: one row per request, each cell the report's
// figure (the ttft column equal to the JSON's, bit for bit), nulls as empty cells.
void expect_csv_matches(const std::string& csv, const json& requests) {
  const auto lines = lines_of(csv);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(csv_split(lines[0]), requests_csv_header());
  const auto rows = parse_csv(csv);
  ASSERT_EQ(rows.size(), requests.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const json& q = requests[i];
    SCOPED_TRACE("request " + row.at("id"));
    EXPECT_EQ(std::stoll(row.at("id")), q["id"].get<int64_t>());
    EXPECT_EQ(std::stod(row.at("ttft_ms")), q["ttft_ms"].get<double>());
    EXPECT_EQ(std::stod(row.at("e2e_ms")), q["e2e_ms"].get<double>());
    EXPECT_EQ(std::stod(row.at("arrival_ms")), q["arrival_ms"].get<double>());
    EXPECT_EQ(std::stoll(row.at("output_tokens")), q["output_tokens"].get<int64_t>());
    EXPECT_EQ(std::stoll(row.at("input_tokens")), q["input_tokens"].get<int64_t>());
    for (const char* k : {"queue_ms", "tpot_ms"}) {
      if (q[k].is_null()) {
        EXPECT_EQ(row.at(k), "") << k;
      } else {
        EXPECT_EQ(std::stod(row.at(k)), q[k].get<double>()) << k;
      }
    }
    EXPECT_EQ(row.at("slo_met"), q["slo_met"].get<bool>() ? "true" : "false");
    EXPECT_EQ(std::stoll(row.at("preemptions")), q["preemptions"].get<int64_t>());
    EXPECT_EQ(std::stoll(row.at("prefix_hit_tokens")), q["prefix_hit_tokens"].get<int64_t>());
    const auto& gaps = q["itl_ms"];
    if (gaps.empty()) {
      EXPECT_EQ(row.at("itl_p99_ms"), "");
      EXPECT_EQ(row.at("itl_max_ms"), "");
    } else {
      double mx = 0;
      for (const auto& g : gaps) mx = std::max(mx, g.get<double>());
      EXPECT_EQ(std::stod(row.at("itl_max_ms")), mx);
      EXPECT_LE(std::stod(row.at("itl_p50_ms")), std::stod(row.at("itl_p99_ms")));
      EXPECT_LE(std::stod(row.at("itl_p99_ms")), mx);
    }
    if (q["classes_ms"].is_object()) {
      double sum = 0;
      for (const char* c : {"compute", "memory", "communication", "scheduling"}) {
        const double v = std::stod(row.at(std::string("class_") + c + "_ms"));
        EXPECT_EQ(v, q["classes_ms"][c].get<double>()) << c;
        sum += v;
      }
      EXPECT_NEAR(sum, q["e2e_ms"].get<double>(), 1e-9 + 1e-9 * sum);
    }
  }
}

// The trace of a load-mode report against its JSON: spans on each track nested or disjoint; one
// track per request whose phases tile its span and add up to e2e_ms; one token instant per
// output token, the last at arrival + ttft + the sum of the gaps; one span per engine step and
// the counters sampled at every step.
void expect_trace_matches(const json& t, const json& requests, size_t steps) {
  ASSERT_TRUE(t.contains("traceEvents"));
  EXPECT_EQ(t["displayTimeUnit"], "ms");
  std::map<int, std::string> thread_names;  // pid 3 tids
  std::set<std::pair<int, int>> named;
  struct Track {
    std::vector<json> spans, instants;
  };
  std::map<std::pair<int, int>, Track> tracks;
  std::map<std::string, size_t> counters;
  for (const auto& e : t["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("name") && e.contains("pid")) << e.dump();
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "thread_name") {
        named.insert({e["pid"].get<int>(), e["tid"].get<int>()});
        if (e["pid"] == 3) thread_names[e["tid"].get<int>()] = e["args"]["name"];
      }
      continue;
    }
    EXPECT_GE(e["ts"].get<double>(), 0) << e.dump();
    if (ph == "C") {
      ++counters[e["name"]];
      for (const auto& [k, v] : e["args"].items()) EXPECT_TRUE(v.is_number()) << e.dump();
      continue;
    }
    const std::pair<int, int> key{e["pid"].get<int>(), e["tid"].get<int>()};
    if (ph == "i") {
      tracks[key].instants.push_back(e);
      continue;
    }
    ASSERT_EQ(ph, "X") << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0);
    tracks[key].spans.push_back(e);
  }
  // Nested or disjoint on every track, and every track named.
  for (auto& [key, tr] : tracks) {
    EXPECT_TRUE(named.count(key)) << key.first << "/" << key.second;
    auto spans = tr.spans;
    std::stable_sort(spans.begin(), spans.end(), [](const json& a, const json& b) {
      if (a["ts"] != b["ts"]) return a["ts"].get<double>() < b["ts"].get<double>();
      return a["dur"].get<double>() > b["dur"].get<double>();
    });
    std::vector<double> stack;
    for (const auto& s : spans) {
      const double a = s["ts"].get<double>(), b = a + s["dur"].get<double>();
      while (!stack.empty() && stack.back() <= a + 1e-6) stack.pop_back();
      if (!stack.empty()) {
        EXPECT_LE(b, stack.back() + 1e-6) << s.dump() << " overlaps its parent";
      }
      stack.push_back(b);
    }
  }
  // The engine: one span per step on pid 1, counters at every step.
  size_t step_spans = 0;
  for (const auto& [key, tr] : tracks)
    if (key.first == 1)
      for (const auto& s : tr.spans) step_spans += s["cat"] == "engine_step";
  EXPECT_EQ(step_spans, steps);
  EXPECT_EQ(counters["KV usage"], steps);
  EXPECT_GE(counters["running sequences"], steps);
  EXPECT_GE(counters["step tokens"], steps);
  // The requests: one track each.
  EXPECT_EQ(thread_names.size(), requests.size());
  for (const json& q : requests) {
    const int tid = q["id"].get<int>() + 1;
    SCOPED_TRACE("request " + std::to_string(tid - 1));
    EXPECT_EQ(thread_names[tid], "request " + std::to_string(tid - 1));
    const Track& tr = tracks[{3, tid}];
    const double arrival_us = q["arrival_ms"].get<double>() * 1e3;
    const double e2e_us = q["e2e_ms"].get<double>() * 1e3;
    double phases_us = 0, whole_us = -1;
    std::map<std::string, json> by_name;
    for (const auto& s : tr.spans) {
      by_name[s["name"]] = s;
      if (s["cat"] == "request")
        whole_us = s["dur"].get<double>();
      else
        phases_us += s["dur"].get<double>();
    }
    EXPECT_NEAR(whole_us, e2e_us, 1e-3);
    EXPECT_NEAR(phases_us, e2e_us, 1e-3) << "the phases do not add up to e2e";
    const bool queued = !q["queue_ms"].is_null();
    EXPECT_EQ(by_name.count("queued"), queued ? 1u : 0u);
    EXPECT_EQ(by_name.count(queued ? "prefill" : "queued + prefill"), 1u);
    ASSERT_EQ(by_name.count("decode"), 1u);
    EXPECT_NEAR(by_name["decode"]["ts"].get<double>(),
                arrival_us + q["ttft_ms"].get<double>() * 1e3, 1e-3);
    if (queued) {
      EXPECT_NEAR(by_name["queued"]["dur"].get<double>(), q["queue_ms"].get<double>() * 1e3, 1e-3);
    }
    ASSERT_EQ(tr.instants.size(), q["output_tokens"].get<size_t>());
    double last_ms = q["arrival_ms"].get<double>() + q["ttft_ms"].get<double>();
    for (const auto& g : q["itl_ms"]) last_ms += g.get<double>();
    EXPECT_NEAR(tr.instants.back()["ts"].get<double>(), last_ms * 1e3, 1e-3);
    EXPECT_NEAR(tr.instants.front()["ts"].get<double>(),
                arrival_us + q["ttft_ms"].get<double>() * 1e3, 1e-3);
  }
}

// The HTML of a load-mode report: its charts and tables are there, one TTFT sample per request.
void expect_html_has_load_charts(const std::string& h, size_t requests) {
  for (const char* id : {"load-metrics", "load-summary", "ttft-hist", "itl-hist", "class-bar",
                         "class-table", "batch-chart", "kv-chart", "stage-bar"})
    EXPECT_NE(h.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_EQ(h.find("id=\"decode-chart\""), std::string::npos);  // single-request only
  const size_t a = h.find("<svg id=\"ttft-hist\""), b = h.find("</svg>", a);
  ASSERT_NE(a, std::string::npos);
  const std::string svg = h.substr(a, b - a);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("data-samples=\"([0-9]+)\"")));
  EXPECT_EQ(std::stoul(m[1]), requests);
  size_t sum = 0;
  const std::regex cnt("data-count=\"([0-9]+)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), cnt); it != std::sregex_iterator();
       ++it)
    sum += std::stoul((*it)[1]);
  EXPECT_EQ(sum, requests) << "the TTFT bins do not hold every request";
}

TEST(LoadExports, CsvOneRowPerRequest) {
  const RunReport r = report_test::make_load_report();
  const std::string csv = csv_export(r);
  expect_csv_matches(csv, r.requests);
  // The header is the column list, each column described once.
  const auto head = requests_csv_header();
  ASSERT_EQ(head.size(), request_columns().size());
  std::set<std::string> names;
  for (const auto& c : request_columns()) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
    EXPECT_GT(std::string(c.description).size(), 0u) << c.name;
  }
  for (const char* c : {"id", "ttft_ms", "tpot_ms", "e2e_ms", "itl_p50_ms", "itl_p99_ms",
                        "itl_max_ms", "queue_ms", "slo_met", "class_scheduling_ms"})
    EXPECT_TRUE(names.count(c)) << c;
  const auto rows = parse_csv(csv);
  EXPECT_EQ(rows[3].at("queue_ms"), "");  // not known for request 3
  EXPECT_EQ(rows[7].at("tpot_ms"), "");   // one output token
  EXPECT_EQ(rows[7].at("itl_p50_ms"), "");
  // The SLO (ttft:3ms) holds for the first requests only: ttft = 2.5 + 0.1k ms.
  EXPECT_EQ(rows[0].at("slo_met"), "true");
  EXPECT_EQ(rows[11].at("slo_met"), "false");
  // Request 1's gaps are 1.1, 1.2, 1.3, 1.4 ms: p50 1.25.
  EXPECT_NEAR(std::stod(rows[1].at("itl_p50_ms")), 1.25, 1e-9);
  EXPECT_NEAR(std::stod(rows[1].at("itl_max_ms")), 1.4, 1e-9);
}

TEST(LoadExports, SingleRequestCsvUnchanged) {
  const RunReport r = report_test::make_report();
  EXPECT_EQ(csv_export(r), report_csv(r));
  EXPECT_EQ(csv_split(lines_of(csv_export(r))[0]), csv_header());
}

TEST(LoadExports, TraceTrackPerRequestAndEngineSteps) {
  const RunReport r = report_test::make_load_report();
  const json t = trace_json(r);
  expect_trace_matches(t, r.requests, r.steps.size());
  EXPECT_EQ(t["otherData"]["load"], r.load);
  // No single-request timeline in load mode.
  for (const auto& e : t["traceEvents"]) EXPECT_NE(e.value("cat", ""), "op");
  // A step span carries its tokens and sequences.
  for (const auto& e : t["traceEvents"]) {
    if (e.value("cat", "") != "engine_step") continue;
    for (const char* k : {"prefill_tokens", "decode_tokens", "seqs", "kv_usage"})
      EXPECT_TRUE(e["args"].contains(k)) << k << e.dump();
  }
}

TEST(LoadExports, SingleRequestTraceHasNoLoadTracks) {
  const json t = trace_json(report_test::make_report());
  for (const auto& e : t["traceEvents"]) {
    EXPECT_NE(e["pid"], 3);
    EXPECT_NE(e["ph"], "C");
  }
  EXPECT_FALSE(t["otherData"].contains("load"));
}

TEST(LoadExports, JsonlCarriesTheSummary) {
  const RunReport r = report_test::make_load_report();
  const json j = jsonl_record(r);
  for (const auto& [k, v] : j.items()) EXPECT_FALSE(v.is_object() || v.is_array()) << k;
  EXPECT_EQ(j["requests"], 12);
  EXPECT_EQ(j["rate"], 200.0);
  EXPECT_EQ(j["slo"], "ttft:3ms");
  const json& s = r.summary;
  EXPECT_EQ(j["ttft_p50_ms"], s["ttft_ms"]["p50"]);
  EXPECT_EQ(j["ttft_p99_ms"], s["ttft_ms"]["p99"]);
  EXPECT_EQ(j["tpot_p50_ms"], s["tpot_ms"]["p50"]);
  EXPECT_EQ(j["tpot_p99_ms"], s["tpot_ms"]["p99"]);
  EXPECT_EQ(j["itl_p99_ms"], s["itl_ms"]["p99"]);
  EXPECT_EQ(j["e2e_p99_ms"], s["e2e_ms"]["p99"]);
  EXPECT_EQ(j["request_throughput"], s["request_throughput"]);
  EXPECT_EQ(j["output_tokens_per_s"], s["output_tokens_per_s"]);
  EXPECT_EQ(j["goodput"], s["goodput"]);
  EXPECT_EQ(j["slo_attainment"], s["slo_attainment"]);
  EXPECT_LT(j["goodput"].get<double>(), j["request_throughput"].get<double>());
  // The single-request line has none of them.
  const json one = jsonl_record(report_test::make_report());
  for (const auto& f : load_summary_fields()) {
    if (std::string(f.name) == "itl_p99_ms") continue;  // a metric of both modes
    EXPECT_FALSE(one.contains(f.name)) << f.name;
  }
  EXPECT_FALSE(one.contains("requests"));
}

TEST(LoadExports, HtmlHasTheLoadCharts) {
  const RunReport r = report_test::make_load_report();
  const std::string h = report_html(r);
  expect_html_has_load_charts(h, r.requests.size());
  // The batch chart: one bar per step with decode tokens and one with prefill tokens.
  size_t dec = 0, pre = 0;
  for (const StepRow& st : r.steps) {
    dec += st.decode_tokens > 0;
    pre += st.prefill_tokens > 0;
  }
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = h.find(what); at != std::string::npos; at = h.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<rect class=\"dec\""), dec);
  EXPECT_EQ(count("<rect class=\"pre\""), pre);
  EXPECT_EQ(count("<rect class=\"latency-class\""), 4u);
  EXPECT_NE(h.find("12 requests at 200.0/s (constant)"), std::string::npos);
  // The single-request page has none of them.
  const std::string one = report_html(report_test::make_report());
  for (const char* id : {"ttft-hist", "itl-hist", "batch-chart", "kv-chart", "class-bar"})
    EXPECT_EQ(one.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_NE(one.find("id=\"decode-chart\""), std::string::npos);
}

// A long ITL tail: the bins end near p99 and the samples beyond are one overflow bar.
TEST(LoadExports, HtmlItlTailGoesToAnOverflowBar) {
  report_test::LoadFixture lf;
  lf.requests = 40;
  lf.itl_spike_ms = 500;
  const RunReport r = report_test::make_load_report(lf);
  const std::string h = report_html(r);
  const size_t a = h.find("<svg id=\"itl-hist\""), b = h.find("</svg>", a);
  ASSERT_NE(a, std::string::npos);
  const std::string svg = h.substr(a, b - a);
  size_t gaps = 0;
  for (const auto& q : r.requests) gaps += q["itl_ms"].size();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("data-overflow=\"([0-9]+)\"")));
  // Only samples above the report's p99 overflow: the spike, at most 1% of the gaps and one more.
  EXPECT_GE(std::stoul(m[1]), 1u);
  EXPECT_LE(std::stoul(m[1]), gaps / 100 + 1);
  EXPECT_NE(svg.find("class=\"bin overflow\""), std::string::npos);
  size_t sum = 0;
  const std::regex cnt("data-count=\"([0-9]+)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), cnt); it != std::sregex_iterator();
       ++it)
    sum += std::stoul((*it)[1]);
  EXPECT_EQ(sum, gaps);
}

// A report read back from its JSON prints the same exports.
TEST(LoadExports, ReadBackReportPrintsTheSame) {
  const RunReport r = report_test::make_load_report();
  const RunReport back = report_from_json(report_to_json(r), "test");
  EXPECT_EQ(csv_export(back), csv_export(r));
  EXPECT_EQ(trace_json(back)["traceEvents"].size(), trace_json(r)["traceEvents"].size());
}

// The backquoted names in README from `lead` up to `stop`, parenthesised remarks left out.
std::vector<std::string> readme_names(const std::string& lead, const std::string& stop) {
  const std::string readme = cli_test::slurp(std::string(LATPROF_TEST_DIR) + "/../README.md");
  const size_t a = readme.find(lead);
  EXPECT_NE(a, std::string::npos) << lead;
  if (a == std::string::npos) return {};
  const size_t b = readme.find(stop, a);
  std::string text = readme.substr(a + lead.size(), b - a - lead.size());
  text = std::regex_replace(text, std::regex("\\([^)]*\\)"), "");
  std::vector<std::string> names;
  const std::regex tick("`([a-z0-9_]+)`");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), tick); it != std::sregex_iterator();
       ++it)
    names.push_back((*it)[1]);
  return names;
}

// README lists the load-mode CSV columns and JSON Lines fields that are written, in order.
TEST(LoadExports, ReadmeListsTheColumnsAndFields) {
  std::vector<std::string> cols = {"id"};
  for (const auto& n : readme_names("figures: `id`", "Times in ms")) cols.push_back(n);
  EXPECT_EQ(cols, requests_csv_header());
  const json one = jsonl_record(report_test::make_report());
  std::vector<std::string> added;
  const json load = jsonl_record(report_test::make_load_report());
  for (const auto& [k, v] : load.items())
    if (!one.contains(k) || k == "itl_p99_ms") added.push_back(k);
  std::vector<std::string> listed = readme_names("headline figures: ", "(each from");
  std::sort(listed.begin(), listed.end());
  std::sort(added.begin(), added.end());
  EXPECT_EQ(listed, added);
}

// `latprof run --requests` with every export: each holds every request, consistent with the JSON.
TEST(LoadExports, LatprofRunRequestsWritesThemAll) {
  const auto d = cli_test::temp_dir("load-exports");
  for (const char* f : {"r.json", "t.json", "r.csv", "r.jsonl", "r.html"})
    std::filesystem::remove(d / f);
  const std::string args =
      "run --model tiny --requests 12 --rate inf --input uniform:8:32 --output uniform:2:8 "
      "--threads 1 --slo ttft:10s --quiet --json " +
      (d / "r.json").string() + " --trace " + (d / "t.json").string() + " --csv " +
      (d / "r.csv").string() + " --jsonl " + (d / "r.jsonl").string() + " --html " +
      (d / "r.html").string();
  const auto res = cli_test::latprof(args);
  ASSERT_EQ(res.code, 0) << res.err;
  const json rep = json::parse(cli_test::slurp((d / "r.json").string()));
  ASSERT_EQ(rep["requests"].size(), 12u);
  expect_csv_matches(cli_test::slurp((d / "r.csv").string()), rep["requests"]);
  expect_trace_matches(json::parse(cli_test::slurp((d / "t.json").string())), rep["requests"],
                       rep["steps"].size());
  expect_html_has_load_charts(cli_test::slurp((d / "r.html").string()), 12);
  const auto jl = lines_of(cli_test::slurp((d / "r.jsonl").string()));
  ASSERT_EQ(jl.size(), 1u);
  const json line = json::parse(jl[0]);
  EXPECT_EQ(line["requests"], 12);
  EXPECT_EQ(line["rate"], "inf");
  EXPECT_EQ(line["ttft_p99_ms"], rep["summary"]["ttft_ms"]["p99"]);
  EXPECT_EQ(line["goodput"], rep["summary"]["goodput"]);
}

}  // namespace
