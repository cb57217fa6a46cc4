#include "proto/bundle_parts.h"

#include "google/protobuf/io/coded_stream.h"

namespace autotune {

std::vector<v1::CacheBundle> SplitBundle(const v1::CacheBundle& bundle, size_t max_part_bytes) {
  const int version = bundle.format_version() > 0 ? bundle.format_version() : kBundleFormatVersion;
  std::vector<v1::CacheBundle> parts(1);
  parts[0].set_format_version(version);
  size_t used = 0;
  // The part a record goes to: the current one while it fits, else a new one.
  auto part_for = [&](const google::protobuf::Message& record) -> v1::CacheBundle& {
    const size_t size = record.ByteSizeLong();
    const size_t framed = 1 + google::protobuf::io::CodedOutputStream::VarintSize64(size) + size;
    if (used > 0 && used + framed > max_part_bytes) {
      parts.emplace_back().set_format_version(version);
      used = 0;
    }
    used += framed;
    return parts.back();
  };
  for (const v1::FamilyRecord& family : bundle.families()) {
    *part_for(family).add_families() = family;
  }
  for (const v1::Binary& binary : bundle.binaries()) {
    *part_for(binary).add_binaries() = binary;
  }
  for (const v1::Entry& entry : bundle.entries()) {
    *part_for(entry).add_entries() = entry;
  }
  for (const v1::Measurement& measurement : bundle.measurements()) {
    *part_for(measurement).add_measurements() = measurement;
  }
  return parts;
}

void MergeBundlePart(const v1::CacheBundle& part, v1::CacheBundle* bundle) {
  if (bundle->format_version() == 0) bundle->set_format_version(part.format_version());
  bundle->mutable_families()->MergeFrom(part.families());
  bundle->mutable_binaries()->MergeFrom(part.binaries());
  bundle->mutable_entries()->MergeFrom(part.entries());
  bundle->mutable_measurements()->MergeFrom(part.measurements());
}

}  // namespace autotune
