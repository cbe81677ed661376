// An in-process ClientService for loadgen tests: admits transactions, rejects some, and "commits"
// the admitted ones into blocks.
//
// Behaviour (deterministic counters; a monotonic clock only measures re-send gaps):
//   SubmitTxBatch  every `reject_rpc_every`-th call (0 = never) fails whole with
//                  RESOURCE_EXHAUSTED and trailing metadata rejected-by=rate, retry-after-ms=50
//                  (SetRetryAfterMs; 0 = no retry-after-ms trailer);
//                  otherwise each tx: a hash seen before -> ALREADY_EXISTS "duplicate
//                  transaction"; with SetAdmitResends(true) a tx rejected before -> admitted;
//                  every `reject_item_every`-th new tx (0 = never) -> RESOURCE_EXHAUSTED
//                  "pool full" (retry_after_ms 20, or SetRetryAfterMs); else admitted.
//                  resends() lists, per re-sent tx that was rejected with a hint, the time from
//                  that rejection to the re-send's arrival (>= the client's wait after it).
//   GetChainStatus puts every admitted, uncommitted tx into a new block first (so the poller
//                  drives commits), then answers the height.
//   GetBlock       the block's tx hashes; NOT_FOUND for unknown heights.
//   GetAccount     nonce from SetNonce (default 0).
//   WatchCommits   like GetChainStatus, puts the admitted txs into a block, then streams every
//                  block from from_height (0 = the next) with SUCCESS receipts (or the statuses
//                  AddBlock gave), and then, if SetWatchLive(true), new blocks as txs are admitted
//                  until cancelled; else ends OK. SetWatchEnd(n, status) ends every stream after
//                  n messages with `status` and trailing metadata resume-height.
//   GetValue       the value SetValue gave, found = true; else found = false; height = blocks.
// Thread-safe: gRPC threads call the handlers while the test reads the counters.
//
//   FakeClientService fake({{"hot", 1}, {"steady", 2}});
//   ASSERT_TRUE(fake.Start());
//   RunLoadgen({"--targets", fake.address(), ...}, io);
//   EXPECT_EQ(fake.admitted("hot"), fake.committed("hot"));
#ifndef TESTS_TOOLS_FAKE_CLIENT_SERVICE_H_
#define TESTS_TOOLS_FAKE_CLIENT_SERVICE_H_

#include <openssl/sha.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_context.h"
#include "proto/chain.pb.h"
#include "proto/client.grpc.pb.h"

namespace loadgen_test {

class FakeClientService final : public node::client::ClientService::Service {
 public:
  explicit FakeClientService(std::map<std::string, uint32_t> partitions)
      : ids_(std::move(partitions)) {
    for (const auto& [name, id] : ids_) {
      chains_[id].name = name;
      chains_[id].id = id;
    }
  }
  ~FakeClientService() override { Stop(); }

  bool Start() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return server_ != nullptr && port_ != 0;
  }
  void Stop() {
    {
      absl::MutexLock l(&mu_);
      stopping_ = true;
    }
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.reset();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  void SetRejectEvery(int rpc_every, int item_every) {
    absl::MutexLock l(&mu_);
    reject_rpc_every_ = rpc_every;
    reject_item_every_ = item_every;
  }
  // The retry-after hints: TxResult.retry_after_ms of "pool full" and the retry-after-ms
  // trailer of a failed RPC (0 = none).
  void SetRetryAfterMs(uint32_t item_ms, uint32_t rpc_ms) {
    absl::MutexLock l(&mu_);
    item_retry_after_ms_ = item_ms;
    rpc_retry_after_ms_ = rpc_ms;
  }
  // A tx that was rejected (by item or by RPC) is admitted when it comes again.
  void SetAdmitResends(bool admit) {
    absl::MutexLock l(&mu_);
    admit_resends_ = admit;
  }
  // Every tx is answered UNAVAILABLE (as a node whose consensus is not NORMAL).
  void SetUnavailable(bool unavailable) {
    absl::MutexLock l(&mu_);
    unavailable_ = unavailable;
  }
  void SetNonce(const std::string& address, uint64_t nonce) {
    absl::MutexLock l(&mu_);
    nonces_[address] = nonce;
  }
  // A committed block of `statuses.size()` txs whose receipts have these statuses.
  void AddBlock(const std::string& name, std::vector<node::chain::Receipt::Status> statuses) {
    absl::MutexLock l(&mu_);
    Chain& c = chains_.at(ids_.at(name));
    std::vector<std::string> hashes;
    for (size_t i = 0; i < statuses.size(); ++i) {
      hashes.push_back(absl::StrCat("tx-", c.blocks.size() + 1, "-", i));
    }
    c.statuses[c.blocks.size()] = std::move(statuses);
    c.blocks.push_back(std::move(hashes));
  }
  void SetWatchLive(bool live) {
    absl::MutexLock l(&mu_);
    watch_live_ = live;
  }
  void SetWatchEnd(int after_messages, grpc::Status status) {
    absl::MutexLock l(&mu_);
    watch_end_after_ = after_messages;
    watch_end_ = std::move(status);
  }
  void SetValue(const std::string& key, const std::string& value) {
    absl::MutexLock l(&mu_);
    values_[key] = value;
  }
  // The last WatchCommits / GetValue request, in text format.
  std::string last_watch_request() const {
    absl::MutexLock l(&mu_);
    return last_watch_request_;
  }
  std::string last_value_request() const {
    absl::MutexLock l(&mu_);
    return last_value_request_;
  }
  // WatchCommits and GetValue calls that carried an "authorization" header.
  int client_calls_with_token() const {
    absl::MutexLock l(&mu_);
    return client_calls_with_token_;
  }

  // --- counters ---------------------------------------------------------------------------
  uint64_t admitted(const std::string& name) const { return Get(name, &Chain::admitted); }
  uint64_t committed(const std::string& name) const { return Get(name, &Chain::committed); }
  uint64_t rejected_items(const std::string& name) const { return Get(name, &Chain::rejected); }
  uint64_t duplicates(const std::string& name) const { return Get(name, &Chain::duplicates); }
  uint64_t rejected_rpcs() const {
    absl::MutexLock l(&mu_);
    return rejected_rpcs_;
  }
  // A tx rejected with a hint that came again: the time between (rejection sent, re-send
  // arrived) and the hint it was given.
  struct Resend {
    absl::Duration gap;
    uint32_t hint_ms = 0;
  };
  std::vector<Resend> resends() const {
    absl::MutexLock l(&mu_);
    return resends_;
  }
  // Admitted nonces per sender address of one partition.
  std::map<std::string, std::set<uint64_t>> admitted_nonces(const std::string& name) const {
    absl::MutexLock l(&mu_);
    return chains_.at(ids_.at(name)).nonces;
  }
  // Sizes in bytes of the admitted transactions (min, max).
  std::pair<size_t, size_t> tx_size_range() const {
    absl::MutexLock l(&mu_);
    return {min_size_, max_size_};
  }

  // --- service ----------------------------------------------------------------------------
  grpc::Status SubmitTxBatch(grpc::ServerContext* ctx,
                             const node::client::SubmitTxBatchRequest* req,
                             node::client::SubmitTxBatchResponse* resp) override {
    absl::MutexLock l(&mu_);
    Chain* c = Find(req->partition());
    if (c == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown partition");
    ++rpcs_;
    const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
    if (reject_rpc_every_ > 0 && rpcs_ % reject_rpc_every_ == 0) {
      ++rejected_rpcs_;
      ctx->AddTrailingMetadata("rejected-by", "rate");
      if (rpc_retry_after_ms_ > 0) {
        ctx->AddTrailingMetadata("retry-after-ms", absl::StrCat(rpc_retry_after_ms_));
      }
      for (const std::string& bytes : req->signed_txs()) {
        const std::string hash = Hash(bytes);
        NoteResend(hash, now);
        rejected_at_[hash] = {now, rpc_retry_after_ms_};
      }
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "request rate limit");
    }
    for (const std::string& bytes : req->signed_txs()) {
      node::client::TxResult* r = resp->add_results();
      const std::string hash = Hash(bytes);
      r->set_tx_hash(hash);
      const bool resend = NoteResend(hash, now);
      node::chain::SignedTransaction st;
      node::chain::Transaction tx;
      if (!st.ParseFromString(bytes) || !tx.ParseFromString(st.tx()) || tx.nonce() == 0 ||
          st.signature().size() != 64 || tx.partition() != c->id) {
        r->set_code(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
        r->set_message("malformed transaction");
        continue;
      }
      if (c->seen.count(hash)) {
        ++c->duplicates;
        r->set_code(static_cast<int>(grpc::StatusCode::ALREADY_EXISTS));
        r->set_message("duplicate transaction");
        continue;
      }
      ++items_;
      if (unavailable_) {
        r->set_code(static_cast<int>(grpc::StatusCode::UNAVAILABLE));
        r->set_message("rejected by stage 'health': consensus_normal is false");
        continue;
      }
      if (reject_item_every_ > 0 && items_ % reject_item_every_ == 0 &&
          !(admit_resends_ && resend)) {
        ++c->rejected;
        r->set_code(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
        r->set_message("pool full: 100 of 100 txs");
        r->set_retry_after_ms(item_retry_after_ms_);
        rejected_at_[hash] = {now, item_retry_after_ms_};
        continue;
      }
      c->seen.insert(hash);
      c->pending.push_back(hash);
      c->nonces[tx.sender()].insert(tx.nonce());
      ++c->admitted;
      min_size_ = std::min(min_size_, bytes.size());
      max_size_ = std::max(max_size_, bytes.size());
    }
    return grpc::Status::OK;
  }

  grpc::Status GetChainStatus(grpc::ServerContext*, const node::client::GetChainStatusRequest* req,
                              node::client::GetChainStatusResponse* resp) override {
    absl::MutexLock l(&mu_);
    Chain* c = Find(req->partition());
    if (c == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown partition");
    CommitPending(c);
    resp->set_partition_id(c->id);
    resp->set_partition_name(c->name);
    resp->set_height(c->blocks.size());
    resp->set_consensus_state("NORMAL");
    return grpc::Status::OK;
  }

  grpc::Status GetBlock(grpc::ServerContext*, const node::client::GetBlockRequest* req,
                        node::client::GetBlockResponse* resp) override {
    absl::MutexLock l(&mu_);
    Chain* c = Find(req->partition());
    if (c == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown partition");
    if (req->height() == 0 || req->height() > c->blocks.size()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such height");
    }
    resp->mutable_block()->mutable_header()->set_height(req->height());
    for (const std::string& h : c->blocks[req->height() - 1])
      resp->mutable_block()->add_tx_hashes(h);
    return grpc::Status::OK;
  }

  grpc::Status WatchCommits(
      grpc::ServerContext* ctx, const node::client::WatchCommitsRequest* req,
      grpc::ServerWriter<node::client::WatchCommitsResponse>* writer) override {
    absl::MutexLock l(&mu_);
    last_watch_request_ = req->ShortDebugString();
    client_calls_with_token_ += ctx->client_metadata().count("authorization");
    Chain* c = Find(req->partition());
    if (c == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown partition");
    CommitPending(c);
    uint64_t next = req->from_height() == 0 ? c->blocks.size() + 1 : req->from_height();
    int sent = 0;
    while (!ctx->IsCancelled() && !stopping_) {
      CommitPending(c);
      while (next <= c->blocks.size()) {
        if (watch_end_after_ >= 0 && sent == watch_end_after_) {
          ctx->AddTrailingMetadata("resume-height", absl::StrCat(next));
          return watch_end_;
        }
        node::client::WatchCommitsResponse m = BlockMessage(*c, next, req->include_receipts());
        mu_.Unlock();
        const bool written = writer->Write(m);
        mu_.Lock();
        if (!written) return grpc::Status::OK;
        ++next;
        ++sent;
      }
      if (!watch_live_) return grpc::Status::OK;
      // Wakes on new txs, or every 20 ms to notice a cancelled call (the fake's only timed wait).
      auto more = [c]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !c->pending.empty(); };
      mu_.AwaitWithTimeout(absl::Condition(&more), absl::Milliseconds(20));
    }
    return grpc::Status::OK;
  }

  grpc::Status GetValue(grpc::ServerContext* ctx, const node::client::GetValueRequest* req,
                        node::client::GetValueResponse* resp) override {
    absl::MutexLock l(&mu_);
    last_value_request_ = req->ShortDebugString();
    client_calls_with_token_ += ctx->client_metadata().count("authorization");
    Chain* c = Find(req->partition());
    if (c == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown partition");
    auto it = values_.find(req->key());
    resp->set_found(it != values_.end());
    if (it != values_.end()) resp->set_value(it->second);
    resp->set_height(req->height() != 0 ? req->height() : c->blocks.size());
    return grpc::Status::OK;
  }

  grpc::Status GetAccount(grpc::ServerContext*, const node::client::GetAccountRequest* req,
                          node::client::GetAccountResponse* resp) override {
    absl::MutexLock l(&mu_);
    resp->mutable_account()->set_address(req->address());
    if (auto it = nonces_.find(req->address()); it != nonces_.end()) {
      resp->mutable_account()->set_nonce(it->second);
    }
    return grpc::Status::OK;
  }

 private:
  struct Chain {
    uint32_t id = 0;
    std::string name;
    std::set<std::string> seen;
    std::vector<std::string> pending;
    std::vector<std::vector<std::string>> blocks;
    std::map<size_t, std::vector<node::chain::Receipt::Status>> statuses;  // by block index
    std::map<std::string, std::set<uint64_t>> nonces;
    uint64_t admitted = 0, committed = 0, rejected = 0, duplicates = 0;
  };
  static std::string Hash(const std::string& bytes) {
    std::string hash(SHA256_DIGEST_LENGTH, '\0');
    SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
           reinterpret_cast<unsigned char*>(hash.data()));
    return hash;
  }
  // True if `hash` was rejected before; records the gap when that rejection carried a hint.
  bool NoteResend(const std::string& hash, std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = rejected_at_.find(hash);
    if (it == rejected_at_.end()) return false;
    if (it->second.second > 0) {
      resends_.push_back({absl::FromChrono(now - it->second.first), it->second.second});
    }
    rejected_at_.erase(it);
    return true;
  }
  // Every admitted, uncommitted tx into a new block.
  void CommitPending(Chain* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (c->pending.empty()) return;
    c->committed += c->pending.size();
    c->blocks.push_back(std::move(c->pending));
    c->pending.clear();
  }
  node::client::WatchCommitsResponse BlockMessage(const Chain& c, uint64_t height,
                                                  bool receipts) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    node::client::WatchCommitsResponse m;
    m.set_height(height);
    m.set_block_hash(std::string(32, static_cast<char>(height)));
    m.mutable_block()->mutable_header()->set_height(height);
    const std::vector<std::string>& hashes = c.blocks[height - 1];
    m.mutable_block()->mutable_header()->set_tx_count(static_cast<uint32_t>(hashes.size()));
    auto statuses = c.statuses.find(height - 1);
    for (size_t i = 0; i < hashes.size(); ++i) {
      m.mutable_block()->add_tx_hashes(hashes[i]);
      if (!receipts) continue;
      node::chain::Receipt* r = m.add_receipts();
      r->set_status(statuses == c.statuses.end() ? node::chain::Receipt::SUCCESS
                                                 : statuses->second[i]);
      r->set_block_height(height);
      r->set_tx_index(static_cast<uint32_t>(i));
      r->set_tx_hash(hashes[i]);
    }
    return m;
  }
  Chain* Find(const node::client::PartitionRef& ref) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    uint32_t id = ref.id();
    if (id == 0) {
      auto it = ids_.find(ref.name());
      if (it == ids_.end()) return nullptr;
      id = it->second;
    }
    auto it = chains_.find(id);
    if (it == chains_.end()) return nullptr;
    it->second.id = id;
    return &it->second;
  }
  uint64_t Get(const std::string& name, uint64_t Chain::*field) const {
    absl::MutexLock l(&mu_);
    return chains_.at(ids_.at(name)).*field;
  }

  const std::map<std::string, uint32_t> ids_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::map<uint32_t, Chain> chains_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> nonces_ ABSL_GUARDED_BY(mu_);
  int reject_rpc_every_ ABSL_GUARDED_BY(mu_) = 0;
  int reject_item_every_ ABSL_GUARDED_BY(mu_) = 0;
  bool unavailable_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool watch_live_ ABSL_GUARDED_BY(mu_) = false;
  int watch_end_after_ ABSL_GUARDED_BY(mu_) = -1;
  grpc::Status watch_end_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  std::string last_watch_request_ ABSL_GUARDED_BY(mu_);
  std::string last_value_request_ ABSL_GUARDED_BY(mu_);
  int client_calls_with_token_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rpcs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t items_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rejected_rpcs_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t item_retry_after_ms_ ABSL_GUARDED_BY(mu_) = 20;
  uint32_t rpc_retry_after_ms_ ABSL_GUARDED_BY(mu_) = 50;
  bool admit_resends_ ABSL_GUARDED_BY(mu_) = false;
  // Rejected txs by hash: when, and the hint given (until they come again).
  std::map<std::string, std::pair<std::chrono::steady_clock::time_point, uint32_t>> rejected_at_
      ABSL_GUARDED_BY(mu_);
  std::vector<Resend> resends_ ABSL_GUARDED_BY(mu_);
  size_t min_size_ ABSL_GUARDED_BY(mu_) = SIZE_MAX;
  size_t max_size_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace loadgen_test

#endif  // TESTS_TOOLS_FAKE_CLIENT_SERVICE_H_
