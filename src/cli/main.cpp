// latprof: a latency profiler and roofline analyzer for LLM inference.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "latprof/build_info.hpp"
#include "roofline/hardware.hpp"
#include "runner/host_ceilings.hpp"

namespace {

// An option given with an empty value (--json "", --model "") is a mistake, not "not given".
void refuse_empty_values(CLI::App* sub) {
  for (const CLI::Option* opt : sub->get_options()) {
    if (opt->count() == 0 || opt->get_items_expected_min() == 0) continue;  // flags
    for (const std::string& v : opt->results())
      if (v.empty()) latprof::usage_error(opt->get_name() + " needs a value (got an empty string)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace latprof;
  // A FIFO or pipe whose reader went away: write() fails with EPIPE and the writer reports it.
  std::signal(SIGPIPE, SIG_IGN);
  // "cpu-local" in the hardware database is this machine, measured by the host probe.
  set_local_ceilings_source([] { return host_ceilings(0, false, true).ceilings; });
  CLI::App app{"latprof: where each millisecond of an LLM request goes, and why"};
  app.set_version_flag("--version", std::string("latprof ") + build::kVersion + " (" +
                                        build::kGitCommit + (build::kGitDirty ? "-dirty" : "") +
                                        ", " + build::kBuildType + ")");
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, cli::CommandFn>> commands;
  auto add = [&](cli::CommandFn fn) { commands.emplace_back(app.get_subcommands({}).back(), fn); };
  add(cli::add_run_command(app, std::vector<std::string>(argv, argv + argc)));
  add(cli::add_models_command(app));
  add(cli::add_hw_command(app));
  add(cli::add_roofline_command(app));
  add(cli::add_check_command(app));
  add(cli::add_plot_command(app));
  add(cli::add_compare_command(app));
  add(cli::add_schema_command(app));
  add(cli::add_serve_command(app));
  add(cli::add_load_command(app, std::vector<std::string>(argv, argv + argc)));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::fprintf(stderr, "latprof: error: %s; see 'latprof --help'\n", msg.c_str());
    return 2;
  }
  try {
    for (auto& [sub, fn] : commands)
      if (sub->parsed()) {
        refuse_empty_values(sub);
        return fn();
      }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "latprof: error: %s\n", e.what());
    return 2;
  } catch (const CheckFailed& e) {
    std::fprintf(stderr, "latprof: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latprof: internal error: %s\n", e.what());
    return 1;
  }
  return 2;
}
