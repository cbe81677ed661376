// Reads of a partition's ledger that the client API needs beyond partitions::Ledger's own
// methods: the value of a key at an older height, and the receipts of one stored block.
//
// Each is one small function so that a ledger method can replace its body without touching the
// callers (Partition::GetValue, the commit stream's history reads in runtime/commit_stream.h).
// Pure functions of the ledger; thread-safe as the ledger's reads are.
//
//   ASSIGN_OR_RETURN(std::optional<std::string> v, ReadValueAt(ledger, "k", 12));
//   ASSIGN_OR_RETURN(std::vector<node::chain::Receipt> r, ReadBlockReceipts(ledger, block));
#ifndef RUNTIME_LEDGER_READS_H_
#define RUNTIME_LEDGER_READS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "partitions/ledger.h"
#include "proto/chain.pb.h"

namespace runtime {

// The value of `key` as of block `height` (nullopt if it was not written by then).
// REQUIRES: 1 <= height < the ledger's tip (the caller serves the tip from Ledger::GetValue).
// For now UNIMPLEMENTED: the ledger keeps only the latest state.
absl::StatusOr<std::optional<std::string>> ReadValueAt(const partitions::Ledger& ledger,
                                                       absl::string_view key, uint64_t height);

// The receipts of `block` (read from the ledger), one per transaction in block order. The ledger
// indexes receipts by tx hash at the tx's first inclusion; a tx included again later (a replay,
// which can only be REJECTED) gets a REJECTED receipt saying so, built here, because its stored
// receipt cannot be read by position through the Ledger interface.
absl::StatusOr<std::vector<node::chain::Receipt>> ReadBlockReceipts(
    const partitions::Ledger& ledger, const node::chain::Block& block);

}  // namespace runtime

#endif  // RUNTIME_LEDGER_READS_H_
