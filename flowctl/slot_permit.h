// SlotPermit<Limiter>: a move-only RAII handle on one slot of a counting limiter.
//
// Shared by ConcurrencyLimiter and AdaptiveLimiter. The slot is given back (Limiter::ReleaseOne)
// exactly once: on Release() or destruction, whichever comes first; a moved-from or
// default-constructed permit holds nothing. Only the limiter hands out held permits.
//
// Thread-safety: one permit object is used by one thread at a time; the limiter's release is
// thread-safe. The limiter must outlive every permit it hands out.
//
//   class MyLimiter {
//    public:
//     using Permit = SlotPermit<MyLimiter>;
//     Permit TryAcquire() { ...; return Permit(this); }
//    private:
//     friend Permit;
//     void ReleaseOne();
//   };
#ifndef FLOWCTL_SLOT_PERMIT_H_
#define FLOWCTL_SLOT_PERMIT_H_

#include <utility>

namespace flowctl {

template <typename Limiter>
class SlotPermit {
 public:
  SlotPermit() = default;
  SlotPermit(SlotPermit&& other) noexcept : limiter_(std::exchange(other.limiter_, nullptr)) {}
  SlotPermit& operator=(SlotPermit&& other) noexcept {
    if (this != &other) {
      Release();
      limiter_ = std::exchange(other.limiter_, nullptr);
    }
    return *this;
  }
  SlotPermit(const SlotPermit&) = delete;
  SlotPermit& operator=(const SlotPermit&) = delete;
  ~SlotPermit() { Release(); }

  // True while this permit holds a slot.
  bool held() const { return limiter_ != nullptr; }
  explicit operator bool() const { return held(); }

  // Gives the slot back now; later calls (and the destructor) do nothing.
  void Release() {
    if (limiter_ != nullptr) std::exchange(limiter_, nullptr)->ReleaseOne();
  }

 private:
  friend Limiter;
  explicit SlotPermit(Limiter* limiter) : limiter_(limiter) {}

  Limiter* limiter_ = nullptr;
};

}  // namespace flowctl

#endif  // FLOWCTL_SLOT_PERMIT_H_
