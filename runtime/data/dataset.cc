// Datasets and batching for graphrun (see dataset.h).

#include "runtime/data/dataset.h"

#include "runtime/random.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <fstream>

namespace graphc::runtime {
namespace {

using Rng = SplitMix64;

Status IoError(const std::string& path, const std::string& what) {
  return Status(ErrorCode::kIo, path + ": " + what);
}

// The whole (possibly gzip-compressed) file; zlib reads plain files as they are.
StatusOr<std::vector<uint8_t>> ReadMaybeGzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return IoError(path, "cannot open (" + std::string(strerror(errno)) + ")");
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  int n;
  while ((n = gzread(file, chunk, sizeof(chunk))) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
  int error = 0;
  std::string message = n < 0 ? gzerror(file, &error) : "";
  gzclose(file);
  if (n < 0) return IoError(path, "corrupt gzip data (" + message + ")");
  return bytes;
}

uint32_t BigEndian(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// One .npy array: its dtype descriptor (e.g. "<f4"), shape and raw bytes.
struct NpyArray {
  std::string descr;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

// The value of 'key' in the header's Python dict literal, up to the next
// top-level ',' or '}' (a tuple's commas are inside parentheses).
bool NpyField(const std::string& header, const std::string& key, std::string& value) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return false;
  at = header.find(':', at);
  if (at == std::string::npos) return false;
  int depth = 0;
  size_t end = at + 1;
  for (; end < header.size(); ++end) {
    char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  value = header.substr(at + 1, end - at - 1);
  value.erase(0, value.find_first_not_of(" "));
  value.erase(value.find_last_not_of(" ") + 1);
  return true;
}

StatusOr<NpyArray> ReadNpyArray(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(path, "cannot open (" + std::string(strerror(errno)) + ")");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
    return IoError(path, "not a NumPy .npy file");
  const int major = bytes[6];
  size_t length_bytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
  if (length_bytes == 0)
    return IoError(path, ".npy format version " + std::to_string(major) + " is not supported");
  uint64_t header_length = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_length |= uint64_t(bytes[8 + i]) << (8 * i);
  const size_t data_start = 8 + length_bytes + header_length;
  if (data_start > bytes.size()) return IoError(path, "truncated .npy header");
  std::string header(bytes.begin() + 8 + length_bytes, bytes.begin() + data_start);

  NpyArray array;
  std::string descr, fortran, shape;
  if (!NpyField(header, "descr", descr) || !NpyField(header, "fortran_order", fortran) ||
      !NpyField(header, "shape", shape))
    return IoError(path, "the .npy header has no descr, fortran_order or shape");
  if (descr.size() < 3 || (descr.front() != '\'' && descr.front() != '"'))
    return IoError(path, "unreadable dtype " + descr);
  array.descr = descr.substr(1, descr.size() - 2);
  if (fortran != "False")
    return IoError(path, "a Fortran-order array; save it with np.ascontiguousarray");
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')')
    return IoError(path, "unreadable shape " + shape);
  std::string dims = shape.substr(1, shape.size() - 2);
  size_t pos = 0;
  while (pos < dims.size()) {
    size_t comma = dims.find(',', pos);
    std::string dim = dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    dim.erase(0, dim.find_first_not_of(" "));
    dim.erase(dim.find_last_not_of(" ") + 1);
    if (!dim.empty()) {
      char* end = nullptr;
      long long d = std::strtoll(dim.c_str(), &end, 10);
      if (*end != '\0' || d < 0) return IoError(path, "unreadable shape " + shape);
      array.shape.push_back(d);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  array.data.assign(bytes.begin() + data_start, bytes.end());
  return array;
}

uint64_t ElementsOf(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

}  // namespace

StatusOr<Examples> ReadNpy(const std::string& images_path, const std::string& labels_path) {
  StatusOr<NpyArray> images = ReadNpyArray(images_path);
  if (!images.ok()) return images.status();
  StatusOr<NpyArray> labels = ReadNpyArray(labels_path);
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
  const uint64_t pixels = ElementsOf(is);
  if (images->data.size() != pixels * image_bytes)
    return IoError(images_path, "holds " + std::to_string(images->data.size()) +
                                    " bytes of data, its shape " + ShapeString(is) + " needs " +
                                    std::to_string(pixels * image_bytes));
  e.images.resize(pixels);
  if (image_bytes == 4)
    std::memcpy(e.images.data(), images->data.data(), pixels * 4);
  else
    for (uint64_t i = 0; i < pixels; ++i) e.images[i] = images->data[i] / 255.0f;

  const std::vector<int64_t>& ls = labels->shape;
  uint64_t label_bytes = labels->descr == "<i4" ? 4 : labels->descr == "<i8" ? 8 : 0;
  if (label_bytes == 0)
    return IoError(labels_path, "labels of dtype '" + labels->descr +
                                    "'; give int32 ('<i4') or int64 ('<i8')");
  if (ls.size() != 1 || ls[0] != e.count)
    return IoError(labels_path, "labels of shape " + ShapeString(ls) + " for " +
                                    std::to_string(e.count) + " images; give (" +
                                    std::to_string(e.count) + ",)");
  if (labels->data.size() != uint64_t(e.count) * label_bytes)
    return IoError(labels_path, "holds " + std::to_string(labels->data.size()) +
                                    " bytes of data, its shape needs " +
                                    std::to_string(e.count * label_bytes));
  e.labels.resize(e.count);
  for (int64_t i = 0; i < e.count; ++i) {
    int64_t v;
    if (label_bytes == 4) {
      int32_t v32;
      std::memcpy(&v32, labels->data.data() + 4 * i, 4);
      v = v32;
    } else {
      std::memcpy(&v, labels->data.data() + 8 * i, 8);
    }
    if (v < INT32_MIN || v > INT32_MAX)
      return IoError(labels_path, "label " + std::to_string(v) + " of example " +
                                      std::to_string(i) + " is out of range");
    e.labels[i] = static_cast<int32_t>(v);
  }
  return e;
}

StatusOr<Examples> ReadIdx(const std::string& images_path, const std::string& labels_path,
                           float mean, float stddev) {
  StatusOr<std::vector<uint8_t>> images = ReadMaybeGzip(images_path);
  if (!images.ok()) return images.status();
  StatusOr<std::vector<uint8_t>> labels = ReadMaybeGzip(labels_path);
  if (!labels.ok()) return labels.status();
  const std::vector<uint8_t>& im = *images;
  const std::vector<uint8_t>& lb = *labels;
  // IDX: magic (0, 0, type 0x08 = ubyte, rank), big-endian dims, data.
  if (im.size() < 16 || BigEndian(im.data()) != 0x00000803)
    return IoError(images_path, "not an IDX file of ubyte images (rank 3)");
  if (lb.size() < 8 || BigEndian(lb.data()) != 0x00000801)
    return IoError(labels_path, "not an IDX file of ubyte labels (rank 1)");
  Examples e;
  e.count = BigEndian(im.data() + 4);
  e.channels = 1;
  e.height = BigEndian(im.data() + 8);
  e.width = BigEndian(im.data() + 12);
  const uint64_t pixels = uint64_t(e.count) * e.height * e.width;
  if (e.height == 0 || e.width == 0 || im.size() - 16 != pixels)
    return IoError(images_path, "holds " + std::to_string(im.size() - 16) +
                                    " pixel bytes, its header says " + std::to_string(pixels));
  if (BigEndian(lb.data() + 4) != uint64_t(e.count) || lb.size() - 8 != uint64_t(e.count))
    return IoError(labels_path, "does not hold one label per image (" +
                                    std::to_string(e.count) + " images)");
  e.images.resize(pixels);
  for (uint64_t i = 0; i < pixels; ++i) e.images[i] = (im[16 + i] / 255.0f - mean) / stddev;
  e.labels.assign(lb.begin() + 8, lb.end());
  return e;
}

StatusOr<Examples> ReadFashionMnist(const std::string& dir, bool train) {
  std::string prefix = dir + "/" + (train ? "train" : "t10k");
  auto pick = [](const std::string& base) {
    std::ifstream gz(base + ".gz");
    return gz.good() ? base + ".gz" : base;
  };
  // Fashion-MNIST's training-set pixel mean and standard deviation.
  return ReadIdx(pick(prefix + "-images-idx3-ubyte"), pick(prefix + "-labels-idx1-ubyte"),
                 0.2860f, 0.3530f);
}

StatusOr<std::unique_ptr<BatchSource>> BatchSource::Create(
    Examples examples, int64_t batch, const std::vector<int64_t>& image_shape,
    int64_t classes, bool shuffle, uint64_t seed) {
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
                                                    uint64_t seed) {
  Examples e;
  e.count = batch * batches;
  e.channels = image_shape[1];
  e.height = image_shape[2];
  e.width = image_shape[3];
  Rng rng{seed ^ 0x5eed5eed5eed5eedull};
  e.images.resize(e.count * e.channels * e.height * e.width);
  for (float& x : e.images) x = static_cast<float>(2.0 * rng.Uniform() - 1.0);
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

void BatchSource::Next(Batch& out) {
  if (position_ + batch_ > examples_.count) {
    ++epoch_;
    position_ = 0;
    Shuffle();
  }
  const int64_t size = examples_.channels * examples_.height * examples_.width;
  out.images.resize(batch_ * size);
  out.labels.resize(batch_);
  for (int64_t b = 0; b < batch_; ++b) {
    int64_t index = order_[position_ + b];
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
}

void BatchSource::Seek(int64_t batches) {
  const int64_t per_epoch = batches_per_epoch();
  epoch_ = per_epoch > 0 ? batches / per_epoch : 0;
  position_ = per_epoch > 0 ? (batches % per_epoch) * batch_ : 0;
  Shuffle();
}

Prefetcher::Prefetcher(BatchSource& source) : source_(source) {
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
      changed_.wait(lock, [&] { return stop_ || ready_ == -1; });
      if (stop_) return;
      target = 1 - consumer_;
    }
    source_.Next(buffers_[target]);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_ = target;
    }
    changed_.notify_all();
  }
}

const Batch& Prefetcher::Next() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return ready_ != -1; });
    consumer_ = ready_;
    ready_ = -1;
  }
  changed_.notify_all();
  return buffers_[consumer_];
}

}  // namespace graphc::runtime
