// SubmitJob's call, served over the request's bytes (gRPC's raw callback
// API) so that its cost is bounded before anything is built: the caller's
// role is checked first, then the manifest's items are counted on the wire,
// and only a manifest within a job's problem limit is parsed. Parsed, a
// manifest of 2^20 items takes hundreds of MB and seconds of the daemon;
// counted, it costs a walk over its bytes.
//
// The rest is the synchronous call it replaces: the job is submitted
// (JobRunner::Submit, audited) and watched, each progress message written
// as the job makes it, until the job ends, the client leaves or the daemon
// stops. The watch blocks, so it runs on a thread of the call's own, not on
// one of gRPC's callback threads.
#ifndef AUTOTUNE_SERVICE_RPC_SUBMIT_JOB_CALL_H_
#define AUTOTUNE_SERVICE_RPC_SUBMIT_JOB_CALL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "grpcpp/grpcpp.h"
#include "proto/autotune.pb.h"

namespace autotune::service {

// The manifest items (SubmitJobRequest.spec.manifest.items) in a serialized
// SubmitJobRequest, counted by walking its wire format without building
// any message; a field that appears more than once is counted as protobuf
// would merge it. INVALID_ARGUMENT when the bytes are not a well-formed
// message.
absl::StatusOr<int64_t> CountManifestItemsOnWire(google::protobuf::io::ZeroCopyInputStream* in);

class SubmitJobCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // What the call does with a request that passed the checks of its bytes:
  // submits and watches, writing each progress message with `write` (false:
  // the client is gone) and asking `cancelled` between them.
  using Handler = std::function<grpc::Status(
      const v1::SubmitJobRequest& request, const std::function<bool(const v1::JobProgress&)>& write,
      const std::function<bool()>& cancelled)>;
  // What the call does with a request refused by its bytes (after
  // admission): the items counted (-1: not counted) and the refusal, for
  // the audit log.
  using Refused = std::function<void(int64_t items, const grpc::Status& refusal)>;
  // `admit` checks the caller's role (before any byte of the request is
  // read). `max_items` is the most manifest items a request may hold
  // (each item is at least one problem: the job's problem limit).
  // Starts the call's thread; the call deletes itself when gRPC is done
  // with it.
  SubmitJobCall(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                std::function<absl::Status()> admit, int64_t max_items, Handler handler,
                Refused refused);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void Run(grpc::ByteBuffer request);
  grpc::Status Serve(grpc::ByteBuffer* request);
  bool Write(const v1::JobProgress& progress);
  grpc::Status Refuse(int64_t items, grpc::Status refusal);

  grpc::CallbackServerContext* context_;
  std::function<absl::Status()> admit_;
  int64_t max_items_;
  Handler handler_;
  Refused refused_;
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  // The message being written: set by the call's thread while no write is
  // under way, read by gRPC from StartWrite until OnWriteDone.
  grpc::ByteBuffer pending_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = true;

  std::thread thread_;  // last member: started when the rest is ready
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_SUBMIT_JOB_CALL_H_
