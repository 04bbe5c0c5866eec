#include "engine/block_pool.hpp"

#include <algorithm>
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
  ref_.assign(size_t(num_blocks), 0);
  entry_.assign(size_t(num_blocks), Entry{});
  prev_.assign(size_t(num_blocks), -1);
  next_.assign(size_t(num_blocks), -1);
  free_.reserve(size_t(num_blocks));
  // Block 0 on top of the stack: a fresh pool hands out blocks in increasing order.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

int32_t BlockPool::ref_count(int32_t block) const {
  LATPROF_ASSERT(block >= 0 && block < num_blocks(), "no block " + std::to_string(block));
  return ref_[size_t(block)];
}

bool BlockPool::is_cached(int32_t block) const {
  LATPROF_ASSERT(block >= 0 && block < num_blocks(), "no block " + std::to_string(block));
  return entry_[size_t(block)].cached;
}

bool BlockPool::allocate(int64_t n, std::vector<int32_t>& table) {
  LATPROF_ASSERT(n >= 0, "negative block count");
  if (n > num_free()) return false;
  for (int64_t i = 0; i < n; ++i) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      b = head_;  // the least recently released cached block
      lru_remove(b);
      evict(b);
    }
    LATPROF_ASSERT(ref_[size_t(b)] == 0, "allocated block " + std::to_string(b) + " is in use");
    ref_[size_t(b)] = 1;
    table.push_back(b);
  }
  return true;
}

void BlockPool::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int32_t b = *it;
    LATPROF_ASSERT(b >= 0 && b < num_blocks() && ref_[size_t(b)] > 0,
                   "block " + std::to_string(b) + " freed but not in use");
    if (--ref_[size_t(b)] > 0) continue;
    if (entry_[size_t(b)].cached)
      lru_push_back(b);
    else
      free_.push_back(b);
  }
  table.clear();
}

namespace {
// 64x64 -> 128-bit multiply folded to 64 bits (the mixing step of wyhash): every output bit
// depends on every input bit.
inline uint64_t mix(uint64_t a, uint64_t b) {
  const __uint128_t p = __uint128_t(a) * b;
  return uint64_t(p) ^ uint64_t(p >> 64);
}
constexpr uint64_t kP0 = 0xa0761d6478bd642full, kP1 = 0xe7037ed1a0b428dbull,
                   kP2 = 0x8ebc6af09c88c6e3ull;
}  // namespace

uint64_t BlockPool::block_hash(uint64_t parent_hash, const int32_t* tokens, int64_t n) {
  uint64_t h = mix(parent_hash ^ kP0, kP1 ^ uint64_t(n));
  int64_t i = 0;
  for (; i + 1 < n; i += 2) {
    const uint64_t a = uint64_t(uint32_t(tokens[i])), b = uint64_t(uint32_t(tokens[i + 1]));
    h = mix(h ^ kP1 ^ (a | (b << 32)), kP2 ^ uint64_t(i));
  }
  if (i < n) h = mix(h ^ kP1 ^ uint64_t(uint32_t(tokens[i])), kP2 ^ uint64_t(i));
  return mix(h ^ kP0, kP2);
}

int32_t BlockPool::lookup(uint64_t hash, uint64_t parent_hash, const int32_t* tokens) const {
  const auto it = cached_.find(hash);
  if (it == cached_.end()) return -1;
  const int32_t b = it->second;
  const Entry& e = entry_[size_t(b)];
  // A 64-bit hash can collide: a hit must also hold the same parent and the same tokens.
  if (e.parent_hash != parent_hash) return -1;
  const int32_t* have = tokens_.data() + int64_t(b) * block_size_;
  return std::equal(have, have + block_size_, tokens) ? b : -1;
}

void BlockPool::share(int32_t block, std::vector<int32_t>& table) {
  LATPROF_ASSERT(block >= 0 && block < num_blocks() && entry_[size_t(block)].cached,
                 "shared block " + std::to_string(block) + " is not cached");
  if (ref_[size_t(block)]++ == 0) lru_remove(block);
  table.push_back(block);
}

bool BlockPool::register_block(int32_t block, uint64_t hash, uint64_t parent_hash,
                               const int32_t* tokens) {
  LATPROF_ASSERT(block >= 0 && block < num_blocks() && ref_[size_t(block)] > 0,
                 "registered block " + std::to_string(block) + " is not in use");
  LATPROF_ASSERT(!entry_[size_t(block)].cached,
                 "block " + std::to_string(block) + " registered twice");
  if (cached_.count(hash)) return false;
  // Token storage is only made when caching is used: a pool without it pays nothing.
  if (tokens_.empty()) tokens_.assign(size_t(num_blocks() * block_size_), 0);
  std::copy(tokens, tokens + block_size_, tokens_.begin() + std::ptrdiff_t(block) * block_size_);
  entry_[size_t(block)] = {hash, parent_hash, true};
  cached_.emplace(hash, block);
  return true;
}

void BlockPool::evict(int32_t b) {
  Entry& e = entry_[size_t(b)];
  const auto it = cached_.find(e.hash);
  LATPROF_ASSERT(it != cached_.end() && it->second == b,
                 "cached block " + std::to_string(b) + " missing from the hash map");
  cached_.erase(it);
  e = Entry{};
}

void BlockPool::lru_push_back(int32_t b) {
  prev_[size_t(b)] = tail_;
  next_[size_t(b)] = -1;
  (tail_ >= 0 ? next_[size_t(tail_)] : head_) = b;
  tail_ = b;
  ++num_evictable_;
}

void BlockPool::lru_remove(int32_t b) {
  const int32_t p = prev_[size_t(b)], n = next_[size_t(b)];
  (p >= 0 ? next_[size_t(p)] : head_) = n;
  (n >= 0 ? prev_[size_t(n)] : tail_) = p;
  prev_[size_t(b)] = next_[size_t(b)] = -1;
  --num_evictable_;
}

}  // namespace latprof::engine
