// For tests: sets (or, with std::nullopt, unsets) an environment variable
// for one scope, and puts back what was there before when it goes. Processes
// started meanwhile (workers, daemons) inherit the value.
//
//   ScopedEnv slow("FAKE_WORKER_SLEEP_MS", "40");
//   ScopedEnv no_nvrtc("AUTOTUNE_NVRTC", std::nullopt);
//
// Not thread-safe: the environment is the process's (setenv(3)).
#ifndef AUTOTUNE_BASE_SCOPED_ENV_H_
#define AUTOTUNE_BASE_SCOPED_ENV_H_

#include <stdlib.h>

#include <optional>
#include <string>

namespace autotune::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* before = getenv(name); before != nullptr) previous_ = before;
    if (value.has_value()) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (previous_.has_value()) {
      setenv(name_, previous_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

}  // namespace autotune::testing

#endif  // AUTOTUNE_BASE_SCOPED_ENV_H_
