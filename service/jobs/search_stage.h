// The search stage of a measuring job: each problem's search (search.h)
// proposes a batch; what the batches need is compiled (CompileStage, through
// a CompileQueue that compiles ahead what the searches expect next), then
// screened (screen_phase.h), the GPUs in parallel, one problem per GPU at a
// time; the searches learn the results; until every search is done or out
// of its time. An exhaustive search proposes its whole space at once: one
// compile round, one screen.
//
//   ScreenedProblems screened = SearchStage(context).Run();
//   if (!context.job->cancel) SerialStage(context).Run(std::move(screened));
#ifndef AUTOTUNE_SERVICE_JOBS_SEARCH_STAGE_H_
#define AUTOTUNE_SERVICE_JOBS_SEARCH_STAGE_H_

#include <vector>

#include "proto/autotune.pb.h"
#include "service/jobs/screen_phase.h"
#include "service/jobs/stage_context.h"

namespace autotune::service {

// What the search stage hands the serial stage, in plan order.
struct ScreenedProblems {
  std::vector<ScreenResult> screens;       // every batch's screens, added up
  std::vector<v1::SearchReport> searches;  // what each problem's search did
};

class SearchStage {
 public:
  // `context.gpus` is set.
  explicit SearchStage(const StageContext& context) : context_(context) {}

  // Every round until the searches are done. Incomplete, and not to be
  // used, when the job is cancelled.
  ScreenedProblems Run();

 private:
  class Rounds;
  const StageContext& context_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_SEARCH_STAGE_H_
