// A client's on-disk copy of the answers the service gave and of their
// cubins, so that an inference server restarted while the service is down
// still starts with its tuned kernels (client/startup_lookup.h uses it).
//
//   ASSIGN_OR_RETURN(LocalCache cache, LocalCache::Open(LocalCache::DefaultDirectory()));
//   RETURN_IF_ERROR(cache.PutAnswer(answer));
//   ASSIGN_OR_RETURN(std::optional<v1::LocalAnswer> again, cache.GetAnswer(request));
//
// Layout of the directory (a format shared with the Python client,
// client/python/autotune_client/local_cache.py, packs/ included):
//   answers/<key>.answer    one LocalAnswer per lookup, key = AnswerKey(request):
//                           the line "autotune-answer 1 <sha256 hex of the rest>\n",
//                           then the serialized LocalAnswer
//   cubins/<sha256>.cubin   a binary, named by the sha256 of its bytes
//   sources/<sha256>.cu     a family's source, named alike, for the compile
//                           recipes answers carry (LookupResponse.recipe)
//   packs/<key>.pack        the answers of one start-up batch and their
//                           cubins in one read-only file, key =
//                           PackKey(the batch's requests), so that a start
//                           maps one file instead of reading two per lookup:
//                           the line "autotune-pack 1 <index bytes> <XXH3-128
//                           hex of the index>\n", the index (a serialized
//                           LocalPack), zeros up to a multiple of 256, then
//                           the cubins' bytes (each at a multiple of 256, as
//                           the index says, with its XXH3-128). Every read
//                           checks the index and every cubin; an answer is
//                           served from a pack only while its answers/ file
//                           is the one the pack was made from (same inode,
//                           size and times), so a pack never serves an
//                           answer older than the one answers/ holds. At
//                           most kPacksKept packs are kept, the least
//                           recently written removed first.
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

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/shared_bytes.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

// Bytes that several answers share without copies (base/shared_bytes.h),
// kept alive by whatever holds them: a string moved in, the block the
// service's answer was received into, or the mapping of a pack.
using ::autotune::ShareBytes;
using ::autotune::SharedBytes;

// What stat() says of a file, enough to tell a file replaced by rename
// from the one seen before.
struct FileStamp {
  uint64_t inode = 0;
  int64_t size = -1;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

class LocalCache {
 public:
  // Packs kept in packs/ (see the layout above).
  static constexpr int kPacksKept = 8;

  // $AUTOTUNE_LOCAL_CACHE, else $XDG_CACHE_HOME/autotune, else
  // ~/.cache/autotune; empty when none can be found (no HOME).
  static std::string DefaultDirectory();

  // Creates the directory and its answers/, cubins/, sources/ and packs/
  // (mode 0700) when missing. Errors name the path.
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
  // when its file fails its seal or does not parse. `stamp`, when given,
  // receives the stamp of the file the answer was read from.
  absl::StatusOr<std::optional<v1::LocalAnswer>> GetAnswer(const v1::LookupRequest& request,
                                                           FileStamp* stamp = nullptr) const;

  // The key of the pack of a batch of lookups, in their order: the sha256
  // hex of "autotune-pack 2\n", then of each request (include_cubin
  // cleared) its deterministic serialization, preceded by its size in
  // decimal and "\n". Computing it reads no file and hashes each request
  // once, not one sha256 each as AnswerKey does.
  static std::string PackKey(const google::protobuf::RepeatedPtrField<v1::LookupRequest>& requests);

  // One lookup of a batch, for a pack: its answer as read from its file
  // (GetAnswer, which gives the stamp), or none.
  struct PackedAnswer {
    std::string key;  // AnswerKey(answer.request()); empty: no answer
    v1::LocalAnswer answer;
    FileStamp stamp;
  };
  // Writes the pack `pack_key` of `answers`, one per lookup of the batch in
  // its order, and the `cubins` they use (by sha256, each checked against
  // its name here). When the pack there holds
  // the same index already, only its time is refreshed. Then removes the
  // oldest packs beyond kPacksKept.
  absl::Status PutPack(absl::string_view pack_key, const std::vector<PackedAnswer>& answers,
                       const std::map<std::string, SharedBytes>& cubins) const;

  // A pack, mapped and checked.
  struct Pack {
    // One per lookup of the batch, in its order: the answer when its file
    // is still the one packed (its request cleared), else nullopt.
    std::vector<std::optional<v1::LocalAnswer>> answers;
    // The number of answers left out because their file changed since.
    int changed = 0;
    // By sha256: views into the mapping, which they keep alive.
    std::map<std::string, SharedBytes> cubins;
  };
  // The pack `pack_key`; nullopt when there is none; DATA_LOSS naming the
  // file when its index or any cubin in it fails its check (nothing of it
  // is then served).
  absl::StatusOr<std::optional<Pack>> GetPack(absl::string_view pack_key) const;

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
  std::string AnswerPathOfKey(absl::string_view key) const;  // key: AnswerKey(request)
  std::string CubinPath(absl::string_view sha256) const;
  std::string SourcePath(absl::string_view sha256) const;
  std::string PackPath(absl::string_view pack_key) const;

 private:
  explicit LocalCache(std::string directory) : directory_(std::move(directory)) {}
  // Removes the least recently written packs beyond kPacksKept, never `keep`.
  absl::Status PruneOldPacks(const std::string& keep) const;
  std::string directory_;
};

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_LOCAL_CACHE_H_
