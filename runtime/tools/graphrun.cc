// graphrun: loads a plan and (from issue 5 on) trains with it. `graphrun inspect
// PLAN` verifies the plan fully, then prints what it holds. Every error is one
// line on stderr and exit code 1.

#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "runtime/backend.h"
#include "runtime/plan/plan_loader.h"
#include "runtime/plan/plan_printer.h"

namespace {

int Fail(const graphc::runtime::Status& status) {
  std::cerr << "graphrun: " << status.ToString() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace graphc::runtime;
  CLI::App app("graphrun: run graphc training plans");
  app.require_subcommand(1);
  std::string plan_path;
  std::string device = "none";
  bool no_buffers = false, no_commands = false;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "verify a plan and print its metadata, memory, kernels and commands");
  inspect->add_option("plan", plan_path, "the plan file (graphc compile -o)")->required();
  inspect->add_flag("--no-buffers", no_buffers, "leave out the buffer table");
  inspect->add_flag("--no-commands", no_commands, "leave out the command lists");
  inspect->add_option("--load-kernels", device,
                      "also load the kernels on a device: none or cpu")
      ->check(CLI::IsMember({"none", "cpu"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "graphrun: error[invalid-argument]: " << e.what() << "\n";
    return 1;
  }

  StatusOr<std::unique_ptr<Plan>> plan = Plan::FromFile(plan_path);
  if (!plan.ok()) return Fail(plan.status());
  PrintOptions options;
  options.buffers = !no_buffers;
  options.commands = !no_commands;
  PrintPlan(**plan, options, std::cout);
  if (device == "cpu") {
    std::unique_ptr<Backend> backend = CreateCpuBackend();
    Status status = backend->LoadKernels(**plan);
    if (!status.ok()) return Fail(status);
    std::cout << "kernels: loaded " << (*plan)->root().kernels()->size() << " on "
              << backend->name() << "\n";
  }
  return 0;
}
