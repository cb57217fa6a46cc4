#include "service/logging.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/posix_error.h"
#include "base/timestamp.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/support/log.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"

namespace autotune::service {
namespace {

// `text` as a JSON string, quotes included (protobuf's escaping).
std::string JsonString(absl::string_view text) {
  google::protobuf::Value value;
  value.set_string_value(std::string(text));
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(value, &json).ok()) {
    return "\"(not UTF-8)\"";  // the only way it fails
  }
  return json;
}

// One line, its keys in a fixed order for people reading it raw.
std::string JsonLine(absl::Time time, absl::string_view level, absl::string_view message,
                     absl::string_view source) {
  std::string line =
      absl::StrCat("{\"time\":\"", TimestampMillis(time), "\",\"level\":", JsonString(level),
                   ",\"message\":", JsonString(message));
  if (!source.empty()) absl::StrAppend(&line, ",\"source\":", JsonString(source));
  line.append("}\n");
  return line;
}

void WriteAll(int fd, absl::string_view text) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone; nothing else to tell
    text.remove_prefix(static_cast<size_t>(n));
  }
}

// Writes spdlog records as JSON lines to `fd` (the real stderr).
class JsonSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit JsonSink(int fd) : fd_(fd) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
    const absl::string_view source(msg.logger_name.data(), msg.logger_name.size());
    WriteAll(fd_,
             JsonLine(absl::FromChrono(msg.time), absl::string_view(level.data(), level.size()),
                      absl::string_view(msg.payload.data(), msg.payload.size()),
                      source == "autotuned" ? "" : source));
  }
  void flush_() override {}

 private:
  const int fd_;
};

// Never freed: the relay thread and gRPC's threads may log while the
// process exits.
spdlog::logger* stderr_logger = nullptr;
spdlog::logger* grpc_logger = nullptr;

// Each line written to our stderr by anyone else, logged as it arrives.
void RelayLines(int fd) {
  std::string pending;
  char buffer[4096];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    size_t end;
    while ((end = pending.find('\n')) != std::string::npos) {
      if (end > 0) stderr_logger->warn("{}", pending.substr(0, end));
      pending.erase(0, end + 1);
    }
  }
  if (!pending.empty()) stderr_logger->warn("{}", pending);
}

void LogFromGrpc(gpr_log_func_args* args) {
  const spdlog::level::level_enum level =
      args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
      : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                : spdlog::level::debug;
  grpc_logger->log(level, "{}:{}: {}", args->file, args->line, args->message);
}

}  // namespace

absl::Status ConfigureLogging(const std::string& level_name, LogFormat format) {
  const spdlog::level::level_enum level = spdlog::level::from_str(level_name);
  if (level == spdlog::level::off && level_name != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("log level '", level_name, "': expected trace, debug, info, warn or error"));
  }
  if (format == LogFormat::kText) {
    spdlog::set_level(level);
    return absl::OkStatus();
  }
  // The real stderr, kept for our own lines; fd 2 becomes a pipe that every
  // other writer (and every child, which inherits it) writes into.
  const int real_stderr = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (real_stderr < 0) return PosixError("log: cannot duplicate stderr", errno);
  int relay[2];
  if (pipe2(relay, O_CLOEXEC) != 0) {
    close(real_stderr);
    return PosixError("log: cannot make the stderr pipe", errno);
  }
  auto sink = std::make_shared<JsonSink>(real_stderr);
  auto logger = std::make_shared<spdlog::logger>("autotuned", sink);
  logger->set_level(level);
  stderr_logger = new spdlog::logger("stderr", sink);
  grpc_logger = new spdlog::logger("grpc", sink);
  spdlog::set_default_logger(logger);
  if (dup2(relay[1], STDERR_FILENO) < 0) {
    const int error = errno;
    close(relay[0]);
    close(relay[1]);
    return PosixError("log: cannot redirect stderr", error);
  }
  close(relay[1]);
  // Lives as long as the process: it ends when the last writer of the pipe
  // (this process's fd 2 and its children's) is gone.
  std::thread(RelayLines, relay[0]).detach();
  gpr_set_log_function(LogFromGrpc);
  return absl::OkStatus();
}

}  // namespace autotune::service
