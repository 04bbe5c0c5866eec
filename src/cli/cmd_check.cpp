// Placeholder: 'latprof check' is being written (owned by its issue).
#include "cli/commands.hpp"
#include "core/error.hpp"

namespace latprof::cli {
CommandFn add_check_command(CLI::App& app) {
  app.add_subcommand("check", "(not yet available)");
  return [] () -> int { usage_error("'latprof check' is not available in this build yet"); };
}
}  // namespace latprof::cli
