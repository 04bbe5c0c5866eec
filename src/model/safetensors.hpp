#pragma once
// safetensors parser: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}} and the byte
// buffer the offsets are relative to. Works on any buffer (memory-mapped file, fuzz input); every
// offset is checked against the buffer and the shape, errors are UsageErrors naming the file and
// the tensor or field.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/mmap_file.hpp"

namespace latprof::safetensors {

struct Tensor {
  std::string name;
  std::string dtype;  // "F16", "BF16", "F32", ... as in the file
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};

struct File {
  std::string path;
  size_t header_bytes = 0;
  std::vector<Tensor> tensors;
  std::unordered_map<std::string, size_t> index;
  std::map<std::string, std::string> metadata;
};

File parse(const uint8_t* data, size_t size, const std::string& path);

// The tensor as a FileTensor; throws UsageError naming the tensor unless its dtype is F16, BF16
// or F32.
FileTensor to_file_tensor(const File& f, const Tensor& t);

}  // namespace latprof::safetensors
