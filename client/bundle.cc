#include "client/bundle.h"

#include <iostream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "google/protobuf/util/json_util.h"

namespace autotune::client {
namespace {

absl::StatusOr<v1::CacheBundle> ParseBundle(const std::string& json, absl::string_view name) {
  v1::CacheBundle bundle;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &bundle, options);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bundle file ", name, " is not a cache bundle: ", parsed.message().ToString()));
  }
  if (bundle.format_version() > kBundleFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("bundle file ", name, " has format_version ", bundle.format_version(),
                     "; this client reads version ", kBundleFormatVersion, " and older"));
  }
  return bundle;
}

absl::StatusOr<std::string> BundleJson(const v1::CacheBundle& bundle, absl::string_view name) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(bundle, &json, options);
  if (!printed.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot encode bundle for ", name, ": ", printed.message().ToString()));
  }
  return json;
}

}  // namespace

absl::StatusOr<v1::CacheBundle> ReadBundle(std::istream& in, absl::string_view name) {
  std::string json(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) return absl::UnknownError(absl::StrCat("cannot read bundle file ", name));
  return ParseBundle(json, name);
}

absl::Status WriteBundle(const v1::CacheBundle& bundle, std::ostream& out, absl::string_view name) {
  absl::StatusOr<std::string> json = BundleJson(bundle, name);
  if (!json.ok()) return json.status();
  out << *json;
  out.flush();
  if (!out) return absl::UnknownError(absl::StrCat("cannot write bundle file ", name));
  return absl::OkStatus();
}

absl::StatusOr<v1::CacheBundle> ReadBundleFile(const std::string& path) {
  if (path == "-") return ReadBundle(std::cin, "<stdin>");
  absl::StatusOr<std::string> json = ReadFile(path, "bundle file");
  if (!json.ok()) return json.status();
  return ParseBundle(*json, path);
}

absl::Status WriteBundleFile(const std::string& path, const v1::CacheBundle& bundle) {
  if (path == "-") return WriteBundle(bundle, std::cout, "<stdout>");
  absl::StatusOr<std::string> json = BundleJson(bundle, path);
  if (!json.ok()) return json.status();
  return WriteFileAtomically(path, *json, "bundle file");
}

}  // namespace autotune::client
