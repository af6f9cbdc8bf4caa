// File-system helpers (see files.h).

#include "contract/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "contract/printable.h"

namespace graphc {

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status CheckReplaceable(const std::string& path) {
  struct stat existing;
  if (lstat(path.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode))
    return Status(ErrorCode::kIo, Printable(path) + ": exists and is not a regular file; "
                                                    "refusing to replace it");
  return Status::Ok();
}

bool WriteAll(int fd, const char* data, size_t size) {
  for (size_t done = 0; done < size;) {
    const ssize_t written = write(fd, data + done, size - done);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      if (written == 0) errno = EIO;
      return false;
    }
    done += static_cast<size_t>(written);
  }
  return true;
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string shown = Printable(path);
  Status replaceable = CheckReplaceable(path);
  if (!replaceable.ok()) return replaceable;
  std::string temp = path + ".tmp.XXXXXX";
  int fd = mkstemp(temp.data());
  if (fd < 0)
    return Status(ErrorCode::kIo, shown + ": cannot create a temporary file next to it (" +
                                      std::strerror(errno) + ")");
  // A replaced file keeps its permissions; a new one is 0644.
  struct stat existing;
  const mode_t mode = stat(path.c_str(), &existing) == 0 ? (existing.st_mode & 07777) : 0644;
  bool ok = fchmod(fd, mode) == 0 && WriteAll(fd, contents.data(), contents.size());
  ok = ok && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || std::rename(temp.c_str(), path.c_str()) != 0) {
    Status status(ErrorCode::kIo, shown + ": cannot write (" + std::strerror(errno) + ")");
    unlink(temp.c_str());
    return status;
  }
  // The rename itself survives a crash once the directory is on disk too.
  int dir = open(DirectoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return Status::Ok();
}

std::string FileIdentity(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0)
    return "inode " + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  char resolved[PATH_MAX];
  if (realpath(DirectoryOf(path).c_str(), resolved) == nullptr) return "path " + path;
  return "path " + std::string(resolved) + "/" + name;
}

}  // namespace graphc
