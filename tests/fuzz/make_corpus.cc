// Writes the seed corpora of tests/fuzz (run once; the output is committed):
//
//   build-fuzzg/tests/fuzz_make_corpus tests/fuzz/corpus
//
// Each target gets a handful of small valid inputs (signed with the fixed keys of
// fuzz_fixtures.h, so they stay valid) and a few invalid ones. Deterministic output.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "p2p/handshake.h"
#include "p2p/network.h"
#include "partitions/pbft_certs.h"
#include "partitions/pbft_ed25519_crypto.h"
#include "proto/client.pb.h"
#include "proto/p2p.pb.h"
#include "proto/partition.pb.h"
#include "runtime/config.h"
#include "tests/fuzz/fuzz_fixtures.h"

namespace {

std::filesystem::path g_root;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const auto dir = g_root / target;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string B(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

// ---- frame ----
node::p2p::Frame MakeFrame(uint32_t partition, node::p2p::Channel ch, uint32_t length,
                           uint32_t index, uint32_t count, uint64_t id, const std::string& data) {
  node::p2p::Frame f;
  auto* h = f.mutable_header();
  h->set_partition(partition);
  h->set_channel(ch);
  h->set_length(length);
  h->set_chunk_index(index);
  h->set_chunk_count(count);
  h->set_message_id(id);
  f.set_payload(data);
  return f;
}

std::string Frames(std::initializer_list<node::p2p::Frame> frames, char max_selector = 10) {
  node::p2p::StreamMessage m;
  for (const auto& f : frames) *m.mutable_frames()->add_frames() = f;
  return std::string(1, max_selector) + m.SerializeAsString();
}

void FrameCorpus() {
  using node::p2p::BULK;
  using node::p2p::CONSENSUS;
  using node::p2p::SYNC;
  Write("frame", "single", Frames({MakeFrame(1, CONSENSUS, 5, 0, 1, 7, "hello")}));
  Write("frame", "chunked_interleaved",
        Frames({MakeFrame(2, SYNC, 9, 0, 3, 1, "abc"), MakeFrame(1, CONSENSUS, 2, 0, 1, 2, "hi"),
                MakeFrame(2, SYNC, 9, 1, 3, 1, "def"), MakeFrame(2, BULK, 4, 0, 2, 3, "xy"),
                MakeFrame(2, SYNC, 9, 2, 3, 1, "ghi"), MakeFrame(2, BULK, 4, 1, 2, 3, "zw")}));
  Write("frame", "out_of_sequence",
        Frames({MakeFrame(1, SYNC, 6, 0, 2, 1, "abc"), MakeFrame(1, SYNC, 6, 0, 2, 2, "abc"),
                MakeFrame(1, SYNC, 6, 1, 2, 1, "def")}));
  // A refused chunk discards its message: the next chunk of it must be refused too.
  Write("frame", "resume_after_refusal",
        Frames({MakeFrame(1, SYNC, 6, 0, 2, 1, "abc"), MakeFrame(1, SYNC, 6, 1, 2, 2, "xyz"),
                MakeFrame(1, SYNC, 6, 1, 2, 1, "def")}));
  Write("frame", "bad_headers",
        Frames(
            {MakeFrame(1, node::p2p::CHANNEL_UNSPECIFIED, 1, 0, 1, 1, "a"),
             MakeFrame(1, CONSENSUS, 100000, 0, 1, 1, "a"), MakeFrame(1, CONSENSUS, 1, 0, 0, 1, ""),
             MakeFrame(1, CONSENSUS, 1, 0, 1, 1, "toolong")},
            2));
  // A ServerHello with a genuine signature over the transcript the target checks.
  const base::PrivateKey key = tests::FixedKey('S');
  const p2p::NodeId id = p2p::NodeIdFromPublicKey(key.public_key().bytes());
  const std::string nonce_s(32, 's');
  node::p2p::StreamMessage hello;
  auto* sh = hello.mutable_server_hello();
  sh->set_public_key(key.public_key().bytes());
  sh->set_node_id(id);
  sh->set_nonce(nonce_s);
  sh->set_signature(key.Sign(p2p::HandshakeTranscript(p2p::HandshakeRole::kServer, "client", id,
                                                      std::string(32, 'c'), nonce_s)));
  Write("frame", "server_hello", std::string(1, 0) + hello.SerializeAsString());
  node::p2p::StreamMessage client;
  client.mutable_client_hello()->set_public_key(key.public_key().bytes());
  client.mutable_client_hello()->set_node_id(id);
  client.mutable_client_hello()->set_expected_peer_id("peer");
  client.mutable_client_hello()->set_nonce(std::string(32, 'n'));
  Write("frame", "client_hello", std::string(1, 0) + client.SerializeAsString());
  Write("frame", "garbage", B({3, 0x2a, 0xff, 0xff, 0x01, 0x0a}));
}

// ---- client_read: byte 0 even = WatchCommitsRequest, odd = GetValueRequest ----
void ClientReadCorpus() {
  node::client::WatchCommitsRequest watch;
  watch.mutable_partition()->set_name("fuzz");
  watch.set_from_height(1);
  Write("client_read", "watch_from_1", std::string(1, 0) + watch.SerializeAsString());
  watch.set_from_height(4);
  watch.set_include_txs(true);
  watch.set_include_receipts(true);
  Write("client_read", "watch_from_4_full", std::string(1, 0) + watch.SerializeAsString());
  watch.set_from_height(7);  // the tip + 1: waits
  Write("client_read", "watch_next", std::string(1, 0) + watch.SerializeAsString());
  watch.set_from_height(1000000);
  Write("client_read", "watch_beyond", std::string(1, 0) + watch.SerializeAsString());
  node::client::GetValueRequest get;
  get.set_key("k2");
  Write("client_read", "get_latest", std::string(1, 1) + get.SerializeAsString());
  get.set_height(3);
  Write("client_read", "get_at_3", std::string(1, 1) + get.SerializeAsString());
  get.set_height(99);
  Write("client_read", "get_beyond", std::string(1, 1) + get.SerializeAsString());
  get.set_key(std::string(300, 'k'));
  get.set_height(0);
  Write("client_read", "get_long_key", std::string(1, 1) + get.SerializeAsString());
}

// ---- snapshot: byte 0 even = a SnapshotRequest to the server, odd = a fetch from peers ----
void SnapshotCorpus() {
  node::partition::SnapshotRequest req;
  req.set_seq(5);
  req.set_manifest(true);
  Write("snapshot", "manifest_at_tip", std::string(1, 0) + req.SerializeAsString());
  req.set_seq(2);
  Write("snapshot", "manifest_older", std::string(1, 0) + req.SerializeAsString());
  req.set_seq(99);
  Write("snapshot", "manifest_beyond", std::string(1, 0) + req.SerializeAsString());
  req.set_seq(5);
  req.set_manifest(false);
  req.set_first_key("k");
  req.set_entries(3);
  Write("snapshot", "chunk", std::string(1, 0) + req.SerializeAsString());
  req.set_entries(100000);
  Write("snapshot", "chunk_too_large", std::string(1, 0) + req.SerializeAsString());
  // Fetches: no fuzzed manifest (blob of length 0), then per request an answer kind and its
  // bytes: all honest; one value changed; keys changed; random chunk bytes.
  Write("snapshot", "fetch_honest", B({1, 0, 0, 0, 0, 0, 0, 0}));
  Write("snapshot", "fetch_bad_value", B({1, 0, 1, 0, 0, 3, 0x41, 0, 0, 0}));
  Write("snapshot", "fetch_bad_key", B({1, 0, 1, 1, 1, 0, 0, 0}));
  Write("snapshot", "fetch_drop_entry", B({1, 0, 1, 0, 2, 0, 0, 0}));
  Write("snapshot", "fetch_garbage", B({1, 0, 2, 6, 0x22, 0x01, 0x6b, 0x2a, 0x01, 0x76, 0, 0}));
  Write("snapshot", "fetch_bad_manifest", B({1, 4, 0x08, 0x05, 0x12, 0x01, 0, 0}));
}

// ---- tx ----
void TxCorpus() {
  Write("tx", "put", std::string(1, 1) + tests::FixedTx('A', 1, 1, "key"));
  Write("tx", "transfer", std::string(1, 1) + tests::FixedTx('A', 1, 2, ""));
  Write("tx", "memo", std::string(1, 2) + tests::FixedTx('B', 2, 5, "k", "a memo"));
  Write("tx", "tight_limits", std::string(1, 5) + tests::FixedTx('B', 1, 1, "k"));
  Write("tx", "wrong_partition", std::string(1, 3) + tests::FixedTx('A', 1, 1, "key"));
  Write("tx", "zero_nonce", std::string(1, 1) + tests::FixedTx('A', 1, 0, "key"));
  std::string bad = tests::FixedTx('A', 1, 3, "key");
  bad[bad.size() - 1] ^= 1;
  Write("tx", "bad_signature", std::string(1, 1) + bad);
  Write("tx", "non_canonical", std::string(1, 1) + tests::FixedTx('A', 1, 1, "key") + B({0x18, 1}));
}

// ---- consensus: op sequences as consensus_fuzz.cc decodes them ----
// Message bytes: view (2 bytes: selector, value), seq (2 bytes), tx-set mask, digest selector.
std::string PrePrepare(int seq, int mask, int sender) {
  return B({0, mask, 0, 0, 0, seq, 2, sender, 1});
}
std::string Vote(int op, int view, int seq, int mask, int sender) {
  return B({op, 0, view, 0, seq, mask, 2, sender});
}
std::string Normal(int seq, int mask, int view = 0) {
  std::string s = PrePrepare(seq, mask, 0);
  for (int sender : {1, 2}) s += Vote(1, view, seq, mask, sender);  // Sender(): 1 -> 2, 2 -> 3
  for (int sender : {0, 1, 2}) s += Vote(2, view, seq, mask, sender);
  return s;
}

void ConsensusCorpus() {
  const std::string txs = B({12, 0x0f});  // all four txs arrive in the pool
  Write("consensus", "normal_case", B({1}) + txs + Normal(1, 0x03) + Normal(2, 0x04));
  std::string checkpoint = B({1}) + txs + Normal(1, 0x01) + Normal(2, 0x02);
  // Checkpoint: seq 2, the chain digest after it, its model root (byte 2), sender.
  for (int sender : {0, 1, 2}) checkpoint += B({3, 0, 2, 1, 1, 2, sender});
  Write("consensus", "checkpoint", checkpoint);
  std::string vc = B({0}) + txs + Normal(1, 0x01);
  const std::string genesis = B({0, 32}) + std::string(32, '\0');  // stable digest: a Blob
  for (int sender : {0, 1, 2}) vc += B({4, 0, 1, 0, 0}) + genesis + B({0, 0, sender});
  vc += B({9, 0, 9, 1, 10, 0x03, 9, 2});
  Write("consensus", "view_change", vc);
  Write("consensus", "sync",
        B({1}) + txs + Normal(1, 0x01) + B({7, 0, 0, 0, 5, 0}) + B({8, 2, 0, 1, 1}) +
            B({6, 0, 2, 1}));
  Write("consensus", "timers_and_raw", B({1, 11, 5, 9, 0, 9, 1, 9, 2, 13, 3, 0x08, 0x02, 0x00}));
  Write("consensus", "restart", B({1}) + txs + Normal(1, 0x01) + B({15, 0, 0}) + Normal(2, 0x02));
}

// ---- consensus_envelope and partition_message ----
std::string PartitionMsg(char peer, const node::partition::PartitionMessage& m) {
  return std::string(1, peer) + m.SerializeAsString();
}

void EnvelopeCorpus() {
  std::vector<base::PrivateKey> keys;
  std::vector<base::PublicKey> publics;
  for (int i = 0; i < 4; ++i) {
    keys.push_back(tests::FixedKey(static_cast<char>('A' + i)));
    publics.push_back(keys.back().public_key());
  }
  auto sign = [&](uint32_t sender, partitions::ConsensusMessage m) {
    auto crypto = *partitions::Ed25519PbftCrypto::Create(1, sender, keys[sender], publics);
    m.set_sender(sender);
    m.set_signature(crypto->Sign(m));
    return m;
  };
  const std::vector<std::string> hashes{std::string(32, 'h')};
  partitions::ConsensusMessage pp;
  pp.mutable_pre_prepare()->set_view(0);
  pp.mutable_pre_prepare()->set_seq(1);
  pp.mutable_pre_prepare()->add_tx_hashes(hashes[0]);
  pp.mutable_pre_prepare()->set_digest(partitions::BatchDigest(hashes));
  pp.mutable_pre_prepare()->set_proposer(0);
  node::partition::PartitionMessage m;
  *m.mutable_consensus() = sign(0, pp);
  Write("consensus_envelope", "pre_prepare", PartitionMsg(0, m));
  Write("consensus_envelope", "wrong_peer", PartitionMsg(2, m));
  partitions::ConsensusMessage prepare;
  prepare.mutable_prepare()->set_seq(1);
  prepare.mutable_prepare()->set_digest(partitions::BatchDigest(hashes));
  *m.mutable_consensus() = sign(2, prepare);
  Write("consensus_envelope", "prepare", PartitionMsg(2, m));
  m.mutable_consensus()->mutable_signature()->back() ^= 1;
  Write("consensus_envelope", "bad_signature", PartitionMsg(2, m));
  partitions::ConsensusMessage vc;
  vc.mutable_view_change()->set_new_view(1);
  *vc.mutable_view_change()->add_prepared()->mutable_pre_prepare() = sign(0, pp);
  *m.mutable_consensus() = sign(3, vc);
  Write("consensus_envelope", "view_change", PartitionMsg(3, m));
  partitions::ConsensusMessage req;
  req.mutable_sync_request()->set_from_seq(1);
  req.mutable_sync_request()->set_to_seq(4);
  *m.mutable_consensus() = sign(0, req);
  Write("consensus_envelope", "sync_request", PartitionMsg(0, m));

  // partition_message: the same consensus messages, tx batches and fetches.
  Write("partition_message", "sync_request", PartitionMsg(0, m));
  *m.mutable_consensus() = sign(3, vc);
  Write("partition_message", "view_change", PartitionMsg(3, m));
  node::partition::PartitionMessage batch;
  batch.mutable_txs()->add_signed_txs(tests::FixedTx('R', 1, 1, "a"));
  batch.mutable_txs()->add_signed_txs(tests::FixedTx('R', 1, 2, ""));
  batch.mutable_txs()->add_signed_txs(tests::PrefilledTxs()[0]);        // duplicate
  batch.mutable_txs()->add_signed_txs(tests::FixedTx('R', 2, 3, "a"));  // wrong partition
  batch.mutable_txs()->add_signed_txs("garbage");
  Write("partition_message", "tx_batch_fetched", PartitionMsg(1, batch));  // byte 0 bit 0: fetched
  Write("partition_message", "tx_batch_forwarded", PartitionMsg(2, batch));
  node::partition::PartitionMessage fetch;
  for (const std::string& tx : tests::PrefilledTxs()) {
    fetch.mutable_fetch()->add_tx_hashes(base::Sha256Bytes(tx));
  }
  fetch.mutable_fetch()->add_tx_hashes(std::string(32, 'x'));
  Write("partition_message", "fetch", PartitionMsg(1, fetch));
  node::partition::PartitionMessage empty_fetch;
  empty_fetch.mutable_fetch();
  Write("partition_message", "fetch_empty", PartitionMsg(1, empty_fetch));
  node::partition::PartitionMessage cut;
  cut.mutable_admission()->set_admit_ppm(250'000);
  Write("partition_message", "admission_cut",
        PartitionMsg(static_cast<char>(0x95), cut));  // peers 1, 1; own 0.6
}

// ---- config ----
void ConfigCorpus() {
  node::config::NodeConfig config = runtime::DefaultNodeConfig();
  std::string text, json;
  google::protobuf::TextFormat::PrintToString(config, &text);
  google::protobuf::util::MessageToJsonString(config, &json);
  Write("config", "default_text", std::string(1, 0) + text);
  Write("config", "default_json", std::string(1, 1) + json);
  Write("config", "default_binary", std::string(1, 2) + config.SerializeAsString());
  Write("config", "empty_text", std::string(1, 0));
  Write("config", "small_text",
        std::string(1, 0) +
            "data_dir: \"/tmp/x\"\npeers { address: \"127.0.0.1:1\" }\n"
            "partitions { id: 3 name: \"p\" consensus { checkpoint_interval: 4 "
            "watermark_window: 16 } }\n");
  Write("config", "invalid_text",
        std::string(1, 0) +
            "partitions { id: 0 consensus { checkpoint_interval: 0 } }\n"
            "resources { cpu_workers: 100000 }\nbogus: 1\n");
  Write("config", "invalid_json",
        std::string(1, 1) + "{\"partitions\": [{\"id\": \"x\"}], \"z\": 1}");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_ROOT (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  FrameCorpus();
  TxCorpus();
  ClientReadCorpus();
  SnapshotCorpus();
  ConsensusCorpus();
  EnvelopeCorpus();
  ConfigCorpus();
  return 0;
}
