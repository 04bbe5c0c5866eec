#pragma once
// Opening a model by name (built-in config, synthetic weights) or by path (a GGUF file or a
// Hugging Face directory with safetensors, see loaders.hpp).
#include <memory>
#include <string>

#include "model/config.hpp"
#include "model/tokenizer.hpp"
#include "model/weights.hpp"

namespace latprof {

struct OpenedModel {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string source;       // "builtin" or the path
  std::string file_format;  // "", "gguf", "safetensors"
  std::string file_dtype;   // the checkpoint's tensor type, e.g. "F16", "Q8_0"
};

OpenedModel open_model(const std::string& name_or_path, uint64_t seed);

}  // namespace latprof
