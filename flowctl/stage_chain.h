// StageChain: runs a partition's stages in order and stops at the first rejection; Admission: the
// per-request ticket that owns what the stages hold; StageChainHolder: the live-swappable chain.
//
// After admission the caller reports each request's life by id (request_lifecycle.h) and the
// chain forwards it to the stages that follow requests (Stage::lifecycle() non-null): Pooled()
// on the request's Admission (its permits still held), then Committed() / Dropped() and a
// periodic Tick() on the holder. A live update keeps a stage object wherever name and kind match,
// so what such a stage tracks survives the swap; a stage that is dropped from the config releases
// what it tracked (with no feedback) once the last Admission holding the old chain is gone.
//
// A chain is immutable once built, so many threads run it at once without locks. Each link pairs
// a stage instance with its counters; a live update builds a new chain (stage_registry.h) that
// shares the links of stages it keeps, so in-flight counts, bucket balances and counters carry
// over, then swaps it in atomically. Requests admitted under the old chain keep it alive (their
// Admission holds a reference) and release their permits into the same limiter objects.
//
// Thread-safety: StageChain::Run, Admit and StageChainHolder are thread-safe. An Admission is
// used by one thread at a time.
//
//   flowctl::StageChainHolder holder(factory->Create({.partition = 3}));
//   flowctl::Admission admission = holder.Admit({.partition = 3, .size_bytes = raw.size()});
//   if (!admission.admitted()) return admission.decision().ToStatus();
//   admission.Pooled(tx.hash);  // then pool.Add(tx); on failure Dropped(tx.hash, kRefused)
//   admission.Finish();         // permits released; followers keep their own holds
//   ... holder.Committed(hashes, now); holder.Tick(now, pool_view);
#ifndef FLOWCTL_STAGE_CHAIN_H_
#define FLOWCTL_STAGE_CHAIN_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "flowctl/request_lifecycle.h"
#include "flowctl/stage.h"

namespace flowctl {

// How many requests a stage admitted and rejected (requests stopped by an earlier stage are not
// counted). Relaxed atomics: figures for stats, not for synchronization.
struct StageCounters {
  std::atomic<uint64_t> admitted{0};
  std::atomic<uint64_t> rejected{0};
};

// A snapshot of one stage's counters.
struct StageStats {
  std::string name;
  std::string kind;
  uint64_t admitted = 0;
  uint64_t rejected = 0;
  std::vector<StageGauge> gauges;  // Stage::AppendGauges
};

class StageChain {
 public:
  struct Link {
    std::shared_ptr<Stage> stage;             // never null
    std::shared_ptr<StageCounters> counters;  // never null
  };

  // REQUIRES: every link's stage and counters are non-null; stage names are unique.
  StageChain(StageContext context, std::vector<Link> links);
  // Convenience for tests and hand-built chains: fresh counters per stage.
  static std::shared_ptr<const StageChain> Of(StageContext context,
                                              std::vector<std::shared_ptr<Stage>> stages);

  StageChain(const StageChain&) = delete;
  StageChain& operator=(const StageChain&) = delete;

  // Runs the stages in order until one rejects. On rejection releases everything the earlier
  // stages kept in `holds` and returns that stage's decision; later stages are not consulted.
  // REQUIRES: `holds` is empty. Thread-safe.
  Decision Run(const RequestMeta& request, HoldList& holds) const;

  // Lifecycle events (request_lifecycle.h), forwarded in chain order to every stage that follows
  // requests; nothing when none does. Thread-safe.
  void Pooled(absl::string_view id, int64_t admitted_nanos) const;
  void Committed(absl::Span<const std::string> ids, int64_t now_nanos) const;
  void Dropped(absl::string_view id, DropReason reason) const;
  void Tick(int64_t now_nanos, const PoolQuery& pool) const;
  // True when some stage follows requests (the caller may skip building ids otherwise).
  bool follows_requests() const { return !followers_.empty(); }

  const StageContext& context() const { return context_; }
  const std::vector<Link>& links() const { return links_; }
  // The link of the stage called `name`, or null.
  const Link* Find(absl::string_view name) const;
  std::vector<StageStats> Stats() const;

 private:
  const StageContext context_;
  const std::vector<Link> links_;
  std::vector<RequestLifecycle*> followers_;  // constant after construction; owned by links_
};

// One request's pass through a chain: the decision, plus ownership of what the stages hold and of
// the chain itself (so the decision's views and the permits' limiters stay valid). Move-only.
// Destroying it (or Finish()) releases the holds; a rejected request holds nothing.
class Admission {
 public:
  // An empty admission: admitted, holds nothing, no chain.
  Admission() = default;
  Admission(Admission&&) noexcept = default;
  Admission& operator=(Admission&& other) noexcept;
  ~Admission() { Finish(); }

  bool admitted() const { return decision_.admitted(); }
  const Decision& decision() const { return decision_; }
  size_t holds() const { return holds_.size(); }
  // RequestMeta::arrival_nanos of an admitted request (0 if unknown, or empty or rejected). The
  // start of its latency; when 0, Pooled() takes the chain's clock instead.
  int64_t admitted_nanos() const { return admitted_nanos_; }

  // The request is being handed to the pool as `id` (the tx hash): the chain's followers start
  // tracking it (the adaptive stage takes a ticket of its own). Call before the pool's Add (so a
  // commit racing the Add finds it) and before Finish() (so the adaptive count never dips); if
  // the Add fails, call Dropped(id, DropReason::kRefused). Goes to the chain that admitted the
  // request, even if the holder has swapped chains since.
  // REQUIRES: admitted(); Finish() not yet called.
  void Pooled(absl::string_view id) const;
  // Forwards Dropped to the chain that admitted the request. REQUIRES: admitted().
  void Dropped(absl::string_view id, DropReason reason) const;

  // Call when the request finishes: releases the holds now. Idempotent; decision() stays valid.
  void Finish() {
    holds_.ReleaseAll();
    finished_ = true;
  }

 private:
  friend Admission Admit(std::shared_ptr<const StageChain> chain, const RequestMeta& request);

  // Declared before holds_ so it is destroyed after them: holds point into the chain's stages.
  std::shared_ptr<const StageChain> chain_;
  Decision decision_;
  int64_t admitted_nanos_ = 0;
  bool finished_ = false;
  HoldList holds_;
};

// Runs `chain` on `request`. REQUIRES: chain is non-null. Thread-safe.
Admission Admit(std::shared_ptr<const StageChain> chain, const RequestMeta& request);

// The current chain of one partition, replaceable live. Readers take a snapshot (a shared_ptr copy
// under a reader lock, never blocked by a chain being built); Update() serializes writers so each
// derives from the chain it replaces.
class StageChainHolder {
 public:
  // REQUIRES: chain is non-null.
  explicit StageChainHolder(std::shared_ptr<const StageChain> chain);

  // Runs the current chain. Thread-safe.
  Admission Admit(const RequestMeta& request) const { return flowctl::Admit(Get(), request); }

  // Lifecycle events for the current chain's followers (StageChain). Thread-safe.
  void Committed(absl::Span<const std::string> ids, int64_t now_nanos) const {
    Get()->Committed(ids, now_nanos);
  }
  void Dropped(absl::string_view id, DropReason reason) const { Get()->Dropped(id, reason); }
  void Tick(int64_t now_nanos, const PoolQuery& pool) const { Get()->Tick(now_nanos, pool); }

  std::shared_ptr<const StageChain> Get() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::ReaderMutexLock lock(&mu_);
    return current_;
  }

  // Replaces the chain by make(current chain), atomically for readers: a request runs wholly on
  // the old or wholly on the new chain. `make` must not fail (validate before calling) and must
  // return non-null. Thread-safe; concurrent Updates are serialized.
  void Update(absl::FunctionRef<std::shared_ptr<const StageChain>(const StageChain& current)> make)
      ABSL_LOCKS_EXCLUDED(update_mu_, mu_);

 private:
  // Lock order: update_mu_ before mu_. update_mu_ is held while a new chain is built, so builds do
  // not race; mu_ only for the pointer copy. (Not std::atomic<std::shared_ptr>: libstdc++ 12's
  // lock-bit implementation costs the same and ThreadSanitizer reports it as a race.)
  absl::Mutex update_mu_;
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(update_mu_);
  std::shared_ptr<const StageChain> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flowctl

#endif  // FLOWCTL_STAGE_CHAIN_H_
