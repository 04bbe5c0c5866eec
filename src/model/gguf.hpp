#pragma once
// GGUF (versions 2 and 3) parser: header, metadata key/values of every type (arrays included),
// tensor infos, alignment (general.alignment, default 32) and the data section. It works on a
// buffer (a memory-mapped file or, for the fuzz target, any bytes): every count, offset and size
// is checked against the buffer before anything is allocated, and every error is a UsageError
// that names the file and the field or tensor.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/mmap_file.hpp"

namespace latprof::gguf {

enum class ValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
const char* value_type_name(ValueType t);

// One metadata value. Scalars: num (every numeric type, exact for integers below 2^53) plus
// i/u for exact 64-bit integers; strings: str. Arrays: elem is the element type; numeric arrays
// fill nums, string arrays strs, arrays of arrays nested.
struct Value {
  ValueType type = ValueType::u8;
  double num = 0;
  int64_t i = 0;
  uint64_t u = 0;
  std::string str;
  ValueType elem = ValueType::u8;
  std::vector<double> nums;
  std::vector<std::string> strs;
  std::vector<Value> nested;
  uint64_t count = 0;  // array length

  bool is_integer() const;
  bool is_number() const;  // any integer or float scalar
};

// ggml tensor types (the numbering of the GGUF specification).
enum TensorType : uint32_t { F32 = 0, F16 = 1, Q8_0 = 8, BF16 = 30 };
// Name of any ggml type number ("Q5_K"), or "type N" when unknown.
std::string tensor_type_name(uint32_t t);

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ne[0] (contiguous) first, as in the file
  uint32_t type = 0;
  uint64_t offset = 0;  // relative to the data section
  size_t nbytes = 0;
  const uint8_t* data = nullptr;
};

struct File {
  std::string path;
  uint32_t version = 0;
  std::vector<std::pair<std::string, Value>> kv;  // in file order
  std::unordered_map<std::string, size_t> kv_index;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, size_t> tensor_index;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;
  size_t file_size = 0;

  const Value* find(const std::string& key) const;
  const TensorInfo* find_tensor(const std::string& name) const;
  // Typed look-ups; throw UsageError naming the file and key on a missing key or a wrong type.
  int64_t get_int(const std::string& key) const;
  std::optional<int64_t> opt_int(const std::string& key) const;
  std::optional<double> opt_float(const std::string& key) const;
  std::optional<bool> opt_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::optional<std::string> opt_string(const std::string& key) const;
  // Arrays; nullptr when absent, UsageError when present with another element type.
  const std::vector<std::string>* opt_string_array(const std::string& key) const;
  const std::vector<double>* opt_number_array(const std::string& key) const;
};

// Parses a GGUF buffer. `path` is used in messages. Tensor types other than F32, F16, BF16 and
// Q8_0 are rejected, naming the tensor. The returned tensor data pointers point into `data`.
File parse(const uint8_t* data, size_t size, const std::string& path);

// The tensor as a FileTensor in Hugging Face orientation (dims reversed).
FileTensor to_file_tensor(const File& f, const TensorInfo& t);

}  // namespace latprof::gguf
