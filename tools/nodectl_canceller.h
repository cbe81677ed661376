// CallCanceller: lets one thread end the gRPC call another thread is making (nodectl's Ctrl-C).
//
// Thread-safe. Cancel() cancels the call attached at that moment and every call attached later,
// so a signal that lands between two calls is not lost.
//
//   CallCanceller c;                       // shared with the signal thread
//   grpc::ClientContext ctx;
//   if (!c.Attach(&ctx)) return;           // already cancelled: do not start the call
//   ... make the call with ctx ...         // another thread may c.Cancel() meanwhile
//   c.Detach();
#ifndef TOOLS_NODECTL_CANCELLER_H_
#define TOOLS_NODECTL_CANCELLER_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/client_context.h"

namespace nodectl {

// Cancels the RPC in progress, and any RPC started afterwards, from any thread (Ctrl-C).
// Thread-safe.
class CallCanceller {
 public:
  void Cancel();
  bool cancelled() const;

  // Used by RunNodectl around each call. Attach returns false (and the call must not be made)
  // if Cancel() came first. REQUIRES: `context` outlives the matching Detach().
  bool Attach(grpc::ClientContext* context);
  void Detach();

 private:
  mutable absl::Mutex mu_;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace nodectl

#endif  // TOOLS_NODECTL_CANCELLER_H_
