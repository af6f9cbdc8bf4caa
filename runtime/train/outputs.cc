// What a run writes (trainer.h, outputs.h): where each rank's trace goes,
// the checks on every output before anything runs, and the Chrome trace.

#include "runtime/train/outputs.h"

#include <unistd.h>

#include <map>
#include <sstream>

#include "contract/files.h"
#include "contract/printable.h"
#include "runtime/train/sources.h"

namespace graphc::runtime {

std::string TracePathOf(const std::string& path, int rank, int ranks) {
  if (ranks <= 1) return path;
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const std::string suffix = ".rank" + std::to_string(rank);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) || dot == 0 ||
      dot == slash + 1)
    return path + suffix;
  return path.substr(0, dot) + suffix + path.substr(dot);
}

Status CheckOutputs(const TrainOptions& o, int rank, int ranks) {
  std::vector<std::pair<std::string, std::string>> inputs = {{"the plan", o.plan_path},
                                                             {"--resume", o.resume},
                                                             {"--init", o.init},
                                                             {"--step-profile",
                                                              o.predict.step_profile}};
  for (const std::string& path : DataFiles(o.data)) inputs.emplace_back("--data", path);
  for (const std::string& path : DataFiles(o.eval_data)) inputs.emplace_back("--eval-data", path);
  std::stringstream keys(o.trusted_keys);
  for (std::string path; std::getline(keys, path, ',');)
    inputs.emplace_back("--trusted-keys", path);
  // Every file the job writes, and which rank writes it: rank 0 --save and
  // --report, every rank its own --trace file.
  struct Output {
    std::string flag, path;
    int writer;
  };
  std::vector<Output> outputs;
  if (!o.save.empty()) outputs.push_back({"--save", o.save, 0});
  if (!o.report.empty()) outputs.push_back({"--report", o.report, 0});
  if (!o.trace.empty())
    for (int r = 0; r < ranks; ++r)
      outputs.push_back({ranks > 1 ? "--trace (rank " + std::to_string(r) + "'s file)" : "--trace",
                         TracePathOf(o.trace, r, ranks), r});
  // Only a regular file may be replaced (this rank's outputs), never a file
  // the run reads (any rank's outputs, so that every rank refuses; --save may
  // be --resume's file: it is replaced only once the run has read it).
  std::vector<std::pair<std::string, std::string>> input_identities;
  for (const auto& [what, input] : inputs)
    if (!input.empty()) input_identities.emplace_back(what, FileIdentity(input));
  for (const Output& out : outputs) {
    if (out.writer == rank) {
      Status replaceable = CheckReplaceable(out.path);
      if (!replaceable.ok())
        return Status(replaceable.code(), out.flag + ": " + replaceable.message());
    }
    const std::string identity = FileIdentity(out.path);
    for (const auto& [what, input_identity] : input_identities)
      if (!(out.flag == "--save" && what == "--resume") && input_identity == identity)
        return Status(ErrorCode::kInvalidArgument,
                      out.flag + " " + Printable(out.path) + " is " +
                          (what == "the plan" ? "the plan" : "the file " + what + " reads") +
                          "; refusing to overwrite it");
  }
  // No two of the job's outputs are one file (every rank checks all of them,
  // so all refuse together; one identity each, so a job of many ranks costs
  // one lookup per file).
  std::map<std::string, size_t> seen;
  for (size_t b = 0; b < outputs.size(); ++b) {
    auto [it, fresh] = seen.emplace(FileIdentity(outputs[b].path), b);
    if (!fresh)
      return Status(ErrorCode::kInvalidArgument, outputs[it->second].flag + " and " +
                                                     outputs[b].flag + " name the same file, " +
                                                     Printable(outputs[it->second].path));
  }
  if (!o.save.empty() && rank == 0) {
    // Fail now, not after the first K steps.
    const std::string dir = DirectoryOf(o.save);
    if (access(dir.c_str(), W_OK) != 0)
      return Status(ErrorCode::kIo,
                    "--save " + Printable(o.save) + ": cannot write to " + Printable(dir));
  }
  return Status::Ok();
}

nlohmann::json TraceJson(const Executor& exec, const Plan& plan, int rank, int ranks,
                         const std::vector<std::pair<double, double>>& steps,
                         int64_t first_step) {
  nlohmann::json events = nlohmann::json::array();
  const std::string process = ranks > 1 ? "rank " + std::to_string(rank) : "graphrun";
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank},
                    {"args", {{"name", process}}}});
  const char* tracks[] = {"compute (kernels, library calls, waits)",
                          "collectives (allreduce in flight)", "steps"};
  for (int t = 0; t < 3; ++t)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", t},
                      {"args", {{"name", tracks[t]}}}});
  const fb::Program* train = nullptr;
  for (const fb::Program* p : *plan.root().programs())
    if (StringOf(p->name()) == "train_step") train = p;
  for (const Executor::TraceSpan& span : exec.trace()) {
    nlohmann::json args = {{"command", span.command}};
    if (train && span.command >= 0 &&
        static_cast<uint32_t>(span.command) < train->commands()->size()) {
      const fb::Command* c = train->commands()->Get(span.command);
      if (c->location() && c->location()->size()) args["location"] = PrintableOf(c->location());
    }
    events.push_back({{"ph", "X"}, {"name", span.name}, {"cat", span.category},
                      {"pid", rank}, {"tid", span.track}, {"ts", span.start_us},
                      {"dur", span.duration_us}, {"args", args}});
  }
  for (size_t s = 0; s < steps.size(); ++s)
    events.push_back({{"ph", "X"}, {"name", "step " + std::to_string(first_step + s + 1)},
                      {"cat", "step"}, {"pid", rank}, {"tid", 2}, {"ts", steps[s].first},
                      {"dur", steps[s].second - steps[s].first}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace graphc::runtime
