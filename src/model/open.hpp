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

// The type most of a model file's matrices are stored in ("F16", "BF16", "F32", "Q8_0"), or ""
// for a built-in model or a model config. The path is checked as open_model checks it (the same
// errors); the file's header is read, its weights are not.
std::string model_file_dtype(const std::string& name_or_path);

}  // namespace latprof
