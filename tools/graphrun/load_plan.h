// How graphrun's commands open a plan: verified by the loader, and signed by
// a trusted key when the user names key files.
#ifndef GRAPHC_TOOLS_GRAPHRUN_LOAD_PLAN_H_
#define GRAPHC_TOOLS_GRAPHRUN_LOAD_PLAN_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "contract/plan_integrity.h"
#include "runtime/core/plan_loader.h"

namespace graphc::runtime {

// The plan at `path`, signed by one of the keys in the comma-separated list
// of key files `key_files` when it names any (checked by the loader, right
// after the plan's digests).
inline StatusOr<std::unique_ptr<Plan>> LoadPlan(const std::string& path,
                                                const std::string& key_files) {
  std::vector<PublicKey> trusted;
  if (!key_files.empty()) {
    StatusOr<std::vector<PublicKey>> keys = ReadTrustedKeys(key_files);
    if (!keys.ok()) return keys.status();
    trusted = std::move(*keys);
  }
  return Plan::FromFile(path, LoaderLimits(), trusted);
}

}  // namespace graphc::runtime

#endif  // GRAPHC_TOOLS_GRAPHRUN_LOAD_PLAN_H_
