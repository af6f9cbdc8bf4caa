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
constexpr const char kShardsPrefix[] = "shards:";

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
  if (StartsWith(spec, kShardsPrefix)) {
    StatusOr<std::vector<std::string>> shards =
        ExpandShardPattern(spec.substr(sizeof(kShardsPrefix) - 1));
    if (shards.ok()) return *shards;
  }
  return {};
}

namespace {

// --eval-data's test split: an image folder (its classes those of the
// training folder, where training reads one) or shards, in order.
StatusOr<std::unique_ptr<BatchSource>> OpenEvalImages(
    const std::string& spec, const std::vector<std::string>* train_classes,
    const std::vector<int64_t>& image_shape, int64_t classes, uint64_t seed,
    const DataOptions& options) {
  StatusOr<std::unique_ptr<ImageSet>> set = Status(ErrorCode::kInvalidArgument, "");
  if (StartsWith(spec, kImageFolderPrefix) && spec.size() > sizeof(kImageFolderPrefix) - 1) {
    set = ImageSet::OpenFolder(spec.substr(sizeof(kImageFolderPrefix) - 1), train_classes);
  } else if (StartsWith(spec, kShardsPrefix) && spec.size() > sizeof(kShardsPrefix) - 1) {
    set = ImageSet::OpenShards(spec.substr(sizeof(kShardsPrefix) - 1));
  } else {
    return Status(ErrorCode::kInvalidArgument,
                  "--eval-data must be imagefolder:DIR or shards:PATTERN, got '" +
                      Printable(spec) + "'");
  }
  if (!set.ok()) return set.status();
  return BatchSource::FromImages(std::move(*set), image_shape[0], image_shape, classes,
                                 /*train=*/false, seed, options.threads, options.augmentation,
                                 /*normalize=*/!options.pixels_u8);
}

}  // namespace

// DIR/train and DIR/val when DIR has a train folder, else DIR alone.
Status OpenImageFolders(const std::string& dir, const std::vector<int64_t>& image_shape,
                        int64_t classes, bool need_test, uint64_t seed,
                        const DataOptions& options, DataSources& sources) {
  const std::string& eval_spec = options.eval_spec;
  struct stat st;
  const bool split = ::stat((dir + "/train").c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  const std::string train_dir = split ? dir + "/train" : dir;
  const bool has_val = split && ::stat((dir + "/val").c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  // The validation split is read only for --eval (a run without it trains
  // whatever DIR/val holds).
  if (need_test && !has_val && eval_spec.empty())
    return Status(ErrorCode::kInvalidArgument,
                  "--eval with --data imagefolder: needs DIR/train and DIR/val class folders "
                  "(or --eval-data), and '" + Printable(dir) + "' has no " +
                      (split ? "val" : "train") + " folder");
  const int64_t batch = image_shape[0];
  StatusOr<std::unique_ptr<ImageSet>> train = ImageSet::OpenFolder(train_dir, nullptr);
  if (!train.ok()) return train.status();
  std::shared_ptr<const ImageSet> train_folder = std::move(*train);
  auto made = BatchSource::FromImages(train_folder, batch, image_shape, classes,
                                      /*train=*/true, seed, options.threads, options.augmentation,
                                      /*normalize=*/!options.pixels_u8);
  if (!made.ok()) return made.status();
  sources.train = std::move(*made);
  if (need_test && !eval_spec.empty()) {
    auto test =
        OpenEvalImages(eval_spec, &train_folder->classes(), image_shape, classes, seed, options);
    if (!test.ok()) return test.status();
    sources.test = std::move(*test);
  } else if (has_val && need_test) {
    StatusOr<std::unique_ptr<ImageSet>> val =
        ImageSet::OpenFolder(dir + "/val", &train_folder->classes());
    if (!val.ok()) return val.status();
    auto test = BatchSource::FromImages(std::move(*val), batch, image_shape, classes,
                                        /*train=*/false, seed, options.threads,
                                        options.augmentation, /*normalize=*/!options.pixels_u8);
    if (!test.ok()) return test.status();
    sources.test = std::move(*test);
  }
  return Status::Ok();
}

StatusOr<DataSources> CreateDataSources(const std::string& spec,
                                        const std::vector<int64_t>& image_shape,
                                        int64_t classes, bool need_test, uint64_t seed,
                                        const DataOptions& options) {
  const std::string& eval_spec = options.eval_spec;
  DataSources sources;
  const int64_t batch = image_shape.empty() ? 0 : image_shape[0];
  // One training split and an optional test split, read by `read(train)`.
  auto from = [&](auto read, int splits) -> Status {
    for (int split = 0; split < splits; ++split) {
      const bool train = split == 0;
      StatusOr<Examples> examples = read(train);
      if (!examples.ok()) return examples.status();
      if (options.pixels_u8 && !examples->from_bytes)
        return Status(ErrorCode::kInvalidArgument,
                      "the plan takes 8-bit pixels (graphc compile --input-normalize), and the "
                      "data's images are float32: give uint8 arrays, or compile without "
                      "--input-normalize");
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
    sources.train =
        BatchSource::Synthetic(batch, image_shape, classes, 4, seed, options.pixels_u8);
  } else if (spec == "fashion-mnist" ||
             (StartsWith(spec, kFashionPrefix) && spec.size() > sizeof(kFashionPrefix) - 1)) {
    const std::string dir =
        spec == "fashion-mnist" ? kFashionMnistDir : spec.substr(sizeof(kFashionPrefix) - 1);
    sources.name = "fashion-mnist";
    status = from(
        [&](bool train) { return ReadFashionMnist(dir, train, /*normalize=*/!options.pixels_u8); },
        2);
  } else if (StartsWith(spec, kNpyPrefix)) {
    const std::vector<std::string> paths = DataFiles(spec);
    if ((paths.size() != 2 && paths.size() != 4) ||
        std::any_of(paths.begin(), paths.end(), [](const std::string& p) { return p.empty(); }))
      return Status(ErrorCode::kInvalidArgument,
                    "--data npy: needs IMAGES.npy,LABELS.npy[,TEST_IMAGES.npy,TEST_LABELS.npy], "
                    "got '" + Printable(spec) + "'");
    if (need_test && paths.size() != 4 && eval_spec.empty())
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
                              need_test, seed, options, sources);
  } else if (StartsWith(spec, kShardsPrefix) && spec.size() > sizeof(kShardsPrefix) - 1) {
    sources.name = "shards";
    if (need_test && eval_spec.empty())
      return Status(ErrorCode::kInvalidArgument,
                    "--eval with --data shards: needs --eval-data shards:PATTERN (or "
                    "imagefolder:DIR), the test split");
    StatusOr<std::unique_ptr<ImageSet>> shards =
        ImageSet::OpenShards(spec.substr(sizeof(kShardsPrefix) - 1));
    if (!shards.ok()) return shards.status();
    auto made = BatchSource::FromImages(std::move(*shards), batch, image_shape, classes,
                                        /*train=*/true, seed, options.threads,
                                        options.augmentation, /*normalize=*/!options.pixels_u8);
    if (!made.ok()) return made.status();
    sources.train = std::move(*made);
  } else {
    return Status(ErrorCode::kInvalidArgument,
                  "--data must be synthetic, fashion-mnist[:DIR], "
                  "npy:IMAGES.npy,LABELS.npy[,...], imagefolder:DIR or shards:PATTERN, got '" +
                      Printable(spec) + "'");
  }
  if (!status.ok()) return status;
  // --eval-data for the splits that do not read it themselves.
  if (need_test && !eval_spec.empty() && sources.name != "imagefolder") {
    auto test = OpenEvalImages(eval_spec, nullptr, image_shape, classes, seed, options);
    if (!test.ok()) return test.status();
    sources.test = std::move(*test);
  }
  if (!sources.test)
    sources.test = BatchSource::Synthetic(batch, image_shape, classes, 4, seed, options.pixels_u8);
  sources.train->set_pixels_u8(options.pixels_u8);
  sources.test->set_pixels_u8(options.pixels_u8);
  return sources;
}

}  // namespace graphc::runtime
