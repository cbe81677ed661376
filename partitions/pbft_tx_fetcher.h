// TxFetcher: asks peers for the transactions of a batch that the local pool lacks, at most once
// per seq per retransmit period (arrivals do not ask again: with several slots waiting, that
// would multiply the fetches).
//
// Thread-compatibility: not thread-safe; owned by one PbftReplica.
//
//   TxFetcher fetcher(&pool);
//   if (!fetcher.HaveAll(seq, pp.tx_hashes(), out)) return;  // a PbftFetchTxs went out
//   fetcher.NewPeriod();                                       // on the retransmit timer
#ifndef PARTITIONS_PBFT_TX_FETCHER_H_
#define PARTITIONS_PBFT_TX_FETCHER_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "partitions/pbft_outbox.h"
#include "partitions/pbft_types.h"

namespace partitions {

class TxFetcher {
 public:
  // `txs` must outlive the fetcher.
  explicit TxFetcher(const PbftTxSource* txs) : txs_(txs) {}

  // True if the pool has every tx in `hashes` (a container of tx hashes); otherwise adds a
  // PbftFetchTxs for the missing ones to `out`, unless it did so for `seq` this period.
  template <typename Hashes>
  bool HaveAll(uint64_t seq, const Hashes& hashes, PbftOutbox& out) {
    std::vector<std::string> missing = Missing(seq, hashes);
    if (missing.empty()) return true;
    if (fetched_for_.insert(seq).second) out.Add(PbftFetchTxs{std::move(missing), seq});
    return false;
  }
  // As HaveAll, ahead of need: asks for what `seq` lacks, unless `seq` was asked for this
  // period; Prefetch checks `seq` at most once a period (HaveAll still checks it: a body found
  // here may be gone from the pool when it is needed).
  template <typename Hashes>
  void Prefetch(uint64_t seq, const Hashes& hashes, PbftOutbox& out) {
    if (fetched_for_.count(seq) > 0 || !prefetched_.insert(seq).second) return;
    std::vector<std::string> missing = Missing(seq, hashes);
    if (missing.empty()) return;
    fetched_for_.insert(seq);
    out.Add(PbftFetchTxs{std::move(missing), seq});
  }
  // A new retransmit period: missing txs may be asked for again.
  void NewPeriod() {
    fetched_for_.clear();
    prefetched_.clear();
  }
  // Forgets the seqs up to `seq` (executed).
  void DropThrough(uint64_t seq) {
    fetched_for_.erase(fetched_for_.begin(), fetched_for_.upper_bound(seq));
    prefetched_.erase(prefetched_.begin(), prefetched_.upper_bound(seq));
  }

 private:
  // The txs of `hashes` the pool lacks, for a batch at `seq`.
  template <typename Hashes>
  std::vector<std::string> Missing(uint64_t seq, const Hashes& hashes) const {
    std::vector<std::string> missing;
    for (const std::string& h : hashes) {
      if (!txs_->HasTx(h, seq)) missing.push_back(h);
    }
    return missing;
  }

  const PbftTxSource* const txs_;
  std::set<uint64_t> fetched_for_;  // seqs whose missing txs were asked for this period
  std::set<uint64_t> prefetched_;   // seqs Prefetch checked this period
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_TX_FETCHER_H_
