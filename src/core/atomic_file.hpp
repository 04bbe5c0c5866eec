#pragma once
// Files are written whole or not at all: to a temporary file in the same directory, then renamed.
#include <string>

namespace latprof {
// Throws UsageError naming the path when it cannot be written.
void write_file_atomic(const std::string& path, const std::string& content);
// Appends one line (JSON Lines): the file is rewritten atomically with the line added.
void append_line_atomic(const std::string& path, const std::string& line);
// Fails early (before a long run) when `path` could not be created: the directory is missing
// or not writable, or the path is a directory.
void check_writable(const std::string& path, const char* flag);
}  // namespace latprof
