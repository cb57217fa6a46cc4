#include "client/local_cache.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/paths.h"
#include "base/posix_error.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

constexpr absl::string_view kSealPrefix = "autotune-answer 1 ";

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

bool IsHexSha256(absl::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The file's bytes; nullopt when it does not exist.
absl::StatusOr<std::optional<std::string>> ReadIfPresent(const std::string& path,
                                                         absl::string_view what) {
  absl::StatusOr<std::string> bytes = ReadFile(path, what);
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
  for (const std::string& dir :
       {directory, directory + "/answers", directory + "/cubins", directory + "/sources"}) {
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
  return absl::StrCat(directory_, "/answers/", AnswerKey(request), ".answer");
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
    const v1::LookupRequest& request) const {
  const std::string path = AnswerPath(request);
  ASSIGN_OR_RETURN(std::optional<std::string> bytes, ReadIfPresent(path, "local answer"));
  if (!bytes.has_value()) return std::nullopt;
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

}  // namespace autotune::client
