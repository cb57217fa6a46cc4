#include "client/testing/fake_autotune_server.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace autotune::client::testing {

class FakeAutotuneServer::Service final : public v1::Autotune::Service {
 public:
  FakeAnswers answers;

  FakeCalls calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

  grpc::Status Lookup(grpc::ServerContext*, const v1::LookupRequest* request,
                      v1::LookupResponse* response) override {
    return Answer("Lookup", *request, &FakeCalls::lookup, answers.lookup, response);
  }
  grpc::Status BatchLookup(grpc::ServerContext*, const v1::BatchLookupRequest* request,
                           v1::BatchLookupResponse* response) override {
    return Answer("BatchLookup", *request, &FakeCalls::batch_lookup, answers.batch_lookup,
                  response);
  }
  grpc::Status ListKernels(grpc::ServerContext*, const v1::ListKernelsRequest*,
                           v1::ListKernelsResponse* response) override {
    return Answer("ListKernels", answers.kernels, response);
  }
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override {
    return Answer("ListJobs", *request, &FakeCalls::list_jobs, answers.jobs, response);
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                      v1::Job* response) override {
    return Answer("GetJob", *request, &FakeCalls::get_job, answers.job, response);
  }
  grpc::Status ListEntries(grpc::ServerContext*, const v1::ListEntriesRequest* request,
                           v1::ListEntriesResponse* response) override {
    return Answer("ListEntries", *request, &FakeCalls::list_entries, answers.entries, response);
  }
  grpc::Status GetEntry(grpc::ServerContext*, const v1::GetEntryRequest* request,
                        v1::GetEntryResponse* response) override {
    return Answer("GetEntry", *request, &FakeCalls::get_entry, answers.entry, response);
  }
  grpc::Status Invalidate(grpc::ServerContext*, const v1::InvalidateRequest* request,
                          v1::InvalidateResponse* response) override {
    return Answer("Invalidate", *request, &FakeCalls::invalidate, answers.invalidate, response);
  }
  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*,
                     v1::StatsResponse* response) override {
    return Answer("Stats", answers.stats, response);
  }
  grpc::Status GarbageCollect(grpc::ServerContext*, const v1::GarbageCollectRequest* request,
                              v1::GarbageCollectResponse* response) override {
    return Answer("GarbageCollect", *request, &FakeCalls::gc, answers.gc, response);
  }

  grpc::Status GetBinaries(grpc::ServerContext*, const v1::GetBinariesRequest* request,
                           v1::GetBinariesResponse* response) override {
    size_t call = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      RecordLocked("GetBinaries");
      calls_.get_binaries.push_back(*request);
      call = calls_.get_binaries.size();
    }
    if (!answers.status.ok()) return answers.status;
    if (answers.get_binaries_answered >= 0 &&
        call > static_cast<size_t>(answers.get_binaries_answered)) {
      return answers.get_binaries_failure;
    }
    for (const std::string& sha : request->sha256()) {
      auto it = answers.binaries.find(sha);
      if (it == answers.binaries.end()) {
        response->add_missing(sha);
      } else {
        (*response->mutable_binaries())[sha] = it->second;
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                         grpc::ServerWriter<v1::JobProgress>* writer) override {
    Record("SubmitJob", *request, &FakeCalls::submit_job);
    if (!answers.status.ok()) return answers.status;
    for (const v1::JobProgress& progress : answers.progress) writer->Write(progress);
    return answers.submit_job_status;
  }

  grpc::Status Export(grpc::ServerContext*, const v1::ExportRequest* request,
                      grpc::ServerWriter<v1::ExportResponse>* writer) override {
    Record("Export", *request, &FakeCalls::export_request);
    if (!answers.status.ok()) return answers.status;
    for (const v1::ExportResponse& part : answers.export_parts) writer->Write(part);
    return grpc::Status::OK;
  }

  grpc::Status Import(grpc::ServerContext*, grpc::ServerReader<v1::ImportRequest>* reader,
                      v1::ImportResponse* response) override {
    std::vector<v1::ImportRequest> parts;
    v1::ImportRequest part;
    while (reader->Read(&part)) parts.push_back(part);
    {
      std::lock_guard<std::mutex> lock(mu_);
      RecordLocked("Import");
      calls_.import_parts = std::move(parts);
    }
    if (!answers.status.ok()) return answers.status;
    *response = answers.import;
    return grpc::Status::OK;
  }

 private:
  void RecordLocked(const char* method) { calls_.methods.push_back(method); }

  template <typename Request>
  void Record(const char* method, const Request& request, Request FakeCalls::*slot) {
    std::lock_guard<std::mutex> lock(mu_);
    RecordLocked(method);
    calls_.*slot = request;
  }

  template <typename Request, typename Response>
  grpc::Status Answer(const char* method, const Request& request, Request FakeCalls::*slot,
                      const Response& answer, Response* response) {
    Record(method, request, slot);
    if (!answers.status.ok()) return answers.status;
    *response = answer;
    return grpc::Status::OK;
  }

  template <typename Response>
  grpc::Status Answer(const char* method, const Response& answer, Response* response) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      RecordLocked(method);
    }
    if (!answers.status.ok()) return answers.status;
    *response = answer;
    return grpc::Status::OK;
  }

  mutable std::mutex mu_;
  FakeCalls calls_;
};

FakeAutotuneServer::FakeAutotuneServer() : service_(std::make_unique<Service>()) {}

FakeAutotuneServer::~FakeAutotuneServer() {
  if (server_ != nullptr) server_->Shutdown();
  if (!socket_path_.empty()) unlink(socket_path_.c_str());
  if (!directory_.empty()) rmdir(directory_.c_str());
}

absl::Status FakeAutotuneServer::Start(std::string socket_path) {
  if (socket_path.empty()) {
    char directory[] = "/tmp/autotune-client-test-XXXXXX";
    if (mkdtemp(directory) == nullptr) {
      return PosixError("mkdtemp", errno);
    }
    directory_ = directory;
    socket_path = absl::StrCat(directory_, "/autotune.sock");
  }
  socket_path_ = std::move(socket_path);
  address_ = absl::StrCat("unix://", socket_path_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) return absl::InternalError(absl::StrCat("cannot listen on ", address_));
  return absl::OkStatus();
}

FakeAnswers& FakeAutotuneServer::answers() { return service_->answers; }

FakeCalls FakeAutotuneServer::calls() const { return service_->calls(); }

}  // namespace autotune::client::testing
