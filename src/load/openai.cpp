#include "load/openai.hpp"

#include "core/error.hpp"

namespace latprof::load {

Endpoint parse_endpoint(const std::string& text) {
  if (text == "completions") return Endpoint::completions;
  if (text == "chat") return Endpoint::chat;
  usage_error("--endpoint '" + text + "' is not an endpoint; use completions or chat");
}

const char* endpoint_path(Endpoint e) {
  return e == Endpoint::chat ? "/v1/chat/completions" : "/v1/completions";
}

std::string request_body(Endpoint e, const std::string& model, const Prompt& p, int64_t max_tokens,
                         bool stream, bool ignore_eos) {
  nlohmann::json j = {
      {"model", model}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream}};
  if (ignore_eos) j["ignore_eos"] = true;
  if (stream) j["stream_options"] = {{"include_usage", true}};
  if (e == Endpoint::chat) {
    j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", p.text}}});
  } else if (!p.token_ids.empty()) {
    j["prompt"] = p.token_ids;
  } else {
    j["prompt"] = p.text;
  }
  return j.dump();
}

namespace {

std::optional<int64_t> count_field(const nlohmann::json& usage, const char* key) {
  if (!usage.is_object()) return std::nullopt;
  const auto it = usage.find(key);
  if (it == usage.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

bool nonempty_string(const nlohmann::json& o, const char* key) {
  if (!o.is_object()) return false;
  const auto it = o.find(key);
  return it != o.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

}  // namespace

bool parse_chunk(const char* data, size_t n, Endpoint e, Chunk& out, std::string& why) {
  out = Chunk{};
  std::string_view s(data, n);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  if (s == "[DONE]") {
    out.done = true;
    return true;
  }
  nlohmann::json j = nlohmann::json::parse(s, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    why = "an event's data is not JSON: '" + std::string(s.substr(0, 80)) + "'";
    return false;
  }
  if (const auto it = j.find("error"); it != j.end()) {
    out.error = error_message_of(std::string(s));
    return true;
  }
  const auto choices = j.find("choices");
  const auto usage = j.find("usage");
  if ((choices == j.end() || !choices->is_array()) && usage == j.end()) {
    why = "an event has neither choices nor usage: '" + std::string(s.substr(0, 80)) + "'";
    return false;
  }
  if (choices != j.end() && choices->is_array() && !choices->empty()) {
    const nlohmann::json& c = (*choices)[0];
    if (e == Endpoint::chat) {
      const auto d = c.find("delta");
      const auto m = c.find("message");  // a non-streamed chat response
      out.content = (d != c.end() && (nonempty_string(*d, "content") ||
                                      nonempty_string(*d, "reasoning_content"))) ||
                    (m != c.end() && nonempty_string(*m, "content"));
    } else {
      out.content = nonempty_string(c, "text");
    }
  }
  if (usage != j.end()) {
    out.prompt_tokens = count_field(*usage, "prompt_tokens");
    out.completion_tokens = count_field(*usage, "completion_tokens");
    if (const auto d = usage->find("prompt_tokens_details"); d != usage->end() && d->is_object())
      out.cached_tokens = count_field(*d, "cached_tokens");
  }
  if (const auto it = j.find("latprof_timings"); it != j.end()) out.latprof_timings = *it;
  if (const auto it = j.find("timings"); it != j.end()) out.timings = *it;
  if (const auto it = j.find("metrics"); it != j.end()) out.metrics = *it;
  return true;
}

std::string error_message_of(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (const auto it = j.find("error"); it != j.end()) {
      if (it->is_string()) return it->get<std::string>();
      if (it->is_object() && it->contains("message") && (*it)["message"].is_string())
        return (*it)["message"].get<std::string>();
    }
    if (const auto it = j.find("detail"); it != j.end() && it->is_string())
      return it->get<std::string>();
    if (const auto it = j.find("message"); it != j.end() && it->is_string())
      return it->get<std::string>();
  }
  std::string s = body.substr(0, 200);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::vector<std::string> model_ids(const std::string& body) {
  std::vector<std::string> ids;
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array())
    return ids;
  for (const auto& m : j["data"])
    if (m.is_object() && m.contains("id") && m["id"].is_string())
      ids.push_back(m["id"].get<std::string>());
  return ids;
}

}  // namespace latprof::load
