#pragma once
// The OpenAI-compatible API as vLLM, SGLang and llama.cpp's server implement it
// (../shared/SERVING.md): request bodies for /v1/completions and /v1/chat/completions, and the
// reading of one streamed chunk or a whole JSON response.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace latprof::load {

enum class Endpoint { completions, chat };
Endpoint parse_endpoint(const std::string& text);  // UsageError
const char* endpoint_path(Endpoint e);             // "/v1/completions"

// One request's prompt: token ids (completions) or text (chat, or a dataset's prompt text).
struct Prompt {
  std::vector<int32_t> token_ids;
  std::string text;
};

// A streamed request asking for exactly `max_tokens` (ignore_eos unless told not to, temperature
// 0) with usage in the last chunk.
std::string request_body(Endpoint e, const std::string& model, const Prompt& p, int64_t max_tokens,
                         bool stream, bool ignore_eos = true);

// What one chunk (an SSE event's data, or a whole non-streamed response) says.
struct Chunk {
  bool done = false;     // "[DONE]"
  bool content = false;  // carries generated text (choices[0].text or delta.content)
  // usage, when present: on vLLM's continuous usage stats in every chunk, cumulative
  std::optional<int64_t> prompt_tokens, completion_tokens;
  // usage.prompt_tokens_details.cached_tokens (OpenAI, vLLM, SGLang): prompt tokens the server
  // found in its prefix cache
  std::optional<int64_t> cached_tokens;
  nlohmann::json latprof_timings, timings, metrics;  // null where absent
  std::optional<std::string> error;                  // an {"error": {...}} event
};

// False (with `why`) when the data is not a JSON object of the API (malformed SSE).
bool parse_chunk(const char* data, size_t n, Endpoint e, Chunk& out, std::string& why);

// The message of an error body ({"error": {"message": ...}} or {"error": "..."} or {"detail"...}),
// or the first 200 bytes of the body.
std::string error_message_of(const std::string& body);

// The model ids of a GET /v1/models response, in order; UsageError-free: empty when unreadable.
std::vector<std::string> model_ids(const std::string& body);

}  // namespace latprof::load
