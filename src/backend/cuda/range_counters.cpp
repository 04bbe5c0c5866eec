// CUPTI Range Profiler sequence (cupti_range_profiler.h, cupti_profiler_host.h, CUDA 13.0):
// ProfilerInitialize -> DeviceGetChipName -> GetCounterAvailability -> host Initialize with the
// availability image -> ConfigAddMetrics -> GetConfigImage -> RangeProfilerEnable(ctx) ->
// GetCounterDataSize -> CounterDataImageInitialize -> SetConfig(UserRange, UserReplay, 1 level)
// -> Start -> PushRange/PopRange ... -> Stop -> DecodeData -> GetCounterDataInfo ->
// CounterDataGetRangeInfo + host EvaluateToGpuValues per range.
#include "backend/cuda/range_counters.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include <nlohmann/json.hpp>

#include "backend/cuda/check.hpp"

namespace latprof::cuda {

namespace {

// A CUPTI parameter struct, zeroed, with structSize set (the API's versioning convention).
template <class T>
T make_params(size_t struct_size) {
  T p{};
  p.structSize = struct_size;
  return p;
}

// Result of a CUPTI call as text with the usual fix for the common refusals.
std::string cupti_reason(CUptiResult r, const char* call) {
  std::string s = std::string(call) + ": " + error_text(r);
  if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    s += " (ERR_NVGPUCTRPERM: counters are restricted to admin users; load the nvidia module "
         "with NVreg_RestrictProfilingToAdminUsers=0 or run with CAP_SYS_ADMIN)";
  else if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    s += " (another profiler such as nsys, ncu or a CUPTI injection is attached)";
  else if (r == CUPTI_ERROR_HARDWARE_BUSY)
    s += " (the performance monitors are in use, e.g. by DCGM profiling: dcgmi profile --pause)";
  else if (r == CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED)
    s += " (MIG: counters need an isolated compute instance)";
  return s;
}

#define LP_TRY_CUPTI(call)                     \
  do {                                         \
    const CUptiResult r_ = (call);             \
    if (r_ != CUPTI_SUCCESS) {                 \
      if (why) *why = cupti_reason(r_, #call); \
      return false;                            \
    }                                          \
  } while (0)

using CtxGetCurrentFn = CUresult (*)(CUcontext*);

// The current CUcontext without linking libcuda: the driver entry point through the runtime.
bool current_context(CUcontext* ctx, std::string* why) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess || !fn || q != cudaDriverEntryPointSuccess) {
    if (why) *why = "cannot resolve cuCtxGetCurrent: " + error_text(e);
    return false;
  }
  if (reinterpret_cast<CtxGetCurrentFn>(fn)(ctx) != CUDA_SUCCESS || !*ctx) {
    if (why) *why = "no current CUDA context";
    return false;
  }
  return true;
}

bool host_init(const char* chip, const uint8_t* availability, CUpti_Profiler_Host_Object** host,
               std::vector<uint8_t>* config, std::string* why) {
  auto hi = make_params<CUpti_Profiler_Host_Initialize_Params>(
      CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE);
  hi.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  hi.pChipName = chip;
  hi.pCounterAvailabilityImage = availability;
  LP_TRY_CUPTI(cuptiProfilerHostInitialize(&hi));
  *host = hi.pHostObject;
  auto am = make_params<CUpti_Profiler_Host_ConfigAddMetrics_Params>(
      CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE);
  am.pHostObject = *host;
  std::vector<const char*> names = counter_metrics();
  am.ppMetricNames = names.data();
  am.numMetrics = names.size();
  LP_TRY_CUPTI(cuptiProfilerHostConfigAddMetrics(&am));
  auto cs = make_params<CUpti_Profiler_Host_GetConfigImageSize_Params>(
      CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE);
  cs.pHostObject = *host;
  LP_TRY_CUPTI(cuptiProfilerHostGetConfigImageSize(&cs));
  config->assign(cs.configImageSize, 0);
  auto ci = make_params<CUpti_Profiler_Host_GetConfigImage_Params>(
      CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE);
  ci.pHostObject = *host;
  ci.configImageSize = config->size();
  ci.pConfigImage = config->data();
  LP_TRY_CUPTI(cuptiProfilerHostGetConfigImage(&ci));
  return true;
}

int passes_of(std::vector<uint8_t>& config, std::string* why) {
  auto np = make_params<CUpti_Profiler_Host_GetNumOfPasses_Params>(
      CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE);
  np.configImageSize = config.size();
  np.pConfigImage = config.data();
  const CUptiResult r = cuptiProfilerHostGetNumOfPasses(&np);
  if (r != CUPTI_SUCCESS) {
    if (why) *why = cupti_reason(r, "cuptiProfilerHostGetNumOfPasses");
    return -1;
  }
  return int(np.numOfPasses);
}

void host_deinit(CUpti_Profiler_Host_Object* host) {
  if (!host) return;
  auto d = make_params<CUpti_Profiler_Host_Deinitialize_Params>(
      CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE);
  d.pHostObject = host;
  cuptiProfilerHostDeinitialize(&d);
}

}  // namespace

const std::vector<const char*>& counter_metrics() {
  // Single pass on GA100 and GH100 (checked offline, see tests/gpu/test_gpu_counters.cpp).
  static const std::vector<const char*> m = {
      "dram__bytes_read.sum",
      "dram__bytes_write.sum",
      "gpu__time_duration.sum",
      "sm__cycles_elapsed.avg",
      "sm__cycles_elapsed.avg.per_second",
      "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
  };
  return m;
}

int counter_passes_for_chip(const char* chip, std::string* why) {
  CUpti_Profiler_Host_Object* host = nullptr;
  std::vector<uint8_t> config;
  int passes = -1;
  if (host_init(chip, nullptr, &host, &config, why)) passes = passes_of(config, why);
  host_deinit(host);
  return passes;
}

RangeCounters::~RangeCounters() {
  disable();
}

void RangeCounters::fail(const std::string& why) {
  last_error_ = why;
  disable();
}

bool RangeCounters::enable(int device, std::string* why) {
  if (enabled_) return true;
  std::string reason;
  auto refuse = [&](const std::string& r) {
    if (why) *why = "hardware counters unavailable: " + r;
    last_error_ = r;
    disable();
    return false;
  };
  {
    std::string* w = &reason;
    auto step = [&]() -> bool {
      std::string* why = w;
      auto pi = make_params<CUpti_Profiler_Initialize_Params>(
          CUpti_Profiler_Initialize_Params_STRUCT_SIZE);
      LP_TRY_CUPTI(cuptiProfilerInitialize(&pi));
      auto ds = make_params<CUpti_Profiler_DeviceSupported_Params>(
          CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE);
      ds.cuDevice = device;
      ds.api = CUPTI_PROFILER_RANGE_PROFILING;
      LP_TRY_CUPTI(cuptiProfilerDeviceSupported(&ds));
      if (ds.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) {
        std::string r = "the device does not support the range profiler:";
        if (ds.architecture != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) r += " architecture";
        if (ds.vGpu != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) r += " vGPU";
        if (ds.confidentialCompute != CUPTI_PROFILER_CONFIGURATION_SUPPORTED)
          r += " confidential-compute";
        if (ds.cmp != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) r += " CMP";
        if (ds.wsl != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) r += " WSL";
        if (ds.sli != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) r += " SLI";
        *why = r;
        return false;
      }
      auto cn =
          make_params<CUpti_Device_GetChipName_Params>(CUpti_Device_GetChipName_Params_STRUCT_SIZE);
      cn.deviceIndex = size_t(device);
      LP_TRY_CUPTI(cuptiDeviceGetChipName(&cn));
      chip_ = cn.pChipName ? cn.pChipName : "";
      CUcontext ctx = nullptr;
      if (!current_context(&ctx, why)) return false;
      auto ca = make_params<CUpti_Profiler_GetCounterAvailability_Params>(
          CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE);
      ca.ctx = ctx;
      LP_TRY_CUPTI(cuptiProfilerGetCounterAvailability(&ca));
      std::vector<uint8_t> avail(ca.counterAvailabilityImageSize, 0);
      ca.pCounterAvailabilityImage = avail.data();
      LP_TRY_CUPTI(cuptiProfilerGetCounterAvailability(&ca));
      CUpti_Profiler_Host_Object* host = nullptr;
      const bool ok = host_init(chip_.c_str(), avail.data(), &host, &config_image_, why);
      host_ = host;
      if (!ok) return false;
      const int passes = passes_of(config_image_, why);
      if (passes < 0) return false;
      if (passes != 1) {
        *why = "the counter set needs " + std::to_string(passes) + " passes on " + chip_ +
               "; latprof only collects single-pass sets (a decode step is not replayable)";
        return false;
      }
      auto en = make_params<CUpti_RangeProfiler_Enable_Params>(
          CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE);
      en.ctx = ctx;
      LP_TRY_CUPTI(cuptiRangeProfilerEnable(&en));
      object_ = en.pRangeProfilerObject;
      return true;
    };
    if (!step()) return refuse(reason);
  }
  enabled_ = true;
  if (!start(&reason)) return refuse(reason);
  return true;
}

bool RangeCounters::start(std::string* why) {
  auto* obj = static_cast<CUpti_RangeProfiler_Object*>(object_);
  std::vector<const char*> names = counter_metrics();
  auto sz = make_params<CUpti_RangeProfiler_GetCounterDataSize_Params>(
      CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE);
  sz.pRangeProfilerObject = obj;
  sz.pMetricNames = names.data();
  sz.numMetrics = names.size();
  sz.maxNumOfRanges = max_ranges_;
  sz.maxNumRangeTreeNodes = uint32_t(max_ranges_);
  LP_TRY_CUPTI(cuptiRangeProfilerGetCounterDataSize(&sz));
  counter_data_.assign(sz.counterDataSize, 0);
  auto ini = make_params<CUpti_RangeProfiler_CounterDataImage_Initialize_Params>(
      CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE);
  ini.pRangeProfilerObject = obj;
  ini.counterDataSize = counter_data_.size();
  ini.pCounterData = counter_data_.data();
  LP_TRY_CUPTI(cuptiRangeProfilerCounterDataImageInitialize(&ini));
  auto sc = make_params<CUpti_RangeProfiler_SetConfig_Params>(
      CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE);
  sc.pRangeProfilerObject = obj;
  sc.configSize = config_image_.size();
  sc.pConfig = config_image_.data();
  sc.counterDataImageSize = counter_data_.size();
  sc.pCounterDataImage = counter_data_.data();
  sc.range = CUPTI_UserRange;
  sc.replayMode = CUPTI_UserReplay;  // single pass: the one "replay" is the run itself
  sc.maxRangesPerPass = max_ranges_;
  sc.numNestingLevels = 1;
  sc.minNestingLevel = 1;
  sc.passIndex = 0;
  sc.targetNestingLevel = 1;
  LP_TRY_CUPTI(cuptiRangeProfilerSetConfig(&sc));
  auto st =
      make_params<CUpti_RangeProfiler_Start_Params>(CUpti_RangeProfiler_Start_Params_STRUCT_SIZE);
  st.pRangeProfilerObject = obj;
  LP_TRY_CUPTI(cuptiRangeProfilerStart(&st));
  started_ = true;
  return true;
}

bool RangeCounters::stop_and_decode(std::string* why, size_t* dropped) {
  auto* obj = static_cast<CUpti_RangeProfiler_Object*>(object_);
  if (!started_) return false;
  started_ = false;
  auto sp =
      make_params<CUpti_RangeProfiler_Stop_Params>(CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE);
  sp.pRangeProfilerObject = obj;
  LP_TRY_CUPTI(cuptiRangeProfilerStop(&sp));
  auto dd = make_params<CUpti_RangeProfiler_DecodeData_Params>(
      CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE);
  dd.pRangeProfilerObject = obj;
  LP_TRY_CUPTI(cuptiRangeProfilerDecodeData(&dd));
  *dropped = dd.numOfRangeDropped;
  return true;
}

void RangeCounters::disable() {
  if (object_) {
    if (started_) {
      auto sp =
          make_params<CUpti_RangeProfiler_Stop_Params>(CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE);
      sp.pRangeProfilerObject = static_cast<CUpti_RangeProfiler_Object*>(object_);
      cuptiRangeProfilerStop(&sp);
      started_ = false;
    }
    auto d = make_params<CUpti_RangeProfiler_Disable_Params>(
        CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE);
    d.pRangeProfilerObject = static_cast<CUpti_RangeProfiler_Object*>(object_);
    cuptiRangeProfilerDisable(&d);
    object_ = nullptr;
  }
  host_deinit(static_cast<CUpti_Profiler_Host_Object*>(host_));
  host_ = nullptr;
  enabled_ = false;
  open_ = false;
}

void RangeCounters::push(const std::string& name) {
  if (!enabled_ || !started_ || open_) return;
  auto p = make_params<CUpti_RangeProfiler_PushRange_Params>(
      CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE);
  p.pRangeProfilerObject = static_cast<CUpti_RangeProfiler_Object*>(object_);
  p.pRangeName = name.c_str();
  const CUptiResult r = cuptiRangeProfilerPushRange(&p);
  if (r != CUPTI_SUCCESS) {
    fail(cupti_reason(r, "cuptiRangeProfilerPushRange"));
    return;
  }
  open_ = true;
}

void RangeCounters::pop() {
  if (!enabled_ || !open_) return;
  open_ = false;
  auto p = make_params<CUpti_RangeProfiler_PopRange_Params>(
      CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE);
  p.pRangeProfilerObject = static_cast<CUpti_RangeProfiler_Object*>(object_);
  const CUptiResult r = cuptiRangeProfilerPopRange(&p);
  if (r != CUPTI_SUCCESS) fail(cupti_reason(r, "cuptiRangeProfilerPopRange"));
}

std::string RangeCounters::take_json(bool restart) {
  using nlohmann::json;
  if (!enabled_) {
    if (last_error_.empty()) return "";
    return json{{"source", "cupti_range_profiler"}, {"error", last_error_}}.dump();
  }
  json j;
  j["source"] = "cupti_range_profiler";
  j["chip"] = chip_;
  j["mode"] =
      "UserRange, single pass; one range per decode step and per group of ops between steps";
  j["metrics"] = counter_metrics();
  std::string why;
  size_t dropped = 0;
  pop();
  if (!stop_and_decode(&why, &dropped)) {
    fail(why);
    j["error"] = why;
    return j.dump();
  }
  j["ranges_dropped"] = dropped;
  auto gi = make_params<CUpti_RangeProfiler_GetCounterDataInfo_Params>(
      CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE);
  gi.pCounterDataImage = counter_data_.data();
  gi.counterDataImageSize = counter_data_.size();
  json ranges = json::array();
  if (cuptiRangeProfilerGetCounterDataInfo(&gi) == CUPTI_SUCCESS) {
    std::vector<const char*> names = counter_metrics();
    std::vector<double> values(names.size());
    for (size_t i = 0; i < gi.numTotalRanges; ++i) {
      auto ri = make_params<CUpti_RangeProfiler_CounterData_GetRangeInfo_Params>(
          CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE);
      ri.pCounterDataImage = counter_data_.data();
      ri.counterDataImageSize = counter_data_.size();
      ri.rangeIndex = i;
      ri.rangeDelimiter = "/";
      if (cuptiRangeProfilerCounterDataGetRangeInfo(&ri) != CUPTI_SUCCESS) continue;
      auto ev = make_params<CUpti_Profiler_Host_EvaluateToGpuValues_Params>(
          CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE);
      ev.pHostObject = static_cast<CUpti_Profiler_Host_Object*>(host_);
      ev.pCounterDataImage = counter_data_.data();
      ev.counterDataImageSize = counter_data_.size();
      ev.rangeIndex = i;
      ev.ppMetricNames = names.data();
      ev.numMetrics = names.size();
      ev.pMetricValues = values.data();
      const CUptiResult r = cuptiProfilerHostEvaluateToGpuValues(&ev);
      json e;
      e["name"] = ri.rangeName ? ri.rangeName : "";
      if (r != CUPTI_SUCCESS) {
        e["error"] = cupti_reason(r, "cuptiProfilerHostEvaluateToGpuValues");
      } else {
        for (size_t k = 0; k < names.size(); ++k) e[names[k]] = values[k];
      }
      ranges.push_back(std::move(e));
    }
  }
  j["ranges"] = std::move(ranges);
  if (restart && !start(&why)) {
    fail(why);
    j["restart_error"] = why;
  }
  return j.dump();
}

}  // namespace latprof::cuda
