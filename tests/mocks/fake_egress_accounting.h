// FakeEgressAccounting: a flowctl::EgressAccounting whose cap and bytes sent a test sets and
// whose partition weights a test reads back.
//
// Thread-safe (one mutex).
//
//   tests::FakeEgressAccounting egress;
//   egress.SetCap(1000);
//   egress.AddBytesSent(/*partition=*/1, 500);
//   arbiter->Tick();
//   EXPECT_EQ(egress.weight(1), 500);
#ifndef TESTS_MOCKS_FAKE_EGRESS_ACCOUNTING_H_
#define TESTS_MOCKS_FAKE_EGRESS_ACCOUNTING_H_

#include <cstdint>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/egress_accounting.h"

namespace tests {

class FakeEgressAccounting final : public flowctl::EgressAccounting {
 public:
  flowctl::EgressUsage Usage() const override {
    absl::MutexLock lock(&mu_);
    return usage_;
  }
  absl::Status SetPartitionWeight(uint32_t partition, uint32_t weight) override {
    if (weight == 0) return absl::InvalidArgumentError("weight: must be >= 1");
    absl::MutexLock lock(&mu_);
    weights_[partition] = weight;
    return absl::OkStatus();
  }

  absl::Status SetPartitionRateLimit(uint32_t partition, double bytes_per_second) override {
    if (!(bytes_per_second >= 0)) return absl::InvalidArgumentError("rate: must be >= 0");
    absl::MutexLock lock(&mu_);
    limits_[partition] = bytes_per_second;
    return absl::OkStatus();
  }
  // The last rate limit set for `partition` (nullopt: never set; 0: removed).
  std::optional<double> rate_limit(uint32_t partition) const {
    absl::MutexLock lock(&mu_);
    auto it = limits_.find(partition);
    if (it == limits_.end()) return std::nullopt;
    return it->second;
  }

  // bytes/s; TokenBucket::kUnlimited for none (the default).
  void SetCap(double cap_bytes_per_second) {
    absl::MutexLock lock(&mu_);
    usage_.cap_bytes_per_second = cap_bytes_per_second;
  }
  void AddBytesSent(uint32_t partition, uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    usage_.bytes_sent[partition] += bytes;
  }
  // The last weight set for `partition` (nullopt: never set).
  std::optional<uint32_t> weight(uint32_t partition) const {
    absl::MutexLock lock(&mu_);
    auto it = weights_.find(partition);
    if (it == weights_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable absl::Mutex mu_;
  flowctl::EgressUsage usage_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, uint32_t> weights_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, double> limits_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tests

#endif  // TESTS_MOCKS_FAKE_EGRESS_ACCOUNTING_H_
