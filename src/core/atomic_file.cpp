#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/path_checks.hpp"

namespace latprof {

namespace fs = std::filesystem;

namespace {

// descriptor: an open file of this process named through /proc/<pid>/fd/N or /dev/fd/N
// (/dev/stdout, /dev/stderr): whatever it is (terminal, pipe, file, socket), it is written in
// place.
enum class OutKind { create, regular, chardev, fifo, descriptor };

bool in_place(OutKind k) {
  return k == OutKind::chardev || k == OutKind::fifo || k == OutKind::descriptor;
}

bool names_descriptor(const std::string& p) {
  return p.starts_with("/dev/fd/") ||
         (p.starts_with("/proc/") && p.find("/fd/") != std::string::npos);
}

struct OutTarget {
  std::string path;  // after following symbolic links
  OutKind kind = OutKind::create;
  mode_t mode = 0644;  // of an existing regular file (kept when it is replaced)
};

std::string dir_of(const std::string& path) {
  const fs::path d = fs::path(path).parent_path();
  return d.empty() ? "." : d.string();
}

// Resolves `path` by the output rules; throws UsageError "<label>: <problem>".
OutTarget resolve_output(const std::string& path, const std::string& label) {
  if (path.empty()) usage_error(label + " needs a file name (got an empty string)");
  const std::string where = label + " " + path;
  if (const std::string why = path_name_problem(path); !why.empty())
    usage_error(where + ": " + why);
  OutTarget t;
  t.path = path;
  struct stat st {};
  // Follow symbolic links one by one, so a dangling link names the file to create.
  for (int hops = 0;; ++hops) {
    if (::lstat(t.path.c_str(), &st) != 0) {
      if (errno != ENOENT) usage_error(where + ": " + errno_problem(errno));
      t.kind = OutKind::create;
      break;
    }
    if (!S_ISLNK(st.st_mode)) break;
    if (hops >= 40) usage_error(where + ": " + errno_problem(ELOOP));
    if (names_descriptor(t.path)) {
      if (::stat(t.path.c_str(), &st) != 0) usage_error(where + ": " + errno_problem(errno));
      if (S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode))
        usage_error(where + " is " + file_kind_name(st.st_mode) + "; give a file name");
      t.kind = OutKind::descriptor;
      return t;
    }
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(t.path.c_str(), buf, sizeof buf - 1);
    if (n < 0) usage_error(where + ": " + errno_problem(errno));
    const std::string target(buf, size_t(n));
    t.path = target.starts_with("/") ? target : (fs::path(dir_of(t.path)) / target).string();
    if (const std::string why = path_name_problem(t.path); !why.empty())
      usage_error(where + ": the link's target: " + why);
  }
  if (t.kind == OutKind::create && ::lstat(t.path.c_str(), &st) == 0) t.kind = OutKind::regular;
  if (t.kind != OutKind::create) {
    if (S_ISDIR(st.st_mode)) usage_error(where + " is a directory; give a file name");
    if (S_ISSOCK(st.st_mode) || S_ISBLK(st.st_mode))
      usage_error(where + " is " + file_kind_name(st.st_mode) + "; give a file name");
    if (S_ISCHR(st.st_mode)) t.kind = OutKind::chardev;
    if (S_ISFIFO(st.st_mode)) t.kind = OutKind::fifo;
    if (S_ISREG(st.st_mode)) {
      t.kind = OutKind::regular;
      t.mode = st.st_mode & 07777;
    }
    if (::access(t.path.c_str(), W_OK) != 0)
      usage_error(where + " exists and is not writable: " + errno_problem(errno));
    if (in_place(t.kind)) return t;
  }
  // A new or replaced regular file: a temporary file goes into its directory.
  const std::string dir = dir_of(t.path);
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0) {
    if (errno == ENOENT)
      usage_error(where + ": directory " + dir + " does not exist; create it first");
    usage_error(where + ": directory " + dir + ": " + errno_problem(errno));
  }
  if (!S_ISDIR(ds.st_mode)) usage_error(where + ": " + dir + " is not a directory");
  if (is_pseudo_fs(dir)) usage_error(where + " is under /proc or /sys; write the file elsewhere");
  struct statvfs vs {};
  if (::statvfs(dir.c_str(), &vs) == 0 && (vs.f_flag & ST_RDONLY))
    usage_error(where + ": directory " + dir + " is on a read-only file system");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    usage_error(where + ": directory " + dir + " is not writable");
  return t;
}

// Writes all of `data` to fd; false with errno set on failure.
bool write_all(int fd, const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

// A character device, FIFO or descriptor: opened and written in place (no temporary file, no
// rename); a descriptor is appended to, after what this process printed to stdout.
void write_in_place(const OutTarget& t, const std::string& path, const std::string& content) {
  int fd;
  if (t.kind == OutKind::descriptor) {
    std::fflush(stdout);
    fd = ::open(t.path.c_str(), O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC);
  } else if (t.kind == OutKind::fifo) {
    fd = ::open(t.path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENXIO)
      usage_error("cannot write " + path + ": the FIFO has no reader; start the reader first");
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  } else {
    fd = ::open(t.path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
  }
  if (fd < 0) usage_error("cannot write " + path + ": " + errno_problem(errno));
  if (!write_all(fd, content.data(), content.size())) {
    const int e = errno;
    ::close(fd);
    usage_error("cannot write " + path + ": " + std::strerror(e));
  }
  ::close(fd);
}

}  // namespace

void check_writable(const std::string& path, const char* flag) {
  resolve_output(path, flag);
}

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
  std::vector<std::pair<std::string, std::string>> seen;  // {canonical target, flag}
  for (const auto& [flag, path] : outputs) {
    if (path.empty()) continue;
    const OutTarget t = resolve_output(path, flag);
    if (t.kind == OutKind::chardev || t.kind == OutKind::descriptor) continue;
    std::error_code ec;
    std::string key = fs::weakly_canonical(fs::path(t.path), ec).string();
    if (ec) key = t.path;
    for (const auto& [k, f] : seen)
      if (k == key)
        usage_error(f + " and " + flag + " name the same file (" + path +
                    "); give each output its own file");
    seen.emplace_back(key, flag);
  }
}

void check_not_an_input(const std::string& path, const char* flag,
                        const std::vector<std::string>& inputs) {
  if (path.empty()) return;
  struct stat out {};
  if (::stat(path.c_str(), &out) != 0 || !S_ISREG(out.st_mode)) return;  // new, or a device
  for (const std::string& in : inputs) {
    struct stat st {};
    if (::stat(in.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino)
      usage_error(std::string(flag) + " " + path + " is the input " + in +
                  "; write the output to another file");
  }
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const OutTarget t = resolve_output(path, "cannot write");
  if (in_place(t.kind)) return write_in_place(t, path, content);
  const fs::path target(t.path);
  std::string name = ".";
  name += target.filename().string();
  name += ".tmp.XXXXXX";
  std::string tmpl = (fs::path(dir_of(t.path)) / name).string();
  const int fd = mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) usage_error("cannot write " + path + ": " + std::strerror(errno));
  if (!write_all(fd, content.data(), content.size())) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    ::unlink(tmpl.c_str());
    usage_error("cannot write " + path + ": " + err);
  }
  fchmod(fd, t.mode);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmpl.c_str());
    usage_error("cannot write " + path + ": " + std::strerror(errno));
  }
  if (std::rename(tmpl.c_str(), t.path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmpl.c_str());
    usage_error("cannot write " + path + ": " + err);
  }
}

void append_line_atomic(const std::string& path, const std::string& line) {
  const OutTarget t = resolve_output(path, "cannot append to");
  if (in_place(t.kind)) return write_in_place(t, path, line + "\n");
  const int fd = ::open(t.path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) usage_error("cannot append to " + path + ": " + errno_problem(errno));
  // The lock orders appenders that write in several pieces (none here) and the newline repair
  // below; O_APPEND alone already keeps one write() per line whole.
  while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  std::string rec;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    char last = '\n';
    if (::pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n') rec += '\n';
  }
  rec += line;
  rec += '\n';
  const bool ok = write_all(fd, rec.data(), rec.size());
  const int e = errno;
  ::flock(fd, LOCK_UN);
  if (::close(fd) != 0 || !ok) usage_error("cannot append to " + path + ": " + std::strerror(e));
}

}  // namespace latprof
