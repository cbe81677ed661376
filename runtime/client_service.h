// ClientServiceImpl: node.client.ClientService (proto/client.proto) on top of a runtime::Node.
//
// Written against gRPC's callback API so no gRPC thread ever blocks on a partition: SubmitTx and
// SubmitTxBatch hand the request to Partition::Submit / SubmitBatch and return at once; the
// partition's done callback (worker-pool or ticker thread, or inline on an early rejection)
// finishes the call. Queries (GetTx, GetAccount, GetBlock, GetChainStatus, GetValue) are short
// local reads answered inline, each after the partition's read chain admitted it
// (PartitionConfig.read_interceptor; WatchCommits passes it when the stream opens). WatchCommits is
// a server stream fed by the partition's commit stream hub (runtime/watch_commits_call.h,
// runtime/commit_stream.h): no thread waits on it.
//
// Status mapping (see proto/client.proto):
//   flow-control rejection  the partition's code (RESOURCE_EXHAUSTED / UNAVAILABLE) and message,
//                           trailing metadata "retry-after-ms" and "rejected-by" when set;
//   bad transaction         INVALID_ARGUMENT (decode / signature / partition / nonce-gap codes
//                           OUT_OF_RANGE, FAILED_PRECONDITION and UNAUTHENTICATED are folded in;
//                           ALREADY_EXISTS "duplicate transaction" / "replayed nonce" is kept so a
//                           retrying client can tell "already submitted");
//   unknown partition       NOT_FOUND; empty ref, hash, address or key: INVALID_ARGUMENT;
//   height beyond the tip   OUT_OF_RANGE (GetValue, WatchCommits' from_height).
//
// Request bodies: every method is registered raw (ByteBuffer; runtime/raw_call.h) and parses
// its request itself, so a body that is not a valid encoding gets INVALID_ARGUMENT "request does
// not parse as node.client.SubmitTxRequest (N bytes)" instead of gRPC's bare UNIMPLEMENTED.
//
// Shutdown: a call still waiting for its partition when the server stops (e.g. wait_for_commit)
// is finished by CancelPending() with UNAVAILABLE "server shutting down"; the partition's later
// callback is then ignored. The pending-call table is shared with those callbacks, so they may
// run after this object is gone. EndWatches() ends open WatchCommits streams at once with
// UNAVAILABLE and the height to resume from.
//
// Thread-safety: all methods are thread-safe.
//
//   ClientServiceImpl service(node);
//   builder.RegisterService(&service);
//   ...  // at shutdown, after server->Shutdown(deadline) started:
//   service.EndWatches();  // before: streams end now, not at the drain deadline
//   service.WaitIdle(deadline); service.CancelPending();
#ifndef RUNTIME_CLIENT_SERVICE_H_
#define RUNTIME_CLIENT_SERVICE_H_

#include <cstdint>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "flowctl/stage_chain.h"
#include "grpcpp/grpcpp.h"
#include "proto/client.grpc.pb.h"
#include "runtime/raw_call.h"
#include "runtime/watch_commits_call.h"

namespace runtime {

class Node;

// Limits of the client API (values documented in proto/client.proto).
inline constexpr int kMaxBatchTxs = 1000;
inline constexpr absl::Duration kDefaultWaitTimeout = absl::Seconds(10);
inline constexpr absl::Duration kMaxWaitTimeout = absl::Seconds(60);

// absl::Status -> grpc::Status with the same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

class Partition;

// Runs `partition`'s read chain (Partition::AdmitRead) for a read of `request_bytes`. Admitted:
// true, with the admission in `*admission` (keep it until the read is answered). Refused: false,
// `*refused` is the stage's status and `context` gets the "retry-after-ms" / "rejected-by"
// trailing metadata, as a refused write does.
bool AdmitClientRead(grpc::CallbackServerContext* context, const Partition& partition,
                     size_t request_bytes, flowctl::Admission* admission, grpc::Status* refused);

// Every ClientService method as a raw (ByteBuffer) callback method.
using RawClientServiceBase = node::client::ClientService::WithRawCallbackMethod_SubmitTx<
    node::client::ClientService::WithRawCallbackMethod_SubmitTxBatch<
        node::client::ClientService::WithRawCallbackMethod_GetTx<
            node::client::ClientService::WithRawCallbackMethod_GetAccount<
                node::client::ClientService::WithRawCallbackMethod_GetBlock<
                    node::client::ClientService::WithRawCallbackMethod_GetChainStatus<
                        node::client::ClientService::WithRawCallbackMethod_WatchCommits<
                            node::client::ClientService::WithRawCallbackMethod_GetValue<
                                node::client::ClientService::Service>>>>>>>>;

class ClientServiceImpl final : public RawClientServiceBase {
 public:
  // `node` outlives the service.
  explicit ClientServiceImpl(Node* node);
  ~ClientServiceImpl() override;

  // Waits until no call is waiting for a partition, or until `deadline`. True when idle.
  bool WaitIdle(absl::Time deadline);
  // Finishes every waiting call with UNAVAILABLE "server shutting down" and makes later
  // SubmitTx / SubmitTxBatch calls fail the same way. Idempotent.
  void CancelPending();
  // Ends every open WatchCommits stream with UNAVAILABLE "server shutting down" (and its
  // resume height) and refuses new ones the same way. Idempotent.
  void EndWatches();
  // Answers every read of this service waiting for its read chain (PartitionConfig.read_hold)
  // with UNAVAILABLE "server shutting down"; later refused reads are refused at once. Other
  // services of the node keep theirs. Idempotent.
  void EndHeldReads();

  // The methods, on raw bytes (request: the encoded request message; response: filled with the
  // encoded response message).
  grpc::ServerUnaryReactor* SubmitTx(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SubmitTxBatch(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetTx(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetAccount(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetBlock(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetChainStatus(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetValue(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // A server stream (runtime/watch_commits_call.h).
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchCommits(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;

  // How long a wait_for_commit request may wait: wait_timeout_ms if set, else the time left
  // until the call's deadline (kDefaultWaitTimeout without one); at most kMaxWaitTimeout.
  static absl::Duration WaitTimeout(uint32_t wait_timeout_ms, absl::Time now,
                                    absl::Time call_deadline);

 private:
  class PendingCalls;

  // Admits one unary read of `partition` and answers `call` with `answer` (which fills the
  // call's response and returns the status; it runs while the read's admission is held). A read
  // the chain refuses for now waits in the node's read hold when the partition's read_hold
  // allows (runtime/read_hold.h); any other gets the chain's refusal at once.
  grpc::ServerUnaryReactor* AnswerRead(grpc::CallbackServerContext* context,
                                       std::shared_ptr<Partition> partition, size_t request_bytes,
                                       UnaryCall* call, absl::AnyInvocable<grpc::Status()> answer);

  Node* const node_;
  const std::shared_ptr<PendingCalls> pending_;
  const std::shared_ptr<CommitStreams> streams_;
};

}  // namespace runtime

#endif  // RUNTIME_CLIENT_SERVICE_H_
