#include "tests/sim/sim_byzantine.h"

#include "partitions/pbft_certs.h"
#include "partitions/pbft_messages.h"

namespace sim {

using partitions::ConsensusMessage;

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

ConsensusMessage MakeGarbage(std::mt19937_64& rng, const partitions::PbftConfig& config,
                             uint64_t base_view, uint64_t last_executed, uint32_t self,
                             partitions::PbftCrypto& crypto) {
  const uint64_t view = base_view + rng() % 2;
  const uint64_t seq = last_executed + rng() % 21;
  ConsensusMessage m;
  switch (rng() % 9) {
    case 0: {
      auto* p = m.mutable_prepare();
      p->set_view(view), p->set_seq(seq), p->set_digest(RandomBytes(rng, 32));
      break;
    }
    case 1: {
      auto* c = m.mutable_commit();
      c->set_view(view), c->set_seq(seq), c->set_digest(RandomBytes(rng, 32));
      break;
    }
    case 2: {  // a checkpoint for a state nobody has: well formed, or with a digest that lies
      m = partitions::CheckpointMessage((seq / 4 + 1) * 4, RandomBytes(rng, 32),
                                        RandomBytes(rng, 32));
      if (rng() % 2 == 0) m.mutable_checkpoint()->set_state_digest(RandomBytes(rng, 32));
      break;
    }
    case 3: {  // a pre-prepare as if it were primary, of a tx nobody submitted
      auto* pp = m.mutable_pre_prepare();
      pp->set_view(view), pp->set_seq(seq), pp->set_proposer(config.PrimaryOf(view));
      pp->add_tx_hashes(RandomBytes(rng, 32));
      pp->set_digest(partitions::BatchDigest(pp->tx_hashes()));
      break;
    }
    case 4: {  // a view change with a forged prepared certificate
      auto* vc = m.mutable_view_change();
      vc->set_new_view(base_view + 1);
      vc->set_stable_digest(partitions::GenesisDigest());
      auto* cert = vc->add_prepared();
      auto* pp = cert->mutable_pre_prepare();
      pp->set_sender(config.PrimaryOf(0));
      pp->mutable_pre_prepare()->set_seq(seq + 1);
      pp->mutable_pre_prepare()->add_tx_hashes(RandomBytes(rng, 32));
      pp->mutable_pre_prepare()->set_digest(
          partitions::BatchDigest(pp->mutable_pre_prepare()->tx_hashes()));
      pp->set_signature(RandomBytes(rng, 8));
      break;
    }
    case 5: {
      auto* nv = m.mutable_new_view();
      nv->set_view(view + 1);
      break;
    }
    case 6: {  // a sync response with a forged certificate
      auto* b = m.mutable_sync_response()->add_batches();
      b->set_seq(seq);
      b->add_tx_hashes(RandomBytes(rng, 32));
      for (uint32_t s = 0; s < config.quorum(); ++s) {
        auto* c = b->add_commit_certificate();
        c->set_sender(s);
        c->mutable_commit()->set_seq(seq);
        c->mutable_commit()->set_digest(partitions::BatchDigest(b->tx_hashes()));
        c->set_signature(RandomBytes(rng, 8));
      }
      break;
    }
    case 7:
      m.mutable_sync_request()->set_from_seq(rng() % 51);
      m.mutable_sync_request()->set_to_seq(rng() % 1001);
      m.mutable_sync_request()->set_known_stable_seq(rng() % 51);
      break;
    default:
      break;  // empty body
  }
  m.set_sender(self);
  m.set_signature(crypto.Sign(m));
  return m;
}

}  // namespace sim
