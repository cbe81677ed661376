// EgressSender: releases an EgressScheduler's frames to a real transport.
//
// It hands each frame the scheduler releases to the sink (the transport's per-peer writer queue).
// Two kinds of thread release frames, one at a time (so frames keep the scheduler's order):
// - the thread that queued them, through Release() right after a quiet Enqueue: when the
//   scheduler lets them out at once (no cap binding, the peer not blocked) they are on their
//   way to the transport before Release returns, with no wake-up of another thread;
// - the sender's own thread, for everything that must wait: frames held by the cap or by a
//   blocked peer, a burst too long to deliver inline, and every wake-up the scheduler calls
//   (cap changes, a peer unblocked, waking Enqueues).
// The sink must not block.
//
// Thread-safety: Start/Stop from one owner thread; Release and the scheduler from any thread.
// Before Start and after Stop, Release leaves frames in the scheduler.
//
//   EgressSender sender(&scheduler, [&](EgressFrame f) { peers.Push(std::move(f)); });
//   sender.Start();
//   if (scheduler.Enqueue(peer, partition, channel, payload, /*wake=*/false).ok()) {
//     sender.Release();
//   }
//   sender.Stop();
#ifndef P2P_EGRESS_SENDER_H_
#define P2P_EGRESS_SENDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "p2p/egress_scheduler.h"

namespace p2p {

class EgressSender {
 public:
  using Sink = std::function<void(EgressFrame)>;

  // Frames one Release delivers at most before it leaves the rest to the sender's thread.
  static constexpr int kReleaseBurst = 64;

  // Installs itself as the scheduler's wakeup. REQUIRES: scheduler outlives the sender.
  EgressSender(EgressScheduler* scheduler, Sink sink);
  ~EgressSender();  // Stop()
  EgressSender(const EgressSender&) = delete;
  EgressSender& operator=(const EgressSender&) = delete;

  void Start();
  // Idempotent; frames still queued stay in the scheduler.
  void Stop();

  // Delivers, on the calling thread, what the scheduler releases now (at most kReleaseBurst
  // frames); whatever must wait is left to the sender's thread. Call after a quiet Enqueue.
  void Release();

  // Frames delivered by Release (not by the sender's thread); for tests.
  uint64_t released_inline() const { return released_inline_.load(std::memory_order_relaxed); }
  // Tests: returns once the sender's thread waits for a wake-up (or a timed wait), having
  // nothing it could deliver.
  void AwaitIdleForTesting();

 private:
  static constexpr int64_t kBusy = -1;

  void Loop();
  void Kick();
  // Delivers while frames are pending and no other thread is delivering: at most `limit` frames
  // per turn. Returns the scheduler's wait after the last turn (0: the turn ended at `limit`), or
  // kBusy when another thread holds the turn (that thread sees `pending_` and goes on).
  int64_t Drain(int limit, bool inline_release);

  EgressScheduler* const scheduler_;
  const Sink sink_;
  std::unique_ptr<std::thread> thread_;
  std::atomic<bool> running_{false};
  // The turn to deliver, and "frames may be ready that the holder of the turn has not seen".
  std::atomic<bool> draining_{false};
  std::atomic<bool> pending_{false};
  std::atomic<uint64_t> released_inline_{0};

  absl::Mutex mu_;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool idle_ ABSL_GUARDED_BY(mu_) = false;  // the thread is waiting
};

}  // namespace p2p

#endif  // P2P_EGRESS_SENDER_H_
