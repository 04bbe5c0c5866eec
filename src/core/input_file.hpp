#pragma once
// Input paths given by the user (model files and directories, prompt files, reports, hardware
// files): every problem with the path itself (missing, a directory where a file is wanted, a
// device, a symbolic-link loop, a name too long, unreadable) is a UsageError naming the path and
// the problem, before anything is parsed.
#include <cstddef>
#include <string>

namespace latprof {

// Throws UsageError "<what> '<path>': <problem>" unless `path` names a readable regular file
// (or, with allow_dir, a directory; with allow_fifo, a pipe or FIFO, such as a shell's
// <(command) or /dev/stdin fed by a pipe). Files under /proc and /sys are refused: they are not
// data.
void check_input_path(const std::string& path, const std::string& what, bool allow_dir = false,
                      bool allow_fifo = false);

// Reads a whole input file of at most max_bytes. Regular files, pipes and FIFOs (read until the
// writer closes) and character devices are read; anything larger than max_bytes is refused with
// the cap in the message (so /dev/zero ends at once). Directories, sockets and missing files are
// refused like check_input_path.
std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes);

// The text of a size for messages: "16 MiB".
std::string cap_text(size_t bytes);

}  // namespace latprof
