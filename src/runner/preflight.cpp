#include "runner/preflight.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "model/open.hpp"
#include "runner/model.hpp"

namespace latprof {

void check_dtypes_fit(const RunOptions& o, const std::vector<std::string>& dtypes) {
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
  BackendOptions bo;
  bo.kind = o.backend;
  bo.threads = o.threads;
  bo.graphs = o.graphs;
  bo.kv = kv_type_for(o.kv_dtype);
  std::string why_not_cuda;
  const std::unique_ptr<Backend> b = create_backend(bo, &why_not_cuda);
  check_backend_kv(*b, bo.kv);
  for (const std::string& d : dtypes) {
    const Precision p = precision_for(d, 4, 2);
    const WeightType w = weight_type_for(p.weights);
    check_backend_runs(*b, w);
    RunOptions one = o;
    one.dtype = d;
    LoadedModel::check_fits(
        LoadedModel::footprint(cfg, w, *b, engine_shape_for_run(one, cfg, *b, n_in)), *b,
        cfg.name + " with --dtype " + d);
  }
}

}  // namespace latprof
