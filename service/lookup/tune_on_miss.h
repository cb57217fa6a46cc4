// Tune-on-miss: problems whose lookups missed, queued as ordinary jobs so
// that the next start of the inference server that missed finds them.
//
//   TuneOnMiss tune(store, jobs, {.max_problems_per_hour = 20});
//   ASSIGN_OR_RETURN(v1::RequestTuningResponse answer, tune.Request(request));
//
// Each lookup of a request ends in one state (v1::TuningRequestState):
// REFUSED (unknown family, a problem the family rejects, a device this
// daemon does not tune on, no GPU here, tuning off), ALREADY_TUNED (the
// family's current version has an entry for it on this daemon's GPU model),
// ALREADY_QUEUED (a job this daemon submitted for it has not ended: the
// same problem asked by many servers is tuned once), RATE_LIMITED (more
// problems in the last hour than max_problems_per_hour), else QUEUED. The
// QUEUED problems of one request become one job, whose id each result
// names. A store error fails the call (never read as "not tuned").
//
// Thread-safe.
#ifndef AUTOTUNE_SERVICE_LOOKUP_TUNE_ON_MISS_H_
#define AUTOTUNE_SERVICE_LOOKUP_TUNE_ON_MISS_H_

#include <deque>
#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cache/store.h"
#include "proto/autotune.pb.h"
#include "service/defaults.h"
#include "service/jobs/job_options.h"
#include "service/jobs/job_runner.h"

namespace autotune::service {

struct TuneOnMissOptions {
  // Problems accepted per sliding hour; 0 turns tune-on-miss off. Errors
  // name it as the daemon's tune_on_miss_per_hour, with `setting_hint`'s
  // word (job_options.h).
  int max_problems_per_hour = kDefaultTuneOnMissPerHour;
  SettingHint setting_hint = nullptr;
  // Most lookups in one request.
  int max_lookups = 1000;
  // The clock (tests replace it).
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

class TuneOnMiss {
 public:
  TuneOnMiss(cache::Store* store, JobRunner* jobs, TuneOnMissOptions options);

  absl::StatusOr<v1::RequestTuningResponse> Request(const v1::RequestTuningRequest& request);

 private:
  cache::Store* store_;
  JobRunner* jobs_;
  const TuneOnMissOptions options_;
  absl::Mutex mu_;
  // Problem key -> the job queued for it (dropped once the job has ended).
  std::map<std::string, std::string> queued_ ABSL_GUARDED_BY(mu_);
  // When each problem accepted in the last hour was accepted, oldest first.
  std::deque<absl::Time> accepted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_LOOKUP_TUNE_ON_MISS_H_
