#include "core/path_checks.hpp"

#include <limits.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace latprof {

namespace {
constexpr long kProcMagic = 0x9fa0;       // PROC_SUPER_MAGIC
constexpr long kSysfsMagic = 0x62656572;  // SYSFS_MAGIC
}  // namespace

std::string path_name_problem(const std::string& path) {
  if (path.size() >= PATH_MAX)
    return "the name is too long (" + std::to_string(path.size()) + " characters; the limit is " +
           std::to_string(PATH_MAX - 1) + ")";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end - start > NAME_MAX)
      return "a name in the path is too long (" + std::to_string(end - start) +
             " characters; the limit is " + std::to_string(NAME_MAX) + ")";
    start = end + 1;
  }
  if (path.find('\0') != std::string::npos) return "the name contains a NUL byte";
  return "";
}

std::string errno_problem(int err) {
  switch (err) {
    case ENOENT:
      return "does not exist";
    case ELOOP:
      return "too many levels of symbolic links (a symbolic-link loop)";
    case ENAMETOOLONG:
      return "the name is too long";
    case EACCES:
    case EPERM:
      return "permission denied";
    case ENOTDIR:
      return "a component of the path is not a directory";
    case ENXIO:
      return "no such device, or a socket or FIFO with no reader";
    case EROFS:
      return "read-only file system";
    default:
      return std::strerror(err);
  }
}

const char* file_kind_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a regular file";
}

bool is_pseudo_fs(const std::string& path) {
  struct statfs fs {};
  std::filesystem::path p(path);
  // Walk up to the nearest existing directory.
  while (::statfs(p.empty() ? "." : p.c_str(), &fs) != 0) {
    if (p.empty()) return false;
    std::filesystem::path parent = p.parent_path();
    if (parent == p) return false;
    p = std::move(parent);
  }
  return long(fs.f_type) == kProcMagic || long(fs.f_type) == kSysfsMagic;
}

}  // namespace latprof
