#include "client/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "base/file.h"
#include "base/paths.h"
#include "base/status_macros.h"
#include "base/token.h"
#include "base/version.h"
#include "client/bundle.h"
#include "client/cli_flags.h"
#include "client/cli_format.h"
#include "client/client.h"
#include "client/report_html.h"
#include "client/server_configs.h"
#include "client/warmup_report.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

struct GlobalFlags {
  std::string server = ClientServerAddress();
  double timeout_s = 10;
  bool tls = false;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string token_file = [] {
    const char* path = std::getenv("AUTOTUNE_TOKEN_FILE");
    return std::string(path == nullptr ? "" : path);
  }();
};

// One subcommand. CLI11 fills its flags; `prepare` checks them and builds the
// request without contacting anyone, so its errors are usage errors; `run`
// talks to the server and prints the answer.
struct Command {
  CLI::App* app = nullptr;
  std::function<absl::Status()> prepare;
  std::function<absl::Status(Client&)> run;
};

// Where command output goes: answers to `out`, progress of long commands to
// `err` when `out` carries JSON.
struct Streams {
  std::ostream& out;
  std::ostream& err;
};

void AddFilterFlags(CLI::App* app, FilterFlags& flags) {
  app->add_option("--family", flags.family, "Kernel family name");
  app->add_option("--hash", flags.hash, "Family content hash");
  app->add_option("--device", flags.device, "Device name, e.g. \"NVIDIA H200\"");
  app->add_option("--dims", flags.problem.dims,
                  "Problem dimensions, e.g. batch=8,heads=32 (with --dtype)");
  app->add_option("--dtype", flags.problem.dtype, "Data type, e.g. bf16 (with --dims)");
  app->add_option("--nvrtc-older-than", flags.nvrtc_older_than,
                  "Entries compiled by an NVRTC older than MAJOR.MINOR");
}

void AddJsonFlag(CLI::App* app, bool& json) {
  app->add_flag("--json", json, "Print the answer as protobuf JSON");
}

Command LookupCommand(CLI::App& root, Streams io) {
  struct State {
    std::string family;
    ProblemFlags problem;
    std::string device;
    std::string hash;
    bool exact = false;
    std::string cubin_out;
    bool tune_on_miss = false;
    bool json = false;
    v1::LookupRequest request;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "lookup", "Ask for the tuned config of one family x problem (EXACT, NEAREST or MISS)");
  command.app->add_option("family", s->family, "Kernel family name")->required();
  command.app->add_option("--dims", s->problem.dims, "Problem dimensions, e.g. batch=8,heads=32")
      ->required();
  command.app->add_option("--dtype", s->problem.dtype, "Data type, e.g. bf16")->required();
  command.app->add_option("--device", s->device, "Device name; default: the only one cached");
  command.app->add_option("--hash", s->hash, "Family content hash; default: the current one");
  command.app->add_flag("--exact", s->exact, "Answer EXACT or MISS, never NEAREST");
  command.app->add_option("--cubin-out", s->cubin_out, "Write the entry's cubin to this file");
  command.app->add_flag(
      "--tune-on-miss", s->tune_on_miss,
      "On a MISS, ask the daemon to tune the problem (deduplicated, rate-limited)");
  AddJsonFlag(command.app, s->json);
  command.prepare = [s]() -> absl::Status {
    ASSIGN_OR_RETURN(*s->request.mutable_problem(), ProblemFromFlags(s->problem));
    s->request.set_family(s->family);
    s->request.mutable_device()->set_name(s->device);
    s->request.set_family_hash(s->hash);
    s->request.set_exact_only(s->exact);
    s->request.set_include_cubin(!s->cubin_out.empty());
    return absl::OkStatus();
  };
  command.run = [s, io](Client& client) -> absl::Status {
    ASSIGN_OR_RETURN(v1::LookupResponse response, client.Lookup(s->request));
    std::string cubin_note;
    if (!s->cubin_out.empty()) {
      if (response.match() == v1::MISS) {
        cubin_note = "none (MISS), nothing written";
      } else if (response.cubin().empty()) {
        return absl::NotFoundError(absl::StrCat("the server sent no cubin for binary ",
                                                response.entry().binary_sha256(), "; ",
                                                s->cubin_out, " not written"));
      } else {
        RETURN_IF_ERROR(WriteFileAtomically(s->cubin_out, response.cubin(), "cubin file"));
        cubin_note = absl::StrCat(response.cubin().size(), " bytes written to ", s->cubin_out);
        response.clear_cubin();
      }
    }
    std::string tuning_note;
    if (s->tune_on_miss && response.match() == v1::MISS) {
      v1::RequestTuningRequest tune;
      *tune.add_lookups() = s->request;
      tune.mutable_lookups(0)->clear_include_cubin();
      ASSIGN_OR_RETURN(v1::RequestTuningResponse tuning, client.RequestTuning(tune));
      if (tuning.results_size() == 1) {
        tuning_note = absl::StrCat(v1::TuningRequestState_Name(tuning.results(0).state()), ": ",
                                   tuning.results(0).message());
      }
    }
    if (s->json) return PrintJson(response, io.out);
    PrintLookupResponse(s->request, response, io.out);
    if (!cubin_note.empty()) io.out << absl::StrFormat("  %-12s %s\n", "cubin", cubin_note);
    if (!tuning_note.empty()) io.out << absl::StrFormat("  %-12s %s\n", "tuning", tuning_note);
    return absl::OkStatus();
  };
  return command;
}

Command ListCommand(CLI::App& root, Streams io) {
  struct State {
    FilterFlags filter;
    int32_t limit = 0;
    int32_t offset = 0;
    bool json = false;
    v1::ListEntriesRequest request;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand("ls", "List cached entries");
  AddFilterFlags(command.app, s->filter);
  command.app->add_option("--limit", s->limit, "At most this many entries (server default 1000)")
      ->check(CLI::NonNegativeNumber);
  command.app->add_option("--offset", s->offset, "Skip this many entries")
      ->check(CLI::NonNegativeNumber);
  AddJsonFlag(command.app, s->json);
  command.prepare = [s]() -> absl::Status {
    ASSIGN_OR_RETURN(*s->request.mutable_filter(), FilterFromFlags(s->filter));
    s->request.set_limit(s->limit);
    s->request.set_offset(s->offset);
    return absl::OkStatus();
  };
  command.run = [s, io](Client& client) -> absl::Status {
    ASSIGN_OR_RETURN(v1::ListEntriesResponse response, client.ListEntries(s->request));
    if (s->json) return PrintJson(response, io.out);
    if (response.entries().empty()) {
      io.out << (FilterIsEmpty(s->request.filter()) && s->offset == 0 ? "the cache is empty\n"
                                                                      : "no entries match\n");
      return absl::OkStatus();
    }
    PrintEntryTable(response.entries(), io.out);
    const int64_t shown_end = s->offset + response.entries_size();
    if (response.total() > shown_end || s->offset > 0) {
      io.out << "entries " << s->offset + 1 << "-" << shown_end << " of " << response.total()
             << "; --limit and --offset show others\n";
    }
    return absl::OkStatus();
  };
  return command;
}

Command ShowCommand(CLI::App& root, Streams io) {
  struct State {
    std::string family;
    ProblemFlags problem;
    std::string device;
    std::string hash;
    bool json = false;
    v1::GetEntryRequest request;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand("show", "Show one entry and every measurement behind it");
  command.app->add_option("family", s->family, "Kernel family name")->required();
  command.app->add_option("--dims", s->problem.dims, "Problem dimensions, e.g. batch=8,heads=32")
      ->required();
  command.app->add_option("--dtype", s->problem.dtype, "Data type, e.g. bf16")->required();
  command.app->add_option("--device", s->device, "Device name; default: the only one cached");
  command.app->add_option("--hash", s->hash, "Family content hash; default: the current one");
  AddJsonFlag(command.app, s->json);
  command.prepare = [s]() -> absl::Status {
    ASSIGN_OR_RETURN(*s->request.mutable_problem(), ProblemFromFlags(s->problem));
    s->request.set_family(s->family);
    s->request.mutable_device()->set_name(s->device);
    s->request.set_family_hash(s->hash);
    return absl::OkStatus();
  };
  command.run = [s, io](Client& client) -> absl::Status {
    ASSIGN_OR_RETURN(v1::GetEntryResponse response, client.GetEntry(s->request));
    if (s->json) return PrintJson(response, io.out);
    PrintEntryDetail(response, io.out);
    return absl::OkStatus();
  };
  return command;
}

Command InvalidateCommand(CLI::App& root, Streams io) {
  struct State {
    FilterFlags filter;
    bool all = false;
    bool dry_run = false;
    bool json = false;
    v1::InvalidateRequest request;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand("invalidate", "Drop cached entries and their measurements");
  AddFilterFlags(command.app, s->filter);
  command.app->add_flag("--all", s->all, "Drop every entry the selectors match (all when none)");
  command.app->add_flag("--dry-run", s->dry_run, "Show what would be dropped; change nothing");
  AddJsonFlag(command.app, s->json);
  command.prepare = [s]() -> absl::Status {
    ASSIGN_OR_RETURN(*s->request.mutable_filter(), FilterFromFlags(s->filter));
    if (FilterIsEmpty(s->request.filter()) && !s->all) {
      return absl::InvalidArgumentError(
          "nothing selected: give --family, --hash, --device, --dims/--dtype or "
          "--nvrtc-older-than, or --all to drop every entry");
    }
    s->request.set_all(s->all);
    s->request.set_dry_run(s->dry_run);
    return absl::OkStatus();
  };
  command.run = [s, io](Client& client) -> absl::Status {
    ASSIGN_OR_RETURN(v1::InvalidateResponse response, client.Invalidate(s->request));
    if (s->json) return PrintJson(response, io.out);
    io.out << (s->dry_run ? "would remove " : "removed ") << response.entries_removed()
           << " entries and " << response.measurements_removed() << " measurements"
           << (s->dry_run ? " (dry run, nothing changed)" : "") << "\n";
    if (!response.removed().empty()) PrintEntryTable(response.removed(), io.out);
    return absl::OkStatus();
  };
  return command;
}

Command StatsCommand(CLI::App& root, Streams io) {
  struct State {
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand("stats", "Show the daemon's cache and lookup counters");
  AddJsonFlag(command.app, s->json);
  command.prepare = [] { return absl::OkStatus(); };
  command.run = [s, io](Client& client) -> absl::Status {
    ASSIGN_OR_RETURN(v1::StatsResponse response, client.Stats(v1::StatsRequest()));
    if (s->json) return PrintJson(response, io.out);
    PrintStats(response, io.out);
    return absl::OkStatus();
  };
  return command;
}

Command KernelsCommand(CLI::App& root, Streams io) {
  struct State {
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand("kernels", "List the kernel families the daemon knows");
  AddJsonFlag(command.app, s->json);
  command.prepare = [] { return absl::OkStatus(); };
  command.run = [s, io](Client& client) -> absl::Status {
    ASSIGN_OR_RETURN(v1::ListKernelsResponse response,
                     client.ListKernels(v1::ListKernelsRequest()));
    if (s->json) return PrintJson(response, io.out);
    if (response.kernels().empty()) {
      io.out << "no kernel families registered\n";
      return absl::OkStatus();
    }
    PrintKernelTable(response, io.out);
    return absl::OkStatus();
  };
  return command;
}

Command RegisterCommand(CLI::App& root, Streams io) {
  struct State {
    std::string file;
    bool replace = false;
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "register", "Register a kernel family (descriptor in protobuf text format)");
  command.app->add_option("file", s->file, "Descriptor file; source_file is read beside it")
      ->required();
  command.app->add_flag("--replace", s->replace,
                        "Make this version current when the family exists with other content");
  AddJsonFlag(command.app, s->json);
  command.prepare = [] { return absl::OkStatus(); };
  command.run = [s, io](Client& client) -> absl::Status {
    v1::RegisterKernelRequest request;
    ASSIGN_OR_RETURN(*request.mutable_family(), ReadFamilyFile(s->file));
    request.set_replace(s->replace);
    ASSIGN_OR_RETURN(v1::RegisterKernelResponse response, client.RegisterKernel(request));
    if (s->json) return PrintJson(response, io.out);
    io.out << "kernel family " << response.kernel().name() << " "
           << (response.changed() ? "registered" : "unchanged") << " (content hash "
           << response.kernel().content_hash() << ", " << response.kernel().config_count()
           << " configs)\n";
    return absl::OkStatus();
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
  command.app->add_option("--limit", s->limit, "At most this many jobs (server default 50)")
      ->check(CLI::NonNegativeNumber);
  AddJsonFlag(command.app, s->json);
  command.prepare = [] { return absl::OkStatus(); };
  command.run = [s, io](Client& client) -> absl::Status {
    v1::ListJobsRequest request;
    request.set_limit(s->limit);
    ASSIGN_OR_RETURN(v1::ListJobsResponse response, client.ListJobs(request));
    if (s->json) return PrintJson(response, io.out);
    if (response.jobs().empty()) {
      io.out << "no jobs\n";
      return absl::OkStatus();
    }
    PrintJobTable(response, io.out);
    return absl::OkStatus();
  };
  return command;
}

Command GcCommand(CLI::App& root, Streams io) {
  struct State {
    bool dry_run = false;
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand("gc", "Remove binaries no entry or measurement refers to");
  command.app->add_flag("--dry-run", s->dry_run, "Show what would be removed; change nothing");
  AddJsonFlag(command.app, s->json);
  command.prepare = [] { return absl::OkStatus(); };
  command.run = [s, io](Client& client) -> absl::Status {
    v1::GarbageCollectRequest request;
    request.set_dry_run(s->dry_run);
    ASSIGN_OR_RETURN(v1::GarbageCollectResponse response, client.GarbageCollect(request));
    if (s->json) return PrintJson(response, io.out);
    if (s->dry_run) {
      io.out << "would remove " << response.binaries_removed() << " binaries, freeing "
             << FormatBytes(response.bytes_freed()) << " (dry run, nothing changed)\n";
    } else {
      io.out << "removed " << response.binaries_removed() << " binaries, freed "
             << FormatBytes(response.bytes_freed()) << "\n";
    }
    return absl::OkStatus();
  };
  return command;
}

Command ExportCommand(CLI::App& root, Streams io) {
  struct State {
    std::string out_path = "-";
    FilterFlags filter;
    bool measurements = false;
    v1::ExportRequest request;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand("export", "Write cached entries to a bundle file (JSON)");
  command.app->add_option("--out", s->out_path, "Bundle file; - is stdout")->capture_default_str();
  AddFilterFlags(command.app, s->filter);
  command.app->add_flag("--measurements", s->measurements,
                        "Include every measurement behind the entries");
  command.prepare = [s]() -> absl::Status {
    ASSIGN_OR_RETURN(*s->request.mutable_filter(), FilterFromFlags(s->filter));
    s->request.set_include_measurements(s->measurements);
    return absl::OkStatus();
  };
  command.run = [s, io](Client& client) -> absl::Status {
    ASSIGN_OR_RETURN(v1::CacheBundle bundle, client.Export(s->request));
    if (s->out_path == "-") return WriteBundle(bundle, io.out, "<stdout>");
    RETURN_IF_ERROR(WriteBundleFile(s->out_path, bundle));
    int64_t binary_bytes = 0;
    for (const v1::Binary& binary : bundle.binaries()) binary_bytes += binary.cubin().size();
    io.out << "exported " << bundle.families_size() << " families, " << bundle.binaries_size()
           << " binaries (" << FormatBytes(binary_bytes) << "), " << bundle.entries_size()
           << " entries, " << bundle.measurements_size() << " measurements to " << s->out_path
           << "\n";
    return absl::OkStatus();
  };
  return command;
}

// `autotune backup --out PATH`: an online backup written by the daemon.
Command BackupCommand(CLI::App& root, Streams io) {
  struct State {
    std::string out;
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "backup", "Copy the daemon's database to a new file while it serves (SQLite's backup API)");
  command.app->add_option("--out", s->out, "New file on the daemon's host, absolute")->required();
  AddJsonFlag(command.app, s->json);
  command.prepare = [] { return absl::OkStatus(); };
  command.run = [s, io](Client& client) -> absl::Status {
    v1::BackupRequest request;
    request.set_path(s->out);
    ASSIGN_OR_RETURN(v1::BackupResponse response, client.Backup(request));
    if (s->json) return PrintJson(response, io.out);
    io.out << "backed up " << response.entries() << " entries to " << response.path() << " ("
           << response.bytes() << " bytes, schema " << response.schema_version()
           << ", integrity ok)\n";
    return absl::OkStatus();
  };
  return command;
}

// `autotune token new`: a token for the daemon's token file; it asks the
// daemon nothing.
Command TokenCommand(CLI::App& root, Streams io) {
  struct State {
    std::string role;
    std::string id;
    std::string expires;
    std::string out;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand("token", "Make bearer tokens for the daemon's --token-file");
  CLI::App* create = command.app->add_subcommand(
      "new", "Print a new token's line for the token file; write the token itself to --out");
  command.app->require_subcommand(1);
  create->add_option("--role", s->role, "reader, tuner or admin")
      ->required()
      ->check(CLI::IsMember({"reader", "tuner", "admin"}));
  create->add_option("--id", s->id, "Names the holder in the audit log (no spaces)")->required();
  create->add_option("--expires", s->expires, "RFC 3339 time after which it is refused");
  create->add_option("--out", s->out, "File to write the token to (mode 0600)")->required();
  command.prepare = [s]() -> absl::Status {
    if (s->id.find_first_of(" \t#") != std::string::npos) {
      return absl::InvalidArgumentError("--id: no spaces or '#'");
    }
    if (!s->expires.empty()) {
      absl::StatusOr<absl::Time> expires = ParseTokenExpiry(s->expires);
      if (!expires.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--expires ", expires.status().message()));
      }
    }
    return absl::OkStatus();
  };
  command.run = [s, io](Client&) -> absl::Status {
    ASSIGN_OR_RETURN(std::string token, NewToken());
    RETURN_IF_ERROR(WriteFileAtomically(s->out, token + "\n", "token file", 0600));
    io.out << s->role << " " << s->id << " " << TokenHash(token)
           << (s->expires.empty() ? "" : " expires=" + s->expires) << "\n";
    return absl::OkStatus();
  };
  return command;
}

Command ExportConfigsCommand(CLI::App& root, Streams io) {
  struct State {
    std::string family;
    std::string out_dir;
    std::string device;
    std::string hash;
    ServerConfigOptions options;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "export-configs",
      "Write a family's tuned configs as per-device JSON files in the layout vLLM and SGLang "
      "read for fused-MoE kernels (keyed by the bucketed dimension)");
  command.app->add_option("family", s->family, "Kernel family name")->required();
  command.app->add_option("--out", s->out_dir, "Directory to write the files into")->required();
  command.app->add_option("--device", s->device, "Only entries tuned on this device");
  command.app->add_option("--hash", s->hash, "Family content hash; default: the current one");
  command.app->add_option("--bucket", s->options.bucket,
                          "Dimension the files are keyed by; default: the family's bucketed one");
  command.prepare = [] { return absl::OkStatus(); };
  command.run = [s, io](Client& client) -> absl::Status {
    ASSIGN_OR_RETURN(v1::ListKernelsResponse kernels, client.ListKernels({}));
    const v1::KernelSummary* family = nullptr;
    for (const v1::KernelSummary& kernel : kernels.kernels()) {
      if (kernel.name() == s->family) family = &kernel;
    }
    if (family == nullptr) {
      return absl::NotFoundError(absl::StrCat("unknown family '", s->family, "'"));
    }
    v1::ListEntriesRequest request;
    request.mutable_filter()->set_family(s->family);
    request.mutable_filter()->set_family_hash(s->hash.empty() ? family->content_hash() : s->hash);
    request.mutable_filter()->set_device(s->device);
    request.set_limit(1000);
    std::vector<v1::Entry> entries;
    while (true) {
      request.set_offset(static_cast<int32_t>(entries.size()));
      ASSIGN_OR_RETURN(v1::ListEntriesResponse page, client.ListEntries(request));
      for (v1::Entry& entry : *page.mutable_entries()) entries.push_back(std::move(entry));
      if (page.entries().empty() || static_cast<int64_t>(entries.size()) >= page.total()) break;
    }
    ASSIGN_OR_RETURN(std::vector<ConfigFile> files,
                     ServerConfigFiles(*family, entries, s->options));
    RETURN_IF_ERROR(MakeDirectories(s->out_dir, 0755));
    int written = 0;
    for (const ConfigFile& file : files) {
      RETURN_IF_ERROR(WriteFileAtomically(s->out_dir + "/" + file.name, file.json, "config file"));
      io.out << "  " << file.name << "  " << file.entries << " configs\n";
      written += file.entries;
    }
    io.out << "wrote " << files.size() << " files (" << written << " configs of " << entries.size()
           << " entries) to " << s->out_dir << "\n";
    return absl::OkStatus();
  };
  return command;
}

Command ImportCommand(CLI::App& root, Streams io) {
  struct State {
    std::string file;
    bool replace = false;
    bool keep_better = false;
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand("import", "Load a bundle file into the cache, all or nothing");
  command.app->add_option("file", s->file, "Bundle file written by export; - is stdin")->required();
  command.app->add_flag("--replace", s->replace, "Overwrite entries the cache already has");
  command.app->add_flag("--keep-better", s->keep_better,
                        "For entries the cache already has, keep whichever was measured better "
                        "(clean over contended, then the lower median); the way warmup shards "
                        "push to a central service");
  AddJsonFlag(command.app, s->json);
  command.prepare = [s] {
    if (s->replace && s->keep_better) {
      return absl::InvalidArgumentError("--replace and --keep-better exclude each other");
    }
    return absl::OkStatus();
  };
  command.run = [s, io](Client& client) -> absl::Status {
    ASSIGN_OR_RETURN(v1::CacheBundle bundle, ReadBundleFile(s->file));
    ASSIGN_OR_RETURN(v1::ImportResponse response,
                     client.Import(bundle, s->replace, s->keep_better));
    if (s->json) return PrintJson(response, io.out);
    io.out << "imported " << response.families() << " families, " << response.binaries()
           << " binaries, " << response.entries() << " entries, " << response.measurements()
           << " measurements\n";
    if (response.entries_skipped() > 0) {
      io.out << "kept " << response.entries_skipped()
             << (s->keep_better ? " existing entries measured as well or better\n"
                                : " existing entries; --replace overwrites them\n");
    }
    return absl::OkStatus();
  };
  return command;
}

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
      out_ << "job " << job_id_ << ": " << last_message_ << "\n";
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
    if (s->json) {
      RETURN_IF_ERROR(PrintJson(job, io.out));
    } else {
      io.out << "job " << job.id() << " " << v1::JobState_Name(job.state()) << ": "
             << FormatJobCounts(job.counts()) << "\n";
      if (!job.error().empty()) io.out << "error: " << job.error() << "\n";
      io.out << RenderReportText(job);
    }
    return WriteReportFiles(client, job, s->files);
  };
  return command;
}

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
    ReportFiles files;
    bool json = false;
    v1::SubmitJobRequest request;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "warmup", "Tune every problem of a manifest (v1.Manifest, text format) and wait");
  command.app->add_option("manifest", s->manifest, "Manifest file")->required();
  command.app->add_option("--shard", s->shard, "Tune only shard I of N (0-based), e.g. 0/4");
  command.app->add_flag("--compile-only", s->compile_only, "Compile the variants; measure nothing");
  command.app->add_flag("--retune", s->retune, "Tune again problems that have cached entries");
  command.app
      ->add_option("--variant-timeout", s->variant_timeout_s,
                   "Seconds one variant may run (0 = server default)")
      ->check(CLI::NonNegativeNumber);
  command.app
      ->add_option("--compile-timeout", s->compile_timeout_s,
                   "Seconds one compile may take (0 = server default)")
      ->check(CLI::NonNegativeNumber);
  command.app->add_flag("--force", s->force,
                        "Measure on a GPU other processes use; the entries are marked CONTENDED");
  command.app
      ->add_option("--quiet-wait", s->quiet_wait_s,
                   "Seconds to wait for a quiet GPU before a problem fails (0 = server default)")
      ->check(CLI::NonNegativeNumber);
  command.app
      ->add_option("--candidates", s->candidates,
                   "At most N candidates per problem in the serial validation (1..256; "
                   "default 8)")
      ->check(CLI::Range(1, 256));
  command.app
      ->add_option("--candidate-band", s->candidate_band,
                   "Candidates are the variants within (1 + B) of the best screened median, "
                   "widened by the screen's noise (0 = 0.10)")
      ->check(CLI::Range(0.0, 10.0));
  command.app
      ->add_option("--serial-noise", s->serial_noise,
                   "Serial rounds go on until each candidate's median has at most this relative "
                   "noise (0 = 0.005), or --serial-max")
      ->check(CLI::Range(0.0, 0.5));
  command.app
      ->add_option("--serial-max", s->serial_max_s,
                   "GPU seconds of serial rounds per problem at most (0 = server default)")
      ->check(CLI::NonNegativeNumber);
  AddReportFileOptions(command.app, s->files);
  command.app->add_flag("--json", s->json,
                        "Print the finished job as protobuf JSON; progress goes to stderr");
  command.prepare = [s]() -> absl::Status {
    RETURN_IF_ERROR(CheckReportFileOptions(s->files));
    v1::JobOptions& options = *s->request.mutable_spec()->mutable_options();
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
  command.run = [s, io](Client& client) -> absl::Status {
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
    if (s->json) {
      RETURN_IF_ERROR(PrintJson(job, io.out));
    } else if (!job.reports().empty()) {
      io.out << RenderReportText(job);
    } else if (!job.results().empty()) {
      PrintEntryTable(job.results(), io.out);  // a server that sends no reports
    }
    RETURN_IF_ERROR(WriteReportFiles(client, job, s->files));
    switch (job.state()) {
      case v1::SUCCEEDED:
        // A variant that was expected to compile and did not fails the run.
        if (job.counts().compile_errors() > 0) {
          return absl::AbortedError(absl::StrCat("job ", job.id(), ": ",
                                                 job.counts().compile_errors(),
                                                 " variants failed to compile"));
        }
        // A problem left without a valid config fails the run too; variants
        // that were rejected (wrong result, timeout...) do not, since
        // rejecting them is the point of validating.
        if (!s->compile_only && job.results_size() < job.counts().problems()) {
          return absl::AbortedError(
              absl::StrCat("job ", job.id(), ": ", job.counts().problems() - job.results_size(),
                           " of ", job.counts().problems(), " problems have no valid config",
                           job.error().empty() ? "" : ": ", job.error()));
        }
        return absl::OkStatus();
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
  return command;
}

// One line, whatever the message holds.
std::string OneLine(absl::string_view message) {
  std::string line = absl::StrReplaceAll(message, {{"\r\n", " "}, {"\n", " "}, {"\r", " "}});
  return std::string(absl::StripTrailingAsciiWhitespace(line));
}

int ReportError(std::ostream& err, absl::string_view command, const absl::Status& status) {
  err << "autotune: " << command << ": " << absl::StatusCodeToString(status.code()) << ": "
      << OneLine(status.message()) << "\n";
  return status.code() == absl::StatusCode::kUnavailable ? kExitUnreachable : kExitError;
}

ClientOptions ClientOptionsFromFlags(const GlobalFlags& flags) {
  ClientOptions options;
  options.address = flags.server;
  options.timeout = absl::Seconds(flags.timeout_s);
  if (flags.tls || !flags.tls_ca.empty() || !flags.tls_cert.empty() || !flags.tls_key.empty()) {
    options.tls = TlsOptions{flags.tls_ca, flags.tls_cert, flags.tls_key};
  }
  return options;
}

}  // namespace

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app("Ask the autotune daemon for tuned kernel configs and manage its cache.",
               "autotune");
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", kVersion);
  GlobalFlags global;
  app.add_option("--server", global.server,
                 "Daemon address: unix:///path or host:port (env AUTOTUNE_SERVER)")
      ->capture_default_str();
  app.add_option("--timeout", global.timeout_s,
                 "Deadline of each call in seconds (export/import: 10 min; warmup: none)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--tls", global.tls, "Use TLS with the system's root certificates");
  app.add_option("--tls-ca", global.tls_ca, "PEM root certificates (implies --tls)");
  app.add_option("--tls-cert", global.tls_cert, "PEM client certificate (with --tls-key)");
  app.add_option("--tls-key", global.tls_key, "PEM client private key (with --tls-cert)");
  app.add_option("--token-file", global.token_file,
                 "File holding a bearer token for the daemon (env AUTOTUNE_TOKEN_FILE)");

  const Streams io{out, err};
  const std::vector<Command> commands = {
      LookupCommand(app, io),     ListCommand(app, io),          ShowCommand(app, io),
      InvalidateCommand(app, io), StatsCommand(app, io),         KernelsCommand(app, io),
      RegisterCommand(app, io),   JobsCommand(app, io),          GcCommand(app, io),
      ExportCommand(app, io),     ImportCommand(app, io),        WarmupCommand(app, io),
      ReportCommand(app, io),     ExportConfigsCommand(app, io), TokenCommand(app, io),
      BackupCommand(app, io),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      app.exit(e, out, err);  // --help, --version
      return kExitOk;
    }
    const std::vector<CLI::App*> parsed = app.get_subcommands();
    const std::string help = parsed.empty()
                                 ? "autotune --help"
                                 : absl::StrCat("autotune ", parsed[0]->get_name(), " --help");
    err << "autotune: " << (parsed.empty() ? "" : parsed[0]->get_name() + ": ") << e.what()
        << "; see " << help << "\n";
    return kExitUsage;
  }

  const Command* selected = nullptr;
  for (const Command& command : commands) {
    if (command.app->parsed()) selected = &command;
  }
  if (selected == nullptr) {
    err << "autotune: no command given; see autotune --help\n";
    return kExitUsage;
  }
  const std::string name = selected->app->get_name();
  if (global.tls_cert.empty() != global.tls_key.empty()) {
    err << "autotune: " << name << ": --tls-cert and --tls-key go together\n";
    return kExitUsage;
  }
  if (absl::Status prepared = selected->prepare(); !prepared.ok()) {
    err << "autotune: " << name << ": " << OneLine(prepared.message()) << "\n";
    return kExitUsage;
  }
  ClientOptions client_options = ClientOptionsFromFlags(global);
  if (!global.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(global.token_file);
    if (!token.ok()) {
      err << "autotune: " << name << ": --token-file: " << OneLine(token.status().message())
          << "\n";
      return kExitUsage;
    }
    client_options.token = *std::move(token);
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(client_options);
  if (!client.ok()) return ReportError(err, name, client.status());
  if (absl::Status status = selected->run(**client); !status.ok()) {
    out.flush();
    return ReportError(err, name, status);
  }
  return kExitOk;
}

}  // namespace autotune::client
