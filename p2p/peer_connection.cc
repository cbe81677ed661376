#include "p2p/peer_connection.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace p2p {

PeerConnection::PeerConnection(NodeId peer, std::shared_ptr<LinkStream> stream, size_t queue_bytes,
                               size_t batch_bytes, size_t max_frame_bytes,
                               std::atomic<uint64_t>* writes, const flowctl::Clock* clock)
    : peer_(std::move(peer)),
      stream_(std::move(stream)),
      queue_bytes_(queue_bytes),
      batch_bytes_(batch_bytes),
      writes_(writes),
      clock_(clock),
      reassembler_(max_frame_bytes) {}

bool PeerConnection::Push(EgressFrame f) {
  {
    absl::MutexLock l(&mu_);
    const size_t limit = f.channel == node::p2p::CONSENSUS ? 2 * queue_bytes_ : queue_bytes_;
    if (closed_ || out_bytes_ + f.length > limit) return false;
    out_bytes_ += f.length;
    out_.push_back(std::move(f));
    SignalPressureLocked();
  }
  MaybeStartWrite();
  return true;
}

bool PeerConnection::PushAll(std::vector<EgressFrame> frames) {
  if (frames.empty()) return true;
  {
    absl::MutexLock l(&mu_);
    const size_t limit =
        frames.front().channel == node::p2p::CONSENSUS ? 2 * queue_bytes_ : queue_bytes_;
    size_t bytes = 0;
    for (const EgressFrame& f : frames) bytes += f.length;
    if (closed_ || out_bytes_ + bytes > limit) return false;
    out_bytes_ += bytes;
    for (EgressFrame& f : frames) out_.push_back(std::move(f));
    SignalPressureLocked();
  }
  MaybeStartWrite();
  return true;
}

void PeerConnection::SetPressureCallback(size_t release_bytes,
                                         std::function<void(bool blocked)> on_pressure) {
  absl::MutexLock l(&mu_);
  release_bytes_ = release_bytes;
  on_pressure_ = std::move(on_pressure);
}

void PeerConnection::SignalPressureLocked() {
  if (release_bytes_ > 0 && !blocked_ && out_bytes_ >= release_bytes_) {
    blocked_ = true;
    on_pressure_(true);
  }
}

bool PeerConnection::HasWorkLocked() const {
  return !out_.empty() || ping_to_send_ != 0 || pong_to_send_ != 0;
}

void PeerConnection::TakeBatchLocked() {
  // A ping or pong rides on the next message, which may carry no frames.
  batch_ping_ = std::exchange(ping_to_send_, 0);
  batch_pong_ = std::exchange(pong_to_send_, 0);
  // Everything queued, up to batch_bytes_: one gRPC write for many small frames.
  batch_bytes_taken_ = 0;
  while (!out_.empty() &&
         (batch_frames_.empty() || batch_bytes_taken_ + out_.front().length <= batch_bytes_)) {
    batch_bytes_taken_ += out_.front().length;
    out_bytes_ -= out_.front().length;
    batch_frames_.push_back(std::move(out_.front()));
    out_.pop_front();
  }
  if (blocked_ && out_bytes_ <= release_bytes_ / 2) {
    blocked_ = false;
    on_pressure_(false);
  }
}

void PeerConnection::StartTakenWrite() {
  node::p2p::FrameBatch* fb = msg_.mutable_frames();
  fb->Clear();
  fb->set_ping(batch_ping_);
  fb->set_pong(batch_pong_);
  for (const EgressFrame& f : batch_frames_) {
    node::p2p::Frame* fr = fb->add_frames();
    node::p2p::FrameHeader* h = fr->mutable_header();
    h->set_partition(f.partition);
    h->set_channel(f.channel);
    h->set_length(f.message_length);
    h->set_chunk_index(f.chunk_index);
    h->set_chunk_count(f.chunk_count);
    h->set_message_id(f.message_id);
    fr->set_payload(f.data->data() + f.offset, f.length);
  }
  batch_frames_.clear();  // the message holds copies: the payloads are freed now
  write_start_ = std::chrono::steady_clock::now();
  write_bytes_.store(batch_bytes_taken_, std::memory_order_relaxed);
  write_started_ns_.store(clock_->NowNanos(), std::memory_order_release);
  // Nothing of the message is touched after this call until OnWriteDone: its completion may
  // run on another thread before the call returns.
  if (stream_->StartWrite(&msg_)) return;
  // The stream is ending: nothing was started.
  write_started_ns_.store(0, std::memory_order_release);
  bool cancel = false;
  {
    absl::MutexLock l(&mu_);
    writing_ = false;
    CloseLocked(&cancel);
  }
  if (cancel) stream_->Cancel();
}

void PeerConnection::MaybeStartWrite() {
  {
    absl::MutexLock l(&mu_);
    if (writing_ || closed_ || !HasWorkLocked()) return;
    writing_ = true;
    TakeBatchLocked();
  }
  StartTakenWrite();
}

void PeerConnection::OnWriteDone(bool ok) {
  const size_t bytes = write_bytes_.load(std::memory_order_relaxed);
  write_started_ns_.store(0, std::memory_order_release);
  if (ok) {
    writes_->fetch_add(1, std::memory_order_relaxed);
    bytes_written_.fetch_add(bytes, std::memory_order_relaxed);
    // A write lasts while the peer's HTTP/2 window or the TCP send buffer is full: everything
    // queued behind it, votes included, waits. Worth a line when it lasts (docs/RELIABILITY.md:
    // a link left stuck for tens of seconds after heavy loss).
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - write_start_);
    if (took > kSlowPeerIo) {
      LOG_EVERY_T(WARNING, 1) << "p2p: a write of " << msg_.frames().frames_size() << " frames ("
                              << bytes << " bytes) to peer " << peer_ << " took " << took.count()
                              << " ms";
    }
  }
  bool cancel = false;
  bool more = false;
  {
    absl::MutexLock l(&mu_);
    if (!ok) CloseLocked(&cancel);
    if (closed_ || !HasWorkLocked()) {
      writing_ = false;
    } else {
      TakeBatchLocked();  // the token stays with this completion
      more = true;
    }
  }
  if (cancel) stream_->Cancel();
  if (more) StartTakenWrite();
}

void PeerConnection::CloseLocked(bool* cancel) {
  *cancel = !closed_;
  closed_ = true;
}

void PeerConnection::Close() {
  bool cancel = false;
  {
    absl::MutexLock l(&mu_);
    CloseLocked(&cancel);
  }
  if (cancel) stream_->Cancel();
}

bool PeerConnection::closed() const {
  absl::MutexLock l(&mu_);
  return closed_;
}

void PeerConnection::MaybePing(int64_t now_ns, int64_t interval_ns) {
  {
    absl::MutexLock l(&mu_);
    if (closed_ || ping_outstanding_ != 0) return;
    if (pinged_ && now_ns - ping_requested_ns_ < interval_ns) return;
    ping_outstanding_ = ping_to_send_ = next_ping_++;
    ping_requested_ns_ = now_ns;
    pinged_ = true;
  }
  MaybeStartWrite();
}

void PeerConnection::OnPing(uint64_t id) {
  {
    absl::MutexLock l(&mu_);
    pong_to_send_ = id;
  }
  MaybeStartWrite();
}

void PeerConnection::OnPong(uint64_t id, int64_t now_ns) {
  absl::MutexLock l(&mu_);
  if (id == 0 || id != ping_outstanding_) return;
  ping_outstanding_ = 0;
  peer_answers_pings_ = true;
  last_rtt_ns_ = now_ns - ping_requested_ns_;
}

std::string PeerConnection::StallReason(int64_t now_ns, const LinkStallLimits& limits) {
  const int64_t started = write_started_ns_.load(std::memory_order_acquire);
  const size_t bytes = write_bytes_.load(std::memory_order_relaxed);
  absl::MutexLock l(&mu_);
  if (closed_) return "";
  if (limits.write_ns > 0 && started != 0) {
    const double allowed =
        static_cast<double>(limits.write_ns) +
        (limits.write_bytes_per_ns > 0 ? static_cast<double>(bytes) / limits.write_bytes_per_ns
                                       : 0.0);
    if (static_cast<double>(now_ns - started) > allowed) {
      return absl::StrCat("a write of ", bytes, " bytes blocked for ", (now_ns - started) / 1000000,
                          " ms");
    }
  }
  if (limits.ping_timeout_ns > 0 && peer_answers_pings_ && ping_outstanding_ != 0 &&
      now_ns - ping_requested_ns_ > limits.ping_timeout_ns) {
    return absl::StrCat("ping unanswered for ", (now_ns - ping_requested_ns_) / 1000000,
                        " ms (last round trip ", last_rtt_ns_ / 1000000, " ms)");
  }
  return "";
}

void PeerConnection::MarkStalled() {
  bool cancel = false;
  {
    absl::MutexLock l(&mu_);
    stalled_ = true;
    CloseLocked(&cancel);
  }
  if (cancel) stream_->Cancel();
}

bool PeerConnection::stalled() const {
  absl::MutexLock l(&mu_);
  return stalled_;
}

int64_t PeerConnection::last_rtt_ns() const {
  absl::MutexLock l(&mu_);
  return last_rtt_ns_;
}

}  // namespace p2p
