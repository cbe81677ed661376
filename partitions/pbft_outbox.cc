#include "partitions/pbft_outbox.h"

#include <utility>

namespace partitions {

PbftOutbox::PbftOutbox(const PbftConfig& config, PbftCrypto* crypto, ConsensusStore* store)
    : config_(config), crypto_(crypto), store_(store) {}

ConsensusMessage PbftOutbox::Sign(ConsensusMessage msg) const {
  msg.set_sender(config_.self);
  msg.clear_signature();
  msg.set_signature(crypto_->Sign(msg));
  return msg;
}

void PbftOutbox::Broadcast(const ConsensusMessage& msg, PbftChannel channel) {
  if (config_.n > 1) actions_.push_back(PbftBroadcast{channel, msg});
}

void PbftOutbox::Send(uint32_t to, const ConsensusMessage& msg, PbftChannel channel) {
  actions_.push_back(PbftSend{to, channel, msg});
}

ConsensusMessage PbftOutbox::Publish(ConsensusMessage msg, std::vector<ConsensusMessage> with) {
  ConsensusMessage signed_msg = Sign(std::move(msg));
  with.push_back(signed_msg);
  AppendLog(with);
  Broadcast(signed_msg);
  return signed_msg;
}

// Once halted nothing more is written: a later write that succeeded after an earlier one of the
// same Step failed could leave a record (a NewView) on disk without what it depends on (its
// pre-prepares), and a restart would then sign a contradiction.
void PbftOutbox::AppendLog(const std::vector<ConsensusMessage>& messages) {
  if (status_.ok()) Persist(store_->AppendLog(messages));
}

void PbftOutbox::PutView(const node::consensus::PersistedView& view) {
  if (status_.ok()) Persist(store_->PutView(view));
}

void PbftOutbox::PutStableCheckpoint(const node::consensus::StableCheckpointRecord& record) {
  if (status_.ok()) Persist(store_->PutStableCheckpoint(record));
}

void PbftOutbox::Persist(absl::Status status) {
  if (!status.ok() && status_.ok()) status_ = std::move(status);
}

void PbftOutbox::ReportState(ConsensusState state) {
  if (state == reported_state_) return;
  reported_state_ = state;
  actions_.push_back(PbftStateChanged{state});
}

std::vector<PbftAction> PbftOutbox::Take() {
  std::vector<PbftAction> actions = std::move(actions_);
  actions_.clear();
  if (!status_.ok()) return {};
  return actions;
}

}  // namespace partitions
