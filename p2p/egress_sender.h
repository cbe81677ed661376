// EgressSender: the thread that runs an EgressScheduler for a real transport.
//
// It dequeues frames as the scheduler releases them and hands each to the sink (the transport's
// per-peer writer queue); when the scheduler says wait, it sleeps until that time or until an
// Enqueue / cap change wakes it. The sink runs on the sender thread and must not block.
//
// Thread-safety: Start/Stop from one owner thread; the scheduler may be used from any thread.
//
//   EgressSender sender(&scheduler, [&](EgressFrame f) { peers.Push(std::move(f)); });
//   sender.Start();
//   ...
//   sender.Stop();
#ifndef P2P_EGRESS_SENDER_H_
#define P2P_EGRESS_SENDER_H_

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

  // Installs itself as the scheduler's wakeup. REQUIRES: scheduler outlives the sender.
  EgressSender(EgressScheduler* scheduler, Sink sink);
  ~EgressSender();  // Stop()
  EgressSender(const EgressSender&) = delete;
  EgressSender& operator=(const EgressSender&) = delete;

  void Start();
  // Idempotent; frames still queued stay in the scheduler.
  void Stop();

 private:
  void Loop();
  void Kick();

  EgressScheduler* const scheduler_;
  const Sink sink_;
  std::unique_ptr<std::thread> thread_;

  absl::Mutex mu_;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace p2p

#endif  // P2P_EGRESS_SENDER_H_
