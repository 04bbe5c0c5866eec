// latprof run: an instrumented request on the CPU or CUDA backend, with the stage breakdown.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/utf8.hpp"
#include "core/workload.hpp"
#include "model/cost_model.hpp"
#include "model/open.hpp"
#include "report/compare.hpp"
#include "report/exports.hpp"
#include "report/table.hpp"
#include "runner/model.hpp"
#include "runner/preflight.hpp"
#include "runner/runner.hpp"

namespace latprof::cli {

CommandFn add_run_command(CLI::App& app, std::vector<std::string> argv) {
  auto o = std::make_shared<RunOptions>();
  // The command line goes into JSON reports: a byte that is not UTF-8 becomes U+FFFD there.
  for (std::string& a : argv) a = utf8_sanitize(a);
  o->argv = std::move(argv);
  auto json_path = std::make_shared<std::string>();
  auto prompt_file = std::make_shared<std::string>();
  auto ex = std::make_shared<ExportOptions>();
  auto no_graph = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("run",
                                     "Run an instrumented prefill and decode, print the "
                                     "stage and operation breakdown");
  sub->add_option("--model,-m", o->model,
                  "Built-in model name, a model config .json, a GGUF "
                  "file or a Hugging Face directory")
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype,
                  "Weight precision: fp16, int8 (weight-only, W8A16) or int8-w8a8 (activations "
                  "rounded to int8 too; CPU backend); a list such as fp16,int8 runs each in turn "
                  "and prints their comparison. Not given: int8 for a GGUF whose matrices are "
                  "Q8_0, else fp16")
      ->capture_default_str();
  sub->add_option("--kv-dtype", o->kv_dtype,
                  kKvDtypeHelp +
                      "; a list such as fp16,int8 runs each in turn and prints their comparison "
                      "(a list here or in --dtype, not both)")
      ->capture_default_str();
  sub->add_option("--backend", o->backend, "auto, cpu or cuda")->capture_default_str();
  auto input_text = std::make_shared<std::string>(std::to_string(o->input));
  auto output_text = std::make_shared<std::string>(std::to_string(o->output));
  auto prefix_cache = std::make_shared<std::string>("off");
  sub->add_option("--input,-i", *input_text,
                  "Prompt tokens per sequence (including BOS); with --requests also a "
                  "distribution: uniform:LO:HI or normal:MEAN:STDDEV")
      ->capture_default_str();
  sub->add_option("--output,-o", *output_text,
                  "Tokens to generate per sequence (EOS is ignored); with --requests also a "
                  "distribution")
      ->capture_default_str();
  sub->add_option("--batch,-b", o->batch,
                  "Requests arriving together, each with its own synthetic prompt (or --prompt), "
                  "run through the continuous-batching engine")
      ->capture_default_str();
  sub->add_option("--threads,-t", o->threads, "CPU threads (0: all cores)")->capture_default_str();
  sub->add_option("--repeat,-r", o->repeat,
                  "Timed requests; 0: 3, or 1 when one request takes over 20 s (tables show "
                  "the median repeat, with the spread)")
      ->capture_default_str();
  sub->add_option("--warmup", o->warmup,
                  "Untimed warm-up requests at the timed prompt length, 4 decode steps each")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the synthetic weights, prompt and sampler")
      ->check(
          [](const std::string& v) {
            return v.starts_with("-") ? "must be an integer >= 0 (got " + v + ")" : std::string();
          },
          "SEED >= 0")
      ->capture_default_str();
  sub->add_option("--temperature", o->temperature, "0: greedy; > 0: sampling")
      ->capture_default_str();
  sub->add_option("--top-k", o->top_k, "Sample among the k most likely tokens (0: all)")
      ->capture_default_str();
  sub->add_option("--prompt", o->prompt,
                  "Prompt text (instead of a synthetic --input prompt; at most 1 MiB)");
  sub->add_option("--prompt-file", *prompt_file,
                  "Read the prompt text from a file (at most 1 MiB; a pipe or FIFO is read "
                  "until its writer closes)");
  sub->add_flag("--no-graph", *no_graph, "CUDA: launch decode kernels one by one, no CUDA graph");
  sub->add_flag("--counters", o->counters,
                "CUDA: collect hardware counters (DRAM bytes) in a separate pass");
  sub->add_flag("--overhead", o->overhead,
                "Run one more request without NVTX, op events or tracing and report the "
                "profiler's overhead");
  sub->add_flag("--reprobe", o->reprobe, "Measure the machine's ceilings again (ignore the cache)");
  sub->add_flag("--quiet,-q", o->quiet, "No progress bars on stderr");
  sub->add_option("--kv-block-size", o->kv_block_size,
                  "Positions per block of the paged KV cache (a power of two)")
      ->capture_default_str();
  sub->add_option("--kv-cache-memory", o->kv_cache_memory,
                  "KV cache size, e.g. 8GiB (default: what the run's requests need)");
  sub->add_option("--max-model-len", o->max_model_len,
                  "Positions of one request (0: the model's context)")
      ->capture_default_str();
  sub->add_option("--max-batched-tokens", o->max_batched_tokens,
                  "Token budget of one engine step, prefill chunks and decodes together (0: the "
                  "backend's default, CPU 512, CUDA 8192)")
      ->capture_default_str();
  sub->add_option("--max-seqs", o->max_seqs, "Sequences in one engine step")->capture_default_str();
  sub->add_option("--requests", o->requests,
                  "Latency under load: send N requests into the engine at their arrival times "
                  "(see --rate, --arrival); one timed run, figures over the requests");
  sub->add_option("--rate", o->rate_text,
                  "With --requests: arrivals per second, or inf (all at once)")
      ->capture_default_str();
  sub->add_option("--arrival", o->arrival, "With --requests: poisson, gamma or constant gaps")
      ->capture_default_str();
  sub->add_option("--burstiness", o->burstiness,
                  "With --arrival gamma: its shape (1: Poisson; below 1: burstier)")
      ->capture_default_str();
  sub->add_option("--dataset", o->dataset,
                  "With --requests (or alone: every line): JSON Lines, one request per line "
                  "with input_tokens or prompt, output_tokens, optional arrival_ms");
  sub->add_option("--slo", o->slo,
                  "With --requests: per-request thresholds for goodput, e.g. ttft:500ms,tpot:50ms "
                  "(any of ttft, tpot, itl, e2e; ms or s)");
  sub->add_option("--prefix-cache", *prefix_cache,
                  "Reuse cached KV blocks of identical prompt prefixes: on or off")
      ->capture_default_str();
  sub->add_option("--json", *json_path, "Write the full report as JSON");
  sub->add_option("--trace", ex->trace, "Write a Chrome/Perfetto trace (JSON)");
  sub->add_option("--csv", ex->csv, "Write the stage and op tables as CSV");
  sub->add_option("--jsonl", ex->jsonl, "Append one JSON line per run (time series)");
  sub->add_option("--html", ex->html, "Write a self-contained HTML report");
  return [=]() -> int {
    // ---- everything that needs no model: flags, prompt text, output paths ----
    const bool load =
        sub->get_option("--requests")->count() > 0 || sub->get_option("--dataset")->count() > 0;
    // --input / --output: a token count, or (under load) a distribution of them.
    auto length = [&](const std::string& text, const char* flag, int64_t& n, std::string& dist) {
      if (text.find(':') != std::string::npos) {
        if (!load)
          usage_error(std::string(flag) + " " + text +
                      " is a distribution of lengths; it takes --requests N (one request has "
                      "one length)");
        dist = text;
        return;
      }
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE)
        usage_error(std::string(flag) +
                    " must be a token count or, with --requests, a distribution such as "
                    "uniform:100:500 (got '" +
                    text + "')");
      n = v;
    };
    length(*input_text, "--input", o->input, o->input_dist);
    length(*output_text, "--output", o->output, o->output_dist);
    for (const char* f : {"--rate", "--arrival", "--burstiness", "--slo"})
      if (!load && sub->get_option(f)->count() > 0)
        usage_error(std::string(f) + " shapes the load of --requests N; add --requests");
    if (!o->dataset.empty())
      for (const char* f : {"--input", "--output"})
        if (sub->get_option(f)->count() > 0)
          usage_error(std::string(f) +
                      " and --dataset both set lengths; the dataset's "
                      "input_tokens/prompt and output_tokens are used, so drop " +
                      f);
    if (load && sub->get_option("--requests")->count() > 0 && o->requests < 1)
      usage_error("--requests must be from 1 to 100000 (got " + std::to_string(o->requests) + ")");
    if (*prefix_cache != "on" && *prefix_cache != "off")
      usage_error("--prefix-cache must be on or off (got '" + *prefix_cache + "')");
    o->prefix_cache = *prefix_cache == "on";
    if (load) o->rate = workload::parse_rate(o->rate_text);
    if (load && o->repeat == 0) o->repeat = 1;
    if (load && !o->dataset.empty()) check_input_path(o->dataset, "--dataset");
    const bool given_prompt = sub->get_option("--prompt")->count() > 0;
    const bool given_file = sub->get_option("--prompt-file")->count() > 0;
    if (given_prompt && given_file) usage_error("give either --prompt or --prompt-file, not both");
    if ((given_prompt || given_file) && sub->get_option("--input")->count() > 0)
      usage_error(std::string(given_prompt ? "--prompt" : "--prompt-file") +
                  " sets the prompt, so --input cannot: drop --input (its length is the "
                  "prompt's token count)");
    if (given_file) {
      o->prompt = read_input_file(*prompt_file, "--prompt-file", kMaxPromptBytes);
      if (o->prompt.empty()) usage_error("--prompt-file " + *prompt_file + " is empty");
    }
    if (given_prompt && o->prompt.empty())
      usage_error("--prompt is empty; give some text, or --input N for a synthetic prompt");
    o->graphs = !*no_graph;
    o->keep_timeline = !ex->trace.empty() || !ex->html.empty();
    if (sub->count("--dtype") == 0) {  // the model file's own precision
      o->dtype = implied_dtype(model_file_dtype(o->model));
      o->dtype_implied = true;
    }
    // --dtype or --kv-dtype may list several: one run each, then their comparison.
    auto split = [](const std::string& list) {
      std::vector<std::string> v;
      std::stringstream ss(list);
      std::string d;
      while (std::getline(ss, d, ','))
        if (!d.empty()) v.push_back(d);
      return v;
    };
    const std::vector<std::string> dtypes = split(o->dtype), kv_dtypes = split(o->kv_dtype);
    if (dtypes.empty())
      usage_error("--dtype needs a value: fp16, int8 or a list such as fp16,int8");
    if (kv_dtypes.empty())
      usage_error("--kv-dtype needs a value: fp16, bf16, int8 or a list such as fp16,int8");
    if (dtypes.size() > 1 && kv_dtypes.size() > 1)
      usage_error("--dtype and --kv-dtype both list several; list several in one of them");
    for (const auto& d : dtypes) precision_for(d, 4, 2);  // every dtype is valid before any run
    for (const auto& k : kv_dtypes) (void)kv_type_for(k);
    // The variants and their labels: the dtype, or "kv-" and the KV type.
    std::vector<RunOptions> variants;
    std::vector<std::string> labels;
    for (const auto& d : dtypes)
      for (const auto& k : kv_dtypes) {
        RunOptions one = *o;
        one.dtype = d;
        one.kv_dtype = k;
        variants.push_back(one);
        labels.push_back(kv_dtypes.size() > 1 ? "kv-" + k : d);
      }
    // Output paths: each writable and each its own file, before anything runs.
    auto path_for = [&](const std::string& tag) {
      std::string base = *json_path;
      if (base.size() > 5 && base.ends_with(".json")) base.resize(base.size() - 5);
      return base + "." + tag + ".json";
    };
    std::vector<std::pair<std::string, std::string>> outputs = {
        {"--trace", ex->trace}, {"--csv", ex->csv}, {"--jsonl", ex->jsonl}, {"--html", ex->html}};
    if (variants.size() == 1) {
      outputs.emplace_back("--json", *json_path);
    } else if (!json_path->empty()) {
      for (const auto& l : labels) outputs.emplace_back("--json (" + l + ")", path_for(l));
      outputs.emplace_back("--json (compare)", path_for("compare"));
    }
    for (const auto& [flag, path] : outputs)
      if (!path.empty()) check_writable(path, flag.c_str());
    check_distinct_outputs(outputs);
    auto run = [load](const RunOptions& ro) { return load ? run_load(ro) : run_benchmark(ro); };
    if (variants.size() == 1) {
      const RunReport r = run(variants[0]);
      std::fputs(format_run_table(r).c_str(), stdout);
      if (!json_path->empty()) write_file_atomic(*json_path, report_to_json(r).dump(2) + "\n");
      write_exports(r, *ex);
      return 0;
    }
    // Several variants: one run each in this process, then their comparison. --json FILE.json
    // writes FILE.<label>.json per run and FILE.compare.json; exports are not multiplexed.
    if (!ex->trace.empty() || !ex->csv.empty() || !ex->jsonl.empty() || !ex->html.empty())
      usage_error(
          "--trace, --csv, --jsonl and --html take one dtype and KV type; run each separately");
    // Every variant must fit before the first runs.
    check_variants_fit(variants);
    std::vector<RunReport> reports;
    for (size_t i = 0; i < variants.size(); ++i) {
      reports.push_back(run(variants[i]));
      std::fputs(format_run_table(reports.back()).c_str(), stdout);
      std::fputs("\n", stdout);
      if (!json_path->empty())
        write_file_atomic(path_for(labels[i]), report_to_json(reports.back()).dump(2) + "\n");
    }
    CompareOptions co;
    co.labels = labels;
    const Comparison c = compare_reports(reports, co);
    std::fputs(compare_text(c).c_str(), stdout);
    if (!json_path->empty()) write_file_atomic(path_for("compare"), compare_json(c).dump(2) + "\n");
    return 0;
  };
}

}  // namespace latprof::cli
