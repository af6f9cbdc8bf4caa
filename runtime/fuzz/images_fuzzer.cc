// libFuzzer target for the image readers: the input's first byte picks what
// the rest is. Even: a WebDataset tar shard, indexed (ImageSet::OpenShards)
// and each of its first samples decoded with a random crop; odd: an image
// file (JPEG or PNG), decoded whole and with a crop (a JPEG at reduced,
// DCT-scaled size). Every
// input must end in a Status: no crash, no sanitizer report, no runaway
// allocation (kMaxImagePixels and the shard checks bound them).

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/fuzz/fuzz_input.h"
#include "runtime/train/images.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using graphc::runtime::Augment;
  using graphc::runtime::Augmentation;
  using graphc::runtime::CropBox;
  if (size < 1) return 0;
  const bool tar = (data[0] & 1) == 0;
  const std::string path =
      graphc::fuzz::WriteInput("graphc-images-fuzz", data + 1, size - 1, tar ? ".tar" : ".jpg");
  std::vector<float> out(3 * 24 * 24);
  if (tar) {
    auto set = graphc::runtime::ImageSet::OpenShards(path);
    if (set.ok())
      for (int64_t i = 0; i < (*set)->count() && i < 8; ++i)
        (void)(*set)->Decode(i, Augmentation::kImageNet, /*train=*/true, false, uint64_t(i), 3,
                             24, 24, out.data());
  } else {
    (void)graphc::runtime::DecodeImageFile(
        path, 3, 24, 24,
        [](int64_t w, int64_t h) {
          return Augment{CropBox{0, 0, double(w), double(h)}, false};
        },
        out.data());
    (void)graphc::runtime::DecodeImageFile(
        path, 1, 24, 24,
        [](int64_t w, int64_t h) {
          return Augment{CropBox{w / 4.0, h / 3.0, w / 2.0, h / 2.0}, true};
        },
        out.data());
  }
  ::unlink(path.c_str());
  return 0;
}
