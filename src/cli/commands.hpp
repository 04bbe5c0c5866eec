#pragma once
// Subcommands. Each add_*_command registers its options on `app` and returns the function that
// runs it (after parsing); main() runs the one the user chose. Return value: the exit status.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace latprof::cli {

using CommandFn = std::function<int()>;

// What --kv-dtype means, for `run` and `serve` (run adds its lists).
inline const std::string kKvDtypeHelp =
    "KV cache element type: fp16; bf16 (CPU backend; on AMD CPUs with AVX512-BF16 the GQA decode "
    "attention then multiplies in bf16 with fp32 sums, vdpbf16ps); or int8 (CPU backend; an fp32 "
    "scale per position and kv head, half fp16's bytes; on AVX512-VNNI CPUs the GQA decode's "
    "scores take q rounded to int8, vpdpbusd)";

// cmd_run.cpp; argv: the whole command line, recorded in the report's run.argv.
CommandFn add_run_command(CLI::App& app, std::vector<std::string> argv);

CommandFn add_models_command(CLI::App& app);    // cmd_models.cpp
CommandFn add_hw_command(CLI::App& app);        // cmd_hw.cpp
CommandFn add_roofline_command(CLI::App& app);  // cmd_roofline.cpp
CommandFn add_check_command(CLI::App& app);     // cmd_check.cpp
CommandFn add_plot_command(CLI::App& app);      // cmd_plot.cpp
CommandFn add_compare_command(CLI::App& app);   // cmd_compare.cpp
CommandFn add_schema_command(CLI::App& app);    // cmd_schema.cpp
CommandFn add_serve_command(CLI::App& app);     // cmd_serve.cpp
// cmd_load.cpp; argv: the whole command line, recorded in the report.
CommandFn add_load_command(CLI::App& app, std::vector<std::string> argv);

}  // namespace latprof::cli
