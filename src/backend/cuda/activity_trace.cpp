// CUPTI activity records -> kernel timeline, busy time, idle gaps, per-range sums (JSON).
#include "backend/cuda/activity_trace.hpp"

#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "backend/cuda/check.hpp"

namespace latprof::cuda {

namespace {

constexpr size_t kBufferBytes = size_t(8) << 20;  // CUPTI suggests 1-10 MB
constexpr size_t kAlign = 64;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  ActivityTrace::instance().on_buffer(buffer, valid);
  std::free(buffer);
}

std::string demangle(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : mangled;
  std::free(d);
  return out;
}

}  // namespace

ActivityTrace& ActivityTrace::instance() {
  static ActivityTrace t;
  return t;
}

bool ActivityTrace::enable(std::string* why) {
  if (enabled_) return true;
  try {
    if (!callbacks_registered_) {
      LP_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
      callbacks_registered_ = true;
    }
    // RUNTIME and DRIVER records carry the correlation ids that external-correlation records map
    // to ranges (cuBLASLt may launch through the driver API).
    for (CUpti_ActivityKind k :
         {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
          CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
          CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION})
      LP_CHECK(cuptiActivityEnable(k));
  } catch (const std::exception& e) {
    if (why) *why = std::string("CUPTI activity tracing unavailable: ") + e.what();
    disable();
    return false;
  }
  enabled_ = true;
  return true;
}

void ActivityTrace::disable() {
  for (CUpti_ActivityKind k :
       {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
        CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
        CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION})
    cuptiActivityDisable(k);  // best effort: disabling a kind never enabled is harmless
  enabled_ = false;
}

void ActivityTrace::push(uint64_t id) {
  if (enabled_)
    LP_CHECK(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id));
}

void ActivityTrace::pop() {
  if (!enabled_) return;
  uint64_t last = 0;  // never throws: called from destructors; a failed pop only loses attribution
  cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
}

void ActivityTrace::name_range(uint64_t id, const char* name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = range_names_.find(id);
  if (it == range_names_.end()) range_names_.emplace(id, name ? name : "");
}

uint32_t ActivityTrace::intern(const char* mangled) {
  const std::string key = mangled ? mangled : "?";
  auto it = name_index_.find(key);
  if (it != name_index_.end()) return it->second;
  const uint32_t idx = uint32_t(names_.size());
  names_.push_back(demangle(key.c_str()));
  name_index_.emplace(key, idx);
  return idx;
}

void ActivityTrace::on_buffer(uint8_t* buffer, size_t valid_size) {
  std::lock_guard<std::mutex> lock(mu_);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_size, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        if (k->start == 0 || k->end < k->start) {
          ++zero_start_records_;
          break;
        }
        kernels_.push_back(Kernel{k->start, k->end, k->correlationId, intern(k->name)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        copies_.push_back(Copy{m->start, m->end, m->bytes, m->correlationId, m->copyKind});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        copies_.push_back(Copy{m->start, m->end, m->bytes, m->correlationId, 255});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
          corr_to_range_[e->correlationId] = e->externalId;
        break;
      }
      default:
        break;  // runtime/driver API records: only their correlation ids matter
    }
  }
}

std::string ActivityTrace::take_json(size_t max_kernels) {
  using nlohmann::json;
  if (!enabled_) return "";
  LP_CHECK(cudaDeviceSynchronize());
  LP_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);

  std::lock_guard<std::mutex> lock(mu_);
  auto range_of = [&](uint32_t corr) -> int64_t {
    auto it = corr_to_range_.find(corr);
    return it == corr_to_range_.end() ? -1 : int64_t(it->second);
  };
  // Intervals of GPU activity (kernels and copies), sorted, for busy time and gaps.
  struct Iv {
    uint64_t a, b;
  };
  std::vector<Iv> iv;
  iv.reserve(kernels_.size() + copies_.size());
  for (const Kernel& k : kernels_) iv.push_back({k.start, k.end});
  for (const Copy& c : copies_) iv.push_back({c.start, c.end});
  std::sort(iv.begin(), iv.end(), [](const Iv& x, const Iv& y) { return x.a < y.a; });
  const uint64_t t0 = iv.empty() ? 0 : iv.front().a;
  uint64_t busy = 0, span_end = 0, gap_total = 0, gap_max = 0, gaps = 0, gaps_over_10us = 0;
  uint64_t cur_a = 0, cur_b = 0;
  bool open = false;
  for (const Iv& x : iv) {
    if (!open) {
      cur_a = x.a;
      cur_b = x.b;
      open = true;
    } else if (x.a <= cur_b) {
      cur_b = std::max(cur_b, x.b);
    } else {
      busy += cur_b - cur_a;
      const uint64_t g = x.a - cur_b;
      gap_total += g;
      gap_max = std::max(gap_max, g);
      ++gaps;
      if (g > 10000) ++gaps_over_10us;
      cur_a = x.a;
      cur_b = x.b;
    }
    span_end = std::max(span_end, x.b);
  }
  if (open) busy += cur_b - cur_a;

  struct RangeSum {
    uint64_t kernel_ns = 0, kernels = 0, copy_bytes = 0, copy_ns = 0;
  };
  std::map<int64_t, RangeSum> ranges;
  struct NameSum {
    uint64_t ns = 0, count = 0;
  };
  std::vector<NameSum> by_name(names_.size());
  for (const Kernel& k : kernels_) {
    RangeSum& r = ranges[range_of(k.corr)];
    r.kernel_ns += k.end - k.start;
    ++r.kernels;
    by_name[k.name].ns += k.end - k.start;
    ++by_name[k.name].count;
  }
  uint64_t h2d = 0, d2h = 0, d2d = 0, memset_bytes = 0, copy_ns = 0;
  for (const Copy& c : copies_) {
    RangeSum& r = ranges[range_of(c.corr)];
    r.copy_bytes += c.bytes;
    r.copy_ns += c.end - c.start;
    copy_ns += c.end - c.start;
    if (c.kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD)
      h2d += c.bytes;
    else if (c.kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH)
      d2h += c.bytes;
    else if (c.kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD)
      d2d += c.bytes;
    else if (c.kind == 255)
      memset_bytes += c.bytes;
  }

  json j;
  j["source"] = "cupti_activity";
  j["clock"] = "CUPTI timestamps (ns); start_ns/end_ns relative to the first record";
  j["kernel_count"] = kernels_.size();
  j["copy_count"] = copies_.size();
  j["span_ns"] = iv.empty() ? 0 : span_end - t0;
  j["gpu_busy_ns"] = busy;
  j["idle_gaps"] = {
      {"count", gaps}, {"total_ns", gap_total}, {"max_ns", gap_max}, {"over_10us", gaps_over_10us}};
  j["memcpy"] = {{"h2d_bytes", h2d},
                 {"d2h_bytes", d2h},
                 {"d2d_bytes", d2d},
                 {"memset_bytes", memset_bytes},
                 {"total_ns", copy_ns}};
  j["dropped_records"] = uint64_t(dropped);
  j["untimed_records"] = zero_start_records_;
  json jr = json::array();
  for (const auto& [id, r] : ranges) {
    json e = {{"id", id},
              {"kernel_ns", r.kernel_ns},
              {"kernels", r.kernels},
              {"copy_bytes", r.copy_bytes},
              {"copy_ns", r.copy_ns}};
    auto nit = id >= 0 ? range_names_.find(uint64_t(id)) : range_names_.end();
    e["name"] = nit != range_names_.end() ? nit->second : (id < 0 ? "(outside ranges)" : "");
    jr.push_back(std::move(e));
  }
  j["ranges"] = std::move(jr);
  std::vector<uint32_t> order(names_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return by_name[a].ns > by_name[b].ns; });
  json top = json::array();
  for (size_t i = 0; i < order.size() && i < 20; ++i) {
    if (by_name[order[i]].count == 0) break;
    top.push_back({{"name", names_[order[i]]},
                   {"total_ns", by_name[order[i]].ns},
                   {"count", by_name[order[i]].count}});
  }
  j["top_kernels"] = std::move(top);
  json kl = json::array();
  for (size_t i = 0; i < kernels_.size() && i < max_kernels; ++i) {
    const Kernel& k = kernels_[i];
    kl.push_back({{"name", names_[k.name]},
                  {"start_ns", k.start - t0},
                  {"end_ns", k.end - t0},
                  {"range", range_of(k.corr)}});
  }
  j["kernels_truncated"] = kernels_.size() > max_kernels;
  j["kernels"] = std::move(kl);

  kernels_.clear();
  copies_.clear();
  corr_to_range_.clear();
  zero_start_records_ = 0;
  return j.dump();
}

}  // namespace latprof::cuda
