// The gRPC face of the daemon: a thin adapter from autotune.v1.Autotune
// calls to the LookupResolver and CacheAdmin core objects, each call
// admitted first (service/rpc/admission.h: refused while the daemon drains,
// else by the caller's role) and each mutating one audited
// (service/rpc/audit_log.h). No storage code here; errors go through
// ToGrpcStatus().
//
// Lookup and BatchLookup use the callback API (they are the hot path that
// inference servers hit at start-up); SubmitJob the raw callback API (its
// request is counted before it is parsed: submit_job_call.h); the rest the
// synchronous API.
#ifndef AUTOTUNE_SERVICE_RPC_AUTOTUNE_SERVICE_H_
#define AUTOTUNE_SERVICE_RPC_AUTOTUNE_SERVICE_H_

#include <atomic>
#include <functional>

#include "proto/autotune.grpc.pb.h"
#include "service/jobs/job_runner.h"
#include "service/lookup/cache_admin.h"
#include "service/lookup/lookup_resolver.h"
#include "service/lookup/tune_on_miss.h"
#include "service/rpc/admission.h"
#include "service/rpc/audit_log.h"
#include "service/rpc/auth.h"
#include "service/rpc/metrics.h"

namespace autotune::service {

using AutotuneServiceBase =
    v1::Autotune::WithCallbackMethod_Lookup<v1::Autotune::WithCallbackMethod_BatchLookup<
        v1::Autotune::WithRawCallbackMethod_SubmitJob<v1::Autotune::Service>>>;

class AutotuneService final : public AutotuneServiceBase {
 public:
  // `fill_stats` adds what only the server knows (uptime, addresses).
  // Every call is admitted by `admission` before anything else; mutating calls are recorded in
  // `audit` (may be null: none); lookups are timed into `metrics` (may be null).
  // `login_link` makes the admin page's login link for a caller
  // (CreateLoginLink).
  using LoginLinkMaker =
      std::function<absl::StatusOr<v1::CreateLoginLinkResponse>(const Caller& caller)>;
  AutotuneService(const LookupResolver* resolver, CacheAdmin* admin, JobRunner* jobs,
                  TuneOnMiss* tune_on_miss, const Admission* admission, AuditLog* audit,
                  Metrics* metrics, std::function<void(v1::StatsResponse*)> fill_stats,
                  LoginLinkMaker login_link);

  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const v1::LookupRequest* request,
                                   v1::LookupResponse* response) override;
  grpc::ServerUnaryReactor* BatchLookup(grpc::CallbackServerContext* context,
                                        const v1::BatchLookupRequest* request,
                                        v1::BatchLookupResponse* response) override;

  grpc::Status GetBinaries(grpc::ServerContext* context, const v1::GetBinariesRequest* request,
                           v1::GetBinariesResponse* response) override;
  grpc::Status RequestTuning(grpc::ServerContext* context, const v1::RequestTuningRequest* request,
                             v1::RequestTuningResponse* response) override;
  grpc::Status RegisterKernel(grpc::ServerContext* context,
                              const v1::RegisterKernelRequest* request,
                              v1::RegisterKernelResponse* response) override;
  // Only for a caller of a Unix socket (one known by its uid): a token
  // holder has its token already. The link's token has the caller's role.
  grpc::Status CreateLoginLink(grpc::ServerContext* context,
                               const v1::CreateLoginLinkRequest* request,
                               v1::CreateLoginLinkResponse* response) override;
  grpc::Status UnregisterKernel(grpc::ServerContext* context,
                                const v1::UnregisterKernelRequest* request,
                                v1::UnregisterKernelResponse* response) override;
  grpc::Status ListKernels(grpc::ServerContext* context, const v1::ListKernelsRequest* request,
                           v1::ListKernelsResponse* response) override;
  // Refuses a manifest of more items than a job's problems before parsing
  // it; then submits the job and streams its progress.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* SubmitJob(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status ListEntries(grpc::ServerContext* context, const v1::ListEntriesRequest* request,
                           v1::ListEntriesResponse* response) override;
  grpc::Status GetEntry(grpc::ServerContext* context, const v1::GetEntryRequest* request,
                        v1::GetEntryResponse* response) override;
  grpc::Status Invalidate(grpc::ServerContext* context, const v1::InvalidateRequest* request,
                          v1::InvalidateResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;
  grpc::Status Export(grpc::ServerContext* context, const v1::ExportRequest* request,
                      grpc::ServerWriter<v1::ExportResponse>* writer) override;
  grpc::Status Import(grpc::ServerContext* context, grpc::ServerReader<v1::ImportRequest>* reader,
                      v1::ImportResponse* response) override;
  grpc::Status Backup(grpc::ServerContext* context, const v1::BackupRequest* request,
                      v1::BackupResponse* response) override;
  grpc::Status GarbageCollect(grpc::ServerContext* context,
                              const v1::GarbageCollectRequest* request,
                              v1::GarbageCollectResponse* response) override;

 private:
  absl::StatusOr<Caller> Admit(const grpc::ServerContextBase& context,
                               absl::string_view method) const {
    return admission_->Admit(FromContext(context), method);
  }

  const LookupResolver* resolver_;
  CacheAdmin* admin_;
  JobRunner* jobs_;
  TuneOnMiss* tune_on_miss_;
  const Admission* admission_;
  std::atomic<int> imports_{0};  // Import calls running now
  AuditLog* audit_;
  Metrics* metrics_;  // null: none
  std::function<void(v1::StatsResponse*)> fill_stats_;
  LoginLinkMaker login_link_;

  void Audit(const Caller& caller, const std::string& method, const std::string& target,
             const absl::Status& result, const std::string& detail = "");
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_AUTOTUNE_SERVICE_H_
