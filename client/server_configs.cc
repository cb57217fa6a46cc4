#include "client/server_configs.h"

#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

// A part of a file name from any text: characters other than letters,
// digits and "._+-=" become "_", so no part can hold a "/" (a dim named
// "../../x" once wrote outside --out) or a control character.
std::string FileNamePart(absl::string_view text) {
  std::string part(text);
  for (char& c : part) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '+' && c != '-' && c != '=') {
      c = '_';
    }
  }
  return part;
}

// `text` as a JSON string, quotes included, written by protobuf's JSON
// printer (every escape JSON needs).
std::string JsonString(absl::string_view text) {
  google::protobuf::Value value;
  value.set_string_value(std::string(text));
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(value, &json).ok()) return "\"\"";
  return json;
}

}  // namespace

absl::StatusOr<std::vector<ConfigFile>> ServerConfigFiles(const v1::KernelSummary& family,
                                                          const std::vector<v1::Entry>& entries,
                                                          const ServerConfigOptions& options) {
  std::string bucket = options.bucket;
  if (bucket.empty()) {
    std::vector<std::string> bucketed;
    for (const v1::ProblemDimension& dim : family.dims()) {
      if (dim.bucketed()) bucketed.push_back(dim.name());
    }
    if (bucketed.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "family ", family.name(), " has ", bucketed.size(), " bucketed dimensions",
          bucketed.empty() ? "" : absl::StrCat(" (", absl::StrJoin(bucketed, ", "), ")"),
          "; name the one to key the files by (--bucket)"));
    }
    bucket = bucketed.front();
  } else {
    bool known = false;
    for (const v1::ProblemDimension& dim : family.dims()) known = known || dim.name() == bucket;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("--bucket ", bucket, " is not a dimension of family ", family.name()));
    }
  }
  // File name -> bucket value -> params.
  std::map<std::string, std::map<int64_t, const v1::Entry*>> files;
  for (const v1::Entry& entry : entries) {
    if (entry.family() != family.name()) {
      return absl::InvalidArgumentError(
          absl::StrCat("an entry of family ", entry.family(), " among those of ", family.name()));
    }
    std::vector<std::string> parts;
    int64_t key = 0;
    bool has_key = false;
    for (const auto& [name, value] : entry.problem().dims()) {
      if (name == bucket) {
        key = value;
        has_key = true;
      }
    }
    if (!has_key) continue;
    // Dims in the family's order (the descriptor's author chooses it:
    // N before K for a GEMM, as vLLM names its files).
    for (const v1::ProblemDimension& dim : family.dims()) {
      if (dim.name() == bucket) continue;
      const auto value = entry.problem().dims().find(dim.name());
      if (value == entry.problem().dims().end()) continue;
      parts.push_back(absl::StrCat(FileNamePart(dim.name()), "=", value->second));
    }
    parts.push_back(absl::StrCat("device_name=", FileNamePart(entry.device().name())));
    parts.push_back(absl::StrCat("dtype=", DTypeName(entry.problem().dtype())));
    const v1::Entry*& slot = files[absl::StrCat(absl::StrJoin(parts, ","), ".json")][key];
    // Several versions or NVRTCs of one problem: the newest tuning wins.
    if (slot == nullptr || entry.tuned_at() > slot->tuned_at()) slot = &entry;
  }
  std::vector<ConfigFile> out;
  for (const auto& [name, by_key] : files) {
    ConfigFile file;
    file.name = name;
    std::vector<std::string> items;
    for (const auto& [key, entry] : by_key) {
      std::map<std::string, int64_t> params(entry->config().params().begin(),
                                            entry->config().params().end());
      std::vector<std::string> fields;
      for (const auto& [param, value] : params) {
        fields.push_back(absl::StrCat(JsonString(param), ": ", value));
      }
      items.push_back(absl::StrCat("  ", JsonString(absl::StrCat(key)), ": {",
                                   absl::StrJoin(fields, ", "), "}"));
    }
    file.json = absl::StrCat("{\n", absl::StrJoin(items, ",\n"), "\n}\n");
    file.entries = static_cast<int>(by_key.size());
    out.push_back(std::move(file));
  }
  return out;
}

}  // namespace autotune::client
