#include "server/api.hpp"

#include <cmath>
#include <cstdio>

namespace latprof::server {

using nlohmann::json;

json ApiError::body() const {
  json e = {{"message", what()}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

json parse_body(const std::string& body) {
  if (body.empty()) bad("", "the request body is empty; send a JSON object");
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) bad("", "the request body is not valid JSON");
  if (!j.is_object()) bad("", "the request body must be a JSON object");
  return j;
}

// A field that is absent or null counts as not given.
const json* field(const json& j, const char* name) {
  const auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& v, const char* name) {
  if (!v.is_number()) bad(name, std::string("'") + name + "' must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) bad(name, std::string("'") + name + "' must be finite");
  return d;
}

int64_t integer(const json& v, const char* name) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned() || v.is_number_float()) {
    const double d = v.get<double>();
    if (v.is_number_float() && d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
    if (v.is_number_unsigned()) bad(name, std::string("'") + name + "' is out of range");
  }
  bad(name, std::string("'") + name + "' must be an integer");
}

bool boolean(const json& v, const char* name) {
  if (!v.is_boolean()) bad(name, std::string("'") + name + "' must be true or false");
  return v.get<bool>();
}

std::vector<int32_t> token_ids(const json& v, const char* name, int64_t vocab) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& t : v) {
    if (!t.is_number_integer())
      bad(name, std::string("'") + name + "' must be a list of integer token ids");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= vocab)
      bad(name, "token id " + std::to_string(id) + " in '" + name +
                    "' is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    ids.push_back(int32_t(id));
  }
  return ids;
}

std::string message_content(const json& c, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  if (!c.is_array()) bad(where, "'" + where + "' must be a string or a list of text parts");
  // OpenAI's content parts: text parts are joined; any other kind is refused.
  std::string out;
  for (const json& part : c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      bad(where, "'" + where + "' parts must be {\"type\": \"text\", \"text\": ...}");
    out += part["text"].get<std::string>();
  }
  return out;
}

std::vector<ChatMessage> messages_of(const json& j) {
  const json* m = field(j, "messages");
  if (!m) bad("messages", "'messages' is required");
  if (!m->is_array() || m->empty()) bad("messages", "'messages' must be a non-empty list");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& e = (*m)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!e.is_object()) bad(where, "'" + where + "' must be an object with role and content");
    const json* role = field(e, "role");
    if (!role || !role->is_string()) bad(where + ".role", "'" + where + ".role' must be a string");
    out.push_back({role->get<std::string>(), message_content(e.value("content", json()), i)});
  }
  return out;
}

}  // namespace

GenerateRequest parse_generate_request(const std::string& body, bool chat, int64_t vocab) {
  const json j = parse_body(body);
  GenerateRequest r;
  r.chat = chat;
  if (const json* v = field(j, "model")) {
    if (!v->is_string()) bad("model", "'model' must be a string");
    r.model = v->get<std::string>();
  }
  if (chat) {
    r.messages = messages_of(j);
  } else {
    const json* p = field(j, "prompt");
    if (!p) bad("prompt", "'prompt' is required");
    // A string, a list of token ids, or a batch of one of either.
    const json* one = p;
    if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
      if (p->size() != 1)
        bad("prompt", "one prompt per request: 'prompt' holds " + std::to_string(p->size()));
      one = &(*p)[0];
    }
    if (one->is_string()) {
      r.prompt_text = one->get<std::string>();
      if (r.prompt_text.empty()) bad("prompt", "'prompt' is empty");
    } else if (one->is_array()) {
      if (one->empty()) bad("prompt", "'prompt' is an empty list of token ids");
      r.prompt_ids = token_ids(*one, "prompt", vocab);
      r.prompt_ids_given = true;
    } else {
      bad("prompt", "'prompt' must be a string or a list of token ids");
    }
  }
  const json* mt = field(j, "max_tokens");
  if (!mt && chat) mt = field(j, "max_completion_tokens");
  if (mt) {
    const int64_t n = integer(*mt, "max_tokens");
    if (n < 1) bad("max_tokens", "'max_tokens' must be at least 1 (got " + std::to_string(n) + ")");
    r.max_tokens = n;
  }
  if (const json* v = field(j, "n"); v && integer(*v, "n") != 1)
    bad("n", "'n' must be 1: one choice per request");
  if (const json* v = field(j, "best_of"); v && integer(*v, "best_of") != 1)
    bad("best_of", "'best_of' must be 1");
  if (const json* v = field(j, "temperature")) {
    r.sampling.temperature = number(*v, "temperature");
    if (r.sampling.temperature < 0 || r.sampling.temperature > 100)
      bad("temperature", "'temperature' must be from 0 (greedy) to 100");
  }
  if (const json* v = field(j, "top_p")) {
    r.sampling.top_p = number(*v, "top_p");
    if (!(r.sampling.top_p > 0 && r.sampling.top_p <= 1)) bad("top_p", "'top_p' must be in (0, 1]");
  }
  if (const json* v = field(j, "top_k")) {
    const int64_t k = integer(*v, "top_k");
    if (k < -1) bad("top_k", "'top_k' must be -1 or 0 (the whole vocabulary) or a positive count");
    r.sampling.top_k = k < 0 ? 0 : k;
  }
  if (const json* v = field(j, "seed")) {
    r.sampling.seed = uint64_t(integer(*v, "seed"));
    r.seed_given = true;
  }
  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const json& s : *v) {
        if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or a list of strings");
    }
    if (r.stop.size() > kMaxStops)
      bad("stop", "at most " + std::to_string(kMaxStops) + " stop strings");
    for (const std::string& s : r.stop)
      if (s.empty() || s.size() > kMaxStopBytes)
        bad("stop", "each stop string must be 1 to " + std::to_string(kMaxStopBytes) + " bytes");
  }
  if (const json* v = field(j, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (const json* v = field(j, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (const json* u = field(*v, "include_usage"))
      r.include_usage = boolean(*u, "stream_options.include_usage");
    if (const json* u = field(*v, "continuous_usage_stats"))
      r.continuous_usage = boolean(*u, "stream_options.continuous_usage_stats");
  }
  return r;
}

TokenizeRequest parse_tokenize_request(const std::string& body) {
  const json j = parse_body(body);
  TokenizeRequest r;
  if (field(j, "messages")) {
    r.chat = true;
    r.messages = messages_of(j);
  } else {
    const json* p = field(j, "prompt");
    if (!p || !p->is_string()) bad("prompt", "'prompt' (a string) or 'messages' is required");
    r.prompt = p->get<std::string>();
  }
  if (const json* v = field(j, "add_special_tokens"))
    r.add_special_tokens = boolean(*v, "add_special_tokens");
  return r;
}

std::vector<int32_t> parse_detokenize_request(const std::string& body, int64_t vocab) {
  const json j = parse_body(body);
  const json* t = field(j, "tokens");
  if (!t || !t->is_array()) bad("tokens", "'tokens' (a list of token ids) is required");
  return token_ids(*t, "tokens", vocab);
}

json StageTimes::to_json() const {
  return {{"gateway_ms", gateway_ms},     {"queue_ms", queue_ms},
          {"tokenize_ms", tokenize_ms},   {"prefill_ms", prefill_ms},
          {"decode_ms", decode_ms},       {"detokenize_ms", detokenize_ms},
          {"serialize_ms", serialize_ms}, {"total_ms", total_ms}};
}

std::string StageTimes::server_timing() const {
  const std::pair<const char*, double> parts[] = {
      {"gateway", gateway_ms},     {"queue", queue_ms},   {"tokenize", tokenize_ms},
      {"prefill", prefill_ms},     {"decode", decode_ms}, {"detokenize", detokenize_ms},
      {"serialize", serialize_ms}, {"total", total_ms}};
  std::string out;
  char buf[64];
  for (const auto& [name, ms] : parts) {
    std::snprintf(buf, sizeof buf, "%s%s;dur=%.3f", out.empty() ? "" : ", ", name, ms);
    out += buf;
  }
  return out;
}

json llama_timings(int64_t prompt_tokens, int64_t cache_n, double prompt_ms, int64_t predicted_n,
                   double predicted_ms) {
  // As llama.cpp's server: prompt_n counts the prompt tokens computed, cache_n those reused.
  const int64_t prompt_n = prompt_tokens - cache_n;
  auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / double(n) : 0.0; };
  auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1e3 * double(n) / ms : 0.0; };
  return {{"cache_n", cache_n},
          {"prompt_n", prompt_n},
          {"prompt_ms", prompt_ms},
          {"prompt_per_token_ms", per_token(prompt_ms, prompt_n)},
          {"prompt_per_second", per_second(prompt_ms, prompt_n)},
          {"predicted_n", predicted_n},
          {"predicted_ms", predicted_ms},
          {"predicted_per_token_ms", per_token(predicted_ms, predicted_n)},
          {"predicted_per_second", per_second(predicted_ms, predicted_n)}};
}

}  // namespace latprof::server
