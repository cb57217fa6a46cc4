// Test double of autotuned for the client's unit tests: a real gRPC server in
// the test process, on a unix socket in a fresh temporary directory, that
// answers with canned responses and records what it was sent.
//
//   FakeAutotuneServer server;
//   ASSERT_OK(server.Start());
//   server.answers().lookup.set_match(v1::EXACT);
//   ... Client with address server.address() ...
//   EXPECT_EQ(server.calls().lookup.family(), "flash_attn");
#ifndef AUTOTUNE_CLIENT_TESTING_FAKE_AUTOTUNE_SERVER_H_
#define AUTOTUNE_CLIENT_TESTING_FAKE_AUTOTUNE_SERVER_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/server.h"
#include "proto/autotune.grpc.pb.h"

namespace autotune::client::testing {

// What the fake answers. When `status` is not OK every call fails with it.
struct FakeAnswers {
  grpc::Status status;
  v1::LookupResponse lookup;
  v1::BatchLookupResponse batch_lookup;
  v1::ListKernelsResponse kernels;
  std::vector<v1::JobProgress> progress;  // SubmitJob streams these, then ends
  grpc::Status submit_job_status;         // how SubmitJob ends after the stream
  v1::ListJobsResponse jobs;
  v1::Job job;  // GetJob
  v1::ListEntriesResponse entries;
  v1::GetEntryResponse entry;
  v1::InvalidateResponse invalidate;
  v1::StatsResponse stats;
  std::vector<v1::ExportResponse> export_parts;
  v1::ImportResponse import;
  v1::GarbageCollectResponse gc;
  // GetBinaries sends those of these (sha256 -> cubin) it is asked for and
  // lists the others as missing; after `get_binaries_answered` calls (-1:
  // never) it fails with `get_binaries_failure`.
  std::map<std::string, std::string> binaries;
  int get_binaries_answered = -1;
  grpc::Status get_binaries_failure{grpc::StatusCode::DATA_LOSS, "binary is corrupt"};
};

// What the fake was sent: the last request of each call, every Import part.
struct FakeCalls {
  std::vector<std::string> methods;  // in order
  v1::LookupRequest lookup;
  v1::BatchLookupRequest batch_lookup;
  v1::SubmitJobRequest submit_job;
  v1::ListJobsRequest list_jobs;
  v1::GetJobRequest get_job;
  v1::ListEntriesRequest list_entries;
  v1::GetEntryRequest get_entry;
  v1::InvalidateRequest invalidate;
  v1::ExportRequest export_request;
  std::vector<v1::ImportRequest> import_parts;
  std::vector<v1::GetBinariesRequest> get_binaries;  // every call
  v1::GarbageCollectRequest gc;
};

class FakeAutotuneServer {
 public:
  FakeAutotuneServer();
  ~FakeAutotuneServer();

  // Listens on unix://<socket_path>, by default <a temp dir>/autotune.sock.
  // The server accepts messages up to 64 MiB, so that a part holding one
  // large binary gets through.
  absl::Status Start(std::string socket_path = "");
  const std::string& address() const { return address_; }

  // Set answers before the calls that use them.
  FakeAnswers& answers();
  FakeCalls calls() const;

 private:
  class Service;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string directory_;
  std::string socket_path_;
  std::string address_;
};

}  // namespace autotune::client::testing

#endif  // AUTOTUNE_CLIENT_TESTING_FAKE_AUTOTUNE_SERVER_H_
