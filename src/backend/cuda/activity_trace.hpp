#pragma once
// CUPTI activity tracing for the CUDA backend: kernel, memcpy and memset records, attributed to
// latprof's ranges through external correlation (CUSTOM0 ids pushed by range_push), summarised
// as JSON by take_json(). CUPTI has one activity client per process, so this is a singleton.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace latprof::cuda {

class ActivityTrace {
 public:
  static ActivityTrace& instance();

  // Enables the activity kinds; false with the CUPTI reason when refused (another profiler
  // attached, no device ...). Idempotent.
  bool enable(std::string* why);
  void disable();
  bool enabled() const { return enabled_; }

  // External correlation for the work issued between push and pop on this thread.
  void push(uint64_t id);
  void pop();
  void name_range(uint64_t id, const char* name);

  // Synchronises the device, flushes all buffers and returns the summary of the records
  // collected since the last call (then forgets them). max_kernels caps the kernel list.
  std::string take_json(size_t max_kernels = 200000);

  // CUPTI buffer callbacks (public for the C trampolines).
  void on_buffer(uint8_t* buffer, size_t valid_size);

 private:
  ActivityTrace() = default;
  struct Kernel {
    uint64_t start = 0, end = 0;
    uint32_t corr = 0;
    uint32_t name = 0;  // index into names_
  };
  struct Copy {
    uint64_t start = 0, end = 0, bytes = 0;
    uint32_t corr = 0;
    uint8_t kind = 0;  // CUpti_ActivityMemcpyKind; 255 for memset
  };
  uint32_t intern(const char* mangled);

  bool enabled_ = false;
  bool callbacks_registered_ = false;
  std::mutex mu_;
  std::vector<Kernel> kernels_;
  std::vector<Copy> copies_;
  std::map<uint32_t, uint64_t> corr_to_range_;  // correlation id -> external (range) id
  std::map<std::string, uint32_t> name_index_;
  std::vector<std::string> names_;  // demangled
  std::map<uint64_t, std::string> range_names_;
  uint64_t zero_start_records_ = 0;  // records CUPTI could not time (device buffer full)
};

}  // namespace latprof::cuda
