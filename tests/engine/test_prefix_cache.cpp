// Automatic prefix caching: the block pool's reference counts, hash chain, LRU eviction and
// collision safety; the scheduler sharing cached prefixes (first scheduling and recompute after
// preemption) on a fake model; and a real tiny model whose logits and greedy tokens are the
// same with the cache on and off.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "backend/cpu/cpu_backend.hpp"
#include "core/error.hpp"
#include "engine/block_pool.hpp"
#include "engine/engine.hpp"
#include "engine/scheduler.hpp"
#include "model/open.hpp"
#include "runner/model.hpp"
#include "runner/model_runner.hpp"
#include "support/logit_recorder.hpp"

namespace latprof::engine {
namespace {

// ---------------------------------------------------------------- block pool

std::vector<int32_t> tokens(int64_t n, int32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t((seed * 7919 + i * 31) % 32000);
  return t;
}

// Registers the blocks of `table` as the chain of `toks` (block_size tokens each); returns the
// hashes.
std::vector<uint64_t> register_chain(BlockPool& pool, const std::vector<int32_t>& table,
                                     const std::vector<int32_t>& toks) {
  std::vector<uint64_t> h;
  const int64_t bs = pool.block_size();
  for (size_t i = 0; i < table.size(); ++i) {
    const uint64_t parent = i ? h.back() : 0;
    h.push_back(BlockPool::block_hash(parent, toks.data() + int64_t(i) * bs, bs));
    EXPECT_TRUE(pool.register_block(table[i], h.back(), parent, toks.data() + int64_t(i) * bs));
  }
  return h;
}

TEST(PrefixBlockPool, ReferenceCountsAndUsage) {
  BlockPool pool(4, 4);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));  // a fresh pool hands out blocks in order
  const auto t = tokens(12, 1);
  const auto h = register_chain(pool, a, t);
  EXPECT_EQ(pool.num_cached(), 3);
  // A second sequence shares the first two blocks.
  for (int i = 0; i < 2; ++i) {
    const int32_t blk = pool.lookup(h[size_t(i)], i ? h[size_t(i) - 1] : 0, t.data() + i * 4);
    ASSERT_EQ(blk, a[size_t(i)]);
    pool.share(blk, b);
  }
  EXPECT_EQ(pool.ref_count(0), 2);
  EXPECT_EQ(pool.ref_count(1), 2);
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.75);  // shared blocks count once
  pool.release(a);
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.ref_count(2), 0);
  // Block 2 is cached but referenced by nobody: free for allocation, not in use.
  EXPECT_EQ(pool.num_evictable(), 1);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.5);
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  EXPECT_EQ(pool.num_cached(), 3);  // still cached, all evictable
  EXPECT_EQ(pool.num_evictable(), 3);
  // Releasing once more is a double free.
  std::vector<int32_t> again{0};
  EXPECT_THROW(pool.release(again), std::logic_error);
  // Sharing or registering blocks in the wrong state are logic errors too.
  std::vector<int32_t> c;
  EXPECT_THROW(pool.share(3, c), std::logic_error);                        // never cached
  EXPECT_THROW(pool.register_block(3, 1, 0, t.data()), std::logic_error);  // nobody holds it
}

TEST(PrefixBlockPool, HashChainSeparatesEqualTokensUnderDifferentParents) {
  BlockPool pool(8, 4);
  const auto x = tokens(4, 1), y = tokens(4, 2), same = tokens(4, 3);
  // The same block of tokens after two different first blocks.
  std::vector<int32_t> first{x[0], x[1], x[2], x[3], same[0], same[1], same[2], same[3]};
  std::vector<int32_t> second{y[0], y[1], y[2], y[3], same[0], same[1], same[2], same[3]};
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.allocate(2, a));
  const auto h = register_chain(pool, a, first);
  const uint64_t hy = BlockPool::block_hash(0, y.data(), 4);
  const uint64_t h_same_after_y = BlockPool::block_hash(hy, same.data(), 4);
  EXPECT_NE(h_same_after_y, h[1]);
  EXPECT_EQ(BlockPool::block_hash(h[0], same.data(), 4), h[1]);  // deterministic
  EXPECT_EQ(pool.lookup(hy, 0, y.data()), -1);
  EXPECT_EQ(pool.lookup(h_same_after_y, hy, second.data() + 4), -1);
  EXPECT_EQ(pool.lookup(h[1], h[0], first.data() + 4), a[1]);
  // One token different anywhere in a block, or the order of two tokens, changes its hash.
  std::vector<int32_t> z = x;
  z[3] += 1;
  EXPECT_NE(BlockPool::block_hash(0, z.data(), 4), h[0]);
  std::swap(z[0], z[1]);
  z[3] -= 1;
  EXPECT_NE(BlockPool::block_hash(0, z.data(), 4), h[0]);
}

TEST(PrefixBlockPool, HashesOfNearbyBlocksAreDistinct) {
  // Blocks one token apart (every position, 4096 values) and equal blocks under 4096 parents:
  // a weak mix (a token ignored, a sum of tokens, a parent dropped) collides here.
  std::set<uint64_t> seen;
  std::vector<int32_t> t(16, 7);
  for (int64_t pos = 0; pos < 16; ++pos)
    for (int32_t v = 0; v < 4096; ++v) {
      std::vector<int32_t> u = t;
      u[size_t(pos)] = v;
      seen.insert(BlockPool::block_hash(0, u.data(), 16));
    }
  EXPECT_EQ(seen.size(), size_t(16 * 4096 - 15));  // the all-7 block is counted once per pos
  seen.clear();
  for (uint64_t parent = 0; parent < 4096; ++parent)
    seen.insert(BlockPool::block_hash(parent, t.data(), 16));
  EXPECT_EQ(seen.size(), 4096u);
  // Swapping two tokens changes the hash.
  std::vector<int32_t> a{1, 2, 3, 4}, b{2, 1, 3, 4};
  EXPECT_NE(BlockPool::block_hash(0, a.data(), 4), BlockPool::block_hash(0, b.data(), 4));
}

TEST(PrefixBlockPool, EvictsLeastRecentlyReleasedTailFirstAndOnlyWhenNeeded) {
  BlockPool pool(6, 2);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(2, a));  // blocks 0, 1
  ASSERT_TRUE(pool.allocate(2, b));  // blocks 2, 3
  const auto ta = tokens(4, 10), tb = tokens(4, 20);
  const auto ha = register_chain(pool, a, ta);
  const auto hb = register_chain(pool, b, tb);
  pool.release(a);  // released first: evicted first, its tail block (1) before its head (0)
  pool.release(b);
  EXPECT_EQ(pool.num_evictable(), 4);
  // Never-cached free blocks (4, 5) go before any cached one is evicted.
  std::vector<int32_t> c;
  ASSERT_TRUE(pool.allocate(2, c));
  EXPECT_EQ(c, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(pool.num_cached(), 4);
  // Taking a cached block back out of the queue protects it from eviction.
  std::vector<int32_t> d;
  pool.share(pool.lookup(ha[0], 0, ta.data()), d);
  ASSERT_EQ(d, (std::vector<int32_t>{0}));
  std::vector<int32_t> e;
  ASSERT_TRUE(pool.allocate(2, e));
  EXPECT_EQ(e, (std::vector<int32_t>{1, 3}));  // a's tail, then b's tail
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.lookup(ha[1], ha[0], ta.data() + 2), -1) << "evicted block still found";
  EXPECT_EQ(pool.lookup(hb[1], hb[0], tb.data() + 2), -1);
  EXPECT_EQ(pool.lookup(ha[0], 0, ta.data()), 0);
  EXPECT_EQ(pool.lookup(hb[0], 0, tb.data()), 2);
  ASSERT_TRUE(pool.allocate(1, e));
  EXPECT_EQ(e.back(), 2);
  EXPECT_FALSE(pool.allocate(1, e));  // all or nothing, as without caching
  EXPECT_EQ(pool.num_free(), 0);
  // An evicted block can be registered again under new tokens.
  const auto tn = tokens(2, 30);
  EXPECT_TRUE(pool.register_block(1, BlockPool::block_hash(0, tn.data(), 2), 0, tn.data()));
  for (auto* t : {&c, &d, &e}) pool.release(*t);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(PrefixBlockPool, CollidingHashesNeverAlias) {
  BlockPool pool(4, 4);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.allocate(2, a));
  const auto t = tokens(4, 1), u = tokens(4, 2);
  const uint64_t h = 0x1234;  // any value: the pool trusts no hash alone
  ASSERT_TRUE(pool.register_block(a[0], h, 0, t.data()));
  EXPECT_EQ(pool.lookup(h, 0, t.data()), a[0]);
  EXPECT_EQ(pool.lookup(h, 0, u.data()), -1) << "different tokens under the same hash";
  EXPECT_EQ(pool.lookup(h, 99, t.data()), -1) << "different parent under the same hash";
  // A second block under a hash already cached stays private.
  EXPECT_FALSE(pool.register_block(a[1], h, 0, u.data()));
  EXPECT_EQ(pool.num_cached(), 1);
  EXPECT_THROW(pool.register_block(a[0], 0x99, 0, t.data()), std::logic_error);  // twice
  pool.release(a);
  EXPECT_EQ(pool.num_evictable(), 1);
  EXPECT_EQ(pool.num_free(), 4);
}

// ---------------------------------------------------------------- scheduler on a fake model

// The fake model's next token: a hash of every token of the sequence so far (as in
// test_scheduler.cpp), so a wrong cached prefix or a bad recompute changes the output.
int32_t fake_next(const Request& r) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t p = 0; p < r.num_tokens(); ++p) h = (h ^ uint64_t(r.token_at(p))) * 1099511628211ull;
  return int32_t(h % 32000);
}

// Runs one step; checks that blocks cover what it writes and that no block is written by two
// requests (a request writes only past the prefix it found cached).
StepPlan step(Scheduler& s) {
  StepPlan p = s.schedule();
  std::vector<int32_t> sampled;
  const int64_t bs = s.pool().block_size();
  std::map<int32_t, int64_t> writer;
  for (const auto& q : p.seqs) {
    const Request& r = s.request(q.request_id);
    EXPECT_EQ(q.start, r.num_computed);
    EXPECT_GE(int64_t(r.blocks.size()) * bs, q.start + q.num_tokens);
    for (int64_t b = q.start / bs; b < s.pool().blocks_for(q.start + q.num_tokens); ++b) {
      const auto [it, fresh] = writer.emplace(r.blocks[size_t(b)], r.id);
      EXPECT_TRUE(fresh) << "block " << it->first << " written by requests " << it->second
                         << " and " << r.id;
    }
    if (q.sample) sampled.push_back(fake_next(r));
  }
  if (!p.empty()) s.complete(p, sampled);
  // Only blocks whose every position is computed are cached.
  for (const auto& q : p.seqs) {
    const Request& r = s.request(q.request_id);
    for (size_t i = 0; i < r.blocks.size(); ++i)
      if (s.pool().is_cached(r.blocks[i])) {
        EXPECT_LE(int64_t(i + 1) * bs, r.num_computed)
            << "request " << r.id << " block " << i << " cached before it is full";
      }
  }
  return p;
}

std::vector<StepPlan> drive(Scheduler& s, int max_steps = 100000) {
  std::vector<StepPlan> plans;
  for (int i = 0; i < max_steps && s.has_work(); ++i) plans.push_back(step(s));
  EXPECT_FALSE(s.has_work()) << "did not finish";
  return plans;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// What a request generates alone, without caching.
std::vector<int32_t> alone(const std::vector<int32_t>& p, int64_t max_tokens) {
  BlockPool pool(1024, 16);
  Scheduler s({4096, 8, 100000}, pool);
  s.add(0, p, max_tokens);
  drive(s);
  return s.request(0).output;
}

SchedulerConfig caching(int64_t budget, int64_t seqs, int64_t len) {
  SchedulerConfig c{budget, seqs, len};
  c.enable_prefix_caching = true;
  return c;
}

TEST(PrefixScheduler, SecondRequestSharesATwoBlockPrefixAndComputesOnlyTheRest) {
  BlockPool pool(64, 16);
  Scheduler s(caching(512, 8, 1024), pool);
  const auto shared = tokens(32, 1);  // two full blocks
  const auto p0 = concat(shared, tokens(8, 2)), p1 = concat(shared, tokens(10, 3));
  s.add(0, p0, 4);
  step(s);  // request 0's prefill fills blocks 0 and 1
  const std::vector<int32_t> blocks0 = s.request(0).blocks;
  s.add(1, p1, 3);
  const StepPlan p = step(s);
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[1].request_id, 1);
  EXPECT_EQ(p.seqs[1].start, 32);
  EXPECT_EQ(p.seqs[1].num_tokens, 10);
  EXPECT_TRUE(p.seqs[1].prefill && p.seqs[1].sample);
  EXPECT_EQ(p.prefill_tokens, 10);  // only what was not cached costs budget
  EXPECT_EQ(s.request(1).prefix_hit_tokens, 32);
  // Both requests hold the two prefix blocks.
  EXPECT_EQ(s.request(1).blocks[0], blocks0[0]);
  EXPECT_EQ(s.request(1).blocks[1], blocks0[1]);
  EXPECT_EQ(pool.ref_count(blocks0[0]), 2);
  EXPECT_EQ(pool.ref_count(blocks0[1]), 2);
  EXPECT_NE(s.request(1).blocks[2], blocks0[2]);
  drive(s);
  EXPECT_EQ(s.request(0).output, alone(p0, 4));
  EXPECT_EQ(s.request(1).output, alone(p1, 3));
  EXPECT_EQ(s.request(0).prefix_hit_tokens, 0);
  const PrefixCacheStats& st = s.prefix_cache_stats();
  EXPECT_EQ(st.requests, 2);
  EXPECT_EQ(st.queries, 40 + 42);
  EXPECT_EQ(st.hits, 32);
  EXPECT_EQ(st.preempted_requests, 0);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());

  // After both finished, a third request with the same first block but a different second one
  // hits one block only: the chain, not the block's own tokens, decides.
  auto p2 = concat(tokens(16, 1), tokens(16, 9));
  p2 = concat(p2, tokens(5, 4));
  s.add(2, p2, 2);
  const StepPlan q = step(s);
  EXPECT_EQ(q.seqs[0].start, 16);
  EXPECT_EQ(s.request(2).prefix_hit_tokens, 16);
  drive(s);
  EXPECT_EQ(s.request(2).output, alone(p2, 2));
}

TEST(PrefixScheduler, RequestsPlannedInOneStepShareWhatAnEarlierOneFillsInIt) {
  // As vLLM V1: blocks are registered when the step that fills them is planned.
  BlockPool pool(64, 16);
  Scheduler s(caching(512, 8, 1024), pool);
  const auto shared = tokens(32, 6);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(concat(shared, tokens(8 + i, 60 + i)));
    s.add(i, prompts.back(), 3);
  }
  const StepPlan p = step(s);
  ASSERT_EQ(p.seqs.size(), 3u);
  EXPECT_EQ(p.seqs[0].start, 0);
  EXPECT_EQ(p.seqs[1].start, 32);
  EXPECT_EQ(p.seqs[2].start, 32);
  EXPECT_EQ(p.prefill_tokens, 40 + 9 + 10);
  EXPECT_EQ(pool.ref_count(s.request(0).blocks[0]), 3);
  drive(s);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.request(i).output, alone(prompts[size_t(i)], 3)) << i;
  EXPECT_EQ(s.prefix_cache_stats().hits, 64);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(PrefixScheduler, TheLastKnownTokenIsAlwaysComputed) {
  BlockPool pool(64, 16);
  Scheduler s(caching(512, 8, 1024), pool);
  const auto p32 = tokens(32, 5);  // exactly two full blocks
  s.add(0, p32, 3);
  drive(s);
  // The same prompt again: the second block holds the last prompt token, so only the first
  // block is shared and the second is computed again into a block of its own.
  s.add(1, p32, 3);
  StepPlan p = step(s);
  EXPECT_EQ(p.seqs[0].start, 16);
  EXPECT_EQ(p.seqs[0].num_tokens, 16);
  EXPECT_TRUE(p.seqs[0].sample);
  // One token past two cached blocks: both are shared and one token is computed.
  auto p33 = p32;
  p33.push_back(77);
  s.add(2, p33, 2);
  p = step(s);
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[1].start, 32);
  EXPECT_EQ(p.seqs[1].num_tokens, 1);
  EXPECT_TRUE(p.seqs[1].sample);
  // A prompt shorter than a block can never hit.
  s.add(3, tokens(16, 5), 2);
  p = step(s);
  EXPECT_EQ(p.seqs.back().start, 0);
  drive(s);
  EXPECT_EQ(s.request(1).output, alone(p32, 3));
  EXPECT_EQ(s.request(2).output, alone(p33, 2));
  EXPECT_EQ(s.request(1).prefix_hit_tokens, 16);
  EXPECT_EQ(s.request(2).prefix_hit_tokens, 32);
  EXPECT_EQ(s.request(3).prefix_hit_tokens, 0);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(PrefixScheduler, GeneratedTokensAreCachedAndPreemptedRequestsRecomputeFromTheCache) {
  // 10 blocks of 4 tokens; four requests of an 8-token shared prefix + 4 own tokens, 12 new
  // tokens each (23 positions, 6 blocks): they cannot all grow, so requests are preempted; the
  // shared prefix and what a preempted request had computed stay cached while room allows.
  // Request 0 is prefilled first, so the others find the prefix cached.
  BlockPool pool(10, 4);
  Scheduler s(caching(64, 8, 64), pool);
  const auto shared = tokens(8, 42);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(concat(shared, tokens(4, 100 + i)));
    s.add(i, prompts.back(), 12);
    if (i == 0) step(s);
  }
  for (int i = 0; i < 100000 && s.has_work(); ++i) {
    step(s);
    // No block is referenced more often than there are requests holding it.
    std::map<int32_t, int32_t> holders;
    for (int r = 0; r < 4; ++r)
      if (!s.request(r).finished())
        for (int32_t b : s.request(r).blocks) ++holders[b];
    for (int32_t b = 0; b < pool.num_blocks(); ++b)
      EXPECT_EQ(pool.ref_count(b), holders.count(b) ? holders[b] : 0) << "block " << b;
  }
  ASSERT_FALSE(s.has_work());
  ASSERT_GT(s.preemptions(), 0);
  const PrefixCacheStats& st = s.prefix_cache_stats();
  EXPECT_EQ(st.requests, 4);
  EXPECT_EQ(st.preempted_requests, s.preemptions());
  EXPECT_GT(st.preempted_hits, 0) << "no recompute found its blocks cached";
  int64_t first = 0, recompute = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s.request(i).output, alone(prompts[size_t(i)], 12)) << i;
    first += s.request(i).prefix_hit_tokens;
    recompute += s.request(i).recompute_hit_tokens;
    if (i > 0) {
      EXPECT_EQ(s.request(i).prefix_hit_tokens, 8) << i;  // the shared prefix
    }
  }
  EXPECT_EQ(first, st.hits);
  EXPECT_EQ(recompute, st.preempted_hits);
  EXPECT_EQ(pool.num_used(), 0) << "blocks leaked";
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(PrefixScheduler, NoLeaksUnderPressureWithSharedPrefixes) {
  BlockPool pool(14, 8);
  Scheduler s(caching(32, 16, 256), pool);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 24; ++i) {
    // Three families of prompts sharing 16 or 24 tokens, with their own tails.
    prompts.push_back(concat(tokens(16 + 8 * (i % 2), i % 3), tokens(3 + i % 5, 500 + i)));
    s.add(i, prompts.back(), 10 + i % 7);
  }
  drive(s, 20000);
  int64_t hits = 0;
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(s.request(i).output, alone(prompts[size_t(i)], 10 + i % 7)) << i;
    hits += s.request(i).prefix_hit_tokens;
  }
  EXPECT_GT(hits, 0);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
  EXPECT_LE(pool.num_cached(), pool.num_blocks());
  EXPECT_EQ(pool.num_evictable(), pool.num_cached());
}

TEST(PrefixScheduler, OffByDefaultAndUnchangedWithoutSharedPrefixes) {
  // Off: identical prompts share nothing, nothing is cached, no lookups are counted.
  {
    BlockPool pool(64, 16);
    Scheduler s({512, 8, 1024}, pool);
    EXPECT_FALSE(s.config().enable_prefix_caching);
    s.add(0, tokens(40, 1), 3);
    drive(s);
    s.add(1, tokens(40, 1), 3);
    const StepPlan p = step(s);
    EXPECT_EQ(p.seqs[0].start, 0);
    EXPECT_EQ(p.seqs[0].num_tokens, 40);
    drive(s);
    EXPECT_EQ(s.request(1).prefix_hit_tokens, 0);
    EXPECT_EQ(pool.num_cached(), 0);
    EXPECT_EQ(s.prefix_cache_stats().queries, 0);
  }
  // On, with prompts that share no full block and room for all: every plan (chunks, decodes)
  // is the same as with it off.
  auto run = [](bool on) {
    BlockPool pool(256, 8);
    SchedulerConfig c{32, 16, 256};
    c.enable_prefix_caching = on;
    Scheduler s(c, pool);
    for (int i = 0; i < 20; ++i) s.add(i, tokens(20 + i % 5, i), 15 + i % 7);
    std::vector<std::tuple<int64_t, int64_t, int64_t, bool>> trace;
    for (const StepPlan& p : drive(s, 20000)) {
      for (const auto& q : p.seqs)
        trace.emplace_back(q.request_id, q.start, q.num_tokens, q.sample);
      for (int64_t id : p.preempted) trace.emplace_back(id, -1, -1, false);
    }
    EXPECT_EQ(pool.num_free(), pool.num_blocks());
    return std::make_pair(trace, s.preemptions());
  };
  const auto off = run(false), on = run(true);
  EXPECT_GT(off.first.size(), 40u);
  EXPECT_EQ(on, off);
}

}  // namespace
}  // namespace latprof::engine

// ---------------------------------------------------------------- a real tiny model

namespace latprof {
namespace {

using test::kLogitTolerance;
using test::Recorder;
using test::rel_l2;

struct Req {
  int64_t prefix_len, prefix_seed;  // shared part
  int64_t own_len, own_seed;        // its own tail
  int64_t out;
  double arrival_ms;
};

struct Outcome {
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> logits;
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, engine::RequestTimeline> timelines;
  engine::PrefixCacheStats stats;
  int64_t preemptions = 0;
  bool leak_free = false;
};

std::vector<int32_t> seq(int64_t n, int64_t seed, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((seed * 131 + i * 29 + 7) % vocab));
  return p;
}

Outcome run_engine(const ModelConfig& cfg, OpenedModel& om, const std::vector<Req>& reqs,
                   bool prefix_caching, int64_t kv_blocks, int64_t block_size,
                   int64_t budget = 128) {
  auto b = make_cpu_backend(BackendOptions{});
  EngineShape es;
  es.block_size = block_size;
  es.max_model_len = 128;
  es.kv_blocks = kv_blocks;
  es.max_step_tokens = 128;
  es.max_seqs = 16;
  LoadedModel m(cfg, WeightType::f16, *b, es);
  m.load(*om.weights, {});
  Profiler prof(*b);
  Recorder rec(m, prof);
  engine::BlockPool pool(kv_blocks, block_size);
  engine::SchedulerConfig sc{budget, 16, 128};
  sc.enable_prefix_caching = prefix_caching;
  double t = 0;  // one ms per clock read: arrivals interleave with steps deterministically
  engine::Engine eng(sc, pool, rec, {[&] { return t += 1; }, [&](double x) { t = x; }});
  Outcome o;
  eng.on_token = [&](int64_t id, int32_t tok) { o.tokens[id].push_back(tok); };
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Req& r = reqs[i];
    std::vector<int32_t> p = seq(r.prefix_len, r.prefix_seed, cfg.vocab_size);
    const auto own = seq(r.own_len, r.own_seed, cfg.vocab_size);
    p.insert(p.end(), own.begin(), own.end());
    eng.submit(int64_t(i), std::move(p), r.out, r.arrival_ms);
  }
  eng.run();
  for (const auto& s : eng.steps()) o.preemptions += s.preempted;
  o.logits = rec.logits;
  o.timelines = eng.timelines();
  o.stats = eng.scheduler().prefix_cache_stats();
  o.leak_free = pool.num_free() == pool.num_blocks() && pool.num_used() == 0;
  return o;
}

// Logits within tolerance everywhere; greedy tokens equal up to the first near-tie (after which
// the sequences may legitimately diverge).
void expect_same(const Outcome& got, const Outcome& want, const std::vector<Req>& reqs) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& gt = got.tokens.at(int64_t(i));
    const auto& wt = want.tokens.at(int64_t(i));
    ASSERT_EQ(gt.size(), wt.size());
    for (int64_t k = 0; k < reqs[i].out; ++k) {
      const auto& w = want.logits.at({int64_t(i), k});
      EXPECT_LT(rel_l2(got.logits.at({int64_t(i), k}), w), kLogitTolerance)
          << "request " << i << " token " << k;
      std::vector<float> sorted = w;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] < 1e-3 * std::fabs(sorted[0])) break;
      ASSERT_EQ(gt[size_t(k)], wt[size_t(k)]) << "request " << i << " token " << k;
    }
  }
}

struct Variant {
  const char* name;
  int64_t window;
};

class PrefixCacheModel : public ::testing::TestWithParam<Variant> {};

TEST_P(PrefixCacheModel, SharedPrefixesGiveTheSameLogitsWithTheCacheOnAndOff) {
  OpenedModel om = open_model("tiny", 21);
  ModelConfig cfg = om.config;
  cfg.sliding_window = GetParam().window;
  // Request 0 fills the cache; request 1 shares its 3 prefix blocks of 8 in the same step (they
  // are written and read in one forward pass), request 2 two of them while request 0 decodes,
  // request 3 after all finished (blocks cached, nobody holding them); request 4 has a prefix of
  // its own; request 5 repeats request 0's whole prompt.
  const std::vector<Req> reqs = {{24, 1, 5, 11, 8, 0},   {24, 1, 9, 12, 6, 0},
                                 {16, 1, 3, 13, 5, 3},   {24, 1, 1, 14, 4, 200},
                                 {17, 2, 6, 15, 5, 200}, {24, 1, 5, 11, 4, 200}};
  const Outcome off = run_engine(cfg, om, reqs, false, 64, 8);
  const Outcome on = run_engine(cfg, om, reqs, true, 64, 8);
  EXPECT_TRUE(off.leak_free);
  EXPECT_TRUE(on.leak_free);
  expect_same(on, off, reqs);
  // Hits as the block chain predicts: full blocks of the shared prefix, never the last token.
  const int64_t want_hits[] = {0, 24, 16, 24, 0, 24};
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(on.timelines.at(int64_t(i)).prefix_hit_tokens, want_hits[i]) << i;
    EXPECT_EQ(off.timelines.at(int64_t(i)).prefix_hit_tokens, 0) << i;
  }
  EXPECT_EQ(on.stats.hits, 24 + 16 + 24 + 24);
  EXPECT_EQ(on.stats.requests, 6);
  EXPECT_EQ(off.stats.requests, 0);
  // With 12-token chunks: cached prefixes followed by chunked prefills of the rest.
  const Outcome chunked = run_engine(cfg, om, reqs, true, 64, 8, 12);
  EXPECT_TRUE(chunked.leak_free);
  EXPECT_GE(chunked.stats.hits, 16 + 24 + 24);
  expect_same(chunked, off, reqs);
}

TEST_P(PrefixCacheModel, PreemptedRequestsRecomputeFromTheCacheToTheSameTokens) {
  OpenedModel om = open_model("tiny", 22);
  ModelConfig cfg = om.config;
  cfg.sliding_window = GetParam().window;
  std::vector<Req> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back({12, 3, 8, 20 + i, 12, 0});
  const Outcome roomy = run_engine(cfg, om, reqs, false, 64, 4);
  const Outcome tight = run_engine(cfg, om, reqs, true, 18, 4);
  EXPECT_GT(tight.preemptions, 0);
  EXPECT_GT(tight.stats.preempted_hits, 0);
  EXPECT_TRUE(tight.leak_free);
  expect_same(tight, roomy, reqs);
}

INSTANTIATE_TEST_SUITE_P(Variants, PrefixCacheModel,
                         ::testing::Values(Variant{"full", 0}, Variant{"window8", 8}),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace latprof
