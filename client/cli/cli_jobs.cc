#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "client/bundle.h"
#include "client/cli/cli_commands.h"
#include "client/cli/cli_flags.h"
#include "client/cli/cli_format.h"
#include "client/cli/local_daemon.h"
#include "client/cli/report_html.h"
#include "client/cli/warmup_report.h"
#include "client/client.h"
#include "proto/problem.h"
#include "service/defaults.h"

namespace autotune::client {
namespace {

// Prints a job's progress as it streams: state changes, the server's
// messages (each on its own line: one may say that the job waits for a quiet
// GPU), failed variants (up to a limit, so a family that fails to compile
// everywhere does not flood a CI log) and where the current phase stands.
class WarmupProgressPrinter {
 public:
  // `tty`: redraw one progress bar line in place; otherwise (logs) print a
  // progress line at each phase change and at every tenth of a phase.
  WarmupProgressPrinter(std::ostream& out, bool tty) : out_(out), tty_(tty) {}

  void Print(const v1::JobProgress& progress) {
    const v1::Job& job = progress.job();
    ClearBar();
    if (!job.id().empty() && job.id() != job_id_) {
      job_id_ = job.id();
      out_ << "job " << job_id_ << " submitted\n";
    }
    if (job.state() != state_) {
      state_ = job.state();
      out_ << "job " << job_id_ << ": " << v1::JobState_Name(state_) << "  "
           << FormatJobCounts(job.counts()) << "\n";
    }
    // A server may repeat its message with each update; it is said once.
    if (!progress.message().empty() && progress.message() != last_message_) {
      last_message_ = progress.message();
      out_ << "job " << job_id_ << ": " << WithWarmupFlags(last_message_) << "\n";
    }
    if (progress.has_last()) PrintFailure(progress.last());
    if (progress.has_timing()) {
      PrintPhase(progress.timing());
    } else {
      PrintCompileBar(job.counts());  // a server that sends no timing
    }
    out_.flush();
  }

  // Ends the bar's line before the final report.
  void Finish() {
    ClearBar();
    out_.flush();
  }

 private:
  static constexpr int kMaxFailureLines = 50;
  static constexpr int kBarWidth = 24;

  void PrintFailure(const v1::Measurement& m) {
    if (m.status() == v1::OK || m.status() == v1::VARIANT_STATUS_UNSPECIFIED) return;
    std::string serialized = m.SerializeAsString();
    if (serialized == last_failure_) return;
    last_failure_ = std::move(serialized);
    if (++failures_ > kMaxFailureLines) {
      if (failures_ == kMaxFailureLines + 1) {
        out_ << "  further failed variants are not listed; the final counts include them\n";
      }
      return;
    }
    out_ << "  " << v1::VariantStatus_Name(m.status()) << "  " << m.family() << "  "
         << FormatDims(m.problem().dims()) << "  " << DTypeName(m.problem().dtype()) << "  "
         << FormatConfig(m.config());
    if (!m.detail().empty()) out_ << ": " << FirstLine(m.detail(), 100);
    out_ << "\n";
  }

  // "screen 1,204/2,940 variants · 41 s · ETA 38 s"; "ETA > 38 s" when a
  // phase still to come has no known rate.
  static std::string PhaseText(const v1::JobTiming& timing) {
    std::string text = timing.phase();
    if (timing.total() > 0) {
      absl::string_view unit = "done";
      if (timing.phase() == "compile") unit = "compiles";
      if (timing.phase() == "screen") unit = "variants";
      if (timing.phase() == "serial") unit = "problems";
      absl::StrAppend(&text, " ", FormatCount(timing.done()), "/", FormatCount(timing.total()), " ",
                      unit);
    }
    absl::StrAppend(&text, " \u00b7 ", FormatSeconds(timing.elapsed_s()));
    if (timing.eta_s() > 0) {
      absl::StrAppend(&text, " \u00b7 ETA ", timing.eta_partial() ? "> " : "",
                      FormatSeconds(timing.eta_s()));
    }
    return text;
  }

  void PrintPhase(const v1::JobTiming& timing) {
    // The job's end is the final report's to say.
    if (timing.phase().empty() || timing.phase() == "done") return;
    const int64_t total = timing.total();
    const int64_t done = std::clamp<int64_t>(timing.done(), 0, std::max<int64_t>(total, 0));
    if (tty_) {
      out_ << "\r";
      if (total > 0) {
        const int filled = static_cast<int>(kBarWidth * done / total);
        out_ << "[" << std::string(filled, '#') << std::string(kBarWidth - filled, '.') << "] ";
      }
      out_ << PhaseText(timing);
      bar_shown_ = true;
      return;
    }
    const int64_t tenth = total > 0 ? done * 10 / total : 0;
    if (timing.phase() != phase_ || tenth > phase_tenth_) {
      phase_ = timing.phase();
      phase_tenth_ = tenth;
      out_ << "  " << PhaseText(timing) << "\n";
    }
  }

  void PrintCompileBar(const v1::JobCounts& counts) {
    const int64_t total = counts.compiles();
    if (total <= 0) return;
    const int64_t done = counts.compiled() + counts.compile_cache_hits() + counts.compile_errors();
    if (tty_) {
      const int filled = static_cast<int>(kBarWidth * std::min(done, total) / total);
      out_ << "\r[" << std::string(filled, '#') << std::string(kBarWidth - filled, '.') << "] "
           << done << "/" << total << " compiles";
      if (counts.compile_errors() > 0) out_ << ", " << counts.compile_errors() << " errors";
      bar_shown_ = true;
      return;
    }
    const int64_t tenth = done * 10 / total;
    if (tenth > compile_tenth_) {
      compile_tenth_ = tenth;
      out_ << "  " << done << "/" << total << " compiles (" << counts.compiled() << " compiled, "
           << counts.compile_cache_hits() << " cached, " << counts.compile_errors() << " errors)\n";
    }
  }

  void ClearBar() {
    if (!bar_shown_) return;
    out_ << "\r\033[K";  // back to the line's start, erase to its end
    bar_shown_ = false;
  }

  std::ostream& out_;
  const bool tty_;
  bool bar_shown_ = false;
  int64_t compile_tenth_ = 0;
  std::string phase_;
  int64_t phase_tenth_ = 0;
  std::string job_id_;
  v1::JobState state_ = v1::JOB_STATE_UNSPECIFIED;
  std::string last_message_;
  std::string last_failure_;
  int failures_ = 0;
};

// The report files `warmup` and `report` write besides the text on stdout.
struct ReportFiles {
  std::string markdown;
  std::string csv;
  std::string html;
  std::vector<CLI::Option*> options;
};

void AddReportFileOptions(CLI::App* app, ReportFiles& files) {
  files.options = {
      app->add_option("--report-md", files.markdown,
                      "Also write the report as a Markdown file (e.g. a CI job summary)"),
      app->add_option("--report-csv", files.csv,
                      "Also write the report as a CSV file, one row per problem"),
      app->add_option("--report-html", files.html,
                      "Also write the report as one self-contained HTML page with the plots of "
                      "every problem's variants and the regressions")};
}

absl::Status CheckReportFileOptions(const ReportFiles& files) {
  for (const CLI::Option* option : files.options) {
    if (option->count() > 0 && option->as<std::string>().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(option->get_name(), " needs a file name"));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteReportFiles(Client& client, const v1::Job& job, const ReportFiles& files) {
  if (!files.markdown.empty()) {
    RETURN_IF_ERROR(
        WriteFileAtomically(files.markdown, RenderReportMarkdown(job), "Markdown report"));
  }
  if (!files.csv.empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(files.csv, RenderReportCsv(job), "CSV report"));
  }
  if (!files.html.empty()) {
    ASSIGN_OR_RETURN(v1::ReportPageData data, CollectReportData(client, job, absl::Now()));
    ASSIGN_OR_RETURN(std::string html, RenderReportHtml(data));
    RETURN_IF_ERROR(WriteFileAtomically(files.html, html, "HTML report"));
  }
  return absl::OkStatus();
}

}  // namespace

Command WarmupCommand(CLI::App& root, Streams io) {
  struct State {
    std::string manifest;
    std::string shard;
    bool compile_only = false;
    bool retune = false;
    double variant_timeout_s = 0;
    double compile_timeout_s = 0;
    bool force = false;
    double quiet_wait_s = 0;
    int32_t candidates = 0;
    double serial_max_s = 0;
    double serial_noise = 0;
    double candidate_band = 0;
    std::string search;
    std::string budget;
    uint64_t seed = 0;
    ReportFiles files;
    bool json = false;
    // --local: a private daemon (local_daemon.h).
    bool local = false;
    LocalDaemonOptions daemon;
    std::string bundle;
    v1::SubmitJobRequest request;
    // The flags that say how to measure: --compile-only refuses them.
    std::vector<CLI::Option*> measuring;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "warmup",
      "Tune every problem of a manifest (v1.Manifest, text format) and wait; `tune` is the "
      "same command");
  command.app->alias("tune");
  command.app->add_option("manifest", s->manifest, "Manifest file")->required();
  std::vector<CLI::Option*> local_only;
  command.app->add_flag("--local", s->local,
                        "Tune on a private daemon of this run, in a temporary folder, instead of "
                        "--server: it registers the built-in families and those of --kernels, "
                        "and is stopped when the warmup ends (for CI)");
  local_only.push_back(command.app->add_option(
      "--kernels", s->daemon.kernels_dirs,
      "With --local: a folder of kernel families (*.textproto) to register besides the "
      "built-in ones (repeatable)"));
  local_only.push_back(command.app->add_option(
      "--gpus", s->daemon.gpus, "With --local: the GPUs to tune on (autotuned --gpus)"));
  local_only.push_back(
      command.app
          ->add_option("--compile-workers", s->daemon.compile_workers,
                       "With --local: compile processes at most (autotuned --compile-workers; "
                       "default one per core)")
          ->check(CLI::PositiveNumber));
  local_only.push_back(command.app->add_option(
      "--bundle", s->bundle,
      "With --local: export what was tuned to this bundle file (autotune import reads it)"));
  local_only.push_back(command.app->add_flag(
      "--keep", s->daemon.keep,
      "With --local: keep the daemon's folder (its log and database) and print where"));
  command.app->add_option("--shard", s->shard, "Tune only shard I of N (0-based), e.g. 0/4");
  command.app->add_flag("--compile-only", s->compile_only, "Compile the variants; measure nothing");
  command.app->add_flag("--retune", s->retune, "Tune again problems that have cached entries");
  s->measuring.push_back(command.app
                             ->add_option("--variant-timeout", s->variant_timeout_s,
                                          absl::StrCat("Seconds one variant may run (0 = server "
                                                       "default, at most ",
                                                       service::kMaxVariantTimeoutS, ")"))
                             ->check(CLI::Range(0.0, service::kMaxVariantTimeoutS)));
  command.app
      ->add_option(
          "--compile-timeout", s->compile_timeout_s,
          absl::StrCat("Seconds one compile may take (0 = ", service::kDefaultCompileTimeoutS,
                       ", at most ", service::kMaxCompileTimeoutS, ")"))
      ->check(CLI::Range(0.0, service::kMaxCompileTimeoutS));
  s->measuring.push_back(command.app->add_flag(
      "--force", s->force,
      "Measure on a GPU other processes use; the entries are marked CONTENDED"));
  s->measuring.push_back(
      command.app
          ->add_option(
              "--quiet-wait", s->quiet_wait_s,
              "Seconds to wait for a quiet GPU before a problem fails (0 = server default)")
          ->check(CLI::Range(0.0, service::kMaxQuietWaitS)));
  s->measuring.push_back(
      command.app
          ->add_option("--candidates", s->candidates,
                       absl::StrCat("At most N candidates per problem in the serial validation "
                                    "(1..",
                                    service::kMaxSerialCandidates, "; default ",
                                    service::kDefaultSerialCandidates, ")"))
          ->check(CLI::Range(1, service::kMaxSerialCandidates)));
  s->measuring.push_back(
      command.app
          ->add_option("--candidate-band", s->candidate_band,
                       absl::StrCat("Candidates are the variants within (1 + B) of the best "
                                    "screened median, widened by the screen's noise (0 = ",
                                    service::kDefaultCandidateBand, ")"))
          ->check(CLI::Range(0.0, service::kMaxCandidateBand)));
  s->measuring.push_back(
      command.app
          ->add_option(
              "--serial-noise", s->serial_noise,
              "Serial rounds go on until each candidate's median has at most this relative "
              "noise (0 = the daemon's default), or --serial-max")
          ->check(CLI::Range(0.0, service::kMaxSerialNoise)));
  s->measuring.push_back(
      command.app
          ->add_option(
              "--serial-max", s->serial_max_s,
              "GPU seconds of serial rounds per problem at most (0 = the daemon's default)")
          ->check(CLI::Range(0.0, service::kMaxSerialMaxS)));
  command.app->add_option(
      "--search", s->search,
      absl::StrCat("How each problem's variants are searched: exhaustive, random or model "
                   "(default: exhaustive up to ",
                   service::kExhaustiveSearchUpTo,
                   " variants, model above); a manifest item's `search` overrides it"));
  command.app->add_option("--budget", s->budget,
                          "What a problem's search may spend: a count of variants (500), a "
                          "share of the space (5%) or a time for the search's rounds (90s, 5m); "
                          "default: all for exhaustive and random, until it stops improving "
                          "for model");
  command.app
      ->add_option("--seed", s->seed, "The search's seed (deterministic for a seed; 0..2^64-1)")
      ->check(CLI::NonNegativeNumber);
  AddReportFileOptions(command.app, s->files);
  command.app->add_flag("--json", s->json,
                        "Print the finished job as protobuf JSON; progress goes to stderr");
  command.prepare = [s, local_only]() -> absl::Status {
    RETURN_IF_ERROR(CheckReportFileOptions(s->files));
    if (!s->local) {
      for (const CLI::Option* option : local_only) {
        if (option->count() > 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(option->get_name(), " goes with --local (a private daemon)"));
        }
      }
    }
    v1::JobOptions& options = *s->request.mutable_spec()->mutable_options();
    v1::SearchOptions search;
    RETURN_IF_ERROR(ParseSearchFlags(s->search, s->budget, s->seed, search));
    if (search.ByteSizeLong() > 0) {
      if (s->compile_only) {
        return absl::InvalidArgumentError(
            "--search, --budget and --seed choose what to measure; --compile-only measures "
            "nothing");
      }
      *options.mutable_search() = search;
    }
    if (s->compile_only) {
      std::vector<std::string> given;
      for (const CLI::Option* option : s->measuring) {
        if (option->count() > 0) given.push_back(option->get_name());
      }
      if (!given.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(absl::StrJoin(given, ", "), (given.size() == 1 ? " says" : " say"),
                         " how to measure; --compile-only measures nothing"));
      }
    }
    if (!s->shard.empty()) RETURN_IF_ERROR(ParseShardFlag(s->shard, options));
    options.set_compile_only(s->compile_only);
    options.set_retune(s->retune);
    options.set_variant_timeout_s(s->variant_timeout_s);
    options.set_compile_timeout_s(s->compile_timeout_s);
    options.set_force(s->force);
    options.set_quiet_wait_s(s->quiet_wait_s);
    options.set_serial_candidates(s->candidates);
    options.set_serial_max_s(s->serial_max_s);
    options.set_serial_noise(s->serial_noise);
    options.set_candidate_band(s->candidate_band);
    return absl::OkStatus();
  };
  const auto run = [s, io](Client& client) -> absl::Status {
    ASSIGN_OR_RETURN(std::string text, ReadFile(s->manifest, "manifest"));
    ASSIGN_OR_RETURN(*s->request.mutable_spec()->mutable_manifest(),
                     ParseManifestText(text, s->manifest));
    std::ostream& progress_out = s->json ? io.err : io.out;
    const bool tty = (&progress_out == &std::cout && isatty(STDOUT_FILENO)) ||
                     (&progress_out == &std::cerr && isatty(STDERR_FILENO));
    WarmupProgressPrinter printer(progress_out, tty);
    ASSIGN_OR_RETURN(v1::Job job,
                     client.SubmitJob(s->request, [&printer](const v1::JobProgress& progress) {
                       printer.Print(progress);
                     }));
    printer.Finish();
    progress_out << "job " << job.id() << " " << v1::JobState_Name(job.state()) << ": "
                 << FormatJobCounts(job.counts()) << "\n";
    RETURN_IF_ERROR(
        PrintAnswer(job, s->json, io.out, [](const v1::Job& finished, std::ostream& out) {
          if (!finished.reports().empty()) {
            out << RenderReportText(finished);
          } else if (!finished.results().empty()) {
            PrintEntryTable(finished.results(), out);  // a server that sends no reports
          }
        }));
    RETURN_IF_ERROR(WriteReportFiles(client, job, s->files));
    switch (job.state()) {
      case v1::SUCCEEDED:
        return absl::OkStatus();
      // The daemon fails a job in which a variant did not compile or a
      // problem was left without a valid config, and says why in its error.
      case v1::FAILED:
        return absl::AbortedError(absl::StrCat("job ", job.id(), " failed",
                                               job.error().empty() ? "" : ": ", job.error()));
      case v1::CANCELLED:
        return absl::CancelledError(absl::StrCat("job ", job.id(), " was cancelled"));
      default:
        return absl::UnknownError(absl::StrCat("the progress stream ended while job ", job.id(),
                                               " was still ", v1::JobState_Name(job.state()),
                                               "; `autotune jobs` shows how it goes on"));
    }
  };
  command.run = run;
  command.is_offline = [s] { return s->local; };
  command.run_offline = [s, io, run]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<LocalDaemon> daemon, LocalDaemon::Start(s->daemon));
    std::ostream& progress_out = s->json ? io.err : io.out;
    progress_out << "local daemon in " << daemon->folder() << "\n";
    ClientOptions options;
    options.address = daemon->address();
    ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
    const absl::Status tuned = run(*client);
    // A bundle of a job that failed would hold nothing it was asked for.
    if (!s->bundle.empty() && !tuned.ok()) {
      progress_out << "bundle " << s->bundle << ": not written, the warmup failed\n";
    } else if (!s->bundle.empty()) {
      absl::StatusOr<v1::CacheBundle> bundle = client->Export(v1::ExportRequest());
      absl::Status written = bundle.ok() ? WriteBundleFile(s->bundle, *bundle) : bundle.status();
      if (!written.ok()) return written;
      progress_out << "bundle " << s->bundle << ": " << bundle->entries_size() << " entries\n";
    }
    if (s->daemon.keep) progress_out << "kept " << daemon->folder() << "\n";
    return tuned;
  };
  return command;
}

Command JobsCommand(CLI::App& root, Streams io) {
  struct State {
    int32_t limit = 0;
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand("jobs", "List recent tuning jobs");
  command.app
      ->add_option("--limit", s->limit,
                   absl::StrCat("At most this many jobs (server default ",
                                service::kDefaultListJobsLimit, ")"))
      ->check(CLI::NonNegativeNumber);
  AddJsonFlag(command.app, s->json);
  command.run = [s, io](Client& client) -> absl::Status {
    v1::ListJobsRequest request;
    request.set_limit(s->limit);
    return PrintAnswer(client.ListJobs(request), s->json, io.out,
                       [](const v1::ListJobsResponse& response, std::ostream& out) {
                         if (response.jobs().empty()) {
                           out << "no jobs\n";
                           return;
                         }
                         PrintJobTable(response, out);
                       });
  };
  return command;
}

// The report of a job that has ended: the same text and files as `warmup`.
Command ReportCommand(CLI::App& root, Streams io) {
  struct State {
    std::string job_id;
    ReportFiles files;
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "report", "Print the report of a finished warmup job and write its report files");
  command.app->add_option("job", s->job_id, "Job id (see `autotune jobs`)")->required();
  AddReportFileOptions(command.app, s->files);
  AddJsonFlag(command.app, s->json);
  command.prepare = [s] { return CheckReportFileOptions(s->files); };
  command.run = [s, io](Client& client) -> absl::Status {
    v1::GetJobRequest request;
    request.set_id(s->job_id);
    ASSIGN_OR_RETURN(v1::Job job, client.GetJob(request));
    if (job.state() != v1::SUCCEEDED && job.state() != v1::FAILED && job.state() != v1::CANCELLED) {
      return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " is still ",
                                                        v1::JobState_Name(job.state()),
                                                        "; its report is whole once it ends"));
    }
    RETURN_IF_ERROR(
        PrintAnswer(job, s->json, io.out, [](const v1::Job& finished, std::ostream& out) {
          out << "job " << finished.id() << " " << v1::JobState_Name(finished.state()) << ": "
              << FormatJobCounts(finished.counts()) << "\n";
          if (!finished.error().empty()) {
            out << "error: " << WithWarmupFlags(finished.error()) << "\n";
          }
          out << RenderReportText(finished);
        }));
    return WriteReportFiles(client, job, s->files);
  };
  return command;
}

}  // namespace autotune::client
