#pragma once
// Small facts about paths shared by the input and output checks.
#include <sys/types.h>

#include <string>

namespace latprof {

// "" or why the name itself is unusable: longer than PATH_MAX, or a component longer than
// NAME_MAX ("the name is too long ...").
std::string path_name_problem(const std::string& path);
// The problem an errno from open/stat means for a user's path, in words ("does not exist",
// "symbolic link loop", ...).
std::string errno_problem(int err);
// "a directory", "a FIFO", "a socket", "a block device", "a character device", "a regular file".
const char* file_kind_name(mode_t mode);
// True when `path` (or, when it does not exist, its directory) lies on procfs or sysfs.
bool is_pseudo_fs(const std::string& path);

}  // namespace latprof
