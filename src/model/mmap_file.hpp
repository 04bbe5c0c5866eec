#pragma once
// Read-only memory-mapped files and the raw tensors the GGUF and safetensors parsers find in them.
// Parsers work on (pointer, size) so that they also run on in-memory buffers (fuzz targets, tests).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace latprof {

class MappedFile {
 public:
  // Maps `path` read-only; throws UsageError naming the file when it cannot.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Element types latprof can read from checkpoints.
enum class FileDType { f32, f16, bf16, q8_0 };
const char* file_dtype_name(FileDType t);
// Bytes for a row of n elements (Q8_0: n must be a multiple of 32).
size_t file_dtype_row_bytes(FileDType t, int64_t n);

// One tensor inside a mapped file, in Hugging Face orientation: rows x cols, row-major
// (a 1-D tensor has rows == 1).
struct FileTensor {
  std::string name;  // the name in the file
  std::string file;  // the file it lives in (for messages)
  FileDType dtype = FileDType::f32;
  std::vector<int64_t> shape;  // as the file states it, outermost first
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  // GGUF files converted from Hugging Face store Q and K rows interleaved per head
  // (row 2i+j of a head is row j*hd/2+i of the HF layout); > 0: number of heads to un-permute.
  int64_t permuted_heads = 0;

  int64_t rows() const;
  int64_t cols() const;
  int64_t numel() const;
};

}  // namespace latprof
