#include "model/gguf.hpp"

#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace latprof::gguf {

namespace {

constexpr uint64_t kMaxTensors = 1u << 20;
constexpr uint64_t kMaxKv = 1u << 20;
constexpr uint64_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kMaxElements = uint64_t(1) << 40;
constexpr int kMaxNesting = 3;

// Bounds-checked little-endian reader over the buffer.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path)
      : p_(data), size_(size), path_(path) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    usage_error("GGUF file '" + path_ + "': " + what + " (at byte " + std::to_string(pos_) +
                " of " + std::to_string(size_) + ")");
  }
  void need(size_t n, const std::string& field) const {
    if (n > remaining())
      fail("truncated while reading " + field + ": needs " + std::to_string(n) +
           " bytes, file has " + std::to_string(remaining()) + " left");
  }
  template <typename T>
  T get(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const std::string& field) {
    const uint64_t n = get<uint64_t>(field + " length");
    if (n > remaining())
      fail(field + " has length " + std::to_string(n) + ", past the end of the file");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }
  void skip(size_t n, const std::string& field) {
    need(n, field);
    pos_ += n;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean:
      return 1;
    case ValueType::u16:
    case ValueType::i16:
      return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32:
      return 4;
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64:
      return 8;
    default:
      return 0;
  }
}

void read_scalar(Reader& r, ValueType t, Value& v, const std::string& field) {
  v.type = t;
  switch (t) {
    case ValueType::u8:
      v.u = r.get<uint8_t>(field);
      v.i = int64_t(v.u);
      v.num = double(v.u);
      break;
    case ValueType::i8:
      v.i = r.get<int8_t>(field);
      v.u = uint64_t(v.i);
      v.num = double(v.i);
      break;
    case ValueType::u16:
      v.u = r.get<uint16_t>(field);
      v.i = int64_t(v.u);
      v.num = double(v.u);
      break;
    case ValueType::i16:
      v.i = r.get<int16_t>(field);
      v.u = uint64_t(v.i);
      v.num = double(v.i);
      break;
    case ValueType::u32:
      v.u = r.get<uint32_t>(field);
      v.i = int64_t(v.u);
      v.num = double(v.u);
      break;
    case ValueType::i32:
      v.i = r.get<int32_t>(field);
      v.u = uint64_t(v.i);
      v.num = double(v.i);
      break;
    case ValueType::u64:
      v.u = r.get<uint64_t>(field);
      v.i = int64_t(v.u);
      v.num = double(v.u);
      break;
    case ValueType::i64:
      v.i = r.get<int64_t>(field);
      v.u = uint64_t(v.i);
      v.num = double(v.i);
      break;
    case ValueType::f32:
      v.num = r.get<float>(field);
      break;
    case ValueType::f64:
      v.num = r.get<double>(field);
      break;
    case ValueType::boolean: {
      const uint8_t b = r.get<uint8_t>(field);
      if (b > 1) r.fail(field + " is a bool with value " + std::to_string(b));
      v.u = b;
      v.i = b;
      v.num = b;
      break;
    }
    default:
      r.fail(field + " has unknown value type " + std::to_string(uint32_t(t)));
  }
}

void read_value(Reader& r, ValueType t, Value& v, const std::string& field, int depth) {
  if (t == ValueType::string) {
    v.type = t;
    v.str = r.str(field);
    return;
  }
  if (t != ValueType::array) {
    read_scalar(r, t, v, field);
    return;
  }
  v.type = t;
  if (depth >= kMaxNesting)
    r.fail(field + ": arrays nested deeper than " + std::to_string(kMaxNesting));
  const uint32_t et = r.get<uint32_t>(field + " element type");
  if (et > uint32_t(ValueType::f64))
    r.fail(field + " has unknown array element type " + std::to_string(et));
  v.elem = ValueType(et);
  v.count = r.get<uint64_t>(field + " array length");
  // Every element takes at least its size (strings 8 bytes, arrays 12): reject counts that
  // cannot fit before allocating.
  const size_t min_elem = v.elem == ValueType::string  ? 8
                          : v.elem == ValueType::array ? 12
                                                       : scalar_size(v.elem);
  if (v.count > r.remaining() / min_elem)
    r.fail(field + " claims " + std::to_string(v.count) + " elements, more than the file can hold");
  const size_t n = size_t(v.count);
  if (v.elem == ValueType::string) {
    v.strs.reserve(n);
    for (size_t k = 0; k < n; ++k) v.strs.push_back(r.str(field + "[" + std::to_string(k) + "]"));
  } else if (v.elem == ValueType::array) {
    v.nested.resize(n);
    for (size_t k = 0; k < n; ++k)
      read_value(r, ValueType::array, v.nested[k], field + "[" + std::to_string(k) + "]",
                 depth + 1);
  } else {
    v.nums.resize(n);
    Value tmp;
    for (size_t k = 0; k < n; ++k) {
      read_scalar(r, v.elem, tmp, field);
      v.nums[k] = tmp.num;
    }
  }
}

struct TypeTraits {
  uint32_t block = 0;  // elements per block
  uint32_t bytes = 0;  // bytes per block
};

TypeTraits traits(uint32_t t) {
  switch (t) {
    case F32:
      return {1, 4};
    case F16:
      return {1, 2};
    case BF16:
      return {1, 2};
    case Q8_0:
      return {32, 34};
    default:
      return {};
  }
}

}  // namespace

const char* value_type_name(ValueType t) {
  static const char* const kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                       "int32",  "float32", "bool",   "string", "array",
                                       "uint64", "int64",   "float64"};
  const auto i = uint32_t(t);
  return i < 13 ? kNames[i] : "unknown";
}

std::string tensor_type_name(uint32_t t) {
  static const char* const kNames[] = {
      "F32",      "F16",      "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
      "Q8_0",     "Q8_1",     "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS",  "IQ2_XS",   "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",       "I16",      "I32",     "I64",   "F64",    "IQ1_M", "BF16",  "Q4_0_4_4",
      "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",   "TQ2_0"};
  if (t < sizeof(kNames) / sizeof(kNames[0])) return kNames[t];
  return "type " + std::to_string(t);
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::u16:
    case ValueType::i16:
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::u64:
    case ValueType::i64:
      return true;
    default:
      return false;
  }
}
bool Value::is_number() const {
  return is_integer() || type == ValueType::f32 || type == ValueType::f64;
}

const Value* File::find(const std::string& key) const {
  auto it = kv_index.find(key);
  return it == kv_index.end() ? nullptr : &kv[it->second].second;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index.find(name);
  return it == tensor_index.end() ? nullptr : &tensors[it->second];
}

namespace {
[[noreturn]] void bad_key(const File& f, const std::string& key, const Value& v, const char* want) {
  usage_error("GGUF file '" + f.path + "': metadata key '" + key + "' has type " +
              value_type_name(v.type) + "; expected " + want);
}
}  // namespace

std::optional<int64_t> File::opt_int(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) bad_key(*this, key, *v, "an integer");
  if (v->type == ValueType::u64 && v->u > uint64_t(INT64_MAX))
    usage_error("GGUF file '" + path + "': metadata key '" + key + "' is out of range");
  return v->i;
}

int64_t File::get_int(const std::string& key) const {
  auto v = opt_int(key);
  if (!v) usage_error("GGUF file '" + path + "': missing metadata key '" + key + "'");
  return *v;
}

std::optional<double> File::opt_float(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_key(*this, key, *v, "a number");
  return v->num;
}

std::optional<bool> File::opt_bool(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::boolean) bad_key(*this, key, *v, "a bool");
  return v->u != 0;
}

std::optional<std::string> File::opt_string(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::string) bad_key(*this, key, *v, "a string");
  return v->str;
}

std::string File::get_string(const std::string& key) const {
  auto v = opt_string(key);
  if (!v) usage_error("GGUF file '" + path + "': missing metadata key '" + key + "'");
  return *v;
}

const std::vector<std::string>* File::opt_string_array(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return nullptr;
  if (v->type != ValueType::array || v->elem != ValueType::string)
    bad_key(*this, key, *v, "an array of strings");
  return &v->strs;
}

const std::vector<double>* File::opt_number_array(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return nullptr;
  if (v->type != ValueType::array || scalar_size(v->elem) == 0 || v->elem == ValueType::boolean)
    bad_key(*this, key, *v, "an array of numbers");
  return &v->nums;
}

File parse(const uint8_t* data, size_t size, const std::string& path) {
  File f;
  f.path = path;
  f.file_size = size;
  Reader r(data, size, path);
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) r.fail("not a GGUF file (bad magic)");
  r.skip(4, "magic");
  f.version = r.get<uint32_t>("version");
  if (f.version != 2 && f.version != 3)
    r.fail("unsupported GGUF version " + std::to_string(f.version) + "; supported: 2, 3");
  const uint64_t n_tensors = r.get<uint64_t>("tensor_count");
  const uint64_t n_kv = r.get<uint64_t>("metadata_kv_count");
  // A tensor info takes at least 24 bytes, a key/value at least 13.
  if (n_tensors > kMaxTensors || n_tensors > r.remaining() / 24)
    r.fail("tensor_count " + std::to_string(n_tensors) +
           " is absurd: the rest of the file cannot hold that many (truncated or corrupt?)");
  if (n_kv > kMaxKv || n_kv > r.remaining() / 13)
    r.fail("metadata_kv_count " + std::to_string(n_kv) +
           " is absurd: the rest of the file cannot hold that many (truncated or corrupt?)");

  f.kv.reserve(size_t(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.str("metadata key #" + std::to_string(k));
    const uint32_t t = r.get<uint32_t>("type of metadata key '" + key + "'");
    if (t > uint32_t(ValueType::f64))
      r.fail("metadata key '" + key + "' has unknown value type " + std::to_string(t));
    Value v;
    read_value(r, ValueType(t), v, "metadata key '" + key + "'", 0);
    if (f.kv_index.count(key)) r.fail("metadata key '" + key + "' appears twice");
    f.kv_index.emplace(key, f.kv.size());
    f.kv.emplace_back(std::move(key), std::move(v));
  }

  if (const Value* a = f.find("general.alignment")) {
    if (!a->is_integer() || a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > (1u << 20))
      usage_error("GGUF file '" + path +
                  "': metadata key 'general.alignment' must be a power of "
                  "two up to 1 MiB");
    f.alignment = a->u;
  }

  f.tensors.reserve(size_t(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo t;
    t.name = r.str("name of tensor #" + std::to_string(k));
    const std::string what = "tensor " + t.name;
    const uint32_t nd = r.get<uint32_t>(what + " n_dims");
    if (nd == 0 || nd > kMaxDims)
      r.fail(what + " has " + std::to_string(nd) + " dimensions; expected 1 to 4");
    uint64_t elems = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t n = r.get<uint64_t>(what + " dimension");
      if (n == 0 || n > kMaxElements || elems > kMaxElements / n)
        r.fail(what + " has absurd dimension " + std::to_string(n));
      elems *= n;
      t.dims.push_back(n);
    }
    t.type = r.get<uint32_t>(what + " type");
    t.offset = r.get<uint64_t>(what + " offset");
    const TypeTraits tr = traits(t.type);
    if (tr.block == 0)
      usage_error("GGUF file '" + path + "': tensor " + t.name + " has type " +
                  tensor_type_name(t.type) + "; supported: F32, F16, BF16, Q8_0");
    if (t.dims[0] % tr.block != 0)
      usage_error("GGUF file '" + path + "': tensor " + t.name + " has row length " +
                  std::to_string(t.dims[0]) + ", not a multiple of the " +
                  tensor_type_name(t.type) + " block of " + std::to_string(tr.block));
    t.nbytes = size_t(elems / tr.block * tr.bytes);
    if (f.tensor_index.count(t.name)) r.fail("tensor " + t.name + " appears twice");
    f.tensor_index.emplace(t.name, f.tensors.size());
    f.tensors.push_back(std::move(t));
  }

  const uint64_t pos = r.pos();
  f.data_offset = (pos + f.alignment - 1) / f.alignment * f.alignment;
  if (f.data_offset > size && !f.tensors.empty())
    usage_error("GGUF file '" + path + "': data section starts at byte " +
                std::to_string(f.data_offset) + ", past the end of the file (" +
                std::to_string(size) + " bytes)");
  for (auto& t : f.tensors) {
    if (t.offset % f.alignment != 0)
      usage_error("GGUF file '" + path + "': tensor " + t.name + " offset " +
                  std::to_string(t.offset) + " is not a multiple of the alignment " +
                  std::to_string(f.alignment));
    const uint64_t avail = size - f.data_offset;
    if (t.offset > avail || t.nbytes > avail - t.offset)
      usage_error("GGUF file '" + path + "': tensor " + t.name + " data [" +
                  std::to_string(f.data_offset + t.offset) + ", " +
                  std::to_string(f.data_offset + t.offset + t.nbytes) +
                  ") lies past the end of the file (" + std::to_string(size) + " bytes)");
    t.data = data + f.data_offset + t.offset;
  }
  return f;
}

FileTensor to_file_tensor(const File& f, const TensorInfo& t) {
  FileTensor ft;
  ft.name = t.name;
  ft.file = f.path;
  switch (t.type) {
    case F32:
      ft.dtype = FileDType::f32;
      break;
    case F16:
      ft.dtype = FileDType::f16;
      break;
    case BF16:
      ft.dtype = FileDType::bf16;
      break;
    case Q8_0:
      ft.dtype = FileDType::q8_0;
      break;
    default:
      usage_error("GGUF file '" + f.path + "': tensor " + t.name + " has type " +
                  tensor_type_name(t.type) + "; supported: F32, F16, BF16, Q8_0");
  }
  for (auto it = t.dims.rbegin(); it != t.dims.rend(); ++it) ft.shape.push_back(int64_t(*it));
  ft.data = t.data;
  ft.nbytes = t.nbytes;
  return ft;
}

}  // namespace latprof::gguf
