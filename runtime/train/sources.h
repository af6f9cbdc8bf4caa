// The data-source factory: what graphrun's `--data SPEC` names, as a training
// source and a test source of batches shaped for the plan.
//
//   synthetic                     random batches made once from the seed
//   fashion-mnist[:DIR]           Debian's IDX files (default DIR kFashionMnistDir)
//   npy:IMAGES,LABELS[,TEST_IMAGES,TEST_LABELS]   the user's own arrays
//   imagefolder:DIR               JPEGs in class folders: DIR/train and DIR/val
//                                 (the test split), or DIR alone (no test split)
//   shards:PATTERN                WebDataset tar shards (KEY.jpg + KEY.cls), e.g.
//                                 train-{0000..0127}.tar; no test split
//
// An evaluation split of images may also be named on its own (graphrun
// --eval-data imagefolder:DIR or shards:PATTERN).

#ifndef GRAPHC_RUNTIME_TRAIN_SOURCES_H_
#define GRAPHC_RUNTIME_TRAIN_SOURCES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/train/dataset.h"
#include "contract/status.h"

namespace graphc::runtime {

struct DataSources {
  std::string name;  // "synthetic", "fashion-mnist", "npy", "imagefolder" or "shards"
  std::unique_ptr<BatchSource> train;  // shuffled per epoch (synthetic: cycled)
  std::unique_ptr<BatchSource> test;   // in order; synthetic when SPEC has no test split
};

// How the sources read their data.
struct DataOptions {
  // The threads that decode an image batch (at least 1), and how its images
  // are cropped.
  int threads = 1;
  Augmentation augmentation = Augmentation::kImageNet;
  // The test split's own SPEC (imagefolder: or shards:), read only when the
  // caller evaluates; an image folder's classes must be the training
  // folder's.
  std::string eval_spec;
  // The plan takes 8-bit pixels and normalizes them itself (graphc compile
  // --input-normalize): the sources give pixels in [0, 1], unnormalized, and
  // fill Batch::pixels; float32 arrays (npy) are refused rather than rounded.
  bool pixels_u8 = false;
};

// `image_shape` is the plan's [batch, c, h, w] and `classes` its logit count
// (both positive). `need_test`: the caller evaluates, so a SPEC that can carry
// a test split must (npy: all four arrays; imagefolder: DIR/val).
// kInvalidArgument names a bad SPEC; the readers' errors name the file.
StatusOr<DataSources> CreateDataSources(const std::string& spec,
                                        const std::vector<int64_t>& image_shape,
                                        int64_t classes, bool need_test, uint64_t seed,
                                        const DataOptions& options = DataOptions());

// Every file SPEC reads (for refusing to overwrite one), in order.
std::vector<std::string> DataFiles(const std::string& spec);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_SOURCES_H_
