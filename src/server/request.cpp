#include "server/request.hpp"

#include <algorithm>

namespace latprof::server {

size_t held_back(const std::string& text, const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& s : stops)
    for (size_t k = std::min(s.size() - 1, text.size()); k > held; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        held = k;
        break;
      }
  return held;
}

bool ServedRequest::take_token(int32_t token) {
  ++n_tokens;
  if (!req.ignore_eos && token == eos) {
    stopped = true;
    text += detok.finish();  // an incomplete character before EOS becomes U+FFFD
  } else {
    const std::string piece = detok.push(token);
    text += piece;
    if (!req.stop.empty()) {
      // A stop string may begin in what was held back before this piece.
      const size_t reach = piece.size() + max_stop;
      const size_t from = text.size() > reach ? text.size() - reach : 0;
      size_t cut = std::string::npos;
      for (const std::string& s : req.stop) cut = std::min(cut, text.find(s, from));
      if (cut != std::string::npos) {
        text.resize(cut);
        stopped = true;
      }
    }
  }
  if (req.stream) {
    const size_t ready = stopped ? text.size() : text.size() - held_back(text, req.stop);
    if (ready > committed) {
      deltas.push_back({text.substr(committed, ready - committed), n_tokens});
      committed = ready;
    }
  }
  return !stopped;
}

void ServedRequest::end(bool was_cancelled) {
  cancelled = was_cancelled;
  if (!cancelled && !stopped) text += detok.finish();
  if (req.stream && text.size() > committed) {
    deltas.push_back({text.substr(committed), n_tokens});
    committed = text.size();
  }
  finish_reason = reason_to_end(cancelled);
  finished = true;
}

StageTimes ServedRequest::stage_times() const {
  StageTimes s;
  const double first = tl.token_ms.front(), last = tl.token_ms.back();
  s.gateway_ms = (t_tok0 - t0) + (t_submit - t_tok1);
  s.tokenize_ms = t_tok1 - t_tok0;
  s.queue_ms = tl.first_scheduled_ms - t_submit;
  s.prefill_ms = first - tl.first_scheduled_ms;
  s.detokenize_ms = detok_ms;
  // Each token's own detokenization follows its stamp, before the next token's: decode holds
  // those of tokens 1..n-1, serialize begins after the last one's.
  s.decode_ms = (last - first) - (detok_ms - detok_last_ms);
  s.serialize_ms = t_end - last - detok_last_ms;
  s.total_ms = t_end - t0;
  return s;
}

}  // namespace latprof::server
