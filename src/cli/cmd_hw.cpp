// Placeholder: 'latprof hw' is being written (owned by its issue).
#include "cli/commands.hpp"
#include "core/error.hpp"

namespace latprof::cli {
CommandFn add_hw_command(CLI::App& app) {
  app.add_subcommand("hw", "(not yet available)");
  return [] () -> int { usage_error("'latprof hw' is not available in this build yet"); };
}
}  // namespace latprof::cli
