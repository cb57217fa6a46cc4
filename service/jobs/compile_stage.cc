#include "service/jobs/compile_stage.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/timestamp.h"
#include "service/jobs/job_text.h"

namespace autotune::service {

void CompileStage::Run(const std::vector<CompileUnit>& units, CompileQueue* queue) {
  RunningJob& job = *context_.job;
  const auto report = [&](const CompileUnit& unit, const CompileEnd& end) {
    const bool failed = end.status != v1::OK;
    const bool compile_failed = failed && end.store_error.ok();
    v1::Measurement last;
    if (compile_failed) {
      last.set_family(unit.record->family.name());
      last.set_family_hash(unit.record->content_hash);
      *last.mutable_problem() = unit.problem;
      *last.mutable_config() = unit.config;
      last.set_status(end.status);
      last.set_phase(v1::COMPILE);
      last.set_detail(absl::StrCat(unit.config.params().empty() ? "reference kernel " : "",
                                   unit.name_expression, ": ", LogExcerpt(end.log)));
      last.set_job_id(job.id);
      last.set_measured_at(Timestamp());
    }
    job.CountCompile(end, last.detail());
    context_.publish(compile_failed ? &last : nullptr,
                     end.store_error.ok() ? "" : end.store_error.message());
  };
  CompileResults compiled = queue != nullptr
                                ? queue->Need(units, report)
                                : RunCompilePhase(units, *context_.store, *context_.compile_pool,
                                                  context_.compile_options, job.cancel, report);
  for (auto& [key, end] : compiled) context_.work->compiled[key] = std::move(end);
}

}  // namespace autotune::service
