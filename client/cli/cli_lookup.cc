#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "client/cli/cli_commands.h"
#include "client/cli/cli_flags.h"
#include "client/cli/cli_format.h"
#include "client/client.h"
#include "service/defaults.h"

namespace autotune::client {

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
  command.app->add_flag("--tune-on-miss", s->tune_on_miss,
                        "On a MISS or a PREDICTED answer, ask the daemon to tune the problem "
                        "(deduplicated, rate-limited)");
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
    if (s->tune_on_miss && (response.match() == v1::MISS || response.match() == v1::PREDICTED)) {
      v1::RequestTuningRequest tune;
      *tune.add_lookups() = s->request;
      tune.mutable_lookups(0)->clear_include_cubin();
      ASSIGN_OR_RETURN(v1::RequestTuningResponse tuning, client.RequestTuning(tune));
      if (tuning.results_size() == 1) {
        tuning_note = absl::StrCat(v1::TuningRequestState_Name(tuning.results(0).state()), ": ",
                                   tuning.results(0).message());
      }
    }
    return PrintAnswer(response, s->json, io.out,
                       [&](const v1::LookupResponse& answer, std::ostream& out) {
                         PrintLookupResponse(s->request, answer, out);
                         if (!cubin_note.empty()) {
                           out << absl::StrFormat("  %-12s %s\n", "cubin", cubin_note);
                         }
                         if (!tuning_note.empty()) {
                           out << absl::StrFormat("  %-12s %s\n", "tuning", tuning_note);
                         }
                       });
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
  command.app
      ->add_option("--limit", s->limit,
                   absl::StrCat("At most this many entries (server default ",
                                service::kDefaultListEntriesLimit, ")"))
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
    return PrintAnswer(client.ListEntries(s->request), s->json, io.out,
                       [&](const v1::ListEntriesResponse& response, std::ostream& out) {
                         if (response.entries().empty()) {
                           out << (FilterIsEmpty(s->request.filter()) && s->offset == 0
                                       ? "the cache is empty\n"
                                       : "no entries match\n");
                           return;
                         }
                         PrintEntryTable(response.entries(), out);
                         const int64_t shown_end = s->offset + response.entries_size();
                         if (response.total() > shown_end || s->offset > 0) {
                           out << "entries " << s->offset + 1 << "-" << shown_end << " of "
                               << response.total() << "; --limit and --offset show others\n";
                         }
                       });
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
    return PrintAnswer(client.GetEntry(s->request), s->json, io.out, PrintEntryDetail);
  };
  return command;
}

}  // namespace autotune::client
