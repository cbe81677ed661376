#include "runtime/watch_commits_call.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/client.pb.h"
#include "runtime/client_service.h"  // ToGrpcStatus
#include "runtime/node.h"
#include "runtime/partition.h"
#include "runtime/raw_call.h"

namespace runtime {
namespace {

// A ByteBuffer over `bytes` without a copy: the slice keeps the shared encoding alive until gRPC
// has sent it, so every stream of one block variant writes the same bytes.
grpc::ByteBuffer SharedBuffer(const std::shared_ptr<const std::string>& bytes) {
  auto* keep = new std::shared_ptr<const std::string>(bytes);
  grpc::Slice slice(
      const_cast<char*>((*keep)->data()), (*keep)->size(),
      [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, keep);
  return grpc::ByteBuffer(&slice, 1);
}

class WatchCommitsCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  WatchCommitsCall(grpc::CallbackServerContext* context, std::shared_ptr<CommitStreams> streams)
      : context_(context), streams_(std::move(streams)) {}

  // Runs inside the method handler, before gRPC has the reactor (gRPC queues a write or finish
  // started now until it binds the reactor).
  void Begin(Node* node, const grpc::ByteBuffer* raw) {
    node::client::WatchCommitsRequest request;
    if (grpc::Status parsed = ParseRawRequest(raw, &request); !parsed.ok()) {
      Finish(parsed);
      return;
    }
    absl::StatusOr<std::shared_ptr<Partition>> partition = node->FindPartition(request.partition());
    if (!partition.ok()) {
      Finish(ToGrpcStatus(partition.status()));
      return;
    }
    // The read chain counts the stream's opening; its permit is not held for the stream's life
    // (the watch limits bound open streams).
    {
      flowctl::Admission admission;
      grpc::Status refused;
      if (!AdmitClientRead(context_, **partition, raw->Length(), &admission, &refused)) {
        Finish(refused);
        return;
      }
    }
    absl::StatusOr<std::shared_ptr<CommitWatcher>> watcher =
        (*partition)
            ->WatchCommits({.from_height = request.from_height(),
                            .include_txs = request.include_txs(),
                            .include_receipts = request.include_receipts()},
                           [this] { Pump(); });
    if (!watcher.ok()) {
      Finish(ToGrpcStatus(watcher.status()));
      return;
    }
    watcher_ = *std::move(watcher);
    if (!streams_->Add(watcher_)) {
      watcher_->End(absl::UnavailableError("server shutting down"));
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) watcher_->End(absl::CancelledError("the stream broke (client gone or cancelled)"));
    Pump();
  }

  void OnCancel() override {
    if (watcher_ != nullptr) watcher_->End(absl::CancelledError("cancelled by the client"));
  }

  void OnDone() override {
    if (watcher_ != nullptr) {
      watcher_->Close();  // no wake runs after this
      streams_->Remove(watcher_.get());
    }
    delete this;
  }

 private:
  // Writes the next block, finishes, or waits for the watcher's wake. Never runs twice at once
  // (see the header).
  void Pump() {
    CommitWatcher::Step step = watcher_->Next();
    switch (step.kind) {
      case CommitWatcher::Step::kWait:
        return;
      case CommitWatcher::Step::kWrite:
        buffer_ = SharedBuffer(step.message);
        StartWrite(&buffer_);
        return;
      case CommitWatcher::Step::kEnd:
        context_->AddTrailingMetadata("resume-height", absl::StrCat(watcher_->resume_height()));
        Finish(ToGrpcStatus(step.end));
        return;
    }
  }

  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<CommitStreams> streams_;
  std::shared_ptr<CommitWatcher> watcher_;  // set in Begin, before any reaction
  grpc::ByteBuffer buffer_;                 // the write in flight
};

}  // namespace

bool CommitStreams::Add(const std::shared_ptr<CommitWatcher>& watcher) {
  absl::MutexLock lock(&mu_);
  if (ended_.has_value()) return false;
  open_.emplace(watcher.get(), watcher);
  return true;
}

void CommitStreams::Remove(const CommitWatcher* watcher) {
  absl::MutexLock lock(&mu_);
  open_.erase(watcher);
}

void CommitStreams::EndAll(const absl::Status& status) {
  std::vector<std::shared_ptr<CommitWatcher>> open;
  {
    absl::MutexLock lock(&mu_);
    if (ended_.has_value()) return;
    ended_ = status;
    for (const auto& entry : open_) {
      if (std::shared_ptr<CommitWatcher> w = entry.second.lock()) open.push_back(std::move(w));
    }
  }
  for (const auto& w : open) w->End(status);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartWatchCommits(
    Node* node, std::shared_ptr<CommitStreams> streams, grpc::CallbackServerContext* context,
    const grpc::ByteBuffer* request) {
  auto* call = new WatchCommitsCall(context, std::move(streams));
  call->Begin(node, request);
  return call;
}

}  // namespace runtime
