#include "service/rpc/autotune_service.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/bundle_parts.h"
#include "proto/problem.h"
#include "service/defaults.h"
#include "service/rpc/grpc_status.h"
#include "service/rpc/submit_job_call.h"

namespace autotune::service {
namespace {

template <typename T>
grpc::Status Answer(absl::StatusOr<T> result, T* response) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

// The caller's identity when it may call `method`; the refusal otherwise.
#define AUTHORIZE_OR_RETURN(caller, context, method)           \
  absl::StatusOr<Caller> caller = Admit(*(context), (method)); \
  if (!caller.ok()) return ToGrpcStatus(caller.status())

}  // namespace

AutotuneService::AutotuneService(const LookupResolver* resolver, CacheAdmin* admin, JobRunner* jobs,
                                 TuneOnMiss* tune_on_miss, const Admission* admission,
                                 AuditLog* audit, Metrics* metrics,
                                 std::function<void(v1::StatsResponse*)> fill_stats,
                                 LoginLinkMaker login_link)
    : resolver_(resolver),
      admin_(admin),
      jobs_(jobs),
      tune_on_miss_(tune_on_miss),
      admission_(admission),
      audit_(audit),
      metrics_(metrics),
      fill_stats_(std::move(fill_stats)),
      login_link_(std::move(login_link)) {}

void AutotuneService::Audit(const Caller& caller, const std::string& method,
                            const std::string& target, const absl::Status& result,
                            const std::string& detail) {
  if (audit_ != nullptr) audit_->Record(caller, method, target, result, detail);
}

grpc::Status AutotuneService::GetBinaries(grpc::ServerContext* context,
                                          const v1::GetBinariesRequest* request,
                                          v1::GetBinariesResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "GetBinaries");
  return Answer(resolver_->GetBinaries(*request), response);
}

grpc::Status AutotuneService::RequestTuning(grpc::ServerContext* context,
                                            const v1::RequestTuningRequest* request,
                                            v1::RequestTuningResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "RequestTuning");
  absl::StatusOr<v1::RequestTuningResponse> result = tune_on_miss_->Request(*request);
  std::string detail;
  if (result.ok()) {
    int queued = 0;
    for (const v1::TuningRequestResult& item : result->results()) {
      queued += item.state() == v1::TUNING_QUEUED ? 1 : 0;
    }
    detail = absl::StrCat(queued, " queued");
  }
  Audit(*caller, "RequestTuning", absl::StrCat(request->lookups_size(), " problems"),
        result.status(), detail);
  return Answer(std::move(result), response);
}

grpc::ServerUnaryReactor* AutotuneService::Lookup(grpc::CallbackServerContext* context,
                                                  const v1::LookupRequest* request,
                                                  v1::LookupResponse* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<Caller> caller = Admit(*context, "Lookup");
  reactor->Finish(caller.ok() ? Answer(resolver_->Lookup(*request), response)
                              : ToGrpcStatus(caller.status()));
  if (metrics_ != nullptr) metrics_->ObserveLookup("Lookup", absl::Now() - start);
  return reactor;
}

grpc::ServerUnaryReactor* AutotuneService::BatchLookup(grpc::CallbackServerContext* context,
                                                       const v1::BatchLookupRequest* request,
                                                       v1::BatchLookupResponse* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<Caller> caller = Admit(*context, "BatchLookup");
  reactor->Finish(caller.ok() ? Answer(resolver_->BatchLookup(*request), response)
                              : ToGrpcStatus(caller.status()));
  if (metrics_ != nullptr) metrics_->ObserveLookup("BatchLookup", absl::Now() - start);
  return reactor;
}

grpc::Status AutotuneService::RegisterKernel(grpc::ServerContext* context,
                                             const v1::RegisterKernelRequest* request,
                                             v1::RegisterKernelResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "RegisterKernel");
  absl::StatusOr<v1::RegisterKernelResponse> result = admin_->RegisterKernel(*request);
  Audit(*caller, "RegisterKernel",
        absl::StrCat(request->family().name(), request->replace() ? " (replace)" : ""),
        result.status(),
        result.ok() ? absl::StrCat(result->changed() ? "new version " : "unchanged ",
                                   result->kernel().content_hash())
                    : "");
  return Answer(std::move(result), response);
}

grpc::Status AutotuneService::CreateLoginLink(grpc::ServerContext* context,
                                              const v1::CreateLoginLinkRequest*,
                                              v1::CreateLoginLinkResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "CreateLoginLink");
  absl::StatusOr<v1::CreateLoginLinkResponse> result =
      absl::StartsWith(caller->id, "uid:")
          ? login_link_(*caller)
          : absl::FailedPreconditionError(
                absl::StrCat("a login link is for a caller of the daemon's Unix socket; ",
                             caller->id, " holds its credentials already"));
  Audit(*caller, "CreateLoginLink", RoleName(caller->role), result.status(),
        result.ok() ? absl::StrCat("expires ", result->expires_at()) : "");
  return Answer(std::move(result), response);
}

grpc::Status AutotuneService::UnregisterKernel(grpc::ServerContext* context,
                                               const v1::UnregisterKernelRequest* request,
                                               v1::UnregisterKernelResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "UnregisterKernel");
  absl::StatusOr<v1::UnregisterKernelResponse> result = admin_->UnregisterKernel(*request);
  Audit(*caller, "UnregisterKernel",
        absl::StrCat(request->name(), request->invalidate() ? " (invalidate)" : ""),
        result.status(),
        result.ok() ? absl::StrCat(result->versions_removed(), " versions, ",
                                   result->entries_removed(), " entries")
                    : "");
  return Answer(std::move(result), response);
}

grpc::Status AutotuneService::ListKernels(grpc::ServerContext* context,
                                          const v1::ListKernelsRequest*,
                                          v1::ListKernelsResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "ListKernels");
  return Answer(admin_->ListKernels(), response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* AutotuneService::SubmitJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  auto caller = std::make_shared<absl::StatusOr<Caller>>(absl::UnknownError("not admitted"));
  auto admit = [this, context, caller] {
    *caller = Admit(*context, "SubmitJob");
    return caller->status();
  };
  auto handler = [this, caller](const v1::SubmitJobRequest& submitted,
                                const std::function<bool(const v1::JobProgress&)>& write,
                                const std::function<bool()>& cancelled) {
    absl::StatusOr<v1::Job> job = jobs_->Submit(submitted.spec(), (*caller)->id);
    Audit(**caller, "SubmitJob",
          absl::StrCat(submitted.spec().manifest().items_size(), " manifest items"), job.status(),
          job.ok() ? absl::StrCat("job ", job->id()) : "");
    if (!job.ok()) return ToGrpcStatus(job.status());
    // The job goes on when the watcher leaves; GetJob and a new watch find it.
    absl::Status watched = jobs_->Watch(job->id(), write, cancelled);
    if (absl::IsCancelled(watched)) return grpc::Status::OK;
    return ToGrpcStatus(watched);
  };
  auto refused = [this, caller](int64_t items, const grpc::Status& refusal) {
    Audit(
        **caller, "SubmitJob",
        items < 0 ? std::string("a malformed request") : absl::StrCat(items, " manifest items"),
        absl::Status(static_cast<absl::StatusCode>(refusal.error_code()), refusal.error_message()),
        "");
  };
  return new SubmitJobCall(context, request, std::move(admit), kDefaultMaxJobProblems,
                           std::move(handler), std::move(refused));
}

grpc::Status AutotuneService::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                     v1::Job* response) {
  AUTHORIZE_OR_RETURN(caller, context, "GetJob");
  return Answer(admin_->GetJob(*request), response);
}

grpc::Status AutotuneService::ListJobs(grpc::ServerContext* context,
                                       const v1::ListJobsRequest* request,
                                       v1::ListJobsResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "ListJobs");
  return Answer(admin_->ListJobs(*request), response);
}

grpc::Status AutotuneService::CancelJob(grpc::ServerContext* context,
                                        const v1::CancelJobRequest* request, v1::Job* response) {
  AUTHORIZE_OR_RETURN(caller, context, "CancelJob");
  absl::StatusOr<v1::Job> result = absl::InvalidArgumentError("id is empty");
  if (!request->id().empty()) {
    absl::Status allowed;
    if (caller->role < Role::kAdmin) {
      // A tuner cancels only what it submitted.
      v1::GetJobRequest get;
      get.set_id(request->id());
      absl::StatusOr<v1::Job> job = admin_->GetJob(get);
      if (!job.ok()) {
        allowed = job.status();
      } else if (job->submitted_by() != caller->id) {
        allowed = absl::PermissionDeniedError(absl::StrCat(
            "job ", request->id(), " was submitted by ",
            job->submitted_by().empty() ? std::string("someone else") : job->submitted_by(),
            "; only its submitter or an admin may cancel it"));
      }
    }
    result = allowed.ok() ? jobs_->Cancel(request->id()) : absl::StatusOr<v1::Job>(allowed);
  }
  Audit(*caller, "CancelJob", absl::StrCat("job ", request->id()), result.status());
  return Answer(std::move(result), response);
}

grpc::Status AutotuneService::ListEntries(grpc::ServerContext* context,
                                          const v1::ListEntriesRequest* request,
                                          v1::ListEntriesResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "ListEntries");
  return Answer(admin_->ListEntries(*request), response);
}

grpc::Status AutotuneService::GetEntry(grpc::ServerContext* context,
                                       const v1::GetEntryRequest* request,
                                       v1::GetEntryResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "GetEntry");
  return Answer(admin_->GetEntry(*request), response);
}

grpc::Status AutotuneService::Invalidate(grpc::ServerContext* context,
                                         const v1::InvalidateRequest* request,
                                         v1::InvalidateResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "Invalidate");
  return Answer(InvalidateAudited(*admin_, audit_, *caller, *request, /*via=*/""), response);
}

grpc::Status AutotuneService::Stats(grpc::ServerContext* context, const v1::StatsRequest*,
                                    v1::StatsResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "Stats");
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
  response->set_lookups_predicted(counters.predicted.load(std::memory_order_relaxed));
  response->set_lookups_miss(counters.miss.load(std::memory_order_relaxed));
  if (fill_stats_) fill_stats_(response);
  return grpc::Status::OK;
}

grpc::Status AutotuneService::Export(grpc::ServerContext* context, const v1::ExportRequest* request,
                                     grpc::ServerWriter<v1::ExportResponse>* writer) {
  AUTHORIZE_OR_RETURN(caller, context, "Export");
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
  AUTHORIZE_OR_RETURN(caller, context, "Import");
  // Each import buffers its bundle: only so many at once.
  if (imports_.fetch_add(1) >= kMaxConcurrentImports) {
    imports_.fetch_sub(1);
    return ToGrpcStatus(absl::ResourceExhaustedError(
        absl::StrCat(kMaxConcurrentImports,
                     " imports are running, the most at once; try again "
                     "when one has ended (nothing was imported)")));
  }
  absl::Cleanup one_less = [this] { imports_.fetch_sub(1); };
  v1::CacheBundle bundle;
  v1::ImportRequest message;
  bool first = true;
  bool replace = false;
  bool keep_better = false;
  int64_t bytes = 0;
  absl::StatusOr<v1::ImportResponse> result = absl::UnknownError("not imported");
  while (result.status().code() == absl::StatusCode::kUnknown && reader->Read(&message)) {
    if (first) {
      replace = message.replace();
      keep_better = message.keep_better();
    }
    first = false;
    bytes += static_cast<int64_t>(message.ByteSizeLong());
    if (bytes > kMaxImportBytes) {
      result = absl::ResourceExhaustedError(
          absl::StrCat("import larger than ", kMaxImportBytes,
                       " bytes; split the bundle (nothing was imported)"));
    }
    MergeBundlePart(message.part(), &bundle);
  }
  if (result.status().code() != absl::StatusCode::kUnknown) {
    // refused above
  } else if (context->IsCancelled()) {
    // A stream cut short must not import the parts that did arrive.
    result = absl::CancelledError("import cancelled; nothing was imported");
  } else if (first) {
    result = absl::InvalidArgumentError("import stream carried no parts (nothing was imported)");
  } else if (replace && keep_better) {
    result = absl::InvalidArgumentError(
        "replace and keep_better are set together; choose one (nothing was imported)");
  } else {
    // Adding or replacing a family is an admin's call, as RegisterKernel.
    const std::string families_refused =
        caller->role >= RequiredRole("RegisterKernel").value_or(Role::kAdmin)
            ? ""
            : absl::StrCat("adding or replacing a family needs the admin role; ", caller->id,
                           " has ", RoleName(caller->role));
    result = admin_->Import(bundle,
                            replace       ? cache::Store::Merge::kReplace
                            : keep_better ? cache::Store::Merge::kKeepBetter
                                          : cache::Store::Merge::kKeepExisting,
                            families_refused);
  }
  std::vector<std::string> families;
  for (const v1::FamilyRecord& record : bundle.families()) {
    families.push_back(absl::StrCat(record.family().name(), "@",
                                    FamilyContentHash(record.family()).substr(0, 12)));
  }
  Audit(*caller, "Import",
        absl::StrCat(
            bundle.entries_size(), " entries, ", bundle.binaries_size(), " binaries",
            families.empty() ? "" : absl::StrCat(", families ", absl::StrJoin(families, " ")),
            replace ? " (replace)" : "", keep_better ? " (keep better)" : ""),
        result.status(),
        result.ok() ? absl::StrCat(result->entries(), " entries imported, ",
                                   result->entries_skipped(), " skipped")
                    : "");
  return Answer(std::move(result), response);
}

grpc::Status AutotuneService::Backup(grpc::ServerContext* context, const v1::BackupRequest* request,
                                     v1::BackupResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "Backup");
  absl::StatusOr<v1::BackupResponse> result = admin_->Backup(*request);
  Audit(
      *caller, "Backup", request->path(), result.status(),
      result.ok() ? absl::StrCat(result->bytes(), " bytes, ", result->entries(), " entries") : "");
  return Answer(std::move(result), response);
}

grpc::Status AutotuneService::GarbageCollect(grpc::ServerContext* context,
                                             const v1::GarbageCollectRequest* request,
                                             v1::GarbageCollectResponse* response) {
  AUTHORIZE_OR_RETURN(caller, context, "GarbageCollect");
  absl::StatusOr<v1::GarbageCollectResponse> result = admin_->GarbageCollect(*request);
  Audit(*caller, "GarbageCollect", request->dry_run() ? "dry run" : "unreferenced binaries",
        result.status(),
        result.ok() ? absl::StrCat(result->binaries_removed(), " binaries removed") : "");
  return Answer(std::move(result), response);
}

}  // namespace autotune::service
