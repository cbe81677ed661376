// Fuzz target: what a peer stream delivers (p2p/grpc_transport.cc RunConnection).
//
// Input: byte 0 picks max_frame_bytes; the rest is one node.p2p.StreamMessage as read from the
// wire. Frame batches go through a Reassembler exactly as the transport feeds it; handshake
// messages go through VerifyHandshake. Checked against a model of the reassembler's contract:
// a delivered message has the partition and channel of its frames, is at most max_frame_bytes,
// equals its header length and is exactly the concatenation of the accepted chunks since chunk
// 0; partial messages never exceed the number of (partition, channel) keys seen.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "p2p/handshake.h"
#include "p2p/reassembler.h"
#include "proto/p2p.pb.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "frame_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

void FuzzFrames(size_t max_frame_bytes, node::p2p::FrameBatch& batch) {
  p2p::Reassembler reassembler(max_frame_bytes);
  std::map<std::pair<uint32_t, int>, std::string> model;  // accepted chunks since chunk 0
  std::set<std::pair<uint32_t, int>> keys;
  for (node::p2p::Frame& f : *batch.mutable_frames()) {
    const node::p2p::FrameHeader& h = f.header();
    const auto key = std::make_pair(h.partition(), static_cast<int>(h.channel()));
    const bool header_ok = p2p::IsValidChannel(h.channel()) && h.length() <= max_frame_bytes &&
                           h.chunk_count() > 0 && h.chunk_index() < h.chunk_count() &&
                           f.payload().size() <= h.length();
    const std::string payload = f.payload();
    absl::StatusOr<std::optional<p2p::Reassembler::Message>> m =
        reassembler.Add(h, std::move(*f.mutable_payload()));
    if (header_ok) keys.insert(key);
    if (!m.ok()) {
      Require(m.status().code() == absl::StatusCode::kInvalidArgument, "error is InvalidArgument");
      if (header_ok) model.erase(key);  // a refused frame of a valid key discards its partial
      continue;
    }
    Require(header_ok, "a frame with a bad header was accepted");
    if (h.chunk_count() == 1) {
      model.erase(key);
      Require(m->has_value(), "single-chunk frame delivers");
      Require((*m)->payload == payload, "single-chunk payload unchanged");
    } else {
      if (h.chunk_index() == 0) model[key].clear();
      model[key] += payload;
      if (m->has_value()) {
        Require(h.chunk_index() + 1 == h.chunk_count(), "delivered on the last chunk");
        Require((*m)->payload == model[key], "reassembled payload is the chunks in order");
        model.erase(key);
      }
    }
    if (m->has_value()) {
      Require((*m)->partition == h.partition(), "partition kept");
      Require((*m)->channel == h.channel(), "channel kept");
      Require((*m)->payload.size() == h.length(), "payload size equals header length");
      Require((*m)->payload.size() <= max_frame_bytes, "payload within max_frame_bytes");
    }
    Require(reassembler.partial_messages() <= keys.size(), "one partial per key at most");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tests::QuietProtobufLogs();
  if (size == 0) return 0;
  const size_t max_frame_bytes = size_t{16} << (data[0] % 16);  // 16 B .. 512 KiB
  node::p2p::StreamMessage msg;
  if (!msg.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  switch (msg.body_case()) {
    case node::p2p::StreamMessage::kFrames:
      FuzzFrames(max_frame_bytes, *msg.mutable_frames());
      break;
    case node::p2p::StreamMessage::kClientHello: {
      const node::p2p::ClientHello& c = msg.client_hello();
      (void)p2p::VerifyHandshake(p2p::HandshakeRole::kClient, c.public_key(), c.node_id(),
                                 c.node_id(), c.expected_peer_id(), c.nonce(), c.nonce(),
                                 c.public_key());
      (void)p2p::NodeIdFromPublicKey(c.public_key());
      break;
    }
    case node::p2p::StreamMessage::kServerHello: {
      const node::p2p::ServerHello& s = msg.server_hello();
      (void)p2p::VerifyHandshake(p2p::HandshakeRole::kServer, s.public_key(), s.node_id(), "client",
                                 s.node_id(), std::string(32, 'c'), s.nonce(), s.signature());
      break;
    }
    default:
      break;
  }
  return 0;
}
