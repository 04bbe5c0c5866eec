// Placeholder: 'latprof roofline' is being written (owned by its issue).
#include "cli/commands.hpp"
#include "core/error.hpp"

namespace latprof::cli {
CommandFn add_roofline_command(CLI::App& app) {
  app.add_subcommand("roofline", "(not yet available)");
  return [] () -> int { usage_error("'latprof roofline' is not available in this build yet"); };
}
}  // namespace latprof::cli
