#include "runtime/read_hold.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "flowctl/thread_name.h"

namespace runtime {

ReadHold::ReadHold(const flowctl::Clock* clock) : clock_(clock) {}

ReadHold::~ReadHold() { Stop(); }

void ReadHold::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || stopped_) return;
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
}

template <typename Pred>
void ReadHold::TakeIf(Queue& q, Pred pred, std::vector<std::unique_ptr<HeldRead>>* out) {
  for (auto& [name, client] : q.clients) {
    std::deque<Entry> kept;
    for (Entry& e : client.entries) {
      if (pred(e)) {
        out->push_back(std::move(e.read));
        ++q.counters.expired;
        --q.counters.waiting;
      } else {
        kept.push_back(std::move(e));
      }
    }
    client.entries = std::move(kept);
  }
  Tidy(q);
}

void ReadHold::Tidy(Queue& q) {
  std::deque<std::string> turns;
  for (std::string& name : q.turns) {
    ClientReads& c = q.clients[name];
    if (c.entries.empty()) {
      c.in_turns = false;
    } else {
      turns.push_back(std::move(name));
    }
  }
  q.turns = std::move(turns);
  std::erase_if(q.clients,
                [](const auto& kv) { return kv.second.entries.empty() && !kv.second.in_turns; });
}

int64_t ReadHold::EarliestDeadline(const Queue& q) {
  int64_t earliest = INT64_MAX;
  for (const auto& [name, client] : q.clients) {
    if (!client.entries.empty()) earliest = std::min(earliest, client.entries.front().deadline_ns);
  }
  return earliest;
}

void ReadHold::Stop() {
  std::vector<std::unique_ptr<HeldRead>> given_up;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    // A queue whose head is being tried keeps it: RunQueue gives it up when the try returns.
    for (auto& [key, q] : queues_)
      TakeIf(
          q, [](const Entry&) { return true; }, &given_up);
  }
  for (auto& read : given_up) read->GiveUp(HeldRead::GiveUpReason::kShutdown);
  given_up.clear();
  if (thread_.joinable()) thread_.join();
}

void ReadHold::EndOwner(const void* owner) {
  std::vector<std::unique_ptr<HeldRead>> given_up;
  {
    absl::MutexLock lock(&mu_);
    if (!ended_owners_.insert(owner).second) return;
    for (auto& [key, q] : queues_) {
      TakeIf(
          q, [owner](const Entry& e) { return e.owner == owner; }, &given_up);
    }
  }
  for (auto& read : given_up) read->GiveUp(HeldRead::GiveUpReason::kShutdown);
}

void ReadHold::EndQueue(uint64_t queue) {
  std::vector<std::unique_ptr<HeldRead>> given_up;
  {
    absl::MutexLock lock(&mu_);
    auto it = queues_.find(queue);
    if (it == queues_.end()) return;
    // A head being tried finds its partition stopping (HeldRead::TryAdmit answers it).
    TakeIf(
        it->second, [](const Entry&) { return true; }, &given_up);
  }
  for (auto& read : given_up) read->GiveUp(HeldRead::GiveUpReason::kPartitionStopped);
}

bool ReadHold::Waiting(uint64_t queue) const {
  absl::MutexLock lock(&mu_);
  auto it = queues_.find(queue);
  return it != queues_.end() && (it->second.busy || it->second.counters.waiting > 0);
}

void ReadHold::SweepCancelled(Queue& q, int64_t now_ns,
                              std::vector<std::unique_ptr<HeldRead>>* out) {
  if (now_ns - q.last_sweep_ns < kCancelSweepNanos) return;
  q.last_sweep_ns = now_ns;
  TakeIf(
      q, [](const Entry& e) { return e.read->Cancelled(); }, out);
}

ReadHold::HoldResult ReadHold::Hold(const void* owner, uint64_t queue, const std::string& client,
                                    std::unique_ptr<HeldRead>& read, int64_t retry_after_ns,
                                    int64_t max_wait_ns, size_t max_waiting) {
  std::vector<std::unique_ptr<HeldRead>> cancelled;
  // Answered after the lock is released, on return.
  struct GiveUpCancelled {
    std::vector<std::unique_ptr<HeldRead>>* reads;
    ~GiveUpCancelled() {
      for (auto& r : *reads) r->GiveUp(HeldRead::GiveUpReason::kCancelled);
    }
  } give_up{&cancelled};
  absl::MutexLock lock(&mu_);
  if (stopped_ || ended_owners_.contains(owner)) return HoldResult::kStopped;
  Queue& q = queues_[queue];
  const int64_t now = clock_->NowNanos();
  if (q.counters.waiting >= max_waiting) SweepCancelled(q, now, &cancelled);
  if (q.counters.waiting >= max_waiting) {
    ++q.counters.full;
    return HoldResult::kFull;
  }
  const int64_t deadline_ns = now + max_wait_ns;
  if (q.counters.waiting == 0 && !q.busy) {
    q.next_try_ns = now + std::clamp(retry_after_ns, kMinRetryNanos, kMaxRetryNanos);
  }
  ClientReads& reads = q.clients[client];
  reads.entries.push_back({std::move(read), deadline_ns, owner});
  if (!reads.in_turns) {
    q.turns.push_back(client);
    reads.in_turns = true;
  }
  ++q.counters.held;
  ++q.counters.waiting;
  // Wake the thread when this read is due before it means to run.
  if (std::min(q.next_try_ns, deadline_ns) < wake_ns_) kick_ = true;
  return HoldResult::kHeld;
}

void ReadHold::RunQueue(uint64_t key, int64_t now_ns) {
  Queue& q = queues_[key];
  if (q.busy) return;
  q.busy = true;
  // Reads whose wait ran out, at the front of any client's reads, are given up first.
  std::vector<std::unique_ptr<HeldRead>> expired;
  for (auto& [name, client] : q.clients) {
    while (!client.entries.empty() && client.entries.front().deadline_ns <= now_ns) {
      expired.push_back(std::move(client.entries.front().read));
      client.entries.pop_front();
      --q.counters.waiting;
      ++q.counters.expired;
    }
  }
  // And reads whose calls were cancelled, wherever they wait.
  std::vector<std::unique_ptr<HeldRead>> cancelled;
  SweepCancelled(q, now_ns, &cancelled);
  if (!expired.empty() || !cancelled.empty()) {
    Tidy(q);
    mu_.Unlock();
    for (auto& read : expired) {
      read->GiveUp(HeldRead::GiveUpReason::kWaitOver);
      read.reset();
    }
    for (auto& read : cancelled) {
      read->GiveUp(HeldRead::GiveUpReason::kCancelled);
      read.reset();
    }
    mu_.Lock();
  }
  while (q.counters.waiting > 0 && !q.turns.empty()) {
    // The head of the client whose turn it is (every client in `turns` has a read waiting, and
    // while busy only this loop takes heads).
    const std::string name = q.turns.front();
    Entry head = std::move(q.clients[name].entries.front());
    q.clients[name].entries.pop_front();
    --q.counters.waiting;
    // Every call on the read, and its destruction, without the lock. Meanwhile a Stop, EndOwner
    // or EndQueue may take reads (and turns), and Hold add some.
    int64_t retry_after = 0;
    mu_.Unlock();
    const HeldRead::TryResult result = head.read->TryAdmit(now_ns, &retry_after);
    mu_.Lock();
    const bool ended = stopped_ || ended_owners_.contains(head.owner);
    ClientReads& client = q.clients[name];
    if (result == HeldRead::TryResult::kWait && !ended) {
      // Still refused: it stays its client's head, and that client keeps the turn.
      client.entries.push_front(std::move(head));
      ++q.counters.waiting;
      if (!client.in_turns) {
        q.turns.push_front(name);
        client.in_turns = true;
      } else if (q.turns.front() != name) {
        q.turns.erase(std::find(q.turns.begin(), q.turns.end(), name));
        q.turns.push_front(name);
      }
      q.next_try_ns = std::min(now_ns + std::clamp(retry_after, kMinRetryNanos, kMaxRetryNanos),
                               EarliestDeadline(q));
      break;
    }
    if (result == HeldRead::TryResult::kAdmitted) {
      ++q.counters.answered;  // counted before the answer, which a client may read at once
    } else {
      ++q.counters.expired;
    }
    // The client's turn is over: to the back of the line while it has reads waiting.
    if (client.in_turns) {
      q.turns.erase(std::find(q.turns.begin(), q.turns.end(), name));
      client.in_turns = false;
    }
    if (!client.entries.empty()) {
      q.turns.push_back(name);
      client.in_turns = true;
    } else {
      q.clients.erase(name);
    }
    mu_.Unlock();
    if (result == HeldRead::TryResult::kAdmitted) {
      head.read->Answer();
    } else if (result == HeldRead::TryResult::kWait) {  // refused, and its server is stopping
      head.read->GiveUp(HeldRead::GiveUpReason::kShutdown);
    }
    head.read.reset();
    mu_.Lock();
  }
  q.busy = false;
}

int64_t ReadHold::RunDue() {
  const int64_t now = clock_->NowNanos();
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> due;
  for (const auto& [key, q] : queues_) {
    if (q.counters.waiting > 0 && !q.busy && std::min(q.next_try_ns, EarliestDeadline(q)) <= now) {
      due.push_back(key);
    }
  }
  for (uint64_t key : due) RunQueue(key, now);
  int64_t next = INT64_MAX;
  for (const auto& [key, q] : queues_) {
    if (q.counters.waiting > 0) next = std::min({next, q.next_try_ns, EarliestDeadline(q)});
  }
  wake_ns_ = next;
  return next;
}

ReadHoldCounters ReadHold::Counters(uint64_t queue) const {
  absl::MutexLock lock(&mu_);
  auto it = queues_.find(queue);
  return it == queues_.end() ? ReadHoldCounters{} : it->second.counters;
}

ReadHoldCounters ReadHold::Totals() const {
  absl::MutexLock lock(&mu_);
  ReadHoldCounters sum;
  for (const auto& [key, q] : queues_) {
    sum.held += q.counters.held;
    sum.answered += q.counters.answered;
    sum.expired += q.counters.expired;
    sum.full += q.counters.full;
    sum.waiting += q.counters.waiting;
  }
  return sum;
}

void ReadHold::Loop() {
  flowctl::NameThisThread("read-hold");
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this] { return stopped_ || kick_; };
      if (wake_ns_ == INT64_MAX) {
        mu_.Await(absl::Condition(&woken));
      } else {
        const int64_t wait = wake_ns_ - clock_->NowNanos();
        if (wait > 0) mu_.AwaitWithTimeout(absl::Condition(&woken), absl::Nanoseconds(wait));
      }
      if (stopped_) return;
      kick_ = false;
    }
    RunDue();
  }
}

}  // namespace runtime
