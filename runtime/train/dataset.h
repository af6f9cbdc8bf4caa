// Training data for graphrun: batches of float32 NCHW images and int32 labels.
//
//  - synthetic: like the benchmarks' fake data, one set of random batches made
//    once from the seed and cycled (no input pipeline cost in the timing);
//  - fashion-mnist[:DIR]: Debian's IDX files (dataset-fashion-mnist), pixels
//    scaled to [0, 1] and normalized with the training set's mean and standard
//    deviation, shuffled per epoch from the seed;
//  - npy:IMAGES.npy,LABELS.npy[,TEST_IMAGES.npy,TEST_LABELS.npy]: the user's
//    own arrays, shuffled the same way;
//  - imagefolder:DIR and shards:PATTERN: JPEG files in class folders or in
//    WebDataset tar shards, decoded and augmented batch by batch (images.h).
//
// A Prefetcher fills the next batch on a background thread while a step runs.

#ifndef GRAPHC_RUNTIME_TRAIN_DATASET_H_
#define GRAPHC_RUNTIME_TRAIN_DATASET_H_

#include <condition_variable>
#include <deque>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "contract/status.h"
#include "runtime/train/images.h"

namespace graphc::runtime {


struct Batch {
  std::vector<float> images;    // batch x channels x height x width
  std::vector<int32_t> labels;  // batch
  // The images as 8-bit pixels, round(255 x) of images in [0, 1], when the
  // source makes them (BatchSource::set_pixels_u8); else empty.
  std::vector<uint8_t> pixels;
  // Set when the batch could not be made (an image folder none of whose
  // images decode): the run stops with it.
  std::string error;
};

// What a plan's images input is given: the batch's 8-bit pixels or its
// float32 images.
inline const void* ImageData(const Batch& b) {
  return b.pixels.empty() ? static_cast<const void*>(b.images.data()) : b.pixels.data();
}
inline uint64_t ImageBytes(const Batch& b) {
  return b.pixels.empty() ? b.images.size() * sizeof(float) : b.pixels.size();
}

// Images of one shape with labels in [0, classes).
struct Examples {
  int64_t count = 0, channels = 0, height = 0, width = 0;
  std::vector<float> images;
  std::vector<int32_t> labels;
  // The images were 8-bit (k / 255 exactly, before any normalization).
  bool from_bytes = false;
};

// Reads an IDX image file and its label file (gzip-compressed or not), scales
// the pixels to [0, 1] and normalizes them with `mean` and `stddev`.
//
// Both readers refuse with a kIo error naming the file anything but a regular
// file (a directory, a device, a FIFO: checked on the open descriptor before
// a byte is read, and without waiting on a FIFO), and allocate no more than a
// file can hold. ReadIdx refuses a header whose dimensions are 0, overflow or
// multiply past 4 GiB or past what the file can hold (a gzip file expands at
// most 1032:1), before any allocation; a file shorter or longer than its
// header says; a truncated or corrupt gzip stream (its CRC is checked); and
// label and image counts that differ.
StatusOr<Examples> ReadIdx(const std::string& images_path, const std::string& labels_path,
                           float mean, float stddev);

// NumPy arrays (.npy, format 1.0 to 3.0, C order, little-endian): images as
// float32 [N, C, H, W] taken as they are, or uint8 [N, C, H, W] / [N, H, W]
// scaled to [0, 1]; labels as int32 or int64 [N]. Users normalize their own data.
// Both files' headers are checked before any data is read: a header over
// 1 MiB, an unreadable or repeated field, a dimension that is 0, negative or
// not a decimal integer, a shape whose byte size overflows or differs from the
// bytes present, another dtype (big-endian included) and Fortran order are kIo
// errors naming the file; so are a label outside [0, 2^31) (naming the first
// such example) and, as kNonFinite, a NaN or infinite float32 pixel.
StatusOr<Examples> ReadNpy(const std::string& images_path, const std::string& labels_path);

// One float32 array of a .npy file (C order, little-endian, rank at most 8),
// checked as ReadNpy checks its files; non-finite values are kept (graphrun
// infer's inputs may hold them on purpose).
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
StatusOr<NpyArray> ReadNpyFloat32(const std::string& path);
// One uint8 array, checked the same way (a plan's 8-bit images).
struct NpyBytes {
  std::vector<int64_t> shape;
  std::vector<uint8_t> values;
};
StatusOr<NpyBytes> ReadNpyUint8(const std::string& path);

// The bytes of a .npy file (format 1.0) holding `count` float32 values of
// `shape`, as numpy.save writes it.
std::string NpyFloat32File(const std::vector<int64_t>& shape, const float* values,
                           uint64_t count);

// Fashion-MNIST's training or test split from DIR (train-*/t10k-*-idx?-ubyte.gz),
// normalized with the training set's mean and deviation, or with
// `normalize` false left in [0, 1].
StatusOr<Examples> ReadFashionMnist(const std::string& dir, bool train, bool normalize = true);
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Batches of a fixed shape from examples, in an order shuffled per epoch.
class BatchSource {
 public:
  // The examples must match the program's image shape [batch, c, h, w], hold
  // at least one batch (batch >= 1) and labels in [0, classes), and their
  // sizes must agree (kInvalidArgument otherwise).
  static StatusOr<std::unique_ptr<BatchSource>> Create(Examples examples, int64_t batch,
                                                       const std::vector<int64_t>& image_shape,
                                                       int64_t classes, bool shuffle,
                                                       uint64_t seed);
  // Batches decoded from an image folder or shards (images.h), `threads` threads per
  // batch. `train`: shuffled per epoch, each image augmented as
  // `augmentation` says (random crops and flips; with kResize, flips where
  // set_flip) from (seed, epoch, example), so the same on every run and with
  // any thread count; else in order, center-cropped or resized. image_shape's channels
  // must be 1 (gray) or 3 (RGB); the folder must hold a batch and no more
  // classes than the model has. An image that does not decode is skipped
  // (the next one in the order takes its place) with a warning on stderr the
  // first time, and counted by skipped(). After kMaxSubstitutes failures in
  // a row the batch carries an error instead (a folder of non-JPEGs).
  static StatusOr<std::unique_ptr<BatchSource>> FromImages(
      std::shared_ptr<const ImageSet> folder, int64_t batch,
      const std::vector<int64_t>& image_shape, int64_t classes, bool train, uint64_t seed,
      int threads, Augmentation augmentation = Augmentation::kImageNet, bool normalize = true);
  // Random examples (uniform labels, pixels uniform in [-1, 1), or in
  // [0, 1) with `unit`), `batches` batches' worth (at least one). The caller
  // checks that batch, classes and image_shape (of rank 4) are positive, as
  // graphrun does from the plan.
  static std::unique_ptr<BatchSource> Synthetic(int64_t batch,
                                                const std::vector<int64_t>& image_shape,
                                                int64_t classes, int64_t batches,
                                                uint64_t seed, bool unit = false);

  // Whole batches per epoch (the remainder of an epoch is dropped).
  int64_t batches_per_epoch() const { return examples_.count / batch_; }
  // Data-parallel training: the source's batch is the global batch of all
  // `shards` ranks, and Next gives shard `shard`'s part of it (rows
  // [shard * batch / shards, (shard + 1) * batch / shards)), so that the ranks
  // together see exactly the batches one process would at the global batch.
  // `shards` must divide the batch (kInvalidArgument otherwise).
  Status SetShard(int64_t shard, int64_t shards);
  // The rows Next gives: the batch, or a shard's part of it.
  int64_t rows() const { return batch_ / shards_; }
  int64_t examples() const { return examples_.count; }
  // Fills `out` with the next batch; a new epoch starts reshuffled.
  void Next(Batch& out);
  // Flips each image left-right with probability 1/2, drawn from (seed, epoch,
  // example): the usual augmentation for Fashion-MNIST and CIFAR. (An image
  // folder's training batches are flipped by their own augmentation.)
  void set_flip(bool flip) { flip_ = flip; }
  // Each batch also as 8-bit pixels (Batch::pixels), for a plan that
  // normalizes its images itself: the source's images must then be in
  // [0, 1] (values outside are clamped).
  void set_pixels_u8(bool pixels_u8) { pixels_u8_ = pixels_u8; }
  // Image folders: with `strict`, the first undecodable file fails its
  // batch (Batch::error) instead of being skipped (graphrun --strict-data).
  void set_strict(bool strict) { strict_ = strict; }
  // Image folders: the files found undecodable so far, each once (those of
  // a batch decoded ahead count even if no step reads it).
  int64_t skipped() const;
  static constexpr int64_t kMaxSubstitutes = 64;
  // Positions the source as if Next had been called `batches` times since
  // Create (a resumed run sees the batches the interrupted one would have).
  // Well-defined for any count up to INT64_MAX. A negative count is the
  // caller's bug (graphrun range-checks a checkpoint's step first); it is
  // taken as 0, so the source never reads outside its examples.
  void Seek(int64_t batches);

 private:
  BatchSource(Examples examples, int64_t batch, bool shuffle, uint64_t seed);
  void Shuffle();
  void FillPixels(Batch& out) const;
  // Row b of `out` (a batch from order_[first]) decoded from the folder.
  void DecodeRow(int64_t first, int64_t b, Batch& out);

  Examples examples_;
  int64_t batch_;
  bool shuffle_;
  bool flip_ = false;
  int64_t shard_ = 0, shards_ = 1;
  uint64_t seed_;
  uint64_t epoch_ = 0;  // unsigned: Seek may land near 2^63, ++ must not overflow
  int64_t position_ = 0;
  std::vector<int64_t> order_;
  // Image folders: decoded per batch by threads_ threads; the files found
  // undecodable (guarded by bad_mutex_).
  std::shared_ptr<const ImageSet> folder_;
  Augmentation augmentation_ = Augmentation::kImageNet;
  int threads_ = 1;
  bool strict_ = false;
  bool normalize_ = true;  // image folders: ImageNet's mean and deviation for RGB
  bool pixels_u8_ = false;
  mutable std::mutex bad_mutex_;
  std::vector<bool> bad_;
  int64_t skipped_ = 0;
};

// Runs source->Next on a background thread, up to `depth` batches ahead
// (at least 1): a bounded queue that absorbs a slow batch (large JPEGs, a
// cold disk) as long as the decoding keeps up on average.
class Prefetcher {
 public:
  explicit Prefetcher(BatchSource& source, int depth = 1);
  ~Prefetcher();
  // The next batch; valid until the following call.
  const Batch& Next();
  // The batches made and not yet taken (at most the depth).
  int queued();

 private:
  void Loop();

  BatchSource& source_;
  size_t depth_;
  std::vector<Batch> buffers_;  // depth + 1: the queue's and the caller's
  std::deque<int> ready_;       // filled buffers, oldest first
  std::vector<int> free_;       // buffers the producer may fill
  int consumer_ = -1;           // the buffer the caller holds, or -1
  bool stop_ = false;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::thread thread_;
};

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_DATASET_H_
