#include "service/jobs/phase_store.h"

#include "absl/strings/str_cat.h"

namespace autotune::service {

void PhaseStore::Record(const v1::Measurement& m, bool count) {
  absl::Status stored = record_(m, count);
  if (!stored.ok()) {
    Fail(absl::Status(stored.code(),
                      absl::StrCat("cannot store a measurement: ", stored.message())));
  }
}

void PhaseStore::Fail(const absl::Status& error) {
  if (error_.ok()) error_ = error;
}

v1::Device DeviceOf(const worker::v1::DeviceInfo& info) {
  v1::Device device;
  device.set_name(info.name());
  device.set_compute_capability(info.compute_capability());
  device.set_sm_count(info.sm_count());
  return device;
}

}  // namespace autotune::service
