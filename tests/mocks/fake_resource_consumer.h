// FakeResourceConsumer: a flowctl::ResourceConsumer whose usage a test sets and whose applied
// shares a test reads back, so an arbiter test checks what the arbiter did to its consumers.
//
// Thread-safe (one mutex), so an arbiter's own thread may call it while the test reads.
//
//   tests::FakeResourceConsumer hot(1, "hot");
//   hot.SetUsage({.cpu_backlogged = true, .memory_limit = 1000});
//   arbiter->Tick();
//   EXPECT_GT(hot.applied(flowctl::Resource::kCpu), 0);
#ifndef TESTS_MOCKS_FAKE_RESOURCE_CONSUMER_H_
#define TESTS_MOCKS_FAKE_RESOURCE_CONSUMER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/resource_consumer.h"
#include "proto/config.pb.h"

namespace tests {

class FakeResourceConsumer final : public flowctl::ResourceConsumer {
 public:
  // Weight 1, no guarantee, no ceiling.
  FakeResourceConsumer(uint32_t id, std::string name) : id_(id), name_(std::move(name)) {
    share_.set_weight(1);
  }

  uint32_t id() const override { return id_; }
  const std::string& name() const override { return name_; }

  node::config::ShareConfig share_config() const override {
    absl::MutexLock lock(&mu_);
    return share_;
  }
  void SetShareConfig(const node::config::ShareConfig& share) override {
    absl::MutexLock lock(&mu_);
    share_ = share;
  }
  void SetShare(double weight, double guarantee_fraction = 0, double ceiling_fraction = 0,
                bool hard_ceiling = false) {
    node::config::ShareConfig s;
    s.set_weight(weight);
    s.set_guarantee_fraction(guarantee_fraction);
    s.set_ceiling_fraction(ceiling_fraction);
    s.set_hard_ceiling(hard_ceiling);
    SetShareConfig(s);
  }

  // Returned by every TakeUsage() until changed.
  void SetUsage(const flowctl::ConsumerUsage& usage) {
    absl::MutexLock lock(&mu_);
    usage_ = usage;
  }
  flowctl::ConsumerUsage TakeUsage() override {
    absl::MutexLock lock(&mu_);
    ++usage_calls_;
    return usage_;
  }

  void ApplyShare(flowctl::Resource resource, double amount) override {
    absl::MutexLock lock(&mu_);
    applied_[static_cast<int>(resource)] = amount;
    ++apply_calls_[static_cast<int>(resource)];
  }

  void ApplyCpuLimit(double cores) override {
    absl::MutexLock lock(&mu_);
    cpu_limit_ = cores;
    ++cpu_limit_calls_;
  }
  // The last CPU limit applied (nullopt: never), and how many times one was.
  std::optional<double> cpu_limit() const {
    absl::MutexLock lock(&mu_);
    return cpu_limit_;
  }
  int cpu_limit_calls() const {
    absl::MutexLock lock(&mu_);
    return cpu_limit_calls_;
  }

  // The last amount applied for `resource` (nullopt: never applied).
  std::optional<double> applied(flowctl::Resource resource) const {
    absl::MutexLock lock(&mu_);
    return applied_[static_cast<int>(resource)];
  }
  int apply_calls(flowctl::Resource resource) const {
    absl::MutexLock lock(&mu_);
    return apply_calls_[static_cast<int>(resource)];
  }
  int usage_calls() const {
    absl::MutexLock lock(&mu_);
    return usage_calls_;
  }

 private:
  const uint32_t id_;
  const std::string name_;

  mutable absl::Mutex mu_;
  node::config::ShareConfig share_ ABSL_GUARDED_BY(mu_);
  flowctl::ConsumerUsage usage_ ABSL_GUARDED_BY(mu_);
  int usage_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<std::optional<double>, flowctl::kNumResources> applied_ ABSL_GUARDED_BY(mu_);
  std::array<int, flowctl::kNumResources> apply_calls_ ABSL_GUARDED_BY(mu_) = {};
  std::optional<double> cpu_limit_ ABSL_GUARDED_BY(mu_);
  int cpu_limit_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tests

#endif  // TESTS_MOCKS_FAKE_RESOURCE_CONSUMER_H_
