// libFuzzer target: the model config reader (a model .json or a Hugging Face config.json as
// latprof reads it), then the cost model on what it accepted. Any input must either give a config
// whose costs are finite or raise UsageError; sanitizers catch everything else.
// Built by scripts/fuzz.sh.
#include <cmath>
#include <cstdlib>

#include "core/error.hpp"
#include "fuzz_json_common.hpp"
#include "model/config.hpp"
#include "model/cost_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace latprof;
  const auto j = fuzz::parse(data, size);
  if (!j) return 0;
  try {
    const ModelConfig m = model_from_json(*j, "<fuzz>");
    const Precision p = precision_for("fp16", 4, 2);
    const double w = weight_bytes(m, p);
    const double kv = kv_cache_bytes(m, p, 1, std::min<int64_t>(m.max_seq_len, 64));
    const Cost c = total(forward_cost(m, p, 1, 4, 0));
    if (!std::isfinite(w) || !std::isfinite(kv) || !std::isfinite(c.flops)) std::abort();
  } catch (const UsageError&) {
  }
  return 0;
}
