#include "partitions/commit_feed.h"

#include <utility>

namespace partitions {

void CommitFeed::Publish(CommitEvent event) {
  {
    absl::MutexLock lock(&mu_);
    if (event.height < next_height_) return;
    queued_.emplace(event.height, std::move(event));
    if (delivering_) return;  // the delivering thread takes it
    delivering_ = true;
  }
  Deliver();
}

void CommitFeed::SkipTo(uint64_t height) {
  {
    absl::MutexLock lock(&mu_);
    if (height < next_height_) return;
    // Another thread delivering finishes its event first; the skip then waits its turn.
    mu_.Await(absl::Condition(
        +[](bool* delivering) { return !*delivering; }, &delivering_));
    if (height < next_height_) return;
    queued_.erase(queued_.begin(), queued_.upper_bound(height));
    next_height_ = height + 1;
    delivering_ = true;
  }
  for (CommitSubscriber* s : subscribers_) s->OnSkip(height);
  Deliver();
}

void CommitFeed::Deliver() {
  while (true) {
    CommitEvent next;
    {
      absl::MutexLock lock(&mu_);
      auto it = queued_.begin();
      if (it == queued_.end() || it->first != next_height_) {
        delivering_ = false;
        return;
      }
      next = std::move(it->second);
      queued_.erase(it);
      ++next_height_;
    }
    for (CommitSubscriber* s : subscribers_) s->OnCommit(next);
  }
}

uint64_t CommitFeed::delivered_height() const {
  absl::MutexLock lock(&mu_);
  return next_height_ - 1;
}

}  // namespace partitions
