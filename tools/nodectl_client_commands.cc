#include "tools/nodectl_client_commands.h"

#include <memory>

#include "proto/client.grpc.pb.h"
#include "tools/nodectl_format.h"
#include "tools/nodectl_requests.h"

namespace nodectl {

int RunWatchCommits(Context& ctx, const ParsedFlags& f) {
  absl::StatusOr<node::client::WatchCommitsRequest> req = BuildWatchCommitsRequest(f);
  absl::StatusOr<uint64_t> count = CountFlag(f);
  if (!req.ok()) return UsageError(ctx.command(), req.status(), ctx.err());
  if (!count.ok()) return UsageError(ctx.command(), count.status(), ctx.err());

  grpc::ClientContext context;
  ctx.Prepare(&context, /*with_deadline=*/false, /*admin=*/false);
  if (ctx.canceller() != nullptr && !ctx.canceller()->Attach(&context)) return kExitOk;
  std::unique_ptr<grpc::ClientReader<node::client::WatchCommitsResponse>> reader =
      ctx.ClientStub().WatchCommits(&context, *req);
  const bool receipts = req->include_receipts();
  if (!ctx.json()) PrintCommitHeader(receipts, ctx.out());
  return ReadStream<node::client::WatchCommitsResponse>(
      ctx, context, *reader, *count,
      [&](const node::client::WatchCommitsResponse& block, uint64_t) {
        if (ctx.json()) {
          ctx.out() << ToJson(block, /*pretty=*/false);
        } else {
          PrintCommitLine(block, receipts, ctx.out());
        }
      });
}

int RunGetValue(Context& ctx, const ParsedFlags& f) {
  absl::StatusOr<node::client::GetValueRequest> req = BuildGetValueRequest(f);
  if (!req.ok()) return UsageError(ctx.command(), req.status(), ctx.err());
  return ctx
      .UnaryOn<ClientService::Stub, node::client::GetValueRequest, node::client::GetValueResponse>(
          ctx.ClientStub(), &ClientService::Stub::GetValue, *req,
          [&](const node::client::GetValueResponse& r) { PrintValue(*req, r, ctx.out()); },
          /*admin=*/false);
}

}  // namespace nodectl
