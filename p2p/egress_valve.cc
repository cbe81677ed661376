#include "p2p/egress_valve.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace p2p {

absl::StatusOr<std::unique_ptr<EgressValve>> EgressValve::Create(Network* inner,
                                                                 FrameWriter* frames,
                                                                 EgressValveOptions options,
                                                                 const flowctl::Clock* clock) {
  CHECK(inner != nullptr);
  if (options.fault.enabled()) {
    if (absl::Status s = ValidateFaultOptions(options.fault); !s.ok()) return s;
  }
  return std::unique_ptr<EgressValve>(new EgressValve(inner, frames, std::move(options), clock));
}

EgressValve::EgressValve(Network* inner, FrameWriter* frames, EgressValveOptions options,
                         const flowctl::Clock* clock)
    : inner_(inner),
      frames_(frames),
      options_(std::move(options)),
      clock_(clock),
      scheduler_(std::make_shared<EgressScheduler>(options_.egress, clock)),
      sender_(std::make_unique<EgressSender>(scheduler_.get(),
                                             [this](EgressFrame f) { Deliver(std::move(f)); })) {
  if (options_.fault.enabled()) {  // tests only; built before anything can Send
    fault_ = std::make_unique<FaultInjector>(
        options_.fault,
        [sched = scheduler_.get()](const NodeId& peer, PartitionId partition, Channel channel,
                                   std::shared_ptr<const std::string> payload) {
          return sched->Enqueue(peer, partition, channel, std::move(payload));
        },
        clock_);
    LOG(WARNING) << "p2p " << inner_->self()
                 << ": FAULT INJECTION ON (test flag): " << DescribeFaultOptions(options_.fault);
  }
  if (frames_ != nullptr) {
    frames_->SetPressureHandler([sched = scheduler_](const NodeId& peer, bool blocked) {
      sched->SetPeerBlocked(peer, blocked);
    });
  }
}

EgressValve::~EgressValve() { Stop(); }

absl::Status EgressValve::Start() {
  absl::MutexLock l(&mu_);
  if (started_) return absl::FailedPreconditionError("egress valve already started");
  started_ = true;
  if (fault_ != nullptr) fault_->Start();
  sender_->Start();
  return absl::OkStatus();
}

void EgressValve::Stop() {
  // The injector first: it feeds the scheduler, which the sender drains.
  if (fault_ != nullptr) fault_->Stop();
  absl::MutexLock l(&mu_);
  sender_->Stop();  // joins the thread; a Release still running on another thread may finish
}

int64_t EgressValve::ReleaseDue() {
  absl::MutexLock l(&release_mu_);
  int64_t wait = EgressScheduler::kNever;
  if (fault_ != nullptr) {
    fault_->ReleaseDue();
    const int64_t due = fault_->NextDueNanos();
    if (due >= 0) wait = std::max<int64_t>(0, due - clock_->NowNanos());
  }
  for (;;) {
    DequeueResult r = scheduler_->Dequeue();
    if (!r.frame) return std::min(wait, r.wait_nanos);
    Deliver(std::move(*r.frame));
  }
}

void EgressValve::Release() {
  if (!DeferredSends::Defer(this, [this] { sender_->Release(); })) sender_->Release();
}

void EgressValve::Deliver(EgressFrame frame) {
  if (frames_ != nullptr) {
    frames_->WriteFrame(std::move(frame));
    return;
  }
  // Store and forward: the chunks were paced; the message moves when its last one is released.
  if (!frame.last()) return;
  absl::Status s =
      inner_->Send(frame.peer, frame.partition, frame.channel, std::string(*frame.data));
  if (!s.ok()) {
    inner_send_failures_.fetch_add(1, std::memory_order_relaxed);
    VLOG(1) << "p2p " << inner_->self() << ": released message to " << frame.peer
            << " refused by the network: " << s;
  }
}

absl::Status EgressValve::CheckPeer(const NodeId& peer) const {
  const std::vector<NodeId> connected = inner_->connected_peers();
  if (std::find(connected.begin(), connected.end(), peer) != connected.end()) {
    return absl::OkStatus();
  }
  const std::vector<NodeId> all = inner_->peers();
  if (std::find(all.begin(), all.end(), peer) == all.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown peer ", peer));
  }
  return absl::UnavailableError(absl::StrCat("peer ", peer, " not connected"));
}

absl::Status EgressValve::Submit(const NodeId& peer, PartitionId partition, Channel channel,
                                 std::shared_ptr<const std::string> payload) {
  if (fault_ != nullptr) return fault_->Submit(peer, partition, channel, std::move(payload));
  return scheduler_->Enqueue(peer, partition, channel, std::move(payload), /*wake=*/false);
}

absl::Status EgressValve::Send(const NodeId& peer, PartitionId partition, Channel channel,
                               std::string payload) {
  if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
  absl::Status s =
      Submit(peer, partition, channel, std::make_shared<const std::string>(std::move(payload)));
  if (s.ok()) Release();
  return s;
}

absl::Status EgressValve::Broadcast(PartitionId partition, Channel channel, std::string payload) {
  if (payload.size() > options_.egress.max_frame_bytes) {
    // Let the scheduler produce (and count) the error.
    return scheduler_->Enqueue(inner_->self(), partition, channel, std::move(payload));
  }
  auto shared = std::make_shared<const std::string>(std::move(payload));
  absl::Status first_error;
  for (const NodeId& peer : inner_->connected_peers()) {
    absl::Status s = Submit(peer, partition, channel, shared);
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  Release();  // once, for every peer's copy
  return first_error;
}

void EgressValve::SetHandlers(MessageHandler on_message, PeerEventHandler on_peer_event) {
  inner_->SetHandlers(std::move(on_message),
                      [sched = scheduler_, on_peer_event = std::move(on_peer_event)](
                          const NodeId& peer, PeerEvent event) {
                        // A peer that went away takes its queued messages with it; it starts
                        // afresh, unblocked.
                        if (event == PeerEvent::kDown) sched->DropPeer(peer);
                        if (on_peer_event) on_peer_event(peer, event);
                      });
}

EgressValveStats EgressValve::Stats() const {
  EgressValveStats s;
  s.egress = scheduler_->Stats();
  s.inner_send_failures = inner_send_failures_.load(std::memory_order_relaxed);
  if (fault_ != nullptr) s.fault = fault_->Stats();
  return s;
}

}  // namespace p2p
