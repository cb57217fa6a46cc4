// Streaming a CacheBundle: Export sends it, and Import receives it, as a
// sequence of parts that each stay well under gRPC's message size limit.
#ifndef AUTOTUNE_PROTO_BUNDLE_PARTS_H_
#define AUTOTUNE_PROTO_BUNDLE_PARTS_H_

#include <cstddef>
#include <vector>

#include "proto/autotune.pb.h"

namespace autotune {

// The bundle format this build reads and writes.
inline constexpr int kBundleFormatVersion = 1;

// Parts of a bundle for streaming.
inline constexpr size_t kBundlePartBytes = size_t{2} << 20;

// Splits `bundle` into parts of at most `max_part_bytes` each (a record larger
// than that travels alone), in the order families, binaries, entries,
// measurements. Every part carries the format version (kBundleFormatVersion
// when the bundle has none). MergeBundlePart over the parts, in order, gives
// the bundle back.
std::vector<v1::CacheBundle> SplitBundle(const v1::CacheBundle& bundle,
                                         size_t max_part_bytes = kBundlePartBytes);

// Appends the records of `part` to `bundle`; the first format version seen
// wins.
void MergeBundlePart(const v1::CacheBundle& part, v1::CacheBundle* bundle);

}  // namespace autotune

#endif  // AUTOTUNE_PROTO_BUNDLE_PARTS_H_
