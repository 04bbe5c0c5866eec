// libFuzzer target: latprof serve's request parsing. The first byte chooses the endpoint
// (completions, chat, tokenize, detokenize), the rest is the body. Any input must either parse
// into a request whose fields hold their documented ranges, or raise ApiError with a 4xx status
// and a JSON body; sanitizers catch everything else. Chat messages are also rendered with every
// template. Built by scripts/fuzz.sh.
#include <cmath>
#include <cstdlib>
#include <string>

#include "server/api.hpp"
#include "server/chat_template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace latprof::server;
  if (size == 0) return 0;
  constexpr int64_t kVocab = 32000;
  const int kind = data[0] % 4;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (kind <= 1) {
      const GenerateRequest r = parse_generate_request(body, kind == 1, kVocab);
      if (r.max_tokens && *r.max_tokens < 1) std::abort();
      if (!(r.sampling.temperature >= 0 && r.sampling.temperature <= 100)) std::abort();
      if (!(r.sampling.top_p > 0 && r.sampling.top_p <= 1) || r.sampling.top_k < 0) std::abort();
      if (r.stop.size() > kMaxStops) std::abort();
      for (const std::string& s : r.stop)
        if (s.empty() || s.size() > kMaxStopBytes) std::abort();
      for (int32_t id : r.prompt_ids)
        if (id < 0 || id >= kVocab) std::abort();
      if (!r.chat && !r.prompt_ids_given && r.prompt_text.empty()) std::abort();
      if (r.chat && r.messages.empty()) std::abort();
      for (ChatTemplate t : {ChatTemplate::plain, ChatTemplate::chatml, ChatTemplate::llama3,
                             ChatTemplate::llama2, ChatTemplate::mistral})
        (void)render_chat(t, r.messages);
      (void)detect_chat_template(body);
    } else if (kind == 2) {
      const TokenizeRequest r = parse_tokenize_request(body);
      if (r.chat && r.messages.empty()) std::abort();
    } else {
      for (int32_t id : parse_detokenize_request(body, kVocab))
        if (id < 0 || id >= kVocab) std::abort();
    }
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status > 499) std::abort();
    (void)e.body().dump();
  }
  return 0;
}
