// Small file-system helpers for the tools: replacing a file atomically, and
// telling whether two paths name the same file (so that no output overwrites
// an input or another output).

#ifndef GRAPHC_CONTRACT_FILES_H_
#define GRAPHC_CONTRACT_FILES_H_

#include <cstddef>
#include <string>

#include "contract/status.h"

namespace graphc {

// The directory part of `path` ("." when there is none).
std::string DirectoryOf(const std::string& path);

// Succeeds unless `path` exists and is not a regular file: outputs are
// written by renaming a new file over the path, which would replace anything
// (as root, a device such as /dev/null).
Status CheckReplaceable(const std::string& path);

// Writes all `size` bytes to the open `fd`, retrying short writes and
// EINTR; false with errno set on failure.
bool WriteAll(int fd, const char* data, size_t size);

// Writes `contents` to `path` through a new temporary file next to it
// (mkstemp: a fresh name, never following a planted symlink), fsync, rename
// and fsync of the directory. A replaced file's permissions are kept (new
// files are 0644). Refuses to replace anything but a regular file.
Status WriteFileAtomically(const std::string& path, const std::string& contents);

// What `path` names: its device and inode when it exists, else the canonical
// path of its directory and its name. Two paths with the same identity are
// the same file.
std::string FileIdentity(const std::string& path);

}  // namespace graphc

#endif  // GRAPHC_CONTRACT_FILES_H_
