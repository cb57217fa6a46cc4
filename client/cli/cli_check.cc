// `autotune check FAMILY.textproto`: what RegisterKernel would refuse, found
// on the author's machine with no daemon and no GPU, every problem in one
// run. The descriptor's checks (kernels/family_loader.h), then, unless
// those found a problem in what a compile reads, NVRTC compiles the
// reference and the default config in each dtype and the compiled kernels'
// parameters are compared with what the service passes them
// (kernels/family_check.h); the problems of both, each with its line.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "client/cli/cli_commands.h"
#include "client/cli/cli_format.h"
#include "kernels/family_check.h"
#include "kernels/family_loader.h"
#include "kernels/gpu/compiler.h"
#include "proto/problem.h"
#include "service/defaults.h"

namespace autotune::client {

// While it lives, the process works in a new empty folder under $TMPDIR
// (removed after): NVRTC looks for a quoted #include in the working
// directory too, and the daemon's compile workers have none to look in, so
// `check` compiles from an empty one to pass or fail as `register` does
// wherever it is run. INTERNAL when the folder cannot be made or entered.
class EmptyWorkingDirectory {
 public:
  static absl::StatusOr<std::unique_ptr<EmptyWorkingDirectory>> Enter() {
    std::unique_ptr<char, decltype(&free)> previous(getcwd(nullptr, 0), &free);
    if (previous == nullptr) return absl::InternalError("check: cannot read the working directory");
    const char* tmp = getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/autotune-check-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr || chdir(pattern.c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("check: cannot make an empty folder to compile in: ", strerror(errno)));
    }
    return std::unique_ptr<EmptyWorkingDirectory>(
        new EmptyWorkingDirectory(previous.get(), pattern));
  }
  ~EmptyWorkingDirectory() {
    (void)chdir(previous_.c_str());
    rmdir(empty_.c_str());
  }
  EmptyWorkingDirectory(const EmptyWorkingDirectory&) = delete;
  EmptyWorkingDirectory& operator=(const EmptyWorkingDirectory&) = delete;

 private:
  EmptyWorkingDirectory(std::string previous, std::string empty)
      : previous_(std::move(previous)), empty_(std::move(empty)) {}
  std::string previous_;
  std::string empty_;
};

// INVALID_ARGUMENT listing `problems`, one per line, after how many there are
// (the compiles were for `arch`), then `left_out` (what was not compiled, if
// anything), which is not a problem of its own.
absl::Status CheckFailed(std::vector<std::string> problems, const std::string& left_out,
                         const std::string& arch) {
  const size_t count = problems.size();
  if (!left_out.empty()) problems.push_back(left_out);
  return absl::InvalidArgumentError(absl::StrCat(count, count == 1 ? " problem" : " problems",
                                                 " (compiles for ", arch, "):\n",
                                                 absl::StrJoin(problems, "\n")));
}

Command CheckCommand(CLI::App& root, Streams io) {
  struct State {
    std::string file;
    std::string arch = service::kDefaultArch;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "check",
      "Check a kernel family without a daemon: its descriptor, then NVRTC compiles its "
      "reference and default config in each dtype and compares the kernels' parameters with "
      "the buffers, tensor maps and scalars the service passes");
  command.app->add_option("file", s->file, "Descriptor file; source_file is read beside it")
      ->required();
  command.app
      ->add_option("--arch", s->arch,
                   "Architecture to compile for, e.g. sm_80, sm_90a (jobs on a daemon without a "
                   "GPU compile for the default)")
      ->capture_default_str();
  command.run_offline = [s, io]() -> absl::Status {
    ASSIGN_OR_RETURN(const kernels::FamilyFile file, kernels::ReadFamilyFile(s->file));
    const v1::KernelFamily& family = file.family;
    for (const std::string& warning : kernels::FamilyWarnings(family)) {
      io.err << "autotune: check: warning: " << warning << "\n";
    }
    // Every problem at once: the descriptor's, then the compiles' when the
    // descriptor's leave them possible.
    std::vector<std::string> problems;
    if (!file.problems.ok()) {
      problems = absl::StrSplit(file.problems.message(), '\n');
    } else {
      io.out << s->file << ": the descriptor of " << family.name() << " is valid\n";
    }
    // What the problems leave to compile: both kernels, the reference
    // alone, or neither.
    if (!file.reference_compilable) {
      return CheckFailed(
          problems,
          absl::StrCat(s->file,
                       ": not compiled: fix the problems above in what a compile reads (source, "
                       "headers, dtypes, reference, compile_options) first"),
          s->arch);
    }
    std::string left_out;
    if (!file.tuned_compilable) {
      left_out = absl::StrCat(
          s->file,
          ": not compiled: the tuned kernel, until the problems above in kernel_name, params, "
          "default_config or binding are fixed (the reference was)");
    }
    ASSIGN_OR_RETURN(const kernels::Nvrtc* nvrtc, kernels::Nvrtc::Load());
    absl::StatusOr<std::vector<kernels::CheckCompile>> compiles =
        kernels::CheckCompiles(family, s->arch, file.tuned_compilable);
    if (!compiles.ok()) {
      problems.push_back(std::string(compiles.status().message()));
      return CheckFailed(problems, left_out, s->arch);
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<kernels::CheckFinding> findings;
    ASSIGN_OR_RETURN(const std::unique_ptr<EmptyWorkingDirectory> empty,
                     EmptyWorkingDirectory::Enter());
    for (const kernels::CheckCompile& compile : *compiles) {
      const kernels::CompileResult result = kernels::Compile(*nvrtc, compile.request);
      kernels::CompileOutput output{.compiled = result.status == kernels::CompileStatus::kOk,
                                    .log = result.log,
                                    .cubin = result.cubin,
                                    .lowered_name = result.lowered_name};
      kernels::AddFindings(family, compile, output, findings);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto line_of = [&file](absl::string_view field) { return file.Line(field); };
    for (const kernels::CheckFinding& finding : findings) {
      problems.push_back(kernels::FindingText(finding, s->file, line_of));
    }
    if (!problems.empty()) return CheckFailed(problems, left_out, s->arch);
    std::vector<std::string> dtypes;
    for (int d = 0; d < family.dtypes_size(); ++d) dtypes.push_back(DTypeName(family.dtypes(d)));
    io.out << absl::StrFormat(
        "compiled for %s with NVRTC %s in %.1f s: the reference and the %s, in %s; each takes "
        "%d buffers, %d tensor maps (the tuned kernel) and %d scalars, as passed\n",
        s->arch, nvrtc->version(), seconds, compiles->size() > 1 ? (*compiles)[1].part : "",
        absl::StrJoin(dtypes, ", "), family.buffers_size(), family.tensor_maps_size(),
        family.scalars_size());
    return absl::OkStatus();
  };
  return command;
}

}  // namespace autotune::client
