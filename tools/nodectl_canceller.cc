#include "tools/nodectl_canceller.h"

namespace nodectl {

void CallCanceller::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (active_ != nullptr) active_->TryCancel();
}

bool CallCanceller::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool CallCanceller::Attach(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  active_ = context;
  return true;
}

void CallCanceller::Detach() {
  absl::MutexLock lock(&mu_);
  active_ = nullptr;
}

}  // namespace nodectl
