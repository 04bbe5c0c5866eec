#include "load/load.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/utf8.hpp"
#include "core/workload.hpp"
#include "latprof/build_info.hpp"
#include "load/client.hpp"
#include "load/load_report.hpp"
#include "load/openai.hpp"
#include "load/physics.hpp"
#include "load/traces.hpp"
#include "model/tokenizer_vocab.hpp"

namespace latprof::load {

namespace {

constexpr int64_t kDefaultRequests = 100;
constexpr int64_t kMaxTokens = int64_t(1) << 20;  // as latprof run: 1 to 2^20 per request
constexpr int64_t kMaxDatasetEntries = 10'000'000;
// Synthetic prompt token ids: 10..255 exist in every vocabulary (byte tokens in Llama's, all of
// the tiny test model's 256) and no server treats them as special; random ids from 246 make
// two prompts share no prefix block.
constexpr int32_t kFirstId = 10, kLastId = 255;

std::vector<std::string> split_list(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Words for chat prompts: common English words that Llama-style tokenizers keep whole, so that
// N words are close to N tokens (usage.prompt_tokens tells the real count).
const char* const kWords[] = {
    "time",    "year",    "people",   "way",    "day",    "man",    "thing",   "woman",
    "life",    "child",   "world",    "school", "state",  "family", "student", "group",
    "country", "problem", "hand",     "part",   "place",  "case",   "week",    "company",
    "system",  "program", "question", "work",   "number", "night",  "point",   "home",
    "water",   "room",    "mother",   "area",   "money",  "story",  "fact",    "month",
    "lot",     "right",   "study",    "book",   "eye",    "job",    "word",    "business"};

// Everything a request body depends on; bodies are built when each request is sent.
struct Prompts {
  Endpoint endpoint = Endpoint::completions;
  std::string model;
  workload::LengthDist input, output;
  std::vector<workload::DatasetEntry> dataset;  // when non-empty: request i uses entry i % size
  // Mooncake traces: per entry, the ids of its 512-token prompt blocks (equal ids, equal blocks)
  std::vector<std::vector<int64_t>> hash_ids;
  uint64_t seed = 0;
  bool ignore_eos = true;
  // chat: a tokenizer that makes a text of exactly N tokens, or the words per token the server's
  // /tokenize measured (1 when neither)
  std::shared_ptr<const Tokenizer> tokenizer;
  double words_per_token = 1;

  // Request `index` of `stream` (every point of a sweep, every probe of a rate search and every
  // warm-up sends a stream of its own). Its lengths come from the seed and the index alone, so
  // every point asks for the same lengths; its tokens from the stream too, so no point repeats
  // another's prompts and a server's prefix cache cannot serve a later point's prefill. Neither
  // depends on the order requests were sent in.
  std::string body(uint64_t stream, int64_t index, int64_t& in, int64_t& out) const {
    const uint64_t request_seed = seed * 0x9E3779B97F4A7C15ull + uint64_t(index) + 1;
    std::mt19937_64 rng(request_seed);
    const uint64_t token_seed = request_seed + stream * 0xBF58476D1CE4E5B9ull;
    Prompt p;
    const std::vector<int64_t>* blocks = nullptr;
    if (!dataset.empty()) {
      const size_t k = size_t(index) % dataset.size();
      const auto& e = dataset[k];
      if (k < hash_ids.size() && !hash_ids[k].empty()) blocks = &hash_ids[k];
      out = e.output_tokens;
      in = e.input_tokens;  // 0 for a text prompt: its length is the server's to tell
      p.text = e.prompt;
    } else {
      in = input.sample(rng, kMaxTokens);
      out = output.sample(rng, kMaxTokens);
    }
    if (p.text.empty()) {
      // Position i's generator: the request's own, or within a trace's hash block, the
      // block's (the same block id gives the same tokens in every request that names it).
      std::mt19937_64 tokens_rng(token_seed), block_rng;
      int64_t block = -1;
      auto gen = [&](int64_t i) -> std::mt19937_64& {
        const int64_t b = i / kTraceBlockTokens;
        if (!blocks || b >= int64_t(blocks->size())) return tokens_rng;
        if (b != block) {
          block = b;
          block_rng.seed(seed * 0xD1B54A32D192ED03ull + uint64_t((*blocks)[size_t(b)]));
        }
        return block_rng;
      };
      if (endpoint == Endpoint::chat && tokenizer && !blocks) {
        p.text = tokenizer->make_prompt(in, token_seed);
      } else if (endpoint == Endpoint::chat) {
        std::uniform_int_distribution<size_t> w(0, std::size(kWords) - 1);
        if (!blocks)  // unique from the start
          p.text = "request " + std::to_string(stream) + "." + std::to_string(index);
        const int64_t words = std::max<int64_t>(1, std::llround(double(in) * words_per_token));
        for (int64_t i = blocks ? 0 : 2; i < words; ++i)
          p.text.append(p.text.empty() ? "" : " ").append(kWords[w(gen(i))]);
      } else {
        std::uniform_int_distribution<int32_t> id(kFirstId, kLastId);
        p.token_ids.resize(size_t(in));
        for (int64_t i = 0; i < in; ++i) p.token_ids[size_t(i)] = id(gen(i));
      }
    }
    return request_body(endpoint, model, p, out, true, ignore_eos);
  }
};

// The arrival times of an open loop at `rate`: `n` of them, or (n unbounded) enough to cover
// `duration_ms` (the same seed gives the same prefix, so the list is grown by doubling).
std::vector<double> open_arrivals(int64_t n, double duration_ms, double rate,
                                  workload::Arrival kind, double burstiness, uint64_t seed) {
  if (n != std::numeric_limits<int64_t>::max())
    return workload::arrival_times(n, rate, kind, burstiness, seed);
  if (std::isinf(rate))
    usage_error(
        "--rate inf with --duration and no --requests would send without end; give "
        "--requests N");
  int64_t m = std::max<int64_t>(64, int64_t(rate * duration_ms / 1e3 * 1.2) + 64);
  for (;;) {
    auto t = workload::arrival_times(m, rate, kind, burstiness, seed);
    if (t.back() >= duration_ms) return t;
    if (m > kMaxDatasetEntries)
      usage_error("--rate x --duration asks for over 10 million requests");
    m *= 2;
  }
}

struct Point {
  std::optional<double> rate;
  std::optional<int64_t> concurrency;
};

struct Setup {
  ClientOptions client;
  Prompts prompts;
  workload::Slo slo;
  workload::Arrival arrival = workload::Arrival::poisson;
  std::vector<double> trace_arrivals_ms;  // replay: when non-empty, the arrivals
  int64_t requests = kDefaultRequests;
  double duration_ms = std::numeric_limits<double>::infinity();
  std::string metrics_url;  // "" : not scraped
};

// Runs point number `k` of the invocation (a sweep's point or a search's probe).
RunResult run_point(Client& client, const LoadOptions& o, const Setup& s, const Point& pt,
                    uint64_t k) {
  auto make = [&s](uint64_t stream) {
    return [&s, stream](int64_t i, int64_t& in, int64_t& out) {
      return s.prompts.body(stream, i, in, out);
    };
  };
  if (o.warmup > 0) {  // excluded from the figures; prompts of their own
    LoadPlan w;
    w.concurrency = pt.concurrency          ? std::min(*pt.concurrency, o.warmup)
                    : o.max_concurrency > 0 ? std::min(o.max_concurrency, o.warmup)
                                            : o.warmup;
    w.max_requests = o.warmup;
    w.make_body = make(2 * k + 1);
    w.stop = o.stop;
    client.run(w);
  }
  LoadPlan p;
  p.make_body = make(2 * k);
  p.metrics_url = s.metrics_url;
  p.stop = o.stop;
  p.max_requests = s.requests;
  p.duration_ms = s.duration_ms;
  if (!s.trace_arrivals_ms.empty()) {
    p.arrivals_ms = s.trace_arrivals_ms;
    p.max_in_flight = o.max_concurrency;
  } else if (pt.rate) {
    p.arrivals_ms =
        open_arrivals(s.requests, s.duration_ms, *pt.rate, s.arrival, o.burstiness, o.seed);
    p.max_in_flight = o.max_concurrency;
  } else {
    p.concurrency = *pt.concurrency;
    if (o.ramp_up_s > 0) p.ramp_up_ms = o.ramp_up_s * 1e3;
  }
  return client.run(p);
}

nlohmann::json metrics_json(const RunResult& r, const std::string& url) {
  if (url.empty()) return nullptr;
  nlohmann::json samples = nlohmann::json::array();
  auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json();
  };
  std::optional<double> run_max, wait_max, kv_max;
  auto keep_max = [](std::optional<double>& m, const std::optional<double>& v) {
    if (v) m = m ? std::max(*m, *v) : *v;
  };
  for (const auto& m : r.metrics) {
    samples.push_back({{"t_ms", m.t_ms},
                       {"running", opt(m.running)},
                       {"waiting", opt(m.waiting)},
                       {"kv_cache_usage", opt(m.kv_cache_usage)}});
    keep_max(run_max, m.running);
    keep_max(wait_max, m.waiting);
    keep_max(kv_max, m.kv_cache_usage);
  }
  // The server's histograms over the run: what accrued from the first scrape to the last.
  nlohmann::json hist = nlohmann::json::object();
  if (r.metrics.size() >= 2)
    for (const auto& [name, last] : r.metrics.back().histograms) {
      const auto it = r.metrics.front().histograms.find(name);
      if (it == r.metrics.front().histograms.end()) continue;
      const double n = last.second - it->second.second, sum = last.first - it->second.first;
      if (n > 0) hist[name] = {{"count", n}, {"mean_ms", sum / n * 1e3}};
    }
  // latprof serve's engine over the run: its steps, and the time its CPU thread pool was off the
  // CPUs during them (the machine's: steal, other processes), per step.
  nlohmann::json engine;
  if (r.metrics.size() >= 2) {
    const auto& a = r.metrics.front().engine;
    const auto& b = r.metrics.back().engine;
    auto delta = [&](const char* k) -> std::optional<double> {
      const auto i = a.find(k), j = b.find(k);
      if (i == a.end() || j == b.end()) return std::nullopt;
      return j->second - i->second;
    };
    const auto steps = delta("engine_steps_total");
    const auto off = delta("engine_offcpu_seconds_total");
    const auto runq = delta("engine_runq_seconds_total");
    if (steps && off && runq && *steps > 0)
      engine = {{"steps", *steps},
                {"offcpu_ms_per_step", *off * 1e3 / *steps},
                {"runq_ms_per_step", *runq * 1e3 / *steps}};
  }
  return {{"url", url},
          {"error", r.metrics_error.empty() ? nlohmann::json() : nlohmann::json(r.metrics_error)},
          {"histograms", std::move(hist)},
          {"engine", std::move(engine)},
          {"running_max", opt(run_max)},
          {"waiting_max", opt(wait_max)},
          {"kv_cache_usage_max", opt(kv_max)},
          {"samples", std::move(samples)}};
}

nlohmann::json point_json(const RunResult& r, const workload::Slo& slo,
                          const std::string& metrics_url, Physics* physics) {
  nlohmann::json reqs = nlohmann::json::array();
  for (const auto& q : r.requests) {
    reqs.push_back(load_request_to_json(q, slo));
    if (physics) reqs.back()["physics"] = physics->request_json(q);
  }
  nlohmann::json summary = load_summary_to_json(r, slo);
  if (physics) summary["physics"] = physics->summary_json(r);
  auto notes = load_notes(r);
  if (!metrics_url.empty() && !r.metrics_error.empty())
    notes.push_back("the server's series were not recorded: " + metrics_url + " gave " +
                    r.metrics_error + " (--metrics-url none stops asking)");
  return {{"requests", std::move(reqs)},
          {"summary", std::move(summary)},
          {"server_metrics", metrics_json(r, metrics_url)},
          {"notes", notes}};
}

// Three significant digits (floors of small models are microseconds).
std::string sig3(double v) {
  std::ostringstream o;
  o.precision(3);
  o << v;
  return o.str();
}

std::string pct_row(const char* label, const nlohmann::json& d) {
  char buf[192];
  if (d.is_null()) {
    std::snprintf(buf, sizeof buf, "  %-26s %9s\n", label, "-");
  } else {
    std::snprintf(buf, sizeof buf, "  %-26s %9.2f %9.2f %9.2f %9.2f %9.2f\n", label,
                  d["mean"].get<double>(), d["p50"].get<double>(), d["p90"].get<double>(),
                  d["p99"].get<double>(), d["max"].get<double>());
  }
  return buf;
}

std::string point_text(const std::string& title, const nlohmann::json& pj) {
  const nlohmann::json& s = pj["summary"];
  std::ostringstream o;
  o << title << "\n";
  o << "  requests: " << s["requests"].get<int64_t>() << " ok, " << s["requests_failed"]
    << " failed";
  if (!s["errors"].empty()) {
    o << " (";
    bool first = true;
    for (auto& [k, v] : s["errors"].items()) {
      o << (first ? "" : ", ") << k << " " << v;
      first = false;
    }
    o << ")";
  }
  o << "; busy " << fmt_fixed(s["duration_s"].get<double>(), 2) << " s, wall "
    << fmt_fixed(s["wall_s"].get<double>(), 2) << " s\n";
  o << "  " << std::string(26, ' ') << "      mean       p50       p90       p99       max\n";
  o << pct_row("TTFT (ms)", s["ttft_ms"]) << pct_row("TPOT (ms)", s["tpot_ms"])
    << pct_row("ITL (ms)", s["itl_ms"]) << pct_row("E2E (ms)", s["e2e_ms"])
    << pct_row("client queue (ms)", s["client_queue_ms"])
    << pct_row("TTFT from intended (ms)", s["ttft_from_intended_ms"])
    << pct_row("server queue (ms)", s["queue_ms"]) << pct_row("chunk gap (ms)", s["chunk_gap_ms"]);
  o << "  throughput: " << fmt_fixed(s["request_throughput"].get<double>(), 2) << " req/s, "
    << fmt_fixed(s["output_tokens_per_s"].get<double>(), 1) << " output tokens/s while busy ("
    << fmt_fixed(s["output_tokens_per_s_wall"].get<double>(), 1) << " over the wall time)";
  if (!s["slo"].is_null())
    o << "; goodput " << fmt_fixed(s["goodput"].get<double>(), 2) << " req/s, SLO "
      << s["slo"].get<std::string>() << " met by " << fmt_pct(s["slo_attainment"].get<double>());
  o << "\n";
  for (const char* part : Chain::kParts) {
    const auto& d = s["chain_ms"][part];
    if (!d.is_null()) o << pct_row(("chain: " + std::string(part) + " (ms)").c_str(), d);
  }
  const auto& c = s["client"];
  o << "  client: " << fmt_fixed(c["cpu_ms"].get<double>(), 1) << " ms CPU";
  if (!c["cpu_us_per_token"].is_null())
    o << ", " << fmt_fixed(c["cpu_us_per_token"].get<double>(), 2) << " us per token";
  o << ", at most " << c["max_in_flight"] << " in flight\n";
  if (const auto& m = pj["server_metrics"]; m.is_object() && !m["samples"].empty()) {
    // Request counts whole, the KV cache's fraction in use as a percentage (a few sequences in a
    // large cache use well under 1%: "0.00" said nothing).
    auto count = [](const nlohmann::json& v) {
      return v.is_null() ? std::string("-") : fmt_fixed(v.get<double>(), 0);
    };
    const auto& kv = m["kv_cache_usage_max"];
    o << "  server (/metrics, " << m["samples"].size() << " scrapes): at most "
      << count(m["running_max"]) << " running, " << count(m["waiting_max"])
      << " waiting, KV cache use up to "
      << (kv.is_null() ? std::string("-") : fmt_pct(kv.get<double>())) << "\n";
    if (const auto& e = m["engine"]; e.is_object())
      o << "  server engine: " << fmt_fixed(e["steps"].get<double>(), 0)
        << " steps, its thread pool off the CPUs " << fmt_ms(e["offcpu_ms_per_step"].get<double>())
        << " a step (" << fmt_ms(e["runq_ms_per_step"].get<double>())
        << " of it waiting behind other processes)\n";
  }
  if (const auto& p = s["physics"]; p.is_object() && !p["e2e_over_floor"].is_null())
    o << "  physics (" << p["cost_model"].get<std::string>() << " on " << p["hw"].get<std::string>()
      << ", batch-1 floor): E2E floor p50 " << sig3(p["floor_e2e_ms"]["p50"].get<double>())
      << " ms; requests took " << fmt_fixed(p["e2e_over_floor"]["p50"].get<double>(), 2)
      << "x it at the median, " << fmt_fixed(p["e2e_over_floor"]["p99"].get<double>(), 2)
      << "x at p99\n";
  for (const auto& n : pj["notes"]) o << "  note: " << n.get<std::string>() << "\n";
  return o.str();
}

// A tokenizer.json (or a Hugging Face directory holding one, with its tokenizer_config.json).
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path) {
  constexpr size_t kMaxBytes = size_t(64) << 20;
  std::error_code ec;
  const bool dir = std::filesystem::is_directory(path, ec);
  const std::string file = dir ? path + "/tokenizer.json" : path;
  const auto parse = [&](const std::string& f) {
    const nlohmann::json j =
        nlohmann::json::parse(read_input_file(f, "--tokenizer", kMaxBytes), nullptr, false);
    if (j.is_discarded()) usage_error("--tokenizer " + f + ": not JSON (give a tokenizer.json)");
    return j;
  };
  const nlohmann::json tok = parse(file);
  nlohmann::json config;
  if (dir && std::filesystem::exists(path + "/tokenizer_config.json", ec))
    config = parse(path + "/tokenizer_config.json");
  return tokenizer_from_json(tok, config.is_null() ? nullptr : &config, "--tokenizer " + file);
}

// Words of kWords per token, from the server's /tokenize (vLLM: {"model", "prompt"} -> "count";
// llama.cpp: {"content"} -> "tokens").
double server_words_per_token(const std::string& base, const std::string& api_key,
                              const std::string& model) {
  constexpr int kWordsProbe = 1000;
  std::string text;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<size_t> w(0, std::size(kWords) - 1);
  for (int i = 0; i < kWordsProbe; ++i) text.append(i ? " " : "").append(kWords[w(rng)]);
  std::string err;
  const nlohmann::json req = {
      {"model", model}, {"prompt", text}, {"content", text}, {"add_special_tokens", false}};
  const auto body = http_post_json(base + "/tokenize", api_key, req.dump(), 10, err);
  if (!body)
    usage_error("--tokenizer server: " + base + "/tokenize could not size a prompt (" + err +
                "); give --tokenizer tokenizer.json instead");
  const nlohmann::json j = nlohmann::json::parse(*body, nullptr, false);
  int64_t count = 0;
  if (j.is_object() && j.contains("count") && j["count"].is_number_integer())
    count = j["count"].get<int64_t>();
  else if (j.is_object() && j.contains("tokens") && j["tokens"].is_array())
    count = int64_t(j["tokens"].size());
  if (count <= 0)
    usage_error("--tokenizer server: " + base + "/tokenize answered neither count nor tokens");
  return double(kWordsProbe) / double(count);
}

}  // namespace

LoadOutput run_load_command(const LoadOptions& o) {
  Setup s;
  // ---- flags ----
  // Text that goes into JSON (request bodies, the report) must be UTF-8.
  for (const auto& [flag, v] : {std::pair<const char*, const std::string*>{"--url", &o.url},
                                {"--model", &o.model},
                                {"--metrics-url", &o.metrics_url},
                                {"--slo", &o.slo}})
    if (!utf8_valid(*v)) usage_error(std::string(flag) + " is not valid UTF-8 text");
  const std::string base = normalize_base_url(o.url, "--url");
  s.client.endpoint = parse_endpoint(o.endpoint);
  s.client.url = base + endpoint_path(s.client.endpoint);
  s.client.api_key = o.api_key;
  if (o.metrics_url != "none")
    s.metrics_url = o.metrics_url.empty() ? base + "/metrics"
                                          : normalize_base_url(o.metrics_url, "--metrics-url");
  if (!(o.request_timeout_s > 0) || !std::isfinite(o.request_timeout_s))
    usage_error("--request-timeout must be a positive number of seconds");
  s.client.request_timeout_s = o.request_timeout_s;
  s.arrival = workload::parse_arrival(o.arrival);
  if (!(o.burstiness > 0) || !std::isfinite(o.burstiness))
    usage_error("--burstiness must be a positive number (1 is Poisson, below 1 burstier)");
  if (o.burstiness != 1 && s.arrival != workload::Arrival::gamma)
    usage_error("--burstiness applies to --arrival gamma only");
  if (o.requests < 0 || o.requests > kMaxDatasetEntries)
    usage_error("--requests must be from 1 to 10000000");
  if (o.warmup < 0 || o.warmup > kMaxDatasetEntries)
    usage_error("--warmup must be from 0 to 10000000");
  if (o.max_concurrency < 0) usage_error("--max-concurrency must be >= 1");
  if (!(o.duration_s >= 0) || !std::isfinite(o.duration_s))
    usage_error("--duration must be a number of seconds > 0");
  if (!(o.ramp_up_s >= 0) || !std::isfinite(o.ramp_up_s))
    usage_error("--ramp-up must be a number of seconds >= 0");
  if (o.duration_s > 0) s.duration_ms = o.duration_s * 1e3;
  s.requests = o.requests > 0     ? o.requests
               : o.duration_s > 0 ? std::numeric_limits<int64_t>::max()
                                  : kDefaultRequests;
  if (!o.slo.empty()) s.slo = workload::Slo::parse(o.slo);
  s.prompts.endpoint = s.client.endpoint;
  s.prompts.seed = o.seed;
  s.prompts.ignore_eos = !o.no_ignore_eos;
  s.prompts.input = workload::LengthDist::parse(o.input, "--input");
  s.prompts.output = workload::LengthDist::parse(o.output, "--output");
  if (s.prompts.input.upper() > kMaxTokens || s.prompts.output.upper() > kMaxTokens)
    usage_error("--input and --output are 1 to 1048576 tokens");
  if (!o.dataset.empty() && !o.trace.empty())
    usage_error("give --dataset or --trace-replay, not both");
  if (!o.dataset.empty()) s.prompts.dataset = workload::read_dataset(o.dataset, kMaxDatasetEntries);
  if (!o.trace.empty())
    s.prompts.dataset = read_trace(o.trace, kMaxDatasetEntries, &s.prompts.hash_ids);
  const bool replay =
      !o.trace.empty() ||
      (!s.prompts.dataset.empty() && o.rate.empty() && o.concurrency.empty() &&
       std::all_of(s.prompts.dataset.begin(), s.prompts.dataset.end(),
                   [](const workload::DatasetEntry& e) { return e.arrival_ms.has_value(); }));

  std::vector<Point> points;
  if (!o.rate.empty() && !o.concurrency.empty())
    usage_error(
        "give --rate (open loop) or --concurrency (closed loop), not both; cap an open "
        "loop with --max-concurrency");
  if (o.max_concurrency > 0 && o.rate.empty() && !replay)
    usage_error(
        "--max-concurrency caps an open loop: give --rate too (or --concurrency for a "
        "closed loop)");
  if (replay) {
    if (!o.rate.empty() || !o.concurrency.empty() || o.find_max_rate)
      usage_error(
          "a replayed trace brings its own arrival times: drop --rate, --concurrency and "
          "--find-max-rate");
    std::vector<double> t;
    for (const auto& e : s.prompts.dataset) t.push_back(*e.arrival_ms);
    const double t0 = *std::min_element(t.begin(), t.end());
    for (double& x : t) x -= t0;
    std::stable_sort(t.begin(), t.end());
    if (o.requests > 0 && size_t(o.requests) < t.size()) t.resize(size_t(o.requests));
    s.trace_arrivals_ms = std::move(t);
    s.requests = int64_t(s.trace_arrivals_ms.size());
    points.push_back({});
  } else if (!o.rate.empty()) {
    for (const auto& r : split_list(o.rate)) points.push_back({workload::parse_rate(r), {}});
  } else {
    for (const auto& c : split_list(o.concurrency.empty() ? "1" : o.concurrency)) {
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(c.c_str(), &end, 10);
      if (c.empty() || *end || errno || v < 1 || v > 100000)
        usage_error("--concurrency '" + c + "' must be a whole number from 1 to 100000");
      points.push_back({{}, int64_t(v)});
    }
  }
  if (o.find_max_rate) {
    if (s.slo.empty()) usage_error("--find-max-rate needs --slo, e.g. --slo ttft:2s,tpot:100ms");
    if (!o.rate.empty() || !o.concurrency.empty())
      usage_error("--find-max-rate searches the rate itself: drop --rate and --concurrency");
    if (!(o.slo_attainment > 0 && o.slo_attainment <= 1))
      usage_error("--slo-attainment must be in (0, 1]");
    if (s.requests == std::numeric_limits<int64_t>::max())
      usage_error(
          "--find-max-rate runs --requests N at each rate; give --requests, not --duration");
  }

  std::unique_ptr<Physics> physics;
  if (!o.engine_report.empty()) {
    if (!o.cost_model.empty() || !o.hw.empty() || !o.hw_file.empty())
      usage_error(
          "--engine-report brings the model and the device: drop --cost-model, --hw and "
          "--hw-file");
    PhysicsOptions po;
    po.engine_report = o.engine_report;
    physics = std::make_unique<Physics>(po);
  } else if (!o.cost_model.empty()) {
    PhysicsOptions po;
    po.cost_model = o.cost_model;
    po.dtype = o.dtype;
    po.kv_dtype = o.kv_dtype;
    po.hw = o.hw;
    po.hw_file = o.hw_file;
    physics = std::make_unique<Physics>(po);
  } else if (!o.hw.empty() || !o.hw_file.empty()) {
    usage_error("--hw and --hw-file give the device of --cost-model: add --cost-model NAME");
  }

  // ---- the model: as given, or the server's first ----
  std::string model = o.model;
  if (model.empty()) {
    std::string err;
    const auto body = http_get(base + "/v1/models", o.api_key, 10, err);
    if (!body)
      usage_error("cannot ask " + base + "/v1/models for a model name (" + err +
                  "); is the server running? Give --model NAME to skip the question");
    const auto ids = model_ids(*body);
    if (ids.empty()) usage_error(base + "/v1/models lists no model; give --model NAME");
    model = ids.front();
  }
  s.prompts.model = model;
  if (!o.tokenizer.empty()) {
    if (s.client.endpoint != Endpoint::chat)
      usage_error(
          "--tokenizer sizes chat prompts; --endpoint completions sends token ids, exact "
          "already");
    if (o.tokenizer == "server") {
      s.prompts.words_per_token = server_words_per_token(base, o.api_key, model);
    } else {
      s.prompts.tokenizer = load_tokenizer(o.tokenizer);
    }
  }

  // ---- run ----
  LoadOutput out;
  nlohmann::json& j = out.report;
  j["kind"] = "load";
  j["load_schema_version"] = "1.0";
  j["tool"] = {{"name", "latprof"},
               {"version", build::kVersion},
               {"git_commit", build::kGitCommit},
               {"git_dirty", build::kGitDirty},
               {"build_type", build::kBuildType}};
  j["created_utc"] = utc_now_iso();
  j["argv"] = o.argv;
  j["target"] = {{"url", s.client.url}, {"endpoint", o.endpoint}, {"model", model}};
  j["load"] = {
      {"input", o.input},
      {"output", o.output},
      {"arrival", workload::arrival_name(s.arrival)},
      {"burstiness", o.burstiness},
      {"max_concurrency", o.max_concurrency > 0 ? nlohmann::json(o.max_concurrency) : nullptr},
      {"requests", s.requests == std::numeric_limits<int64_t>::max() ? nlohmann::json()
                                                                     : nlohmann::json(s.requests)},
      {"duration_s", o.duration_s > 0 ? nlohmann::json(o.duration_s) : nullptr},
      {"ramp_up_s", o.ramp_up_s},
      {"warmup", o.warmup},
      {"seed", o.seed},
      {"ignore_eos", !o.no_ignore_eos},
      {"tokenizer",
       o.tokenizer.empty() ? nlohmann::json() : nlohmann::json(utf8_sanitize(o.tokenizer))},
      {"request_timeout_s", o.request_timeout_s},
      {"slo", s.slo.empty() ? nlohmann::json() : nlohmann::json(s.slo.describe())},
      {"dataset", o.dataset.empty() ? nlohmann::json() : nlohmann::json(utf8_sanitize(o.dataset))},
      {"trace_replay",
       o.trace.empty() ? nlohmann::json() : nlohmann::json(utf8_sanitize(o.trace))}};
  std::string head = "latprof load: " + s.client.url + ", model " + model + ", input " + o.input +
                     ", output " + o.output + " tokens";
  auto describe = [&](const Point& p) {
    if (replay) return std::string("trace replay, ") + std::to_string(s.requests) + " requests";
    if (p.rate)
      return "open loop at " +
             (std::isinf(*p.rate) ? std::string("rate inf") : fmt_fixed(*p.rate, 3) + " req/s") +
             " (" + workload::arrival_name(s.arrival) + ")" +
             (o.max_concurrency > 0
                  ? ", at most " + std::to_string(o.max_concurrency) + " in flight"
                  : "");
    return "closed loop, concurrency " + std::to_string(*p.concurrency);
  };
  out.text = head + "\n";
  Client client(s.client);

  if (o.find_max_rate) {
    double lo = 0, hi = 0;
    {
      const auto parts = split_list(o.rate_range, ':');
      if (parts.size() != 2)
        usage_error("--rate-range '" + o.rate_range + "' must be LO:HI (e.g. 0.1:100)");
      lo = workload::parse_rate(parts[0]);
      hi = workload::parse_rate(parts[1]);
      if (std::isinf(lo) || std::isinf(hi) || !(lo < hi))
        usage_error("--rate-range '" + o.rate_range + "' needs finite rates LO < HI");
    }
    nlohmann::json probes = nlohmann::json::array();
    auto probe = [&](double rate) {
      const RunResult r = run_point(client, o, s, {rate, {}}, probes.size());
      out.interrupted = out.interrupted || r.stopped;
      nlohmann::json pj = point_json(r, s.slo, s.metrics_url, physics.get());
      out.csv += requests_csv(r, s.slo, fmt_fixed(rate, 3), out.csv.empty());
      const double att =
          pj["summary"]["slo_attainment"].get<double>() *
          double(pj["summary"]["requests"].get<int64_t>()) /
          double(std::max<int64_t>(1, pj["summary"]["requests_total"].get<int64_t>()));
      const bool met = att >= o.slo_attainment && !r.stopped;
      out.text += point_text("rate " + fmt_fixed(rate, 3) + " req/s: SLO met by " + fmt_pct(att) +
                                 (met ? " (meets)" : " (misses)"),
                             pj);
      pj["rate"] = rate;
      pj["slo_attainment_all"] = att;  // failed requests count as missing the SLO
      pj["meets"] = met;
      probes.push_back(std::move(pj));
      return met;
    };
    bool found = false;
    double best = 0;
    if (probe(lo) && !out.interrupted) {
      found = true;
      best = lo;
      if (probe(hi) && !out.interrupted) {
        best = hi;
      } else {
        // geometric bisection until the bracket is within 5%
        while (hi / lo > 1.05 && !out.interrupted) {
          const double mid = std::sqrt(lo * hi);
          (probe(mid) ? lo : hi) = mid;
        }
        best = lo;
      }
    }
    found = found && !out.interrupted;  // an unfinished search names no rate
    j["interrupted"] = out.interrupted;
    j["max_rate"] = {{"rate", found ? nlohmann::json(best) : nlohmann::json()},
                     {"slo", s.slo.describe()},
                     {"slo_attainment", o.slo_attainment},
                     {"rate_range", o.rate_range},
                     {"probes", std::move(probes)}};
    out.text += out.interrupted ? "interrupted: the search names no rate\n"
                : found         ? "highest rate meeting the SLO for " + fmt_pct(o.slo_attainment) +
                              " of requests: " + fmt_fixed(best, 3) + " req/s\n"
                        : "no rate in " + o.rate_range + " meets the SLO for " +
                              fmt_pct(o.slo_attainment) + " of requests\n";
    return out;
  }

  nlohmann::json pts = nlohmann::json::array();
  for (const Point& p : points) {
    if (out.interrupted) break;  // the points after an interruption are not run
    const RunResult r = run_point(client, o, s, p, pts.size());
    out.interrupted = out.interrupted || r.stopped;
    nlohmann::json pj = point_json(r, s.slo, s.metrics_url, physics.get());
    const std::string label = p.rate ? (std::isinf(*p.rate) ? "inf" : fmt_fixed(*p.rate, 3))
                              : p.concurrency ? std::to_string(*p.concurrency)
                                              : "replay";
    out.csv += requests_csv(r, s.slo, label, out.csv.empty());
    out.text += point_text(describe(p), pj);
    if (p.rate) pj["rate"] = std::isinf(*p.rate) ? nlohmann::json("inf") : nlohmann::json(*p.rate);
    if (p.concurrency) pj["concurrency"] = *p.concurrency;
    pts.push_back(std::move(pj));
  }
  j["interrupted"] = out.interrupted;
  int64_t ok = 0;
  std::map<std::string, int64_t> errors;
  for (const auto& pj : pts) {
    ok += pj["summary"]["requests"].get<int64_t>();
    for (auto& [k, v] : pj["summary"]["errors"].items()) errors[k] += v.get<int64_t>();
  }
  if (ok == 0) {
    out.all_failed = "every request failed:";
    for (const auto& [k, v] : errors) out.all_failed += " " + k + " " + std::to_string(v);
  }
  if (pts.size() == 1 && points.size() == 1) {
    for (auto& [k, v] : pts[0].items()) j[k] = v;
  } else {
    j["points"] = std::move(pts);
  }
  return out;
}

}  // namespace latprof::load
