// autotuned's log: spdlog's text lines, or JSON lines for log collectors.
//
//   RETURN_IF_ERROR(ConfigureLogging("info", LogFormat::kJson));
//
// kJson: every line on stderr is one JSON object,
//   {"time":"2026-12-01T20:53:18.123Z","level":"info","message":"..."}
// with level one of trace, debug, info, warning, error, critical. What
// others write to this process's stderr (the worker processes it starts,
// gRPC's own log, a library's message) is read back through a pipe and
// written the same way, one object per line, with "source":"stderr" (level
// warning) or "source":"grpc" (gRPC's severity). Call it once, before any
// child process starts, and after the signal mask is set: its reading
// thread keeps the mask it starts with.
#ifndef AUTOTUNE_SERVICE_LOGGING_H_
#define AUTOTUNE_SERVICE_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace autotune::service {

enum class LogFormat { kText, kJson };

// `level`: trace, debug, info, warn, error (INVALID_ARGUMENT otherwise).
absl::Status ConfigureLogging(const std::string& level, LogFormat format);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_LOGGING_H_
