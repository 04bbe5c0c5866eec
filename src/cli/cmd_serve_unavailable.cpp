// latprof serve in a build without cpp-httplib or prometheus-cpp (CMake: LATPROF_SERVER): the
// command exists and says what to install.
#include "cli/commands.hpp"
#include "core/error.hpp"

namespace latprof::cli {

CommandFn add_serve_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "serve", "Serve an OpenAI-compatible API (not in this build: see 'latprof serve')");
  sub->allow_extras();
  return []() -> int {
    usage_error(
        "this latprof was built without latprof serve (cpp-httplib or prometheus-cpp was not "
        "found); install libcpp-httplib-dev and prometheus-cpp-dev (scripts/setup.sh does) and "
        "configure again");
  };
}

}  // namespace latprof::cli
