// Block hashing: the block hash and the transaction root. Pure functions, thread-safe.
//
//   header.set_tx_root(TxRoot(block.tx_hashes()));
//   std::string parent = BlockHash(parent_header);   // 32 bytes
#ifndef PARTITIONS_BLOCK_H_
#define PARTITIONS_BLOCK_H_

#include <string>

#include "google/protobuf/repeated_ptr_field.h"
#include "proto/chain.pb.h"

namespace partitions {

// SHA-256 of the header's deterministic serialization. Every replica runs the same binary, so the
// encoding is stable across the cluster; a mixed-version cluster would need a hand-rolled
// encoding here.
std::string BlockHash(const node::chain::BlockHeader& header);

// SHA-256 over the concatenated 32-byte tx hashes in block order (SHA-256("") when empty). A flat
// hash, not a Merkle tree: nothing in the node proves single-transaction inclusion, and a block's
// hashes always travel together (pre-prepare, block sync).
std::string TxRoot(const google::protobuf::RepeatedPtrField<std::string>& tx_hashes);

}  // namespace partitions

#endif  // PARTITIONS_BLOCK_H_
