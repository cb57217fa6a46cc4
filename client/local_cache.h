// A client's on-disk copy of the answers the service gave and of their
// cubins, so that an inference server restarted while the service is down
// still starts with its tuned kernels (client/startup_lookup.h uses it).
//
//   ASSIGN_OR_RETURN(LocalCache cache, LocalCache::Open(LocalCache::DefaultDirectory()));
//   RETURN_IF_ERROR(cache.PutAnswer(answer));
//   ASSIGN_OR_RETURN(std::optional<v1::LocalAnswer> again, cache.GetAnswer(request));
//
// Layout of the directory (a format shared with the Python client):
//   answers/<key>.answer    one LocalAnswer per lookup, key = AnswerKey(request):
//                           the line "autotune-answer 1 <sha256 hex of the rest>\n",
//                           then the serialized LocalAnswer
//   cubins/<sha256>.cubin   a binary, named by the sha256 of its bytes
//   sources/<sha256>.cu     a family's source, named alike, for the compile
//                           recipes answers carry (LookupResponse.recipe)
//
// Every file is written to a temporary name and renamed over the old one,
// so processes and threads on one host may read and write one directory at
// once without locks: a reader sees an old file or a new one, never part of
// one, and racing writers of one answer each leave a whole one. Reads check
// every file (the answer's seal, the cubin's sha256): a torn, corrupted or
// edited file is DATA_LOSS naming it, never served; writing it again
// replaces it. Nothing is fsync'ed: after a power loss a file may fail its
// check and is fetched again. Thread-safe.
#ifndef AUTOTUNE_CLIENT_LOCAL_CACHE_H_
#define AUTOTUNE_CLIENT_LOCAL_CACHE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

class LocalCache {
 public:
  // $AUTOTUNE_LOCAL_CACHE, else $XDG_CACHE_HOME/autotune, else
  // ~/.cache/autotune; empty when none can be found (no HOME).
  static std::string DefaultDirectory();

  // Creates the directory and its answers/, cubins/ and sources/ (mode 0700) when
  // missing. Errors name the path.
  static absl::StatusOr<LocalCache> Open(std::string directory);

  // The identity of a lookup, as a file name: the sha256 hex of the text
  //   "autotune-lookup 1\n" family "\n" family_hash "\n" dims "\n" dtype "\n"
  //   device.name "\n" device.compute_capability "\n" device.sm_count "\n"
  //   exact_only "\n" driver_version "\n"
  // with dims as FormatDims writes them ("batch=8,n=4096"), dtype as its
  // enum number (3 for BFLOAT16), the other numbers and exact_only (0 or 1)
  // in decimal. include_cubin does not
  // count.
  static std::string AnswerKey(const v1::LookupRequest& request);

  const std::string& directory() const { return directory_; }

  // Stores `answer` under AnswerKey(answer.request()); its response's cubin
  // is not stored (PutCubin keeps binaries).
  absl::Status PutAnswer(const v1::LocalAnswer& answer) const;
  // The answer stored for `request`; nullopt when there is none; DATA_LOSS
  // when its file fails its seal or does not parse.
  absl::StatusOr<std::optional<v1::LocalAnswer>> GetAnswer(const v1::LookupRequest& request) const;

  // Stores `cubin` as cubins/<sha256>.cubin; INVALID_ARGUMENT when `sha256`
  // is not the sha256 of `cubin` (nothing is written).
  absl::Status PutCubin(absl::string_view sha256, absl::string_view cubin) const;
  // The binary `sha256`; nullopt when absent; DATA_LOSS when its bytes do
  // not match the name.
  absl::StatusOr<std::optional<std::string>> GetCubin(absl::string_view sha256) const;

  // The same for a recipe's source text (sources/<sha256>.cu).
  absl::Status PutSource(absl::string_view sha256, absl::string_view source) const;
  absl::StatusOr<std::optional<std::string>> GetSource(absl::string_view sha256) const;

  std::string AnswerPath(const v1::LookupRequest& request) const;
  std::string CubinPath(absl::string_view sha256) const;
  std::string SourcePath(absl::string_view sha256) const;

 private:
  explicit LocalCache(std::string directory) : directory_(std::move(directory)) {}
  std::string directory_;
};

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_LOCAL_CACHE_H_
