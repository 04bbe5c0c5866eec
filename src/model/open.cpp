#include "model/open.hpp"

#include <sys/stat.h>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "model/loaders.hpp"

namespace latprof {

namespace {
// A name that can only be a path: it has a slash or a model-file extension, or something by
// that name exists here (a file, directory or symbolic link, even a broken one).
bool names_a_path(const std::string& s) {
  struct stat st {};
  return s.find('/') != std::string::npos || s.ends_with(".json") || s.ends_with(".gguf") ||
         s.ends_with(".safetensors") || ::lstat(s.c_str(), &st) == 0;
}
// Whether name_or_path is a model file (GGUF or Hugging Face directory), after the path checks:
// path problems (missing, symbolic-link loop, a name too long, a device or a /proc file,
// unreadable) are reported here, naming the path, before any loader reads it.
bool checked_model_file(const std::string& name_or_path) {
  if (names_a_path(name_or_path)) check_input_path(name_or_path, "model", /*allow_dir=*/true);
  return is_model_file(name_or_path);
}
}  // namespace

std::string model_file_dtype(const std::string& name_or_path) {
  if (name_or_path.empty() || !checked_model_file(name_or_path)) return "";
  return open_model_file(name_or_path).file_dtype;
}

OpenedModel open_model(const std::string& name_or_path, uint64_t seed) {
  if (name_or_path.empty()) usage_error("--model needs a built-in model name or a path");
  if (checked_model_file(name_or_path)) return open_model_file(name_or_path);
  OpenedModel m;
  m.config = find_model(name_or_path);
  m.weights = make_synthetic_weights(seed);
  m.tokenizer = make_synthetic_tokenizer(m.config.vocab_size);
  m.source = name_or_path.ends_with(".json") ? name_or_path : "builtin";
  return m;
}

}  // namespace latprof
