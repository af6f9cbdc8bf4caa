// Image folders, JPEG decoding and augmentation (see images.h).
//
// Folder names and file bytes come from users and from the network: paths
// are escaped in messages, symbolic links may not leave the dataset, a file
// is read only if it is a regular file of at most kMaxFileBytes, and its
// header's size is checked before the decoder allocates anything.

#include "runtime/train/images.h"

#include <dirent.h>
#include <fcntl.h>
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

bool IsJpegName(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "jpg" || ext == "jpeg";
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

// Every JPEG below `dir`, in the order torchvision's sorted os.walk gives:
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
    else if (IsJpegName(e.name))
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

// Reads a whole regular file of at most kMaxFileBytes.
Status ReadFile(const std::string& path, std::vector<unsigned char>& bytes) {
  // Links were resolved when the folder was read: one swapped in since is
  // refused, not followed.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return IoError(path, std::strerror(errno));
  struct stat st;
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = IoError(path, std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    status = IoError(path, "not a regular file");
  } else if (st.st_size > kMaxFileBytes) {
    status = IoError(path, std::to_string(st.st_size) + " bytes, more than an image file may hold (" +
                               std::to_string(kMaxFileBytes) + ")");
  } else if (st.st_size == 0) {
    status = IoError(path, "an empty file");
  } else {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = IoError(path, n < 0 ? std::strerror(errno) : "shorter than its size");
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

Status DecodeJpegFile(const std::string& path, int64_t channels, int64_t height, int64_t width,
                      const std::function<Augment(int64_t, int64_t)>& augment, float* out) {
  thread_local std::vector<unsigned char> bytes;
  GRAPHC_RETURN_IF_ERROR(ReadFile(path, bytes));
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

StatusOr<std::unique_ptr<ImageFolder>> ImageFolder::Open(const std::string& dir,
                                                         const std::vector<std::string>* classes) {
  const std::string root = RealPath(dir);
  struct stat st;
  if (root.empty() || ::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return IoError(dir, "not a folder of class folders");
  std::vector<Entry> entries;
  GRAPHC_RETURN_IF_ERROR(ListDirectory(root, root, entries));
  auto folder = std::unique_ptr<ImageFolder>(new ImageFolder());
  folder->root_ = dir;
  for (const Entry& e : entries) {
    if (!e.directory) continue;
    std::vector<JpegFile> files;
    const std::string class_dir = root + "/" + e.name;
    GRAPHC_RETURN_IF_ERROR(CollectJpegs(class_dir, root, 1, files));
    if (files.empty())
      return IoError(class_dir, "a class folder without a JPEG file (*.jpg, *.jpeg)");
    std::sort(files.begin(), files.end());
    const int32_t label = static_cast<int32_t>(folder->classes_.size());
    folder->classes_.push_back(e.name);
    for (auto& [where, name, open] : files) {
      folder->files_.push_back(open);
      folder->labels_.push_back(label);
    }
  }
  if (folder->classes_.empty()) return IoError(dir, "no class folders");
  if (classes != nullptr && *classes != folder->classes_)
    return IoError(dir, "holds " + std::to_string(folder->classes_.size()) +
                            " classes that are not the training folder's " +
                            std::to_string(classes->size()) + " (the same names, sorted)");
  return folder;
}

Status ImageFolder::Decode(int64_t i, Augmentation augmentation, bool train, bool flip,
                           uint64_t seed, int64_t channels, int64_t height, int64_t width,
                           float* out) const {
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
  GRAPHC_RETURN_IF_ERROR(DecodeJpegFile(path(i), channels, height, width, augment, out));
  if (channels == 3) {
    static constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
    static constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t p = 0; p < height * width; ++p)
        out[c * height * width + p] = (out[c * height * width + p] - kMean[c]) / kStd[c];
  }
  return Status::Ok();
}

}  // namespace graphc::runtime
