#include "core/input_file.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/path_checks.hpp"

namespace latprof {

std::string cap_text(size_t bytes) {
  if (bytes % (size_t(1) << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

void check_input_path(const std::string& path, const std::string& what, bool allow_dir,
                      bool allow_fifo) {
  const std::string where = what + " '" + path + "'";
  if (path.empty()) usage_error(what + " needs a path (got an empty string)");
  if (const std::string why = path_name_problem(path); !why.empty())
    usage_error(where + ": " + why);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) usage_error(where + ": " + errno_problem(errno));
  if (S_ISDIR(st.st_mode)) {
    if (allow_dir) {
      if (::access(path.c_str(), R_OK | X_OK) != 0)
        usage_error(where + ": the directory is not readable");
      return;
    }
    usage_error(where + " is a directory; give a file");
  }
  if (allow_fifo && S_ISFIFO(st.st_mode)) return;
  if (!S_ISREG(st.st_mode))
    usage_error(where + " is " + file_kind_name(st.st_mode) + ", not a regular file" +
                (allow_fifo ? " or a pipe" : ""));
  if (is_pseudo_fs(path)) usage_error(where + " is a /proc or /sys file, not a data file");
  if (::access(path.c_str(), R_OK) != 0) usage_error(where + ": " + errno_problem(errno));
}

std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes) {
  const std::string where = what + " '" + path + "'";
  if (path.empty()) usage_error(what + " needs a path (got an empty string)");
  if (const std::string why = path_name_problem(path); !why.empty())
    usage_error(where + ": " + why);
  // O_NONBLOCK: opening a FIFO with no writer must not wait; reads block again below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) usage_error(where + ": " + errno_problem(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    usage_error(where + ": " + errno_problem(e));
  }
  if (S_ISDIR(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISBLK(st.st_mode)) {
    ::close(fd);
    usage_error(where + " is " + file_kind_name(st.st_mode) + "; give a file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      usage_error(where + ": cannot read: " + std::strerror(e));
    }
    if (n == 0) break;
    if (out.size() + size_t(n) > max_bytes) {
      ::close(fd);
      usage_error(where + " is larger than the cap of " + cap_text(max_bytes) +
                  "; give a smaller file");
    }
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

}  // namespace latprof
