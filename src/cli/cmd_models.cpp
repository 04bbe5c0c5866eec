// latprof models: the built-in model configs with parameter counts and weight sizes.
#include <cstdio>

#include "cli/commands.hpp"
#include "core/format.hpp"
#include "model/config.hpp"
#include "model/cost_model.hpp"

namespace latprof::cli {

CommandFn add_models_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("models",
                                     "List the built-in models with parameter counts "
                                     "and weight sizes");
  (void)sub;
  return []() -> int {
    std::printf("%-16s %6s %6s %6s %4s %7s %7s %6s %10s %10s %10s  %s\n", "name", "dim", "layers",
                "heads", "kv", "ffn", "vocab", "ctx", "params", "fp16", "int8", "description");
    for (const auto& m : builtin_models()) {
      const double fp16 = weight_bytes(m, precision_for("fp16", 2, 2));
      const double int8 = weight_bytes(m, precision_for("int8", 2, 2));
      std::printf("%-16s %6lld %6lld %6lld %4lld %7lld %7lld %6lld %10s %10s %10s  %s%s\n",
                  m.name.c_str(), (long long)m.dim, (long long)m.n_layers, (long long)m.n_heads,
                  (long long)m.n_kv_heads, (long long)m.ffn_dim, (long long)m.vocab_size,
                  (long long)m.max_seq_len, fmt_count(double(m.params_total())).c_str(),
                  fmt_bytes(fp16).c_str(), fmt_bytes(int8).c_str(), m.description.c_str(),
                  m.name == kDefaultModel ? " [default]" : "");
    }
    std::printf(
        "(fp16/int8: weight bytes as latprof stores them: embeddings fp16, norms fp32, "
        "int8 with one fp32 scale per output channel)\n");
    return 0;
  };
}

}  // namespace latprof::cli
