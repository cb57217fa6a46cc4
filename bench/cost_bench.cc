// autotune-bench-cost: what a hostile call costs a real daemon. Starts
// autotuned (the built-in families, no GPU; $AUTOTUNED picks the binary)
// and reads its CPU time and memory from /proc around each call:
// - SubmitJob of a compile-only manifest of --problems items, one problem
//   each (rmsnorm rows = 1, 2, ...), which the daemon refuses;
// - BatchLookup of --misses lookups of rmsnorm problems nothing was tuned
//   for, on a named device.
// Prints one line per call: wall, the daemon's CPU seconds, its peak
// resident memory above where it was before the call (VmHWM is reset
// through /proc/PID/clear_refs), what it keeps after, and the answer.
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/temp_dir.h"
#include "grpcpp/grpcpp.h"
#include "proto/autotune.grpc.pb.h"
#include "tests/support/process.h"

namespace autotune::bench {
namespace {

struct Usage {
  double cpu_s = 0;
  int64_t rss_kb = 0;
  int64_t hwm_kb = 0;
};

Usage UsageOf(pid_t pid) {
  Usage usage;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command name's closing parenthesis; utime and stime are
  // the 14th and 15th of the line.
  const std::vector<std::string> fields =
      absl::StrSplit(text.substr(text.rfind(')') + 2), ' ', absl::SkipEmpty());
  int64_t utime = 0;
  int64_t stime = 0;
  if (fields.size() > 12 && absl::SimpleAtoi(fields[11], &utime) &&
      absl::SimpleAtoi(fields[12], &stime)) {
    usage.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    const std::vector<std::string> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() < 2) continue;
    if (words[0] == "VmRSS:") (void)absl::SimpleAtoi(words[1], &usage.rss_kb);
    if (words[0] == "VmHWM:") (void)absl::SimpleAtoi(words[1], &usage.hwm_kb);
  }
  return usage;
}

// Resets VmHWM to the current resident size.
void ResetPeak(pid_t pid) {
  std::ofstream clear(absl::StrCat("/proc/", pid, "/clear_refs"));
  clear << "5";
}

void Report(const std::string& call, pid_t pid, const Usage& before, absl::Duration wall,
            const std::string& answer) {
  // The daemon lets a call's memory go after answering; give it a moment.
  absl::SleepFor(absl::Milliseconds(500));
  const Usage after = UsageOf(pid);
  std::cout << absl::StrFormat(
                   "%-12s wall %7.2f s  daemon CPU %7.2f s  peak +%6.0f MB  kept +%6.0f MB  %s",
                   call, absl::ToDoubleSeconds(wall), after.cpu_s - before.cpu_s,
                   static_cast<double>(after.hwm_kb - before.rss_kb) / 1024,
                   static_cast<double>(after.rss_kb - before.rss_kb) / 1024, answer.substr(0, 160))
            << std::endl;
}

int Run(int64_t problems, int misses, const std::string& kernels, bool unnamed_last) {
  testing::TempDir dir;
  std::vector<std::string> flags = {"--gpus", "none"};
  if (!kernels.empty()) flags.insert(flags.end(), {"--kernels", kernels});
  testing::Daemon daemon(dir.path(), flags);
  if (absl::Status started = daemon.Start(); !started.ok()) {
    std::cerr << started << "\n";
    return 1;
  }
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(256 << 20);
  args.SetMaxReceiveMessageSize(256 << 20);
  auto stub = v1::Autotune::NewStub(
      grpc::CreateCustomChannel(daemon.address(), grpc::InsecureChannelCredentials(), args));
  const pid_t pid = daemon.pid();
  int failures = 0;

  if (problems > 0) {
    v1::SubmitJobRequest request;
    request.mutable_spec()->mutable_options()->set_compile_only(true);
    for (int64_t rows = 1; rows <= problems; ++rows) {
      v1::ManifestItem* item = request.mutable_spec()->mutable_manifest()->add_items();
      item->set_family("rmsnorm");
      v1::ManifestItem::DimValues* dim = item->add_dims();
      dim->set_name("rows");
      dim->add_values(rows);
      dim = item->add_dims();
      dim->set_name("hidden");
      dim->add_values(4096);
      item->add_dtypes(v1::FLOAT16);
    }
    // The same request refused by its first check (CheckJobSpec): what
    // receiving and parsing it costs, before the manifest is read.
    if (unnamed_last) {
      request.mutable_spec()->mutable_manifest()->mutable_items()->rbegin()->clear_family();
    }
    ResetPeak(pid);
    const Usage before = UsageOf(pid);
    grpc::ClientContext context;
    const absl::Time start = absl::Now();
    std::unique_ptr<grpc::ClientReader<v1::JobProgress>> reader =
        stub->SubmitJob(&context, request);
    v1::JobProgress progress;
    while (reader->Read(&progress)) {
    }
    const grpc::Status status = reader->Finish();
    failures += status.ok() ? 1 : 0;  // it must be refused
    Report("SubmitJob", pid, before, absl::Now() - start,
           absl::StrCat(status.error_code(), " ", status.error_message()));
  }

  if (misses > 0) {
    v1::BatchLookupRequest request;
    for (int i = 0; i < misses; ++i) {
      v1::LookupRequest* lookup = request.add_lookups();
      lookup->set_family("rmsnorm");
      (*lookup->mutable_problem()->mutable_dims())["rows"] = i + 1;
      (*lookup->mutable_problem()->mutable_dims())["hidden"] = 4096;
      lookup->mutable_problem()->set_dtype(v1::FLOAT16);
      lookup->mutable_device()->set_name("NVIDIA H100 80GB HBM3");
    }
    std::cout << "BatchLookup request: " << request.ByteSizeLong() << " bytes\n";
    ResetPeak(pid);
    const Usage before = UsageOf(pid);
    grpc::ClientContext context;
    v1::BatchLookupResponse response;
    const absl::Time start = absl::Now();
    const grpc::Status status = stub->BatchLookup(&context, request, &response);
    int answered = 0;
    int refused = 0;
    for (const v1::BatchLookupResult& result : response.results()) {
      answered += result.has_response() && result.response().match() == v1::MISS ? 1 : 0;
      refused += result.error_code() != 0 ? 1 : 0;
    }
    failures += status.ok() ? 0 : 1;
    Report("BatchLookup", pid, before, absl::Now() - start,
           absl::StrCat(
               status.error_code(), " ", answered, " misses answered, ", refused, " refused",
               refused > 0
                   ? absl::StrCat(" (last: ", response.results().rbegin()->error_message(), ")")
                   : ""));
  }
  if (daemon.Stop() != 0) ++failures;
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace autotune::bench

int main(int argc, char** argv) {
  CLI::App app("What a hostile SubmitJob or BatchLookup costs a real autotuned");
  int64_t problems = int64_t{1} << 20;
  int misses = 100000;
  app.add_option("--problems", problems, "manifest items of one problem each (0 = skip)");
  app.add_option("--misses", misses, "lookups of one BatchLookup, all misses (0 = skip)");
  std::string kernels;
  bool unnamed_last = false;
  app.add_flag("--unnamed-last", unnamed_last,
               "the manifest's last item names no family: refused before it is read");
  app.add_option("--kernels", kernels, "more families' folder (autotuned --kernels)");
  CLI11_PARSE(app, argc, argv);
  return autotune::bench::Run(problems, misses, kernels, unnamed_last);
}
