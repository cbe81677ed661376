#include "p2p/channel.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace p2p {

KindSet KindSet::Of(std::initializer_list<uint32_t> kinds) {
  KindSet set;
  for (uint32_t k : kinds) set = set.With(k);
  return set;
}

KindSet KindSet::With(uint32_t kind) const {
  CHECK_LE(kind, kMaxKind) << "message kind out of range";
  return KindSet(bits_ | (uint64_t{1} << kind));
}

absl::StatusOr<ChannelTable> ChannelTable::Create(std::vector<ChannelDescriptor> descriptors) {
  ChannelTable t;
  t.index_.fill(-1);
  for (size_t i = 0; i < descriptors.size(); ++i) {
    const ChannelDescriptor& d = descriptors[i];
    const std::string where = absl::StrCat("channels[", i, "]");
    if (!IsValidChannel(d.channel)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".channel: ", static_cast<int>(d.channel), " is not a wire channel"));
    }
    if (t.index_[d.channel] != -1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".channel: ", d.name(), " is described twice"));
    }
    t.index_[d.channel] = 0;
    if (d.queue_bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".queue_bytes: must be >= 1"));
    }
    if (d.lane.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".lane: must name a dispatcher lane"));
    }
  }
  for (int c = node::p2p::CONSENSUS; c <= node::p2p::BULK; ++c) {
    if (t.index_[c] == -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("channels: ", ChannelName(static_cast<Channel>(c)), " is not described"));
    }
  }
  std::stable_sort(descriptors.begin(), descriptors.end(),
                   [](const ChannelDescriptor& a, const ChannelDescriptor& b) {
                     return a.priority > b.priority;
                   });
  for (size_t i = 0; i < descriptors.size(); ++i) {
    const ChannelDescriptor& d = descriptors[i];
    if (i > 0 && descriptors[i - 1].priority == d.priority) {
      return absl::InvalidArgumentError(absl::StrCat("channels: ", descriptors[i - 1].name(),
                                                     " and ", d.name(), " share priority ",
                                                     d.priority));
    }
    if (d.derived_rate) {
      if (t.derived_rate_index_ != -1) {
        return absl::InvalidArgumentError(
            absl::StrCat("channels: ", descriptors[t.derived_rate_index_].name(), " and ", d.name(),
                         " both have derived_rate; at most one may"));
      }
      t.derived_rate_index_ = static_cast<int>(i);
    }
    t.index_[d.channel] = static_cast<int>(i);
  }
  t.by_priority_ = std::move(descriptors);
  return t;
}

const ChannelDescriptor* ChannelTable::Find(Channel channel) const {
  const int i = PriorityIndex(channel);
  return i < 0 ? nullptr : &by_priority_[i];
}

int ChannelTable::PriorityIndex(Channel channel) const {
  if (!IsValidChannel(channel)) return -1;
  return index_[channel];
}

std::vector<ChannelDescriptor> DefaultChannelDescriptors() {
  return {
      {.channel = node::p2p::CONSENSUS,
       .priority = 4,
       .queue_bytes = 8 << 20,
       .overflow = OverflowPolicy::kRefuseNew,
       .lane = "consensus",
       .kinds = KindSet::All()},
      {.channel = node::p2p::SYNC,
       .priority = 3,
       .queue_bytes = 32 << 20,
       .overflow = OverflowPolicy::kRefuseNew,
       .lane = "sync",
       .kinds = KindSet::All()},
      {.channel = node::p2p::TX_FORWARD,
       .priority = 2,
       .queue_bytes = 16 << 20,
       .overflow = OverflowPolicy::kDropOldest,
       .derived_rate = true,
       .lane = "tx_forward",
       .kinds = KindSet::All()},
      {.channel = node::p2p::BULK,
       .priority = 1,
       .queue_bytes = 32 << 20,
       .overflow = OverflowPolicy::kDropOldest,
       .lane = "bulk",
       .kinds = KindSet::All()},
  };
}

const ChannelTable& DefaultChannelTable() {
  static const ChannelTable* const table = [] {
    absl::StatusOr<ChannelTable> t = ChannelTable::Create(DefaultChannelDescriptors());
    CHECK(t.ok()) << t.status();
    return new ChannelTable(*std::move(t));
  }();
  return *table;
}

}  // namespace p2p
