// Training on image files: a folder of JPEGs and PNGs laid out as
// torchvision's ImageFolder (one subfolder per class, labels from the sorted
// folder names) or WebDataset-style tar shards (KEY.jpg or KEY.png with its
// label in KEY.cls), decoded with libjpeg-turbo's TurboJPEG API or libpng's
// simplified API and augmented on the host. The
// ImageNet augmentation (the default):
//
//  - training: RandomResizedCrop (scale 0.08 to 1, aspect 3/4 to 4/3, as
//    torchvision draws it, from a seeded generator) to the plan's image size,
//    then a horizontal flip with probability 1/2;
//  - evaluation: resize the short side to size * 256 / 224, then center crop
//    (torchvision's Resize(256) + CenterCrop(224) at 224).
//
// or none: the whole image resized to the input size (for datasets already
// at that size, such as Fashion-MNIST as JPEGs), flipped on request.
// JPEGs decode at reduced size where the crop allows (the decoder's DCT
// scaling: 1/2, 1/4, 1/8 of the pixels, never smaller than the output needs),
// PNGs whole (at most kMaxProgressivePixels; RGB with any alpha dropped, or
// gray weighed from RGB, as PIL converts them),
// and the crop is resampled with a triangle filter as wide as the scale
// (PIL's antialiased bilinear). Pixels end in [0, 1]; three channels are then
// normalized with ImageNet's mean and standard deviation, one channel (gray)
// is left in [0, 1].
//
// Shards are indexed once (each member's offset and size, each label) and
// their images then read in place, so that shards and folders are the same
// list of images to the batch source.
//
// A file that does not decode (corrupt, truncated, not a JPEG or PNG, or over
// kMaxImagePixels: a decompression bomb) is an error naming the file; the
// batch source skips it with a warning and counts it.

#ifndef GRAPHC_RUNTIME_TRAIN_IMAGES_H_
#define GRAPHC_RUNTIME_TRAIN_IMAGES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "contract/status.h"

namespace graphc::runtime {

// Larger images are refused before decoding (PIL's MAX_IMAGE_PIXELS, 2^26,
// doubled: the size at which it errors rather than warns). A progressive
// JPEG keeps all its coefficients while decoding (6 bytes a pixel in colour,
// at any scale), so it may have fewer: at most ~100 MiB a decoding thread.
// Scans are limited too (TurboJPEG's 500): a file of thousands of tiny
// scans would take minutes.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 27;
inline constexpr int64_t kMaxProgressivePixels = int64_t{1} << 24;

// A crop of an image: left, top, width, height, in pixels of the original
// (fractional where an evaluation resize puts the crop between pixels).
struct CropBox {
  double x = 0, y = 0, width = 0, height = 0;
  bool operator==(const CropBox& o) const {
    return x == o.x && y == o.y && width == o.width && height == o.height;
  }
};

// What one example's augmentation does: the crop, then maybe a flip.
struct Augment {
  CropBox box;
  bool flip = false;
};

// torchvision's RandomResizedCrop.get_params for an image of width x height
// with scale [0.08, 1] and ratio [3/4, 4/3]: up to 10 tries of a random area
// and log-uniform aspect ratio that fit, else a center crop with the ratio
// clamped. `uniform` returns values in [0, 1); each try takes 4 (area,
// ratio, top, left) and the last two only for a box that fits.
CropBox RandomResizedCropBox(int64_t width, int64_t height,
                             const std::function<double()>& uniform);

// The evaluation crop of an out_width x out_height output: the image's short
// side resized to round(short output side * 256 / 224), the long side in
// proportion (truncated), then a center crop, as a box in the original.
CropBox CenterCropBox(int64_t width, int64_t height, int64_t out_width, int64_t out_height);

// Resamples `box` of an 8-bit image_width x image_height image (`channels`
// interleaved, rows of `stride` bytes) to out_width x out_height planar
// float32 in [0, 1] ([channels, out_height, out_width]), flipped left-right
// if `flip`. Taps outside the image read its edge.
void ResizeCrop(const uint8_t* pixels, int64_t stride, int64_t image_width, int64_t image_height,
                int64_t channels, const CropBox& box, int64_t out_width, int64_t out_height,
                bool flip, float* out);

// How images become the plan's input size.
enum class Augmentation {
  kImageNet,  // training: RandomResizedCrop + flip; evaluation: resize + center crop
  kResize,    // the whole image resized to the input size (flipped only on request)
};

// The images of a training or evaluation split, with their labels: a folder
// of class folders of image files (*.jpg, *.jpeg, *.png, any case), or
// WebDataset tar shards whose samples are KEY.jpg (or .jpeg, .png) beside
// KEY.cls.
class ImageSet {
 public:
  // Reads DIR's class folders and their files, sorted by name. Errors (kIo,
  // naming the path): DIR or a class that cannot be read, no class folders,
  // a class folder with no image, a symbolic link that leads out of DIR.
  // With `classes`, the folder must hold exactly those classes (a validation
  // split against its training split).
  static StatusOr<std::unique_ptr<ImageSet>> OpenFolder(const std::string& dir,
                                                        const std::vector<std::string>* classes);

  // Indexes the tar shards PATTERN names (ExpandShardPattern): each
  // member's place in its shard, and each sample's label, read from KEY.cls
  // (a decimal class index). Samples are a shard's runs of members with the
  // same key (the member's path up to the first dot of its file name), as
  // WebDataset groups them, in shard order and then tar order. Errors (kIo,
  // naming the shard and member): a shard that is not a regular file, a
  // corrupt or truncated tar header (its checksum is checked), a member that
  // runs past the end of its shard, a sample with an image but no label or
  // a label but no image, a label that is not a decimal number below 2^31,
  // a shard with no samples. Image bytes are read only when decoded.
  static StatusOr<std::unique_ptr<ImageSet>> OpenShards(const std::string& pattern);

  const std::string& root() const { return root_; }  // as the user named it
  int64_t count() const { return static_cast<int64_t>(items_.size()); }
  int32_t label(int64_t i) const { return items_[static_cast<size_t>(i)].label; }
  // Image i's file, or for a shard member "SHARD: MEMBER" (for messages).
  std::string path(int64_t i) const;
  // A folder's class names (sorted); empty for shards.
  const std::vector<std::string>& classes() const { return classes_; }
  // The labels are below this: a folder's class count, a shard's largest
  // label plus one.
  int64_t class_count() const { return class_count_; }
  bool shards() const { return shards_; }

  // Decodes image i into `out` ([channels, height, width] float32; channels 1
  // decodes gray, 3 RGB) as `augmentation` says, the random choices drawn
  // from `seed`: for training (`train`) a random crop and flip, or the whole
  // image flipped with probability 1/2 where `flip`; else the center crop
  // or the whole image.
  // With `normalize`, RGB is then normalized with ImageNet's mean and
  // deviation; else every image stays in [0, 1].
  Status Decode(int64_t i, Augmentation augmentation, bool train, bool flip, uint64_t seed,
                int64_t channels, int64_t height, int64_t width, float* out,
                bool normalize = true) const;

 private:
  // Adds the samples of the tar shard at `path` (canonical), files_[file].
  Status IndexShard(const std::string& path, int32_t file);

  struct Item {
    int32_t file = 0;     // in files_
    int32_t label = 0;
    int64_t offset = 0;   // a shard member's bytes; size -1: the whole file
    int64_t size = -1;
  };
  std::string root_;
  bool shards_ = false;
  std::vector<std::string> classes_;
  int64_t class_count_ = 0;
  std::vector<std::string> files_;    // canonical paths, opened without following links
  std::vector<std::string> members_;  // shards: each item's member name
  std::vector<Item> items_;
};

// The shard files a PATTERN names, in order: brace ranges and lists expanded
// first ("train-{000..127}.tar", "{a,b}.tar", zero-padded as the range's
// first number is, as WebDataset's braceexpand does), then each result with
// *, ? or [ matched against the file system (sorted, at least one match),
// else taken as a path that must exist. kInvalidArgument names a malformed
// pattern, one that expands to more than kMaxShards names, or no match.
inline constexpr int64_t kMaxShards = 1 << 20;
StatusOr<std::vector<std::string>> ExpandShardPattern(const std::string& pattern);

// Decodes one JPEG or PNG file (told apart by their first bytes) to out
// ([channels, height, width] in [0, 1]), its crop and flip chosen from its
// size by `augment`, as ImageSet::Decode does before normalizing; exposed
// for tests.
Status DecodeImageFile(const std::string& path, int64_t channels, int64_t height, int64_t width,
                       const std::function<Augment(int64_t, int64_t)>& augment, float* out);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_IMAGES_H_
