#pragma once
// Hardware counters per latprof range through the CUPTI Range Profiler (CUDA 12.6+ API):
// UserRange, a single-pass metric set (so no replay of the non-idempotent decode step is
// needed), one nesting level: push/pop here must not nest (the backend decides which spans become
// counter ranges, see CudaBackend::range_push and run_step).
// Every failure (no device, ERR_NVGPUCTRPERM, another profiler attached, MIG, vGPU ...) turns
// into `false` plus the reason; nothing here throws to the caller.
#include <cstdint>
#include <string>
#include <vector>

namespace latprof::cuda {

// The metric set: DRAM bytes read and written, elapsed time and SM cycles, tensor-pipe activity.
const std::vector<const char*>& counter_metrics();

// Offline check with the profiler host API (no GPU needed): how many passes the metric set needs
// on `chip` (e.g. "GA100", "GH100"); -1 with the reason when a metric is invalid there.
int counter_passes_for_chip(const char* chip, std::string* why);

class RangeCounters {
 public:
  RangeCounters() = default;
  ~RangeCounters();
  RangeCounters(const RangeCounters&) = delete;
  RangeCounters& operator=(const RangeCounters&) = delete;

  // Sets up the profiler on the current device and starts a collection.
  bool enable(int device, std::string* why);
  void disable();
  bool enabled() const { return enabled_; }
  // One counter range (not nested); ignored while disabled or while a range is open.
  void push(const std::string& name);
  void pop();
  bool range_open() const { return open_; }
  // Stops, decodes and evaluates the ranges collected so far (an open range is closed first),
  // then starts a new collection unless `restart` is false. "" when never enabled. JSON object:
  // {"source", "chip", "metrics": [...], "ranges": [{"name", <metric>: value ...}], ...}.
  std::string take_json(bool restart = true);
  const std::string& last_error() const { return last_error_; }

 private:
  bool start(std::string* why);
  bool stop_and_decode(std::string* why, size_t* dropped);
  void fail(const std::string& why);

  bool enabled_ = false;
  bool started_ = false;
  bool open_ = false;
  size_t max_ranges_ = 4096;
  void* object_ = nullptr;  // CUpti_RangeProfiler_Object*
  void* host_ = nullptr;    // CUpti_Profiler_Host_Object*
  std::vector<uint8_t> config_image_;
  std::vector<uint8_t> counter_data_;
  std::string chip_;
  std::string last_error_;
};

}  // namespace latprof::cuda
