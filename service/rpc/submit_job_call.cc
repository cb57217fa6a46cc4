#include "service/rpc/submit_job_call.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "service/rpc/grpc_status.h"

namespace autotune::service {

namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// The field number of SubmitJobRequest.spec, JobSpec.manifest and
// Manifest.items: the path counted.
constexpr int kSpecField = v1::SubmitJobRequest::kSpecFieldNumber;
constexpr int kManifestField = v1::JobSpec::kManifestFieldNumber;
constexpr int kItemsField = v1::Manifest::kItemsFieldNumber;

// Walks one message of `length` bytes (-1: to the end of the input) at
// nesting `depth` of the path spec → manifest → items, adding the items
// found to `*items`. False when the bytes are not a well-formed message.
bool Walk(CodedInputStream* in, int depth, int64_t* items) {
  static constexpr int kPath[] = {kSpecField, kManifestField, kItemsField};
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) return in->ConsumedEntireMessage();
    const int field = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    const bool on_path = field == kPath[depth] && WireFormatLite::GetTagWireType(tag) ==
                                                      WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if (!on_path) {
      if (!WireFormatLite::SkipField(in, tag)) return false;
      continue;
    }
    uint32_t length = 0;
    if (!in->ReadVarint32(&length)) return false;
    if (depth == 2) {
      ++*items;
      if (!in->Skip(static_cast<int>(length))) return false;
      continue;
    }
    const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
    if (!Walk(in, depth + 1, items)) return false;
    if (in->BytesUntilLimit() != 0) return false;
    in->PopLimit(limit);
  }
}

}  // namespace

absl::StatusOr<int64_t> CountManifestItemsOnWire(google::protobuf::io::ZeroCopyInputStream* in) {
  CodedInputStream coded(in);
  coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
  int64_t items = 0;
  if (!Walk(&coded, 0, &items) || !coded.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError("the request is not a well-formed SubmitJobRequest");
  }
  return items;
}

SubmitJobCall::SubmitJobCall(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                             std::function<absl::Status()> admit, int64_t max_items,
                             Handler handler, Refused refused)
    : context_(context),
      admit_(std::move(admit)),
      max_items_(max_items),
      handler_(std::move(handler)),
      refused_(std::move(refused)),
      thread_([this, copy = *request]() mutable { Run(std::move(copy)); }) {}

void SubmitJobCall::Run(grpc::ByteBuffer request) { Finish(Serve(&request)); }

grpc::Status SubmitJobCall::Serve(grpc::ByteBuffer* request) {
  if (absl::Status admitted = admit_(); !admitted.ok()) return ToGrpcStatus(admitted);
  {
    grpc::ProtoBufferReader reader(request);
    absl::StatusOr<int64_t> items = CountManifestItemsOnWire(&reader);
    if (!items.ok()) return Refuse(-1, ToGrpcStatus(items.status()));
    if (*items > max_items_) {
      // Each item is a problem at least: refused as the plan would refuse
      // the problems it counts, without building one.
      return Refuse(
          *items,
          grpc::Status(
              grpc::StatusCode::RESOURCE_EXHAUSTED,
              absl::StrCat("manifest.items: ", *items, " problems, more than the ", max_items_,
                           " one job may hold (each item is one problem at least; "
                           "counted before the request was read); split the manifest "
                           "into jobs")));
    }
  }
  v1::SubmitJobRequest parsed;
  {
    grpc::ProtoBufferReader reader(request);
    if (!parsed.ParseFromZeroCopyStream(&reader)) {
      return Refuse(-1, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                     "the request is not a well-formed SubmitJobRequest"));
    }
  }
  request->Clear();
  return handler_(
      parsed, [this](const v1::JobProgress& progress) { return Write(progress); },
      [this] { return cancelled_.load() || context_->IsCancelled(); });
}

grpc::Status SubmitJobCall::Refuse(int64_t items, grpc::Status refusal) {
  if (refused_) refused_(items, refusal);
  return refusal;
}

bool SubmitJobCall::Write(const v1::JobProgress& progress) {
  if (cancelled_.load()) return false;
  grpc::ByteBuffer bytes;
  bool own = false;
  if (!grpc::SerializationTraits<v1::JobProgress>::Serialize(progress, &bytes, &own).ok()) {
    return false;
  }
  pending_ = std::move(bytes);
  {
    absl::MutexLock lock(&mu_);
    writing_ = true;
  }
  // Outside the lock: gRPC may run OnWriteDone before StartWrite returns.
  StartWrite(&pending_);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* writing) { return !*writing; }, &writing_));
  return write_ok_;
}

void SubmitJobCall::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  write_ok_ = ok;
}

void SubmitJobCall::OnCancel() { cancelled_.store(true); }

void SubmitJobCall::OnDone() {
  // Finish was the thread's last step; should gRPC run this on that very
  // thread, the thread ends without touching the call again.
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    thread_.join();
  }
  delete this;
}

}  // namespace autotune::service
