#pragma once
// Model files: GGUF (v3, llama family) and Hugging Face safetensors directories.
#include <string>

#include "model/open.hpp"

namespace latprof {
// True when `path` names a file or directory that looks like a model file (by name or magic).
bool is_model_file(const std::string& path);
// Opens it: config from metadata, weights read on demand, the model's tokenizer.
// Throws UsageError naming the file and the field on any problem.
OpenedModel open_model_file(const std::string& path);
}  // namespace latprof
