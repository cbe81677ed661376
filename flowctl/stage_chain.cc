#include "flowctl/stage_chain.h"

#include <utility>

#include "glog/logging.h"

namespace flowctl {

StageChain::StageChain(StageContext context, std::vector<Link> links)
    : context_(context), links_(std::move(links)) {
  CHECK(context_.clock != nullptr);
  for (const Link& link : links_) {
    CHECK(link.stage != nullptr);
    CHECK(link.counters != nullptr);
    if (RequestLifecycle* follower = link.stage->lifecycle()) followers_.push_back(follower);
  }
}

std::shared_ptr<const StageChain> StageChain::Of(StageContext context,
                                                 std::vector<std::shared_ptr<Stage>> stages) {
  std::vector<Link> links;
  links.reserve(stages.size());
  for (std::shared_ptr<Stage>& stage : stages) {
    links.push_back({std::move(stage), std::make_shared<StageCounters>()});
  }
  return std::make_shared<const StageChain>(context, std::move(links));
}

// The chain runner (Envoy's filter manager, reduced to admit/reject).
Decision StageChain::Run(const RequestMeta& request, HoldList& holds) const {
  for (const Link& link : links_) {
    Decision decision = link.stage->Check(request, holds);
    if (!decision.admitted()) {
      link.counters->rejected.fetch_add(1, std::memory_order_relaxed);
      // A rejected request does no work, so it must not keep slots taken by earlier stages.
      holds.ReleaseAll();
      return decision;
    }
    link.counters->admitted.fetch_add(1, std::memory_order_relaxed);
  }
  return Decision::Admit();
}

void StageChain::Pooled(absl::string_view id, int64_t admitted_nanos) const {
  for (RequestLifecycle* f : followers_) f->OnPooled(id, admitted_nanos);
}

void StageChain::Committed(absl::Span<const std::string> ids, int64_t now_nanos) const {
  for (RequestLifecycle* f : followers_) f->OnCommitted(ids, now_nanos);
}

void StageChain::Dropped(absl::string_view id, DropReason reason) const {
  for (RequestLifecycle* f : followers_) f->OnDropped(id, reason);
}

void StageChain::Tick(int64_t now_nanos, const PoolQuery& pool) const {
  for (RequestLifecycle* f : followers_) f->OnTick(now_nanos, pool);
}

const StageChain::Link* StageChain::Find(absl::string_view name) const {
  for (const Link& link : links_) {
    if (link.stage->name() == name) return &link;
  }
  return nullptr;
}

std::vector<StageStats> StageChain::Stats() const {
  std::vector<StageStats> stats;
  stats.reserve(links_.size());
  for (const Link& link : links_) {
    StageStats& s = stats.emplace_back();
    s.name = std::string(link.stage->name());
    s.kind = std::string(link.stage->kind());
    s.admitted = link.counters->admitted.load(std::memory_order_relaxed);
    s.rejected = link.counters->rejected.load(std::memory_order_relaxed);
    link.stage->AppendGauges(s.gauges);
  }
  return stats;
}

Admission& Admission::operator=(Admission&& other) noexcept {
  if (this != &other) {
    // Release our holds before dropping our chain: the holds point into its stages.
    Finish();
    holds_ = std::move(other.holds_);
    decision_ = other.decision_;
    admitted_nanos_ = other.admitted_nanos_;
    finished_ = other.finished_;
    chain_ = std::move(other.chain_);
  }
  return *this;
}

void Admission::Pooled(absl::string_view id) const {
  CHECK(admitted()) << "Pooled on a rejected request: " << decision_.ToString();
  CHECK(!finished_) << "Pooled after Finish: the followers' holds would start from no permit";
  if (chain_ == nullptr || !chain_->follows_requests()) return;
  // The clock is read here, not on every admission: most admitted requests carry their arrival.
  const int64_t admitted =
      admitted_nanos_ != 0 ? admitted_nanos_ : chain_->context().clock->NowNanos();
  chain_->Pooled(id, admitted);
}

void Admission::Dropped(absl::string_view id, DropReason reason) const {
  CHECK(admitted()) << "Dropped on a rejected request: " << decision_.ToString();
  if (chain_ != nullptr) chain_->Dropped(id, reason);
}

Admission Admit(std::shared_ptr<const StageChain> chain, const RequestMeta& request) {
  Admission admission;
  admission.decision_ = chain->Run(request, admission.holds_);
  if (admission.decision_.admitted()) admission.admitted_nanos_ = request.arrival_nanos;
  admission.chain_ = std::move(chain);
  return admission;
}

StageChainHolder::StageChainHolder(std::shared_ptr<const StageChain> chain)
    : current_(std::move(chain)) {
  CHECK(current_ != nullptr);
}

void StageChainHolder::Update(
    absl::FunctionRef<std::shared_ptr<const StageChain>(const StageChain& current)> make) {
  absl::MutexLock update_lock(&update_mu_);
  std::shared_ptr<const StageChain> next = make(*Get());
  CHECK(next != nullptr);
  absl::MutexLock lock(&mu_);
  // The old chain is released outside the lock when `next` (now holding it) goes out of scope.
  current_.swap(next);
}

}  // namespace flowctl
