#include "tools/loadgen_client.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/client_context.h"

namespace loadgen {
namespace {

constexpr int kSetupDeadlineMs = 3000;

// A setup read refused as RESOURCE_EXHAUSTED (a node's read chain) is sent again after the
// node's retry-after-ms (100 ms without one, at most 5 s), for up to this long.
constexpr int kSetupRetryMs = 30'000;

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(kSetupDeadlineMs));
}

// `call(ctx, &response)` with a fresh context per attempt, retried as kSetupRetryMs says.
template <typename Response, typename Call>
grpc::Status WithRetry(Response* response, Call call) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(kSetupRetryMs);
  for (;;) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = call(&ctx, response);
    if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED ||
        std::chrono::steady_clock::now() >= give_up) {
      return s;
    }
    int64_t wait_ms = 100;
    const auto& md = ctx.GetServerTrailingMetadata();
    if (auto it = md.find("retry-after-ms"); it != md.end()) {
      int64_t v = 0;
      if (absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &v) && v > 0) {
        wait_ms = std::min<int64_t>(v, 5000);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }
}

}  // namespace

absl::StatusOr<ChainInfo> ResolvePartition(
    const std::vector<std::unique_ptr<node::client::ClientService::Stub>>& stubs,
    const std::vector<std::string>& targets, const std::string& name) {
  ChainInfo info;
  for (size_t t = 0; t < stubs.size(); ++t) {
    node::client::GetChainStatusRequest req;
    req.mutable_partition()->set_name(name);
    node::client::GetChainStatusResponse resp;
    grpc::Status s = WithRetry(&resp, [&](grpc::ClientContext* ctx, auto* out) {
      return stubs[t]->GetChainStatus(ctx, req, out);
    });
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat("target ", targets[t], ": partition '", name,
                                                 "': ", s.error_message(), " (code ",
                                                 static_cast<int>(s.error_code()), ")"));
    }
    if (t == 0) {
      info.id = resp.partition_id();
      info.height = resp.height();
    } else if (resp.partition_id() != info.id) {
      return absl::FailedPreconditionError(absl::StrCat("partition '", name, "' has id ", info.id,
                                                        " on ", targets[0], " but ",
                                                        resp.partition_id(), " on ", targets[t]));
    }
  }
  return info;
}

absl::StatusOr<std::vector<uint64_t>> ReadNextNonces(node::client::ClientService::Stub& stub,
                                                     const std::string& target,
                                                     uint32_t partition_id,
                                                     const std::vector<base::PrivateKey>& keys) {
  std::vector<uint64_t> next(keys.size(), 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    node::client::GetAccountRequest req;
    req.mutable_partition()->set_id(partition_id);
    req.set_address(keys[i].public_key().bytes());
    node::client::GetAccountResponse resp;
    grpc::Status s = WithRetry(
        &resp, [&](grpc::ClientContext* ctx, auto* out) { return stub.GetAccount(ctx, req, out); });
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) continue;  // never touched
    if (!s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("target ", target, ": GetAccount: ", s.error_message()));
    }
    next[i] = resp.account().nonce() + 1;
  }
  return next;
}

absl::StatusOr<std::map<std::string, uint64_t>> ReadViewChanges(
    node::admin::AdminService::Stub& stub, const std::string& address, const std::string& token) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  if (!token.empty()) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
  node::admin::GetNodeStatusRequest req;
  node::admin::NodeStatus resp;
  grpc::Status s = stub.GetNodeStatus(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("admin ", address, ": GetNodeStatus: ", s.error_message()));
  }
  std::map<std::string, uint64_t> out;
  for (const auto& ps : resp.partitions()) out[ps.name()] = ps.view_changes();
  return out;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("--admin-token-file: cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return std::string(absl::StripAsciiWhitespace(ss.str()));
}

}  // namespace loadgen
