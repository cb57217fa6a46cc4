// autotuned's config file (service/daemon_flags.h) through CLI11, as
// `autotuned --config FILE` reads it.
#include <cstdint>
#include <string>

#include "service/daemon_flags.h"
#include "tests/reliability/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = autotune::fuzz::WriteInput("autotuned.textproto", data, size);
  autotune::service::DaemonFlags flags;
  CLI::App app;
  autotune::service::AddDaemonFlags(app, flags);
  const char* argv[] = {"autotuned", "--config", path.c_str()};
  try {
    app.parse(3, argv);
    autotune::service::DaemonConfigOf(app);
  } catch (const CLI::ParseError& error) {
    autotune::service::ConfigErrorText(app, error, {"--config", path});
  }
  return 0;
}
