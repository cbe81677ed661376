#include "runtime/client_service.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/transaction.h"
#include "runtime/node.h"
#include "runtime/partition.h"
#include "runtime/raw_call.h"

namespace runtime {

// Calls waiting for a partition's callback. Shared (shared_ptr) between the service and the
// callbacks, so a callback arriving after the service is gone finds an empty table.
class ClientServiceImpl::PendingCalls {
 public:
  // Registers a call; returns its id. After shutdown began, answers it UNAVAILABLE at once and
  // returns 0.
  uint64_t Add(UnaryCall* call) {
    {
      absl::MutexLock l(&mu_);
      if (!closed_) {
        uint64_t id = next_id_++;
        calls_.emplace(id, call);
        return id;
      }
    }
    call->Reply(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
    return 0;
  }

  // If call `id` is still pending, takes it out of the table, runs `fill` (writes the response
  // or trailing metadata) and finishes it with `status`. Owning the call exclusively once it is
  // out of the table, fill and Finish need no lock.
  void Finish(uint64_t id, const grpc::Status& status, absl::FunctionRef<void()> fill) {
    UnaryCall* call = nullptr;
    {
      absl::MutexLock l(&mu_);
      auto it = calls_.find(id);
      if (it == calls_.end()) return;  // cancelled by shutdown
      call = it->second;
      calls_.erase(it);
    }
    fill();
    call->Reply(status);
  }

  bool WaitIdle(absl::Time deadline) {
    absl::MutexLock l(&mu_);
    return mu_.AwaitWithDeadline(absl::Condition(this, &PendingCalls::IdleLocked), deadline);
  }

  void CancelAll() {
    absl::flat_hash_map<uint64_t, UnaryCall*> calls;
    {
      absl::MutexLock l(&mu_);
      closed_ = true;
      calls.swap(calls_);
    }
    for (auto& [id, call] : calls) {
      call->Reply(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
    }
  }

 private:
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.empty(); }

  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<uint64_t, UnaryCall*> calls_ ABSL_GUARDED_BY(mu_);
};

namespace {

using node::client::PartitionRef;
namespace pb = node::client;

// The client API's code for one submit outcome: transaction defects all read INVALID_ARGUMENT
// (proto/client.proto); flow-control rejections keep the stage's code.
absl::Status ClientStatus(const SubmitResult& result) {
  const absl::Status& s = result.status;
  if (!result.rejected_by.empty()) return s;
  switch (s.code()) {
    case absl::StatusCode::kOutOfRange:          // oversize
    case absl::StatusCode::kFailedPrecondition:  // wrong partition, nonce gap
    case absl::StatusCode::kUnauthenticated:     // bad signature
      return absl::InvalidArgumentError(s.message());
    default:
      return s;
  }
}

int64_t CeilMillis(absl::Duration d) {
  return absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1)));
}

// The trailers of a flow-control refusal, for writes and reads alike.
void AddRejectionMetadata(grpc::CallbackServerContext* context, absl::Duration retry_after,
                          absl::string_view rejected_by) {
  if (retry_after > absl::ZeroDuration()) {
    context->AddTrailingMetadata("retry-after-ms", absl::StrCat(CeilMillis(retry_after)));
  }
  if (!rejected_by.empty()) context->AddTrailingMetadata("rejected-by", std::string(rejected_by));
}

// A read refused by its chain's decision `d`: the trailers on `context`, and the status.
grpc::Status RefuseRead(grpc::CallbackServerContext* context, const flowctl::Decision& d) {
  AddRejectionMetadata(context, d.retry_after(), d.stage());
  return ToGrpcStatus(d.ToStatus());
}

grpc::ServerUnaryReactor* FinishNow(UnaryCall* call, const grpc::Status& status) {
  call->Reply(status);
  return call;
}

absl::Status CheckBytes(const std::string& field, const std::string& value, size_t size) {
  if (value.size() == size) return absl::OkStatus();
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": must be ", size, " bytes, got ", value.size()));
}

// Whether a read refused with `d` may wait for the chain: a refusal for now (RESOURCE_EXHAUSTED)
// whose hint falls within the wait.
bool Holdable(const flowctl::Decision& d, int64_t max_wait_ns) {
  return d.reject_kind() == flowctl::RejectKind::kOverloaded &&
         absl::ToInt64Nanoseconds(d.retry_after()) <= max_wait_ns;
}

// One unary read waiting in the node's ReadHold. Owns nothing of the call but the right to
// answer it: gRPC keeps the call (and `context`) until it is answered.
class HeldClientRead final : public HeldRead {
 public:
  HeldClientRead(grpc::CallbackServerContext* context, std::shared_ptr<Partition> partition,
                 size_t request_bytes, UnaryCall* call, absl::AnyInvocable<grpc::Status()> answer,
                 const flowctl::Decision* refusal, int64_t max_wait_ns)
      : context_(context),
        partition_(std::move(partition)),
        request_bytes_(request_bytes),
        call_(call),
        answer_(std::move(answer)),
        max_wait_ns_(max_wait_ns) {
    if (refusal != nullptr) Remember(*refusal);
  }

  TryResult TryAdmit(int64_t /*now_ns*/, int64_t* retry_after_ns) override {
    if (context_->IsCancelled()) {
      GiveUp(GiveUpReason::kCancelled);
      return TryResult::kDone;
    }
    if (partition_->stopping()) {
      GiveUp(GiveUpReason::kPartitionStopped);
      return TryResult::kDone;
    }
    admission_ = partition_->AdmitRead(request_bytes_, context_->peer());
    if (admission_.admitted()) return TryResult::kAdmitted;
    const flowctl::Decision& d = admission_.decision();
    Remember(d);
    if (!Holdable(d, max_wait_ns_)) {  // e.g. the chain was changed live to refuse for good
      GiveUp(GiveUpReason::kWaitOver);
      return TryResult::kDone;
    }
    *retry_after_ns = absl::ToInt64Nanoseconds(d.retry_after());
    return TryResult::kWait;
  }

  void Answer() override {
    call_->Reply(answer_());
    admission_.Finish();
  }

  bool Cancelled() const override { return context_->IsCancelled(); }

  void GiveUp(GiveUpReason reason) override {
    if (reason == GiveUpReason::kCancelled) {
      call_->Reply(grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled while it waited"));
      return;
    }
    if (reason == GiveUpReason::kShutdown) {
      call_->Reply(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
      return;
    }
    if (reason == GiveUpReason::kPartitionStopped) {
      call_->Reply(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("partition ", partition_->name(), " stopped while the read waited")));
      return;
    }
    const std::string waited = absl::StrCat(" (the read waited up to ", max_wait_ns_ / 1'000'000,
                                            " ms: read_hold.max_wait_ms)");
    if (!refused_.ok()) {
      AddRejectionMetadata(context_, retry_after_, stage_);
      call_->Reply(grpc::Status(refused_.error_code(), refused_.error_message() + waited));
      return;
    }
    // It waited behind other reads and never reached the chain.
    AddRejectionMetadata(context_, absl::ZeroDuration(), kReadHoldStage);
    call_->Reply(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("partition ", partition_->name(), ": reads wait for the read chain", waited)));
  }

 private:
  void Remember(const flowctl::Decision& d) {
    refused_ = ToGrpcStatus(d.ToStatus());
    retry_after_ = d.retry_after();
    stage_ = std::string(d.stage());
  }

  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<Partition> partition_;
  const size_t request_bytes_;
  UnaryCall* const call_;
  absl::AnyInvocable<grpc::Status()> answer_;
  const int64_t max_wait_ns_;
  flowctl::Admission admission_;  // held from TryAdmit's admission until the read is answered
  grpc::Status refused_;          // the chain's last refusal (OK: none yet)
  absl::Duration retry_after_;
  std::string stage_;
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

bool AdmitClientRead(grpc::CallbackServerContext* context, const Partition& partition,
                     size_t request_bytes, flowctl::Admission* admission, grpc::Status* refused) {
  *admission = partition.AdmitRead(request_bytes, context->peer());
  if (admission->admitted()) return true;
  *refused = RefuseRead(context, admission->decision());
  return false;
}

ClientServiceImpl::ClientServiceImpl(Node* node)
    : node_(node),
      pending_(std::make_shared<PendingCalls>()),
      streams_(std::make_shared<CommitStreams>()) {}

ClientServiceImpl::~ClientServiceImpl() {
  pending_->CancelAll();
  EndWatches();
  EndHeldReads();
}

bool ClientServiceImpl::WaitIdle(absl::Time deadline) { return pending_->WaitIdle(deadline); }

void ClientServiceImpl::CancelPending() { pending_->CancelAll(); }

void ClientServiceImpl::EndHeldReads() { node_->read_hold().EndOwner(this); }

grpc::ServerUnaryReactor* ClientServiceImpl::AnswerRead(grpc::CallbackServerContext* context,
                                                        std::shared_ptr<Partition> partition,
                                                        size_t request_bytes, UnaryCall* call,
                                                        absl::AnyInvocable<grpc::Status()> answer) {
  const Partition::ReadHoldLimits limits = partition->read_hold();
  ReadHold& hold = node_->read_hold();
  const uint64_t queue = partition->id();
  flowctl::Admission admission;
  // While reads of the partition wait, a new one queues behind them without trying the chain.
  const bool behind_others = limits.max_wait_ns > 0 && hold.Waiting(queue);
  if (!behind_others) {
    admission = partition->AdmitRead(request_bytes, context->peer());
    if (admission.admitted()) return FinishNow(call, answer());
  }
  const flowctl::Decision* refusal = behind_others ? nullptr : &admission.decision();
  if (refusal == nullptr || (limits.max_wait_ns > 0 && Holdable(*refusal, limits.max_wait_ns))) {
    const int64_t retry_after_ns =
        refusal != nullptr ? absl::ToInt64Nanoseconds(refusal->retry_after()) : 0;
    std::unique_ptr<HeldRead> read = std::make_unique<HeldClientRead>(
        context, partition, request_bytes, call, std::move(answer), refusal, limits.max_wait_ns);
    switch (hold.Hold(this, queue, context->peer(), read, retry_after_ns, limits.max_wait_ns,
                      limits.max_waiting)) {
      case ReadHold::HoldResult::kHeld:
        return call;
      case ReadHold::HoldResult::kFull:
        AddRejectionMetadata(context, absl::Nanoseconds(limits.max_wait_ns), kReadHoldStage);
        return FinishNow(call, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                            absl::StrCat("partition ", partition->name(), ": ",
                                                         limits.max_waiting,
                                                         " reads wait already (read_hold."
                                                         "max_waiting)")));
      case ReadHold::HoldResult::kStopped:
        if (refusal == nullptr) {
          return FinishNow(call,
                           grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
        }
        break;
    }
  }
  return FinishNow(call, RefuseRead(context, *refusal));
}

void ClientServiceImpl::EndWatches() {
  streams_->EndAll(absl::UnavailableError("server shutting down"));
}

absl::Duration ClientServiceImpl::WaitTimeout(uint32_t wait_timeout_ms, absl::Time now,
                                              absl::Time call_deadline) {
  if (wait_timeout_ms > 0) return std::min(absl::Milliseconds(wait_timeout_ms), kMaxWaitTimeout);
  absl::Duration left = call_deadline - now;
  // gRPC reports "no deadline" as a far-future time point.
  if (left > absl::Hours(24 * 365)) return kDefaultWaitTimeout;
  return std::clamp(left, absl::ZeroDuration(), kMaxWaitTimeout);
}

grpc::ServerUnaryReactor* ClientServiceImpl::SubmitTx(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* raw_request,
                                                      grpc::ByteBuffer* raw_response) {
  auto* call = new RawCall<pb::SubmitTxRequest, pb::SubmitTxResponse>(raw_response);
  if (!call->Parse(raw_request)) return call;
  const pb::SubmitTxRequest* request = &call->request;
  pb::SubmitTxResponse* response = &call->response;
  absl::StatusOr<std::shared_ptr<Partition>> partition = node_->FindPartition(request->partition());
  if (!partition.ok()) return FinishNow(call, ToGrpcStatus(partition.status()));
  if (request->signed_tx().empty()) {
    return FinishNow(call, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "signed_tx: required"));
  }
  SubmitOptions options;
  options.wait_for_commit = request->wait_for_commit();
  options.wait_timeout =
      WaitTimeout(request->wait_timeout_ms(), absl::Now(), absl::FromChrono(context->deadline()));
  options.client = context->peer();
  if (request->retry_ticket() != 0) options.retry_tickets.push_back(request->retry_ticket());

  const uint64_t id = pending_->Add(call);
  if (id == 0) return call;  // shutting down: already answered
  // The callback may run inline (early rejection) or later on a partition thread.
  (*partition)
      ->Submit(request->signed_tx(), options,
               [pending = pending_, id, context, response](SubmitResult result) {
                 const absl::Status status = ClientStatus(result);
                 pending->Finish(id, ToGrpcStatus(status), [&] {
                   if (status.ok()) {
                     response->set_tx_hash(result.tx_hash);
                     response->set_spilled(result.spilled);
                     if (result.receipt.has_value()) *response->mutable_receipt() = *result.receipt;
                   } else {
                     AddRejectionMetadata(context, result.retry_after, result.rejected_by);
                     if (result.retry_ticket != 0) {
                       context->AddTrailingMetadata("retry-ticket",
                                                    absl::StrCat(result.retry_ticket));
                     }
                   }
                 });
               });
  return call;
}

grpc::ServerUnaryReactor* ClientServiceImpl::SubmitTxBatch(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* raw_request,
                                                           grpc::ByteBuffer* raw_response) {
  auto* call = new RawCall<pb::SubmitTxBatchRequest, pb::SubmitTxBatchResponse>(raw_response);
  if (!call->Parse(raw_request)) return call;
  const pb::SubmitTxBatchRequest* request = &call->request;
  pb::SubmitTxBatchResponse* response = &call->response;
  absl::StatusOr<std::shared_ptr<Partition>> partition = node_->FindPartition(request->partition());
  if (!partition.ok()) return FinishNow(call, ToGrpcStatus(partition.status()));
  const int n = request->signed_txs_size();
  if (n < 1 || n > kMaxBatchTxs) {
    return FinishNow(call, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        absl::StrCat("signed_txs: must hold 1 to ", kMaxBatchTxs,
                                                     " transactions, got ", n)));
  }
  if (request->retry_tickets_size() > n) {
    return FinishNow(call, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        absl::StrCat("retry_tickets: at most one per signed_txs "
                                                     "entry (",
                                                     n, "), got ", request->retry_tickets_size())));
  }
  std::vector<std::string> txs(request->signed_txs().begin(), request->signed_txs().end());
  SubmitOptions options;
  options.client = context->peer();
  options.retry_tickets.assign(request->retry_tickets().begin(), request->retry_tickets().end());

  const uint64_t id = pending_->Add(call);
  if (id == 0) return call;  // shutting down: already answered
  (*partition)
      ->SubmitBatch(std::move(txs), options,
                    [pending = pending_, id, response](std::vector<SubmitResult> results) {
                      pending->Finish(id, grpc::Status::OK, [&] {
                        response->mutable_results()->Reserve(static_cast<int>(results.size()));
                        for (const SubmitResult& result : results) {
                          const absl::Status status = ClientStatus(result);
                          node::client::TxResult* out = response->add_results();
                          out->set_code(static_cast<int32_t>(status.code()));
                          out->set_message(std::string(status.message()));
                          out->set_tx_hash(result.tx_hash);
                          if (!status.ok() && result.retry_after > absl::ZeroDuration()) {
                            out->set_retry_after_ms(static_cast<uint32_t>(
                                std::min<int64_t>(CeilMillis(result.retry_after), UINT32_MAX)));
                          }
                          if (!status.ok()) out->set_retry_ticket(result.retry_ticket);
                        }
                      });
                    });
  return call;
}

grpc::ServerUnaryReactor* ClientServiceImpl::GetTx(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* raw_request,
                                                   grpc::ByteBuffer* raw_response) {
  auto* call = new RawCall<pb::GetTxRequest, pb::GetTxResponse>(raw_response);
  if (!call->Parse(raw_request)) return call;
  absl::StatusOr<std::shared_ptr<Partition>> partition =
      node_->FindPartition(call->request.partition());
  if (!partition.ok()) return FinishNow(call, ToGrpcStatus(partition.status()));
  return AnswerRead(context, *partition, raw_request->Length(), call,
                    [call, p = *partition]() -> grpc::Status {
                      const std::string& hash = call->request.tx_hash();
                      if (absl::Status s = CheckBytes("tx_hash", hash, 32); !s.ok()) {
                        return ToGrpcStatus(s);
                      }
                      absl::StatusOr<pb::GetTxResponse> tx = p->GetTx(hash);
                      if (tx.ok()) call->response = *std::move(tx);
                      return ToGrpcStatus(tx.status());
                    });
}

grpc::ServerUnaryReactor* ClientServiceImpl::GetAccount(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* raw_request,
                                                        grpc::ByteBuffer* raw_response) {
  auto* call = new RawCall<pb::GetAccountRequest, pb::GetAccountResponse>(raw_response);
  if (!call->Parse(raw_request)) return call;
  absl::StatusOr<std::shared_ptr<Partition>> partition =
      node_->FindPartition(call->request.partition());
  if (!partition.ok()) return FinishNow(call, ToGrpcStatus(partition.status()));
  return AnswerRead(context, *partition, raw_request->Length(), call,
                    [call, p = *partition]() -> grpc::Status {
                      const std::string& address = call->request.address();
                      if (absl::Status s = CheckBytes("address", address, 32); !s.ok()) {
                        return ToGrpcStatus(s);
                      }
                      absl::StatusOr<pb::GetAccountResponse> account = p->GetAccount(address);
                      if (account.ok()) call->response = *std::move(account);
                      return ToGrpcStatus(account.status());
                    });
}

grpc::ServerUnaryReactor* ClientServiceImpl::GetBlock(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* raw_request,
                                                      grpc::ByteBuffer* raw_response) {
  auto* call = new RawCall<pb::GetBlockRequest, pb::GetBlockResponse>(raw_response);
  if (!call->Parse(raw_request)) return call;
  absl::StatusOr<std::shared_ptr<Partition>> partition =
      node_->FindPartition(call->request.partition());
  if (!partition.ok()) return FinishNow(call, ToGrpcStatus(partition.status()));
  return AnswerRead(context, *partition, raw_request->Length(), call,
                    [call, p = *partition]() -> grpc::Status {
                      absl::StatusOr<pb::GetBlockResponse> block =
                          p->GetBlock(call->request.height(), call->request.include_txs());
                      if (block.ok()) call->response = *std::move(block);
                      return ToGrpcStatus(block.status());
                    });
}

grpc::ServerUnaryReactor* ClientServiceImpl::GetChainStatus(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* raw_request,
                                                            grpc::ByteBuffer* raw_response) {
  auto* call = new RawCall<pb::GetChainStatusRequest, pb::GetChainStatusResponse>(raw_response);
  if (!call->Parse(raw_request)) return call;
  absl::StatusOr<std::shared_ptr<Partition>> partition =
      node_->FindPartition(call->request.partition());
  if (!partition.ok()) return FinishNow(call, ToGrpcStatus(partition.status()));
  return AnswerRead(context, *partition, raw_request->Length(), call,
                    [call, p = *partition]() -> grpc::Status {
                      call->response = p->ChainStatus();
                      return grpc::Status::OK;
                    });
}

grpc::ServerUnaryReactor* ClientServiceImpl::GetValue(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* raw_request,
                                                      grpc::ByteBuffer* raw_response) {
  auto* call = new RawCall<pb::GetValueRequest, pb::GetValueResponse>(raw_response);
  if (!call->Parse(raw_request)) return call;
  absl::StatusOr<std::shared_ptr<Partition>> partition =
      node_->FindPartition(call->request.partition());
  if (!partition.ok()) return FinishNow(call, ToGrpcStatus(partition.status()));
  return AnswerRead(
      context, *partition, raw_request->Length(), call, [call, p = *partition]() -> grpc::Status {
        const pb::GetValueRequest& request = call->request;
        const size_t max_key = base::TxLimits().max_key_bytes;
        if (request.key().empty()) {
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "key: required");
        }
        if (request.key().size() > max_key) {
          return grpc::Status(
              grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("key: must be at most ", max_key, " bytes, got ", request.key().size()));
        }
        absl::StatusOr<pb::GetValueResponse> value = p->GetValue(request.key(), request.height());
        if (value.ok()) call->response = *std::move(value);
        return ToGrpcStatus(value.status());
      });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ClientServiceImpl::WatchCommits(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return StartWatchCommits(node_, streams_, context, request);
}

}  // namespace runtime
