// byzantine_peer: a faulty replica as a real process. It takes the place of a stopped node of a
// localnet (that node's config, key and p2p port), connects to the others over the real
// authenticated transport, and misbehaves on purpose for a while.
//
//   byzantine_peer --config localnet/node4/noded.conf --mode all --seconds 30 [--rate 200]
//
// Modes (each sends about `rate` messages per second to every connected peer, on the partition
// whose consensus it watches; `all` runs them in turn, an equal share of the time each):
//   bad_signature      prepares for the next seq signed with garbage;
//   impersonate        prepares validly signed by this key but claiming another replica's index;
//   replay             what the honest peers sent it, sent back verbatim (their signatures, its
//                      connection), and its own validly signed votes for old seqs;
//   malformed          random bytes that are no partition message;
//   wrong_channel      a validly signed prepare on the tx-forwarding channel (txs only);
//   unknown_partition  messages for a partition no node runs;
//   future_view        validly signed prepares and commits for views up to 8 ahead over a wide
//                      seq range (the honest buffer for future views must stay bounded per sender);
//   bad_txs            forwarded tx batches whose signatures do not verify;
//   oversized          frames past the honest nodes' 16 MiB frame limit (one a second);
//   false_cut          node-wide admission cuts (PartitionMessage.admission) claiming this replica
//                      lets none of the partition's client writes through, every fourth one out
//                      of range: one replica of four cannot cut the others (the (f+1)-th lowest
//                      fraction counts, flowctl/peer_admission.h), and the bad ones are malformed.
// The honest side must refuse all of it, count it against this peer (ListPeers, metric
// noded_peer_messages_refused_total), keep committing, and stay inside its memory.
//
// Prints one line per mode ("byzantine_peer: MODE sent N messages") and exits 0; 1 on a setup
// error (bad config, key, port taken), 2 on bad flags.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "flowctl/peer_admission.h"
#include "p2p/grpc_transport.h"
#include "partitions/pbft_ed25519_crypto.h"
#include "proto/chain.pb.h"
#include "proto/partition.pb.h"
#include "runtime/config.h"
#include "runtime/node.h"

namespace {

using SteadyClock = std::chrono::steady_clock;
using node::consensus::ConsensusMessage;
using node::partition::PartitionMessage;

constexpr uint32_t kUnknownPartition = 4242;
const char* const kModes[] = {"bad_signature", "impersonate",       "replay",      "malformed",
                              "wrong_channel", "unknown_partition", "future_view", "bad_txs",
                              "oversized",     "false_cut"};

struct Flags {
  std::string config;
  std::string mode = "all";
  int seconds = 30;
  int rate = 200;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--config") {
      f->config = v;
    } else if (k == "--mode") {
      f->mode = v;
    } else if (k == "--seconds") {
      if (!absl::SimpleAtoi(v, &f->seconds) || f->seconds < 1 || f->seconds > 3600) return false;
    } else if (k == "--rate") {
      if (!absl::SimpleAtoi(v, &f->rate) || f->rate < 1 || f->rate > 100000) return false;
    } else {
      return false;
    }
  }
  if (argc % 2 != 1 || f->config.empty()) return false;
  return f->mode == "all" ||
         std::find(std::begin(kModes), std::end(kModes), f->mode) != std::end(kModes);
}

// What the honest replicas say, as seen on this connection: the highest view and seq, and a few
// of their messages to replay.
class Observer {
 public:
  void Note(const PartitionMessage& m) {
    if (!m.has_consensus()) return;
    const ConsensusMessage& c = m.consensus();
    absl::MutexLock lock(&mu_);
    uint64_t view = 0;
    uint64_t seq = 0;
    if (c.has_pre_prepare()) {
      view = c.pre_prepare().view();
      seq = c.pre_prepare().seq();
    } else if (c.has_prepare()) {
      view = c.prepare().view();
      seq = c.prepare().seq();
    } else if (c.has_commit()) {
      view = c.commit().view();
      seq = c.commit().seq();
    } else {
      return;
    }
    view_ = std::max(view_, view);
    seq_ = std::max(seq_, seq);
    if (recent_.size() < 256) {
      recent_.push_back(m.SerializeAsString());
    } else {
      recent_[next_++ % recent_.size()] = m.SerializeAsString();
    }
  }
  uint64_t view() const {
    absl::MutexLock lock(&mu_);
    return view_;
  }
  uint64_t seq() const {
    absl::MutexLock lock(&mu_);
    return seq_;
  }
  std::string Recent(size_t i) const {
    absl::MutexLock lock(&mu_);
    return recent_.empty() ? std::string() : recent_[i % recent_.size()];
  }

 private:
  mutable absl::Mutex mu_;
  uint64_t view_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> recent_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
};

class Byzantine {
 public:
  Byzantine(p2p::GrpcTransport* net, partitions::Ed25519PbftCrypto* crypto, uint32_t self,
            uint32_t n, uint32_t partition, const Observer* seen)
      : net_(net), crypto_(crypto), self_(self), n_(n), partition_(partition), seen_(seen) {}

  // One message of `mode` to `peer`; false when there was nothing to send.
  bool SendOne(const std::string& mode, const p2p::NodeId& peer) {
    const uint64_t view = seen_->view();
    const uint64_t seq = seen_->seq();
    if (mode == "bad_signature") {
      ConsensusMessage c = Vote(true, view, seq + 1);
      c.set_signature(Random(64));
      return Send(peer, partition_, node::p2p::CONSENSUS, Wrap(c));
    }
    if (mode == "impersonate") {
      ConsensusMessage c = Vote(true, view, seq + 1);
      c.set_sender((self_ + 1) % n_);
      c.set_signature(crypto_->Sign(c));
      return Send(peer, partition_, node::p2p::CONSENSUS, Wrap(c));
    }
    if (mode == "replay") {
      if (count_++ % 2 == 0) {
        std::string theirs = seen_->Recent(count_);
        if (theirs.empty()) return false;
        return Send(peer, partition_, node::p2p::CONSENSUS, std::move(theirs));
      }
      ConsensusMessage c = Vote(count_ % 4 == 1, view, seq > 100 ? seq - 1 - count_ % 100 : 1);
      c.set_signature(crypto_->Sign(c));
      return Send(peer, partition_, node::p2p::CONSENSUS, Wrap(c));
    }
    if (mode == "malformed") {
      return Send(peer, partition_, node::p2p::CONSENSUS, Random(1 + rng_() % 512));
    }
    if (mode == "wrong_channel") {
      ConsensusMessage c = Vote(true, view, seq + 1);
      c.set_signature(crypto_->Sign(c));
      return Send(peer, partition_, node::p2p::TX_FORWARD, Wrap(c));
    }
    if (mode == "unknown_partition") {
      ConsensusMessage c = Vote(true, view, seq + 1);
      c.set_signature(crypto_->Sign(c));
      return Send(peer, kUnknownPartition, node::p2p::CONSENSUS, Wrap(c));
    }
    if (mode == "future_view") {
      ++count_;
      ConsensusMessage c = Vote(count_ % 2 == 0, view + 1 + count_ % 8, seq + 1 + count_ % 4096);
      c.set_signature(crypto_->Sign(c));
      return Send(peer, partition_, node::p2p::CONSENSUS, Wrap(c));
    }
    if (mode == "bad_txs") {
      PartitionMessage m;
      for (int i = 0; i < 50; ++i) {
        node::chain::Transaction tx;
        tx.set_partition(partition_);
        tx.set_nonce(++count_);
        tx.mutable_put()->set_key(absl::StrCat("byz", count_));
        tx.mutable_put()->set_value("v");
        node::chain::SignedTransaction st;
        st.set_tx(tx.SerializeAsString());
        st.set_signature(Random(64));
        m.mutable_txs()->add_signed_txs(st.SerializeAsString());
      }
      return Send(peer, partition_, node::p2p::TX_FORWARD, m.SerializeAsString());
    }
    if (mode == "oversized") {
      // One a second per peer is plenty: the receiver refuses it on the frame header.
      const auto now = SteadyClock::now();
      if (now < next_oversized_[peer]) return false;
      next_oversized_[peer] = now + std::chrono::seconds(1);
      return Send(peer, partition_, node::p2p::BULK, std::string(17 << 20, 'o'));
    }
    if (mode == "false_cut") {
      PartitionMessage m;
      m.mutable_admission()->set_admit_ppm(++count_ % 4 == 0 ? flowctl::PeerAdmission::kPpmOne + 1
                                                             : 0);
      return Send(peer, partition_, node::p2p::CONSENSUS, m.SerializeAsString());
    }
    return false;
  }

  uint64_t sent() const { return sent_; }

 private:
  ConsensusMessage Vote(bool prepare, uint64_t view, uint64_t seq) {
    ConsensusMessage c;
    c.set_sender(self_);
    const std::string digest = Random(32);
    if (prepare) {
      c.mutable_prepare()->set_view(view);
      c.mutable_prepare()->set_seq(seq);
      c.mutable_prepare()->set_digest(digest);
    } else {
      c.mutable_commit()->set_view(view);
      c.mutable_commit()->set_seq(seq);
      c.mutable_commit()->set_digest(digest);
    }
    return c;
  }
  static std::string Wrap(const ConsensusMessage& c) {
    PartitionMessage m;
    *m.mutable_consensus() = c;
    return m.SerializeAsString();
  }
  std::string Random(size_t n) {
    std::string s(n, '\0');
    for (char& ch : s) ch = static_cast<char>(rng_());
    return s;
  }
  bool Send(const p2p::NodeId& peer, uint32_t partition, node::p2p::Channel ch, std::string b) {
    if (!net_->Send(peer, partition, ch, std::move(b)).ok()) return false;
    ++sent_;
    return true;
  }

  p2p::GrpcTransport* const net_;
  partitions::Ed25519PbftCrypto* const crypto_;
  const uint32_t self_;
  const uint32_t n_;
  const uint32_t partition_;
  const Observer* const seen_;
  std::mt19937_64 rng_{20261201};
  uint64_t count_ = 0;
  uint64_t sent_ = 0;
  std::map<p2p::NodeId, SteadyClock::time_point> next_oversized_;
};

int Run(const Flags& flags) {
  absl::StatusOr<node::config::NodeConfig> config = runtime::LoadConfigFile(flags.config);
  if (!config.ok()) {
    std::cerr << "byzantine_peer: " << config.status() << "\n";
    return 1;
  }
  absl::StatusOr<base::PrivateKey> key =
      base::PrivateKey::ReadPemFile(runtime::KeyFilePath(*config));
  if (!key.ok()) {
    std::cerr << "byzantine_peer: " << key.status() << "\n";
    return 1;
  }
  if (config->partitions_size() == 0) {
    std::cerr << "byzantine_peer: the config names no partition\n";
    return 1;
  }
  const uint32_t partition = config->partitions(0).id();
  // The replica set, as every node orders it: by node id.
  std::vector<std::pair<p2p::NodeId, base::PublicKey>> members = {
      {p2p::NodeIdFromPublicKey(key->public_key().bytes()), key->public_key()}};
  p2p::GrpcTransportOptions options;
  options.listen_address = config->p2p_listen();
  options.max_frame_bytes = 32 << 20;  // room for the oversized frames
  options.peer_queue_bytes = 64 << 20;
  for (const auto& peer : config->peers()) {
    const std::string raw = absl::HexStringToBytes(peer.public_key_hex());
    absl::StatusOr<base::PublicKey> pk = base::PublicKey::FromBytes(raw);
    if (!pk.ok()) {
      std::cerr << "byzantine_peer: peer key: " << pk.status() << "\n";
      return 1;
    }
    members.push_back({p2p::NodeIdFromPublicKey(raw), *pk});
    options.peers.push_back({.public_key = raw, .address = peer.address()});
  }
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const p2p::NodeId self_id = p2p::NodeIdFromPublicKey(key->public_key().bytes());
  uint32_t self = 0;
  std::vector<base::PublicKey> keys;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].first == self_id) self = static_cast<uint32_t>(i);
    keys.push_back(members[i].second);
  }
  absl::StatusOr<std::unique_ptr<partitions::Ed25519PbftCrypto>> crypto =
      partitions::Ed25519PbftCrypto::Create(partition, self, *key, keys);
  if (!crypto.ok()) {
    std::cerr << "byzantine_peer: " << crypto.status() << "\n";
    return 1;
  }

  Observer seen;
  p2p::GrpcTransport net(*key, options);
  net.SetHandlers(
      [&](const p2p::NodeId&, p2p::PartitionId part, p2p::Channel, std::string payload) {
        PartitionMessage m;
        if (part == partition && m.ParseFromString(payload)) seen.Note(m);
      },
      [](const p2p::NodeId&, p2p::PeerEvent) {});
  if (absl::Status s = net.Start(); !s.ok()) {
    std::cerr << "byzantine_peer: " << s << "\n";
    return 1;
  }
  Byzantine byz(&net, crypto->get(), self, static_cast<uint32_t>(members.size()), partition, &seen);
  std::vector<std::string> modes;
  if (flags.mode == "all") {
    modes.assign(std::begin(kModes), std::end(kModes));
  } else {
    modes.push_back(flags.mode);
  }
  const auto each = std::chrono::milliseconds(flags.seconds * 1000 / modes.size());
  const auto period = std::chrono::microseconds(1'000'000 / flags.rate);
  for (const std::string& mode : modes) {
    const uint64_t before = byz.sent();
    const auto end = SteadyClock::now() + each;
    auto next = SteadyClock::now();
    while (SteadyClock::now() < end) {
      for (const p2p::NodeId& peer : net.connected_peers()) byz.SendOne(mode, peer);
      next += period;
      std::this_thread::sleep_until(std::min(next, end));
    }
    std::cout << "byzantine_peer: " << mode << " sent " << byz.sent() - before << " messages"
              << std::endl;
  }
  net.Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::cerr << "usage: byzantine_peer --config NODED_CONF [--mode all|"
              << absl::StrJoin(kModes, "|") << "] [--seconds 1..3600] [--rate 1..100000]\n";
    return 2;
  }
  return Run(flags);
}
