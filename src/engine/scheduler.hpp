#pragma once
// The iteration-level scheduler of the continuous-batching engine (Orca's iteration scheduling,
// vLLM V1's policy). Each step it hands out a token budget (max_batched_tokens) over at most
// max_seqs sequences: running requests first, in the order they started (a decode is one token,
// a partial prefill the rest of its prompt up to the budget left), then waiting requests, first
// come first served, as chunked prefills into what is left. When the block pool cannot hold a
// running request's next tokens, the most recently started request is preempted: its blocks are
// freed and it goes back to the head of the queue, to be recomputed (prompt and the tokens it
// had generated) when it is scheduled again. A request that could never fit is refused when it
// is added, so nothing is preempted forever.
//
// With prefix caching on (vLLM's automatic prefix caching), a request scheduled from the queue
// (first time or after a preemption) starts after the longest run of its leading full blocks
// found in the pool's cache (a hash chain over full blocks): it shares those blocks and computes
// only the rest, always at least its last known token, whose logits give its next token. Every
// full block a step fills (prompt or generated tokens) is registered when the step is planned,
// as vLLM V1 does: a request planned after it in the same step already shares it.
//
// The scheduler knows token ids and counts, never timings or the model: schedule() returns a
// plain StepPlan that a model runner executes, and complete() takes the tokens it sampled.
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "engine/block_pool.hpp"

namespace latprof::engine {

struct SchedulerConfig {
  int64_t max_batched_tokens = 512;    // tokens per step, prefill and decode together
  int64_t max_seqs = 256;              // sequences per step
  int64_t max_model_len = 4096;        // prompt + output tokens of one request
  bool enable_prefix_caching = false;  // share cached full blocks of common prefixes
};

// Prefix cache lookups, in tokens (vLLM's prefix_cache_queries / prefix_cache_hits): each time a
// request is scheduled from the queue its known tokens are queried and the tokens it found cached
// are hits. Lookups of requests rescheduled after a preemption are counted apart.
struct PrefixCacheStats {
  int64_t requests = 0, queries = 0, hits = 0;  // first scheduling of each request
  int64_t preempted_requests = 0, preempted_queries = 0, preempted_hits = 0;  // recomputes
};

enum class RequestState { waiting, running, finished };

struct Request {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  int64_t max_tokens = 1;  // tokens to generate (EOS is not special here)
  std::vector<int32_t> output;
  int64_t num_computed = 0;     // tokens whose KV is in the cache
  std::vector<int32_t> blocks;  // block table: position p is in blocks[p / block_size]
  RequestState state = RequestState::waiting;
  bool prefilled = false;  // every known token computed once since it (re)started: decoding
  int64_t preemptions = 0;
  // Prefix caching: prompt tokens found in the cache when first scheduled (not computed), and
  // the known tokens found when rescheduled after preemptions (summed over them).
  int64_t prefix_hit_tokens = 0;
  int64_t recompute_hit_tokens = 0;
  std::vector<uint64_t> block_hashes;  // hash chain of its full blocks of known tokens so far
  int64_t registered_blocks = 0;       // leading blocks already shared from or offered to the cache

  int64_t num_tokens() const { return int64_t(prompt.size() + output.size()); }
  int32_t token_at(int64_t pos) const {
    return pos < int64_t(prompt.size()) ? prompt[size_t(pos)]
                                        : output[size_t(pos - int64_t(prompt.size()))];
  }
  bool finished() const { return state == RequestState::finished; }
};

// One sequence's share of a step: positions [start, start + num_tokens) are computed; when
// `sample` is set, the logits of the last one give the request's next token.
struct ScheduledSeq {
  int64_t request_id = 0;
  int64_t start = 0;
  int64_t num_tokens = 0;
  bool sample = false;
  bool prefill = false;  // the tokens come from the prompt (or a recompute), not one decode
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  std::vector<int64_t> preempted;  // requests preempted while planning this step
  int64_t total_tokens() const { return prefill_tokens + decode_tokens; }
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, BlockPool& pool);

  // Queues a request; throws UsageError when it can never run (empty prompt, no tokens to
  // generate, longer than max_model_len, more blocks than the whole pool).
  void add(int64_t id, std::vector<int32_t> prompt, int64_t max_tokens);
  // Throws UsageError naming the reason when such a request could never run; nothing is queued.
  void check_admissible(int64_t prompt_tokens, int64_t max_tokens) const;

  StepPlan schedule();
  // The runner executed `plan`; `sampled[i]` is the token of the i-th seq with sample set (in
  // plan order). Returns the ids of requests that finished with this step (their blocks freed).
  std::vector<int64_t> complete(const StepPlan& plan, const std::vector<int32_t>& sampled);

  const Request& request(int64_t id) const;
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  int64_t num_running() const { return int64_t(running_.size()); }
  int64_t num_waiting() const { return int64_t(waiting_.size()); }
  int64_t preemptions() const { return preemptions_; }
  const PrefixCacheStats& prefix_cache_stats() const { return prefix_stats_; }
  const BlockPool& pool() const { return pool_; }
  const SchedulerConfig& config() const { return cfg_; }
  // Drops finished requests' records (they keep no blocks).
  void forget(int64_t id);
  // Drops a waiting or running request that has not finished (cancelled, or stopped early at
  // EOS or a stop string): its blocks return to the pool and its record goes. Only between
  // steps (after complete()). Returns false when the id is unknown or already finished.
  bool abort(int64_t id);

 private:
  // Gives r blocks for positions up to num_computed + n; false when the pool has too few.
  bool reserve(Request& r, int64_t n);
  void preempt(Request& r);
  // Prefix caching: extends r.block_hashes to its first n full blocks; the cached blocks of its
  // longest cached prefix (never its last known token); registers its full blocks of the first
  // `computed` positions.
  void hash_blocks(Request& r, int64_t n);
  const int32_t* block_tokens(const Request& r, int64_t i);  // block i's ids (in a scratch)
  std::vector<int32_t> cached_prefix(Request& r);
  void register_full_blocks(Request& r, int64_t computed);

  SchedulerConfig cfg_;
  BlockPool& pool_;
  std::map<int64_t, Request> requests_;
  std::vector<int64_t> running_;  // in the order they (last) started
  std::deque<int64_t> waiting_;   // preempted requests go back to the front
  int64_t preemptions_ = 0;
  PrefixCacheStats prefix_stats_;
  std::vector<int32_t> block_tokens_;  // scratch: one block's token ids
};

}  // namespace latprof::engine
