#include "service/autotune_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/bundle_parts.h"
#include "service/grpc_status.h"

namespace autotune::service {
namespace {

template <typename T>
grpc::Status Answer(absl::StatusOr<T> result, T* response) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace

AutotuneService::AutotuneService(const LookupResolver* resolver, CacheAdmin* admin, JobRunner* jobs,
                                 TuneOnMiss* tune_on_miss,
                                 std::function<void(v1::StatsResponse*)> fill_stats)
    : resolver_(resolver),
      admin_(admin),
      jobs_(jobs),
      tune_on_miss_(tune_on_miss),
      fill_stats_(std::move(fill_stats)) {}

grpc::Status AutotuneService::RequestTuning(grpc::ServerContext*,
                                            const v1::RequestTuningRequest* request,
                                            v1::RequestTuningResponse* response) {
  return Answer(tune_on_miss_->Request(*request), response);
}

grpc::ServerUnaryReactor* AutotuneService::Lookup(grpc::CallbackServerContext* context,
                                                  const v1::LookupRequest* request,
                                                  v1::LookupResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(Answer(resolver_->Lookup(*request), response));
  return reactor;
}

grpc::ServerUnaryReactor* AutotuneService::BatchLookup(grpc::CallbackServerContext* context,
                                                       const v1::BatchLookupRequest* request,
                                                       v1::BatchLookupResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(Answer(resolver_->BatchLookup(*request), response));
  return reactor;
}

grpc::Status AutotuneService::RegisterKernel(grpc::ServerContext*,
                                             const v1::RegisterKernelRequest* request,
                                             v1::RegisterKernelResponse* response) {
  return Answer(admin_->RegisterKernel(*request), response);
}

grpc::Status AutotuneService::ListKernels(grpc::ServerContext*, const v1::ListKernelsRequest*,
                                          v1::ListKernelsResponse* response) {
  return Answer(admin_->ListKernels(), response);
}

grpc::Status AutotuneService::SubmitJob(grpc::ServerContext* context,
                                        const v1::SubmitJobRequest* request,
                                        grpc::ServerWriter<v1::JobProgress>* writer) {
  absl::StatusOr<v1::Job> job = jobs_->Submit(request->spec());
  if (!job.ok()) return ToGrpcStatus(job.status());
  // The job goes on when the watcher leaves; GetJob and a new watch find it.
  absl::Status watched = jobs_->Watch(
      job->id(), [writer](const v1::JobProgress& progress) { return writer->Write(progress); },
      [context] { return context->IsCancelled(); });
  if (absl::IsCancelled(watched)) return grpc::Status::OK;
  return ToGrpcStatus(watched);
}

grpc::Status AutotuneService::GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                                     v1::Job* response) {
  return Answer(admin_->GetJob(*request), response);
}

grpc::Status AutotuneService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                                       v1::ListJobsResponse* response) {
  return Answer(admin_->ListJobs(*request), response);
}

grpc::Status AutotuneService::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                                        v1::Job* response) {
  if (request->id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "id is empty");
  }
  return Answer(jobs_->Cancel(request->id()), response);
}

grpc::Status AutotuneService::ListEntries(grpc::ServerContext*,
                                          const v1::ListEntriesRequest* request,
                                          v1::ListEntriesResponse* response) {
  return Answer(admin_->ListEntries(*request), response);
}

grpc::Status AutotuneService::GetEntry(grpc::ServerContext*, const v1::GetEntryRequest* request,
                                       v1::GetEntryResponse* response) {
  return Answer(admin_->GetEntry(*request), response);
}

grpc::Status AutotuneService::Invalidate(grpc::ServerContext*, const v1::InvalidateRequest* request,
                                         v1::InvalidateResponse* response) {
  return Answer(admin_->Invalidate(*request), response);
}

grpc::Status AutotuneService::Stats(grpc::ServerContext*, const v1::StatsRequest*,
                                    v1::StatsResponse* response) {
  absl::StatusOr<cache::StoreStats> stats = admin_->StoreStats();
  if (!stats.ok()) return ToGrpcStatus(stats.status());
  response->set_families(stats->families);
  response->set_entries(stats->entries);
  response->set_binaries(stats->binaries);
  response->set_binary_bytes(stats->binary_bytes);
  response->set_measurements(stats->measurements);
  response->set_jobs(stats->jobs);
  response->set_database_bytes(stats->database_bytes);
  response->set_schema_version(stats->schema_version);
  const LookupCounters& counters = resolver_->counters();
  response->set_lookups_exact(counters.exact.load(std::memory_order_relaxed));
  response->set_lookups_nearest(counters.nearest.load(std::memory_order_relaxed));
  response->set_lookups_miss(counters.miss.load(std::memory_order_relaxed));
  if (fill_stats_) fill_stats_(response);
  return grpc::Status::OK;
}

grpc::Status AutotuneService::Export(grpc::ServerContext* context, const v1::ExportRequest* request,
                                     grpc::ServerWriter<v1::ExportResponse>* writer) {
  absl::StatusOr<v1::CacheBundle> bundle = admin_->Export(*request);
  if (!bundle.ok()) return ToGrpcStatus(bundle.status());
  for (v1::CacheBundle& part : SplitBundle(*bundle)) {
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "export cancelled by the client");
    }
    v1::ExportResponse message;
    *message.mutable_part() = std::move(part);
    if (!writer->Write(message)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "client stopped reading the export");
    }
  }
  return grpc::Status::OK;
}

grpc::Status AutotuneService::Import(grpc::ServerContext* context,
                                     grpc::ServerReader<v1::ImportRequest>* reader,
                                     v1::ImportResponse* response) {
  v1::CacheBundle bundle;
  v1::ImportRequest message;
  bool first = true;
  bool replace = false;
  int64_t bytes = 0;
  while (reader->Read(&message)) {
    if (first) replace = message.replace();
    first = false;
    bytes += static_cast<int64_t>(message.ByteSizeLong());
    if (bytes > kMaxImportBytes) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("import larger than ", kMaxImportBytes,
                                       " bytes; split the bundle (nothing was imported)"));
    }
    MergeBundlePart(message.part(), &bundle);
  }
  if (context->IsCancelled()) {
    // A stream cut short must not import the parts that did arrive.
    return grpc::Status(grpc::StatusCode::CANCELLED, "import cancelled; nothing was imported");
  }
  if (first) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "import stream carried no parts (nothing was imported)");
  }
  return Answer(admin_->Import(bundle, replace), response);
}

grpc::Status AutotuneService::GarbageCollect(grpc::ServerContext*,
                                             const v1::GarbageCollectRequest* request,
                                             v1::GarbageCollectResponse* response) {
  return Answer(admin_->GarbageCollect(*request), response);
}

}  // namespace autotune::service
