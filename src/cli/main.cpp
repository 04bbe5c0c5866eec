// latprof: a latency profiler and roofline analyzer for LLM inference.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "latprof/build_info.hpp"

int main(int argc, char** argv) {
  using namespace latprof;
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
      if (sub->parsed()) return fn();
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
