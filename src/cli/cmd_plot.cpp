// Placeholder: 'latprof plot' is being written (owned by its issue).
#include "cli/commands.hpp"
#include "core/error.hpp"

namespace latprof::cli {
CommandFn add_plot_command(CLI::App& app) {
  app.add_subcommand("plot", "(not yet available)");
  return [] () -> int { usage_error("'latprof plot' is not available in this build yet"); };
}
}  // namespace latprof::cli
