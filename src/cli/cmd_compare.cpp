// latprof compare: two or more run reports side by side, and the regression gate.
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"
#include "load/load_compare.hpp"
#include "report/compare.hpp"

namespace latprof::cli {

namespace {
// Labels: file names, or the paths as given where two file names are the same.
std::vector<std::string> labels_for(const std::vector<std::string>& paths) {
  std::vector<std::string> names;
  for (const auto& p : paths) {
    const size_t slash = p.find_last_of('/');
    names.push_back(slash == std::string::npos ? p : p.substr(slash + 1));
  }
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t k = 0; k < names.size(); ++k)
      if (i != k && names[i] == names[k]) return paths;
  return names;
}
}  // namespace

CommandFn add_compare_command(CLI::App& app) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto json_path = std::make_shared<std::string>();
  auto md_path = std::make_shared<std::string>();
  auto fail_pct = std::make_shared<double>(-1);
  auto metric = std::make_shared<std::string>("e2e_ms");
  CLI::App* sub = app.add_subcommand(
      "compare",
      "Compare run reports (--json of 'latprof run'): metrics, stages and ops of each against "
      "the first, with speed-ups, noise, bounds and a verdict; optionally a regression gate");
  sub->add_option("reports", *files, "Two or more report files; the first is the baseline")
      ->required();
  sub->add_option("--json", *json_path, "Write the comparison as JSON");
  sub->add_option("--md", *md_path, "Write the comparison as Markdown");
  sub->add_option("--fail-if-slower", *fail_pct,
                  "Exit 1 when a later report is worse than the first by more than PCT percent "
                  "on --metric")
      ->type_name("PCT");
  sub->add_option("--metric", *metric,
                  "Metric of the gate: e2e, ttft, tpot, itl_p50_ms, itl_p95_ms, itl_p99_ms, "
                  "prefill_tokens_per_s, decode_tokens_per_s, mfu, mbu")
      ->capture_default_str();
  return [=]() -> int {
    if (files->size() < 2)
      usage_error("compare needs at least 2 report files (got " + std::to_string(files->size()) +
                  ")");
    if (sub->count("--fail-if-slower") && !(*fail_pct >= 0))
      usage_error("--fail-if-slower must be a percentage >= 0");
    if (load::is_load_report(files->front())) {  // latprof load reports: src/load/load_compare
      if (!json_path->empty()) check_writable(*json_path, "--json");
      if (!md_path->empty()) check_writable(*md_path, "--md");
      check_distinct_outputs({{"--json", *json_path}, {"--md", *md_path}});
      check_not_an_input(*json_path, "--json", *files);
      check_not_an_input(*md_path, "--md", *files);
      load::LoadCompareOptions lo;
      lo.labels = labels_for(*files);
      for (auto& l : lo.labels) l = utf8_sanitize(l);
      lo.gate_metric = *metric;
      lo.fail_if_slower_pct = sub->count("--fail-if-slower") ? *fail_pct : -1;
      const load::LoadComparison c = load::compare_load_reports(*files, lo);
      std::fputs(c.text.c_str(), stdout);
      std::fflush(stdout);
      if (!json_path->empty()) write_file_atomic(*json_path, c.json.dump(2) + "\n");
      if (!md_path->empty()) write_file_atomic(*md_path, c.markdown);
      if (!c.gate_failure.empty()) throw CheckFailed(c.gate_failure);
      return 0;
    }
    if (!find_metric_field(*metric)) {
      std::string names;
      for (const auto& m : metric_fields())
        names += (names.empty() ? "" : ", ") + std::string(m.name);
      usage_error("--metric " + *metric + " is not a metric; choose one of: " + names);
    }
    if (!json_path->empty()) check_writable(*json_path, "--json");
    if (!md_path->empty()) check_writable(*md_path, "--md");
    check_distinct_outputs({{"--json", *json_path}, {"--md", *md_path}});
    check_not_an_input(*json_path, "--json", *files);
    check_not_an_input(*md_path, "--md", *files);
    std::vector<RunReport> reports;
    for (const auto& f : *files) reports.push_back(load_report(f));
    CompareOptions o;
    o.labels = labels_for(*files);
    for (auto& l : o.labels) l = utf8_sanitize(l);  // labels go into --json
    o.gate_metric = *metric;
    o.fail_if_slower_pct = sub->count("--fail-if-slower") ? *fail_pct : -1;
    const Comparison c = compare_reports(reports, o);
    std::fputs(compare_text(c).c_str(), stdout);
    std::fflush(stdout);
    if (!json_path->empty()) write_file_atomic(*json_path, compare_json(c).dump(2) + "\n");
    if (!md_path->empty()) write_file_atomic(*md_path, compare_markdown(c));
    const std::string fail = gate_failure_message(c);
    if (!fail.empty()) throw CheckFailed(fail);
    return 0;
  };
}

}  // namespace latprof::cli
