// The data-source factory (see sources.h).

#include "runtime/train/sources.h"

#include <sys/stat.h>

#include <algorithm>
#include <sstream>
#include <utility>

#include "contract/printable.h"
#include "runtime/train/images.h"

namespace graphc::runtime {
namespace {

constexpr const char kFashionPrefix[] = "fashion-mnist:";
constexpr const char kNpyPrefix[] = "npy:";
constexpr const char kImageFolderPrefix[] = "imagefolder:";

bool StartsWith(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

std::vector<std::string> SplitCommas(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream stream(list);
  for (std::string item; std::getline(stream, item, ',');) items.push_back(item);
  return items;
}

}  // namespace

std::vector<std::string> DataFiles(const std::string& spec) {
  if (StartsWith(spec, kNpyPrefix)) return SplitCommas(spec.substr(sizeof(kNpyPrefix) - 1));
  return {};
}

// DIR/train and DIR/val when DIR has a train folder, else DIR alone.
Status OpenImageFolders(const std::string& dir, const std::vector<int64_t>& image_shape,
                        int64_t classes, bool need_test, uint64_t seed, int threads,
                        Augmentation augmentation, DataSources& sources) {
  struct stat st;
  const bool split = ::stat((dir + "/train").c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  const std::string train_dir = split ? dir + "/train" : dir;
  const bool has_val = split && ::stat((dir + "/val").c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  // The validation split is read only for --eval (a run without it trains
  // whatever DIR/val holds).
  if (need_test && !has_val)
    return Status(ErrorCode::kInvalidArgument,
                  "--eval with --data imagefolder: needs DIR/train and DIR/val class folders, "
                  "and '" + Printable(dir) + "' has no " + (split ? "val" : "train") + " folder");
  const int64_t batch = image_shape[0];
  StatusOr<std::unique_ptr<ImageFolder>> train = ImageFolder::Open(train_dir, nullptr);
  if (!train.ok()) return train.status();
  std::shared_ptr<const ImageFolder> train_folder = std::move(*train);
  auto made = BatchSource::FromImageFolder(train_folder, batch, image_shape, classes,
                                           /*train=*/true, seed, threads, augmentation);
  if (!made.ok()) return made.status();
  sources.train = std::move(*made);
  if (has_val && need_test) {
    StatusOr<std::unique_ptr<ImageFolder>> val =
        ImageFolder::Open(dir + "/val", &train_folder->classes());
    if (!val.ok()) return val.status();
    auto test = BatchSource::FromImageFolder(std::move(*val), batch, image_shape, classes,
                                             /*train=*/false, seed, threads, augmentation);
    if (!test.ok()) return test.status();
    sources.test = std::move(*test);
  }
  return Status::Ok();
}

StatusOr<DataSources> CreateDataSources(const std::string& spec,
                                        const std::vector<int64_t>& image_shape,
                                        int64_t classes, bool need_test, uint64_t seed,
                                        int data_threads, Augmentation augmentation) {
  DataSources sources;
  const int64_t batch = image_shape.empty() ? 0 : image_shape[0];
  // One training split and an optional test split, read by `read(train)`.
  auto from = [&](auto read, int splits) -> Status {
    for (int split = 0; split < splits; ++split) {
      const bool train = split == 0;
      StatusOr<Examples> examples = read(train);
      if (!examples.ok()) return examples.status();
      auto made = BatchSource::Create(std::move(*examples), batch, image_shape, classes,
                                      /*shuffle=*/train, seed);
      if (!made.ok()) return made.status();
      (train ? sources.train : sources.test) = std::move(*made);
    }
    return Status::Ok();
  };
  Status status;
  if (spec == "synthetic") {
    sources.name = "synthetic";
    sources.train = BatchSource::Synthetic(batch, image_shape, classes, 4, seed);
  } else if (spec == "fashion-mnist" ||
             (StartsWith(spec, kFashionPrefix) && spec.size() > sizeof(kFashionPrefix) - 1)) {
    const std::string dir =
        spec == "fashion-mnist" ? kFashionMnistDir : spec.substr(sizeof(kFashionPrefix) - 1);
    sources.name = "fashion-mnist";
    status = from([&](bool train) { return ReadFashionMnist(dir, train); }, 2);
  } else if (StartsWith(spec, kNpyPrefix)) {
    const std::vector<std::string> paths = DataFiles(spec);
    if ((paths.size() != 2 && paths.size() != 4) ||
        std::any_of(paths.begin(), paths.end(), [](const std::string& p) { return p.empty(); }))
      return Status(ErrorCode::kInvalidArgument,
                    "--data npy: needs IMAGES.npy,LABELS.npy[,TEST_IMAGES.npy,TEST_LABELS.npy], "
                    "got '" + Printable(spec) + "'");
    if (need_test && paths.size() != 4)
      return Status(ErrorCode::kInvalidArgument,
                    "--eval with --data npy: needs the test arrays too: "
                    "npy:IMAGES.npy,LABELS.npy,TEST_IMAGES.npy,TEST_LABELS.npy");
    sources.name = "npy";
    status = from(
        [&](bool train) { return ReadNpy(paths[train ? 0 : 2], paths[train ? 1 : 3]); },
        static_cast<int>(paths.size() / 2));
  } else if (StartsWith(spec, kImageFolderPrefix) &&
             spec.size() > sizeof(kImageFolderPrefix) - 1) {
    sources.name = "imagefolder";
    status = OpenImageFolders(spec.substr(sizeof(kImageFolderPrefix) - 1), image_shape, classes,
                              need_test, seed, data_threads, augmentation, sources);
  } else {
    return Status(ErrorCode::kInvalidArgument,
                  "--data must be synthetic, fashion-mnist[:DIR], "
                  "npy:IMAGES.npy,LABELS.npy[,...] or imagefolder:DIR, got '" +
                      Printable(spec) + "'");
  }
  if (!status.ok()) return status;
  if (!sources.test) sources.test = BatchSource::Synthetic(batch, image_shape, classes, 4, seed);
  return sources;
}

}  // namespace graphc::runtime
