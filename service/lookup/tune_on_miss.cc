#include "service/lookup/tune_on_miss.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/problem.h"

namespace autotune::service {
namespace {

constexpr absl::Duration kWindow = absl::Hours(1);

v1::TuningRequestResult Result(v1::TuningRequestState state, std::string message,
                               std::string job_id = "") {
  v1::TuningRequestResult result;
  result.set_state(state);
  result.set_message(std::move(message));
  result.set_job_id(std::move(job_id));
  return result;
}

bool Ended(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

}  // namespace

TuneOnMiss::TuneOnMiss(cache::Store* store, JobRunner* jobs, TuneOnMissOptions options)
    : store_(store), jobs_(jobs), options_(std::move(options)) {}

absl::StatusOr<v1::RequestTuningResponse> TuneOnMiss::Request(
    const v1::RequestTuningRequest& request) {
  if (request.lookups_size() > options_.max_lookups) {
    return absl::InvalidArgumentError(absl::StrCat("lookups: ", request.lookups_size(),
                                                   " items, at most ", options_.max_lookups));
  }
  v1::RequestTuningResponse response;
  const auto refuse_all = [&](const std::string& why) {
    for (int i = 0; i < request.lookups_size(); ++i) {
      *response.add_results() = Result(v1::TUNING_REFUSED, why);
    }
    return response;
  };
  if (options_.max_problems_per_hour <= 0) {
    return refuse_all(absl::StrCat(
        "tune-on-miss is off on this daemon: its setting ",
        NameSetting("tune_on_miss_per_hour", absl::StrCat(options_.max_problems_per_hour),
                    options_.setting_hint),
        " allows no problems"));
  }
  absl::StatusOr<std::vector<worker::v1::DeviceInfo>> devices = jobs_->Devices();
  if (!devices.ok() || devices->empty()) {
    return refuse_all(
        absl::StrCat("this daemon cannot tune: ",
                     devices.ok() ? "it has no GPU" : std::string(devices.status().message())));
  }
  const std::string gpu = devices->front().name();

  struct Accepted {
    int index;
    std::string key;
  };
  std::vector<Accepted> accepted;
  std::map<std::string, int> first_in_request;  // key -> index of its first lookup
  std::vector<std::pair<int, int>> repeats;     // (lookup, the same one earlier)
  v1::JobSpec spec;
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.now();
  while (!accepted_.empty() && accepted_.front() <= now - kWindow) accepted_.pop_front();
  for (int i = 0; i < request.lookups_size(); ++i) {
    const v1::LookupRequest& lookup = request.lookups(i);
    v1::TuningRequestResult& result = *response.add_results();
    const std::string context = ProblemContext(lookup.family(), lookup.problem());
    absl::StatusOr<cache::FamilyRecord> family = store_->GetFamily(lookup.family());
    if (absl::IsNotFound(family.status())) {
      result = Result(v1::TUNING_REFUSED, std::string(family.status().message()));
      continue;
    }
    if (!family.ok()) {
      return absl::Status(family.status().code(),
                          absl::StrCat("lookups[", i, "].family: ", family.status().message()));
    }
    if (absl::Status valid = ValidateProblem(family->family, lookup.problem(),
                                             absl::StrCat("lookups[", i, "].problem"));
        !valid.ok()) {
      result = Result(v1::TUNING_REFUSED, std::string(valid.message()));
      continue;
    }
    if (!lookup.device().name().empty() && lookup.device().name() != gpu) {
      result =
          Result(v1::TUNING_REFUSED, absl::StrCat(context, ": this daemon tunes on ", gpu,
                                                  ", the lookup is for ", lookup.device().name()));
      continue;
    }
    absl::StatusOr<std::optional<v1::Entry>> entry =
        store_->FindEntry({.family = lookup.family(),
                           .family_hash = family->content_hash,
                           .problem = lookup.problem(),
                           .device = gpu});
    if (!entry.ok()) {
      return absl::Status(
          entry.status().code(),
          absl::StrCat(context, ": cannot read its entry: ", entry.status().message()));
    }
    if (entry->has_value()) {
      result = Result(v1::TUNING_ALREADY_TUNED,
                      absl::StrCat(context, ": tuned on ", gpu, " by job ", (*entry)->job_id()));
      continue;
    }
    const std::string key = absl::StrCat(lookup.family(), "\n", family->content_hash, "\n",
                                         FormatDims(lookup.problem().dims()), "\n",
                                         static_cast<int>(lookup.problem().dtype()));
    if (auto it = queued_.find(key); it != queued_.end()) {
      absl::StatusOr<v1::Job> job = store_->GetJob(it->second);
      if (job.ok() && !Ended(job->state())) {
        result = Result(v1::TUNING_ALREADY_QUEUED,
                        absl::StrCat(context, ": queued in job ", job->id()), job->id());
        continue;
      }
      if (!job.ok() && !absl::IsNotFound(job.status())) {
        return absl::Status(job.status().code(), absl::StrCat("cannot read job ", it->second, ": ",
                                                              job.status().message()));
      }
      queued_.erase(it);  // ended without an entry for it: it may be asked again
    }
    if (auto it = first_in_request.find(key); it != first_in_request.end()) {
      repeats.push_back({i, it->second});  // answered as its first, below
      continue;
    }
    if (static_cast<int>(accepted_.size() + accepted.size()) >= options_.max_problems_per_hour) {
      result =
          Result(v1::TUNING_RATE_LIMITED,
                 absl::StrCat(context, ": this daemon accepted ", options_.max_problems_per_hour,
                              " problems in the last hour, its limit; ask again later"));
      continue;
    }
    first_in_request[key] = i;
    accepted.push_back({i, key});
    v1::ManifestItem* item = spec.mutable_manifest()->add_items();
    item->set_family(lookup.family());
    for (const auto& [name, value] : lookup.problem().dims()) {
      v1::ManifestItem::DimValues* dim = item->add_dims();
      dim->set_name(name);
      dim->add_values(value);
    }
    item->add_dtypes(lookup.problem().dtype());
  }
  absl::StatusOr<v1::Job> job = absl::UnknownError("nothing to submit");
  if (!accepted.empty()) job = jobs_->Submit(spec, "tune-on-miss");
  for (const Accepted& a : accepted) {
    v1::TuningRequestResult& result = *response.mutable_results(a.index);
    const std::string context =
        ProblemContext(request.lookups(a.index).family(), request.lookups(a.index).problem());
    if (!job.ok()) {
      result = Result(v1::TUNING_REFUSED,
                      absl::StrCat(context, ": the job was refused: ", job.status().message()));
      continue;
    }
    result =
        Result(v1::TUNING_QUEUED, absl::StrCat(context, ": queued in job ", job->id()), job->id());
    queued_[a.key] = job->id();
    accepted_.push_back(now);
  }
  // A lookup repeated in this request shares the first one's fate.
  for (const auto& [repeat, first] : repeats) {
    *response.mutable_results(repeat) = response.results(first);
  }
  return response;
}

}  // namespace autotune::service
