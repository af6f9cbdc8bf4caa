// Datasets and batching for graphrun (see dataset.h).
//
// The readers take files from users and from the network, so a malformed or
// hostile file is refused with an error naming it, before anything is read
// from a file that is not a regular one and before more memory is allocated
// than the file can hold: sizes are multiplied with overflow checks and must
// match the bytes present exactly.

#include "runtime/train/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <initializer_list>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "contract/printable.h"
#include "runtime/core/random.h"
#include "runtime/train/images.h"

namespace graphc::runtime {
namespace {

using Rng = SplitMix64;

// Paths and header fields come from the user's files: escaped.
Status IoError(const std::string& path, const std::string& what) {
  return Status(ErrorCode::kIo, Printable(path + ": " + what, 4096));
}

std::string ErrnoText(int error) { return std::strerror(error); }

// A file descriptor, closed when it goes out of scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { Reset(); }

  int get() const { return fd_; }
  // Gives up ownership (to zlib's gzdopen, which closes it).
  int Release() { return std::exchange(fd_, -1); }

 private:
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  int fd_;
};

// Refuses anything but a regular file: a directory, a device (/dev/zero never
// ends), a FIFO or a socket (they block or never end).
Status CheckRegular(const std::string& path, mode_t mode) {
  if (S_ISREG(mode)) return Status::Ok();
  if (S_ISDIR(mode)) return IoError(path, "is a directory, not a data file");
  const char* kind = S_ISCHR(mode)    ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                     : S_ISFIFO(mode) ? "a FIFO"
                     : S_ISSOCK(mode) ? "a socket"
                                      : "of an unknown kind";
  return IoError(path, std::string("is not a regular file (it is ") + kind + ")");
}

// A regular file open for reading, and its size when it was opened.
struct RegularFile {
  FileDescriptor fd;
  uint64_t size = 0;
};

// Opens `path` for reading, refusing anything but a regular file before a byte
// is read. stat() first refuses a device or FIFO without opening it (opening
// one can have effects); the check that counts is fstat() on the descriptor
// that is read (no race with a rename). O_NONBLOCK keeps open() from waiting
// for a writer should a FIFO appear in between; it is cleared for the reads.
StatusOr<RegularFile> OpenRegularFile(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0)
    return IoError(path, "cannot open (" + ErrnoText(errno) + ")");
  if (Status s = CheckRegular(path, info.st_mode); !s.ok()) return s;
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return IoError(path, "cannot open (" + ErrnoText(errno) + ")");
  RegularFile file{FileDescriptor(fd), 0};
  if (fstat(fd, &info) != 0) return IoError(path, "cannot stat (" + ErrnoText(errno) + ")");
  if (Status s = CheckRegular(path, info.st_mode); !s.ok()) return s;
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    return IoError(path, "cannot open (" + ErrnoText(errno) + ")");
  file.size = static_cast<uint64_t>(info.st_size);
  return StatusOr<RegularFile>(std::move(file));
}

// Reads exactly `size` bytes from the descriptor's offset; fewer means the
// file shrank after it was opened.
Status ReadExactly(const RegularFile& file, const std::string& path, void* out, uint64_t size) {
  uint8_t* to = static_cast<uint8_t*>(out);
  while (size > 0) {
    const ssize_t got = read(file.fd.get(), to, std::min<uint64_t>(size, uint64_t{1} << 30));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return IoError(path, "cannot read (" + ErrnoText(errno) + ")");
    if (got == 0) return IoError(path, "ended early (it changed while being read)");
    to += got;
    size -= static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

// After the last expected byte: nothing may follow (the file may have grown).
Status ExpectEnd(const RegularFile& file, const std::string& path) {
  uint8_t extra;
  ssize_t got;
  do {
    got = read(file.fd.get(), &extra, 1);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return IoError(path, "cannot read (" + ErrnoText(errno) + ")");
  if (got > 0)
    return IoError(path, "is longer than when it was opened (it changed while being read)");
  return Status::Ok();
}

uint32_t BigEndian(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// ---------------------------------------------------------------------------
// .npy

// numpy writes headers of a few hundred bytes; the format allows 4 GiB (v2).
constexpr uint64_t kMaxNpyHeaderBytes = uint64_t{1} << 20;

// One .npy file, its header read and checked, open at its first data byte.
struct NpyFile {
  std::string path;
  RegularFile file;
  std::string descr;           // e.g. "<f4"
  std::vector<int64_t> shape;  // every dimension > 0
  uint64_t data_bytes = 0;     // the bytes after the header
};

std::string Trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") + 1 - begin);
}

// The header's Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (256, 1, 28, 28), }
// then padding: each key (a quoted string) with its value's text, which is a
// quoted string without escapes (quotes kept), a word (True, False) or a
// parenthesized tuple. False on any other syntax and on a repeated key.
bool ParseNpyDict(const std::string& header, std::map<std::string, std::string>& fields) {
  const size_t n = header.size();
  size_t i = 0;
  auto skip_space = [&] {
    while (i < n && (header[i] == ' ' || header[i] == '\t' || header[i] == '\n' ||
                     header[i] == '\r'))
      ++i;
  };
  auto quoted = [&](std::string& out) {
    if (i >= n || (header[i] != '\'' && header[i] != '"')) return false;
    const size_t end = header.find(header[i], i + 1);
    if (end == std::string::npos) return false;
    out = header.substr(i, end + 1 - i);
    i = end + 1;
    return out.find('\\') == std::string::npos;
  };
  skip_space();
  if (i >= n || header[i] != '{') return false;
  ++i;
  for (;;) {
    skip_space();
    if (i < n && header[i] == '}') break;
    std::string key, value;
    if (!quoted(key)) return false;
    skip_space();
    if (i >= n || header[i] != ':') return false;
    ++i;
    skip_space();
    if (i >= n) return false;
    if (header[i] == '\'' || header[i] == '"') {
      if (!quoted(value)) return false;
    } else if (header[i] == '(') {
      const size_t end = header.find(')', i);
      if (end == std::string::npos) return false;
      value = header.substr(i, end + 1 - i);
      if (value.find('(', 1) != std::string::npos) return false;
      i = end + 1;
    } else {
      const size_t begin = i;
      while (i < n && (std::isalnum(static_cast<unsigned char>(header[i])) || header[i] == '_'))
        ++i;
      value = header.substr(begin, i - begin);
      if (value.empty()) return false;
    }
    if (!fields.emplace(key.substr(1, key.size() - 2), value).second) return false;
    skip_space();
    if (i < n && header[i] == ',') {
      ++i;
      continue;
    }
    if (i < n && header[i] == '}') break;
    return false;
  }
  ++i;  // the '}'
  skip_space();
  return i == n;
}

// A dimension: decimal digits only, at most INT64_MAX.
bool ParseDimension(const std::string& text, int64_t& value) {
  if (text.empty()) return false;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    if (__builtin_mul_overflow(v, int64_t{10}, &v) || __builtin_add_overflow(v, c - '0', &v))
      return false;
  }
  value = v;
  return true;
}

// "(256, 1, 28, 28)", "(256,)" or "()"; a trailing comma is allowed, an empty
// dimension elsewhere is not.
bool ParseShape(const std::string& text, std::vector<int64_t>& shape) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') return false;
  const std::string inner = text.substr(1, text.size() - 2);
  if (Trim(inner).empty()) return true;
  size_t pos = 0;
  for (;;) {
    const size_t comma = inner.find(',', pos);
    const std::string dim =
        Trim(inner.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    const bool last = comma == std::string::npos;
    if (dim.empty()) return last && !shape.empty();  // "(5,)"
    int64_t value;
    if (!ParseDimension(dim, value)) return false;
    shape.push_back(value);
    if (last) return true;
    pos = comma + 1;
  }
}

// Opens a .npy file and reads and checks its header, nothing more.
StatusOr<NpyFile> OpenNpy(const std::string& path) {
  StatusOr<RegularFile> opened = OpenRegularFile(path);
  if (!opened.ok()) return opened.status();
  NpyFile npy;
  npy.path = path;
  npy.file = std::move(*opened);
  const uint64_t size = npy.file.size;
  uint8_t prefix[12];
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10) return IoError(path, "not a NumPy .npy file");
  if (Status s = ReadExactly(npy.file, path, prefix, 10); !s.ok()) return s;
  if (std::memcmp(prefix, kMagic, 6) != 0) return IoError(path, "not a NumPy .npy file");
  const int major = prefix[6];
  const uint64_t length_bytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
  if (length_bytes == 0)
    return IoError(path, ".npy format version " + std::to_string(major) + " is not supported");
  if (length_bytes == 4) {
    if (size < 12) return IoError(path, "truncated .npy header");
    if (Status s = ReadExactly(npy.file, path, prefix + 10, 2); !s.ok()) return s;
  }
  uint64_t header_length = 0;  // little-endian u16 (1.0) or u32 (2.0, 3.0)
  for (uint64_t i = 0; i < length_bytes; ++i) header_length |= uint64_t{prefix[8 + i]} << (8 * i);
  if (header_length > kMaxNpyHeaderBytes)
    return IoError(path, "a .npy header of " + std::to_string(header_length) +
                             " bytes; at most " + std::to_string(kMaxNpyHeaderBytes) +
                             " are accepted");
  const uint64_t data_start = 8 + length_bytes + header_length;
  if (data_start > size) return IoError(path, "truncated .npy header");
  std::string header(header_length, '\0');
  if (Status s = ReadExactly(npy.file, path, header.data(), header_length); !s.ok()) return s;
  npy.data_bytes = size - data_start;

  std::map<std::string, std::string> fields;
  if (!ParseNpyDict(header, fields)) return IoError(path, "unreadable .npy header");
  if (!fields.count("descr") || !fields.count("fortran_order") || !fields.count("shape"))
    return IoError(path, "the .npy header has no descr, fortran_order or shape");
  const std::string& descr = fields["descr"];
  if (descr.size() < 3 || (descr.front() != '\'' && descr.front() != '"'))
    return IoError(path, "unreadable dtype " + descr);
  npy.descr = descr.substr(1, descr.size() - 2);
  const std::string& fortran = fields["fortran_order"];
  if (fortran == "True")
    return IoError(path, "a Fortran-order array; save it with np.ascontiguousarray");
  if (fortran != "False") return IoError(path, "unreadable fortran_order " + fortran);
  const std::string& shape = fields["shape"];
  if (!ParseShape(shape, npy.shape)) return IoError(path, "unreadable shape " + shape);
  if (std::find(npy.shape.begin(), npy.shape.end(), 0) != npy.shape.end())
    return IoError(path, "an empty array of shape " + ShapeString(npy.shape));
  return StatusOr<NpyFile>(std::move(npy));
}

// Checks that the data is exactly the shape's elements of `item_bytes` each.
Status CheckNpyDataSize(const NpyFile& npy, uint64_t item_bytes) {
  uint64_t needed = item_bytes;
  for (int64_t d : npy.shape)
    if (__builtin_mul_overflow(needed, static_cast<uint64_t>(d), &needed))
      return IoError(npy.path, "its shape " + ShapeString(npy.shape) +
                                   " is too large (more than 2^64 bytes)");
  if (npy.data_bytes != needed)
    return IoError(npy.path, "holds " + std::to_string(npy.data_bytes) +
                                 " bytes of data, its shape " + ShapeString(npy.shape) +
                                 " needs " + std::to_string(needed));
  return Status::Ok();
}

// Reads the data (checked by CheckNpyDataSize) into `out`.
Status ReadNpyData(NpyFile& npy, void* out) {
  if (Status s = ReadExactly(npy.file, npy.path, out, npy.data_bytes); !s.ok()) return s;
  return ExpectEnd(npy.file, npy.path);
}

// ---------------------------------------------------------------------------
// IDX

// The most data an IDX file may hold (Fashion-MNIST's training images are
// 47 MB). Deflate expands at most 1032:1, so a gzip file whose header claims
// more than 1032 times the file's size is truncated: refused before allocating.
constexpr uint64_t kMaxIdxBytes = uint64_t{4} << 30;
constexpr uint64_t kMaxDeflateRatio = 1032;

struct GzClose {
  void operator()(gzFile_s* file) const { gzclose(file); }
};

// An IDX file of unsigned bytes (gzip-compressed or not: zlib reads plain
// files as they are), its header read and checked.
struct IdxFile {
  std::string path;
  std::unique_ptr<gzFile_s, GzClose> file;
  std::vector<uint32_t> dims;
  uint64_t header_bytes = 0;
  uint64_t data_bytes = 0;  // the product of dims
  // A second descriptor of a gzip file (zlib owns the first), for
  // CheckGzipEnds; none for a plain file.
  FileDescriptor compressed;
};

// zlib's gzread ends a gzip stream quietly when the file stops where a
// deflate block does, without the trailer whose CRC-32 and length would catch
// a corrupt byte. So the compressed file is inflated once more, here: every
// gzip member must reach its end, where inflate checks the CRC. (What follows
// the last member and is not another one is ignored, as gzip and gzread do.)
Status CheckGzipEnds(int fd, const std::string& path) {
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 16) != Z_OK) return IoError(path, "cannot inflate (zlib: out of memory)");
  std::vector<uint8_t> in(1 << 16), out(1 << 16);
  off_t offset = 0;
  bool at_end = false;  // the file has no more bytes
  bool ended = false;   // the last member reached its end
  Status status = Status::Ok();
  while (status.ok()) {
    if (stream.avail_in == 0 && !at_end) {
      ssize_t got = pread(fd, in.data(), in.size(), offset);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        status = IoError(path, "cannot read (" + ErrnoText(errno) + ")");
        break;
      }
      at_end = got == 0;
      offset += got;
      stream.next_in = in.data();
      stream.avail_in = static_cast<uInt>(got);
    }
    if (stream.avail_in == 0 && at_end) break;
    if (ended) {
      // Another member follows only if it starts with gzip's magic.
      if (stream.avail_in < 2) {
        if (at_end) break;
        // Keep the one byte and read on (rare: a member ends at a read's edge).
        const uint8_t first = stream.next_in[0];
        ssize_t got = pread(fd, in.data() + 1, in.size() - 1, offset);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
          status = IoError(path, "cannot read (" + ErrnoText(errno) + ")");
          break;
        }
        if (got == 0) break;  // one byte after the last member: ignored
        in[0] = first;
        offset += got;
        stream.next_in = in.data();
        stream.avail_in = static_cast<uInt>(got + 1);
      }
      if (stream.next_in[0] != 0x1f || stream.next_in[1] != 0x8b) break;
      inflateReset(&stream);
      ended = false;
    }
    stream.next_out = out.data();
    stream.avail_out = static_cast<uInt>(out.size());
    const int result = inflate(&stream, Z_NO_FLUSH);
    if (result == Z_STREAM_END) {
      ended = true;
    } else if (result != Z_OK && !(result == Z_BUF_ERROR && stream.avail_in == 0)) {
      status = IoError(path, std::string("corrupt gzip data (") +
                                 (stream.msg != nullptr ? stream.msg : "zlib error") + ")");
    }
  }
  inflateEnd(&stream);
  if (status.ok() && !ended)
    return IoError(path, "truncated gzip data (it ends before the gzip trailer, the CRC-32 "
                         "that checks it)");
  return status;
}

// zlib's message for the last error, without the "<fd:3>: " gzdopen puts first.
std::string GzErrorText(gzFile file) {
  int error = 0;
  std::string text = gzerror(file, &error);
  const size_t colon = text.find(": ");
  if (text.rfind("<fd:", 0) == 0 && colon != std::string::npos) text.erase(0, colon + 2);
  return text;
}

// Reads up to `size` bytes: fewer only at the end of the data.
StatusOr<uint64_t> GzReadUpTo(IdxFile& idx, void* out, uint64_t size) {
  uint8_t* to = static_cast<uint8_t*>(out);
  uint64_t done = 0;
  while (done < size) {
    const int got = gzread(idx.file.get(), to + done,
                           static_cast<unsigned>(std::min<uint64_t>(size - done, 1u << 30)));
    if (got < 0)
      return IoError(idx.path, "corrupt gzip data (" + GzErrorText(idx.file.get()) + ")");
    if (got == 0) break;
    done += static_cast<uint64_t>(got);
  }
  if (done < size) {
    int error = 0;
    gzerror(idx.file.get(), &error);
    if (error == Z_BUF_ERROR) return IoError(idx.path, "truncated gzip data");
  }
  return done;
}

// Opens an IDX file of ubyte data of `rank` dimensions and checks its header;
// `what` names it in errors ("ubyte images (rank 3)").
StatusOr<IdxFile> OpenIdx(const std::string& path, uint32_t rank, const std::string& what) {
  StatusOr<RegularFile> opened = OpenRegularFile(path);
  if (!opened.ok()) return opened.status();
  IdxFile idx;
  idx.path = path;
  idx.compressed = FileDescriptor(fcntl(opened->fd.get(), F_DUPFD_CLOEXEC, 0));
  if (idx.compressed.get() < 0) return IoError(path, "cannot open (" + ErrnoText(errno) + ")");
  idx.file.reset(gzdopen(opened->fd.get(), "rb"));
  if (idx.file == nullptr) return IoError(path, "cannot open (zlib: out of memory)");
  opened->fd.Release();  // gzclose closes it
  // IDX: magic (0, 0, type 0x08 = ubyte, rank), big-endian dims, data.
  uint8_t header[4 + 4 * 3];
  idx.header_bytes = 4 + 4 * uint64_t{rank};
  StatusOr<uint64_t> got = GzReadUpTo(idx, header, 4);
  if (!got.ok()) return got.status();
  if (*got < 4 || BigEndian(header) != (0x00000800u | rank))
    return IoError(path, "not an IDX file of " + what);
  got = GzReadUpTo(idx, header + 4, 4 * uint64_t{rank});
  if (!got.ok()) return got.status();
  if (*got < 4 * uint64_t{rank}) return IoError(path, "truncated IDX header");
  uint64_t bytes = 1;
  bool overflow = false;
  for (uint32_t i = 0; i < rank; ++i) {
    idx.dims.push_back(BigEndian(header + 4 + 4 * i));
    overflow |= __builtin_mul_overflow(bytes, uint64_t{idx.dims.back()}, &bytes);
  }
  std::string dims;
  for (uint32_t d : idx.dims) dims += (dims.empty() ? "" : "x") + std::to_string(d);
  if (std::find(idx.dims.begin(), idx.dims.end(), 0u) != idx.dims.end())
    return IoError(path, "its header says " + dims + ": no data");
  if (overflow || bytes > kMaxIdxBytes)
    return IoError(path, "its header says " + dims + ", more than the " +
                             std::to_string(kMaxIdxBytes >> 30) + " GiB this reader accepts");
  idx.data_bytes = bytes;
  // Refuse before allocating what the file cannot hold.
  const uint64_t total = idx.header_bytes + bytes;
  const bool plain = gzdirect(idx.file.get()) == 1;
  if (plain) idx.compressed = FileDescriptor();
  const uint64_t size = opened->size;
  if (plain && total != size)
    return IoError(path, "holds " + std::to_string(size - std::min(size, idx.header_bytes)) +
                             " bytes of data, its header says " + std::to_string(bytes));
  if (!plain && total / kMaxDeflateRatio > size)
    return IoError(path, "its header says " + std::to_string(bytes) +
                             " bytes of data, more than " + std::to_string(size) +
                             " compressed bytes can hold");
  return StatusOr<IdxFile>(std::move(idx));
}

// Reads the data (exactly data_bytes), then checks that nothing follows and
// that a gzip stream ends cleanly (its CRC is checked at its end).
Status ReadIdxData(IdxFile& idx, std::vector<uint8_t>& out) {
  out.resize(idx.data_bytes);
  StatusOr<uint64_t> got = GzReadUpTo(idx, out.data(), idx.data_bytes);
  if (!got.ok()) return got.status();
  if (*got != idx.data_bytes)
    return IoError(idx.path, "holds " + std::to_string(*got) + " bytes of data, its header says " +
                                 std::to_string(idx.data_bytes));
  uint8_t extra;
  got = GzReadUpTo(idx, &extra, 1);
  if (!got.ok()) return got.status();
  if (*got != 0)
    return IoError(idx.path, "holds more than the " + std::to_string(idx.data_bytes) +
                                 " bytes of data its header says");
  if (idx.compressed.get() >= 0) return CheckGzipEnds(idx.compressed.get(), idx.path);
  return Status::Ok();
}

}  // namespace

namespace {

// An .npy array of one dtype: `descrs` are the headers that spell it, `want`
// how the error names it.
template <typename Array>
StatusOr<Array> ReadNpyOf(const std::string& path, std::initializer_list<const char*> descrs,
                          const char* want) {
  using Element = typename decltype(Array::values)::value_type;
  StatusOr<NpyFile> npy = OpenNpy(path);
  if (!npy.ok()) return npy.status();
  if (std::none_of(descrs.begin(), descrs.end(),
                   [&](const char* d) { return npy->descr == d; }))
    return IoError(path, "an array of dtype '" + npy->descr + "'; give " + want);
  if (npy->shape.size() > 8)
    return IoError(path, "an array of rank " + std::to_string(npy->shape.size()) +
                             "; at most 8");
  if (Status s = CheckNpyDataSize(*npy, sizeof(Element)); !s.ok()) return s;
  Array array;
  array.shape = npy->shape;
  array.values.resize(npy->data_bytes / sizeof(Element));
  if (Status s = ReadNpyData(*npy, array.values.data()); !s.ok()) return s;
  return array;
}

}  // namespace

StatusOr<NpyArray> ReadNpyFloat32(const std::string& path) {
  return ReadNpyOf<NpyArray>(path, {"<f4"}, "float32 ('<f4')");
}

StatusOr<NpyBytes> ReadNpyUint8(const std::string& path) {
  return ReadNpyOf<NpyBytes>(path, {"|u1", "<u1"}, "uint8 ('|u1')");
}

std::string NpyFloat32File(const std::vector<int64_t>& shape, const float* values,
                           uint64_t count) {
  // Python's tuple: (), (2,), (2, 3).
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i)
    dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic, version 1.0, the header's length; the header padded with spaces
  // to end, newline included, on a multiple of 64 bytes.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string file("\x93NUMPY", 6);
  file += '\x01';
  file += '\x00';
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>((header.size() >> 8) & 0xff);
  file += header;
  file.append(reinterpret_cast<const char*>(values), count * sizeof(float));
  return file;
}

StatusOr<Examples> ReadNpy(const std::string& images_path, const std::string& labels_path) {
  // Both headers are checked before any data is read.
  StatusOr<NpyFile> images = OpenNpy(images_path);
  if (!images.ok()) return images.status();
  StatusOr<NpyFile> labels = OpenNpy(labels_path);
  if (!labels.ok()) return labels.status();

  Examples e;
  const std::vector<int64_t>& is = images->shape;
  uint64_t image_bytes;
  if (images->descr == "<f4") {
    image_bytes = 4;
  } else if (images->descr == "|u1" || images->descr == "<u1") {
    image_bytes = 1;
  } else {
    return IoError(images_path, "images of dtype '" + images->descr +
                                    "'; give float32 ('<f4') or uint8 ('|u1')");
  }
  if (is.size() == 4) {
    e.count = is[0], e.channels = is[1], e.height = is[2], e.width = is[3];
  } else if (is.size() == 3) {
    e.count = is[0], e.channels = 1, e.height = is[1], e.width = is[2];
  } else {
    return IoError(images_path, "images of shape " + ShapeString(is) +
                                    "; give (N, C, H, W) or (N, H, W)");
  }
  if (Status s = CheckNpyDataSize(*images, image_bytes); !s.ok()) return s;

  const std::vector<int64_t>& ls = labels->shape;
  uint64_t label_bytes = labels->descr == "<i4" ? 4 : labels->descr == "<i8" ? 8 : 0;
  if (label_bytes == 0)
    return IoError(labels_path, "labels of dtype '" + labels->descr +
                                    "'; give int32 ('<i4') or int64 ('<i8')");
  if (ls.size() != 1 || ls[0] != e.count)
    return IoError(labels_path, "labels of shape " + ShapeString(ls) + " for " +
                                    std::to_string(e.count) + " images; give (" +
                                    std::to_string(e.count) + ",)");
  if (Status s = CheckNpyDataSize(*labels, label_bytes); !s.ok()) return s;

  // The sizes match the files, so nothing below allocates more than they hold.
  const uint64_t pixels = images->data_bytes / image_bytes;
  e.images.resize(pixels);
  if (image_bytes == 4) {
    if (Status s = ReadNpyData(*images, e.images.data()); !s.ok()) return s;
    for (uint64_t i = 0; i < pixels; ++i)
      if (!std::isfinite(e.images[i]))
        return Status(ErrorCode::kNonFinite,
                      Printable(images_path) + ": element " + std::to_string(i) + " is " +
                          (std::isnan(e.images[i]) ? "NaN" : "infinite"));
  } else {
    std::vector<uint8_t> bytes(pixels);
    if (Status s = ReadNpyData(*images, bytes.data()); !s.ok()) return s;
    for (uint64_t i = 0; i < pixels; ++i) e.images[i] = bytes[i] / 255.0f;
    e.from_bytes = true;
  }

  std::vector<uint8_t> bytes(labels->data_bytes);
  if (Status s = ReadNpyData(*labels, bytes.data()); !s.ok()) return s;
  e.labels.resize(e.count);
  for (int64_t i = 0; i < e.count; ++i) {
    int64_t v;
    if (label_bytes == 4) {
      int32_t v32;
      std::memcpy(&v32, bytes.data() + 4 * i, 4);
      v = v32;
    } else {
      std::memcpy(&v, bytes.data() + 8 * i, 8);
    }
    // A class index: never negative, and an int32 for the model.
    if (v < 0 || v > INT32_MAX)
      return IoError(labels_path, "label " + std::to_string(v) + " of example " +
                                      std::to_string(i) + " is out of range (0 to 2^31 - 1)");
    e.labels[i] = static_cast<int32_t>(v);
  }
  return StatusOr<Examples>(std::move(e));
}

StatusOr<Examples> ReadIdx(const std::string& images_path, const std::string& labels_path,
                           float mean, float stddev) {
  if (!std::isfinite(mean) || !std::isfinite(stddev) || !(stddev > 0))
    return Status(ErrorCode::kInvalidArgument,
                  "ReadIdx: mean " + std::to_string(mean) + " and standard deviation " +
                      std::to_string(stddev) + " must be finite, the deviation positive");
  // Both headers are checked before any data is read.
  StatusOr<IdxFile> images = OpenIdx(images_path, 3, "ubyte images (rank 3)");
  if (!images.ok()) return images.status();
  StatusOr<IdxFile> labels = OpenIdx(labels_path, 1, "ubyte labels (rank 1)");
  if (!labels.ok()) return labels.status();
  Examples e;
  e.count = images->dims[0];
  e.channels = 1;
  e.height = images->dims[1];
  e.width = images->dims[2];
  if (labels->dims[0] != images->dims[0])
    return IoError(labels_path, "does not hold one label per image (" +
                                    std::to_string(e.count) + " images, " +
                                    std::to_string(labels->dims[0]) + " labels)");
  std::vector<uint8_t> im, lb;
  if (Status s = ReadIdxData(*images, im); !s.ok()) return s;
  if (Status s = ReadIdxData(*labels, lb); !s.ok()) return s;
  e.images.resize(im.size());
  for (size_t i = 0; i < im.size(); ++i) e.images[i] = (im[i] / 255.0f - mean) / stddev;
  e.labels.assign(lb.begin(), lb.end());
  e.from_bytes = true;
  return StatusOr<Examples>(std::move(e));
}

StatusOr<Examples> ReadFashionMnist(const std::string& dir, bool train, bool normalize) {
  std::string prefix = dir + "/" + (train ? "train" : "t10k");
  // stat, not open: opening a FIFO named like the file would block.
  auto pick = [](const std::string& base) {
    struct stat info;
    return stat((base + ".gz").c_str(), &info) == 0 ? base + ".gz" : base;
  };
  // Fashion-MNIST's training-set pixel mean and standard deviation.
  return ReadIdx(pick(prefix + "-images-idx3-ubyte"), pick(prefix + "-labels-idx1-ubyte"),
                 normalize ? 0.2860f : 0.0f, normalize ? 0.3530f : 1.0f);
}

StatusOr<std::unique_ptr<BatchSource>> BatchSource::Create(
    Examples examples, int64_t batch, const std::vector<int64_t>& image_shape,
    int64_t classes, bool shuffle, uint64_t seed) {
  if (batch <= 0)
    return Status(ErrorCode::kInvalidArgument,
                  "a batch of " + std::to_string(batch) + " examples; it must be at least 1");
  // Examples built by hand must be consistent too: Next trusts these sizes.
  uint64_t pixels = 0;
  if (examples.count < 0 || examples.channels <= 0 || examples.height <= 0 ||
      examples.width <= 0 ||
      __builtin_mul_overflow(uint64_t(examples.count), uint64_t(examples.channels), &pixels) ||
      __builtin_mul_overflow(pixels, uint64_t(examples.height), &pixels) ||
      __builtin_mul_overflow(pixels, uint64_t(examples.width), &pixels) ||
      examples.images.size() != pixels || examples.labels.size() != uint64_t(examples.count))
    return Status(ErrorCode::kInvalidArgument,
                  "the examples hold " + std::to_string(examples.images.size()) + " pixels and " +
                      std::to_string(examples.labels.size()) + " labels for " +
                      std::to_string(examples.count) + " images of " +
                      std::to_string(examples.channels) + "x" + std::to_string(examples.height) +
                      "x" + std::to_string(examples.width));
  if (image_shape.size() != 4 || image_shape[0] != batch || image_shape[1] != examples.channels ||
      image_shape[2] != examples.height || image_shape[3] != examples.width)
    return Status(ErrorCode::kInvalidArgument,
                  "the data's images are " + std::to_string(examples.channels) + "x" +
                      std::to_string(examples.height) + "x" + std::to_string(examples.width) +
                      ", the model takes " +
                      (image_shape.size() == 4 ? std::to_string(image_shape[1]) + "x" +
                                                     std::to_string(image_shape[2]) + "x" +
                                                     std::to_string(image_shape[3])
                                               : std::string("another rank")));
  if (examples.count < batch)
    return Status(ErrorCode::kInvalidArgument,
                  "the data has " + std::to_string(examples.count) +
                      " examples, fewer than one batch of " + std::to_string(batch));
  for (int64_t i = 0; i < examples.count; ++i)
    if (examples.labels[i] < 0 || examples.labels[i] >= classes)
      return Status(ErrorCode::kInvalidArgument,
                    "label " + std::to_string(examples.labels[i]) + " of example " +
                        std::to_string(i) + " is not in [0, " + std::to_string(classes) +
                        ") for this model");
  return std::unique_ptr<BatchSource>(new BatchSource(std::move(examples), batch, shuffle, seed));
}

std::unique_ptr<BatchSource> BatchSource::Synthetic(int64_t batch,
                                                    const std::vector<int64_t>& image_shape,
                                                    int64_t classes, int64_t batches,
                                                    uint64_t seed, bool unit) {
  Examples e;
  e.count = batch * std::max<int64_t>(batches, 1);
  e.channels = image_shape[1];
  e.height = image_shape[2];
  e.width = image_shape[3];
  Rng rng{seed ^ 0x5eed5eed5eed5eedull};
  e.images.resize(e.count * e.channels * e.height * e.width);
  for (float& x : e.images)
    x = static_cast<float>(unit ? rng.Uniform() : 2.0 * rng.Uniform() - 1.0);
  e.labels.resize(e.count);
  for (int32_t& y : e.labels) y = static_cast<int32_t>(rng.Next() % uint64_t(classes));
  return std::unique_ptr<BatchSource>(new BatchSource(std::move(e), batch, false, seed));
}

BatchSource::BatchSource(Examples examples, int64_t batch, bool shuffle, uint64_t seed)
    : examples_(std::move(examples)), batch_(batch), shuffle_(shuffle), seed_(seed) {
  order_.resize(examples_.count);
  for (int64_t i = 0; i < examples_.count; ++i) order_[i] = i;
  Shuffle();
}

void BatchSource::Shuffle() {
  if (!shuffle_) return;
  // Fisher-Yates from (seed, epoch): the same order on every run.
  for (int64_t i = 0; i < examples_.count; ++i) order_[i] = i;
  Rng rng{seed_ * 0x9e3779b97f4a7c15ull + uint64_t(epoch_) + 1};
  for (int64_t i = examples_.count - 1; i > 0; --i)
    std::swap(order_[i], order_[rng.Next() % uint64_t(i + 1)]);
}

StatusOr<std::unique_ptr<BatchSource>> BatchSource::FromImages(
    std::shared_ptr<const ImageSet> folder, int64_t batch,
    const std::vector<int64_t>& image_shape, int64_t classes, bool train, uint64_t seed,
    int threads, Augmentation augmentation, bool normalize) {
  if (batch <= 0 || image_shape.size() != 4 || image_shape[0] != batch)
    return Status(ErrorCode::kInvalidArgument, "image folders feed rank-4 images in batches");
  if (image_shape[1] != 1 && image_shape[1] != 3)
    return Status(ErrorCode::kInvalidArgument,
                  "the model takes images of " + std::to_string(image_shape[1]) +
                      " channels; an image folder gives 1 (gray) or 3 (RGB)");
  if (folder->count() < batch)
    return Status(ErrorCode::kInvalidArgument,
                  Printable(folder->root(), 4096) + ": " + std::to_string(folder->count()) +
                      " images, fewer than one batch of " + std::to_string(batch));
  if (folder->class_count() > classes)
    return Status(ErrorCode::kInvalidArgument,
                  Printable(folder->root(), 4096) + ": " +
                      (folder->shards() ? "labels up to " + std::to_string(folder->class_count() - 1)
                                        : std::to_string(folder->class_count()) + " classes") +
                      "; the model tells " + std::to_string(classes) + " apart");
  Examples e;
  e.count = folder->count();
  e.channels = image_shape[1];
  e.height = image_shape[2];
  e.width = image_shape[3];
  e.labels.resize(static_cast<size_t>(e.count));
  for (int64_t i = 0; i < e.count; ++i) e.labels[i] = folder->label(i);
  auto source = std::unique_ptr<BatchSource>(new BatchSource(std::move(e), batch, train, seed));
  source->bad_.assign(static_cast<size_t>(folder->count()), false);
  source->folder_ = std::move(folder);
  source->threads_ = std::max(1, threads);
  source->augmentation_ = augmentation;
  source->normalize_ = normalize;
  return source;
}

int64_t BatchSource::skipped() const {
  std::lock_guard<std::mutex> lock(bad_mutex_);
  return skipped_;
}

void BatchSource::DecodeRow(int64_t first, int64_t b, Batch& out) {
  const int64_t size = examples_.channels * examples_.height * examples_.width;
  float* image = out.images.data() + b * size;
  // An undecodable file's place goes to the next file in the order that
  // decodes: the same one on every run, whatever the threads.
  const int64_t tries = std::min(examples_.count, kMaxSubstitutes);
  for (int64_t k = 0; k < tries; ++k) {
    const int64_t index = order_[(first + b + k) % examples_.count];
    const uint64_t seed =
        (seed_ * 0x9e3779b97f4a7c15ull + epoch_) * 0xbf58476d1ce4e5b9ull + uint64_t(index);
    Status status = folder_->Decode(index, augmentation_, shuffle_, flip_, seed,
                                    examples_.channels, examples_.height, examples_.width, image,
                                    normalize_);
    if (status.ok()) {
      out.labels[b] = examples_.labels[index];
      return;
    }
    std::lock_guard<std::mutex> lock(bad_mutex_);
    if (strict_) {
      if (out.error.empty()) out.error = status.message() + " (--strict-data)";
      std::fill(image, image + size, 0.0f);
      out.labels[b] = 0;
      return;
    }
    if (!bad_[index]) {
      bad_[index] = true;
      ++skipped_;
      std::fprintf(stderr, "graphrun: warning: skipping an image: %s\n",
                   status.message().c_str());
    }
  }
  std::fill(image, image + size, 0.0f);
  out.labels[b] = 0;
  std::lock_guard<std::mutex> lock(bad_mutex_);
  out.error = Printable(folder_->root(), 4096) + ": none of " + std::to_string(tries) +
              " images in a row decodes (each is named above); " +
              (folder_->shards() ? "do the shards hold JPEG or PNG files?"
                                  : "is it a folder of JPEG or PNG files?");
}

void BatchSource::Next(Batch& out) {
  if (position_ + batch_ > examples_.count) {
    ++epoch_;
    position_ = 0;
    Shuffle();
  }
  const int64_t size = examples_.channels * examples_.height * examples_.width;
  const int64_t rows = batch_ / shards_, first = position_ + shard_ * rows;
  out.images.resize(rows * size);
  out.labels.resize(rows);
  out.error.clear();
  if (folder_) {
    // Rows t, t + threads, ... on thread t; this thread takes t = 0.
    const int threads = static_cast<int>(std::min<int64_t>(threads_, rows));
    auto work = [&](int t) {
      for (int64_t b = t; b < rows; b += threads) DecodeRow(first, b, out);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (std::thread& thread : pool) thread.join();
    position_ += batch_;
    FillPixels(out);
    return;
  }
  for (int64_t b = 0; b < rows; ++b) {
    int64_t index = order_[first + b];
    float* image = out.images.data() + b * size;
    const float* from = examples_.images.data() + index * size;
    Rng rng{(seed_ * 0x9e3779b97f4a7c15ull + uint64_t(epoch_)) * 0xbf58476d1ce4e5b9ull +
            uint64_t(index)};
    if (flip_ && (rng.Next() & 1)) {
      const int64_t w = examples_.width;
      for (int64_t row = 0; row < size / w; ++row)
        for (int64_t x = 0; x < w; ++x) image[row * w + x] = from[row * w + w - 1 - x];
    } else {
      std::memcpy(image, from, size * sizeof(float));
    }
    out.labels[b] = examples_.labels[index];
  }
  position_ += batch_;
  FillPixels(out);
}

void BatchSource::FillPixels(Batch& out) const {
  if (!pixels_u8_) {
    out.pixels.clear();
    return;
  }
  out.pixels.resize(out.images.size());
  for (size_t i = 0; i < out.images.size(); ++i) {
    float x = out.images[i];
    x = x >= 0.0f ? std::min(x, 1.0f) : 0.0f;  // NaN: 0
    out.pixels[i] = static_cast<uint8_t>(std::lrint(x * 255.0f));
  }
}

Status BatchSource::SetShard(int64_t shard, int64_t shards) {
  if (shards < 1 || shard < 0 || shard >= shards || batch_ % shards != 0)
    return Status(ErrorCode::kInvalidArgument,
                  "cannot split a batch of " + std::to_string(batch_) + " into " +
                      std::to_string(shards) + " equal shards");
  shard_ = shard;
  shards_ = shards;
  return Status::Ok();
}

void BatchSource::Seek(int64_t batches) {
  if (batches < 0) batches = 0;  // the caller's bug (see dataset.h)
  const int64_t per_epoch = batches_per_epoch();
  // No overflow: the remainder is below per_epoch, and per_epoch * batch_ is
  // at most examples_.count; epoch_ is unsigned (wraps after 2^64 epochs).
  epoch_ = per_epoch > 0 ? static_cast<uint64_t>(batches / per_epoch) : 0;
  position_ = per_epoch > 0 ? (batches % per_epoch) * batch_ : 0;
  Shuffle();
}

Prefetcher::Prefetcher(BatchSource& source, int depth)
    : source_(source),
      depth_(static_cast<size_t>(std::max(1, depth))),
      buffers_(depth_ + 1) {
  for (int i = static_cast<int>(buffers_.size()) - 1; i >= 0; --i) free_.push_back(i);
  thread_ = std::thread([this] { Loop(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Prefetcher::Loop() {
  for (;;) {
    int target;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || (!free_.empty() && ready_.size() < depth_); });
      if (stop_) return;
      target = free_.back();
      free_.pop_back();
    }
    source_.Next(buffers_[static_cast<size_t>(target)]);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(target);
    }
    changed_.notify_all();
  }
}

int Prefetcher::queued() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(ready_.size());
}

const Batch& Prefetcher::Next() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    // The batch handed out last time is the caller's no longer.
    if (consumer_ >= 0) free_.push_back(consumer_);
    changed_.notify_all();
    changed_.wait(lock, [&] { return !ready_.empty(); });
    consumer_ = ready_.front();
    ready_.pop_front();
  }
  // The queue has room again: the producer fills it while the step runs.
  changed_.notify_all();
  return buffers_[static_cast<size_t>(consumer_)];
}

}  // namespace graphc::runtime
