#include "proto/json.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace autotune {

absl::StatusOr<std::string> MessageJson(const google::protobuf::Message& message, bool indent) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = indent;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!printed.ok()) {
    return absl::InternalError(absl::StrCat("cannot print ", message.GetTypeName(),
                                            " as JSON: ", printed.message().ToString()));
  }
  return json;
}

}  // namespace autotune
