// Image folders: the crop geometry against torchvision's algorithm worked by
// hand for given draws, the resampler, JPEG files written here by TurboJPEG
// (decoded whole and at DCT-reduced size), every bad-file case, the folder
// scan's order and refusals, and batches from a folder: each image once per
// epoch, the same whatever the threads, resumable, undecodable files skipped.

#include "runtime/train/images.h"

#include <gtest/gtest.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
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
  ASSERT_TRUE(DecodeJpegFile(path, 3, 48, 64, Whole, out.data()).ok());
  float worst = 0;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 48; ++y)
      for (int x = 0; x < 64; ++x)
        worst = std::max(worst, std::fabs(out[(c * 48 + y) * 64 + x] * 255 -
                                          Pattern(x, y, c, 64, 48)));
  EXPECT_LT(worst, 4.0f);  // quality 95, 4:4:4
  // Gray: the luma of the pattern.
  std::vector<float> gray(48 * 64);
  ASSERT_TRUE(DecodeJpegFile(path, 1, 48, 64, Whole, gray.data()).ok());
  const float luma = (0.299f * Pattern(10, 20, 0, 64, 48) + 0.587f * Pattern(10, 20, 1, 64, 48) +
                      0.114f * 128) / 255;
  EXPECT_NEAR(gray[20 * 64 + 10], luma, 4.0f / 255);
  // 512 x 512 to 64 x 64: decoded at 1/8 by the DCT, then the pattern's
  // mean over each 8 x 8 block (a linear ramp: its value at the block's
  // center).
  Write(path, Jpeg(512, 512));
  std::vector<float> small(3 * 64 * 64);
  ASSERT_TRUE(DecodeJpegFile(path, 3, 64, 64, Whole, small.data()).ok());
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
    Status status = DecodeJpegFile(path, 3, 8, 8, Whole, out.data());
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
      DecodeJpegFile(dir.path() + "/small-progressive.jpg", 3, 8, 8, Whole, out.data()).ok());
  // A frame of no rows (the decoder refuses its header).
  std::string empty_frame = good;
  empty_frame[sof + 5] = empty_frame[sof + 6] = 0;
  EXPECT_NE(error("zero.jpg", empty_frame).find("not a JPEG the decoder reads"), std::string::npos);
  fs::create_directories(dir.path() + "/folder.jpg");
  EXPECT_FALSE(DecodeJpegFile(dir.path() + "/folder.jpg", 3, 8, 8, Whole, out.data()).ok());
  EXPECT_FALSE(DecodeJpegFile(dir.path() + "/missing.jpg", 3, 8, 8, Whole, out.data()).ok());
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
  auto folder = ImageFolder::Open(r, nullptr);
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
  auto val = ImageFolder::Open(r + "-val", &classes);
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
  auto empty = ImageFolder::Open(r, nullptr);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty: a class folder without a JPEG"),
            std::string::npos)
      << empty.status().message();
  fs::remove_all(r + "/empty");
  // A link inside the dataset is followed; one leading out is refused.
  fs::create_symlink(r + "/full/a.jpg", r + "/full/b.jpg");
  auto inside = ImageFolder::Open(r, nullptr);
  ASSERT_TRUE(inside.ok()) << inside.status().ToString();
  EXPECT_EQ((*inside)->count(), 2);
  fs::create_symlink("/etc", r + "/full/etc");
  auto outside = ImageFolder::Open(r, nullptr);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("a symbolic link that leads out of the dataset"),
            std::string::npos);
  TempDir bare;
  EXPECT_NE(ImageFolder::Open(bare.path(), nullptr).status().message().find("no class folders"),
            std::string::npos);
  EXPECT_FALSE(ImageFolder::Open(bare.path() + "/missing", nullptr).ok());
}

// ---------------------------------------------------------------------------
// Batches from a folder.

// 3 classes of 4 images each, of different sizes; the label is also in the
// pixels' mean (so a batch row can be matched to its file).
std::shared_ptr<const ImageFolder> SmallFolder(const std::string& root) {
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 4; ++i)
      Write(root + "/class" + std::to_string(c) + "/" + std::to_string(i) + ".jpg",
            Jpeg(20 + 4 * i + c, 16 + 3 * i));
  auto folder = ImageFolder::Open(root, nullptr);
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
  auto one = BatchSource::FromImageFolder(folder, 4, shape, 3, true, 9, 1);
  auto three = BatchSource::FromImageFolder(folder, 4, shape, 3, true, 9, 3);
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
  auto resumed = BatchSource::FromImageFolder(folder, 4, shape, 3, true, 9, 2);
  ASSERT_TRUE(resumed.ok());
  (*resumed)->Seek(4);
  const std::vector<Batch> c = Batches(**resumed, 2);
  EXPECT_EQ(c[0].images, a[4].images);
  EXPECT_EQ(c[1].labels, a[5].labels);
  // Two shards of the batch are its two halves.
  auto shard = BatchSource::FromImageFolder(folder, 4, shape, 3, true, 9, 1);
  ASSERT_TRUE(shard.ok() && (*shard)->SetShard(1, 2).ok());
  Batch half;
  (*shard)->Next(half);
  EXPECT_EQ(half.labels, std::vector<int32_t>(a[0].labels.begin() + 2, a[0].labels.end()));
  EXPECT_TRUE(std::equal(half.images.begin(), half.images.end(),
                         a[0].images.begin() + 2 * 3 * 8 * 8));
  // Evaluation batches: in order, center-cropped, the same every time.
  auto eval = BatchSource::FromImageFolder(folder, 4, shape, 3, false, 9, 2);
  ASSERT_TRUE(eval.ok());
  const std::vector<Batch> e = Batches(**eval, 4);
  EXPECT_EQ(e[0].labels, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(e[3].images, e[0].images);
}

TEST(ImagesTest, UndecodableImagesAreSkippedAndCounted) {
  TempDir dir;
  auto folder = SmallFolder(dir.path());
  Write(dir.path() + "/class1/2.jpg", "corrupt");  // the folder listed it as a JPEG
  auto source = BatchSource::FromImageFolder(folder, 4, {4, 3, 8, 8}, 3, false, 1, 2);
  ASSERT_TRUE(source.ok());
  const std::vector<Batch> epoch = Batches(**source, 6);
  EXPECT_EQ((*source)->skipped(), 1);
  // In order: 1/2.jpg's row (the 7th image) holds 1/3.jpg, the next in order.
  EXPECT_EQ(epoch[1].labels, (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(std::vector<float>(epoch[1].images.begin() + 2 * 192, epoch[1].images.begin() + 3 * 192),
            std::vector<float>(epoch[1].images.begin() + 3 * 192, epoch[1].images.end()));
  // Strict: the batch holding the bad file fails, naming it; nothing skipped.
  auto strict = BatchSource::FromImageFolder(folder, 4, {4, 3, 8, 8}, 3, false, 1, 2);
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
  auto all_bad = ImageFolder::Open(junk.path(), nullptr);
  ASSERT_TRUE(all_bad.ok());
  auto junk_source =
      BatchSource::FromImageFolder(std::move(*all_bad), 2, {2, 3, 8, 8}, 3, true, 1, 1);
  ASSERT_TRUE(junk_source.ok());
  Batch none;
  (*junk_source)->Next(none);
  EXPECT_NE(none.error.find("none of 6 images in a row decodes"), std::string::npos) << none.error;
  // Wrong shapes for a folder.
  EXPECT_FALSE(BatchSource::FromImageFolder(folder, 4, {4, 2, 8, 8}, 3, true, 1, 1).ok());
  EXPECT_FALSE(BatchSource::FromImageFolder(folder, 16, {16, 3, 8, 8}, 3, true, 1, 1).ok());
  EXPECT_FALSE(BatchSource::FromImageFolder(folder, 4, {4, 3, 8, 8}, 2, true, 1, 1).ok());
}

}  // namespace
}  // namespace graphc::runtime
