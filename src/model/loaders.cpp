// Placeholder until GGUF and safetensors loading lands: no path is recognised as a model file.
#include "model/loaders.hpp"

#include "core/error.hpp"

namespace latprof {
bool is_model_file(const std::string&) { return false; }
OpenedModel open_model_file(const std::string& path) {
  usage_error("cannot open model file '" + path + "': model files are not supported yet");
}
}  // namespace latprof
