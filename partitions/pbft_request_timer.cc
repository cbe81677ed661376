#include "partitions/pbft_request_timer.h"

namespace partitions {

void RequestTimer::Update(bool want, PbftOutbox& out) {
  if (want && !armed_) {
    armed_ = true;
    out.Add(PbftSetTimer{PbftTimer::kRequest, timeout_ms()});
  } else if (!want && armed_) {
    Cancel(out);
  }
}

void RequestTimer::Cancel(PbftOutbox& out) {
  if (!armed_) return;
  armed_ = false;
  out.Add(PbftCancelTimer{PbftTimer::kRequest});
}

void RequestTimer::Restart(PbftOutbox& out) {
  if (armed_) out.Add(PbftSetTimer{PbftTimer::kRequest, timeout_ms()});
}

}  // namespace partitions
