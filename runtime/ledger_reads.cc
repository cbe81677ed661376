#include "runtime/ledger_reads.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace runtime {

absl::StatusOr<std::optional<std::string>> ReadValueAt(const partitions::Ledger& ledger,
                                                       absl::string_view key, uint64_t height) {
  // TODO(merge): Ledger::GetValueAt. Return ledger.GetValueAt(key, height) here once it is on
  // this branch (its FAILED_PRECONDITION / NOT_FOUND pass through to the client).
  return absl::UnimplementedError("reads at an older height are not supported yet");
}

absl::StatusOr<std::vector<node::chain::Receipt>> ReadBlockReceipts(
    const partitions::Ledger& ledger, const node::chain::Block& block) {
  const uint64_t height = block.header().height();
  std::vector<node::chain::Receipt> out;
  out.reserve(static_cast<size_t>(block.tx_hashes_size()));
  for (int i = 0; i < block.tx_hashes_size(); ++i) {
    const std::string& hash = block.tx_hashes(i);
    absl::StatusOr<node::chain::Receipt> receipt = ledger.GetReceipt(hash);
    if (!receipt.ok()) {
      // A stored block's txs all have receipts: a missing one is damage, not a client error.
      return absl::DataLossError(absl::StrCat("no receipt for tx ", i, " of block ", height, ": ",
                                              receipt.status().message()));
    }
    if (receipt->block_height() != height || receipt->tx_index() != static_cast<uint32_t>(i)) {
      node::chain::Receipt replay;
      replay.set_status(node::chain::Receipt::REJECTED);
      replay.set_error(absl::StrCat("replay of the transaction committed at height ",
                                    receipt->block_height(), " index ", receipt->tx_index()));
      replay.set_block_height(height);
      replay.set_tx_index(static_cast<uint32_t>(i));
      replay.set_tx_hash(hash);
      *receipt = std::move(replay);
    }
    out.push_back(*std::move(receipt));
  }
  return out;
}

}  // namespace runtime
