// autotune-local-pack: the local cache's packs (client/local_cache.h) as the
// C++ client reads and writes them, from the command line, so that the
// Python client's tests check that each client reads the other's packs.
//
//   autotune-local-pack key REQUESTS         # the batch's pack key
//   autotune-local-pack write DIR REQUESTS   # packs what DIR holds for the batch
//   autotune-local-pack read DIR REQUESTS    # what the batch's pack in DIR gives
//
// REQUESTS is a serialized BatchLookupRequest: the batch's lookups in order.
// `write` packs each lookup's answer as its file holds it now, and the
// cubins of those answers that cubins/ holds, then prints the pack's path.
// `read` prints "none" when there is no pack, else "changed N", then one
// line per lookup, "answer I SHA256" (the sha256 of the answer's
// deterministic serialization) or "answer I -", then one line per cubin,
// "cubin SHA256 SIZE SHA256-OF-ITS-BYTES". An error is printed as
// "CODE: message" on stderr, exit status 1; a bad command line is 2.
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "client/local_cache.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

absl::StatusOr<v1::BatchLookupRequest> ReadBatch(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path, "requests"));
  v1::BatchLookupRequest batch;
  if (!batch.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " does not parse as a serialized BatchLookupRequest"));
  }
  return batch;
}

absl::Status Write(const LocalCache& cache, const v1::BatchLookupRequest& batch) {
  std::vector<LocalCache::PackedAnswer> answers(static_cast<size_t>(batch.lookups_size()));
  std::map<std::string, SharedBytes> cubins;
  for (int i = 0; i < batch.lookups_size(); ++i) {
    FileStamp stamp;
    ASSIGN_OR_RETURN(std::optional<v1::LocalAnswer> answer,
                     cache.GetAnswer(batch.lookups(i), &stamp));
    if (!answer.has_value()) continue;
    const std::string sha = answer->response().entry().binary_sha256();
    if (!sha.empty() && !cubins.contains(sha)) {
      ASSIGN_OR_RETURN(std::optional<std::string> cubin, cache.GetCubin(sha));
      if (cubin.has_value()) cubins.emplace(sha, ShareBytes(*std::move(cubin)));
    }
    answers[static_cast<size_t>(i)] = {.key = LocalCache::AnswerKey(batch.lookups(i)),
                                       .answer = *std::move(answer),
                                       .stamp = stamp};
  }
  const std::string key = LocalCache::PackKey(batch.lookups());
  RETURN_IF_ERROR(cache.PutPack(key, answers, cubins));
  std::cout << cache.PackPath(key) << "\n";
  return absl::OkStatus();
}

absl::Status Read(const LocalCache& cache, const v1::BatchLookupRequest& batch) {
  ASSIGN_OR_RETURN(std::optional<LocalCache::Pack> pack,
                   cache.GetPack(LocalCache::PackKey(batch.lookups())));
  if (!pack.has_value()) {
    std::cout << "none\n";
    return absl::OkStatus();
  }
  std::cout << "changed " << pack->changed << "\n";
  for (size_t i = 0; i < pack->answers.size(); ++i) {
    const std::optional<v1::LocalAnswer>& answer = pack->answers[i];
    std::cout << "answer " << i << " "
              << (answer.has_value() ? Sha256Hex(SerializeDeterministically(*answer)) : "-")
              << "\n";
  }
  for (const auto& [sha, bytes] : pack->cubins) {
    std::cout << "cubin " << sha << " " << bytes->size() << " " << Sha256Hex(*bytes) << "\n";
  }
  return absl::OkStatus();
}

absl::Status Run(const std::vector<std::string>& args) {
  if (args.size() == 2 && args[0] == "key") {
    ASSIGN_OR_RETURN(v1::BatchLookupRequest batch, ReadBatch(args[1]));
    std::cout << LocalCache::PackKey(batch.lookups()) << "\n";
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(LocalCache cache, LocalCache::Open(args[1]));
  ASSIGN_OR_RETURN(v1::BatchLookupRequest batch, ReadBatch(args[2]));
  return args[0] == "write" ? Write(cache, batch) : Read(cache, batch);
}

}  // namespace
}  // namespace autotune::client

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const bool valid = (args.size() == 2 && args[0] == "key") ||
                     (args.size() == 3 && (args[0] == "write" || args[0] == "read"));
  if (!valid) {
    std::cerr << "usage: autotune-local-pack key REQUESTS | write DIR REQUESTS | read DIR "
                 "REQUESTS\n";
    return 2;
  }
  const absl::Status status = autotune::client::Run(args);
  if (!status.ok()) {
    std::cerr << absl::StatusCodeToString(status.code()) << ": " << status.message() << "\n";
    return 1;
  }
  return 0;
}
