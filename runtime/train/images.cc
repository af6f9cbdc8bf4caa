// Image folders and shards, JPEG and PNG decoding, augmentation (see images.h).
//
// Folder names and file bytes come from users and from the network: paths
// are escaped in messages, symbolic links may not leave the dataset, a file
// is read only if it is a regular file of at most kMaxFileBytes, and its
// header's size is checked before the decoder allocates anything.

#include "runtime/train/images.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>
#include <utility>

#include "contract/printable.h"
#include "runtime/core/random.h"

namespace graphc::runtime {
namespace {

// A JPEG of kMaxImagePixels compresses to far less; more is refused unread.
constexpr int64_t kMaxFileBytes = int64_t{256} << 20;
// Class folders may nest this deep (ImageFolder walks them whole).
constexpr int kMaxDepth = 16;

Status IoError(const std::string& path, const std::string& what) {
  return Status(ErrorCode::kIo, Printable(path + ": " + what, 4096));
}

bool IsImageExtension(const std::string& extension) {
  std::string ext = extension;
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

bool IsImageName(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot != std::string::npos && IsImageExtension(name.substr(dot + 1));
}

// The canonical path, or "" if it cannot be resolved.
std::string RealPath(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return "";
  std::string out = resolved;
  std::free(resolved);
  return out;
}

// Whether `path` lies inside the directory `root` (both canonical).
bool Inside(const std::string& path, const std::string& root) {
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

struct Entry {
  std::string name;
  bool directory = false;
  std::string target;  // a link's canonical target, inside the dataset
};

// DIR's entries but dot files, sorted by name; a link must resolve inside
// `root`, and is then what it links to.
Status ListDirectory(const std::string& dir, const std::string& root,
                     std::vector<Entry>& entries) {
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) return IoError(dir, std::strerror(errno));
  Status status;
  errno = 0;
  while (dirent* e = ::readdir(handle)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    const std::string path = dir + "/" + name;
    std::string target;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      status = IoError(path, std::strerror(errno));
      break;
    }
    if (S_ISLNK(st.st_mode)) {
      target = RealPath(path);
      if (target.empty()) {
        status = IoError(path, "a symbolic link that does not resolve (dangling, or a loop)");
        break;
      }
      if (!Inside(target, root)) {
        status = IoError(path, "a symbolic link that leads out of the dataset (" + target + ")");
        break;
      }
      if (::stat(path.c_str(), &st) != 0) {
        status = IoError(path, std::strerror(errno));
        break;
      }
    }
    if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))
      entries.push_back({name, S_ISDIR(st.st_mode), target});
  }
  ::closedir(handle);
  if (!status.ok()) return status;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return Status::Ok();
}

// Every image below `dir`, in the order torchvision's sorted os.walk gives:
// by folder path, then by name.
// Each file as (folder, name, the path to open: a link's target, so that
// the file is opened without following links).
using JpegFile = std::tuple<std::string, std::string, std::string>;
Status CollectJpegs(const std::string& dir, const std::string& root, int depth,
                    std::vector<JpegFile>& files) {
  if (depth > kMaxDepth)
    return IoError(dir, "folders nest more than " + std::to_string(kMaxDepth) + " deep");
  std::vector<Entry> entries;
  GRAPHC_RETURN_IF_ERROR(ListDirectory(dir, root, entries));
  for (const Entry& e : entries) {
    if (e.directory)
      GRAPHC_RETURN_IF_ERROR(CollectJpegs(dir + "/" + e.name, root, depth + 1, files));
    else if (IsImageName(e.name))
      files.emplace_back(dir, e.name, e.target.empty() ? dir + "/" + e.name : e.target);
  }
  return Status::Ok();
}

// Whether the JPEG's frame is progressive (SOF2, SOF6, SOF10, SOF14): the
// decoder then keeps every coefficient of the image, whatever the scale.
bool IsProgressive(const std::vector<unsigned char>& b) {
  size_t i = 2;  // after SOI
  while (i + 4 <= b.size() && b[i] == 0xff) {
    const unsigned char marker = b[i + 1];
    if (marker == 0xff) {  // fill byte
      ++i;
      continue;
    }
    if (marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc)
      return marker == 0xc2 || marker == 0xc6 || marker == 0xca || marker == 0xce;
    i += 2 + ((size_t{b[i + 2]} << 8) | b[i + 3]);
  }
  return false;
}

// Reads `size` bytes at `offset` of a regular file (size -1: the whole
// file), at most kMaxFileBytes; `name` names them in errors.
Status ReadBytes(const std::string& path, int64_t offset, int64_t size, const std::string& name,
                 std::vector<unsigned char>& bytes) {
  // Links were resolved when the data set was opened: one swapped in since
  // is refused, not followed.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return IoError(path, std::strerror(errno));
  struct stat st;
  Status status;
  const int64_t want = size < 0 ? 0 : size;
  if (::fstat(fd, &st) != 0) {
    status = IoError(path, std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    status = IoError(path, "not a regular file");
  } else if (size >= 0 && (offset < 0 || offset > st.st_size || want > st.st_size - offset)) {
    status = IoError(name, "past the end of its shard (" + std::to_string(st.st_size) +
                               " bytes now: changed since it was indexed?)");
  } else if ((size < 0 ? st.st_size : want) > kMaxFileBytes) {
    status = IoError(name, std::to_string(size < 0 ? st.st_size : want) +
                               " bytes, more than an image file may hold (" +
                               std::to_string(kMaxFileBytes) + ")");
  } else if ((size < 0 ? st.st_size : want) == 0) {
    status = IoError(name, "an empty file");
  } else {
    bytes.resize(static_cast<size_t>(size < 0 ? st.st_size : want));
    const off_t first = size < 0 ? 0 : static_cast<off_t>(offset);
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          ::pread(fd, bytes.data() + done, bytes.size() - done, first + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = IoError(name, n < 0 ? std::strerror(errno) : "shorter than its size");
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  return status;
}

// Per output pixel along one axis: the first source pixel and the weights of
// it and the following ones (a triangle filter as wide as the scale, at
// least one source pixel: PIL's antialiased bilinear), `stride` weights a
// pixel, zero past its own taps.
struct Taps {
  int64_t stride = 0;
  std::vector<int64_t> first, count;
  std::vector<float> weights;
};

Taps MakeTaps(double start, double length, int64_t out, int64_t limit) {
  Taps taps;
  const double scale = length / static_cast<double>(out);
  const double support = std::max(1.0, scale);
  taps.stride = static_cast<int64_t>(std::ceil(2 * support)) + 2;
  taps.first.resize(static_cast<size_t>(out));
  taps.count.resize(static_cast<size_t>(out));
  taps.weights.assign(static_cast<size_t>(out * taps.stride), 0.0f);
  for (int64_t o = 0; o < out; ++o) {
    const double center = start + (static_cast<double>(o) + 0.5) * scale;
    int64_t lo = static_cast<int64_t>(std::floor(center - support));
    int64_t hi = static_cast<int64_t>(std::ceil(center + support));
    lo = std::clamp<int64_t>(lo, 0, limit - 1);
    hi = std::clamp<int64_t>(hi, lo + 1, std::min(limit, lo + taps.stride));
    float* w = taps.weights.data() + o * taps.stride;
    double sum = 0;
    for (int64_t s = lo; s < hi; ++s) {
      const double t = (static_cast<double>(s) + 0.5 - center) / support;
      const double v = std::max(0.0, 1.0 - std::fabs(t));
      w[s - lo] = static_cast<float>(v);
      sum += v;
    }
    if (sum <= 0) {  // the center past the image's edge: its nearest pixel
      lo = std::clamp<int64_t>(static_cast<int64_t>(center), 0, limit - 1);
      hi = lo + 1;
      std::fill(w, w + taps.stride, 0.0f);
      w[0] = 1.0f;
      sum = 1;
    }
    for (int64_t s = 0; s < hi - lo; ++s) w[s] = static_cast<float>(w[s] / sum);
    taps.first[o] = lo;
    taps.count[o] = hi - lo;
  }
  return taps;
}

// One source row resampled across: `channels` interleaved (1 or 3; any
// other count takes the general loop).
void ResampleRow(const uint8_t* src, const Taps& across, int64_t out_width, int64_t channels,
                 float* dst) {
  for (int64_t o = 0; o < out_width; ++o) {
    const float* w = across.weights.data() + o * across.stride;
    const uint8_t* from = src + across.first[o] * channels;
    const int64_t n = across.count[o];
    if (channels == 3) {
      float r = 0, g = 0, b = 0;
      for (int64_t t = 0; t < n; ++t) {
        r += w[t] * from[3 * t];
        g += w[t] * from[3 * t + 1];
        b += w[t] * from[3 * t + 2];
      }
      dst[3 * o] = r, dst[3 * o + 1] = g, dst[3 * o + 2] = b;
    } else {
      for (int64_t c = 0; c < channels; ++c) {
        float sum = 0;
        for (int64_t t = 0; t < n; ++t) sum += w[t] * from[t * channels + c];
        dst[o * channels + c] = sum;
      }
    }
  }
}

}  // namespace

CropBox RandomResizedCropBox(int64_t width, int64_t height,
                             const std::function<double()>& uniform) {
  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double lo = std::log(3.0 / 4.0), hi = std::log(4.0 / 3.0);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (0.08 + (1.0 - 0.08) * uniform());
    const double ratio = std::exp(lo + (hi - lo) * uniform());
    // Python's round: halves to even, as nearbyint in the default mode.
    const int64_t w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * ratio)));
    const int64_t h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / ratio)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      // torch.randint(0, n + 1): an integer in [0, n].
      const int64_t top = std::min<int64_t>(
          height - h, static_cast<int64_t>(uniform() * static_cast<double>(height - h + 1)));
      const int64_t left = std::min<int64_t>(
          width - w, static_cast<int64_t>(uniform() * static_cast<double>(width - w + 1)));
      return {static_cast<double>(left), static_cast<double>(top), static_cast<double>(w),
              static_cast<double>(h)};
    }
  }
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < 3.0 / 4.0)
    h = static_cast<int64_t>(std::nearbyint(static_cast<double>(w) / (3.0 / 4.0)));
  else if (in_ratio > 4.0 / 3.0)
    w = static_cast<int64_t>(std::nearbyint(static_cast<double>(h) * (4.0 / 3.0)));
  return {static_cast<double>((width - w) / 2), static_cast<double>((height - h) / 2),
          static_cast<double>(w), static_cast<double>(h)};
}

CropBox CenterCropBox(int64_t width, int64_t height, int64_t out_width, int64_t out_height) {
  // Resize: the short side to round(short * 256 / 224) of the output's short
  // side, the long one in proportion (truncated, as torchvision's Resize).
  const int64_t out_short = std::min(out_width, out_height);
  const int64_t resized = static_cast<int64_t>(
      std::nearbyint(static_cast<double>(out_short) * 256.0 / 224.0));
  const int64_t short_side = std::min(width, height);
  const double scale = static_cast<double>(short_side) / static_cast<double>(resized);
  const int64_t rw = width <= height ? resized : (resized * width) / height;
  const int64_t rh = width <= height ? (resized * height) / width : resized;
  // CenterCrop: offsets round((resized - crop) / 2), in resized pixels.
  const double left = std::nearbyint(static_cast<double>(rw - out_width) / 2.0);
  const double top = std::nearbyint(static_cast<double>(rh - out_height) / 2.0);
  return {left * scale, top * scale, static_cast<double>(out_width) * scale,
          static_cast<double>(out_height) * scale};
}

void ResizeCrop(const uint8_t* pixels, int64_t stride, int64_t image_width, int64_t image_height,
                int64_t channels, const CropBox& box, int64_t out_width, int64_t out_height,
                bool flip, float* out) {
  const Taps across = MakeTaps(box.x, box.width, out_width, image_width);
  const Taps down = MakeTaps(box.y, box.height, out_height, image_height);
  // The source rows the vertical taps read, resampled across first.
  int64_t row_lo = image_height, row_hi = 0;
  for (int64_t o = 0; o < out_height; ++o) {
    row_lo = std::min(row_lo, down.first[o]);
    row_hi = std::max(row_hi, down.first[o] + down.count[o]);
  }
  const int64_t row_size = out_width * channels;
  thread_local std::vector<float> rows, sum;
  rows.resize(static_cast<size_t>((row_hi - row_lo) * row_size));
  sum.resize(static_cast<size_t>(row_size));
  for (int64_t r = row_lo; r < row_hi; ++r)
    ResampleRow(pixels + r * stride, across, out_width, channels,
                rows.data() + (r - row_lo) * row_size);
  const int64_t plane = out_height * out_width;
  for (int64_t oy = 0; oy < out_height; ++oy) {
    // The output row, interleaved: the weighted sum of whole resampled rows.
    const float* w = down.weights.data() + oy * down.stride;
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int64_t t = 0; t < down.count[oy]; ++t) {
      const float* row = rows.data() + (down.first[oy] + t - row_lo) * row_size;
      const float weight = w[t];
      for (int64_t k = 0; k < row_size; ++k) sum[k] += weight * row[k];
    }
    for (int64_t k = 0; k < row_size; ++k)  // to [0, 1] (a vector loop)
      sum[k] = std::min(std::max(sum[k], 0.0f), 255.0f) / 255.0f;  // as x / 255 elsewhere
    for (int64_t c = 0; c < channels; ++c) {
      float* dst = out + c * plane + oy * out_width;
      const float* src = sum.data() + c;
      if (flip)
        for (int64_t ox = 0; ox < out_width; ++ox) dst[ox] = src[(out_width - 1 - ox) * channels];
      else
        for (int64_t ox = 0; ox < out_width; ++ox) dst[ox] = src[ox * channels];
    }
  }
}

namespace {

// Decodes JPEG `bytes` (named `path` in errors) as DecodeImageFile does.
Status DecodeJpegBytes(const std::string& path, const std::vector<unsigned char>& bytes,
                       int64_t channels, int64_t height, int64_t width,
                       const std::function<Augment(int64_t, int64_t)>& augment, float* out) {
  tjhandle tj = tjInitDecompress();
  if (tj == nullptr) return IoError(path, "cannot start the JPEG decoder");
  struct Closer {
    tjhandle h;
    ~Closer() { tjDestroy(h); }
  } closer{tj};
  int w = 0, h = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, bytes.data(), static_cast<unsigned long>(bytes.size()), &w, &h,
                          &subsampling, &colorspace) != 0)
    return IoError(path, std::string("not a JPEG the decoder reads: ") + tjGetErrorStr2(tj));
  if (w < 1 || h < 1)
    return IoError(path, "an image of no pixels (" + std::to_string(w) + "x" +
                             std::to_string(h) + ")");
  const bool progressive = IsProgressive(bytes);
  const int64_t most = progressive ? kMaxProgressivePixels : kMaxImagePixels;
  if (static_cast<int64_t>(w) * h > most)
    return IoError(path, std::to_string(w) + "x" + std::to_string(h) + " pixels, more than " +
                             (progressive ? "a progressive JPEG" : "an image") + " may have (" +
                             std::to_string(most) + ")");
  const Augment chosen_augment = augment(w, h);
  const CropBox& box = chosen_augment.box;
  // The smallest DCT scaling that leaves the crop at least the output's size.
  int factors = 0;
  const tjscalingfactor* scaling = tjGetScalingFactors(&factors);
  tjscalingfactor chosen{1, 1};
  double chosen_scale = 1.0;
  for (int i = 0; scaling != nullptr && i < factors; ++i) {
    const double s = static_cast<double>(scaling[i].num) / scaling[i].denom;
    if (s < chosen_scale && box.width * s >= static_cast<double>(width) &&
        box.height * s >= static_cast<double>(height)) {
      chosen = scaling[i];
      chosen_scale = s;
    }
  }
  const int sw = TJSCALED(w, chosen), sh = TJSCALED(h, chosen);
  const int format = channels == 1 ? TJPF_GRAY : TJPF_RGB;
  thread_local std::vector<uint8_t> pixels;  // reused: no zeroing per image
  pixels.resize(static_cast<size_t>(sw) * sh * static_cast<size_t>(channels));
  if (tjDecompress2(tj, bytes.data(), static_cast<unsigned long>(bytes.size()), pixels.data(), sw,
                    0, sh, format, TJFLAG_STOPONWARNING | TJFLAG_ACCURATEDCT | TJFLAG_LIMITSCANS) != 0)
    return IoError(path, std::string("does not decode: ") + tjGetErrorStr2(tj));
  const double fx = static_cast<double>(sw) / w, fy = static_cast<double>(sh) / h;
  const CropBox scaled{box.x * fx, box.y * fy, box.width * fx, box.height * fy};
  ResizeCrop(pixels.data(), static_cast<int64_t>(sw) * channels, sw, sh, channels, scaled, width,
             height, chosen_augment.flip, out);
  return Status::Ok();
}

// Decodes PNG `bytes` (named `path` in errors) with libpng's simplified
// API: 8-bit RGBA (palettes expanded, gray replicated, 16-bit samples
// rounded to 8 bits, within a level of PIL's), then RGB with the alpha
// channel dropped, as PIL's convert("RGB") does, or gray as PIL's
// convert("L") weighs RGB (ITU-R 601). Unlike PIL, libpng applies a gAMA
// chunk that is not sRGB's.
Status DecodePngBytes(const std::string& path, const std::vector<unsigned char>& bytes,
                      int64_t channels, int64_t height, int64_t width,
                      const std::function<Augment(int64_t, int64_t)>& augment, float* out) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  struct Closer {
    png_image* image;
    ~Closer() { png_image_free(image); }
  } closer{&image};
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()))
    return IoError(path, std::string("not a PNG the decoder reads: ") + image.message);
  const int64_t w = image.width, h = image.height;
  // A PNG decodes whole (no reduced-size decoding): as few pixels as a
  // progressive JPEG may have.
  if (w < 1 || h < 1 || w * h > kMaxProgressivePixels)
    return IoError(path, std::to_string(w) + "x" + std::to_string(h) +
                             " pixels; a PNG may have 1 to " +
                             std::to_string(kMaxProgressivePixels));
  image.format = PNG_FORMAT_RGBA;
  // 16-bit samples without a gAMA or sRGB chunk are sRGB (as PIL takes
  // them), not libpng's default of linear.
  image.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  thread_local std::vector<uint8_t> rgba;
  rgba.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, rgba.data(), 0, nullptr))
    return IoError(path, std::string("does not decode: ") + image.message);
  thread_local std::vector<uint8_t> pixels;
  pixels.resize(static_cast<size_t>(w * h * channels));
  for (int64_t p = 0; p < w * h; ++p) {
    const uint8_t* px = &rgba[static_cast<size_t>(p) * 4];
    if (channels == 3) {
      std::memcpy(&pixels[static_cast<size_t>(p) * 3], px, 3);
    } else {
      pixels[static_cast<size_t>(p)] =
          static_cast<uint8_t>((px[0] * 19595 + px[1] * 38470 + px[2] * 7471 + 0x8000) >> 16);
    }
  }
  const Augment chosen = augment(w, h);
  ResizeCrop(pixels.data(), w * channels, w, h, channels, chosen.box, width, height, chosen.flip,
             out);
  return Status::Ok();
}

// A PNG by its signature, else a JPEG (whose decoder names what else it is).
Status DecodeImageBytes(const std::string& path, const std::vector<unsigned char>& bytes,
                        int64_t channels, int64_t height, int64_t width,
                        const std::function<Augment(int64_t, int64_t)>& augment, float* out) {
  static constexpr unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0)
    return DecodePngBytes(path, bytes, channels, height, width, augment, out);
  return DecodeJpegBytes(path, bytes, channels, height, width, augment, out);
}

}  // namespace

Status DecodeImageFile(const std::string& path, int64_t channels, int64_t height, int64_t width,
                      const std::function<Augment(int64_t, int64_t)>& augment, float* out) {
  thread_local std::vector<unsigned char> bytes;
  GRAPHC_RETURN_IF_ERROR(ReadBytes(path, 0, -1, path, bytes));
  return DecodeImageBytes(path, bytes, channels, height, width, augment, out);
}

StatusOr<std::unique_ptr<ImageSet>> ImageSet::OpenFolder(const std::string& dir,
                                                         const std::vector<std::string>* classes) {
  const std::string root = RealPath(dir);
  struct stat st;
  if (root.empty() || ::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return IoError(dir, "not a folder of class folders");
  std::vector<Entry> entries;
  GRAPHC_RETURN_IF_ERROR(ListDirectory(root, root, entries));
  auto folder = std::unique_ptr<ImageSet>(new ImageSet());
  folder->root_ = dir;
  for (const Entry& e : entries) {
    if (!e.directory) continue;
    std::vector<JpegFile> files;
    const std::string class_dir = root + "/" + e.name;
    GRAPHC_RETURN_IF_ERROR(CollectJpegs(class_dir, root, 1, files));
    if (files.empty())
      return IoError(class_dir, "a class folder without an image (*.jpg, *.jpeg, *.png)");
    std::sort(files.begin(), files.end());
    const int32_t label = static_cast<int32_t>(folder->classes_.size());
    folder->classes_.push_back(e.name);
    for (auto& [where, name, open] : files) {
      if (folder->files_.size() >= size_t{INT32_MAX})
        return IoError(dir, "more than 2^31 images");
      Item item;
      item.file = static_cast<int32_t>(folder->files_.size());
      item.label = label;
      folder->files_.push_back(open);
      folder->items_.push_back(item);
    }
  }
  folder->class_count_ = static_cast<int64_t>(folder->classes_.size());
  if (folder->classes_.empty()) return IoError(dir, "no class folders");
  if (classes != nullptr && *classes != folder->classes_)
    return IoError(dir, "holds " + std::to_string(folder->classes_.size()) +
                            " classes that are not the training folder's " +
                            std::to_string(classes->size()) + " (the same names, sorted)");
  return folder;
}

Status ImageSet::Decode(int64_t i, Augmentation augmentation, bool train, bool flip,
                           uint64_t seed, int64_t channels, int64_t height, int64_t width,
                           float* out, bool normalize) const {
  SplitMix64 rng{seed};
  auto uniform = [&rng] { return static_cast<double>(rng.Next() >> 11) * 0x1.0p-53; };
  auto augment = [&](int64_t w, int64_t h) {
    Augment a;
    if (augmentation == Augmentation::kResize) {
      a.box = CropBox{0, 0, static_cast<double>(w), static_cast<double>(h)};
      a.flip = train && flip && (rng.Next() & 1) != 0;
    } else if (train) {
      a.box = RandomResizedCropBox(w, h, uniform);
      a.flip = (rng.Next() & 1) != 0;  // drawn after the crop's values
    } else {
      a.box = CenterCropBox(w, h, width, height);
    }
    return a;
  };
  thread_local std::vector<unsigned char> bytes;
  const Item& item = items_[static_cast<size_t>(i)];
  const std::string& file = files_[static_cast<size_t>(item.file)];
  const std::string name = shards_ ? path(i) : file;
  GRAPHC_RETURN_IF_ERROR(ReadBytes(file, item.offset, item.size, name, bytes));
  GRAPHC_RETURN_IF_ERROR(DecodeImageBytes(name, bytes, channels, height, width, augment, out));
  if (channels == 3 && normalize) {
    static constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
    static constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t p = 0; p < height * width; ++p)
        out[c * height * width + p] = (out[c * height * width + p] - kMean[c]) / kStd[c];
  }
  return Status::Ok();
}

std::string ImageSet::path(int64_t i) const {
  const Item& item = items_[static_cast<size_t>(i)];
  const std::string& file = files_[static_cast<size_t>(item.file)];
  return shards_ ? file + ": " + members_[static_cast<size_t>(i)] : file;
}

// ---------------------------------------------------------------------------
// Tar shards.

namespace {

constexpr int64_t kTarBlock = 512;
constexpr int64_t kMaxPaxBytes = int64_t{1} << 20;   // a pax extended header
constexpr int64_t kMaxLongName = int64_t{1} << 16;   // a GNU long name
constexpr int64_t kMaxLabelBytes = 64;               // KEY.cls
constexpr size_t kMaxPatternBytes = 4096;
constexpr int64_t kMaxBraceGroups = 8;
constexpr int64_t kMaxExpandedBytes = int64_t{64} << 20;

// An open file descriptor, closed at the end of its scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly `size` bytes at `offset` of `path`'s open `fd`.
Status PreadAll(int fd, const std::string& path, void* out, int64_t size, int64_t offset) {
  auto* to = static_cast<unsigned char*>(out);
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, to + done, static_cast<size_t>(size - done),
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(path, std::strerror(errno));
    if (n == 0) return IoError(path, "cut short while it was read (changed meanwhile?)");
    done += n;
  }
  return Status::Ok();
}

// A tar number field: octal digits (after optional spaces, ending at a NUL,
// a space or the field's end), or GNU's base-256 for large values (a first
// byte of 0x80; 0xff, negative, is refused).
bool TarNumber(const unsigned char* field, size_t size, int64_t& out) {
  uint64_t value = 0;
  if (field[0] & 0x80) {
    if (field[0] != 0x80) return false;
    for (size_t i = 1; i < size; ++i) {
      if (value >> 55) return false;
      value = (value << 8) | field[i];
    }
  } else {
    size_t i = 0;
    while (i < size && field[i] == ' ') ++i;
    for (; i < size && field[i] >= '0' && field[i] <= '7'; ++i) {
      if (value >> 60) return false;
      value = value * 8 + static_cast<uint64_t>(field[i] - '0');
    }
    if (i < size && field[i] != 0 && field[i] != ' ') return false;
  }
  if (value > static_cast<uint64_t>(INT64_MAX)) return false;
  out = static_cast<int64_t>(value);
  return true;
}

// A NUL-terminated (or full) text field.
std::string TarText(const unsigned char* field, size_t size) {
  const char* text = reinterpret_cast<const char*>(field);
  return std::string(text, strnlen(text, size));
}

// Whether the header's checksum (the sum of its bytes, the checksum field
// counted as spaces; historic writers summed signed bytes) matches.
bool TarChecksumMatches(const unsigned char* header) {
  int64_t stored = 0;
  if (!TarNumber(header + 148, 8, stored)) return false;
  int64_t unsigned_sum = 0, signed_sum = 0;
  for (int i = 0; i < kTarBlock; ++i) {
    const unsigned char c = (i >= 148 && i < 156) ? ' ' : header[i];
    unsigned_sum += c;
    signed_sum += static_cast<signed char>(c);
  }
  return stored == unsigned_sum || stored == signed_sum;
}

// A pax extended header's path and size records ("LENGTH key=value\n").
bool ParsePax(const std::string& data, std::string& path, int64_t& size) {
  size_t at = 0;
  while (at < data.size()) {
    size_t length = 0, i = at;
    for (; i < data.size() && data[i] >= '0' && data[i] <= '9' && i - at < 8; ++i)
      length = length * 10 + static_cast<size_t>(data[i] - '0');
    if (i == at || i >= data.size() || data[i] != ' ' || length <= i - at + 1 ||
        length > data.size() - at || data[at + length - 1] != '\n')
      return false;
    const std::string record = data.substr(i + 1, at + length - 1 - (i + 1));
    const size_t equals = record.find('=');
    if (equals == std::string::npos) return false;
    const std::string key = record.substr(0, equals), value = record.substr(equals + 1);
    if (key == "path") {
      path = value;
    } else if (key == "size") {
      if (value.empty() || value.size() > 18 ||
          value.find_first_not_of("0123456789") != std::string::npos)
        return false;
      size = std::stoll(value);
    }
    at += length;
  }
  return true;
}

// A label: a decimal class index, surrounded by white space at most.
bool ParseLabel(const std::string& text, int32_t& label) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return false;
  const size_t last = text.find_last_not_of(" \t\r\n");
  const std::string digits = text.substr(first, last - first + 1);
  if (digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  const int64_t value = std::stoll(digits);
  if (value > INT32_MAX) return false;
  label = static_cast<int32_t>(value);
  return true;
}

// Brace expansion, as WebDataset's braceexpand: the first {A..B} or {a,b,...}
// expanded, then the rest of each result.
Status ExpandBraces(const std::string& pattern, std::vector<std::string>& out) {
  auto error = [&](const std::string& what) {
    return Status(ErrorCode::kInvalidArgument,
                  Printable("shard pattern '" + pattern + "': " + what, 4096));
  };
  const size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos) return error("a '}' without its '{'");
    if (static_cast<int64_t>(out.size()) >= kMaxShards)
      return error("more than " + std::to_string(kMaxShards) + " shards");
    out.push_back(pattern);
    return Status::Ok();
  }
  const size_t close = pattern.find('}', open);
  if (close == std::string::npos) return error("a '{' without its '}'");
  const std::string body = pattern.substr(open + 1, close - open - 1);
  if (body.find('{') != std::string::npos) return error("braces inside braces");
  if (pattern.substr(0, open).find('}') != std::string::npos)
    return error("a '}' without its '{'");
  const std::string before = pattern.substr(0, open), after = pattern.substr(close + 1);
  const size_t dots = body.find("..");
  if (dots != std::string::npos) {
    const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
    auto numeric = [](const std::string& s) {
      return !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!numeric(a) || !numeric(b)) return error("{" + body + "} is not a range of numbers");
    const int64_t from = std::stoll(a), to = std::stoll(b);
    const size_t width = (a.size() > 1 && a[0] == '0') || (b.size() > 1 && b[0] == '0')
                             ? std::max(a.size(), b.size())
                             : 0;
    const int64_t step = from <= to ? 1 : -1;
    if ((to - from) * step >= kMaxShards)
      return error("more than " + std::to_string(kMaxShards) + " shards");
    for (int64_t n = from;; n += step) {
      std::string number = std::to_string(n);
      if (number.size() < width) number.insert(0, width - number.size(), '0');
      GRAPHC_RETURN_IF_ERROR(ExpandBraces(before + number + after, out));
      if (n == to) break;
    }
    return Status::Ok();
  }
  if (body.find(',') == std::string::npos) return error("{" + body + "} is not A..B or a,b,...");
  size_t start = 0;
  for (;;) {
    const size_t comma = body.find(',', start);
    GRAPHC_RETURN_IF_ERROR(ExpandBraces(
        before + body.substr(start, comma == std::string::npos ? std::string::npos : comma - start) +
            after,
        out));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern) {
  if (pattern.empty()) return Status(ErrorCode::kInvalidArgument, "an empty shard pattern");
  if (pattern.size() > kMaxPatternBytes)
    return Status(ErrorCode::kInvalidArgument,
                  "a shard pattern of more than " + std::to_string(kMaxPatternBytes) + " bytes");
  // Bounded before anything is expanded: the names' count and bytes, and
  // the groups (each pass over the names is one group's).
  int64_t names = 1, groups = 0;
  for (size_t open = pattern.find('{'); open != std::string::npos;
       open = pattern.find('{', open + 1)) {
    const size_t close = pattern.find('}', open);
    if (close == std::string::npos) break;  // ExpandBraces names the error
    const std::string body = pattern.substr(open + 1, close - open - 1);
    int64_t alternatives = 1 + static_cast<int64_t>(std::count(body.begin(), body.end(), ','));
    const size_t dots = body.find("..");
    if (dots != std::string::npos) {
      const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
      if (!a.empty() && !b.empty() && a.size() <= 18 && b.size() <= 18 &&
          a.find_first_not_of("0123456789") == std::string::npos &&
          b.find_first_not_of("0123456789") == std::string::npos)
        alternatives = std::llabs(std::stoll(b) - std::stoll(a)) + 1;
    }
    ++groups;
    if (groups > kMaxBraceGroups || __builtin_mul_overflow(names, alternatives, &names) ||
        names > kMaxShards ||
        names * static_cast<int64_t>(pattern.size() + 20 * groups) > kMaxExpandedBytes)
      return Status(ErrorCode::kInvalidArgument,
                    Printable("shard pattern '" + pattern + "': expands to more than " +
                                  std::to_string(kMaxShards) + " shards, " +
                                  std::to_string(kMaxExpandedBytes >> 20) + " MiB of names or " +
                                  std::to_string(kMaxBraceGroups) + " brace groups",
                              4096));
  }
  std::vector<std::string> expanded;
  GRAPHC_RETURN_IF_ERROR(ExpandBraces(pattern, expanded));
  std::vector<std::string> files;
  for (const std::string& name : expanded) {
    if (name.find_first_of("*?[") == std::string::npos) {
      files.push_back(name);
    } else {
      glob_t matches{};
      const int result = ::glob(name.c_str(), GLOB_ERR, nullptr, &matches);
      if (result == 0)
        for (size_t i = 0; i < matches.gl_pathc; ++i) files.push_back(matches.gl_pathv[i]);
      ::globfree(&matches);
      if (result == GLOB_NOMATCH)
        return Status(ErrorCode::kInvalidArgument, Printable("'" + name + "' matches no file", 4096));
      if (result != 0)
        return Status(ErrorCode::kIo, Printable("'" + name + "': cannot be matched (" +
                                                    (result == GLOB_NOSPACE ? "out of memory"
                                                                            : "a folder cannot be read") +
                                                    ")", 4096));
    }
    if (static_cast<int64_t>(files.size()) > kMaxShards)
      return Status(ErrorCode::kInvalidArgument,
                    Printable("shard pattern '" + pattern + "': more than " +
                                  std::to_string(kMaxShards) + " shards", 4096));
  }
  return files;
}

Status ImageSet::IndexShard(const std::string& path, int32_t file) {
  Fd shard;
  shard.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (shard.fd < 0) return IoError(path, std::strerror(errno));
  struct stat st;
  if (::fstat(shard.fd, &st) != 0) return IoError(path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return IoError(path, "not a regular file (a tar shard)");
  const int64_t end = st.st_size;
  auto at = [&](int64_t offset, const std::string& what) {
    return IoError(path, "byte " + std::to_string(offset) + ": " + what);
  };

  // The sample being gathered: the members of one key.
  std::string key;
  bool has_image = false, has_label = false;
  Item image;
  std::string image_member, label_member;
  const size_t first_item = items_.size();
  auto finish = [&]() -> Status {
    if (has_image && !has_label)
      return IoError(path + ": " + image_member,
                     "an image without its label (" + key + ".cls, a class index)");
    if (has_label && !has_image)
      return IoError(path + ": " + label_member,
                     "a label without its image (" + key + ".jpg, .jpeg or .png)");
    if (has_image) {
      items_.push_back(image);
      members_.push_back(image_member);
      class_count_ = std::max<int64_t>(class_count_, int64_t{image.label} + 1);
    }
    has_image = has_label = false;
    return Status::Ok();
  };

  unsigned char header[kTarBlock];
  std::string long_name, pax_path;
  int64_t pax_size = -1;
  int64_t pos = 0;
  while (pos < end) {
    if (end - pos < kTarBlock) return at(pos, "a tar header cut short (the shard is truncated)");
    GRAPHC_RETURN_IF_ERROR(PreadAll(shard.fd, path, header, kTarBlock, pos));
    if (std::all_of(header, header + kTarBlock, [](unsigned char c) { return c == 0; }))
      break;  // the end-of-archive blocks
    if (!TarChecksumMatches(header))
      return at(pos, pos == 0 ? "not a tar file (no tar header with a valid checksum)"
                              : "a corrupt tar header (its checksum does not match)");
    int64_t size = 0;
    if (!TarNumber(header + 124, 12, size)) return at(pos, "a tar header with a corrupt size");
    const char type = static_cast<char>(header[156]);
    // Extended headers (pax 'x' and 'g', GNU 'L' and 'K') describe the next
    // member; their own sizes are their own.
    const bool extended = type == 'x' || type == 'g' || type == 'L' || type == 'K';
    if (pax_size >= 0 && !extended) size = pax_size;
    const int64_t data = pos + kTarBlock;
    std::string name = TarText(header, 100);
    if (std::memcmp(header + 257, "ustar\0", 6) == 0) {  // POSIX: a prefix field
      const std::string prefix = TarText(header + 345, 155);
      if (!prefix.empty()) name = prefix + "/" + name;
    }
    if (!pax_path.empty()) name = pax_path;
    else if (!long_name.empty()) name = long_name;
    if (size > end - data)
      return at(pos, "member '" + name + "' of " + std::to_string(size) +
                         " bytes runs past the end of the shard (truncated)");
    const int64_t next = data + (size + kTarBlock - 1) / kTarBlock * kTarBlock;
    if (type == 'g' || type == 'K') {  // global records, a long link name: not used
      pos = next;
      continue;
    }
    if (type == 'x' || type == 'L') {
      if (size > (type == 'x' ? kMaxPaxBytes : kMaxLongName))
        return at(pos, "an extended header of " + std::to_string(size) + " bytes");
      std::string text(static_cast<size_t>(size), '\0');
      GRAPHC_RETURN_IF_ERROR(PreadAll(shard.fd, path, text.data(), size, data));
      if (type == 'L') {
        long_name = text.substr(0, text.find('\0'));
      } else if (!ParsePax(text, pax_path, pax_size)) {
        return at(pos, "a corrupt pax extended header");
      }
      pos = next;
      continue;
    }
    long_name.clear();
    pax_path.clear();
    pax_size = -1;
    pos = next;
    if (!(type == '0' || type == '\0' || type == '7'))
      continue;  // not a file: a directory, a link, a device
    // WebDataset's key and extension: split at the first dot of the file name.
    const size_t slash = name.rfind('/');
    const size_t base = slash == std::string::npos ? 0 : slash + 1;
    const size_t dot = name.find('.', base);
    if (dot == std::string::npos || dot == base) continue;
    std::string extension = name.substr(dot + 1);
    for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string member_key = name.substr(0, dot);
    if (member_key != key) {
      GRAPHC_RETURN_IF_ERROR(finish());
      key = member_key;
    }
    if (IsImageExtension(extension)) {
      if (has_image) return IoError(path + ": " + name, "a second image for key '" + key + "'");
      has_image = true;
      image.file = file;
      image.offset = data;
      image.size = size;
      image_member = name;
    } else if (extension == "cls") {
      if (has_label) return IoError(path + ": " + name, "a second label for key '" + key + "'");
      if (size > kMaxLabelBytes)
        return IoError(path + ": " + name,
                       std::to_string(size) + " bytes; a label is a decimal class index");
      std::string text(static_cast<size_t>(size), '\0');
      GRAPHC_RETURN_IF_ERROR(PreadAll(shard.fd, path, text.data(), size, data));
      if (!ParseLabel(text, image.label))
        return IoError(path + ": " + name,
                       "a label must be a decimal class index (0 to 2^31 - 1), not '" + text + "'");
      has_label = true;
      label_member = name;
    }
  }
  GRAPHC_RETURN_IF_ERROR(finish());
  if (items_.size() == first_item)
    return IoError(path, "holds no samples (KEY.jpg or KEY.png with its label in KEY.cls)");
  return Status::Ok();
}

StatusOr<std::unique_ptr<ImageSet>> ImageSet::OpenShards(const std::string& pattern) {
  StatusOr<std::vector<std::string>> names = ExpandShardPattern(pattern);
  if (!names.ok()) return names.status();
  auto set = std::unique_ptr<ImageSet>(new ImageSet());
  set->root_ = pattern;
  set->shards_ = true;
  std::set<std::string> seen;
  for (const std::string& name : *names) {
    const std::string real = RealPath(name);
    if (real.empty()) return IoError(name, std::strerror(errno));
    if (!seen.insert(real).second)
      return IoError(name, "named twice by the shard pattern (as " + real + ")");
    const int32_t file = static_cast<int32_t>(set->files_.size());
    set->files_.push_back(real);
    GRAPHC_RETURN_IF_ERROR(set->IndexShard(real, file));
  }
  return set;
}

}  // namespace graphc::runtime
