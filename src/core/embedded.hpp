#pragma once
// Model and hardware JSON files compiled into the binary (see cmake/embed.cmake).
#include <string>
#include <vector>

namespace latprof::embedded {
struct File {
  std::string name;  // file name without extension, e.g. "llama-2-7b"
  std::string text;  // the JSON text
};
const std::vector<File>& models();
const std::vector<File>& hardware();
}  // namespace latprof::embedded
