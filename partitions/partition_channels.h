// NodeChannelTable: the node's channel table (p2p/channel.h), one place for what each p2p
// channel is: its egress behaviour (priority, queue bound, overflow policy, derived rate; p2p's
// defaults), the receiving partition's dispatcher lane it feeds, and the partition message kinds
// (partitions/partition_message_kind.h) that may travel on it:
//
//   channel     lane        kinds                    who sends it
//   CONSENSUS   consensus   consensus, txs,          PBFT messages; the primary's proposal bodies;
//                           admission                node-wide admission's cuts
//   SYNC        sync        consensus, txs, fetch    block sync; tx fetch and its answers
//   TX_FORWARD  tx_forward  txs                      forwarded client transactions
//   BULK        bulk        (none yet)               reserved for snapshots and files
//
// The node gives this table to its egress valve (sending side) and to its partitions (receiving
// side: lane lookup and kind check), so both sides read the same descriptors.
//
// Thread-safety: the table is built once and immutable; any thread may read it.
//
//   const p2p::ChannelDescriptor* d = partitions::NodeChannelTable().Find(channel);
//   int lane = d == nullptr ? -1 : dispatcher->FindLane(d->lane);
#ifndef PARTITIONS_PARTITION_CHANNELS_H_
#define PARTITIONS_PARTITION_CHANNELS_H_

#include "p2p/channel.h"

namespace partitions {

// The partition's dispatcher lanes that peer channels feed (the client lane is fed by the
// client API, not by a channel).
inline constexpr char kConsensusLaneName[] = "consensus";
inline constexpr char kSyncLaneName[] = "sync";
inline constexpr char kTxForwardLaneName[] = "tx_forward";
inline constexpr char kBulkLaneName[] = "bulk";

const p2p::ChannelTable& NodeChannelTable();

}  // namespace partitions

#endif  // PARTITIONS_PARTITION_CHANNELS_H_
