// `latprof run` through the continuous-batching engine, end to end on the tiny model: steps
// that mix prefill chunks with decodes under the token budget, the same tokens for sequence 0
// whatever it shares its steps with, and the engine flags' refusals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_util.hpp"

namespace {

using cli_test::latprof;
using nlohmann::json;

json run(const std::string& args, const std::string& name) {
  const auto path = cli_test::temp_dir("engine") / (name + ".json");
  std::filesystem::remove(path);
  const auto r =
      latprof("run --model tiny --quiet --repeat 1 " + args + " --json " + path.string());
  EXPECT_EQ(r.code, 0) << r.err;
  return json::parse(cli_test::slurp(path.string()));
}

TEST(EngineCli, BatchedStepsMixPrefillAndDecodeWithinTheBudget) {
  const json j = run("--input 20 --output 8 --batch 16 --max-batched-tokens 64", "mixed");
  const json& steps = j["steps"];
  ASSERT_GT(steps.size(), 2u);
  int64_t prefill = 0, decode = 0, mixed = 0;
  double time = 0;
  for (const auto& s : steps) {
    const int64_t p = s["prefill_tokens"], d = s["decode_tokens"];
    EXPECT_LE(p + d, 64) << s.dump();
    EXPECT_LE(s["seqs"].get<int64_t>(), 16);
    EXPECT_LE(s["kv_usage"].get<double>(), 1.0);
    prefill += p;
    decode += d;
    mixed += p > 0 && d > 0;
    time += s["time_ms"].get<double>();
  }
  EXPECT_GT(mixed, 0) << "no step mixed prefill chunks with decodes";
  EXPECT_EQ(prefill, 16 * 20);
  EXPECT_EQ(decode, 16 * (8 - 1));
  // The steps tile the request between tokenization and serialization.
  const double e2e = j["metrics"]["e2e_ms"];
  EXPECT_LT(time, e2e);
  EXPECT_GT(time, 0.9 * e2e);
  EXPECT_EQ(j["setup"]["engine"]["max_batched_tokens"], 64);
  EXPECT_EQ(j["setup"]["engine"]["preemptions"], 0);
  // Sequence 0 generates what it generates alone (greedy, its own prompt, same seed).
  const json alone = run("--input 20 --output 8", "alone");
  EXPECT_EQ(j["run"]["output_token_ids"], alone["run"]["output_token_ids"]);
}

TEST(EngineCli, DefaultBudgetIsTheBackendsAndChunksLongPrompts) {
  // CPU default: 512 tokens per step, so two 400-token prompts take at least two steps.
  const json j = run("--input 400 --output 4 --batch 2", "budget");
  EXPECT_EQ(j["setup"]["engine"]["max_batched_tokens"], 512);
  for (const auto& s : j["steps"])
    EXPECT_LE(s["prefill_tokens"].get<int64_t>() + s["decode_tokens"].get<int64_t>(), 512);
  EXPECT_GT(j["steps"][1]["prefill_tokens"].get<int64_t>(), 0) << "the second prompt's rest";
}

TEST(EngineCli, ChunkedPrefillRunsAndCountsTheLmHeadOnce) {
  // A 40-token prompt in chunks of 16: only the last chunk's step computes logits, so the
  // prefill's LM head is one call reading the head's weights once, as one decode step does (the
  // cost model once counted every chunk's, and the physics check failed on such runs).
  const json j = run("--input 40 --output 4 --max-batched-tokens 16", "chunked");
  const json* pre = nullptr;
  const json* dec = nullptr;
  for (const auto& o : j["ops"])
    if (o["name"] == "lm_head") (o["stage"] == "prefill" ? pre : dec) = &o;
  ASSERT_TRUE(pre && dec) << j["ops"].dump();
  EXPECT_EQ((*pre)["calls"], 1);
  EXPECT_EQ((*dec)["calls"], 3);
  EXPECT_DOUBLE_EQ((*pre)["weight_bytes"].get<double>() * 3, (*dec)["weight_bytes"].get<double>());
  for (const auto& c : j["checks"]) EXPECT_NE(c.value("level", ""), "error") << c.dump();
}

TEST(EngineCli, TraceHasATrackOfSteps) {
  const auto dir = cli_test::temp_dir("engine");
  const std::string trace = (dir / "steps.trace.json").string();
  const json j =
      run("--input 20 --output 6 --batch 4 --max-batched-tokens 32 --trace " + trace, "trace");
  const json t = json::parse(cli_test::slurp(trace));
  size_t n = 0;
  for (const auto& e : t["traceEvents"])
    if (e.value("cat", "") == "engine_step") {
      ++n;
      EXPECT_TRUE(e["args"].contains("prefill_tokens") && e["args"].contains("kv_usage"));
    }
  EXPECT_EQ(n, j["steps"].size());
}

TEST(EngineCli, TooSmallAKvCachePreemptsAndStillFinishes) {
  // 16 sequences of 14 + 8 tokens start in one block of 16 and grow into a second: 12 blocks
  // (48 KiB at 4 KiB a block) admit 12 and then run out as they grow.
  const json j = run("--input 14 --output 8 --batch 16 --kv-cache-memory 48KiB", "preempt");
  EXPECT_GT(j["setup"]["engine"]["preemptions"].get<int64_t>(), 0);
  EXPECT_EQ(j["run"]["output_token_ids"].size(), 8u);
  const json alone = run("--input 14 --output 8", "alone2");
  EXPECT_EQ(j["run"]["output_token_ids"], alone["run"]["output_token_ids"]);
}

TEST(EngineCli, BadEngineFlagsAreOneLineUsageErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"--max-batched-tokens -1", "--max-batched-tokens must be"},
      {"--max-batched-tokens -5", "--max-batched-tokens must be"},
      {"--kv-block-size 0", "--kv-block-size must be a power of two"},
      {"--kv-block-size 12", "--kv-block-size must be a power of two"},
      {"--kv-cache-memory 1KiB", "needs 2"},
      {"--kv-cache-memory 5XB", "unknown unit"},
      {"--kv-cache-memory abc", "is not an amount of memory"},
      {"--max-model-len 20", "exceeds --max-model-len 20"},
      {"--max-model-len 100000", "model's context of 512"},
      {"--max-seqs 0", "--max-seqs must be"},
  };
  for (const auto& [args, want] : cases) {
    const auto r = latprof(std::string("run --model tiny -q --input 20 --output 8 ") + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
