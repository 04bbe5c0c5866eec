// Placeholder: 'latprof compare' is being written (owned by its issue).
#include "cli/commands.hpp"
#include "core/error.hpp"

namespace latprof::cli {
CommandFn add_compare_command(CLI::App& app) {
  app.add_subcommand("compare", "(not yet available)");
  return [] () -> int { usage_error("'latprof compare' is not available in this build yet"); };
}
}  // namespace latprof::cli
