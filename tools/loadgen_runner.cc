#include "tools/loadgen_runner.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "flowctl/clock.h"
#include "flowctl/status_macros.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/admin.grpc.pb.h"
#include "proto/client.grpc.pb.h"
#include "tools/channel_credentials.h"
#include "tools/loadgen_client.h"
#include "tools/loadgen_flags.h"
#include "tools/loadgen_report.h"
#include "tools/loadgen_schedule.h"
#include "tools/loadgen_stats.h"
#include "tools/loadgen_txs.h"

namespace loadgen {
namespace {

constexpr int kMaxBatch = 1000;
constexpr int kGrpcAlreadyExists = 6;
constexpr int kGrpcUnavailable = 14;
// A target that answered UNAVAILABLE (its consensus is not NORMAL, or it is unreachable) gets no
// batches routed by sender for this long: its senders fail over to the next target, as a client
// SDK retries another endpoint.
constexpr int64_t kAvoidNanos = 500'000'000;

using node::client::ClientService;

std::chrono::system_clock::time_point DeadlineIn(int ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

struct PartitionRun {
  PartitionLoad load;
  std::unique_ptr<Schedule> schedule;
  uint32_t id = 0;
  uint64_t start_height = 0;
  std::unique_ptr<TxFactory> factory;
  std::unique_ptr<SenderBook> book;
  PartitionStats stats;
  uint64_t scheduled = 0;        // offers due so far
  uint64_t reads_scheduled = 0;  // reads due so far
  size_t next_read = 0;          // round-robin over targets and senders
  size_t next_target = 0;
  uint64_t per_sender_buffer = 0;
  std::atomic<uint64_t> signed_during_run{0};
};

class Runner {
 public:
  Runner(Options options, const RunIo& io) : o_(std::move(options)), io_(io) {}
  int Run();

 private:
  struct Call {
    grpc::ClientContext ctx;
    node::client::SubmitTxBatchRequest req;
    node::client::SubmitTxBatchResponse resp;
    std::vector<OfferTx> txs;
    PartitionRun* p = nullptr;
    size_t target = 0;
    int second = 0;
    int64_t sent_nanos = 0;  // clock_ nanos of the tick that sent it
  };

  absl::Status Setup();
  absl::Status Presign();
  absl::StatusOr<std::map<std::string, uint64_t>> ReadAdmin(size_t admin);
  void OfferLoop();
  void Offer(PartitionRun& p, uint64_t n, int second, int64_t now);
  // One SubmitTxBatch of up to `chunk` txs to `target`, taken from sender group `group` of
  // `groups` (see SenderBook::Take).
  void SendBatch(PartitionRun& p, size_t target, uint64_t chunk, size_t group, size_t groups,
                 int second, int64_t now);
  void OnBatchDone(Call* call, const grpc::Status& status);
  // `n` async GetAccount reads of `p` (scenario key `reads`), round-robin over targets.
  void SendReads(PartitionRun& p, uint64_t n, int second, int64_t now);
  void PollLoop(PartitionRun* p);
  // --commits watch: one WatchCommits stream on `target`, reopened from where it ended until the
  // run stops (CancelWatches).
  void WatchLoop(PartitionRun* p, size_t target);
  void CountCommits(PartitionRun* p, const google::protobuf::RepeatedPtrField<std::string>& hashes);
  void CancelWatches();
  void SignLoop();
  void Drain();
  int Report();
  int Second(int64_t nanos) const {
    return static_cast<int>(std::max<int64_t>(0, nanos - t0_) / flowctl::kNanosPerSecond);
  }
  bool StopRequested() const { return io_.stop != nullptr && io_.stop->load(); }
  void PrintSeconds(int up_to);

  Options o_;
  RunIo io_;
  const flowctl::Clock* clock_ = flowctl::Clock::Real();
  std::vector<std::unique_ptr<ClientService::Stub>> stubs_;
  std::vector<std::unique_ptr<node::admin::AdminService::Stub>> admin_stubs_;
  std::vector<std::string> admin_tokens_;  // per --admin address, or empty
  std::vector<std::unique_ptr<PartitionRun>> parts_;
  std::vector<base::PrivateKey> keys_;
  std::vector<std::map<std::string, uint64_t>> view_changes_start_;
  CommitTracker tracker_;
  std::unique_ptr<std::atomic<int>[]> in_flight_;
  // Reads (scenario key `reads`) go over connections of their own, as another client's would:
  // a node's per-connection stream limit then bounds them, not the writes.
  std::vector<std::unique_ptr<ClientService::Stub>> read_stubs_;
  // Per target, bounded by --reads-in-flight; beyond, a due read is client_dropped.
  std::unique_ptr<std::atomic<int>[]> reads_in_flight_;
  std::unique_ptr<std::atomic<int64_t>[]> avoid_until_;  // per target, clock_ nanos
  int64_t t0_ = 0;
  int printed_ = 0;  // seconds already printed
  absl::Notification stop_background_;

  absl::Mutex mu_;
  int total_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Open WatchCommits calls, cancelled at the end of the run.
  std::set<grpc::ClientContext*> watches_ ABSL_GUARDED_BY(mu_);
  bool watches_cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status Runner::Setup() {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> creds,
                   tools::ClientCredentials("--tls-ca", o_.tls_ca_file));
  for (const std::string& t : o_.targets) {
    stubs_.push_back(ClientService::NewStub(grpc::CreateChannel(t, creds)));
    grpc::ChannelArguments own_connection;
    own_connection.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    read_stubs_.push_back(
        ClientService::NewStub(grpc::CreateCustomChannel(t, creds, own_connection)));
  }
  in_flight_ = std::make_unique<std::atomic<int>[]>(stubs_.size());
  for (size_t i = 0; i < stubs_.size(); ++i) in_flight_[i] = 0;
  reads_in_flight_ = std::make_unique<std::atomic<int>[]>(stubs_.size());
  for (size_t i = 0; i < stubs_.size(); ++i) reads_in_flight_[i] = 0;
  avoid_until_ = std::make_unique<std::atomic<int64_t>[]>(stubs_.size());
  for (size_t i = 0; i < stubs_.size(); ++i) avoid_until_[i] = 0;
  for (const PartitionLoad& load : o_.loads) {
    auto p = std::make_unique<PartitionRun>();
    p->load = load;
    p->schedule = std::make_unique<Schedule>(load);
    ASSIGN_OR_RETURN(ChainInfo info, ResolvePartition(stubs_, o_.targets, load.name));
    p->id = info.id;
    p->start_height = info.height;
    parts_.push_back(std::move(p));
  }
  ASSIGN_OR_RETURN(keys_, MakeSenderKeys(o_.seed, o_.senders));
  for (auto& p : parts_) {
    ASSIGN_OR_RETURN(std::vector<uint64_t> next,
                     ReadNextNonces(*stubs_[0], o_.targets[0], p->id, keys_));
    p->factory =
        std::make_unique<TxFactory>(p->load.name, p->id, p->load.tx_bytes, p->load.key_per_sender);
    p->book = std::make_unique<SenderBook>(std::move(next));
  }
  for (size_t i = 0; i < o_.admins.size() && !o_.admin_token_files.empty(); ++i) {
    ASSIGN_OR_RETURN(
        std::string token,
        ReadTokenFile(o_.admin_token_files[std::min(i, o_.admin_token_files.size() - 1)]));
    admin_tokens_.push_back(std::move(token));
  }
  for (const std::string& a : o_.admins) {
    admin_stubs_.push_back(node::admin::AdminService::NewStub(grpc::CreateChannel(a, creds)));
    ASSIGN_OR_RETURN(auto vc, ReadAdmin(admin_stubs_.size() - 1));
    view_changes_start_.push_back(std::move(vc));
  }
  return Presign();
}

absl::StatusOr<std::map<std::string, uint64_t>> Runner::ReadAdmin(size_t admin) {
  return ReadViewChanges(*admin_stubs_[admin], o_.admins[admin],
                         admin < admin_tokens_.size() ? admin_tokens_[admin] : "");
}

absl::Status Runner::Presign() {
  const int senders = static_cast<int>(keys_.size());
  uint64_t total = 0;
  for (auto& p : parts_) {
    uint64_t n = o_.presign >= 0 ? static_cast<uint64_t>(o_.presign)
                                 : std::min<uint64_t>(p->schedule->TotalOffers(), 100000);
    p->per_sender_buffer = (n + senders - 1) / senders;
    total += p->per_sender_buffer * senders;
  }
  *io_.err << "loadgen: pre-signing " << total << " transactions for " << parts_.size()
           << " partition(s), " << senders << " senders...\n";
  const int64_t started = clock_->NowNanos();
  const int threads = std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([this, w, threads, senders] {
      for (auto& p : parts_) {
        for (int s = w; s < senders; s += threads) {
          SignMore(*p->factory, keys_[s], s, p->per_sender_buffer, p->book.get());
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  *io_.err << absl::StrFormat("loadgen: pre-signed in %.1fs; starting the clock\n",
                              static_cast<double>(clock_->NowNanos() - started) / 1e9);
  return absl::OkStatus();
}

void Runner::SignLoop() {
  const int senders = static_cast<int>(keys_.size());
  while (!stop_background_.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    const double now_s = static_cast<double>(clock_->NowNanos() - t0_) / flowctl::kNanosPerSecond;
    for (auto& p : parts_) {
      if (now_s >= p->load.stop_s) continue;
      const uint64_t low = std::max<uint64_t>(p->per_sender_buffer / 4, 2);
      const uint64_t chunk = std::max<uint64_t>(p->per_sender_buffer / 2, 8);
      for (int s = 0; s < senders && !stop_background_.HasBeenNotified(); ++s) {
        if (p->book->buffered(s) >= low) continue;
        SignMore(*p->factory, keys_[s], s, chunk, p->book.get());
        p->signed_during_run += chunk;
      }
    }
  }
}

void Runner::Offer(PartitionRun& p, uint64_t n, int second, int64_t now) {
  p.stats.AddOffered(second, n);
  const size_t targets = stubs_.size();
  const size_t groups = std::min<size_t>(targets, static_cast<size_t>(o_.senders));
  if (!o_.route_by_sender || groups <= 1) {
    while (n > 0) {  // each batch to the next target
      const uint64_t chunk = std::min<uint64_t>(n, kMaxBatch);
      n -= chunk;
      SendBatch(p, p.next_target++ % targets, chunk, 0, 1, second, now);
    }
    return;
  }
  // Route by sender: target g gets the txs of senders g, g + groups, ...; the tick's offers are
  // split evenly, the remainder starting at a rotating target. A group whose target is avoided
  // (it answered UNAVAILABLE) goes to the next target that is not.
  const size_t first = p.next_target++ % groups;
  for (size_t i = 0; i < groups; ++i) {
    const size_t g = (first + i) % groups;
    size_t target = g;
    for (size_t k = 0; k < targets; ++k) {
      if (avoid_until_[(g + k) % targets].load(std::memory_order_relaxed) <= now) {
        target = (g + k) % targets;
        break;
      }
    }
    uint64_t share = n / groups + (i < n % groups ? 1 : 0);
    while (share > 0) {
      const uint64_t chunk = std::min<uint64_t>(share, kMaxBatch);
      share -= chunk;
      SendBatch(p, target, chunk, g, groups, second, now);
    }
  }
}

void Runner::SendBatch(PartitionRun& p, size_t target, uint64_t chunk, size_t group, size_t groups,
                       int second, int64_t now) {
  if (in_flight_[target].load() >= o_.max_in_flight) {
    p.stats.AddClientDropped(second, chunk);
    return;
  }
  auto call = std::make_unique<Call>();
  call->p = &p;
  call->target = target;
  call->second = second;
  call->sent_nanos = now;
  call->req.mutable_partition()->set_id(p.id);
  for (uint64_t i = 0; i < chunk; ++i) {
    bool held = false;
    std::optional<OfferTx> tx = p.book->Take(group, groups, now, &held);
    if (!tx.has_value()) {
      if (held) {  // the group's senders wait out retry-after hints (--honour-retry-after)
        p.stats.AddHeld(second, chunk - i);
      } else {  // buffers empty: the signer is behind
        p.stats.AddClientDropped(second, chunk - i);
      }
      break;
    }
    tracker_.Sent(tx->hash, now);
    if (tx->retry_ticket != 0) {
      // Tickets go by index: zeros for the txs before this one that had none.
      while (call->req.retry_tickets_size() < call->req.signed_txs_size()) {
        call->req.add_retry_tickets(0);
      }
      call->req.add_retry_tickets(tx->retry_ticket);
      tx->retry_ticket = 0;  // one use
    }
    call->req.add_signed_txs(tx->bytes);
    call->txs.push_back(*std::move(tx));
  }
  if (call->txs.empty()) return;
  call->ctx.set_deadline(DeadlineIn(o_.rpc_timeout_ms));
  ++in_flight_[target];
  {
    absl::MutexLock l(&mu_);
    ++total_in_flight_;
  }
  Call* raw = call.release();
  stubs_[target]->async()->SubmitTxBatch(&raw->ctx, &raw->req, &raw->resp,
                                         [this, raw](grpc::Status s) {
                                           OnBatchDone(raw, s);
                                           delete raw;
                                         });
}

void Runner::OnBatchDone(Call* call, const grpc::Status& status) {
  PartitionRun& p = *call->p;
  const int64_t answered = clock_->NowNanos();
  uint64_t accepted = 0;
  std::array<uint64_t, kNumReasons> rejected = {};
  std::array<std::string, kNumReasons> examples;
  HintCounts hints;
  // A re-offer of a tx whose last rejection carried a hint: did it wait, and did it pass?
  auto score_reoffer = [&](const OfferTx& tx, bool ok) {
    if (tx.hint_nanos <= 0) return;
    if (call->sent_nanos - tx.rejected_at_nanos >= tx.hint_nanos) {
      ++hints.reoffers_after_hint;
      if (ok) ++hints.accepted_after_hint;
    } else {
      ++hints.reoffers_before_hint;
      if (ok) ++hints.accepted_before_hint;
    }
  };
  auto reject = [&](OfferTx& tx, int code, absl::string_view message, absl::string_view by,
                    uint32_t hint_ms, uint64_t ticket) {
    const Reason reason = ClassifyRejection(code, message, by);
    if (rejected[reason]++ == 0) {
      examples[reason] = by.empty() ? absl::StrCat(message, " (code ", code, ")")
                                    : absl::StrCat(by, ": ", message, " (code ", code, ")");
    }
    tracker_.Forget(tx.hash);
    score_reoffer(tx, /*ok=*/false);
    tx.hint_nanos = static_cast<int64_t>(hint_ms) * 1'000'000;
    tx.rejected_at_nanos = answered;
    tx.retry_ticket = ticket;
    if (hint_ms > 0) {
      ++hints.hinted_rejections;
      hints.hint_ms_sum += hint_ms;
    }
    const int64_t not_before = o_.honour_retry_after && hint_ms > 0 ? answered + tx.hint_nanos : 0;
    p.book->ReturnRejected(std::move(tx), ShouldReoffer(code, message), not_before);
  };
  bool unavailable = false;
  if (!status.ok()) {
    std::string by;
    uint32_t hint_ms = 0;
    const auto& md = call->ctx.GetServerTrailingMetadata();
    if (auto it = md.find("rejected-by"); it != md.end())
      by.assign(it->second.data(), it->second.size());
    if (auto it = md.find("retry-after-ms");
        it != md.end() &&
        !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &hint_ms)) {
      hint_ms = 0;  // not a decimal number of milliseconds: no hint
    }
    for (OfferTx& tx : call->txs) {
      reject(tx, static_cast<int>(status.error_code()), status.error_message(), by, hint_ms, 0);
    }
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) unavailable = true;
  } else {
    for (size_t i = 0; i < call->txs.size(); ++i) {
      if (static_cast<int>(i) >= call->resp.results_size()) {
        reject(call->txs[i], 2, "missing result", "", 0, 0);
        continue;
      }
      const node::client::TxResult& r = call->resp.results(static_cast<int>(i));
      if (r.code() == 0 ||
          (r.code() == kGrpcAlreadyExists && absl::StartsWith(r.message(), "duplicate"))) {
        ++accepted;
        score_reoffer(call->txs[i], /*ok=*/true);
      } else {
        if (r.code() == kGrpcUnavailable) unavailable = true;
        reject(call->txs[i], r.code(), r.message(), "", r.retry_after_ms(), r.retry_ticket());
      }
    }
  }
  if (!hints.empty()) p.stats.AddHints(call->second, hints);
  if (unavailable && o_.route_by_sender) {
    avoid_until_[call->target].store(answered + kAvoidNanos, std::memory_order_relaxed);
  }
  if (accepted > 0) p.stats.AddAccepted(call->second, accepted);
  for (int r = 0; r < kNumReasons; ++r) {
    if (rejected[r] == 0) continue;
    p.stats.AddRejected(call->second, static_cast<Reason>(r), rejected[r]);
    p.stats.NoteExample(static_cast<Reason>(r), examples[r]);
  }
  --in_flight_[call->target];
  absl::MutexLock l(&mu_);
  --total_in_flight_;
}

void Runner::SendReads(PartitionRun& p, uint64_t n, int second, int64_t now) {
  struct ReadCall {
    grpc::ClientContext ctx;
    node::client::GetAccountRequest account;
    node::client::GetAccountResponse account_resp;
    node::client::GetBlockRequest block;
    node::client::GetBlockResponse block_resp;
  };
  p.stats.AddReadsOffered(second, n);
  for (uint64_t i = 0; i < n; ++i) {
    const size_t k = p.next_read++;
    const size_t target = k % stubs_.size();
    if (reads_in_flight_[target].load() >= o_.reads_in_flight) {
      p.stats.AddReadsDropped(second, 1);
      continue;
    }
    auto call = std::make_shared<ReadCall>();
    call->ctx.set_deadline(DeadlineIn(o_.rpc_timeout_ms));
    ++reads_in_flight_[target];
    {
      absl::MutexLock l(&mu_);
      ++total_in_flight_;
    }
    auto done = [this, call, &p, target, second, now](grpc::Status s) {
      using Outcome = PartitionStats::ReadOutcome;
      const Outcome outcome = s.ok() ? Outcome::kOk
                              : (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                                 s.error_code() == grpc::StatusCode::UNAVAILABLE)
                                  ? Outcome::kRejected
                                  : Outcome::kFailed;
      p.stats.AddRead(second, outcome, static_cast<double>(clock_->NowNanos() - now) / 1e6);
      --reads_in_flight_[target];
      absl::MutexLock l(&mu_);
      --total_in_flight_;
    };
    ReadCall* raw = call.get();
    if (p.load.read_blocks) {
      // The latest block with its transactions' bodies: a read that costs the node some work.
      raw->block.mutable_partition()->set_id(p.id);
      raw->block.set_include_txs(true);
      read_stubs_[target]->async()->GetBlock(&raw->ctx, &raw->block, &raw->block_resp,
                                             std::move(done));
    } else {
      raw->account.mutable_partition()->set_id(p.id);
      raw->account.set_address(keys_[(k / stubs_.size()) % keys_.size()].public_key().bytes());
      read_stubs_[target]->async()->GetAccount(&raw->ctx, &raw->account, &raw->account_resp,
                                               std::move(done));
    }
  }
}

void Runner::PollLoop(PartitionRun* p) {
  uint64_t height = p->start_height;
  do {
    // Read blocks from the node that is furthest ahead: a lagging or stuck replica (view
    // change, restart) must not hide commits the others already made.
    size_t best = stubs_.size();
    uint64_t best_height = 0;
    for (size_t t = 0; t < stubs_.size(); ++t) {
      grpc::ClientContext ctx;
      ctx.set_deadline(DeadlineIn(1000));
      node::client::GetChainStatusRequest req;
      req.mutable_partition()->set_id(p->id);
      node::client::GetChainStatusResponse status;
      if (!stubs_[t]->GetChainStatus(&ctx, req, &status).ok()) continue;
      if (best == stubs_.size() || status.height() > best_height) {
        best = t;
        best_height = status.height();
      }
    }
    if (best == stubs_.size()) continue;
    // Bounded catch-up per poll, so a stop request is noticed within a few hundred blocks.
    for (int fetched = 0; height < best_height && fetched < 500; ++fetched) {
      grpc::ClientContext bctx;
      bctx.set_deadline(DeadlineIn(2000));
      node::client::GetBlockRequest breq;
      breq.mutable_partition()->set_id(p->id);
      breq.set_height(height + 1);
      node::client::GetBlockResponse block;
      if (!stubs_[best]->GetBlock(&bctx, breq, &block).ok()) break;
      CountCommits(p, block.block().tx_hashes());
      ++height;
    }
  } while (!stop_background_.WaitForNotificationWithTimeout(absl::Milliseconds(o_.poll_ms)));
}

void Runner::CountCommits(PartitionRun* p,
                          const google::protobuf::RepeatedPtrField<std::string>& hashes) {
  const int64_t now = clock_->NowNanos();
  const int second = Second(now);
  for (const std::string& hash : hashes) {
    // Once per tx: the first target to report its block counts.
    if (std::optional<int64_t> sent = tracker_.Committed(hash)) {
      p->stats.AddCommit(second, static_cast<double>(now - *sent) / 1e6);
    }
  }
}

void Runner::WatchLoop(PartitionRun* p, size_t target) {
  uint64_t next = p->start_height + 1;
  while (!stop_background_.HasBeenNotified()) {
    grpc::ClientContext ctx;
    {
      absl::MutexLock l(&mu_);
      if (watches_cancelled_) return;
      watches_.insert(&ctx);
    }
    node::client::WatchCommitsRequest req;
    req.mutable_partition()->set_id(p->id);
    req.set_from_height(next);
    std::unique_ptr<grpc::ClientReader<node::client::WatchCommitsResponse>> reader =
        stubs_[target]->WatchCommits(&ctx, req);
    node::client::WatchCommitsResponse block;
    while (reader->Read(&block)) {
      CountCommits(p, block.block().tx_hashes());
      next = block.height() + 1;
    }
    // Ended: cut as too slow (resume-height = next), the node restarting, or the run's end.
    // Reopen from the next height, after a pause so that a node that is down is not hammered.
    reader->Finish();
    {
      absl::MutexLock l(&mu_);
      watches_.erase(&ctx);
    }
    stop_background_.WaitForNotificationWithTimeout(absl::Milliseconds(o_.poll_ms));
  }
}

void Runner::CancelWatches() {
  absl::MutexLock l(&mu_);
  watches_cancelled_ = true;
  for (grpc::ClientContext* ctx : watches_) ctx->TryCancel();
}

void Runner::PrintSeconds(int up_to) {
  for (; printed_ < up_to; ++printed_) {
    if (o_.quiet) continue;
    for (auto& p : parts_) {
      *io_.out << FormatSecondLine(printed_, p->load.name, p->stats.Second(printed_)) << "\n";
    }
  }
  io_.out->flush();
}

void Runner::OfferLoop() {
  const int64_t tick = static_cast<int64_t>(o_.batch_ms) * 1'000'000;
  const int64_t end = t0_ + static_cast<int64_t>(o_.duration_s * flowctl::kNanosPerSecond);
  int last_progress = -1;
  const int last_second = std::max(0, static_cast<int>(std::ceil(o_.duration_s)) - 1);
  for (int64_t k = 1;; ++k) {
    const int64_t wake = std::min(t0_ + k * tick, end);
    const int64_t now_before = clock_->NowNanos();
    if (wake > now_before) absl::SleepFor(absl::Nanoseconds(wake - now_before));
    const int64_t now = clock_->NowNanos();
    const double now_s = static_cast<double>(now - t0_) / flowctl::kNanosPerSecond;
    // The last tick wakes at `end`: its offers belong to the run's last second.
    const int second = std::min(Second(now), last_second);
    for (auto& p : parts_) {
      const uint64_t due = p->schedule->OffersBefore(now_s);
      if (due > p->scheduled) Offer(*p, due - p->scheduled, second, now);
      p->scheduled = std::max(due, p->scheduled);
      const auto reads_due = static_cast<uint64_t>(ReadsBefore(p->load, now_s) + 1e-6);
      if (reads_due > p->reads_scheduled)
        SendReads(*p, reads_due - p->reads_scheduled, second, now);
      p->reads_scheduled = std::max(reads_due, p->reads_scheduled);
    }
    PrintSeconds(second);
    if (second != last_progress) {
      last_progress = second;
      uint64_t committed = 0, offered = 0;
      for (auto& p : parts_) {
        for (const SecondStats& s : p->stats.Snapshot()) {
          committed += s.committed;
          offered += s.offered;
        }
      }
      std::string line = FormatProgress(now_s, o_.duration_s, offered, committed);
      if (io_.progress_tty) {
        *io_.err << "\r" << line << std::flush;
      } else if (second % 10 == 0 && second > 0) {
        *io_.err << line << "\n";
      }
    }
    if (now >= end || StopRequested()) break;
  }
  if (io_.progress_tty) *io_.err << "\n";
}

void Runner::Drain() {
  const int64_t deadline = clock_->NowNanos() + static_cast<int64_t>(o_.drain_s * 1e9);
  while (clock_->NowNanos() < deadline && !StopRequested()) {
    bool rpcs_done = false;
    {
      absl::MutexLock l(&mu_);
      rpcs_done = total_in_flight_ == 0;
    }
    if (rpcs_done && tracker_.outstanding() == 0) break;
    absl::SleepFor(absl::Milliseconds(20));
    PrintSeconds(Second(clock_->NowNanos()));
  }
}

int Runner::Run() {
  if (absl::Status s = Setup(); !s.ok()) {
    *io_.err << "loadgen: " << s.message() << "\n";
    return 1;
  }
  t0_ = clock_->NowNanos();
  std::vector<std::thread> background;
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (!o_.watch_commits) {
      background.emplace_back([this, i] { PollLoop(parts_[i].get()); });
      continue;
    }
    for (size_t t = 0; t < stubs_.size(); ++t) {
      background.emplace_back([this, i, t] { WatchLoop(parts_[i].get(), t); });
    }
  }
  background.emplace_back([this] { SignLoop(); });
  OfferLoop();
  Drain();
  stop_background_.Notify();
  CancelWatches();
  for (std::thread& t : background) t.join();
  // Every RPC has a deadline, so this wait ends; the bound is a second after the last deadline.
  {
    absl::MutexLock l(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return total_in_flight_ == 0; };
    mu_.AwaitWithTimeout(absl::Condition(&done), absl::Milliseconds(o_.rpc_timeout_ms + 1000));
    if (total_in_flight_ != 0) {
      *io_.err << "loadgen: " << total_in_flight_ << " RPCs still outstanding at exit\n";
      io_.err->flush();
      _exit(1);  // their callbacks reference this runner; never free it under them
    }
  }
  PrintSeconds(Second(clock_->NowNanos()) + 1);
  return Report();
}

int Runner::Report() {
  std::vector<PartitionReport> reports;
  for (auto& p : parts_) {
    PartitionReport r;
    r.name = p->load.name;
    r.id = p->id;
    r.pattern = PatternName(p->load.kind);
    r.active = {static_cast<int>(std::floor(p->load.start_s)),
                static_cast<int>(std::ceil(p->load.stop_s))};
    r.series = p->stats.Snapshot();
    r.totals = Summarize(r.series, {0, static_cast<int>(r.series.size())});
    r.active_totals = Summarize(r.series, r.active);
    r.signed_during_run = p->signed_during_run.load();
    r.pending_reoffers = p->book->pending_reoffers();
    r.examples = p->stats.Examples();
    r.uncommitted =
        r.totals.accepted > r.totals.committed ? r.totals.accepted - r.totals.committed : 0;
    reports.push_back(std::move(r));
  }
  if (!admin_stubs_.empty()) {
    std::vector<std::optional<uint64_t>> deltas(parts_.size());
    bool all_read = true;
    for (size_t a = 0; a < admin_stubs_.size(); ++a) {
      absl::StatusOr<std::map<std::string, uint64_t>> end = ReadAdmin(a);
      if (!end.ok()) {
        *io_.err << "loadgen: " << end.status().message() << "\n";
        all_read = false;
        continue;
      }
      for (size_t i = 0; i < reports.size(); ++i) {
        const uint64_t before = view_changes_start_[a][reports[i].name];
        const uint64_t after = (*end)[reports[i].name];
        const uint64_t d = after > before ? after - before : 0;
        deltas[i] = std::max(deltas[i].value_or(0), d);
      }
    }
    // The max over nodes: one view change is seen by every replica.
    for (size_t i = 0; i < reports.size() && all_read; ++i) reports[i].view_changes = deltas[i];
  }
  *io_.out << "\n" << FormatSummary(reports);
  std::vector<std::string> names;
  for (const auto& p : parts_) names.push_back(p->load.name);
  std::vector<std::string> lines;
  const bool all_pass = EvaluateAll(
      o_.expectations, names, [&](const MetricRef& ref) { return Measure(reports, ref); }, &lines);
  for (const std::string& line : lines) *io_.out << line << "\n";
  io_.out->flush();
  RunInfo info{.duration_s = o_.duration_s,
               .drain_s = o_.drain_s,
               .targets = o_.targets,
               .scenario = o_.scenario,
               .seed = o_.seed};
  if (!o_.out_dir.empty()) {
    if (absl::Status s = WriteReportFiles(o_.out_dir, reports, info, lines); !s.ok()) {
      *io_.err << "loadgen: " << s.message() << "\n";
      return 1;
    }
    *io_.err << "loadgen: wrote " << o_.out_dir << "/{series.csv,summary.json,report.svg}\n";
  }
  return all_pass ? 0 : 1;
}

}  // namespace

int RunLoadgen(const std::vector<std::string>& args, const RunIo& io) {
  bool help = false;
  absl::StatusOr<Options> options = ParseLoadgenFlags(args, &help);
  if (help) {
    *io.out << LoadgenUsage();
    return 0;
  }
  if (!options.ok()) {
    *io.err << "loadgen: " << options.status().message() << "\n(run loadgen --help)\n";
    return 2;
  }
  Runner runner(*std::move(options), io);
  return runner.Run();
}

}  // namespace loadgen
