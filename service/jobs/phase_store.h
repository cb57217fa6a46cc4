// What the screen and serial phases of a job share: storing their
// measurements with the first store error kept, and the device a
// measurement or an entry names.
//
//   PhaseStore store(job.record);
//   store.Record(measurement, /*count=*/true);  // every variant is recorded...
//   if (!store.error().ok()) ...                // ...then the phase fails once
#ifndef AUTOTUNE_SERVICE_JOBS_PHASE_STORE_H_
#define AUTOTUNE_SERVICE_JOBS_PHASE_STORE_H_

#include <functional>

#include "absl/status/status.h"
#include "proto/autotune.pb.h"
#include "proto/worker.pb.h"

namespace autotune::service {

class PhaseStore {
 public:
  // `record` stores a measurement, counts it in the job unless `count` is
  // false, announces it and returns the store's status.
  using RecordFn = std::function<absl::Status(const v1::Measurement& measurement, bool count)>;
  explicit PhaseStore(RecordFn record) : record_(std::move(record)) {}

  // Stores `m`. The first store error is kept ("cannot store a measurement:
  // <store's message>", the store's code); later measurements are still
  // recorded, so each variant is reported.
  void Record(const v1::Measurement& m, bool count);
  // Keeps `error` as the phase's store error unless one came first.
  void Fail(const absl::Status& error);
  const absl::Status& error() const { return error_; }

 private:
  RecordFn record_;
  absl::Status error_;
};

// The device of measurements and entries made on the GPU `info` describes.
v1::Device DeviceOf(const worker::v1::DeviceInfo& info);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_PHASE_STORE_H_
