#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/paths.h"
#include "base/status_macros.h"
#include "base/token.h"
#include "client/bundle.h"
#include "client/cli/cli_commands.h"
#include "client/cli/cli_flags.h"
#include "client/cli/cli_format.h"
#include "client/client.h"
#include "client/server_configs.h"
#include "kernels/family_loader.h"

namespace autotune::client {

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
  command.run = [s, io](Client& client) -> absl::Status {
    v1::RegisterKernelRequest request;
    // Checked here first: every problem of the descriptor, with its line.
    ASSIGN_OR_RETURN(*request.mutable_family(), kernels::LoadFamilyFile(s->file));
    request.set_replace(s->replace);
    return PrintAnswer(client.RegisterKernel(request), s->json, io.out,
                       [io](const v1::RegisterKernelResponse& response, std::ostream& out) {
                         for (const std::string& warning : response.warnings()) {
                           io.err << "autotune: register: warning: " << warning << "\n";
                         }
                         out << "kernel family " << response.kernel().name() << " "
                             << (response.changed() ? "registered" : "unchanged")
                             << " (content hash " << response.kernel().content_hash() << ", "
                             << response.kernel().config_count() << " configs)\n";
                       });
  };
  return command;
}

Command AdminUrlCommand(CLI::App& root, Streams io) {
  struct State {
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "admin-url",
      "Print a link that opens the daemon's admin page signed in with your role on its Unix "
      "socket: good once, within the hour, for a session of 30 minutes (the daemon needs "
      "--http-listen)");
  AddJsonFlag(command.app, s->json);
  command.run = [s, io](Client& client) -> absl::Status {
    return PrintAnswer(client.CreateLoginLink(v1::CreateLoginLinkRequest()), s->json, io.out,
                       [](const v1::CreateLoginLinkResponse& response, std::ostream& out) {
                         out << response.url() << "\n(expires " << response.expires_at() << ")\n";
                       });
  };
  return command;
}

Command UnregisterCommand(CLI::App& root, Streams io) {
  struct State {
    std::string family;
    bool invalidate = false;
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "unregister", "Remove a kernel family, every version of it, from the daemon (admin)");
  command.app->add_option("family", s->family, "The family's name")->required();
  command.app->add_flag("--invalidate", s->invalidate,
                        "Remove its entries and measurements too (refused without while it has "
                        "any)");
  AddJsonFlag(command.app, s->json);
  command.run = [s, io](Client& client) -> absl::Status {
    v1::UnregisterKernelRequest request;
    request.set_name(s->family);
    request.set_invalidate(s->invalidate);
    return PrintAnswer(client.UnregisterKernel(request), s->json, io.out,
                       [s](const v1::UnregisterKernelResponse& response, std::ostream& out) {
                         out << "kernel family " << s->family << " unregistered ("
                             << response.versions_removed() << " versions, "
                             << response.entries_removed() << " entries, "
                             << response.measurements_removed()
                             << " measurements removed; autotune gc frees their cubins)\n";
                       });
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
  command.run = [s, io](Client& client) -> absl::Status {
    return PrintAnswer(client.ListKernels(v1::ListKernelsRequest()), s->json, io.out,
                       [](const v1::ListKernelsResponse& response, std::ostream& out) {
                         if (response.kernels().empty()) {
                           out << "no kernel families registered\n";
                           return;
                         }
                         PrintKernelTable(response, out);
                       });
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
    return PrintAnswer(client.Invalidate(s->request), s->json, io.out,
                       [&](const v1::InvalidateResponse& response, std::ostream& out) {
                         out << (s->dry_run ? "would remove " : "removed ")
                             << response.entries_removed() << " entries and "
                             << response.measurements_removed() << " measurements"
                             << (s->dry_run ? " (dry run, nothing changed)" : "") << "\n";
                         if (!response.removed().empty()) PrintEntryTable(response.removed(), out);
                       });
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
  command.run = [s, io](Client& client) -> absl::Status {
    return PrintAnswer(client.Stats(v1::StatsRequest()), s->json, io.out, PrintStats);
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
  command.run = [s, io](Client& client) -> absl::Status {
    v1::GarbageCollectRequest request;
    request.set_dry_run(s->dry_run);
    return PrintAnswer(client.GarbageCollect(request), s->json, io.out,
                       [&](const v1::GarbageCollectResponse& response, std::ostream& out) {
                         if (s->dry_run) {
                           out << "would remove " << response.binaries_removed()
                               << " binaries, freeing " << FormatBytes(response.bytes_freed())
                               << " (dry run, nothing changed)\n";
                         } else {
                           out << "removed " << response.binaries_removed() << " binaries, freed "
                               << FormatBytes(response.bytes_freed()) << "\n";
                         }
                       });
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
    return PrintAnswer(client.Import(bundle, s->replace, s->keep_better), s->json, io.out,
                       [&](const v1::ImportResponse& response, std::ostream& out) {
                         out << "imported " << response.families() << " families, "
                             << response.binaries() << " binaries, " << response.entries()
                             << " entries, " << response.measurements() << " measurements\n";
                         if (response.entries_skipped() > 0) {
                           out << "kept " << response.entries_skipped()
                               << (s->keep_better
                                       ? " existing entries measured as well or better\n"
                                       : " existing entries; --replace overwrites them\n");
                         }
                         if (response.binaries_replaced() > 0) {
                           out << response.binaries_replaced()
                               << " imported binaries were not what this daemon compiles; it "
                                  "serves its own compile of those configs:\n";
                           for (const std::string& line : response.replaced()) {
                             out << "  " << line << "\n";
                           }
                         }
                       });
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

// `autotune backup --out NAME`: an online backup the daemon writes into its
// --backup-dir.
Command BackupCommand(CLI::App& root, Streams io) {
  struct State {
    std::string out;
    bool json = false;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "backup", "Copy the daemon's database to a new file while it serves (SQLite's backup API)");
  command.app
      ->add_option("--out", s->out,
                   "Name of the new file in the daemon's --backup-dir (a name, no '/'); a daemon "
                   "started without --backup-dir takes no backups")
      ->required();
  AddJsonFlag(command.app, s->json);
  command.run = [s, io](Client& client) -> absl::Status {
    v1::BackupRequest request;
    request.set_path(s->out);
    return PrintAnswer(client.Backup(request), s->json, io.out,
                       [](const v1::BackupResponse& response, std::ostream& out) {
                         out << "backed up " << response.entries() << " entries to "
                             << response.path() << " (" << response.bytes() << " bytes, schema "
                             << response.schema_version() << ", integrity ok)\n";
                       });
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

}  // namespace autotune::client
