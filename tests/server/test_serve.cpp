// latprof serve end to end: each test starts the latprof binary on a free port of 127.0.0.1
// (tests/server/server_process.hpp) and stops it. Completions and chat, streaming and not, stage
// timings that add up, token-id prompts, concurrent requests that get the tokens they get alone,
// every gateway refusal with its status and JSON body, a client that goes away mid-stream,
// SIGTERM draining, and /metrics counters that match the requests sent.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <future>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "server/server_process.hpp"
#include "support/temp_dirs.hpp"

namespace latprof::test {
namespace {

using nlohmann::json;

constexpr double kStageTolerance = 0.02;  // stages add up to the total within 2% (issue 15)

json parse(const std::string& s) {
  json j = json::parse(s, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << s;
  return j;
}

// The stages of latprof_timings add up to total_ms, every one is >= 0, and llama.cpp's timings
// are there.
void expect_timings(const json& body) {
  ASSERT_TRUE(body.contains("latprof_timings")) << body.dump();
  const json& t = body["latprof_timings"];
  double sum = 0;
  for (const char* k : {"gateway_ms", "queue_ms", "tokenize_ms", "prefill_ms", "decode_ms",
                        "detokenize_ms", "serialize_ms"}) {
    ASSERT_TRUE(t[k].is_number()) << k;
    EXPECT_GE(t[k].get<double>(), 0) << k << " in " << t.dump();
    sum += t[k].get<double>();
  }
  const double total = t["total_ms"].get<double>();
  EXPECT_GT(total, 0);
  EXPECT_NEAR(sum, total, kStageTolerance * total) << t.dump();
  ASSERT_TRUE(body.contains("timings"));
  for (const char* k :
       {"prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
        "predicted_ms", "predicted_per_token_ms", "predicted_per_second", "cache_n"})
    EXPECT_TRUE(body["timings"][k].is_number()) << k;
  EXPECT_EQ(body["timings"]["predicted_n"], body["usage"]["completion_tokens"]);
  EXPECT_EQ(body["timings"]["prompt_n"], body["usage"]["prompt_tokens"]);
}

std::string metrics_text(int port) {
  return http_request(port, "GET", "/metrics", "").body;
}

// Polls /metrics until pred holds (bounded).
bool wait_metrics(int port, const std::function<bool(const std::string&)>& pred,
                  double timeout_s = 20) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(metrics_text(port))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The text a (non-streaming) request generates, with its body.
json complete(int port, json req, const char* path = "/v1/completions") {
  const RawResponse r = post(port, path, req);
  EXPECT_EQ(r.status, 200) << r.body;
  return parse(r.body);
}

// A stream's text, its events (parsed, [DONE] excluded) and whether it ended with [DONE].
struct Stream {
  std::string text;
  std::vector<json> events;
  bool done = false;
  int status = 0;
};

Stream stream(int port, json req, bool chat) {
  req["stream"] = true;
  const RawResponse r = post(port, chat ? "/v1/chat/completions" : "/v1/completions", req);
  Stream s;
  s.status = r.status;
  EXPECT_EQ(r.header("content-type").rfind("text/event-stream", 0), 0u) << r.headers;
  for (const std::string& e : sse_events(r.body)) {
    if (e == "[DONE]") {
      s.done = true;
      continue;
    }
    EXPECT_FALSE(s.done) << "an event after [DONE]";
    s.events.push_back(parse(e));
    const json& ev = s.events.back();
    if (!ev["choices"].empty()) {
      const json& c = ev["choices"][0];
      if (chat && c["delta"].contains("content"))
        s.text += c["delta"]["content"].get<std::string>();
      if (!chat) s.text += c["text"].get<std::string>();
    }
  }
  return s;
}

TEST(Serve, CompletionsAndChat) {
  ServerProcess srv({"--model", "tiny"});
  const json c = complete(
      srv.port,
      {{"prompt", "ba keto lo"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["model"], "tiny");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(c["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(c["usage"]["completion_tokens"], 6);
  EXPECT_EQ(c["usage"]["total_tokens"].get<int>(), c["usage"]["prompt_tokens"].get<int>() + 6);
  expect_timings(c);

  // Server-Timing carries the same durations.
  const RawResponse raw =
      post(srv.port, "/v1/completions", {{"prompt", "ba"}, {"max_tokens", 3}, {"temperature", 0}});
  const std::string st = raw.header("server-timing");
  for (const char* k : {"gateway;dur=", "queue;dur=", "tokenize;dur=", "prefill;dur=",
                        "decode;dur=", "detokenize;dur=", "serialize;dur=", "total;dur="})
    EXPECT_NE(st.find(k), std::string::npos) << k << " in " << st;
  const double total = parse(raw.body)["latprof_timings"]["total_ms"];
  EXPECT_NEAR(std::stod(st.substr(st.find("total;dur=") + 10)), total, 0.001);

  const json chat = complete(srv.port,
                             {{"messages",
                               {{{"role", "system"}, {"content", "be brief"}},
                                {{"role", "user"}, {"content", "ba keto"}}}},
                              {"max_tokens", 5},
                              {"temperature", 0},
                              {"ignore_eos", true}},
                             "/v1/chat/completions");
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(chat["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(chat["usage"]["completion_tokens"], 5);
  expect_timings(chat);

  const json models = parse(http_request(srv.port, "GET", "/v1/models", "").body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(http_request(srv.port, "GET", "/health", "").status, 200);
  const json tok = parse(post(srv.port, "/tokenize", {{"prompt", "ba keto lo"}}).body);
  EXPECT_EQ(tok["count"], tok["tokens"].size());
  EXPECT_EQ(tok["count"], c["usage"]["prompt_tokens"]);
  const json detok = parse(post(srv.port, "/detokenize", {{"tokens", tok["tokens"]}}).body);
  EXPECT_TRUE(detok["prompt"].is_string());
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

TEST(Serve, StreamsCarryTheSameTokensAndTimingsInTheLastChunk) {
  ServerProcess srv({"--model", "tiny"});
  for (const bool chat : {false, true}) {
    json req = {{"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
    if (chat)
      req["messages"] = {{{"role", "user"}, {"content", "lo ba"}}};
    else
      req["prompt"] = "lo ba";
    const json whole = complete(srv.port, req, chat ? "/v1/chat/completions" : "/v1/completions");
    const std::string text = chat ? whole["choices"][0]["message"]["content"].get<std::string>()
                                  : whole["choices"][0]["text"].get<std::string>();
    // Without usage: the last chunk has the finish reason and the timings.
    Stream s = stream(srv.port, req, chat);
    EXPECT_EQ(s.status, 200);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.text, text);
    ASSERT_GE(s.events.size(), 2u);
    EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(s.events.front()["object"], chat ? "chat.completion.chunk" : "text_completion");
    EXPECT_TRUE(s.events.back().contains("latprof_timings"));
    // With usage: one more chunk with no choices, the usage and the timings.
    req["stream_options"] = {{"include_usage", true}};
    s = stream(srv.port, req, chat);
    EXPECT_EQ(s.text, text);
    const json& last = s.events.back();
    EXPECT_TRUE(last["choices"].empty());
    EXPECT_EQ(last["usage"]["completion_tokens"], 10);
    expect_timings(last);
    // One chunk per token that has text: never more content chunks than tokens.
    EXPECT_LE(s.events.size() - 2, 10u);
    // vLLM's continuous_usage_stats: each chunk says how many tokens the request has so far.
    req["stream_options"]["continuous_usage_stats"] = true;
    s = stream(srv.port, req, chat);
    EXPECT_EQ(s.text, text);
    int64_t before = 0;
    for (size_t i = 0; i + 2 < s.events.size(); ++i) {  // the content chunks
      const int64_t n = s.events[i]["usage"]["completion_tokens"];
      EXPECT_GT(n, before) << i;
      before = n;
    }
    EXPECT_EQ(before, 10);
    EXPECT_EQ(s.events[s.events.size() - 2]["usage"]["completion_tokens"], 10);  // finish chunk
  }
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

TEST(Serve, TokenIdPromptsAndStopStrings) {
  ServerProcess srv({"--model", "tiny"});
  const json tok = parse(post(srv.port, "/tokenize", {{"prompt", "keto lo ba ze"}}).body);
  json req = {{"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  req["prompt"] = "keto lo ba ze";
  const json by_text = complete(srv.port, req);
  req["prompt"] = tok["tokens"];
  const json by_ids = complete(srv.port, req);
  EXPECT_EQ(by_ids["choices"][0]["text"], by_text["choices"][0]["text"]);
  EXPECT_EQ(by_ids["usage"]["prompt_tokens"], tok["count"]);
  // A stop string from the middle of the greedy text cuts it there (streaming or not).
  const std::string text = by_text["choices"][0]["text"];
  ASSERT_GE(text.size(), 8u);
  const std::string stop = text.substr(text.size() / 2, 3);
  req["prompt"] = "keto lo ba ze";
  req["stop"] = {stop};
  const json stopped = complete(srv.port, req);
  EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(stopped["usage"]["completion_tokens"].get<int>(), 12);
  const Stream s = stream(srv.port, req, false);
  EXPECT_EQ(s.text, text.substr(0, text.find(stop)));
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

// The sizing: 256 concurrent streams (--max-connections' default) on cpp-httplib, all
// connecting at once (the listen backlog is raised from cpp-httplib's 5).
TEST(Serve, Holds256ConcurrentStreams) {
  ServerProcess srv({"--model", "tiny", "--kv-cache-memory", "64MiB"});
  constexpr int kStreams = 256, kTokens = 8;
  std::vector<std::future<Stream>> all;
  for (int i = 0; i < kStreams; ++i)
    all.push_back(std::async(std::launch::async, [&, i] {
      return stream(srv.port,
                    {{"prompt", std::vector<int>{5 + i % 200, 7, 9}},
                     {"max_tokens", kTokens},
                     {"ignore_eos", true}},
                    false);
    }));
  int complete_streams = 0;
  for (auto& f : all) {
    const Stream s = f.get();
    EXPECT_EQ(s.status, 200);
    complete_streams += s.done && s.events.size() == kTokens + 1;
  }
  EXPECT_EQ(complete_streams, kStreams);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

// A client that sends half a request holds its connection thread only until --read-timeout;
// garbage instead of HTTP is a 400.
TEST(Serve, SlowAndMalformedClientsCannotHoldTheServer) {
  ServerProcess srv({"--model", "tiny", "--max-connections", "1", "--connection-backlog", "8",
                     "--read-timeout", "1", "--keep-alive-timeout", "1"});
  const int slow = connect_to(srv.port);
  ASSERT_GE(slow, 0);
  const std::string half =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro";
  ASSERT_EQ(send(slow, half.data(), half.size(), MSG_NOSIGNAL), ssize_t(half.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // it holds the only thread
  const auto t0 = std::chrono::steady_clock::now();
  const RawResponse r = post(srv.port, "/v1/completions", {{"prompt", "ba"}, {"max_tokens", 2}});
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 200);
  // The slow client's read timed out after 1 s; its connection was closed 1 s later (keep-alive).
  EXPECT_LT(waited, 6.0);
  close(slow);
  const RawResponse g = http_request(srv.port, "GARBAGE", "\x01\x02", "", {},
                                     [](const std::string& body) { return body.empty(); });
  EXPECT_EQ(g.status, 400);
  EXPECT_EQ(http_request(srv.port, "GET", "/health", "").status, 200);  // still serving
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

// --kv-dtype bf16: the server says so and answers; an unknown type is a usage error.
TEST(Serve, Bf16KvCache) {
  ServerProcess srv({"--model", "tiny", "--kv-dtype", "bf16"});
  EXPECT_NE(srv.banner.find("KV cache (bf16)"), std::string::npos) << srv.banner;
  const json c = complete(
      srv.port,
      {{"prompt", "ba keto"}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(c["usage"]["completion_tokens"], 4);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
  const auto [code, out] = run_command(
      std::string(LATPROF_BIN) + " serve --model tiny --port 0 --kv-dtype fp8 2>&1", 60);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--kv-dtype 'fp8' is not supported"), std::string::npos) << out;
}

// --kv-dtype int8: the server answers, and the same --kv-cache-memory holds more blocks: tiny's
// rows are 2 kv heads of 16, 64 bytes in fp16 and 2 x (16 + 4) = 40 in int8, so 1 MiB holds 256
// blocks of 16 tokens (2 layers, K and V) in fp16 and 409 in int8.
TEST(Serve, Int8KvCacheHoldsMoreBlocks) {
  auto blocks = [](const std::string& banner) {
    const size_t at = banner.find(") ", banner.find("KV cache ("));
    return at == std::string::npos ? -1L : std::stol(banner.substr(at + 2));
  };
  ServerProcess f16({"--model", "tiny", "--kv-cache-memory", "1MiB"});
  EXPECT_EQ(blocks(f16.banner), 256) << f16.banner;
  EXPECT_EQ(f16.stop(SIGTERM, 30), 0);
  ServerProcess i8({"--model", "tiny", "--kv-dtype", "int8", "--kv-cache-memory", "1MiB"});
  EXPECT_NE(i8.banner.find("KV cache (int8) 409 blocks"), std::string::npos) << i8.banner;
  const json c = complete(
      i8.port,
      {{"prompt", "ba keto"}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(c["usage"]["completion_tokens"], 4);
  EXPECT_EQ(i8.stop(SIGTERM, 30), 0);
}

TEST(Serve, APortInUseIsAUsageError) {
  ServerProcess first({"--model", "tiny"});
  const auto [code, out] =
      run_command(std::string(LATPROF_BIN) + " serve --model tiny --host 127.0.0.1 --port " +
                      std::to_string(first.port) + " 2>&1",
                  60);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("cannot listen on 127.0.0.1:" + std::to_string(first.port)), std::string::npos)
      << out;
  EXPECT_EQ(first.stop(SIGTERM, 30), 0);
}

// The model's end-of-sequence token ends a request ("stop", counted, no text) unless
// ignore_eos. Sampling at a high temperature is seeded, so the seeds that meet EOS are the
// same on every run; the tiny model's vocabulary of 256 makes it likely within 400 tokens.
TEST(Serve, EndOfSequenceStopsUnlessIgnored) {
  ServerProcess srv({"--model", "tiny"});
  int stopped = 0;
  for (int seed = 0; seed < 8; ++seed) {
    json req = {{"prompt", "ba"}, {"max_tokens", 400}, {"temperature", 100}, {"seed", seed}};
    const json a = complete(srv.port, req);
    if (a["choices"][0]["finish_reason"] != "stop") {
      EXPECT_EQ(a["usage"]["completion_tokens"], 400);
      continue;
    }
    ++stopped;
    const int n = a["usage"]["completion_tokens"];
    EXPECT_LT(n, 400);
    // The same seed with ignore_eos: the same first n - 1 tokens' text, then on to 400.
    req["ignore_eos"] = true;
    const json b = complete(srv.port, req);
    EXPECT_EQ(b["usage"]["completion_tokens"], 400);
    EXPECT_EQ(b["choices"][0]["finish_reason"], "length");
    const std::string ta = a["choices"][0]["text"], tb = b["choices"][0]["text"];
    EXPECT_EQ(tb.substr(0, ta.size()), ta);
    EXPECT_GT(tb.size(), ta.size());
    // Streaming: the same stop.
    req.erase("ignore_eos");
    const Stream s = stream(srv.port, req, false);
    EXPECT_EQ(s.text, ta);
    EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "stop");
  }
  EXPECT_GE(stopped, 1);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

TEST(Serve, ConcurrentRequestsGetWhatTheyGetAlone) {
  ServerProcess srv({"--model", "tiny", "--max-batched-tokens", "64"});
  const std::vector<std::string> prompts = {
      "ba", "keto lo ba ze mu", "lo lo lo", "ze ba keto", "mu mu ba lo keto ze ba ba ba", "keto"};
  auto req = [](const std::string& p, bool stream_it) {
    json r = {{"prompt", p}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}};
    if (stream_it) r["stream"] = true;
    return r;
  };
  std::vector<std::string> alone;
  for (const std::string& p : prompts)
    alone.push_back(complete(srv.port, req(p, false))["choices"][0]["text"]);
  std::vector<std::future<std::string>> together;
  for (size_t i = 0; i < prompts.size(); ++i)
    together.push_back(std::async(std::launch::async, [&, i] {
      if (i % 2) return stream(srv.port, req(prompts[i], false), false).text;
      return complete(srv.port, req(prompts[i], false))["choices"][0]["text"].get<std::string>();
    }));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i].get(), alone[i]) << i;
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

// Every refusal: its status, its OpenAI-style JSON error and its counter.
TEST(Serve, GatewayRefusals) {
  const std::string keys =
      (latprof::testing::scratch_dir("serve-" + std::to_string(getpid())) / "keys.txt").string();
  std::ofstream(keys) << "# keys\nk2\n\n";
  ServerProcess srv(
      {"--model", "tiny", "--api-key", "k1", "--api-keys", keys, "--max-body-bytes", "2KiB"});
  const std::string k2 = "Authorization: Bearer k2";
  auto error_of = [](const RawResponse& r) {
    const json j = parse(r.body);
    EXPECT_TRUE(j["error"]["message"].is_string()) << r.body;
    EXPECT_TRUE(j["error"].contains("type") && j["error"].contains("param") &&
                j["error"].contains("code"))
        << r.body;
    return j["error"];
  };
  const json ok = {{"prompt", "ba"}, {"max_tokens", 2}};
  RawResponse r = post(srv.port, "/v1/completions", ok);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(error_of(r)["code"], "invalid_api_key");
  r = post(srv.port, "/v1/completions", ok, {"Authorization: Bearer nope"});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(http_request(srv.port, "GET", "/v1/models", "").status, 401);
  EXPECT_EQ(http_request(srv.port, "GET", "/health", "").status, 200);   // no key needed
  EXPECT_EQ(http_request(srv.port, "GET", "/metrics", "").status, 200);  // no key needed
  EXPECT_EQ(post(srv.port, "/v1/completions", ok, {k2}).status, 200);    // a key from the file
  {
    // Refusals on one keep-alive connection: each body is consumed, so the next request on the
    // connection is read from its first byte (not from the refused body's).
    const int fd = connect_to(srv.port);
    ASSERT_GE(fd, 0);
    const std::string body = ok.dump();
    const std::string one =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(send(fd, one.data(), one.size(), MSG_NOSIGNAL), ssize_t(one.size()));
      std::string got;
      char buf[4096];
      while (got.find("\r\n\r\n") == std::string::npos ||
             got.size() < got.find("\r\n\r\n") + 4 + 100) {
        pollfd p{fd, POLLIN, 0};
        ASSERT_EQ(poll(&p, 1, 10000), 1);
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        ASSERT_GT(n, 0);
        got.append(buf, size_t(n));
      }
      EXPECT_EQ(got.substr(9, 3), "401") << "request " << i << ": " << got;
    }
    close(fd);
  }

  r = http_request(srv.port, "POST", "/v1/completions",
                   "{\"prompt\": \"" + std::string(3000, 'a') + "\"}", {k2});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["code"], "body_too_large");
  r = http_request(srv.port, "POST", "/v1/completions", "{\"prompt\": ", {k2});
  EXPECT_EQ(r.status, 400);
  r = post(srv.port, "/v1/completions", {{"prompt", "ba"}, {"n", 2}}, {k2});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["param"], "n");
  r = post(srv.port, "/v1/completions", {{"prompt", "ba"}, {"model", "gpt-4"}}, {k2});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(error_of(r)["code"], "model_not_found");
  std::vector<int> ids(500, 5);
  r = post(srv.port, "/v1/completions", {{"prompt", ids}, {"max_tokens", 100}}, {k2});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["code"], "context_length_exceeded");
  EXPECT_EQ(error_of(r)["param"], "max_tokens");
  r = post(srv.port, "/v1/completions",
           {{"prompt", "ba"}, {"max_tokens", std::numeric_limits<int64_t>::max()}}, {k2});
  EXPECT_EQ(r.status, 400);  // no overflow
  EXPECT_EQ(error_of(r)["code"], "context_length_exceeded");
  r = http_request(srv.port, "GET", "/no/such/path", "", {k2});
  EXPECT_EQ(r.status, 404);
  error_of(r);

  const std::string m = metrics_text(srv.port);
  EXPECT_EQ(metric(m, "latprof:request_rejected_total{reason=\"unauthorized\"}"), 6);
  EXPECT_EQ(metric(m, "latprof:request_rejected_total{reason=\"body_too_large\"}"), 1);
  EXPECT_EQ(metric(m, "latprof:request_rejected_total{reason=\"invalid\"}"), 2);
  EXPECT_EQ(metric(m, "latprof:request_rejected_total{reason=\"model_not_found\"}"), 1);
  EXPECT_EQ(metric(m, "latprof:request_rejected_total{reason=\"context_length\"}"), 2);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

TEST(Serve, RateLimitAnswers429WithRetryAfter) {
  ServerProcess srv({"--model", "tiny", "--api-key", "k1", "--api-key", "k2", "--rate-limit", "0.5",
                     "--rate-burst", "5"});
  const std::string k1 = "Authorization: Bearer k1", k2 = "Authorization: Bearer k2";
  RawResponse r;
  // k1's bucket: 5 at once, then 429 with Retry-After.
  int limited = 0;
  for (int i = 0; i < 10; ++i) {
    r = http_request(srv.port, "GET", "/v1/models", "", {k1});
    if (r.status == 429) {
      ++limited;
      EXPECT_GE(std::stoi(r.header("retry-after")), 1);
      EXPECT_EQ(parse(r.body)["error"]["code"], "rate_limit_exceeded");
    } else {
      EXPECT_EQ(r.status, 200);
    }
  }
  EXPECT_GE(limited, 4);

  // Each key has its own bucket.
  EXPECT_EQ(http_request(srv.port, "GET", "/v1/models", "", {k2}).status, 200);
  EXPECT_EQ(
      metric(metrics_text(srv.port), "latprof:request_rejected_total{reason=\"rate_limited\"}"),
      limited);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

TEST(Serve, FullWaitingQueueAndConnectionLimitAnswer503) {
  {
    ServerProcess srv({"--model", test_model_slow(), "--kv-cache-memory", "64MiB", "--max-seqs",
                       "1", "--max-waiting", "1"});
    const json long_req = {
        {"prompt", "ba"}, {"max_tokens", 400}, {"ignore_eos", true}, {"temperature", 0}};
    auto a =
        std::async(std::launch::async, [&] { return post(srv.port, "/v1/completions", long_req); });
    ASSERT_TRUE(wait_metrics(srv.port, [](const std::string& m) {
      return metric(m, "latprof:num_requests_running") == 1;
    }));
    auto b =
        std::async(std::launch::async, [&] { return post(srv.port, "/v1/completions", long_req); });
    ASSERT_TRUE(wait_metrics(srv.port, [](const std::string& m) {
      return metric(m, "latprof:num_requests_waiting") == 1;
    }));
    const RawResponse c = post(srv.port, "/v1/completions", long_req);
    EXPECT_EQ(c.status, 503);
    EXPECT_EQ(parse(c.body)["error"]["code"], "queue_full");
    EXPECT_EQ(c.header("retry-after"), "1");
    EXPECT_EQ(a.get().status, 200);
    EXPECT_EQ(b.get().status, 200);
    EXPECT_EQ(
        metric(metrics_text(srv.port), "latprof:request_rejected_total{reason=\"queue_full\"}"), 1);
  }
  {
    // One connection thread and no backlog: a second connection is refused while a keep-alive
    // connection holds the thread.
    ServerProcess srv({"--model", "tiny", "--max-connections", "1", "--connection-backlog", "0"});
    const int held = connect_to(srv.port);
    ASSERT_GE(held, 0);
    const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(send(held, get.data(), get.size(), MSG_NOSIGNAL), ssize_t(get.size()));
    char buf[1024];
    pollfd p{held, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 10000), 1);
    ASSERT_GT(recv(held, buf, sizeof buf, 0), 0);  // answered; the thread waits on it now
    const RawResponse r = http_request(srv.port, "GET", "/health", "");
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(parse(r.body)["error"]["code"], "overloaded");
    close(held);
    EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
  }
}

TEST(Serve, ClientGoneMidStreamCancelsAndFreesItsBlocks) {
  ServerProcess srv({"--model", test_model_slow(), "--kv-cache-memory", "64MiB"});
  json req = {{"prompt", "ba keto"}, {"max_tokens", 1500}, {"ignore_eos", true}, {"stream", true}};
  const RawResponse r = http_request(srv.port, "POST", "/v1/completions", req.dump(), {},
                                     [](const std::string& body) {
                                       return sse_events(body).size() < 3;  // then hang up
                                     });
  EXPECT_EQ(r.status, 200);
  ASSERT_TRUE(wait_metrics(srv.port, [](const std::string& m) {
    return metric(m, "latprof:request_cancelled_total{reason=\"client_disconnected\"}") == 1;
  })) << metrics_text(srv.port);
  const std::string m = metrics_text(srv.port);
  EXPECT_EQ(metric(m, "latprof:num_requests_running"), 0);
  EXPECT_EQ(metric(m, "latprof:kv_cache_usage_perc"), 0);
  EXPECT_LT(metric(m, "latprof:generation_tokens_total"), 1500);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

TEST(Serve, SigtermLetsRunningRequestsFinishAndRefusesTheRest) {
  ServerProcess srv({"--model", test_model_slow(), "--kv-cache-memory", "64MiB", "--max-seqs", "1",
                     "--drain-timeout", "30"});
  const json req = {{"prompt", "ba"}, {"max_tokens", 300}, {"ignore_eos", true}};
  auto a = std::async(std::launch::async, [&] { return post(srv.port, "/v1/completions", req); });
  ASSERT_TRUE(wait_metrics(srv.port, [](const std::string& m) {
    return metric(m, "latprof:num_requests_running") == 1;
  }));
  auto b = std::async(std::launch::async, [&] { return post(srv.port, "/v1/completions", req); });
  ASSERT_TRUE(wait_metrics(srv.port, [](const std::string& m) {
    return metric(m, "latprof:num_requests_waiting") == 1;
  }));
  auto code = std::async(std::launch::async, [&] { return srv.stop(SIGTERM, 60); });
  const RawResponse rb = b.get();  // queued: refused at once
  EXPECT_EQ(rb.status, 503);
  EXPECT_EQ(parse(rb.body)["error"]["code"], "shutting_down");
  const RawResponse late = post(srv.port, "/v1/completions", req);
  EXPECT_TRUE(late.status == 503 || late.status == 0) << late.status;  // refused or closed
  const RawResponse ra = a.get();                                      // running: finishes
  EXPECT_EQ(ra.status, 200);
  EXPECT_EQ(parse(ra.body)["usage"]["completion_tokens"], 300);
  EXPECT_EQ(code.get(), 0);
}

TEST(Serve, DrainTimeoutCancelsWhatIsStillRunning) {
  ServerProcess srv(
      {"--model", test_model_slow(), "--kv-cache-memory", "64MiB", "--drain-timeout", "0.2"});
  const json req = {{"prompt", "ba"}, {"max_tokens", 1800}, {"ignore_eos", true}};
  auto a = std::async(std::launch::async, [&] { return post(srv.port, "/v1/completions", req); });
  ASSERT_TRUE(wait_metrics(srv.port, [](const std::string& m) {
    return metric(m, "latprof:num_requests_running") == 1;
  }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  EXPECT_EQ(a.get().status, 503);
}

// Prefix caching is on by default in the server: a second request sharing a long prompt prefix
// reuses its full KV blocks, reported as llama.cpp does (cache_n; prompt_n = tokens computed) and
// in the prefix-cache counters; its greedy text is what a server without the cache gives.
TEST(Serve, PrefixCacheReusesASharedPromptPrefix) {
  std::string prefix;
  for (int i = 0; i < 12; ++i) prefix += "keto lo ba ze ";
  json req = {{"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  auto run = [&](const std::vector<std::string>& args) {
    ServerProcess srv(args);
    req["prompt"] = prefix + "first";
    const json a = complete(srv.port, req);
    req["prompt"] = prefix + "second";
    const json b = complete(srv.port, req);
    // Counted once the last byte is written: poll briefly.
    const int64_t asked =
        a["usage"]["prompt_tokens"].get<int64_t>() + b["usage"]["prompt_tokens"].get<int64_t>();
    EXPECT_TRUE(wait_metrics(srv.port, [&](const std::string& t) {
      return metric(t, "latprof:prefix_cache_queries_total") == asked;
    }));
    const std::string m = metrics_text(srv.port);
    EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
    return std::make_tuple(a, b, m);
  };
  const auto [a, b, m] = run({"--model", "tiny"});
  EXPECT_EQ(a["timings"]["cache_n"], 0);
  const int64_t hits = b["timings"]["cache_n"], prompt = b["usage"]["prompt_tokens"];
  EXPECT_GE(hits, 16) << b["timings"].dump();
  EXPECT_EQ(hits % 16, 0);
  EXPECT_EQ(b["timings"]["prompt_n"].get<int64_t>(), prompt - hits);
  EXPECT_EQ(metric(m, "latprof:prefix_cache_hits_total"), hits);
  EXPECT_EQ(metric(m, "latprof:prefix_cache_queries_total"),
            a["usage"]["prompt_tokens"].get<int64_t>() + prompt);
  const auto [a_off, b_off, m_off] = run({"--model", "tiny", "--prefix-cache", "off"});
  EXPECT_EQ(b_off["timings"]["cache_n"], 0);
  EXPECT_EQ(metric(m_off, "latprof:prefix_cache_hits_total"), 0);
  EXPECT_EQ(b_off["choices"][0]["text"], b["choices"][0]["text"]);
}

TEST(Serve, MetricsCountTheRequestsSent) {
  ServerProcess srv({"--model", "tiny"});
  int64_t prompt = 0, generated = 0;
  const int n = 5;
  for (int i = 0; i < n; ++i) {
    const json c = complete(srv.port, {{"prompt", std::string(size_t(i + 1) * 3, 'b')},
                                       {"max_tokens", 2 + i},
                                       {"ignore_eos", true}});
    prompt += c["usage"]["prompt_tokens"].get<int64_t>();
    generated += c["usage"]["completion_tokens"].get<int64_t>();
  }
  const Stream s = stream(srv.port,
                          {{"prompt", "ba ba"},
                           {"max_tokens", 7},
                           {"ignore_eos", true},
                           {"stream_options", {{"include_usage", true}}}},
                          false);
  prompt += s.events.back()["usage"]["prompt_tokens"].get<int64_t>();
  generated += 7;
  // The last response is counted once its last byte is written: poll briefly.
  ASSERT_TRUE(wait_metrics(srv.port, [&](const std::string& m) {
    return metric(m, "latprof:e2e_request_latency_seconds_count") == n + 1;
  }));
  const std::string m = metrics_text(srv.port);
  EXPECT_EQ(metric(m, "latprof:request_success_total{finished_reason=\"length\"}"), n + 1);
  EXPECT_EQ(metric(m, "latprof:prompt_tokens_total"), prompt);
  EXPECT_EQ(metric(m, "latprof:generation_tokens_total"), generated);
  EXPECT_EQ(metric(m, "latprof:time_to_first_token_seconds_count"), n + 1);
  EXPECT_EQ(metric(m, "latprof:inter_token_latency_seconds_count"), generated - (n + 1));
  EXPECT_EQ(metric(m, "latprof:request_queue_time_seconds_count"), n + 1);
  // Every request came on a connection of its own, each counted once it had a thread.
  EXPECT_GE(metric(m, "latprof:connection_wait_seconds_count"), n + 1);
  EXPECT_EQ(metric(m, "latprof:num_requests_running"), 0);
  EXPECT_EQ(metric(m, "latprof:num_requests_waiting"), 0);
  EXPECT_GE(metric(m, "latprof:engine_steps_total"), double(generated - (n + 1)));
  // The engine's thread pool off its CPUs during the steps (Linux), the run-queue wait part of it.
  const double off = metric(m, "latprof:engine_offcpu_seconds_total");
  EXPECT_GE(off, 0);
  EXPECT_GE(metric(m, "latprof:engine_runq_seconds_total"), 0);
  EXPECT_LE(metric(m, "latprof:engine_runq_seconds_total"), off);
  EXPECT_GE(metric(m, "latprof:http_responses_total{status=\"200\"}"), n + 1);
  // Every sample line is "name{labels} number" with a latprof: name.
  std::istringstream in(m);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    ++samples;
    EXPECT_EQ(line.rfind("latprof:", 0), 0u) << line;
    const size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    EXPECT_NO_THROW(std::stod(line.substr(sp + 1))) << line;
  }
  EXPECT_GT(samples, 50);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

TEST(Serve, JsonlLinesAndTraceAtExit) {
  const std::string dir = ::testing::TempDir();
  const std::string jsonl = dir + "/latprof_serve_" + std::to_string(getpid()) + ".jsonl";
  const std::string trace = dir + "/latprof_serve_" + std::to_string(getpid()) + ".trace.json";
  std::remove(jsonl.c_str());
  std::remove(trace.c_str());
  {
    ServerProcess srv({"--model", "tiny", "--jsonl", jsonl, "--trace", trace});
    complete(srv.port, {{"prompt", "ba lo"}, {"max_tokens", 4}, {"ignore_eos", true}});
    stream(srv.port, {{"prompt", "ba"}, {"max_tokens", 3}, {"ignore_eos", true}}, false);
    ASSERT_TRUE(wait_metrics(srv.port, [](const std::string& m) {
      return metric(m, "latprof:e2e_request_latency_seconds_count") == 2;
    }));
    EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
  }
  std::ifstream in(jsonl);
  std::string line;
  std::vector<json> lines;
  while (std::getline(in, line)) lines.push_back(parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["completion_tokens"], 4);
  EXPECT_EQ(lines[1]["stream"], true);
  for (const json& l : lines) {
    EXPECT_GE(l["written_ms"].get<double>(), l["latprof_timings"]["total_ms"].get<double>());
    EXPECT_EQ(l["token_ms"].size(), l["completion_tokens"].get<size_t>());
  }
  std::ifstream tin(trace);
  std::stringstream ts;
  ts << tin.rdbuf();
  const json t = parse(ts.str());
  std::set<std::string> names;
  int steps = 0;
  for (const json& e : t["traceEvents"]) {
    names.insert(e["name"].get<std::string>());
    if (e["name"] != "step") continue;
    ++steps;
    // On the CPU each step says how long its thread pool was off the CPUs.
    EXPECT_GE(e["args"]["offcpu_ms"].get<double>(), 0) << e.dump();
    EXPECT_LE(e["args"]["runq_ms"].get<double>(), e["args"]["offcpu_ms"].get<double>()) << e.dump();
  }
  for (const char* n : {"gateway", "tokenize", "queue", "prefill", "decode", "serialize", "write"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_GE(steps, 4 + 3 - 1);  // at least the steps of the longer request, and shared ones
  std::remove(jsonl.c_str());
  std::remove(trace.c_str());
}

}  // namespace
}  // namespace latprof::test
