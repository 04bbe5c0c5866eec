#pragma once
// The paged KV cache's bookkeeping: a pool of fixed-size blocks (block_size token positions each,
// every layer's K and V for those positions) handed out to sequences as they grow and returned
// when they finish or are preempted. Block ids index the backend's KV storage; this class never
// touches that memory, so scheduling is testable without a model (as vLLM's KV cache manager).
//
// Blocks are reference counted so that sequences with a common prompt prefix can share them
// (automatic prefix caching, as vLLM does it). A full block can be registered under a hash
// chained over its parent block's hash and its own token ids (block_hash); later sequences find
// it with lookup() and take a reference with share(). A registered block whose last reference is
// released stays cached in an LRU queue of evictable blocks; allocate() takes never-cached free
// blocks first and evicts the least recently released cached ones (dropping their hash) only
// when those run out. The pool keeps each registered block's parent hash and token ids, and a
// lookup hits only when both match, so a collision of block hashes never aliases two blocks
// (only two different prefixes with equal 64-bit chain hashes, then equal tokens, could). A pool
// on which nothing is registered behaves exactly as a pool without caching.
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace latprof::engine {

class BlockPool {
 public:
  // num_blocks >= 1; block_size a power of two >= 1 (checked: UsageError).
  BlockPool(int64_t num_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return int64_t(ref_.size()); }
  // Blocks an allocation can take: never-cached free blocks plus cached ones nobody references.
  int64_t num_free() const { return int64_t(free_.size()) + num_evictable_; }
  // Blocks referenced by at least one sequence.
  int64_t num_used() const { return num_blocks() - num_free(); }
  // Fraction of blocks referenced by a sequence, 0..1 (vLLM's kv_cache_usage_perc: cached blocks
  // that nobody references do not count).
  double usage() const { return double(num_used()) / double(num_blocks()); }
  // Registered blocks (referenced or evictable), and those of them nobody references.
  int64_t num_cached() const { return int64_t(cached_.size()); }
  int64_t num_evictable() const { return num_evictable_; }
  int32_t ref_count(int32_t block) const;
  bool is_cached(int32_t block) const;  // registered under a hash (referenced or evictable)

  // Blocks that hold `tokens` positions.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Appends n blocks (each with one reference) to `table` and returns true, or changes nothing
  // and returns false when fewer than n are free (num_free()). Cached blocks it takes are evicted.
  bool allocate(int64_t n, std::vector<int32_t>& table);
  // Drops one reference to every block of `table` (last block first, so that a sequence's tail
  // is evicted before its head) and clears it. A block whose count reaches 0 becomes free, or
  // evictable when it is registered. Releasing a block nobody references is a logic error (a
  // double free in the scheduler).
  void release(std::vector<int32_t>& table);

  // --- Prefix caching ---
  // The hash of a full block: `tokens` (block_size ids) chained over its parent's hash (0 for the
  // first block of a sequence). A 64-bit mix of every token with the parent, so equal tokens
  // under different prefixes hash apart.
  static uint64_t block_hash(uint64_t parent_hash, const int32_t* tokens, int64_t n);
  // The block registered under `hash` for these parent hash and tokens, or -1.
  int32_t lookup(uint64_t hash, uint64_t parent_hash, const int32_t* tokens) const;
  // Takes one more reference to a registered block found by lookup() (out of the evictable queue
  // when it was there). Appends it to `table`.
  void share(int32_t block, std::vector<int32_t>& table);
  // Registers `block` (referenced, its block_size positions computed) as holding `tokens` after
  // the prefix hashed `parent_hash`. Returns false and changes nothing when another block is
  // already registered under `hash` (this one then stays a private copy); registering a block
  // twice is a logic error.
  bool register_block(int32_t block, uint64_t hash, uint64_t parent_hash, const int32_t* tokens);

 private:
  struct Entry {
    uint64_t hash = 0, parent_hash = 0;
    bool cached = false;
  };
  void lru_push_back(int32_t b);
  void lru_remove(int32_t b);
  void evict(int32_t b);

  int64_t block_size_;
  std::vector<int32_t> ref_;   // references per block
  std::vector<int32_t> free_;  // never-cached free blocks, a stack: the last freed is reused first
  std::vector<Entry> entry_;   // per block: its registration
  std::vector<int32_t> tokens_;  // [num_blocks, block_size] token ids of registered blocks
  std::unordered_map<uint64_t, int32_t> cached_;  // hash -> registered block
  // Evictable blocks (registered, no reference), a doubly linked list through these arrays, least
  // recently released at the head.
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;
  int64_t num_evictable_ = 0;
};

}  // namespace latprof::engine
