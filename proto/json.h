// Messages as JSON the one way autotune prints them: `--json` on the
// command line, the HTML report's data and the admin API. Protobuf's JSON
// mapping with the .proto's field names (not lowerCamelCase), every
// primitive field printed (a 0 is shown, not left out), enums by name,
// int64 values as strings.
//
//   ASSIGN_OR_RETURN(std::string json, MessageJson(job));
//
// Thread-safe.
#ifndef AUTOTUNE_PROTO_JSON_H_
#define AUTOTUNE_PROTO_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace autotune {

// INTERNAL naming protobuf's complaint when the message cannot be printed.
// `indent`: one field per line, for people; else one line.
absl::StatusOr<std::string> MessageJson(const google::protobuf::Message& message,
                                        bool indent = false);

}  // namespace autotune

#endif  // AUTOTUNE_PROTO_JSON_H_
