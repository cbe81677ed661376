// WatchCommitsCall: one ClientService.WatchCommits stream (proto/client.proto), a gRPC callback
// server-streaming reactor over a partition's CommitWatcher (runtime/commit_stream.h).
//
// The reactor writes one block at a time: it asks the watcher for the next encoded block, writes
// it, and asks again when the write is done; when the watcher has nothing yet, the watcher wakes
// it (on the thread that delivered the block) once it has. So a client that stops reading holds
// one write in flight and its watcher's bounded buffer, and is cut by the watcher, never by
// blocking a thread. Ends: the watcher's end status (the cut, a shutdown, a ledger error) with
// trailing metadata "resume-height", or the client's cancellation (the status goes nowhere).
//
// The request body is parsed here (a raw method, as the unary ones: runtime/raw_call.h), so a
// body that does not parse gets INVALID_ARGUMENT naming the message type.
//
// Lifetime: gRPC owns the reactor until OnDone, which closes the watcher (waiting out a wake in
// progress) and deletes it. The reactor shares the watcher and the service's CommitStreams, so
// neither the partition nor the service has to outlive it; the Node is used only while the
// method handler runs.
//
// Thread-safety: CommitStreams is thread-safe. A reactor's methods are called by gRPC and by its
// watcher's wake, never two at once (the watcher wakes only a stream that has no write in flight
// and is not inside Next).
//
//   grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchCommits(ctx, raw) override {
//     return StartWatchCommits(node_, streams_, ctx, raw);
//   }
//   ... at shutdown: streams_->EndAll(absl::UnavailableError("server shutting down"));
#ifndef RUNTIME_WATCH_COMMITS_CALL_H_
#define RUNTIME_WATCH_COMMITS_CALL_H_

#include <map>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "runtime/commit_stream.h"

namespace runtime {

class Node;

// The WatchCommits streams a service has open, so that its shutdown can end them at once.
class CommitStreams {
 public:
  // False once EndAll was called (the caller ends `watcher` itself).
  bool Add(const std::shared_ptr<CommitWatcher>& watcher) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(const CommitWatcher* watcher) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every open stream with `status` and makes Add fail from now on. Idempotent.
  void EndAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  std::optional<absl::Status> ended_ ABSL_GUARDED_BY(mu_);
  std::map<const CommitWatcher*, std::weak_ptr<CommitWatcher>> open_ ABSL_GUARDED_BY(mu_);
};

// Parses the request, opens a watcher on the partition and starts streaming; finishes at once
// with INVALID_ARGUMENT / NOT_FOUND / OUT_OF_RANGE / RESOURCE_EXHAUSTED when it cannot.
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartWatchCommits(
    Node* node, std::shared_ptr<CommitStreams> streams, grpc::CallbackServerContext* context,
    const grpc::ByteBuffer* request);

}  // namespace runtime

#endif  // RUNTIME_WATCH_COMMITS_CALL_H_
