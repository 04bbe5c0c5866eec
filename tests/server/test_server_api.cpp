// latprof serve's pieces that need no HTTP: request parsing and validation (every refusal names
// its field), chat templates, the rate limiter, sampling, and the Server-Timing header.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "model/tokenizer.hpp"
#include "server/api.hpp"
#include "server/chat_template.hpp"
#include "server/gateway.hpp"
#include "server/request.hpp"
#include "server/server.hpp"
#include "server/server_process.hpp"
#include "server/serving_model.hpp"

namespace latprof::server {
namespace {

constexpr int64_t kVocab = 256;

// The field an invalid body is refused for (status 400), or "ok".
std::string refusal(const std::string& body, bool chat = false) {
  try {
    parse_generate_request(body, chat, kVocab);
    return "ok";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << body;
    const auto j = e.body();
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_EQ(j["error"]["type"], e.type);
    return j["error"]["param"].is_null() ? "(none)" : j["error"]["param"].get<std::string>();
  }
}

TEST(ServerApi, ParsesCompletionParameters) {
  const GenerateRequest r = parse_generate_request(
      R"({"model":"m","prompt":"hello","max_tokens":7,"temperature":0.5,"top_k":-1,"top_p":0.9,
          "seed":3,"stop":["x","yz"],"ignore_eos":true,"stream":true,
          "stream_options":{"include_usage":true},"n":1,"logprobs":null,"user":"u"})",
      false, kVocab);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "hello");
  EXPECT_EQ(r.max_tokens.value(), 7);
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 0.9);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, 3u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(r.ignore_eos && r.stream && r.include_usage);
  // Token ids, also as a batch of one; max_tokens absent.
  const GenerateRequest ids = parse_generate_request(R"({"prompt":[[1,2,255]]})", false, kVocab);
  EXPECT_TRUE(ids.prompt_ids_given);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 255}));
  EXPECT_FALSE(ids.max_tokens.has_value());
  const GenerateRequest chat = parse_generate_request(
      R"({"messages":[{"role":"system","content":"s"},
                      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
          "max_completion_tokens":4})",
      true, kVocab);
  ASSERT_EQ(chat.messages.size(), 2u);
  EXPECT_EQ(chat.messages[1].content, "ab");
  EXPECT_EQ(chat.max_tokens.value(), 4);
}

TEST(ServerApi, EveryRefusalNamesItsField) {
  EXPECT_EQ(refusal(""), "(none)");
  EXPECT_EQ(refusal("{"), "(none)");
  EXPECT_EQ(refusal("[1]"), "(none)");
  EXPECT_EQ(refusal(R"({})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt":""})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt":5})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt":[]})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt":["a","b"]})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt":[1, 256]})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt":[1, -1]})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt":[1.5]})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt":"a","model":3})"), "model");
  EXPECT_EQ(refusal(R"({"prompt":"a","max_tokens":0})"), "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt":"a","max_tokens":-4})"), "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt":"a","max_tokens":"7"})"), "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt":"a","max_tokens":1.5})"), "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt":"a","max_tokens":18446744073709551615})"), "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt":"a","n":2})"), "n");
  EXPECT_EQ(refusal(R"({"prompt":"a","temperature":-1})"), "temperature");
  EXPECT_EQ(refusal(R"({"prompt":"a","temperature":"hot"})"), "temperature");
  EXPECT_EQ(refusal(R"({"prompt":"a","top_p":0})"), "top_p");
  EXPECT_EQ(refusal(R"({"prompt":"a","top_p":1.5})"), "top_p");
  EXPECT_EQ(refusal(R"({"prompt":"a","top_k":-2})"), "top_k");
  EXPECT_EQ(refusal(R"({"prompt":"a","seed":"x"})"), "seed");
  EXPECT_EQ(refusal(R"({"prompt":"a","stop":3})"), "stop");
  EXPECT_EQ(refusal(R"({"prompt":"a","stop":[""]})"), "stop");
  EXPECT_EQ(refusal(R"({"prompt":"a","stop":["a",1]})"), "stop");
  EXPECT_EQ(refusal(R"({"prompt":"a","ignore_eos":"yes"})"), "ignore_eos");
  EXPECT_EQ(refusal(R"({"prompt":"a","stream":1})"), "stream");
  EXPECT_EQ(refusal(R"({"prompt":"a","stream_options":{"include_usage":true}})"), "stream_options");
  EXPECT_EQ(refusal(R"({"prompt":"a","stream":true,"stream_options":{"include_usage":2}})"),
            "stream_options.include_usage");
  EXPECT_EQ(refusal(R"({})", true), "messages");
  EXPECT_EQ(refusal(R"({"messages":[]})", true), "messages");
  EXPECT_EQ(refusal(R"({"messages":[3]})", true), "messages[0]");
  EXPECT_EQ(refusal(R"({"messages":[{"content":"x"}]})", true), "messages[0].role");
  EXPECT_EQ(refusal(R"({"messages":[{"role":"user","content":5}]})", true), "messages[0].content");
  EXPECT_EQ(refusal(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", true),
            "messages[0].content");
  // Null means "not given".
  EXPECT_EQ(refusal(R"({"prompt":"a","max_tokens":null,"stop":null,"seed":null})"), "ok");
}

TEST(ServerApi, TokenizeAndDetokenizeBodies) {
  EXPECT_EQ(parse_tokenize_request(R"({"prompt":"x"})").prompt, "x");
  EXPECT_FALSE(
      parse_tokenize_request(R"({"prompt":"x","add_special_tokens":false})").add_special_tokens);
  EXPECT_TRUE(parse_tokenize_request(R"({"messages":[{"role":"user","content":"x"}]})").chat);
  EXPECT_THROW(parse_tokenize_request(R"({"prompt":1})"), ApiError);
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[3,4]})", kVocab), (std::vector<int32_t>{3, 4}));
  EXPECT_THROW(parse_detokenize_request(R"({"tokens":[999]})", kVocab), ApiError);
  EXPECT_THROW(parse_detokenize_request(R"({"tokens":"3"})", kVocab), ApiError);
}

TEST(ServerApi, ChatTemplatesRecognisedByText) {
  EXPECT_EQ(detect_chat_template("{% for m in messages %}<|im_start|>{{m.role}}"),
            ChatTemplate::chatml);
  EXPECT_EQ(detect_chat_template("<|start_header_id|>' + role + '<|end_header_id|>"),
            ChatTemplate::llama3);
  EXPECT_EQ(detect_chat_template("[INST] <<SYS>>\\n"), ChatTemplate::llama2);
  EXPECT_EQ(detect_chat_template("{{ '[INST] ' + message['content'] + ' [/INST]' }}"),
            ChatTemplate::mistral);
  EXPECT_EQ(detect_chat_template(""), ChatTemplate::plain);
  const std::vector<ChatMessage> msgs = {
      {"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}};
  EXPECT_EQ(render_chat(ChatTemplate::chatml, msgs),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>"
            "assistant\nA<|im_end|>\n<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(ChatTemplate::llama3, {{"user", "U"}}),
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>"
            "assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(ChatTemplate::llama2, msgs),
            "[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] V [/INST]");
  EXPECT_EQ(render_chat(ChatTemplate::mistral, msgs), "[INST] S\n\nU [/INST]A</s>[INST] V [/INST]");
  EXPECT_EQ(render_chat(ChatTemplate::plain, {{"user", "U"}}), "user: U\nassistant:");
  ChatTemplate t;
  EXPECT_TRUE(chat_template_from_name("llama3", t));
  EXPECT_EQ(t, ChatTemplate::llama3);
  EXPECT_FALSE(chat_template_from_name("jinja", t));
}

TEST(ServerApi, RateLimiterIsATokenBucket) {
  RateLimiter rl(2.0, 3.0);  // 2 requests/s, bursts of 3
  int64_t retry = 0;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(rl.allow("k", 10.0, retry)) << i;
  EXPECT_FALSE(rl.allow("k", 10.0, retry));
  EXPECT_EQ(retry, 1);
  EXPECT_TRUE(rl.allow("other", 10.0, retry));  // per key
  EXPECT_FALSE(rl.allow("k", 10.2, retry));     // 0.4 tokens back
  EXPECT_TRUE(rl.allow("k", 10.6, retry));      // 1.2 tokens
  EXPECT_FALSE(rl.allow("k", 10.6, retry));
  RateLimiter slow(0.1, 1.0);
  EXPECT_TRUE(slow.allow("k", 0, retry));
  EXPECT_FALSE(slow.allow("k", 0, retry));
  EXPECT_EQ(retry, 10);
}

TEST(ServerApi, SamplingIsSeededAndRespectsTopKAndTopP) {
  std::vector<float> logits(kVocab);
  for (int64_t i = 0; i < kVocab; ++i) logits[size_t(i)] = float(std::sin(double(i) * 1.7) * 3);
  const int32_t argmax = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  RequestSampling greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sample_logits(logits.data(), kVocab, greedy, 5), argmax);
  RequestSampling s;
  s.temperature = 1.0;
  s.seed = 9;
  std::set<int32_t> seen;
  for (int64_t t = 0; t < 200; ++t) {
    const int32_t a = sample_logits(logits.data(), kVocab, s, t);
    EXPECT_EQ(a, sample_logits(logits.data(), kVocab, s, t));  // reproducible
    seen.insert(a);
  }
  EXPECT_GT(seen.size(), 5u);  // it does sample
  s.top_k = 3;
  std::vector<int32_t> order(kVocab);
  for (int64_t i = 0; i < kVocab; ++i) order[size_t(i)] = int32_t(i);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  for (int64_t t = 0; t < 100; ++t) {
    const int32_t a = sample_logits(logits.data(), kVocab, s, t);
    EXPECT_TRUE(a == order[0] || a == order[1] || a == order[2]) << a;
  }
  s.top_k = 0;
  s.top_p = 1e-6;  // only the most likely token is left
  for (int64_t t = 0; t < 20; ++t) EXPECT_EQ(sample_logits(logits.data(), kVocab, s, t), argmax);
}

TEST(ServerApi, ServerTimingHeaderCarriesEveryStage) {
  StageTimes s;
  s.gateway_ms = 0.5;
  s.queue_ms = 1;
  s.tokenize_ms = 0.25;
  s.prefill_ms = 10;
  s.decode_ms = 20;
  s.detokenize_ms = 0.125;
  s.serialize_ms = 0.0625;
  s.total_ms = 31.9375;
  EXPECT_EQ(s.server_timing(),
            "gateway;dur=0.500, queue;dur=1.000, tokenize;dur=0.250, prefill;dur=10.000, "
            "decode;dur=20.000, detokenize;dur=0.125, serialize;dur=0.062, total;dur=31.938");
  EXPECT_EQ(s.to_json().size(), 8u);
  const auto t = llama_timings(4, 0, 8.0, 10, 20.0);
  EXPECT_DOUBLE_EQ(t["prompt_per_token_ms"].get<double>(), 2.0);
  EXPECT_EQ(t["cache_n"], 0);
  const auto cached = llama_timings(20, 16, 8.0, 10, 20.0);  // 16 of 20 from the prefix cache
  EXPECT_EQ(cached["prompt_n"], 4);
  EXPECT_EQ(cached["cache_n"], 16);
  EXPECT_DOUBLE_EQ(cached["prompt_per_token_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(t["predicted_per_second"].get<double>(), 500.0);
}

}  // namespace
}  // namespace latprof::server

namespace latprof::server {
namespace {

// In process: the server listens before the model is loaded and answers 503 until attach().
TEST(ServerInProcess, HealthIs503UntilTheModelIsLoaded) {
  ServerOptions o;
  o.port = 0;
  Server srv(o);
  srv.listen();
  ASSERT_GT(srv.port(), 0);
  test::RawResponse r = test::http_request(srv.port(), "GET", "/health", "");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(nlohmann::json::parse(r.body)["status"], "loading");
  r = test::post(srv.port(), "/v1/completions", {{"prompt", "ba"}});
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"], "loading");
  EXPECT_EQ(test::http_request(srv.port(), "GET", "/metrics", "").status, 200);
  ServeModelOptions mo;
  mo.model = "tiny";
  mo.threads = 1;
  mo.kv_cache_memory = "4MiB";
  ServingModel model(mo);
  srv.attach(model);
  EXPECT_EQ(srv.model_id(), "tiny");
  EXPECT_EQ(test::http_request(srv.port(), "GET", "/health", "").status, 200);
  // ignore_eos: sampled at the default temperature, the tiny model may draw its EOS first
  r = test::post(srv.port(), "/v1/completions",
                 {{"prompt", "ba"}, {"max_tokens", 3}, {"ignore_eos", true}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(nlohmann::json::parse(r.body)["usage"]["completion_tokens"], 3);
  srv.drain();
  EXPECT_EQ(test::connect_to(srv.port()), -1);  // closed
}

}  // namespace
}  // namespace latprof::server

namespace latprof::server {
namespace {

TEST(ServedRequest, HeldBackIsTheLongestSuffixThatMayStartAStop) {
  EXPECT_EQ(held_back("hello wor", {"world"}), 3u);
  EXPECT_EQ(held_back("hello w", {"world", "xyz"}), 1u);
  EXPECT_EQ(held_back("hello", {"world"}), 0u);
  EXPECT_EQ(held_back("abcab", {"abcabd"}), 5u);
  EXPECT_EQ(held_back("ab", {"b", "abc"}), 2u);  // a whole one-byte stop is never held back
  EXPECT_EQ(held_back("", {"x"}), 0u);
}

// The engine thread's side of a request, on the synthetic tokenizer (each token a word).
TEST(ServedRequest, StopStringsAcrossTokensEosAndTheStream) {
  const auto tok = make_synthetic_tokenizer(256);
  auto text_of = [&](int32_t id) { return tok->decode_token(id); };
  // Two tokens whose texts are not empty; a stop string spanning their boundary.
  const int32_t a = 10, b = 11, c = 12;
  const std::string A = text_of(a), B = text_of(b);
  ASSERT_GE(A.size(), 2u);
  ASSERT_GE(B.size(), 1u);
  {
    ServedRequest r(*tok);
    r.req.stream = true;
    r.req.stop = {A.substr(A.size() - 1) + B.substr(0, 1)};
    r.max_stop = 2;
    EXPECT_TRUE(r.take_token(a));
    ASSERT_EQ(r.deltas.size(), 1u);
    EXPECT_EQ(r.deltas[0].text, A.substr(0, A.size() - 1));  // its last byte may start the stop
    EXPECT_FALSE(r.take_token(b));                           // the stop string: ends here
    EXPECT_EQ(r.text, A.substr(0, A.size() - 1));
    EXPECT_EQ(r.deltas.size(), 1u);  // nothing of the stop string was ever sent
    r.end(false);
    EXPECT_EQ(r.finish_reason, "stop");
    EXPECT_EQ(r.n_tokens, 2);
  }
  {
    ServedRequest r(*tok);
    r.eos = tok->eos_id();
    ASSERT_GE(r.eos, 0);
    EXPECT_TRUE(r.take_token(c));
    EXPECT_FALSE(r.take_token(r.eos));
    EXPECT_EQ(r.text, text_of(c));  // EOS adds no text
    EXPECT_EQ(r.n_tokens, 2);       // but counts
    r.end(false);
    EXPECT_EQ(r.finish_reason, "stop");
  }
  {
    ServedRequest r(*tok);
    r.eos = tok->eos_id();
    r.req.ignore_eos = true;
    EXPECT_TRUE(r.take_token(r.eos));
    EXPECT_TRUE(r.take_token(c));
    r.end(false);
    EXPECT_EQ(r.finish_reason, "length");
    ServedRequest q(*tok);
    q.take_token(c);
    q.end(true);
    EXPECT_EQ(q.finish_reason, "abort");
  }
}

TEST(ServedRequest, StagesAddUpToTheTotal) {
  const auto tok = make_synthetic_tokenizer(256);
  ServedRequest r(*tok);
  r.t0 = 1;
  r.t_tok0 = 1.5;
  r.t_tok1 = 1.75;
  r.t_submit = 2;
  r.tl.first_scheduled_ms = 3;
  r.tl.token_ms = {10, 12, 15};
  r.detok_ms = 0.3;
  r.detok_last_ms = 0.1;
  r.t_end = 16;
  const StageTimes s = r.stage_times();
  EXPECT_DOUBLE_EQ(s.gateway_ms, 0.75);
  EXPECT_DOUBLE_EQ(s.tokenize_ms, 0.25);
  EXPECT_DOUBLE_EQ(s.queue_ms, 1);
  EXPECT_DOUBLE_EQ(s.prefill_ms, 7);
  EXPECT_DOUBLE_EQ(s.decode_ms, 5 - 0.2);
  EXPECT_DOUBLE_EQ(s.serialize_ms, 1 - 0.1);
  EXPECT_DOUBLE_EQ(s.total_ms, 15);
  EXPECT_NEAR(s.gateway_ms + s.tokenize_ms + s.queue_ms + s.prefill_ms + s.decode_ms +
                  s.detokenize_ms + s.serialize_ms,
              s.total_ms, 1e-12);
}

}  // namespace
}  // namespace latprof::server
