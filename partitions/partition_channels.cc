#include "partitions/partition_channels.h"

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "glog/logging.h"
#include "partitions/partition_message_kind.h"

namespace partitions {

const p2p::ChannelTable& NodeChannelTable() {
  static const p2p::ChannelTable* const table = [] {
    using K = PartitionMessageKind;
    std::vector<p2p::ChannelDescriptor> d = p2p::DefaultChannelDescriptors();
    for (p2p::ChannelDescriptor& c : d) {
      switch (c.channel) {
        case node::p2p::CONSENSUS:
          c.lane = kConsensusLaneName;
          c.kinds = KindsOf({K::kConsensus, K::kTxs, K::kAdmission});
          break;
        case node::p2p::SYNC:
          c.lane = kSyncLaneName;
          c.kinds = KindsOf({K::kConsensus, K::kTxs, K::kFetch, K::kSnapshot});
          break;
        case node::p2p::TX_FORWARD:
          c.lane = kTxForwardLaneName;
          c.kinds = KindsOf({K::kTxs});
          break;
        default:
          c.lane = kBulkLaneName;
          c.kinds = p2p::KindSet();
      }
    }
    absl::StatusOr<p2p::ChannelTable> t = p2p::ChannelTable::Create(std::move(d));
    CHECK(t.ok()) << t.status();
    return new p2p::ChannelTable(*std::move(t));
  }();
  return *table;
}

}  // namespace partitions
