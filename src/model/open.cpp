#include "model/open.hpp"

#include "model/loaders.hpp"

namespace latprof {

OpenedModel open_model(const std::string& name_or_path, uint64_t seed) {
  if (is_model_file(name_or_path)) return open_model_file(name_or_path);
  OpenedModel m;
  m.config = find_model(name_or_path);
  m.weights = make_synthetic_weights(seed);
  m.tokenizer = make_synthetic_tokenizer(m.config.vocab_size);
  m.source = name_or_path.ends_with(".json") ? name_or_path : "builtin";
  return m;
}

}  // namespace latprof
