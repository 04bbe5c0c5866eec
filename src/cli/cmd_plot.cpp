// latprof plot: the roofline chart (SVG) of a run report or of a `latprof roofline --json`
// prediction.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"
#include "roofline/hardware.hpp"

namespace latprof::cli {

namespace {
struct PlotArgs {
  std::string input, out = "roofline.svg", hw, hw_file;
  bool no_datasheet = false;
};
}  // namespace

CommandFn add_plot_command(CLI::App& app) {
  auto a = std::make_shared<PlotArgs>();
  CLI::App* sub = app.add_subcommand(
      "plot", "Write the roofline chart (self-contained SVG) of a run report or a prediction");
  sub->add_option("report", a->input,
                  "A run report (latprof run --json) or a prediction "
                  "(latprof roofline --json)")
      ->required();
  sub->add_option("-o,--out", a->out, "Output SVG file")->capture_default_str();
  sub->add_option("--hw", a->hw,
                  "Datasheet roofs to draw next to the measured ones (default: "
                  "the database entry matching the report's device)");
  sub->add_option("--hw-file", a->hw_file, "Datasheet roofs from a hardware file");
  sub->add_flag("--no-datasheet", a->no_datasheet, "Draw only the report's own roofs");
  return [a]() -> int {
    check_writable(a->out, "-o");
    check_not_an_input(a->out, "-o", {a->input, a->hw_file});
    check_input_path(a->input, "report", false, /*allow_fifo=*/true);
    nlohmann::json j;
    {
      const std::string text = read_input_file(a->input, "report", kMaxReportBytes);
      try {
        j = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception& e) {
        usage_error(a->input + ": not valid JSON: " + e.what());
      }
    }
    const bool prediction =
        j.is_object() && j.contains("kind") && j["kind"].is_string() && j["kind"] == "prediction";
    RunReport r = report_from_json(j, a->input);
    // A measured report gets the datasheet roofs of its device when the database knows it.
    Ceilings datasheet;
    bool have_datasheet = false;
    if (!a->no_datasheet) {
      if (!a->hw.empty() || !a->hw_file.empty()) {
        const HardwareSpec h =
            a->hw_file.empty() ? find_hardware(a->hw) : load_hardware_file(a->hw_file);
        if (!h.measure) datasheet = to_ceilings(h), have_datasheet = true;
      } else if (!prediction) {
        auto h = match_hardware(r.ceilings.device);
        if (!h) h = match_hardware(r.run.device);
        if (h && !h->measure) datasheet = to_ceilings(*h), have_datasheet = true;
      }
    }
    const std::string svg = roofline_svg(r, have_datasheet ? &datasheet : nullptr);
    write_file_atomic(a->out, svg);
    int points = 0;
    for (const Row& o : r.ops)
      if (o.cost.flops > 0 && o.cost.bytes() > 0 && (o.time_ms > 0 || o.floor_ms > 0)) ++points;
    std::printf("wrote %s: %d op points (%s), roofs of %s%s\n", a->out.c_str(), points,
                prediction ? "predicted floors" : "measured", r.ceilings.device.c_str(),
                have_datasheet ? (" and the datasheet of " + datasheet.device).c_str() : "");
    return 0;
  };
}

}  // namespace latprof::cli
