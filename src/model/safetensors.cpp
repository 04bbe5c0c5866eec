#include "model/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace latprof::safetensors {

namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit
constexpr int64_t kMaxElements = int64_t(1) << 40;

size_t dtype_size(const std::string& d) {
  static const std::pair<const char*, size_t> kTypes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (auto& [n, s] : kTypes)
    if (d == n) return s;
  return 0;
}

}  // namespace

File parse(const uint8_t* data, size_t size, const std::string& path) {
  File f;
  f.path = path;
  auto fail = [&](const std::string& what) -> void {
    usage_error("safetensors file '" + path + "': " + what);
  };
  if (size < 8) fail("truncated: " + std::to_string(size) + " bytes, no header length");
  uint64_t n = 0;
  std::memcpy(&n, data, 8);
  if (n < 2 || n > kMaxHeader)
    fail("header length " + std::to_string(n) + " is absurd (not a safetensors file?)");
  if (n > size - 8)
    fail("header length " + std::to_string(n) + " points past the end of the file (" +
         std::to_string(size) + " bytes)");
  f.header_bytes = size_t(n);
  const char* hb = reinterpret_cast<const char*>(data + 8);
  if (hb[0] != '{') fail("header is not a JSON object (not a safetensors file?)");
  nlohmann::json j = nlohmann::json::parse(hb, hb + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("header is not valid JSON");
  const uint8_t* buf = data + 8 + n;
  const uint64_t buf_size = size - 8 - n;

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) fail("__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m)
        if (m.value().is_string()) f.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    const std::string what = "tensor " + name;
    if (!e.is_object()) fail(what + ": entry is not an object");
    auto d = e.find("dtype");
    if (d == e.end() || !d->is_string()) fail(what + ": missing field 'dtype'");
    Tensor t;
    t.name = name;
    t.dtype = d->get<std::string>();
    const size_t es = dtype_size(t.dtype);
    if (es == 0) fail(what + ": unknown dtype '" + t.dtype + "'");
    auto s = e.find("shape");
    if (s == e.end() || !s->is_array() || s->size() > 8)
      fail(what + ": field 'shape' must be an array of at most 8 sizes");
    int64_t elems = 1;
    for (const auto& x : *s) {
      if (!x.is_number_unsigned())
        fail(what + ": field 'shape' has a non-integer or negative size");
      const uint64_t v = x.get<uint64_t>();
      if (v > uint64_t(kMaxElements) || (v > 0 && uint64_t(elems) > uint64_t(kMaxElements) / v))
        fail(what + ": field 'shape' has absurd dimensions");
      elems *= int64_t(v);
      t.shape.push_back(int64_t(v));
    }
    auto o = e.find("data_offsets");
    if (o == e.end() || !o->is_array() || o->size() != 2 || !(*o)[0].is_number_unsigned() ||
        !(*o)[1].is_number_unsigned())
      fail(what + ": field 'data_offsets' must be [begin, end]");
    const uint64_t b = (*o)[0].get<uint64_t>(), en = (*o)[1].get<uint64_t>();
    if (b > en || en > buf_size)
      fail(what + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
           "] lie outside the data buffer of " + std::to_string(buf_size) + " bytes");
    if (en - b != uint64_t(elems) * es)
      fail(what + ": data_offsets span " + std::to_string(en - b) + " bytes but shape and dtype " +
           t.dtype + " need " + std::to_string(uint64_t(elems) * es));
    t.data = buf + b;
    t.nbytes = size_t(en - b);
    if (en > b) ranges.emplace_back(b, en);
    f.index.emplace(name, f.tensors.size());
    f.tensors.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail("tensor data ranges overlap");
  return f;
}

FileTensor to_file_tensor(const File& f, const Tensor& t) {
  FileTensor ft;
  ft.name = t.name;
  ft.file = f.path;
  if (t.dtype == "F32")
    ft.dtype = FileDType::f32;
  else if (t.dtype == "F16")
    ft.dtype = FileDType::f16;
  else if (t.dtype == "BF16")
    ft.dtype = FileDType::bf16;
  else
    usage_error("safetensors file '" + f.path + "': tensor " + t.name + " has dtype " + t.dtype +
                "; supported: F16, BF16, F32");
  ft.shape = t.shape;
  ft.data = t.data;
  ft.nbytes = t.nbytes;
  return ft;
}

}  // namespace latprof::safetensors
