#pragma once
// Output files. A regular file is written whole or not at all: to a temporary file in the same
// directory, then renamed over it. Output paths follow these rules (checked by check_writable
// before a run and again when writing):
//   - a symbolic link is followed; its target is replaced atomically and the link stays;
//   - a character device (/dev/null, /dev/stdout on a terminal) or a FIFO is written in place;
//     a FIFO is opened without blocking, so a FIFO with no reader is an error, never a hang;
//   - a directory, a socket or a block device is refused, and so is any path under /proc or /sys.
#include <string>
#include <utility>
#include <vector>

namespace latprof {
// Throws UsageError naming the path when it cannot be written.
void write_file_atomic(const std::string& path, const std::string& content);
// Appends one line (JSON Lines) with O_APPEND under an exclusive advisory lock (flock), in one
// write: concurrent appenders never lose or interleave lines, and an append costs one line.
void append_line_atomic(const std::string& path, const std::string& line);
// Fails early (before a long run) when `path` could not be written by the rules above.
void check_writable(const std::string& path, const char* flag);
// Fails when two of the given outputs ({flag, path}; empty paths skipped) are the same file
// (after following symbolic links). Character devices may repeat (/dev/null twice is fine).
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs);
// Fails when output `path` (flag) is one of the command's input files (after following links):
// `compare a.json b.json --json a.json` would replace a report it reads.
void check_not_an_input(const std::string& path, const char* flag,
                        const std::vector<std::string>& inputs);
}  // namespace latprof
