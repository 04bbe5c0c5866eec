// The exports of a run: Chrome trace (required fields, tracks, nesting), CSV (columns, quoting),
// JSON Lines (flat, appended), the path checks, and `latprof run` writing all of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "cli/cli_util.hpp"
#include "core/error.hpp"
#include "report/csv.hpp"
#include "report/exports.hpp"
#include "report/report_fixture.hpp"
#include "report/schema_check.hpp"
#include "report/trace.hpp"

namespace {

using namespace latprof;
using nlohmann::json;

using report_test::lines_of;

// Every "X" event has the required fields; on each (pid, tid) spans are nested or disjoint.
// Returns the nesting depth of each event name's first occurrence.
std::map<std::string, int> check_trace(const json& t) {
  EXPECT_TRUE(t.contains("traceEvents"));
  EXPECT_EQ(t["displayTimeUnit"], "ms");
  std::map<std::pair<int, int>, std::vector<std::tuple<double, double, std::string>>> tracks;
  std::set<std::pair<int, int>> named;
  std::set<int> named_pids;
  for (const auto& e : t["traceEvents"]) {
    EXPECT_TRUE(e.contains("ph") && e.contains("name") && e.contains("pid")) << e.dump();
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") named.insert({e["pid"].get<int>(), e["tid"].get<int>()});
      if (e["name"] == "process_name") named_pids.insert(e["pid"].get<int>());
      EXPECT_TRUE(e["args"].contains("name") || e["args"].contains("sort_index")) << e.dump();
      continue;
    }
    EXPECT_EQ(e["ph"], "X") << e.dump();
    for (const char* k : {"tid", "ts", "dur", "cat"}) EXPECT_TRUE(e.contains(k)) << k << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_GE(e["ts"].get<double>(), 0);
    tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(
        e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>(),
        e["name"].get<std::string>());
  }
  std::map<std::string, int> depth;
  for (auto& [key, spans] : tracks) {
    EXPECT_TRUE(named.count(key)) << "track " << key.first << "/" << key.second << " has no name";
    EXPECT_TRUE(named_pids.count(key.first));
    std::stable_sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
      if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) < std::get<0>(b);
      return std::get<1>(a) > std::get<1>(b);
    });
    std::vector<double> stack;  // ends of the open spans
    const double eps = 1e-6;    // us: below the ns resolution
    for (const auto& [a, b, name] : spans) {
      while (!stack.empty() && stack.back() <= a + eps) stack.pop_back();
      if (!stack.empty()) {
        EXPECT_LE(b, stack.back() + eps) << name << " overlaps its parent";
      }
      if (key.first == 1) depth.try_emplace(name, int(stack.size()));
      stack.push_back(b);
    }
  }
  return depth;
}

TEST(Trace, StagesStepsLayersOpsNest) {
  const RunReport r = report_test::make_report();
  const json t = trace_json(r);
  const auto depth = check_trace(t);
  EXPECT_EQ(depth.at("tokenize"), 0);
  EXPECT_EQ(depth.at("prefill"), 0);
  EXPECT_EQ(depth.at("decode"), 0);
  EXPECT_EQ(depth.at("decode_step 1"), 1);
  EXPECT_EQ(depth.at("layer 0"), 1);  // first seen in prefill: stage > layer
  EXPECT_EQ(depth.at("embed"), 1);
  EXPECT_EQ(depth.at("qkv_proj"), 2);
  // Every decode step, and every op of the median repeat, is there.
  size_t ops = 0, steps = 0, layers = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ops += e["cat"] == "op";
    steps += e["cat"] == "step" && e["name"].get<std::string>().rfind("decode_step", 0) == 0;
    layers += e["cat"] == "layer";
  }
  size_t ops_in = 0;
  for (const auto& e : r.timeline) ops_in += !e.stage.empty();
  EXPECT_EQ(ops, ops_in);
  EXPECT_EQ(steps, size_t(r.run.output_tokens - 1));
  const int64_t n_layers = r.model_config["n_layers"].get<int64_t>();
  EXPECT_EQ(layers, size_t(n_layers * r.run.output_tokens));  // prefill + each decode step
  EXPECT_EQ(t["otherData"]["model"], "tiny");
}

TEST(Trace, GpuKernelsOnTheirOwnTrack) {
  RunReport r = report_test::make_report();
  r.profile = {{"activity",
                {{"kernels",
                  {{{"name", "gemv_f16"}, {"start_ns", 0}, {"end_ns", 1500}, {"range", 3}},
                   {{"name", "attention"}, {"start_ns", 2000}, {"end_ns", 2600}}}},
                 {"copies", {{{"name", "HtoD"}, {"start_ns", 100}, {"end_ns", 300}}}}}}};
  const json t = trace_json(r);
  check_trace(t);
  int kernels = 0, copies = 0;
  std::set<int> tids;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X" || e["pid"] != 2) continue;
    kernels += e["cat"] == "gpu_kernel";
    copies += e["cat"] == "gpu_copy";
    tids.insert(e["tid"].get<int>());
    if (e["name"] == "gemv_f16") {
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1.5);
      EXPECT_EQ(e["args"]["range"], 3);
    }
  }
  EXPECT_EQ(kernels, 2);
  EXPECT_EQ(copies, 1);
  EXPECT_EQ(tids.size(), 2u);  // kernels and copies apart
  // No profile, no GPU process.
  const json plain = trace_json(report_test::make_report());
  for (const auto& e : plain["traceEvents"]) EXPECT_NE(e["pid"], 2);
}

TEST(Csv, OneRowPerStageAndOp) {
  RunReport r = report_test::make_report();
  r.run.device = "Xeon, \"test\" edition";
  const auto lines = lines_of(report_csv(r));
  ASSERT_EQ(lines.size(), 1 + r.stages.size() + r.ops.size());
  const auto head = csv_split(lines[0]);
  EXPECT_EQ(head, csv_header());
  for (const char* c : {"kind", "stage", "op", "time_ms", "share", "flops", "bytes",
                        "arithmetic_intensity", "bound", "mfu", "mbu", "floor_ms"})
    EXPECT_NE(std::find(head.begin(), head.end(), c), head.end()) << c;
  auto col = [&](const char* name) {
    return size_t(std::find(head.begin(), head.end(), name) - head.begin());
  };
  for (size_t i = 1; i < lines.size(); ++i) {
    const auto cells = csv_split(lines[i]);
    ASSERT_EQ(cells.size(), head.size()) << lines[i];
    EXPECT_EQ(cells[col("device")], r.run.device);
  }
  const auto dec = csv_split(lines[1 + 2]);
  EXPECT_EQ(dec[col("kind")], "stage");
  EXPECT_EQ(dec[col("stage")], "decode");
  EXPECT_EQ(dec[col("bound")], "memory");
  EXPECT_DOUBLE_EQ(std::stod(dec[col("time_ms")]), r.stages[2].time_ms);
  EXPECT_DOUBLE_EQ(std::stod(dec[col("bytes")]), r.stages[2].cost.bytes());
  const auto op = csv_split(lines[1 + r.stages.size()]);
  EXPECT_EQ(op[col("kind")], "op");
  EXPECT_EQ(op[col("stage")], r.ops[0].stage);
  EXPECT_EQ(op[col("op")], r.ops[0].name);
  EXPECT_EQ(op[col("calls")], std::to_string(r.ops[0].calls));
}

TEST(Jsonl, FlatAndAppended) {
  const auto dir = cli_test::temp_dir("jsonl");
  const auto path = (dir / "runs.jsonl").string();
  std::filesystem::remove(path);
  ExportOptions o;
  o.jsonl = path;
  report_test::Fixture f;
  write_exports(report_test::make_report(f), o);
  f.dtype = "int8";
  write_exports(report_test::make_report(f), o);
  const auto lines = lines_of(cli_test::slurp(path));
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& l : lines) {
    const json j = json::parse(l);
    for (const char* k : {"timestamp", "commit", "model", "dtype", "backend", "device",
                          "input_tokens", "output_tokens", "batch", "ttft_ms", "tpot_ms", "e2e_ms",
                          "itl_p50_ms", "itl_p99_ms", "decode_tokens_per_s", "mfu", "mbu"})
      EXPECT_TRUE(j.contains(k)) << k;
    for (const auto& [k, v] : j.items()) EXPECT_FALSE(v.is_object() || v.is_array()) << k;
  }
  EXPECT_EQ(json::parse(lines[0])["dtype"], "fp16");
  EXPECT_EQ(json::parse(lines[1])["dtype"], "int8");
}

TEST(Exports, PathsAreCheckedBeforeTheRun) {
  ExportOptions o;
  o.csv = "/nonexistent-dir/x.csv";
  try {
    check_export_paths(o);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--csv /nonexistent-dir/x.csv"), std::string::npos)
        << e.what();
  }
  o = {};
  o.trace = cli_test::temp_dir("exports").string();  // a directory
  EXPECT_THROW(check_export_paths(o), UsageError);
  EXPECT_NO_THROW(check_export_paths({}));
}

// `latprof run` with every export: each file is there and valid.
TEST(Exports, LatprofRunWritesThemAll) {
  const auto d = cli_test::temp_dir("run-exports");
  for (const char* f : {"r.json", "t.json", "r.csv", "r.jsonl", "r.html"})
    std::filesystem::remove(d / f);
  const std::string args = "run --model tiny --input 8 --output 4 --repeat 2 --quiet --json " +
                           (d / "r.json").string() + " --trace " + (d / "t.json").string() +
                           " --csv " + (d / "r.csv").string() + " --jsonl " +
                           (d / "r.jsonl").string() + " --html " + (d / "r.html").string();
  const auto r = cli_test::latprof(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const json rep = json::parse(cli_test::slurp((d / "r.json").string()));
  const auto v = schema_violations(rep, load_run_report_schema());
  EXPECT_TRUE(v.empty()) << (v.empty() ? "" : v[0]);
  const json t = json::parse(cli_test::slurp((d / "t.json").string()));
  const auto depth = check_trace(t);
  EXPECT_EQ(depth.count("prefill"), 1u);
  EXPECT_EQ(depth.count("decode_step 1"), 1u);
  EXPECT_EQ(depth.at("decode"), 0);
  const auto csv = lines_of(cli_test::slurp((d / "r.csv").string()));
  EXPECT_EQ(csv.size(), 1 + rep["stages"].size() + rep["ops"].size());
  const auto jl = lines_of(cli_test::slurp((d / "r.jsonl").string()));
  ASSERT_EQ(jl.size(), 1u);
  EXPECT_EQ(json::parse(jl[0])["e2e_ms"], rep["metrics"]["e2e_ms"]);
  const std::string html = cli_test::slurp((d / "r.html").string());
  EXPECT_NE(html.find("id=\"decode-chart\""), std::string::npos);
}

}  // namespace
