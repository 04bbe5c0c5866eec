#pragma once
// The paged KV cache's bookkeeping: a pool of fixed-size blocks (block_size token positions each,
// every layer's K and V for those positions) handed out to sequences as they grow and returned
// when they finish or are preempted. Block ids index the backend's KV storage; this class never
// touches that memory, so scheduling is testable without a model (as vLLM's KV cache manager).
#include <cstdint>
#include <vector>

namespace latprof::engine {

class BlockPool {
 public:
  // num_blocks >= 1; block_size a power of two >= 1 (checked: UsageError).
  BlockPool(int64_t num_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return int64_t(in_use_.size()); }
  int64_t num_free() const { return int64_t(free_.size()); }
  int64_t num_used() const { return num_blocks() - num_free(); }
  // Fraction of blocks in use, 0..1 (vLLM's kv_cache_usage_perc).
  double usage() const { return double(num_used()) / double(num_blocks()); }

  // Blocks that hold `tokens` positions.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Appends n blocks to `table` and returns true, or changes nothing and returns false when
  // fewer than n are free.
  bool allocate(int64_t n, std::vector<int32_t>& table);
  // Returns every block of `table` to the pool and clears it. Freeing a block that is not in use
  // is a logic error (a double free in the scheduler).
  void release(std::vector<int32_t>& table);

 private:
  int64_t block_size_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  std::vector<bool> in_use_;
};

}  // namespace latprof::engine
