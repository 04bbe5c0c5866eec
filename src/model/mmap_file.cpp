#include "model/mmap_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace latprof {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) usage_error("cannot open model file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    usage_error("cannot stat model file '" + path + "': " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    usage_error("model file '" + path + "' is not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      usage_error("cannot memory-map model file '" + path + "': " + std::strerror(e));
    }
    // Weights are read once, front to back.
    ::madvise(p, size_, MADV_SEQUENTIAL);
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

const char* file_dtype_name(FileDType t) {
  switch (t) {
    case FileDType::f32:
      return "F32";
    case FileDType::f16:
      return "F16";
    case FileDType::bf16:
      return "BF16";
    case FileDType::q8_0:
      return "Q8_0";
  }
  return "?";
}

size_t file_dtype_row_bytes(FileDType t, int64_t n) {
  switch (t) {
    case FileDType::f32:
      return size_t(n) * 4;
    case FileDType::f16:
    case FileDType::bf16:
      return size_t(n) * 2;
    case FileDType::q8_0:
      return size_t(n / 32) * 34;
  }
  return 0;
}

int64_t FileTensor::rows() const {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}
int64_t FileTensor::cols() const {
  return shape.empty() ? 1 : shape.back();
}
int64_t FileTensor::numel() const {
  return rows() * cols();
}

}  // namespace latprof
