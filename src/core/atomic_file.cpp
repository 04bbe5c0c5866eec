#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace latprof {

namespace fs = std::filesystem;

void check_writable(const std::string& path, const char* flag) {
  if (path.empty()) usage_error(std::string(flag) + " needs a file name");
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec))
    usage_error(std::string(flag) + " " + path + " is a directory; give a file name");
  fs::path dir = p.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    usage_error(std::string(flag) + " " + path + ": directory " + dir.string() +
                " does not exist; create it first");
  if (access(dir.c_str(), W_OK) != 0)
    usage_error(std::string(flag) + " " + path + ": directory " + dir.string() +
                " is not writable");
  if (fs::exists(p, ec) && access(p.c_str(), W_OK) != 0)
    usage_error(std::string(flag) + " " + path + " exists and is not writable");
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const fs::path p(path);
  fs::path dir = p.parent_path();
  if (dir.empty()) dir = ".";
  std::string name = ".";
  name += p.filename().string();
  name += ".tmp.XXXXXX";
  std::string tmpl = (dir / name).string();
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) usage_error("cannot write " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n <= 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmpl.c_str());
      usage_error("cannot write " + path + ": " + err);
    }
    done += size_t(n);
  }
  fchmod(fd, 0644);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmpl.c_str());
    usage_error("cannot write " + path + ": " + std::strerror(errno));
  }
  if (std::rename(tmpl.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmpl.c_str());
    usage_error("cannot write " + path + ": " + err);
  }
}

void append_line_atomic(const std::string& path, const std::string& line) {
  std::string content;
  if (fs::exists(path)) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    content = s.str();
    if (!content.empty() && content.back() != '\n') content += '\n';
  }
  content += line;
  content += '\n';
  write_file_atomic(path, content);
}

}  // namespace latprof
