#pragma once
// The OpenAI-compatible request bodies, parsed and validated without the model: every problem is
// an ApiError with the HTTP status and an OpenAI-style JSON body naming the field. Pure functions
// of the bytes (no I/O), so the fuzzer and the unit tests drive them directly.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/chat_template.hpp"
#include "server/serving_model.hpp"

namespace latprof::server {

// An error answer: {"error": {"message", "type", "param", "code"}} with `status`.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error", std::string code = "")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param, type, code;
  nlohmann::json body() const;
};

// At most this many stop strings per request, each at most kMaxStopBytes.
inline constexpr size_t kMaxStops = 16;
inline constexpr size_t kMaxStopBytes = 256;

struct GenerateRequest {
  bool chat = false;
  std::string model;  // "" when not given
  // Completions: text or token ids (prompt_ids_given); chat: the messages.
  std::string prompt_text;
  bool prompt_ids_given = false;
  std::vector<int32_t> prompt_ids;
  std::vector<ChatMessage> messages;
  std::optional<int64_t> max_tokens;  // completions: 16 when absent; chat: the rest of the context
  RequestSampling sampling;
  bool seed_given = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM): usage per chunk
};

// Parses a /v1/completions (chat = false) or /v1/chat/completions body. Token ids must be in
// [0, vocab). Unknown fields are ignored, as OpenAI's clients send many.
GenerateRequest parse_generate_request(const std::string& body, bool chat, int64_t vocab);

// /tokenize: {"prompt": str} or {"messages": [...]} (+ "add_special_tokens", default true);
// /detokenize: {"tokens": [ids]}.
struct TokenizeRequest {
  std::string prompt;
  std::vector<ChatMessage> messages;
  bool chat = false;
  bool add_special_tokens = true;
};
TokenizeRequest parse_tokenize_request(const std::string& body);
std::vector<int32_t> parse_detokenize_request(const std::string& body, int64_t vocab);

// Where each part of a served request's time went, in ms; the stages add up to total_ms
// (see README, "latprof serve").
struct StageTimes {
  double gateway_ms = 0, queue_ms = 0, tokenize_ms = 0, prefill_ms = 0, decode_ms = 0,
         detokenize_ms = 0, serialize_ms = 0, total_ms = 0;
  nlohmann::json to_json() const;
  std::string server_timing() const;  // the W3C Server-Timing header value
};

// llama.cpp's `timings` object: prompt_n counts the prompt tokens computed (prompt_tokens less
// the cache_n found in the prefix cache), as llama.cpp's server reports them.
nlohmann::json llama_timings(int64_t prompt_tokens, int64_t cache_n, double prompt_ms,
                             int64_t predicted_n, double predicted_ms);

}  // namespace latprof::server
