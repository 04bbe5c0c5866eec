#include "runner/preflight.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "model/open.hpp"
#include "runner/model.hpp"
#include "runner/run_common.hpp"

namespace latprof {

void check_variants_fit(const std::vector<RunOptions>& variants) {
  const RunOptions& o = variants.at(0);
  OpenedModel om = open_model(o.model, o.seed);
  const ModelConfig& cfg = om.config;
  validate_run_options(o, cfg.max_seq_len);
  // The prompt length sets the activation rows; a synthetic prompt has exactly --input tokens.
  const int64_t n_in =
      o.prompt.empty() ? o.input : int64_t(om.tokenizer->encode(o.prompt, true).size());
  if (n_in + o.output > cfg.max_seq_len)
    usage_error("the prompt (" + std::to_string(n_in) + " tokens) + --output " +
                std::to_string(o.output) + " exceeds the model's context of " +
                std::to_string(cfg.max_seq_len));
  for (const RunOptions& one : variants) {
    const BackendOptions bo = run_detail::run_backend_options(one);
    std::string why_not_cuda;
    const std::unique_ptr<Backend> b = create_backend(bo, &why_not_cuda);
    check_backend_kv(*b, bo.kv);
    const Precision p = precision_for(one.dtype, 4, 2);
    const WeightType w = weight_type_for(p.weights);
    check_backend_runs(*b, w);
    LoadedModel::check_fits(
        LoadedModel::footprint(cfg, w, *b, engine_shape_for_run(one, cfg, *b, n_in)), *b,
        cfg.name + " with --dtype " + one.dtype + " --kv-dtype " + one.kv_dtype);
  }
}

}  // namespace latprof
