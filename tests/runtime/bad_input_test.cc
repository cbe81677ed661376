// Bad input through the node's real gRPC ports, as one table: every malformed, oversized,
// unauthorised or invalid request a client, an operator or a peer can send, each with the exact
// status code and message substring the node answers. After the whole table the node must still
// serve and the transaction it committed before the table must still be COMMITTED.
//
// The test prints the table (case, how sent, code, message) as markdown for docs/RELIABILITY.md.
#include <cmath>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "p2p/handshake.h"
#include "p2p/network.h"
#include "proto/p2p.grpc.pb.h"
#include "tests/runtime/grpc_test_node.h"

namespace runtime::grpc_test {
namespace {

using grpc::StatusCode;

const char* CodeName(StatusCode code) {
  switch (code) {
    case StatusCode::OK:
      return "OK";
    case StatusCode::CANCELLED:
      return "CANCELLED";
    case StatusCode::UNKNOWN:
      return "UNKNOWN";
    case StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case StatusCode::ABORTED:
      return "ABORTED";
    case StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case StatusCode::INTERNAL:
      return "INTERNAL";
    case StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "?";
  }
}

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

struct Row {
  std::string name;
  std::string how;  // which port / method / what is sent
  std::function<grpc::Status()> call;
  StatusCode code;
  std::string message;  // expected substring of the status message
  // Set when the row asserts current behaviour that is wrong or unclear (reported, not fixed
  // here); such a row may have an empty message.
  std::string known_issue = "";
};

class BadInputTest : public GrpcServicesTest {
 protected:
  grpc::Status SubmitBytes(node::client::PartitionRef ref, std::string tx) {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::SubmitTxRequest request;
    *request.mutable_partition() = std::move(ref);
    request.set_signed_tx(std::move(tx));
    node::client::SubmitTxResponse response;
    return Client()->SubmitTx(&ctx, request, &response);
  }
  grpc::Status SubmitHot(std::string tx) { return SubmitBytes(Ref("hot"), std::move(tx)); }

  // A unary call whose request body is `body`, not a valid encoding of the method's request.
  // With `token`, the call carries the admin token.
  grpc::Status RawUnary(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                        const std::string& body, bool token = false) {
    grpc::GenericStub stub(channel);
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    if (token) WithToken(&ctx);
    grpc::ByteBuffer request = Bytes(body), response;
    grpc::Status result;
    absl::Notification done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      result = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();  // bounded by the call's deadline
    return result;
  }

  // A server-streaming call whose request body is `body`; drains the stream, returns its status.
  grpc::Status RawServerStream(const std::shared_ptr<grpc::Channel>& channel,
                               const std::string& method, const std::string& body) {
    grpc::GenericStub stub(channel);
    grpc::ClientContext ctx;
    WithDeadline(&ctx, absl::Seconds(10));
    grpc::CompletionQueue cq;
    auto call = stub.PrepareCall(&ctx, method, &cq);
    void* tag;
    bool ok;
    auto step = [&](intptr_t want) {
      // Bounded: the context's deadline ends every pending operation.
      bool got = cq.Next(&tag, &ok);
      return got && reinterpret_cast<intptr_t>(tag) == want && ok;
    };
    call->StartCall(reinterpret_cast<void*>(1));
    if (step(1)) {
      call->WriteLast(Bytes(body), grpc::WriteOptions(), reinterpret_cast<void*>(2));
      step(2);
    }
    for (int i = 0; i < 16; ++i) {
      grpc::ByteBuffer reply;
      call->Read(&reply, reinterpret_cast<void*>(4));
      if (!step(4)) break;
    }
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(5));
    cq.Next(&tag, &ok);
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  }

  grpc::Status Watch(node::client::PartitionRef ref, uint64_t from) {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::WatchCommitsRequest r;
    *r.mutable_partition() = std::move(ref);
    r.set_from_height(from);
    auto reader = Client()->WatchCommits(&ctx, r);
    node::client::WatchCommitsResponse m;
    while (reader->Read(&m)) {
    }
    return reader->Finish();
  }

  grpc::Status Value(std::string key, uint64_t height) {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::GetValueRequest r;
    *r.mutable_partition() = Ref("hot");
    r.set_key(std::move(key));
    r.set_height(height);
    node::client::GetValueResponse response;
    return Client()->GetValue(&ctx, r, &response);
  }

  std::shared_ptr<grpc::Channel> P2pChannel() {
    return grpc::CreateChannel(absl::StrCat("127.0.0.1:", node_->p2p_port()),
                               grpc::InsecureChannelCredentials());
  }

  // Opens PeerService.Connect, writes `messages` (raw encodings), half-closes, drains the replies
  // and returns the stream's status.
  grpc::Status RawPeerStream(const std::vector<std::string>& messages) {
    grpc::GenericStub stub(P2pChannel());
    grpc::ClientContext ctx;
    WithDeadline(&ctx, absl::Seconds(10));
    grpc::CompletionQueue cq;
    auto call = stub.PrepareCall(&ctx, "/node.p2p.PeerService/Connect", &cq);
    void* tag;
    bool ok;
    auto step = [&](intptr_t want) {
      // Bounded: the context's deadline ends every pending operation.
      bool got = cq.Next(&tag, &ok);
      return got && reinterpret_cast<intptr_t>(tag) == want && ok;
    };
    call->StartCall(reinterpret_cast<void*>(1));
    if (step(1)) {
      for (const std::string& m : messages) {
        call->Write(Bytes(m), reinterpret_cast<void*>(2));
        if (!step(2)) break;
      }
    }
    call->WritesDone(reinterpret_cast<void*>(3));
    step(3);
    for (int i = 0; i < 16; ++i) {  // the server replies at most a ServerHello
      grpc::ByteBuffer reply;
      call->Read(&reply, reinterpret_cast<void*>(4));
      if (!step(4)) break;
    }
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(5));
    cq.Next(&tag, &ok);
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  }

  // A ClientHello from a fresh key that is not in the node's peer set.
  std::string HelloFrom(char seed_byte, bool matching_id) {
    base::PrivateKey key = *base::PrivateKey::FromSeed(std::string(32, seed_byte));
    node::p2p::StreamMessage msg;
    auto* hello = msg.mutable_client_hello();
    hello->set_public_key(key.public_key().bytes());
    hello->set_node_id(matching_id ? p2p::NodeIdFromPublicKey(key.public_key().bytes())
                                   : std::string(32, 'a'));
    hello->set_expected_peer_id(node_->id());
    hello->set_nonce(p2p::NewHandshakeNonce());
    return msg.SerializeAsString();
  }

  grpc::Status Flow(node::admin::UpdatePartitionFlowRequest request,
                    node::admin::UpdatePartitionFlowResponse* response = nullptr) {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdatePartitionFlowResponse ignored;
    return Admin()->UpdatePartitionFlow(&ctx, request, response ? response : &ignored);
  }

  grpc::Status CreatePartition(node::admin::CreatePartitionRequest request) {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::CreatePartitionResponse response;
    return Admin()->CreatePartition(&ctx, request, &response);
  }

  grpc::Status Arbiter(std::vector<std::tuple<std::string, double, double, double>> entries,
                       uint32_t cpu_workers = 0) {
    node::admin::UpdateArbiterRequest request;
    request.set_cpu_workers(cpu_workers);
    for (const auto& [name, weight, guarantee, ceiling] : entries) {
      auto* e = request.add_entries();
      e->set_partition(name);
      e->mutable_share()->set_weight(weight);
      e->mutable_share()->set_guarantee_fraction(guarantee);
      e->mutable_share()->set_ceiling_fraction(ceiling);
    }
    return SendArbiter(request);
  }
  grpc::Status SendArbiter(const node::admin::UpdateArbiterRequest& request) {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdateArbiterResponse response;
    return Admin()->UpdateArbiter(&ctx, request, &response);
  }
};

node::admin::UpdatePartitionFlowRequest WithStage(node::flowctl::StageConfig stage) {
  node::admin::UpdatePartitionFlowRequest request;
  request.set_partition("steady");
  *request.mutable_interceptor()->add_stages() = std::move(stage);
  return request;
}

node::admin::UpdatePartitionFlowRequest WithLaneWeight(double weight) {
  node::admin::UpdatePartitionFlowRequest request;
  request.set_partition("steady");
  request.mutable_dispatcher()->mutable_lane_weights()->set_bulk(weight);
  return request;
}

TEST_F(BadInputTest, EveryBadInputGetsItsOwnStatusAndTheNodeSurvives) {
  // Before the table: one committed transaction (nonce 1 of account 'R'), which the replay rows
  // reuse and which must survive everything below.
  const std::string committed = SignedPut(1, 'R', 1, "replayed-key");
  std::string committed_hash;
  {
    grpc::ClientContext ctx;
    node::client::SubmitTxResponse response;
    grpc::Status s = Submit("hot", committed, /*wait=*/true, &response, &ctx);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE(response.has_receipt());
    committed_hash = response.tx_hash();
  }
  const std::string valid = SignedPut(1, 'B', 1, "k");
  std::string bad_signature = valid;
  bad_signature[bad_signature.size() - 1] ^= 0x01;  // the signature is the encoding's tail

  std::vector<Row> rows = {
      // --- Client port: encodings and limits ---
      {"malformed protobuf", "client SubmitTx, raw bytes 0xff.. as body",
       [&] {
         return RawUnary(*client_channel_, "/node.client.ClientService/SubmitTx",
                         std::string("\xff\xff\xff\xff\x0f garbage", 14));
       },
       StatusCode::INVALID_ARGUMENT,
       "request does not parse as node.client.SubmitTxRequest (14 bytes)"},
      {"malformed protobuf (admin)", "admin GetFlowStats, raw bytes 0xff.. as body",
       [&] {
         return RawUnary(*admin_channel_, "/node.admin.AdminService/GetFlowStats",
                         std::string("\xff\xff\xff\xff\x0f garbage", 14), /*token=*/true);
       },
       StatusCode::INVALID_ARGUMENT,
       "request does not parse as node.admin.GetFlowStatsRequest (14 bytes)"},
      {"malformed protobuf (admin, no token)", "admin GetFlowStats, 0xff.. body, no authorization",
       [&] {
         return RawUnary(*admin_channel_, "/node.admin.AdminService/GetFlowStats",
                         std::string("\xff\xff\xff\xff\x0f garbage", 14));
       },
       StatusCode::UNAUTHENTICATED, "missing or invalid admin token"},
      {"oversized message (17 MiB)", "client SubmitTx, 17 MiB signed_tx",
       [&] { return SubmitHot(std::string(17 << 20, 'x')); }, StatusCode::RESOURCE_EXHAUSTED,
       "larger than max"},
      {"oversized admin message (5 MiB)", "admin UpdatePartitionFlow, 5 MiB partition name",
       [&] {
         node::admin::UpdatePartitionFlowRequest r;
         r.set_partition(std::string(5 << 20, 'p'));
         return Flow(r);
       },
       StatusCode::RESOURCE_EXHAUSTED, "larger than max"},
      {"oversize transaction (100 KiB)", "client SubmitTx, Put value of 100 KiB",
       [&] {
         absl::StatusOr<base::PrivateKey> key = base::PrivateKey::FromSeed(std::string(32, 'O'));
         node::chain::Transaction tx;
         tx.set_partition(1);
         tx.set_nonce(1);
         tx.mutable_put()->set_key("big");
         tx.mutable_put()->set_value(std::string(100 << 10, 'v'));
         return SubmitHot(base::SignTx(std::move(tx), *key));
       },
       StatusCode::INVALID_ARGUMENT, "oversize transaction"},
      // --- Client port: partition references ---
      {"unknown partition id", "client SubmitTx, partition {id: 99}",
       [&] {
         node::client::PartitionRef ref;
         ref.set_id(99);
         return SubmitBytes(ref, valid);
       },
       StatusCode::NOT_FOUND, "99"},
      {"unknown partition name", "client SubmitTx, partition {name: \"nope\"}",
       [&] { return SubmitBytes(Ref("nope"), valid); }, StatusCode::NOT_FOUND, "nope"},
      {"empty partition ref", "client SubmitTx, partition {}",
       [&] { return SubmitBytes({}, valid); }, StatusCode::INVALID_ARGUMENT, "partition"},
      {"unknown partition (read)", "client GetChainStatus, partition {name: \"nope\"}",
       [&] {
         grpc::ClientContext ctx;
         WithDeadline(&ctx);
         node::client::GetChainStatusRequest r;
         *r.mutable_partition() = Ref("nope");
         node::client::GetChainStatusResponse response;
         return Client()->GetChainStatus(&ctx, r, &response);
       },
       StatusCode::NOT_FOUND, "nope"},
      // --- Client port: transactions ---
      {"empty signed_tx", "client SubmitTx, signed_tx empty", [&] { return SubmitHot(""); },
       StatusCode::INVALID_ARGUMENT, "signed_tx: required"},
      {"garbage signed_tx", "client SubmitTx, signed_tx = 0xff..",
       [&] { return SubmitHot(std::string("\xff\xfe\xfd garbage bytes", 17)); },
       StatusCode::INVALID_ARGUMENT, "malformed transaction"},
      {"truncated tx", "client SubmitTx, first half of a signed tx",
       [&] { return SubmitHot(valid.substr(0, valid.size() / 2)); }, StatusCode::INVALID_ARGUMENT,
       "malformed transaction"},
      {"wrong partition in tx", "client SubmitTx to hot (1), tx for partition 2",
       [&] { return SubmitHot(SignedPut(2, 'W', 1, "k")); }, StatusCode::INVALID_ARGUMENT,
       "wrong partition"},
      {"bad signature", "client SubmitTx, last signature bit flipped",
       [&] { return SubmitHot(bad_signature); }, StatusCode::INVALID_ARGUMENT, "bad signature"},
      {"zero nonce", "client SubmitTx, nonce 0",
       [&] { return SubmitHot(SignedPut(1, 'Z', 0, "k")); }, StatusCode::INVALID_ARGUMENT,
       "zero nonce"},
      {"replayed tx (same bytes)", "client SubmitTx, the committed tx again",
       [&] { return SubmitHot(committed); }, StatusCode::ALREADY_EXISTS, "replayed nonce"},
      {"replayed nonce (other tx)", "client SubmitTx, new tx with the committed nonce",
       [&] { return SubmitHot(SignedPut(1, 'R', 1, "other-key")); }, StatusCode::ALREADY_EXISTS,
       "replayed nonce"},
      {"huge batch (1001 txs)", "client SubmitTxBatch, 1001 entries",
       [&] {
         grpc::ClientContext ctx;
         WithDeadline(&ctx);
         node::client::SubmitTxBatchRequest r;
         *r.mutable_partition() = Ref("hot");
         for (int i = 0; i < kMaxBatchTxs + 1; ++i) r.add_signed_txs("x");
         node::client::SubmitTxBatchResponse response;
         return Client()->SubmitTxBatch(&ctx, r, &response);
       },
       StatusCode::INVALID_ARGUMENT, "signed_txs: must hold 1 to 1000 transactions, got 1001"},
      {"more retry tickets than txs", "client SubmitTxBatch, 1 tx with 2 retry tickets",
       [&] {
         grpc::ClientContext ctx;
         WithDeadline(&ctx);
         node::client::SubmitTxBatchRequest r;
         *r.mutable_partition() = Ref("hot");
         r.add_signed_txs("x");
         r.add_retry_tickets(1);
         r.add_retry_tickets(2);
         node::client::SubmitTxBatchResponse response;
         return Client()->SubmitTxBatch(&ctx, r, &response);
       },
       StatusCode::INVALID_ARGUMENT, "retry_tickets: at most one per signed_txs entry (1), got 2"},
      {"empty batch", "client SubmitTxBatch, 0 entries",
       [&] {
         grpc::ClientContext ctx;
         WithDeadline(&ctx);
         node::client::SubmitTxBatchRequest r;
         *r.mutable_partition() = Ref("hot");
         node::client::SubmitTxBatchResponse response;
         return Client()->SubmitTxBatch(&ctx, r, &response);
       },
       StatusCode::INVALID_ARGUMENT, "got 0"},
      {"bad tx hash", "client GetTx, 5-byte tx_hash",
       [&] {
         grpc::ClientContext ctx;
         WithDeadline(&ctx);
         node::client::GetTxRequest r;
         *r.mutable_partition() = Ref("hot");
         r.set_tx_hash("short");
         node::client::GetTxResponse response;
         return Client()->GetTx(&ctx, r, &response);
       },
       StatusCode::INVALID_ARGUMENT, "tx_hash: must be 32 bytes, got 5"},
      {"block beyond the head", "client GetBlock, height 1000000",
       [&] {
         grpc::ClientContext ctx;
         WithDeadline(&ctx);
         node::client::GetBlockRequest r;
         *r.mutable_partition() = Ref("hot");
         r.set_height(1000000);
         node::client::GetBlockResponse response;
         return Client()->GetBlock(&ctx, r, &response);
       },
       StatusCode::NOT_FOUND, ""},
      {"malformed protobuf (stream)", "client WatchCommits, raw bytes 0xff.. as body",
       [&] {
         return RawServerStream(*client_channel_, "/node.client.ClientService/WatchCommits",
                                std::string("\xff\xff\xff\xff\x0f garbage", 14));
       },
       StatusCode::INVALID_ARGUMENT,
       "request does not parse as node.client.WatchCommitsRequest (14 bytes)"},
      {"watch from beyond the tip", "client WatchCommits, from_height 1000000",
       [&] { return Watch(Ref("hot"), 1000000); }, StatusCode::OUT_OF_RANGE,
       "from_height 1000000 is beyond the tip of partition hot"},
      {"watch, unknown partition", "client WatchCommits, partition {name: \"nope\"}",
       [&] { return Watch(Ref("nope"), 0); }, StatusCode::NOT_FOUND, "unknown partition \"nope\""},
      {"value beyond the tip", "client GetValue, height 1000000",
       [&] { return Value("k", 1000000); }, StatusCode::OUT_OF_RANGE,
       "height 1000000 is beyond the tip of partition hot"},
      {"empty key", "client GetValue, key empty", [&] { return Value("", 0); },
       StatusCode::INVALID_ARGUMENT, "key: required"},
      {"oversized key", "client GetValue, key of 257 bytes",
       [&] { return Value(std::string(257, 'k'), 0); }, StatusCode::INVALID_ARGUMENT,
       "key: must be at most 256 bytes, got 257"},
      // --- Admin port: authentication ---
      {"missing admin token", "admin GetNodeStatus, no authorization",
       [&] {
         grpc::ClientContext ctx;
         WithDeadline(&ctx);
         node::admin::NodeStatus response;
         return Admin()->GetNodeStatus(&ctx, {}, &response);
       },
       StatusCode::UNAUTHENTICATED, "missing or invalid admin token"},
      {"wrong admin token", "admin GetNodeStatus, Bearer wrong",
       [&] {
         grpc::ClientContext ctx;
         WithToken(&ctx, "wrong");
         node::admin::NodeStatus response;
         return Admin()->GetNodeStatus(&ctx, {}, &response);
       },
       StatusCode::UNAUTHENTICATED, "missing or invalid admin token"},
      {"admin call on the client port", "AdminService.GetNodeStatus to the client port",
       [&] {
         grpc::ClientContext ctx;
         WithToken(&ctx);
         node::admin::NodeStatus response;
         return node::admin::AdminService::NewStub(*client_channel_)
             ->GetNodeStatus(&ctx, {}, &response);
       },
       StatusCode::UNIMPLEMENTED,
       "unknown method /node.admin.AdminService/GetNodeStatus on the client port"},
      {"client call on the admin port", "ClientService.GetChainStatus to the admin port",
       [&] {
         grpc::ClientContext ctx;
         WithToken(&ctx);
         node::client::GetChainStatusRequest r;
         *r.mutable_partition() = Ref("hot");
         node::client::GetChainStatusResponse response;
         return node::client::ClientService::NewStub(*admin_channel_)
             ->GetChainStatus(&ctx, r, &response);
       },
       StatusCode::UNIMPLEMENTED,
       "unknown method /node.client.ClientService/GetChainStatus on the admin port"},
      // --- Admin port: live partitions ---
      {"malformed protobuf (admin, live partition call)", "admin CreatePartition, 0xff.. body",
       [&] {
         return RawUnary(*admin_channel_, "/node.admin.AdminService/CreatePartition",
                         std::string("\xff\xff\xff\xff\x0f garbage", 14), /*token=*/true);
       },
       StatusCode::INVALID_ARGUMENT,
       "request does not parse as node.admin.CreatePartitionRequest (14 bytes)"},
      {"live partition call without the token", "admin StopPartition hot, no authorization",
       [&] {
         grpc::ClientContext ctx;
         WithDeadline(&ctx);
         node::admin::StopPartitionRequest r;
         r.set_partition("hot");
         node::admin::StopPartitionResponse response;
         return Admin()->StopPartition(&ctx, r, &response);
       },
       StatusCode::UNAUTHENTICATED, "missing or invalid admin token"},
      {"create without a config", "admin CreatePartition {}", [&] { return CreatePartition({}); },
       StatusCode::INVALID_ARGUMENT, "config: required"},
      {"create with id 0", "admin CreatePartition, config {name: \"fresh\"}",
       [&] {
         node::admin::CreatePartitionRequest r;
         r.mutable_config()->set_name("fresh");
         return CreatePartition(r);
       },
       StatusCode::INVALID_ARGUMENT, "partitions[fresh].id"},
      {"create with a name in use", "admin CreatePartition, config {id: 99 name: \"hot\"}",
       [&] {
         node::admin::CreatePartitionRequest r;
         r.mutable_config()->set_id(99);
         r.mutable_config()->set_name("hot");
         return CreatePartition(r);
       },
       StatusCode::ALREADY_EXISTS, "config.name: partition name \"hot\" is in use"},
      {"stop with too long a drain", "admin StopPartition hot, drain_ms 70000",
       [&] {
         grpc::ClientContext ctx;
         WithToken(&ctx);
         node::admin::StopPartitionRequest r;
         r.set_partition("hot");
         r.set_drain_ms(70000);
         node::admin::StopPartitionResponse response;
         return Admin()->StopPartition(&ctx, r, &response);
       },
       StatusCode::INVALID_ARGUMENT, "drain_ms: must be <= 60000, got 70000"},
      {"remove a running partition", "admin RemovePartition hot",
       [&] {
         grpc::ClientContext ctx;
         WithToken(&ctx);
         node::admin::RemovePartitionRequest r;
         r.set_partition("hot");
         node::admin::RemovePartitionResponse response;
         return Admin()->RemovePartition(&ctx, r, &response);
       },
       StatusCode::FAILED_PRECONDITION, "partition hot is running; stop it first"},
      // --- Admin port: invalid updates ---
      {"negative rate", "admin UpdatePartitionFlow, rate stage rate_per_second -5",
       [&] {
         node::flowctl::StageConfig stage;
         stage.mutable_rate()->set_rate_per_second(-5);
         return Flow(WithStage(stage));
       },
       StatusCode::INVALID_ARGUMENT, "interceptor."},
      {"stage without a kind", "admin UpdatePartitionFlow, stage {name: \"x\"}",
       [&] {
         node::flowctl::StageConfig stage;
         stage.set_name("x");
         return Flow(WithStage(stage));
       },
       StatusCode::INVALID_ARGUMENT, "interceptor."},
      {"unknown gate predicate", "admin UpdatePartitionFlow, gate {predicate: \"nope\"}",
       [&] {
         node::flowctl::StageConfig stage;
         stage.mutable_gate()->set_predicate("nope");
         return Flow(WithStage(stage));
       },
       StatusCode::INVALID_ARGUMENT, "nope"},
      {"empty stage list", "admin UpdatePartitionFlow, interceptor {}",
       [&] {
         node::admin::UpdatePartitionFlowRequest r;
         r.set_partition("steady");
         r.mutable_interceptor();
         return Flow(r);
       },
       StatusCode::INVALID_ARGUMENT, "interceptor.stages: must list at least one stage"},
      {"negative lane weight", "admin UpdatePartitionFlow, lane_weights.bulk -1",
       [&] { return Flow(WithLaneWeight(-1)); }, StatusCode::INVALID_ARGUMENT,
       "partitions[steady].dispatcher.lane_weights.bulk: must be > 0, got -1"},
      {"NaN lane delay target", "admin UpdatePartitionFlow, adaptive_weights.consensus NaN",
       [&] {
         node::admin::UpdatePartitionFlowRequest r;
         r.set_partition("steady");
         auto* a = r.mutable_dispatcher()->mutable_adaptive_weights();
         a->set_enabled(true);
         a->mutable_consensus()->set_target_p99_ms(std::nan(""));
         return Flow(r);
       },
       StatusCode::INVALID_ARGUMENT,
       "partitions[steady].dispatcher.adaptive_weights.consensus.target_p99_ms: must be in [0, "
       "60000], got nan"},
      {"lane weight 0 keeps the current", "admin UpdatePartitionFlow, lane_weights.bulk 0",
       [&] {
         node::admin::UpdatePartitionFlowResponse response;
         grpc::Status s = Flow(WithLaneWeight(0), &response);
         // 0 is "keep": the effective bulk weight stays the configured default (> 0).
         EXPECT_GT(response.effective().dispatcher().lane_weights().bulk(), 0);
         return s;
       },
       StatusCode::OK, ""},
      {"flow update, unknown partition", "admin UpdatePartitionFlow, partition \"nope\"",
       [&] {
         node::admin::UpdatePartitionFlowRequest r = WithLaneWeight(2);
         r.set_partition("nope");
         return Flow(r);
       },
       StatusCode::NOT_FOUND, "nope"},
      {"arbiter weight 0", "admin UpdateArbiter, steady weight 0",
       [&] {
         return Arbiter({{"steady", 0, 0, 1}});
       },
       StatusCode::INVALID_ARGUMENT, ".share.weight: must be > 0, got 0"},
      {"ceiling below guarantee", "admin UpdateArbiter, guarantee 0.5 ceiling 0.3",
       [&] {
         return Arbiter({{"steady", 1, 0.5, 0.3}});
       },
       StatusCode::INVALID_ARGUMENT,
       "partitions[steady].share.ceiling_fraction: must be >= guarantee_fraction (0.5), got 0.3"},
      {"hard ceiling without a ceiling", "admin UpdateArbiter, hard_ceiling with ceiling 1",
       [&] {
         node::admin::UpdateArbiterRequest request;
         auto* e = request.add_entries();
         e->set_partition("steady");
         e->mutable_share()->set_weight(1);
         e->mutable_share()->set_ceiling_fraction(1);
         e->mutable_share()->set_hard_ceiling(true);
         return SendArbiter(request);
       },
       StatusCode::INVALID_ARGUMENT,
       "partitions[steady].share.hard_ceiling: needs a ceiling_fraction in (0, 1), got 1"},
      {"guarantees sum over 1", "admin UpdateArbiter, hot 0.6 + steady 0.6",
       [&] {
         return Arbiter({{"hot", 1, 0.6, 1}, {"steady", 1, 0.6, 1}});
       },
       StatusCode::INVALID_ARGUMENT, "guarantee"},
      {"arbiter, unknown partition", "admin UpdateArbiter, partition \"nope\"",
       [&] {
         return Arbiter({{"nope", 1, 0, 1}});
       },
       StatusCode::NOT_FOUND, "nope"},
      {"arbiter, no entries", "admin UpdateArbiter, entries []", [&] { return Arbiter({}); },
       StatusCode::INVALID_ARGUMENT, "entries: give at least one partition"},
      {"arbiter, too many workers", "admin UpdateArbiter, cpu_workers 2000",
       [&] { return Arbiter({}, 2000); }, StatusCode::INVALID_ARGUMENT,
       "cpu_workers: must be in [1, 1024], got 2000"},
      {"arbiter, block budget too large", "admin UpdateArbiter, consensus_blocks_per_second 200000",
       [&] {
         node::admin::UpdateArbiterRequest request;
         request.set_consensus_blocks_per_second(200000);
         return SendArbiter(request);
       },
       StatusCode::INVALID_ARGUMENT,
       "consensus_blocks_per_second: must be in [0, 100000], got 200000"},
      {"arbiter, ledger write buffers too small",
       "admin UpdateArbiter, ledger_write_buffer_bytes 1000",
       [&] {
         node::admin::UpdateArbiterRequest request;
         request.set_ledger_write_buffer_bytes(1000);
         return SendArbiter(request);
       },
       StatusCode::INVALID_ARGUMENT,
       "ledger_write_buffer_bytes: must be 0 (unchanged) or >= 4194304, got 1000"},
      {"watch interval too small", "admin WatchFlowStats, interval_ms 50",
       [&] {
         grpc::ClientContext ctx;
         WithToken(&ctx);
         node::admin::WatchFlowStatsRequest r;
         r.set_interval_ms(50);
         auto reader = Admin()->WatchFlowStats(&ctx, r);
         node::admin::FlowStats stats;
         while (reader->Read(&stats)) {
         }
         return reader->Finish();
       },
       StatusCode::INVALID_ARGUMENT, "interval_ms: must be in 100..60000, got 50"},
      // --- P2P port ---
      {"peer with an unknown key", "p2p Connect, ClientHello from a fresh key",
       [&] { return RawPeerStream({HelloFrom('U', true)}); }, StatusCode::PERMISSION_DENIED,
       "is not in the configured peer set"},
      {"peer id not matching its key", "p2p Connect, ClientHello with a made-up node_id",
       [&] { return RawPeerStream({HelloFrom('U', false)}); }, StatusCode::PERMISSION_DENIED,
       "does not match its public key"},
      {"frames before the handshake", "p2p Connect, FrameBatch as first message",
       [&] {
         node::p2p::StreamMessage msg;
         auto* f = msg.mutable_frames()->add_frames();
         f->mutable_header()->set_partition(1);
         f->mutable_header()->set_channel(node::p2p::CONSENSUS);
         f->set_payload("garbage");
         return RawPeerStream({msg.SerializeAsString()});
       },
       StatusCode::PERMISSION_DENIED, "expected ClientHello"},
      {"malformed ClientHello", "p2p Connect, ClientHello with a 5-byte public_key",
       [&] {
         node::p2p::StreamMessage msg;
         msg.ParseFromString(HelloFrom('U', true));
         msg.mutable_client_hello()->set_public_key("short");
         return RawPeerStream({msg.SerializeAsString()});
       },
       StatusCode::PERMISSION_DENIED, "malformed handshake: public_key must be 32 bytes, got 5"},
      {"ClientHello with a 1 MiB node_id", "p2p Connect, node_id of 1 MiB (kept out of the log)",
       [&] {
         node::p2p::StreamMessage msg;
         msg.ParseFromString(HelloFrom('U', true));
         msg.mutable_client_hello()->set_node_id(std::string(1 << 20, 'a'));
         return RawPeerStream({msg.SerializeAsString()});
       },
       StatusCode::PERMISSION_DENIED,
       "malformed handshake: node_id must be 32 lowercase hex characters, got 1048576 bytes"},
      {"garbage frame bytes", "p2p Connect, raw bytes 0xff.. as a StreamMessage",
       [&] { return RawPeerStream({std::string("\xff\xff\xff\xff\x0f garbage", 14)}); },
       StatusCode::CANCELLED, "no handshake: the stream closed or its first message did not parse"},
      {"empty peer stream", "p2p Connect, half-closed at once", [&] { return RawPeerStream({}); },
       StatusCode::CANCELLED, "no handshake"},
  };

  std::string table = "| case | how sent | status code | message |\n|---|---|---|---|\n";
  std::string issues;
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const grpc::Status status = row.call();
    EXPECT_EQ(status.error_code(), row.code)
        << row.name << ": got " << CodeName(status.error_code()) << " '" << status.error_message()
        << "'";
    EXPECT_THAT(status.error_message(), ::testing::HasSubstr(row.message)) << row.name;
    if (row.code != StatusCode::OK && row.known_issue.empty()) {
      EXPECT_FALSE(status.error_message().empty()) << row.name << ": no message";
    }
    std::string message = status.error_message();
    if (message.size() > 140) message = message.substr(0, 137) + "...";
    absl::StrAppend(&table, "| ", row.name, " | ", row.how, " | ", CodeName(status.error_code()),
                    " | ", absl::StrReplaceAll(message, {{"|", "\\|"}, {"\n", " "}}),
                    row.known_issue.empty() ? "" : " (*)", " |\n");
    if (!row.known_issue.empty()) {
      absl::StrAppend(&issues, "(*) ", row.name, ": ", row.known_issue, "\n");
    }
  }
  std::cout << "\n" << table << "\n" << issues << std::endl;

  // The node is still serving on every partition...
  for (const char* name : {"hot", "steady", "cold"}) {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::GetChainStatusRequest r;
    *r.mutable_partition() = Ref(name);
    node::client::GetChainStatusResponse response;
    ASSERT_TRUE(Client()->GetChainStatus(&ctx, r, &response).ok()) << name;
    EXPECT_EQ(response.consensus_state(), "NORMAL") << name;
  }
  // ... the transaction committed before the table is still committed ...
  {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::GetTxRequest r;
    *r.mutable_partition() = Ref("hot");
    r.set_tx_hash(committed_hash);
    node::client::GetTxResponse response;
    ASSERT_TRUE(Client()->GetTx(&ctx, r, &response).ok());
    EXPECT_EQ(response.state(), node::client::GetTxResponse::COMMITTED);
  }
  // ... and it still commits new transactions.
  {
    grpc::ClientContext ctx;
    node::client::SubmitTxResponse response;
    grpc::Status s = Submit("hot", SignedPut(1, 'R', 2, "after"), /*wait=*/true, &response, &ctx);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(response.has_receipt());
  }
}

}  // namespace
}  // namespace runtime::grpc_test
