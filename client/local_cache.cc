#include "client/local_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/paths.h"
#include "base/posix_error.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "proto/problem.h"
// XXH3, compiled here from its header: no library to link or ship.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace autotune::client {
namespace {

constexpr absl::string_view kSealPrefix = "autotune-answer 1 ";
constexpr absl::string_view kPackPrefix = "autotune-pack 1 ";
// The pieces of a pack's data that are checked apart, on several threads.
constexpr size_t kPackChunkBytes = 256 * 1024;

// XXH3-128 of `bytes`, big-endian: the check of a pack against tearing and
// corruption, as fast as memory can be read (SHA-256 takes 11 ms a core
// for 16 MB on the build machine).
std::string Xxh3(absl::string_view bytes) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes.data(), bytes.size()));
  return std::string(reinterpret_cast<const char*>(canonical.digest), sizeof(canonical.digest));
}

// The XXH3-128 of each kPackChunkBytes of `pieces` one after the other.
std::vector<std::string> ChunkHashes(absl::Span<const absl::string_view> pieces) {
  std::vector<std::string> hashes;
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  size_t in_chunk = 0;
  const auto digest = [&] {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(&state));
    hashes.emplace_back(reinterpret_cast<const char*>(canonical.digest), sizeof(canonical.digest));
    XXH3_128bits_reset(&state);
    in_chunk = 0;
  };
  for (absl::string_view piece : pieces) {
    while (!piece.empty()) {
      const size_t take = std::min(piece.size(), kPackChunkBytes - in_chunk);
      XXH3_128bits_update(&state, piece.data(), take);
      piece.remove_prefix(take);
      in_chunk += take;
      if (in_chunk == kPackChunkBytes) digest();
    }
  }
  if (in_chunk > 0) digest();
  return hashes;
}

FileStamp StampOf(const struct stat& info) {
  return {
      .inode = static_cast<uint64_t>(info.st_ino),
      .size = static_cast<int64_t>(info.st_size),
      .mtime_ns = static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec,
      .ctime_ns = static_cast<int64_t>(info.st_ctim.tv_sec) * 1000000000 + info.st_ctim.tv_nsec};
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// Where an answer is kept: <directory>/answers/<key>.answer.
constexpr absl::string_view kAnswersDir = "answers";
constexpr absl::string_view kAnswerSuffix = ".answer";

bool IsHexSha256(absl::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The file's bytes; nullopt when it does not exist.
absl::StatusOr<std::optional<std::string>> ReadIfPresent(const std::string& path,
                                                         absl::string_view what,
                                                         struct stat* info = nullptr) {
  absl::StatusOr<std::string> bytes = ReadFile(path, what, info);
  if (absl::IsNotFound(bytes.status())) return std::nullopt;
  if (!bytes.ok()) return bytes.status();
  return *std::move(bytes);
}

}  // namespace

std::string LocalCache::DefaultDirectory() {
  if (std::string dir = Env("AUTOTUNE_LOCAL_CACHE"); !dir.empty()) return dir;
  if (std::string dir = Env("XDG_CACHE_HOME"); !dir.empty()) return dir + "/autotune";
  if (std::string home = Env("HOME"); !home.empty()) return home + "/.cache/autotune";
  return "";
}

absl::StatusOr<LocalCache> LocalCache::Open(std::string directory) {
  if (directory.empty()) {
    return absl::InvalidArgumentError(
        "no local cache directory: set AUTOTUNE_LOCAL_CACHE, XDG_CACHE_HOME or HOME");
  }
  for (const std::string& dir : {directory, directory + "/answers", directory + "/cubins",
                                 directory + "/sources", directory + "/packs"}) {
    RETURN_IF_ERROR(MakeDirectories(dir, 0700));
  }
  return LocalCache(std::move(directory));
}

std::string LocalCache::AnswerKey(const v1::LookupRequest& request) {
  const v1::Device& device = request.device();
  return Sha256Hex(absl::StrCat(
      "autotune-lookup 1\n", request.family(), "\n", request.family_hash(), "\n",
      FormatDims(request.problem().dims()), "\n", static_cast<int>(request.problem().dtype()), "\n",
      device.name(), "\n", device.compute_capability(), "\n", device.sm_count(), "\n",
      request.exact_only() ? 1 : 0, "\n", request.driver_version(), "\n"));
}

std::string LocalCache::AnswerPath(const v1::LookupRequest& request) const {
  return AnswerPathOfKey(AnswerKey(request));
}

std::string LocalCache::AnswerPathOfKey(absl::string_view key) const {
  return absl::StrCat(directory_, "/", kAnswersDir, "/", key, kAnswerSuffix);
}

std::string LocalCache::PackPath(absl::string_view pack_key) const {
  return absl::StrCat(directory_, "/packs/", pack_key, ".pack");
}

std::string LocalCache::CubinPath(absl::string_view sha256) const {
  return absl::StrCat(directory_, "/cubins/", sha256, ".cubin");
}

std::string LocalCache::SourcePath(absl::string_view sha256) const {
  return absl::StrCat(directory_, "/sources/", sha256, ".cu");
}

absl::Status LocalCache::PutAnswer(const v1::LocalAnswer& answer) const {
  v1::LocalAnswer stored = answer;
  stored.mutable_request()->clear_include_cubin();
  stored.mutable_response()->clear_cubin();
  std::string payload;
  if (!stored.SerializeToString(&payload)) {
    return absl::InternalError("cannot serialize a local answer");
  }
  return WriteFileAtomically(AnswerPath(stored.request()),
                             absl::StrCat(kSealPrefix, Sha256Hex(payload), "\n", payload),
                             "local answer");
}

absl::StatusOr<std::optional<v1::LocalAnswer>> LocalCache::GetAnswer(
    const v1::LookupRequest& request, FileStamp* stamp) const {
  const std::string path = AnswerPath(request);
  struct stat info;
  ASSIGN_OR_RETURN(std::optional<std::string> bytes, ReadIfPresent(path, "local answer", &info));
  if (!bytes.has_value()) return std::nullopt;
  if (stamp != nullptr) *stamp = StampOf(info);
  const size_t newline = bytes->find('\n');
  const absl::string_view text = *bytes;
  if (!absl::StartsWith(text, kSealPrefix) || newline == std::string::npos ||
      newline != kSealPrefix.size() + 64) {
    return absl::DataLossError(absl::StrCat("local answer ", path, " has no valid seal line"));
  }
  const absl::string_view seal = text.substr(kSealPrefix.size(), 64);
  const absl::string_view payload = text.substr(newline + 1);
  if (Sha256Hex(payload) != seal) {
    return absl::DataLossError(
        absl::StrCat("local answer ", path, " does not match its seal (torn or corrupted)"));
  }
  v1::LocalAnswer answer;
  if (!answer.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(absl::StrCat("local answer ", path, " does not parse"));
  }
  return answer;
}

namespace {

// A content-addressed file: `path` named by the sha256 of its bytes.
absl::Status PutAddressed(absl::string_view sha256, absl::string_view bytes,
                          const std::string& path, absl::string_view what) {
  if (!IsHexSha256(sha256)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", sha256, "' is not a lower-case sha256 hex digest"));
  }
  if (Sha256Hex(bytes) != sha256) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, "'s bytes do not hash to ", sha256, "; not stored"));
  }
  struct stat info;
  if (stat(path.c_str(), &info) == 0 && static_cast<size_t>(info.st_size) == bytes.size()) {
    // The same bytes are there already, unless the file was damaged in
    // place: check before keeping it.
    absl::StatusOr<std::string> there = ReadFile(path, what);
    if (there.ok() && Sha256Hex(*there) == sha256) return absl::OkStatus();
  }
  return WriteFileAtomically(path, bytes, std::string(what));
}

absl::StatusOr<std::optional<std::string>> GetAddressed(absl::string_view sha256,
                                                        const std::string& path,
                                                        absl::string_view what) {
  if (!IsHexSha256(sha256)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", sha256, "' is not a lower-case sha256 hex digest"));
  }
  ASSIGN_OR_RETURN(std::optional<std::string> bytes, ReadIfPresent(path, what));
  if (bytes.has_value() && Sha256Hex(*bytes) != sha256) {
    return absl::DataLossError(
        absl::StrCat(what, " ", path, " does not match its sha256 (corrupted); refused"));
  }
  return bytes;
}

}  // namespace

absl::Status LocalCache::PutCubin(absl::string_view sha256, absl::string_view cubin) const {
  return PutAddressed(sha256, cubin, CubinPath(sha256), "local cubin");
}

absl::StatusOr<std::optional<std::string>> LocalCache::GetCubin(absl::string_view sha256) const {
  return GetAddressed(sha256, CubinPath(sha256), "local cubin");
}

absl::Status LocalCache::PutSource(absl::string_view sha256, absl::string_view source) const {
  return PutAddressed(sha256, source, SourcePath(sha256), "local source");
}

absl::StatusOr<std::optional<std::string>> LocalCache::GetSource(absl::string_view sha256) const {
  return GetAddressed(sha256, SourcePath(sha256), "local source");
}

std::string LocalCache::PackKey(
    const google::protobuf::RepeatedPtrField<v1::LookupRequest>& requests) {
  std::string text = "autotune-pack 2\n";
  for (const v1::LookupRequest& request : requests) {
    std::string bytes;
    if (request.include_cubin()) {
      v1::LookupRequest cleared = request;
      cleared.clear_include_cubin();
      bytes = SerializeDeterministically(cleared);
    } else {
      bytes = SerializeDeterministically(request);
    }
    absl::StrAppend(&text, bytes.size(), "\n", bytes);
  }
  return Sha256Hex(text);
}

namespace {

// The first line and index of a pack, as written and read.
std::string PackHead(const std::string& index) {
  return absl::StrCat(kPackPrefix, index.size(), " ", absl::BytesToHexString(Xxh3(index)), "\n",
                      index);
}

}  // namespace

absl::Status LocalCache::PutPack(absl::string_view pack_key,
                                 const std::vector<PackedAnswer>& answers,
                                 const std::map<std::string, SharedBytes>& cubins) const {
  if (!IsHexSha256(pack_key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", pack_key, "' is not a lower-case sha256 hex pack key"));
  }
  v1::LocalPack index;
  for (const PackedAnswer& answer : answers) {
    v1::LocalPack::Answer& packed = *index.add_answers();
    if (answer.key.empty()) continue;  // no answer for this lookup
    *packed.mutable_answer() = answer.answer;
    packed.mutable_answer()->clear_request();
    packed.set_key(answer.key);
    packed.set_inode(answer.stamp.inode);
    packed.set_size(answer.stamp.size);
    packed.set_mtime_ns(answer.stamp.mtime_ns);
    packed.set_ctime_ns(answer.stamp.ctime_ns);
  }
  static const std::string kZeros(kCubinAlignment, '\0');
  std::vector<absl::string_view> data;  // the pieces after the head
  uint64_t offset = 0;
  for (const auto& [sha, bytes] : cubins) {
    if (bytes == nullptr) continue;
    if (!IsHexSha256(sha) || Sha256Hex(*bytes) != sha) {
      return absl::InvalidArgumentError(
          absl::StrCat("the cubin's bytes do not hash to ", sha, "; no pack written"));
    }
    v1::LocalPack::Blob& blob = *index.add_cubins();
    blob.set_sha256(sha);
    blob.set_offset(offset);
    blob.set_size(bytes->size());
    data.push_back(*bytes);
    data.push_back(
        absl::string_view(kZeros).substr(0, AlignCubinOffset(bytes->size()) - bytes->size()));
    offset += AlignCubinOffset(bytes->size());
  }
  index.set_chunk_bytes(kPackChunkBytes);
  for (std::string& hash : ChunkHashes(data)) index.add_chunk_xxh3_128(std::move(hash));
  const std::string head = PackHead(SerializeDeterministically(index));
  const std::string path = PackPath(pack_key);
  // The same pack there already, whole: keep it, as the most recent.
  absl::StatusOr<std::shared_ptr<const MappedFile>> there = MappedFile::Open(path, "local pack");
  const absl::string_view there_bytes = there.ok() ? (*there)->bytes() : "";
  const absl::string_view there_data =
      there_bytes.substr(std::min(there_bytes.size(), AlignCubinOffset(head.size())));
  if (absl::StartsWith(there_bytes, head) && there_data.size() == offset &&
      std::equal(index.chunk_xxh3_128().begin(), index.chunk_xxh3_128().end(),
                 ChunkHashes(absl::MakeConstSpan(&there_data, 1)).begin())) {
    if (utimensat(AT_FDCWD, path.c_str(), nullptr, 0) != 0) {
      return PosixError(absl::StrCat("cannot refresh local pack ", path), errno);
    }
  } else {
    std::vector<absl::string_view> pieces = {
        head, absl::string_view(kZeros).substr(0, AlignCubinOffset(head.size()) - head.size())};
    pieces.insert(pieces.end(), data.begin(), data.end());
    RETURN_IF_ERROR(WriteFileAtomically(path, pieces, "local pack", 0444));
  }
  return PruneOldPacks(path);
}

absl::Status LocalCache::PruneOldPacks(const std::string& keep) const {
  const std::string dir = absl::StrCat(directory_, "/packs");
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return PosixError(absl::StrCat("cannot list ", dir), errno);
  std::vector<std::pair<int64_t, std::string>> packs;  // (mtime ns, path)
  while (const dirent* entry = readdir(listing)) {
    const std::string path = absl::StrCat(dir, "/", entry->d_name);
    struct stat info;
    if (!absl::EndsWith(entry->d_name, ".pack") || path == keep || stat(path.c_str(), &info) != 0) {
      continue;
    }
    packs.emplace_back(StampOf(info).mtime_ns, path);
  }
  closedir(listing);
  std::sort(packs.rbegin(), packs.rend());  // the most recent first
  for (size_t i = kPacksKept - 1; i < packs.size(); ++i) {
    if (std::remove(packs[i].second.c_str()) != 0 && errno != ENOENT) {
      return PosixError(absl::StrCat("cannot remove local pack ", packs[i].second), errno);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<LocalCache::Pack>> LocalCache::GetPack(
    absl::string_view pack_key) const {
  const std::string path = PackPath(pack_key);
  absl::StatusOr<std::shared_ptr<const MappedFile>> mapped = MappedFile::Open(path, "local pack");
  if (absl::IsNotFound(mapped.status())) return std::nullopt;
  if (!mapped.ok()) return mapped.status();
  const absl::string_view bytes = (*mapped)->bytes();
  const auto damaged = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("local pack ", path, " ", why));
  };
  const size_t newline = bytes.substr(0, 128).find('\n');
  if (!absl::StartsWith(bytes, kPackPrefix) || newline == absl::string_view::npos) {
    return damaged("has no valid first line");
  }
  const std::vector<absl::string_view> fields = absl::StrSplit(
      bytes.substr(kPackPrefix.size(), newline - kPackPrefix.size()), absl::MaxSplits(' ', 1));
  size_t index_size = 0;
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &index_size) || fields[1].size() != 32) {
    return damaged("has no valid first line");
  }
  if (index_size > bytes.size() - newline - 1) return damaged("is shorter than its index (torn)");
  const absl::string_view index_bytes = bytes.substr(newline + 1, index_size);
  const absl::string_view data =
      bytes.substr(std::min(bytes.size(), AlignCubinOffset(newline + 1 + index_size)));

  // The data's chunks are hashed on other threads (memory-bound: 16 MB of
  // page cache take several ms), while this one reads the index and stats
  // the answers' files, then joins in.
  const size_t chunks = (data.size() + kPackChunkBytes - 1) / kPackChunkBytes;
  std::vector<std::string> hashes(chunks);
  std::atomic<size_t> next{0};
  const auto hash_chunks = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks;) {
      hashes[c] = Xxh3(data.substr(c * kPackChunkBytes, kPackChunkBytes));
    }
  };
  std::vector<std::thread> helpers;
  const size_t cores = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  for (size_t t = 1; t < std::min(cores, chunks); ++t) helpers.emplace_back(hash_chunks);
  absl::Cleanup join = [&] {
    next.store(chunks);  // on an early return, no more hashing
    for (std::thread& helper : helpers) helper.join();
  };

  if (absl::BytesToHexString(Xxh3(index_bytes)) != fields[1]) {
    return damaged("does not match its index's check (torn or corrupted)");
  }
  v1::LocalPack index;
  if (!index.ParseFromArray(index_bytes.data(), static_cast<int>(index_bytes.size()))) {
    return damaged("has an index that does not parse");
  }
  if (index.chunk_bytes() != kPackChunkBytes ||
      static_cast<size_t>(index.chunk_xxh3_128_size()) != chunks) {
    return damaged("is not laid out as this version writes packs");
  }
  // The views into the mapping, which they keep alive.
  struct Views {
    std::shared_ptr<const MappedFile> mapped;
    std::vector<absl::string_view> cubins;
  };
  auto views = std::make_shared<Views>();
  views->mapped = *mapped;
  for (const v1::LocalPack::Blob& blob : index.cubins()) {
    if (!IsHexSha256(blob.sha256()) || blob.offset() > data.size() ||
        blob.size() > data.size() - blob.offset()) {
      return damaged(absl::StrCat("has a cubin out of its bounds (", blob.sha256(), ")"));
    }
    views->cubins.push_back(data.substr(blob.offset(), blob.size()));
  }
  Pack pack;
  pack.answers.resize(static_cast<size_t>(index.answers_size()));
  // Each answer's file is looked up in its folder, not by its whole path
  // (one walk of the directory's path, not one per answer). When the folder
  // cannot be opened, no file is found: every answer counts as changed.
  const int answers_dir =
      open(absl::StrCat(directory_, "/", kAnswersDir).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  absl::Cleanup close_answers_dir = [answers_dir] {
    if (answers_dir >= 0) close(answers_dir);
  };
  char name[64 + kAnswerSuffix.size() + 1];
  for (int i = 0; i < index.answers_size(); ++i) {
    v1::LocalPack::Answer& answer = *index.mutable_answers(i);
    if (answer.key().empty()) continue;  // no answer for this lookup
    if (!IsHexSha256(answer.key())) return damaged("has an answer with no valid key");
    std::memcpy(name, answer.key().data(), 64);
    std::memcpy(name + 64, kAnswerSuffix.data(), kAnswerSuffix.size());
    name[sizeof(name) - 1] = '\0';
    struct stat info;
    if (fstatat(answers_dir, name, &info, 0) == 0 &&
        StampOf(info) == FileStamp{.inode = answer.inode(),
                                   .size = answer.size(),
                                   .mtime_ns = answer.mtime_ns(),
                                   .ctime_ns = answer.ctime_ns()}) {
      pack.answers[static_cast<size_t>(i)] = std::move(*answer.mutable_answer());
    } else {
      ++pack.changed;
    }
  }
  hash_chunks();
  std::move(join).Invoke();
  for (size_t c = 0; c < chunks; ++c) {
    if (hashes[c] != index.chunk_xxh3_128(static_cast<int>(c))) {
      return damaged(absl::StrCat("does not match the check of its data at byte ",
                                  c * kPackChunkBytes, " (corrupted)"));
    }
  }
  for (int i = 0; i < index.cubins_size(); ++i) {
    pack.cubins.emplace(index.cubins(i).sha256(),
                        SharedBytes(views, &views->cubins[static_cast<size_t>(i)]));
  }
  return pack;
}

}  // namespace autotune::client
