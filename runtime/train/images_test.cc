// Image folders: the crop geometry against torchvision's algorithm worked by
// hand for given draws, the resampler, JPEG files written here by TurboJPEG
// (decoded whole and at DCT-reduced size), every bad-file case, the folder
// scan's order and refusals, and batches from a folder: each image once per
// epoch, the same whatever the threads, resumable, undecodable files skipped.

#include "runtime/train/images.h"

#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>
#include <zlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/train/dataset.h"

namespace graphc::runtime {
namespace {

namespace fs = std::filesystem;

// Returns the given values in turn.
std::function<double()> Draws(std::vector<double> values) {
  auto state = std::make_shared<std::pair<std::vector<double>, size_t>>(std::move(values), 0);
  return [state] { return state->first[state->second++ % state->first.size()]; };
}

TEST(ImagesTest, RandomResizedCropFollowsTorchvisionForGivenDraws) {
  // Area 500 * 375 * (0.08 + 0.92 * 0.5) = 101250, ratio exp(0) = 1: a
  // 318 x 318 box (round(318.198)); top floor(0.25 * 58), left floor(0.75 * 183).
  EXPECT_EQ(RandomResizedCropBox(500, 375, Draws({0.5, 0.5, 0.25, 0.75})),
            (CropBox{137, 14, 318, 318}));
  // The widest ratio (4/3) at the whole area: w = round(sqrt(187500 * 4/3)) =
  // 500, h = round(sqrt(187500 * 3/4)) = 375, offsets 0.
  EXPECT_EQ(RandomResizedCropBox(500, 375, Draws({1.0, 1.0, 0.0, 0.0})),
            (CropBox{0, 0, 500, 375}));
  // Nothing fits a 1000 x 10 strip in 10 tries: the center crop with the
  // ratio clamped to 4/3: h 10, w round(13.33) = 13, x (1000 - 13) / 2.
  EXPECT_EQ(RandomResizedCropBox(1000, 10, Draws({0.9, 0.9})), (CropBox{493, 0, 13, 10}));
  // A 10 x 1000 strip: w 10, h round(10 / 0.75) = 13.
  EXPECT_EQ(RandomResizedCropBox(10, 1000, Draws({0.9, 0.1})), (CropBox{0, 493, 10, 13}));
}

TEST(ImagesTest, RandomResizedCropsStayInsideWithTheirScaleAndRatio) {
  uint64_t state = 7;
  auto uniform = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  };
  for (auto [w, h] : {std::pair<int64_t, int64_t>{500, 375}, {64, 64}, {3000, 200}, {1, 1}}) {
    for (int i = 0; i < 200; ++i) {
      const CropBox box = RandomResizedCropBox(w, h, uniform);
      ASSERT_GE(box.x, 0);
      ASSERT_GE(box.y, 0);
      ASSERT_GE(box.width, 1);
      ASSERT_GE(box.height, 1);
      ASSERT_LE(box.x + box.width, w);
      ASSERT_LE(box.y + box.height, h);
    }
  }
}

TEST(ImagesTest, CenterCropIsResize256ThenCrop224) {
  // 500 x 375 resized to 341 x 256 (int(256 * 500 / 375)); crop offsets
  // round(58.5) = 58 (halves to even, as Python) and 16, in resized pixels,
  // of 375 / 256 original pixels each.
  const double s = 375.0 / 256.0;
  EXPECT_EQ(CenterCropBox(500, 375, 224, 224), (CropBox{58 * s, 16 * s, 224 * s, 224 * s}));
  // A portrait image, and a smaller output: 128 * 256 / 224 = 146.3 -> 146.
  const double t = 300.0 / 146.0;
  EXPECT_EQ(CenterCropBox(300, 600, 128, 128),
            (CropBox{9 * t, std::nearbyint((292 - 128) / 2.0) * t, 128 * t, 128 * t}));
}

TEST(ImagesTest, ResizeCropCopiesAtScaleOneFlipsAndAverages) {
  // A 4 x 3 RGB ramp; at scale 1 each output pixel is its source pixel.
  std::vector<uint8_t> pixels(4 * 3 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  std::vector<float> out(3 * 3 * 4);
  ResizeCrop(pixels.data(), 12, 4, 3, 3, CropBox{0, 0, 4, 3}, 4, 3, false, out.data());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x)
        ASSERT_FLOAT_EQ(out[(c * 3 + y) * 4 + x], pixels[(y * 4 + x) * 3 + c] / 255.0f);
  ResizeCrop(pixels.data(), 12, 4, 3, 3, CropBox{0, 0, 4, 3}, 4, 3, true, out.data());
  for (int x = 0; x < 4; ++x) ASSERT_FLOAT_EQ(out[x], pixels[(3 - x) * 3] / 255.0f);
  // Halving a 4 x 4 gray image whose 2 x 2 quadrants are constant gives
  // each quadrant's value where the triangle filter stays inside it, and
  // averages of neighbours otherwise; a constant image stays constant.
  std::vector<uint8_t> flat(16, 200);
  std::vector<float> half(4);
  ResizeCrop(flat.data(), 4, 4, 4, 1, CropBox{0, 0, 4, 4}, 2, 2, false, half.data());
  for (float v : half) EXPECT_FLOAT_EQ(v, 200 / 255.0f);
  // A crop of the right column only.
  std::vector<uint8_t> columns = {0, 0, 0, 255, 0, 0, 0, 255};  // 4 x 2
  std::vector<float> right(2);
  ResizeCrop(columns.data(), 4, 4, 2, 1, CropBox{3, 0, 1, 2}, 1, 2, false, right.data());
  EXPECT_FLOAT_EQ(right[0], 1.0f);
  EXPECT_FLOAT_EQ(right[1], 1.0f);
}

// ---------------------------------------------------------------------------
// JPEG files written here.

class TempDir {
 public:
  TempDir() {
    char dir[] = "/tmp/graphc-images-XXXXXX";
    if (mkdtemp(dir) == nullptr) ADD_FAILURE() << std::strerror(errno);
    path_ = dir;
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A smooth test pattern: channel c of pixel (x, y).
uint8_t Pattern(int x, int y, int c, int width, int height) {
  return static_cast<uint8_t>((c == 0 ? 255 * x / std::max(1, width - 1)
                               : c == 1 ? 255 * y / std::max(1, height - 1)
                                        : 128));
}

std::string Jpeg(int width, int height, int quality = 95, int flags = 0) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c) rgb[(y * width + x) * 3 + c] = Pattern(x, y, c, width, height);
  tjhandle tj = tjInitCompress();
  unsigned char* data = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, rgb.data(), width, 0, height, TJPF_RGB, &data, &size, TJSAMP_444,
                        quality, TJFLAG_ACCURATEDCT | flags),
            0)
      << tjGetErrorStr2(tj);
  std::string bytes(reinterpret_cast<char*>(data), size);
  tjFree(data);
  tjDestroy(tj);
  return bytes;
}

// A PNG of the test pattern (RGB, RGBA with a varying alpha, or gray).
std::string Png(int width, int height, uint32_t format) {
  const int channels = PNG_IMAGE_SAMPLE_CHANNELS(format);
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c)
        pixels[(y * width + x) * channels + c] =
            c == 3 ? static_cast<uint8_t>(x * 37 % 256)  // alpha, kept out of the pixels
                   : Pattern(x, y, channels == 1 ? 0 : c, width, height);
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = format;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr));
  std::string bytes(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&image, bytes.data(), &size, 0, pixels.data(), 0, nullptr))
      << image.message;
  bytes.resize(size);
  return bytes;
}

void Write(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

Augment Whole(int64_t w, int64_t h) { return {CropBox{0, 0, double(w), double(h)}, false}; }

TEST(ImagesTest, JpegDecodesToItsPixelsWholeAndReduced) {
  TempDir dir;
  const std::string path = dir.path() + "/a.jpg";
  Write(path, Jpeg(64, 48));
  std::vector<float> out(3 * 48 * 64);
  ASSERT_TRUE(DecodeImageFile(path, 3, 48, 64, Whole, out.data()).ok());
  float worst = 0;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 48; ++y)
      for (int x = 0; x < 64; ++x)
        worst = std::max(worst, std::fabs(out[(c * 48 + y) * 64 + x] * 255 -
                                          Pattern(x, y, c, 64, 48)));
  EXPECT_LT(worst, 4.0f);  // quality 95, 4:4:4
  // Gray: the luma of the pattern.
  std::vector<float> gray(48 * 64);
  ASSERT_TRUE(DecodeImageFile(path, 1, 48, 64, Whole, gray.data()).ok());
  const float luma = (0.299f * Pattern(10, 20, 0, 64, 48) + 0.587f * Pattern(10, 20, 1, 64, 48) +
                      0.114f * 128) / 255;
  EXPECT_NEAR(gray[20 * 64 + 10], luma, 4.0f / 255);
  // 512 x 512 to 64 x 64: decoded at 1/8 by the DCT, then the pattern's
  // mean over each 8 x 8 block (a linear ramp: its value at the block's
  // center).
  Write(path, Jpeg(512, 512));
  std::vector<float> small(3 * 64 * 64);
  ASSERT_TRUE(DecodeImageFile(path, 3, 64, 64, Whole, small.data()).ok());
  worst = 0;
  for (int y = 1; y < 63; ++y)
    for (int x = 1; x < 63; ++x)
      worst = std::max(worst, std::fabs(small[y * 64 + x] * 255 - 255.0f * (8 * x + 3.5f) / 511));
  EXPECT_LT(worst, 4.0f);
}

TEST(ImagesTest, BadFilesAreErrorsNamingThem) {
  TempDir dir;
  std::vector<float> out(3 * 8 * 8);
  auto error = [&](const std::string& name, const std::string& bytes) {
    const std::string path = dir.path() + "/" + name;
    Write(path, bytes);
    Status status = DecodeImageFile(path, 3, 8, 8, Whole, out.data());
    EXPECT_FALSE(status.ok()) << name;
    EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
    return status.message();
  };
  const std::string good = Jpeg(256, 256);  // half of it ends inside the scan
  EXPECT_NE(error("empty.jpg", "").find("an empty file"), std::string::npos);
  EXPECT_NE(error("text.jpg", "not a JPEG at all").find("not a JPEG"), std::string::npos);
  const std::string truncated = error("truncated.jpg", good.substr(0, good.size() / 2));
  EXPECT_NE(truncated.find("does not decode"), std::string::npos) << truncated;
  // A header claiming 65000 x 65000 pixels (4.2 G): refused before decoding.
  std::string bomb = good;
  const size_t sof = bomb.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  bomb[sof + 5] = bomb[sof + 7] = static_cast<char>(0xfd);
  bomb[sof + 6] = bomb[sof + 8] = static_cast<char>(0xe8);
  EXPECT_NE(error("bomb.jpg", bomb).find("more than an image may have"), std::string::npos);
  // A progressive JPEG keeps every coefficient while decoding: over 2^24
  // pixels it is refused from its header (here 5000 x 5000, patched into a
  // small progressive file's SOF2).
  std::string progressive = Jpeg(64, 64, 95, TJFLAG_PROGRESSIVE);
  const size_t sof2 = progressive.find("\xff\xc2");
  ASSERT_NE(sof2, std::string::npos);
  progressive[sof2 + 5] = progressive[sof2 + 7] = static_cast<char>(0x13);
  progressive[sof2 + 6] = progressive[sof2 + 8] = static_cast<char>(0x88);
  EXPECT_NE(error("progressive.jpg", progressive).find("more than a progressive JPEG may have"),
            std::string::npos);
  // A small progressive JPEG decodes.
  Write(dir.path() + "/small-progressive.jpg", Jpeg(64, 64, 95, TJFLAG_PROGRESSIVE));
  EXPECT_TRUE(
      DecodeImageFile(dir.path() + "/small-progressive.jpg", 3, 8, 8, Whole, out.data()).ok());
  // A frame of no rows (the decoder refuses its header).
  std::string empty_frame = good;
  empty_frame[sof + 5] = empty_frame[sof + 6] = 0;
  EXPECT_NE(error("zero.jpg", empty_frame).find("not a JPEG the decoder reads"), std::string::npos);
  fs::create_directories(dir.path() + "/folder.jpg");
  EXPECT_FALSE(DecodeImageFile(dir.path() + "/folder.jpg", 3, 8, 8, Whole, out.data()).ok());
  EXPECT_FALSE(DecodeImageFile(dir.path() + "/missing.jpg", 3, 8, 8, Whole, out.data()).ok());
}

TEST(ImagesTest, PngDecodesToItsPixelsAsPilConvertsThem) {
  TempDir dir;
  const std::string rgb = dir.path() + "/rgb.png", rgba = dir.path() + "/rgba.png",
                    gray = dir.path() + "/gray.png";
  Write(rgb, Png(40, 30, PNG_FORMAT_RGB));
  Write(rgba, Png(40, 30, PNG_FORMAT_RGBA));
  Write(gray, Png(40, 30, PNG_FORMAT_GRAY));
  // Lossless, at its own size: the pattern exactly; alpha dropped, not
  // composited (PIL's convert("RGB")).
  for (const std::string& path : {rgb, rgba}) {
    std::vector<float> out(3 * 30 * 40);
    Status status = DecodeImageFile(path, 3, 30, 40, Whole, out.data());
    ASSERT_TRUE(status.ok()) << status.ToString();
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 30; ++y)
        for (int x = 0; x < 40; ++x)
          ASSERT_EQ(out[(c * 30 + y) * 40 + x] * 255, Pattern(x, y, c, 40, 30))
              << path << " " << c << " " << y << " " << x;
  }
  // Gray from RGB: PIL's convert("L") weights, rounded as PIL rounds.
  std::vector<float> luma(30 * 40);
  ASSERT_TRUE(DecodeImageFile(rgb, 1, 30, 40, Whole, luma.data()).ok());
  const int r = Pattern(7, 11, 0, 40, 30), g = Pattern(7, 11, 1, 40, 30), b = 128;
  EXPECT_EQ(luma[11 * 40 + 7] * 255, (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
  // A gray PNG for an RGB model: the gray in every channel.
  std::vector<float> replicated(3 * 30 * 40);
  ASSERT_TRUE(DecodeImageFile(gray, 3, 30, 40, Whole, replicated.data()).ok());
  EXPECT_EQ(replicated[(2 * 30 + 11) * 40 + 7] * 255, Pattern(7, 11, 0, 40, 30));
  // Cropped and resized like a JPEG: an 80x60 image's left half at 40x60.
  Write(rgb, Png(80, 60, PNG_FORMAT_RGB));
  std::vector<float> half(3 * 60 * 40);
  ASSERT_TRUE(DecodeImageFile(rgb, 3, 60, 40,
                              [](int64_t, int64_t) { return Augment{CropBox{0, 0, 40, 60}, false}; },
                              half.data())
                  .ok());
  EXPECT_EQ(half[(1 * 60 + 59) * 40 + 39] * 255, Pattern(39, 59, 1, 80, 60));

  // Bad PNGs are errors naming the file.
  std::vector<float> out(3 * 8 * 8);
  auto error = [&](const std::string& name, const std::string& bytes) {
    const std::string path = dir.path() + "/" + name;
    Write(path, bytes);
    Status status = DecodeImageFile(path, 3, 8, 8, Whole, out.data());
    EXPECT_FALSE(status.ok()) << name;
    EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
    return status.message();
  };
  const std::string good = Png(64, 64, PNG_FORMAT_RGB);
  std::string m = error("truncated.png", good.substr(0, good.size() / 2));
  EXPECT_NE(m.find("does not decode"), std::string::npos) << m;
  m = error("signature.png", good.substr(0, 12));
  EXPECT_NE(m.find("not a PNG the decoder reads"), std::string::npos) << m;
  std::string crc = good;
  crc[20] ^= 1;  // IHDR's width, its CRC not updated
  m = error("crc.png", crc);
  EXPECT_NE(m.find("not a PNG the decoder reads"), std::string::npos) << m;
  // 5000 x 5000 in IHDR (its CRC updated): refused before decoding.
  std::string bomb = good;
  for (int at : {16, 20}) {
    bomb[at] = 0, bomb[at + 1] = 0, bomb[at + 2] = 0x13, bomb[at + 3] = static_cast<char>(0x88);
  }
  const uLong ihdr_crc = crc32(0, reinterpret_cast<const Bytef*>(bomb.data() + 12), 17);
  for (int i = 0; i < 4; ++i) bomb[29 + i] = static_cast<char>((ihdr_crc >> (24 - 8 * i)) & 0xff);
  m = error("bomb.png", bomb);
  EXPECT_NE(m.find("5000x5000 pixels; a PNG may have 1 to 16777216"), std::string::npos) << m;
  // Folders and shards take PNGs beside JPEGs.
  Write(dir.path() + "/set/a/x.png", good);
  Write(dir.path() + "/set/a/y.jpg", Jpeg(8, 8));
  auto folder = ImageSet::OpenFolder(dir.path() + "/set", nullptr);
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  EXPECT_EQ((*folder)->count(), 2);
  EXPECT_TRUE((*folder)->Decode(0, Augmentation::kImageNet, true, false, 1, 3, 8, 8, out.data()).ok());
}

TEST(ImagesTest, FoldersListClassesAndFilesInTorchvisionOrder) {
  TempDir dir;
  const std::string r = dir.path();
  const std::string jpeg = Jpeg(8, 8);
  Write(r + "/b/2.jpg", jpeg);
  Write(r + "/b/10.JPEG", jpeg);
  Write(r + "/b/notes.txt", "ignored");
  Write(r + "/b/sub/1.jpg", jpeg);
  Write(r + "/a/x.jpeg", jpeg);
  Write(r + "/.hidden/y.jpg", jpeg);
  Write(r + "/top.jpg", jpeg);  // not in a class
  auto folder = ImageSet::OpenFolder(r, nullptr);
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  EXPECT_EQ((*folder)->classes(), (std::vector<std::string>{"a", "b"}));
  std::vector<std::string> files;
  for (int64_t i = 0; i < (*folder)->count(); ++i) files.push_back((*folder)->path(i));
  const std::string real = fs::canonical(r).string();
  EXPECT_EQ(files, (std::vector<std::string>{real + "/a/x.jpeg", real + "/b/10.JPEG",
                                             real + "/b/2.jpg", real + "/b/sub/1.jpg"}));
  EXPECT_EQ((*folder)->label(0), 0);
  EXPECT_EQ((*folder)->label(3), 1);
  // A validation split must hold the same classes.
  Write(r + "-val/a/v.jpg", jpeg);
  const std::vector<std::string> classes = (*folder)->classes();
  auto val = ImageSet::OpenFolder(r + "-val", &classes);
  EXPECT_FALSE(val.ok());
  EXPECT_NE(val.status().message().find("not the training folder's 2"), std::string::npos);
  fs::remove_all(r + "-val");
}

TEST(ImagesTest, FoldersRefuseEmptyClassesEscapingLinksAndNothing) {
  TempDir dir;
  const std::string r = dir.path();
  const std::string jpeg = Jpeg(8, 8);
  fs::create_directories(r + "/empty");
  Write(r + "/full/a.jpg", jpeg);
  auto empty = ImageSet::OpenFolder(r, nullptr);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty: a class folder without an image"),
            std::string::npos)
      << empty.status().message();
  fs::remove_all(r + "/empty");
  // A link inside the dataset is followed; one leading out is refused.
  fs::create_symlink(r + "/full/a.jpg", r + "/full/b.jpg");
  auto inside = ImageSet::OpenFolder(r, nullptr);
  ASSERT_TRUE(inside.ok()) << inside.status().ToString();
  EXPECT_EQ((*inside)->count(), 2);
  fs::create_symlink("/etc", r + "/full/etc");
  auto outside = ImageSet::OpenFolder(r, nullptr);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("a symbolic link that leads out of the dataset"),
            std::string::npos);
  TempDir bare;
  EXPECT_NE(ImageSet::OpenFolder(bare.path(), nullptr).status().message().find("no class folders"),
            std::string::npos);
  EXPECT_FALSE(ImageSet::OpenFolder(bare.path() + "/missing", nullptr).ok());
}

// ---------------------------------------------------------------------------
// Batches from a folder.

// 3 classes of 4 images each, of different sizes; the label is also in the
// pixels' mean (so a batch row can be matched to its file).
std::shared_ptr<const ImageSet> SmallFolder(const std::string& root) {
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 4; ++i)
      Write(root + "/class" + std::to_string(c) + "/" + std::to_string(i) + ".jpg",
            Jpeg(20 + 4 * i + c, 16 + 3 * i));
  auto folder = ImageSet::OpenFolder(root, nullptr);
  EXPECT_TRUE(folder.ok()) << folder.status().ToString();
  return std::move(*folder);
}

std::vector<Batch> Batches(BatchSource& source, int count) {
  std::vector<Batch> out(count);
  for (Batch& b : out) source.Next(b);
  return out;
}

TEST(ImagesTest, FolderBatchesCoverEachImageOnceAndRepeatWithAnyThreads) {
  TempDir dir;
  auto folder = SmallFolder(dir.path());
  const std::vector<int64_t> shape = {4, 3, 8, 8};
  auto one = BatchSource::FromImages(folder, 4, shape, 3, true, 9, 1);
  auto three = BatchSource::FromImages(folder, 4, shape, 3, true, 9, 3);
  ASSERT_TRUE(one.ok() && three.ok());
  const std::vector<Batch> a = Batches(**one, 6), b = Batches(**three, 6);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].images, b[i].images) << "batch " << i;
    EXPECT_EQ(a[i].labels, b[i].labels);
  }
  // An epoch is 3 batches: every label 4 times, in another order next epoch.
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::map<int32_t, int> seen;
    for (int i = 0; i < 3; ++i)
      for (int32_t y : a[epoch * 3 + i].labels) ++seen[y];
    EXPECT_EQ(seen, (std::map<int32_t, int>{{0, 4}, {1, 4}, {2, 4}}));
  }
  EXPECT_NE(a[0].images, a[3].images);
  // Resuming at batch 4 gives batches 4 and 5 again.
  auto resumed = BatchSource::FromImages(folder, 4, shape, 3, true, 9, 2);
  ASSERT_TRUE(resumed.ok());
  (*resumed)->Seek(4);
  const std::vector<Batch> c = Batches(**resumed, 2);
  EXPECT_EQ(c[0].images, a[4].images);
  EXPECT_EQ(c[1].labels, a[5].labels);
  // Two shards of the batch are its two halves.
  auto shard = BatchSource::FromImages(folder, 4, shape, 3, true, 9, 1);
  ASSERT_TRUE(shard.ok() && (*shard)->SetShard(1, 2).ok());
  Batch half;
  (*shard)->Next(half);
  EXPECT_EQ(half.labels, std::vector<int32_t>(a[0].labels.begin() + 2, a[0].labels.end()));
  EXPECT_TRUE(std::equal(half.images.begin(), half.images.end(),
                         a[0].images.begin() + 2 * 3 * 8 * 8));
  // Evaluation batches: in order, center-cropped, the same every time.
  auto eval = BatchSource::FromImages(folder, 4, shape, 3, false, 9, 2);
  ASSERT_TRUE(eval.ok());
  const std::vector<Batch> e = Batches(**eval, 4);
  EXPECT_EQ(e[0].labels, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(e[3].images, e[0].images);
}

TEST(ImagesTest, BytesForPlansThatNormalizeThemselves) {
  // --input-normalize plans: the crops unnormalized, in [0, 1], and the
  // same batch as bytes, round(255 x); the normalized batch is their
  // ImageNet normalization.
  TempDir dir;
  auto folder = SmallFolder(dir.path());
  const std::vector<int64_t> shape = {4, 3, 8, 8};
  auto raw = BatchSource::FromImages(folder, 4, shape, 3, true, 9, 1, Augmentation::kImageNet,
                                     /*normalize=*/false);
  auto normalized = BatchSource::FromImages(folder, 4, shape, 3, true, 9, 1);
  ASSERT_TRUE(raw.ok() && normalized.ok());
  (*raw)->set_pixels_u8(true);
  Batch r, n;
  (*raw)->Next(r);
  (*normalized)->Next(n);
  ASSERT_EQ(r.pixels.size(), r.images.size());
  EXPECT_TRUE(n.pixels.empty());
  EXPECT_EQ(ImageBytes(r), r.images.size());
  EXPECT_EQ(ImageData(r), static_cast<const void*>(r.pixels.data()));
  EXPECT_EQ(ImageBytes(n), n.images.size() * sizeof(float));
  static constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
  static constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};
  for (size_t i = 0; i < r.images.size(); ++i) {
    ASSERT_GE(r.images[i], 0.0f);
    ASSERT_LE(r.images[i], 1.0f);
    ASSERT_EQ(r.pixels[i], static_cast<uint8_t>(std::lrint(r.images[i] * 255.0f))) << i;
    const size_t c = (i / 64) % 3;
    ASSERT_NEAR(n.images[i], (r.images[i] - kMean[c]) / kStd[c], 1e-5f) << i;
  }
  // Synthetic bytes span the range.
  auto synthetic = BatchSource::Synthetic(4, shape, 3, 1, 5, /*unit=*/true);
  synthetic->set_pixels_u8(true);
  Batch s;
  synthetic->Next(s);
  EXPECT_LE(*std::min_element(s.pixels.begin(), s.pixels.end()), 5);
  EXPECT_GE(*std::max_element(s.pixels.begin(), s.pixels.end()), 250);
}

TEST(ImagesTest, UndecodableImagesAreSkippedAndCounted) {
  TempDir dir;
  auto folder = SmallFolder(dir.path());
  Write(dir.path() + "/class1/2.jpg", "corrupt");  // the folder listed it as a JPEG
  auto source = BatchSource::FromImages(folder, 4, {4, 3, 8, 8}, 3, false, 1, 2);
  ASSERT_TRUE(source.ok());
  const std::vector<Batch> epoch = Batches(**source, 6);
  EXPECT_EQ((*source)->skipped(), 1);
  // In order: 1/2.jpg's row (the 7th image) holds 1/3.jpg, the next in order.
  EXPECT_EQ(epoch[1].labels, (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(std::vector<float>(epoch[1].images.begin() + 2 * 192, epoch[1].images.begin() + 3 * 192),
            std::vector<float>(epoch[1].images.begin() + 3 * 192, epoch[1].images.end()));
  // Strict: the batch holding the bad file fails, naming it; nothing skipped.
  auto strict = BatchSource::FromImages(folder, 4, {4, 3, 8, 8}, 3, false, 1, 2);
  ASSERT_TRUE(strict.ok());
  (*strict)->set_strict(true);
  const std::vector<Batch> strict_epoch = Batches(**strict, 2);
  EXPECT_TRUE(strict_epoch[0].error.empty());
  EXPECT_NE(strict_epoch[1].error.find("class1/2.jpg: not a JPEG"), std::string::npos)
      << strict_epoch[1].error;
  EXPECT_EQ((*strict)->skipped(), 0);
  // A folder none of whose images decodes: the batch carries an error.
  TempDir junk;
  for (int i = 0; i < 6; ++i) Write(junk.path() + "/c/" + std::to_string(i) + ".jpg", "junk");
  auto all_bad = ImageSet::OpenFolder(junk.path(), nullptr);
  ASSERT_TRUE(all_bad.ok());
  auto junk_source =
      BatchSource::FromImages(std::move(*all_bad), 2, {2, 3, 8, 8}, 3, true, 1, 1);
  ASSERT_TRUE(junk_source.ok());
  Batch none;
  (*junk_source)->Next(none);
  EXPECT_NE(none.error.find("none of 6 images in a row decodes"), std::string::npos) << none.error;
  // Wrong shapes for a folder.
  EXPECT_FALSE(BatchSource::FromImages(folder, 4, {4, 2, 8, 8}, 3, true, 1, 1).ok());
  EXPECT_FALSE(BatchSource::FromImages(folder, 16, {16, 3, 8, 8}, 3, true, 1, 1).ok());
  EXPECT_FALSE(BatchSource::FromImages(folder, 4, {4, 3, 8, 8}, 2, true, 1, 1).ok());
}

// ---------------------------------------------------------------------------
// Tar shards.

// One tar member: a ustar header (its checksum computed) and the data padded
// to 512 bytes. `prefix` fills ustar's prefix field.
std::string TarMember(const std::string& name, const std::string& data, char type = '0',
                      const std::string& prefix = "") {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(100, name.size()));
  std::snprintf(&h[100], 8, "%07o", 0644);
  std::snprintf(&h[108], 8, "%07o", 0);
  std::snprintf(&h[116], 8, "%07o", 0);
  std::snprintf(&h[124], 12, "%011o", static_cast<unsigned>(data.size()));
  std::snprintf(&h[136], 12, "%011o", 0);
  h[156] = type;
  std::memcpy(&h[257], "ustar\0" "00", 8);
  std::memcpy(&h[345], prefix.data(), std::min<size_t>(155, prefix.size()));
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(&h[148], 8, "%06o", sum);
  h[155] = ' ';
  std::string member = h + data;
  member.append((512 - data.size() % 512) % 512, '\0');
  return member;
}

// A pax extended header naming the next member.
std::string PaxPath(const std::string& path) {
  std::string record = " path=" + path + "\n";
  // The length counts its own digits.
  size_t length = record.size() + 1;
  while (std::to_string(length).size() + record.size() != length) ++length;
  return TarMember("PaxHeader/x", std::to_string(length) + record, 'x');
}

std::string TarEnd() { return std::string(1024, '\0'); }

// Recomputes the checksum of the header at `block` after an edit.
void Rechecksum(std::string& tar, size_t block) {
  std::memset(&tar[block + 148], ' ', 8);
  unsigned sum = 0;
  for (size_t i = block; i < block + 512; ++i) sum += static_cast<unsigned char>(tar[i]);
  std::snprintf(&tar[block + 148], 8, "%06o", sum);
  tar[block + 155] = ' ';
}

TEST(ImagesTest, ShardPatternsExpandAsBraceexpandDoes) {
  auto expand = [](const std::string& pattern) {
    StatusOr<std::vector<std::string>> names = ExpandShardPattern(pattern);
    EXPECT_TRUE(names.ok()) << names.status().ToString();
    return names.ok() ? *names : std::vector<std::string>{};
  };
  EXPECT_EQ(expand("a-{00..03}.tar"),
            (std::vector<std::string>{"a-00.tar", "a-01.tar", "a-02.tar", "a-03.tar"}));
  EXPECT_EQ(expand("{a,b}-{1..2}"), (std::vector<std::string>{"a-1", "a-2", "b-1", "b-2"}));
  EXPECT_EQ(expand("x{3..1}"), (std::vector<std::string>{"x3", "x2", "x1"}));
  EXPECT_EQ(expand("x{8..10}"), (std::vector<std::string>{"x8", "x9", "x10"}));
  EXPECT_EQ(expand("x{9..010}"), (std::vector<std::string>{"x009", "x010"}));
  EXPECT_EQ(expand("plain.tar"), (std::vector<std::string>{"plain.tar"}));
  auto error = [](const std::string& pattern) {
    StatusOr<std::vector<std::string>> names = ExpandShardPattern(pattern);
    return names.ok() ? std::string("ok") : names.status().message();
  };
  EXPECT_NE(error("x{1..").find("a '{' without its '}'"), std::string::npos);
  EXPECT_NE(error("x}{1..2}").find("a '}' without its '{'"), std::string::npos);
  EXPECT_NE(error("x{1..2}}").find("a '}' without its '{'"), std::string::npos);
  EXPECT_NE(error("x{{1..2}}").find("braces inside braces"), std::string::npos);
  EXPECT_NE(error("x{1..a}").find("not a range of numbers"), std::string::npos);
  EXPECT_NE(error("x{1}").find("is not A..B or a,b,..."), std::string::npos);
  EXPECT_NE(error("x{0..9999999}").find("more than 1048576 shards"), std::string::npos);
  EXPECT_NE(error("x{0..1023}{0..1023}{0..1}").find("more than 1048576 shards"),
            std::string::npos);
  EXPECT_NE(error("").find("an empty shard pattern"), std::string::npos);
  // Bounded before expanding: a million names of 4 KiB, or many groups
  // (each a pass over the names).
  EXPECT_NE(error("{0..1048574}" + std::string(4000, 'x')).find("64 MiB of names"),
            std::string::npos);
  std::string groups;
  for (int i = 0; i < 20; ++i) groups += "{,}";
  for (int i = 0; i < 600; ++i) groups += "{1..1}";
  EXPECT_NE(error(groups).find("8 brace groups"), std::string::npos);
  // Wildcards match files, sorted; a wildcard that matches nothing is an error.
  TempDir dir;
  Write(dir.path() + "/s2.tar", "");
  Write(dir.path() + "/s1.tar", "");
  EXPECT_EQ(expand(dir.path() + "/s*.tar"),
            (std::vector<std::string>{dir.path() + "/s1.tar", dir.path() + "/s2.tar"}));
  EXPECT_NE(error(dir.path() + "/z*.tar").find("matches no file"), std::string::npos);
}

TEST(ImagesTest, ShardsIndexSamplesInOrderWithTheirLabels) {
  TempDir dir;
  const std::string a = Jpeg(8, 8), b = Jpeg(12, 8), c = Jpeg(8, 12), d = Jpeg(16, 16);
  const std::string long_dir(120, 'd');
  Write(dir.path() + "/s0.tar",
        TarMember("k0.jpg", a) + TarMember("k0.cls", "2") + TarMember("folder/", "", '5') +
            TarMember("k1.cls", " 0\n") + TarMember("././@LongLink", "a/link", 'K') +
            TarMember("k1.JPEG", b) + TarMember("k1.json", "{}") +
            TarMember("README", "not a sample") + PaxPath(long_dir + "/k2.jpg") +
            TarMember("cut", c) + TarMember("././@LongLink", long_dir + "/k2.cls" + '\0', 'L') +
            TarMember("cut2", "1") + TarEnd());
  // ustar's prefix field, and a shard without end-of-archive blocks.
  Write(dir.path() + "/s1.tar", TarMember("k3.jpg", d, '0', "sub") +
                                    TarMember("k3.cls", "1", '0', "sub") +
                                    TarMember("k4.cls", "0") +
                                    TarMember("k4.png", Png(8, 8, PNG_FORMAT_RGB)));
  auto set = ImageSet::OpenShards(dir.path() + "/s{0..1}.tar");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const ImageSet& s = **set;
  ASSERT_EQ(s.count(), 5);
  EXPECT_TRUE(s.shards());
  EXPECT_EQ(s.path(4), fs::canonical(dir.path()).string() + "/s1.tar: k4.png");
  EXPECT_EQ(s.class_count(), 3);
  EXPECT_EQ((std::vector<int32_t>{s.label(0), s.label(1), s.label(2), s.label(3)}),
            (std::vector<int32_t>{2, 0, 1, 1}));
  const std::string real = fs::canonical(dir.path()).string();
  EXPECT_EQ(s.path(0), real + "/s0.tar: k0.jpg");
  EXPECT_EQ(s.path(1), real + "/s0.tar: k1.JPEG");
  EXPECT_EQ(s.path(2), real + "/s0.tar: " + long_dir + "/k2.jpg");
  EXPECT_EQ(s.path(3), real + "/s1.tar: sub/k3.jpg");
  // Each decodes as the same JPEG in a folder does.
  const std::vector<std::string> jpegs = {a, b, c, d, Png(8, 8, PNG_FORMAT_RGB)};
  for (int i = 0; i < 5; ++i) {
    TempDir folder_dir;
    Write(folder_dir.path() + "/c/x.jpg", jpegs[i]);
    auto folder = ImageSet::OpenFolder(folder_dir.path(), nullptr);
    ASSERT_TRUE(folder.ok());
    std::vector<float> from_shard(3 * 8 * 8), from_file(3 * 8 * 8);
    ASSERT_TRUE(s.Decode(i, Augmentation::kImageNet, true, false, 5, 3, 8, 8, from_shard.data()).ok());
    ASSERT_TRUE(
        (*folder)->Decode(0, Augmentation::kImageNet, true, false, 5, 3, 8, 8, from_file.data()).ok());
    EXPECT_EQ(from_shard, from_file) << "sample " << i;
  }
}

TEST(ImagesTest, ShardBatchesAreTheFolderBatchesOfTheSameImages) {
  TempDir dir;
  auto folder = SmallFolder(dir.path() + "/folder");
  // The folder's images in its order, over two shards.
  std::string shards[2];
  for (int64_t i = 0; i < folder->count(); ++i) {
    std::ifstream in(folder->path(i), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string key = "sample" + std::to_string(i);
    shards[i / 8] += TarMember(key + ".jpg", bytes) +
                     TarMember(key + ".cls", std::to_string(folder->label(i)));
  }
  Write(dir.path() + "/part-0.tar", shards[0] + TarEnd());
  Write(dir.path() + "/part-1.tar", shards[1] + TarEnd());
  auto set = ImageSet::OpenShards(dir.path() + "/part-{0..1}.tar");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ((*set)->count(), folder->count());
  std::shared_ptr<const ImageSet> shard_set = std::move(*set);
  const std::vector<int64_t> shape = {4, 3, 8, 8};
  for (bool train : {true, false}) {
    auto from_folder = BatchSource::FromImages(folder, 4, shape, 3, train, 9, 1);
    auto from_shards = BatchSource::FromImages(shard_set, 4, shape, 3, train, 9, 2);
    ASSERT_TRUE(from_folder.ok() && from_shards.ok());
    const std::vector<Batch> x = Batches(**from_folder, 6), y = Batches(**from_shards, 6);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].images, y[i].images) << "batch " << i << (train ? " (training)" : "");
      EXPECT_EQ(x[i].labels, y[i].labels);
    }
  }
  // A model of fewer classes than the labels.
  auto few = BatchSource::FromImages(shard_set, 4, shape, 2, true, 9, 1);
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("labels up to 2; the model tells 2 apart"),
            std::string::npos)
      << few.status().message();
}

TEST(ImagesTest, ShardsRefuseBadTarsNamingShardAndMember) {
  TempDir dir;
  const std::string jpeg = Jpeg(8, 8);
  const std::string good = TarMember("k0.jpg", jpeg) + TarMember("k0.cls", "1");
  auto error = [&](const std::string& name, const std::string& bytes) {
    Write(dir.path() + "/" + name, bytes);
    auto set = ImageSet::OpenShards(dir.path() + "/" + name);
    return set.ok() ? std::string("ok") : set.status().message();
  };
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  std::string m = error("nolabel.tar", good + TarMember("k1.jpg", jpeg) + TarEnd());
  EXPECT_TRUE(has(m, "nolabel.tar: k1.jpg: an image without its label (k1.cls")) << m;
  m = error("noimage.tar", TarMember("k1.cls", "3") + good + TarEnd());
  EXPECT_TRUE(has(m, "noimage.tar: k1.cls: a label without its image (k1.jpg, .jpeg or .png)"))
      << m;
  for (const char* label : {"cat", "-1", "2147483648", "", "1 2"}) {
    m = error("label.tar", TarMember("k.jpg", jpeg) + TarMember("k.cls", label) + TarEnd());
    EXPECT_TRUE(has(m, "label.tar: k.cls: a label must be a decimal class index")) << m;
  }
  m = error("big.tar", TarMember("k.jpg", jpeg) + TarMember("k.cls", std::string(100, '1')));
  EXPECT_TRUE(has(m, "100 bytes; a label is a decimal class index")) << m;
  m = error("two.tar", good + TarMember("k0.jpeg", jpeg) + TarEnd());
  EXPECT_TRUE(has(m, "two.tar: k0.jpeg: a second image for key 'k0'")) << m;
  std::string corrupt = good + good;
  corrupt[good.size() + 3] ^= 0x20;  // the second copy's first header
  m = error("checksum.tar", corrupt);
  EXPECT_TRUE(has(m, "checksum.tar: byte " + std::to_string(good.size()) +
                         ": a corrupt tar header (its checksum does not match)"))
      << m;
  m = error("notar.tar", jpeg);
  EXPECT_TRUE(has(m, "notar.tar: byte 0: not a tar file")) << m;
  m = error("cut.tar", good.substr(0, 512 + 100));
  EXPECT_TRUE(has(m, "cut.tar: byte 0: member 'k0.jpg' of " + std::to_string(jpeg.size()) +
                         " bytes runs past the end of the shard (truncated)"))
      << m;
  m = error("header.tar", good + std::string(100, 'x'));
  EXPECT_TRUE(has(m, "header.tar: byte " + std::to_string(good.size()) +
                         ": a tar header cut short (the shard is truncated)"))
      << m;
  m = error("empty.tar", TarEnd());
  EXPECT_TRUE(has(m, "empty.tar: holds no samples")) << m;
  m = error("empty2.tar", "");
  EXPECT_TRUE(has(m, "empty2.tar: holds no samples")) << m;
  std::string huge_size = TarMember("k.jpg", jpeg);
  huge_size[124] = static_cast<char>(0xff);  // base-256, negative
  Rechecksum(huge_size, 0);
  m = error("negative.tar", huge_size + TarEnd());
  EXPECT_TRUE(has(m, "negative.tar: byte 0: a tar header with a corrupt size")) << m;
  std::string base256 = TarMember("k.jpg", jpeg);
  std::memset(&base256[124], 0, 12);
  base256[124] = static_cast<char>(0x80);  // base-256: 2^40 bytes
  base256[130] = 1;
  Rechecksum(base256, 0);
  m = error("base256.tar", base256 + TarEnd());
  EXPECT_TRUE(has(m, "member 'k.jpg' of 1099511627776 bytes runs past the end")) << m;
  fs::create_directories(dir.path() + "/folder.tar");
  m = error("good.tar", good + TarEnd());
  EXPECT_EQ(m, "ok");
  auto twice = ImageSet::OpenShards(dir.path() + "/{good,good}.tar");
  EXPECT_TRUE(has(twice.status().message(), "named twice by the shard pattern")) << twice.status().message();
  auto folder = ImageSet::OpenShards(dir.path() + "/folder.tar");
  EXPECT_TRUE(has(folder.status().message(), "not a regular file")) << folder.status().message();
  auto missing = ImageSet::OpenShards(dir.path() + "/missing.tar");
  EXPECT_TRUE(has(missing.status().message(), "missing.tar: No such file")) << missing.status().message();
  // A shard cut short after it was indexed: the member is an error, named.
  auto set = ImageSet::OpenShards(dir.path() + "/good.tar");
  ASSERT_TRUE(set.ok());
  fs::resize_file(dir.path() + "/good.tar", 600);
  std::vector<float> out(3 * 8 * 8);
  Status cut = (*set)->Decode(0, Augmentation::kResize, false, false, 1, 3, 8, 8, out.data());
  EXPECT_TRUE(has(cut.message(), "good.tar: k0.jpg: past the end of its shard")) << cut.message();
}

TEST(ImagesTest, ShardIndexSurvivesMutatedTars) {
  // Random bytes of a valid shard changed (headers re-checksummed mostly, so
  // that the parser reads past the checksum) or the file cut: every result is
  // a clean error or a set whose images decode or fail cleanly.
  TempDir dir;
  const std::string jpeg = Jpeg(8, 8);
  std::string valid = PaxPath("long/k0.jpg") + TarMember("x", jpeg) +
                      TarMember("long/k0.cls", "1") + TarMember("k1.jpg", jpeg) +
                      TarMember("k1.cls", "0") + TarEnd();
  std::vector<size_t> headers;
  for (size_t at = 0; at + 512 <= valid.size(); at += 512) headers.push_back(at);
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  int opened = 0;
  for (int round = 0; round < 1500; ++round) {
    std::string bytes = valid;
    if (next() % 8 == 0) {
      bytes.resize(next() % bytes.size());
    } else {
      const size_t block = headers[next() % headers.size()];
      for (uint64_t k = 0, n = 1 + next() % 4; k < n; ++k)
        bytes[block + next() % 512] = static_cast<char>(next() & 0xff);
      if (next() % 4 != 0) Rechecksum(bytes, block);
    }
    Write(dir.path() + "/m.tar", bytes);
    auto set = ImageSet::OpenShards(dir.path() + "/m.tar");
    if (!set.ok()) {
      EXPECT_EQ(set.status().code(), ErrorCode::kIo) << set.status().ToString();
      continue;
    }
    ++opened;
    std::vector<float> out(3 * 8 * 8);
    for (int64_t i = 0; i < (*set)->count(); ++i)
      (void)(*set)->Decode(i, Augmentation::kImageNet, true, false, 1, 3, 8, 8, out.data());
  }
  EXPECT_GT(opened, 0);
}

}  // namespace
}  // namespace graphc::runtime
