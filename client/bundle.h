// Cache bundles on disk and on the wire.
//
// A bundle file is one v1::CacheBundle as protobuf JSON (cubins are base64),
// the format `autotune export` writes and `autotune import` reads:
//
//   ASSIGN_OR_RETURN(v1::CacheBundle bundle, ReadBundleFile("h200.json"));
//   RETURN_IF_ERROR(WriteBundleFile("-", bundle));  // "-" = stdout
//
// On the wire, Export and Import move a bundle in parts (see autotune.proto);
// SplitBundle (proto/bundle_parts.h) is how they are cut up.
#ifndef AUTOTUNE_CLIENT_BUNDLE_H_
#define AUTOTUNE_CLIENT_BUNDLE_H_

#include <cstddef>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/autotune.pb.h"
#include "proto/bundle_parts.h"

namespace autotune::client {

using ::autotune::kBundleFormatVersion;
using ::autotune::SplitBundle;

// Reads a bundle file; "-" reads stdin. Errors name the file: NOT_FOUND or
// PERMISSION_DENIED when it cannot be opened, INVALID_ARGUMENT with the JSON
// parser's message when it is not a bundle, FAILED_PRECONDITION when its
// format_version is newer than this client's. Fields this client does not
// know are ignored, so bundles from a newer server still load.
absl::StatusOr<v1::CacheBundle> ReadBundleFile(const std::string& path);

// Writes `bundle` as indented JSON; "-" writes stdout. A file is written
// next to its final name and renamed into place, so a reader never sees half
// a bundle and a failed write leaves an existing file as it was.
absl::Status WriteBundleFile(const std::string& path, const v1::CacheBundle& bundle);

// The same on streams; `name` is what errors call the stream.
absl::StatusOr<v1::CacheBundle> ReadBundle(std::istream& in, absl::string_view name);
absl::Status WriteBundle(const v1::CacheBundle& bundle, std::ostream& out, absl::string_view name);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_BUNDLE_H_
