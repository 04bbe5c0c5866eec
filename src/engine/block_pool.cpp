#include "engine/block_pool.hpp"

#include <limits>
#include <string>

#include "core/error.hpp"

namespace latprof::engine {

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size) : block_size_(block_size) {
  if (block_size < 1 || (block_size & (block_size - 1)) != 0)
    usage_error("--kv-block-size must be a power of two of at least 1 token (got " +
                std::to_string(block_size) + ")");
  if (num_blocks < 1 || num_blocks > std::numeric_limits<int32_t>::max())
    usage_error("the KV cache must hold between 1 and 2^31-1 blocks (got " +
                std::to_string(num_blocks) + "); change --kv-cache-memory or --kv-block-size");
  // KV rows are addressed as int32 slots (block * block_size + offset).
  if (num_blocks > std::numeric_limits<int32_t>::max() / block_size)
    usage_error("a KV cache of " + std::to_string(num_blocks) + " blocks of " +
                std::to_string(block_size) +
                " tokens exceeds 2^31-1 positions; give it less memory");
  in_use_.assign(size_t(num_blocks), false);
  free_.reserve(size_t(num_blocks));
  // Block 0 on top of the stack: a fresh pool hands out blocks in increasing order.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

bool BlockPool::allocate(int64_t n, std::vector<int32_t>& table) {
  LATPROF_ASSERT(n >= 0, "negative block count");
  if (n > num_free()) return false;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[size_t(b)] = true;
    table.push_back(b);
  }
  return true;
}

void BlockPool::release(std::vector<int32_t>& table) {
  for (int32_t b : table) {
    LATPROF_ASSERT(b >= 0 && b < num_blocks() && in_use_[size_t(b)],
                   "block " + std::to_string(b) + " freed but not in use");
    in_use_[size_t(b)] = false;
    free_.push_back(b);
  }
  table.clear();
}

}  // namespace latprof::engine
