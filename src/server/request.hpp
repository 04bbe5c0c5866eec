#pragma once
// One served request in flight: what the engine thread does with each of its tokens
// (end-of-sequence, detokenization, stop strings, the text a stream may send yet) and the
// stamps its stage times are differences of. Written by the engine thread and read by the
// connection thread that answers it, under mu.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "model/detokenizer.hpp"
#include "server/api.hpp"

namespace latprof::server {

// The longest suffix of `text` that is a proper prefix of one of `stops`: text that may yet
// become a stop string and must be held back from a stream.
size_t held_back(const std::string& text, const std::vector<std::string>& stops);

struct ServedRequest {
  explicit ServedRequest(const Tokenizer& tok) : detok(tok) {}

  // ---- set by the connection thread before the request is handed to the engine ----
  int64_t id = 0;
  GenerateRequest req;
  std::string object_id;
  int64_t created = 0;
  int64_t prompt_tokens = 0;
  int64_t max_tokens = 0;
  int32_t eos = -1;     // the tokenizer's end-of-sequence id (-1: none)
  size_t max_stop = 0;  // longest stop string, bytes

  // ---- engine thread, under mu ----
  // Takes the next token: EOS (unless ignore_eos) ends the request with no text; otherwise its
  // text is appended and the text is cut at the first stop string, which ends it too. For a
  // stream, text no stop string can take back any more is queued in deltas. Returns false when
  // the request ends with this token.
  bool take_token(int32_t token);
  // The request left the engine: finished (the held-back tail of an incomplete character is
  // flushed) or cancelled. Sets finish_reason and finished.
  void end(bool was_cancelled);
  // The finish_reason end(was_cancelled) will set: "abort", "stop" or "length".
  const char* reason_to_end(bool was_cancelled) const {
    return was_cancelled ? "abort" : stopped ? "stop" : "length";
  }

  std::mutex mu;
  std::condition_variable cv;
  StreamingDetokenizer detok;
  std::string text;      // generated text so far (cut at a stop string)
  size_t committed = 0;  // text[0, committed) is queued or sent to the stream
  struct Delta {
    std::string text;
    int64_t tokens = 0;  // the request's tokens when it was queued (continuous usage)
  };
  std::deque<Delta> deltas;  // stream: text not yet written
  int64_t n_tokens = 0;
  bool stopped = false;  // EOS or a stop string
  bool finished = false, cancelled = false;
  bool scheduled = false;  // in a step yet (guarded by the server's lives_mu)
  std::string cancel_reason;
  std::string finish_reason;
  double detok_ms = 0, detok_last_ms = 0;  // the engine thread's work on its tokens
  engine::RequestTimeline tl;              // the engine's stamps, complete once finished

  // ---- connection thread's stamps (engine clock, ms) ----
  double t0 = 0;      // received
  double t_tok0 = 0;  // tokenization begins
  double t_tok1 = 0;  // ... ends
  double t_submit = 0;
  double t_end = 0;       // the response (or final chunk) serialized
  double write_ms = 0;    // stream: chunks serialized and written while the engine decoded
  bool answered = false;  // the response carried timings
  StageTimes stages;

  // The stages from the stamps (they add up to total_ms): see README, "latprof serve".
  StageTimes stage_times() const;
};

}  // namespace latprof::server
