#include "partitions/pbft_messages.h"

#include "partitions/pbft_certs.h"

namespace partitions {

ConsensusMessage PrePrepareMessage(uint64_t view, uint64_t seq, const std::string& digest,
                                   const std::vector<std::string>& tx_hashes, uint32_t proposer) {
  ConsensusMessage msg;
  auto* pp = msg.mutable_pre_prepare();
  pp->set_view(view);
  pp->set_seq(seq);
  pp->set_digest(digest);
  pp->mutable_tx_hashes()->Assign(tx_hashes.begin(), tx_hashes.end());
  pp->set_proposer(proposer);
  return msg;
}

ConsensusMessage PrepareMessage(uint64_t view, uint64_t seq, const std::string& digest) {
  ConsensusMessage msg;
  msg.mutable_prepare()->set_view(view);
  msg.mutable_prepare()->set_seq(seq);
  msg.mutable_prepare()->set_digest(digest);
  return msg;
}

ConsensusMessage CommitMessage(uint64_t view, uint64_t seq, const std::string& digest) {
  ConsensusMessage msg;
  msg.mutable_commit()->set_view(view);
  msg.mutable_commit()->set_seq(seq);
  msg.mutable_commit()->set_digest(digest);
  return msg;
}

ConsensusMessage CheckpointMessage(uint64_t seq, const std::string& chain_digest,
                                   const std::string& state_root) {
  ConsensusMessage msg;
  auto* cp = msg.mutable_checkpoint();
  cp->set_seq(seq);
  cp->set_state_digest(CheckpointDigest(chain_digest, state_root));
  cp->set_chain_digest(chain_digest);
  cp->set_state_root(state_root);
  return msg;
}

ConsensusMessage ViewChangeMessage(
    uint64_t new_view, const node::consensus::StableCheckpointRecord& stable,
    const std::vector<node::consensus::PreparedCertificate>& prepared) {
  ConsensusMessage msg;
  auto* vc = msg.mutable_view_change();
  vc->set_new_view(new_view);
  vc->set_stable_seq(stable.seq());
  vc->set_stable_digest(stable.state_digest());
  *vc->mutable_checkpoint_proof() = stable.proof();
  for (const auto& cert : prepared) *vc->add_prepared() = cert;
  return msg;
}

ConsensusMessage NewViewMessage(uint64_t view,
                                const std::vector<const ConsensusMessage*>& view_changes,
                                const std::vector<ConsensusMessage>& pre_prepares) {
  ConsensusMessage msg;
  auto* nv = msg.mutable_new_view();
  nv->set_view(view);
  for (const ConsensusMessage* m : view_changes) *nv->add_view_changes() = *m;
  for (const ConsensusMessage& m : pre_prepares) *nv->add_pre_prepares() = m;
  return msg;
}

ConsensusMessage NewViewRequestMessage(uint64_t min_view) {
  ConsensusMessage msg;
  msg.mutable_new_view_request()->set_min_view(min_view);
  return msg;
}

node::consensus::PersistedView ViewChangeRecord(uint64_t view,
                                                const ConsensusMessage& own_view_change) {
  node::consensus::PersistedView pv;
  pv.set_view(view);
  pv.set_installed(false);
  *pv.mutable_own_view_change() = own_view_change;
  return pv;
}

node::consensus::PersistedView InstalledViewRecord(uint64_t view,
                                                   const ConsensusMessage& new_view) {
  node::consensus::PersistedView pv;
  pv.set_view(view);
  pv.set_installed(true);
  *pv.mutable_new_view() = new_view;
  return pv;
}

}  // namespace partitions
