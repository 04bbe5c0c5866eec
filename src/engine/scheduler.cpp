#include "engine/scheduler.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace latprof::engine {

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockPool& pool) : cfg_(cfg), pool_(pool) {
  if (cfg.max_batched_tokens < 1)
    usage_error("--max-batched-tokens must be at least 1 (got " +
                std::to_string(cfg.max_batched_tokens) + ")");
  if (cfg.max_seqs < 1)
    usage_error("--max-seqs must be at least 1 (got " + std::to_string(cfg.max_seqs) + ")");
  if (cfg.max_model_len < 2)
    usage_error("--max-model-len must be at least 2 tokens (got " +
                std::to_string(cfg.max_model_len) + ")");
}

void Scheduler::check_admissible(int64_t prompt_tokens, int64_t max_tokens) const {
  if (prompt_tokens < 1) usage_error("a request needs at least one prompt token");
  if (max_tokens < 1)
    usage_error("a request must generate at least one token (got " + std::to_string(max_tokens) +
                ")");
  // Checked without overflow: both are positive and max_model_len fits in int64.
  if (prompt_tokens > cfg_.max_model_len || max_tokens > cfg_.max_model_len - prompt_tokens)
    usage_error("a request of " + std::to_string(prompt_tokens) + " prompt + " +
                std::to_string(max_tokens) + " output tokens exceeds --max-model-len " +
                std::to_string(cfg_.max_model_len) + "; ask for fewer tokens");
  // Its last token is never written to the cache (it is sampled, not computed).
  const int64_t blocks = pool_.blocks_for(prompt_tokens + max_tokens - 1);
  if (blocks > pool_.num_blocks())
    usage_error("a request of " + std::to_string(prompt_tokens) + " + " +
                std::to_string(max_tokens) + " tokens needs " + std::to_string(blocks) +
                " KV blocks of " + std::to_string(pool_.block_size()) +
                " tokens, but the whole cache holds " + std::to_string(pool_.num_blocks()) +
                "; raise --kv-cache-memory or ask for fewer tokens");
}

void Scheduler::add(int64_t id, std::vector<int32_t> prompt, int64_t max_tokens) {
  check_admissible(int64_t(prompt.size()), max_tokens);
  LATPROF_ASSERT(!requests_.count(id), "request id " + std::to_string(id) + " added twice");
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  requests_.emplace(id, std::move(r));
  waiting_.push_back(id);
}

const Request& Scheduler::request(int64_t id) const {
  const auto it = requests_.find(id);
  LATPROF_ASSERT(it != requests_.end(), "no request " + std::to_string(id));
  return it->second;
}

void Scheduler::forget(int64_t id) {
  const auto it = requests_.find(id);
  if (it != requests_.end() && it->second.finished()) requests_.erase(it);
}

bool Scheduler::abort(int64_t id) {
  const auto it = requests_.find(id);
  if (it == requests_.end() || it->second.finished()) return false;
  Request& r = it->second;
  pool_.release(r.blocks);
  if (r.state == RequestState::running)
    running_.erase(std::find(running_.begin(), running_.end(), id));
  else
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  requests_.erase(it);
  return true;
}

bool Scheduler::reserve(Request& r, int64_t n) {
  const int64_t need = pool_.blocks_for(r.num_computed + n) - int64_t(r.blocks.size());
  return need <= 0 || pool_.allocate(need, r.blocks);
}

void Scheduler::preempt(Request& r) {
  pool_.release(r.blocks);
  r.registered_blocks = 0;
  r.num_computed = 0;
  r.prefilled = false;
  r.state = RequestState::waiting;
  ++r.preemptions;
  ++preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), r.id));
  waiting_.push_front(r.id);
}

const int32_t* Scheduler::block_tokens(const Request& r, int64_t i) {
  const int64_t bs = pool_.block_size();
  block_tokens_.resize(size_t(bs));
  for (int64_t k = 0; k < bs; ++k) block_tokens_[size_t(k)] = r.token_at(i * bs + k);
  return block_tokens_.data();
}

void Scheduler::hash_blocks(Request& r, int64_t n) {
  const int64_t bs = pool_.block_size();
  LATPROF_ASSERT(n * bs <= r.num_tokens(), "hashing a block that is not full");
  for (int64_t i = int64_t(r.block_hashes.size()); i < n; ++i) {
    const uint64_t parent = i > 0 ? r.block_hashes[size_t(i - 1)] : 0;
    r.block_hashes.push_back(BlockPool::block_hash(parent, block_tokens(r, i), bs));
  }
}

std::vector<int32_t> Scheduler::cached_prefix(Request& r) {
  const int64_t bs = pool_.block_size();
  // The last known token is always computed: its logits give the next token. A block holding it
  // is computed again (into a block of its own) rather than shared, so a shared block is never
  // written.
  const int64_t max_blocks = (r.num_tokens() - 1) / bs;
  hash_blocks(r, max_blocks);
  std::vector<int32_t> hits;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const uint64_t parent = i > 0 ? r.block_hashes[size_t(i - 1)] : 0;
    const int32_t b = pool_.lookup(r.block_hashes[size_t(i)], parent, block_tokens(r, i));
    if (b < 0) break;
    hits.push_back(b);
  }
  return hits;
}

void Scheduler::register_full_blocks(Request& r, int64_t computed) {
  const int64_t bs = pool_.block_size();
  const int64_t full = computed / bs;
  if (full <= r.registered_blocks) return;
  hash_blocks(r, full);
  for (int64_t i = r.registered_blocks; i < full; ++i) {
    const uint64_t parent = i > 0 ? r.block_hashes[size_t(i - 1)] : 0;
    // False when an equal block is cached already (e.g. the block of a request's last prompt
    // token, computed again): this one stays a private copy, freed when r releases it.
    pool_.register_block(r.blocks[size_t(i)], r.block_hashes[size_t(i)], parent,
                         block_tokens(r, i));
  }
  r.registered_blocks = full;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = cfg_.max_batched_tokens;
  auto add_seq = [&](Request& r, int64_t n) {
    ScheduledSeq s;
    s.request_id = r.id;
    s.start = r.num_computed;
    s.num_tokens = n;
    s.sample = r.num_computed + n == r.num_tokens();
    s.prefill = !r.prefilled;
    (s.prefill ? plan.prefill_tokens : plan.decode_tokens) += n;
    plan.seqs.push_back(s);
    budget -= n;
    // The blocks this step fills are registered now, as vLLM V1 does, so that a request planned
    // later in this step already shares them: a backend stores every KV row of a step before
    // any attention of it reads the cache (Backend::attention).
    if (cfg_.enable_prefix_caching) register_full_blocks(r, r.num_computed + n);
  };

  // Running requests first, oldest first: decodes (one token) and unfinished chunked prefills.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request& r = requests_.at(running_[i]);
    const int64_t n = std::min(r.num_tokens() - r.num_computed, budget);
    bool ok = reserve(r, n);
    while (!ok) {
      // Out of blocks: preempt the most recently started request (possibly r itself).
      Request& victim = requests_.at(running_.back());
      const bool self = victim.id == r.id;
      preempt(victim);
      plan.preempted.push_back(victim.id);
      if (self) break;
      ok = reserve(r, n);
    }
    if (!ok) break;  // r itself was preempted: nothing after it is running
    add_seq(r, n);
    ++i;
  }

  // Then waiting requests, first come first served, while the budget, the sequence cap and the
  // blocks allow; none are admitted in a step that had to preempt.
  while (plan.preempted.empty() && budget > 0 && !waiting_.empty() &&
         int64_t(running_.size()) < cfg_.max_seqs) {
    Request& r = requests_.at(waiting_.front());
    LATPROF_ASSERT(r.num_computed == 0 && r.blocks.empty() && r.registered_blocks == 0,
                   "waiting request " + std::to_string(r.id) + " holds KV blocks");
    // Its longest cached prefix is shared, not computed; blocks for the rest must be free apart
    // from the cached ones it takes out of the evictable queue.
    const std::vector<int32_t> hits =
        cfg_.enable_prefix_caching ? cached_prefix(r) : std::vector<int32_t>{};
    const int64_t hit_tokens = int64_t(hits.size()) * pool_.block_size();
    const int64_t n = std::min(r.num_tokens() - hit_tokens, budget);
    int64_t evictable_hits = 0;
    for (int32_t b : hits) evictable_hits += pool_.ref_count(b) == 0;
    const int64_t need = pool_.blocks_for(hit_tokens + n) - int64_t(hits.size());
    if (need > pool_.num_free() - evictable_hits) break;
    for (int32_t b : hits) pool_.share(b, r.blocks);
    r.num_computed = hit_tokens;
    r.registered_blocks = int64_t(hits.size());
    if (cfg_.enable_prefix_caching) {
      const bool first = r.preemptions == 0;
      (first ? prefix_stats_.requests : prefix_stats_.preempted_requests) += 1;
      (first ? prefix_stats_.queries : prefix_stats_.preempted_queries) += r.num_tokens();
      (first ? prefix_stats_.hits : prefix_stats_.preempted_hits) += hit_tokens;
      (first ? r.prefix_hit_tokens : r.recompute_hit_tokens) += hit_tokens;
    }
    const bool reserved = reserve(r, n);
    LATPROF_ASSERT(reserved, "blocks counted free could not be allocated");
    waiting_.pop_front();
    r.state = RequestState::running;
    running_.push_back(r.id);
    add_seq(r, n);
  }
  return plan;
}

std::vector<int64_t> Scheduler::complete(const StepPlan& plan,
                                         const std::vector<int32_t>& sampled) {
  std::vector<int64_t> done;
  size_t next = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    Request& r = requests_.at(s.request_id);
    LATPROF_ASSERT(r.state == RequestState::running && r.num_computed == s.start,
                   "step result for request " + std::to_string(r.id) + " out of order");
    r.num_computed += s.num_tokens;
    if (!s.sample) continue;
    LATPROF_ASSERT(next < sampled.size(), "fewer sampled tokens than sequences that sample");
    r.output.push_back(sampled[next++]);
    r.prefilled = true;
    if (int64_t(r.output.size()) >= r.max_tokens) {
      pool_.release(r.blocks);
      r.registered_blocks = 0;
      r.state = RequestState::finished;
      running_.erase(std::find(running_.begin(), running_.end(), r.id));
      done.push_back(r.id);
    }
  }
  LATPROF_ASSERT(next == sampled.size(), "more sampled tokens than sequences that sample");
  return done;
}

}  // namespace latprof::engine
