#include "p2p/peer_connection.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flowctl/thread_name.h"
#include "glog/logging.h"

namespace p2p {

PeerConnection::PeerConnection(NodeId peer, WriteFn write, ReadFn read,
                               std::function<void()> cancel, size_t queue_bytes, size_t batch_bytes,
                               size_t max_frame_bytes, std::atomic<uint64_t>* writes,
                               const flowctl::Clock* clock)
    : peer_(std::move(peer)),
      write_(std::move(write)),
      read_(std::move(read)),
      queue_bytes_(queue_bytes),
      batch_bytes_(batch_bytes),
      writes_(writes),
      clock_(clock),
      reassembler_(max_frame_bytes),
      cancel_(std::move(cancel)) {}

PeerConnection::~PeerConnection() {
  CHECK(writer_ == nullptr) << "connection destroyed with its writer running";
}

bool PeerConnection::Push(EgressFrame f) {
  absl::MutexLock l(&mu_);
  const size_t limit = f.channel == node::p2p::CONSENSUS ? 2 * queue_bytes_ : queue_bytes_;
  if (closed_ || out_bytes_ + f.length > limit) return false;
  out_bytes_ += f.length;
  out_.push_back(std::move(f));
  if (release_bytes_ > 0 && !blocked_ && out_bytes_ >= release_bytes_) {
    blocked_ = true;
    on_pressure_(true);
  }
  return true;
}

bool PeerConnection::PushAll(std::vector<EgressFrame> frames) {
  if (frames.empty()) return true;
  absl::MutexLock l(&mu_);
  const size_t limit =
      frames.front().channel == node::p2p::CONSENSUS ? 2 * queue_bytes_ : queue_bytes_;
  size_t bytes = 0;
  for (const EgressFrame& f : frames) bytes += f.length;
  if (closed_ || out_bytes_ + bytes > limit) return false;
  out_bytes_ += bytes;
  for (EgressFrame& f : frames) out_.push_back(std::move(f));
  if (release_bytes_ > 0 && !blocked_ && out_bytes_ >= release_bytes_) {
    blocked_ = true;
    on_pressure_(true);
  }
  return true;
}

void PeerConnection::SetPressureCallback(size_t release_bytes,
                                         std::function<void(bool blocked)> on_pressure) {
  absl::MutexLock l(&mu_);
  release_bytes_ = release_bytes;
  on_pressure_ = std::move(on_pressure);
}

void PeerConnection::StartWriter() {
  writer_ = std::make_unique<std::thread>([this] {
    flowctl::NameThisThread("peer-writer");
    WriterLoop();
    writer_done_.Notify();
  });
}

void PeerConnection::Close() {
  absl::MutexLock l(&mu_);
  closed_ = true;
  // Under mu_, so Detach() cannot let the owner free the stream while it is being cancelled.
  if (cancel_) cancel_();
}

void PeerConnection::Detach() { Detach(absl::InfiniteDuration()); }

bool PeerConnection::Detach(absl::Duration max_wait) {
  Close();
  if (writer_) {
    if (!writer_done_.WaitForNotificationWithTimeout(max_wait)) return false;
    JoinWriter();
  }
  absl::MutexLock l(&mu_);
  cancel_ = nullptr;
  return true;
}

void PeerConnection::JoinWriter() {
  if (writer_) {
    writer_->join();
    writer_.reset();
  }
}

void PeerConnection::MaybePing(int64_t now_ns, int64_t interval_ns) {
  absl::MutexLock l(&mu_);
  if (closed_ || ping_outstanding_ != 0) return;
  if (pinged_ && now_ns - ping_requested_ns_ < interval_ns) return;
  ping_outstanding_ = ping_to_send_ = next_ping_++;
  ping_requested_ns_ = now_ns;
  pinged_ = true;
}

void PeerConnection::OnPing(uint64_t id) {
  absl::MutexLock l(&mu_);
  pong_to_send_ = id;
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
  absl::MutexLock l(&mu_);
  stalled_ = true;
  closed_ = true;
  if (cancel_) cancel_();
}

bool PeerConnection::stalled() const {
  absl::MutexLock l(&mu_);
  return stalled_;
}

int64_t PeerConnection::last_rtt_ns() const {
  absl::MutexLock l(&mu_);
  return last_rtt_ns_;
}

void PeerConnection::WriterLoop() {
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || !out_.empty() || ping_to_send_ != 0 || pong_to_send_ != 0;
  };
  std::vector<EgressFrame> batch;
  node::p2p::StreamMessage msg;
  for (;;) {
    batch.clear();
    uint64_t ping = 0;
    uint64_t pong = 0;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(&ready));
      if (closed_) return;
      // A ping or pong rides on the next message, which may carry no frames.
      std::swap(ping, ping_to_send_);
      std::swap(pong, pong_to_send_);
      // Everything queued, up to batch_bytes_: one gRPC write for many small frames.
      size_t bytes = 0;
      while (!out_.empty() && (batch.empty() || bytes + out_.front().length <= batch_bytes_)) {
        bytes += out_.front().length;
        out_bytes_ -= out_.front().length;
        batch.push_back(std::move(out_.front()));
        out_.pop_front();
      }
      if (blocked_ && out_bytes_ <= release_bytes_ / 2) {
        blocked_ = false;
        on_pressure_(false);
      }
    }
    node::p2p::FrameBatch* fb = msg.mutable_frames();
    fb->Clear();
    fb->set_ping(ping);
    fb->set_pong(pong);
    size_t batch_bytes = 0;
    for (const EgressFrame& f : batch) {
      batch_bytes += f.length;
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
    const auto write_start = std::chrono::steady_clock::now();
    write_bytes_.store(batch_bytes, std::memory_order_relaxed);
    write_started_ns_.store(clock_->NowNanos(), std::memory_order_release);
    const bool written = write_(msg);
    write_started_ns_.store(0, std::memory_order_release);
    if (!written) {
      Close();
      return;
    }
    writes_->fetch_add(1, std::memory_order_relaxed);
    bytes_written_.fetch_add(batch_bytes, std::memory_order_relaxed);
    // A write blocks while the peer's HTTP/2 window or the TCP send buffer is full: everything
    // queued behind it, votes included, waits. Worth a line when it lasts (docs/RELIABILITY.md:
    // a link left stuck for tens of seconds after heavy loss).
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - write_start);
    if (took > kSlowPeerIo) {
      LOG_EVERY_T(WARNING, 1) << "p2p: a write of " << batch.size() << " frames (" << batch_bytes
                              << " bytes) to peer " << peer_ << " took " << took.count() << " ms";
    }
  }
}

}  // namespace p2p
