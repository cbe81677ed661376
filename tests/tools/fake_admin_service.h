// An in-process AdminService for nodectl tests: canned responses, recorded requests.
//
// Thread-safe: gRPC server threads call the handlers while the test thread sets responses and
// reads what was recorded. Start() serves it on 127.0.0.1 with a kernel-chosen port.
//
//   FakeAdminService fake;
//   ASSERT_TRUE(fake.Start());
//   fake.SetStats(stats);
//   RunNodectl({"--admin", fake.address(), "stats"}, io);
//   EXPECT_EQ(fake.last_request("GetFlowStats"), "partition: \"hot\"");
#ifndef TESTS_TOOLS_FAKE_ADMIN_SERVICE_H_
#define TESTS_TOOLS_FAKE_ADMIN_SERVICE_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_context.h"
#include "proto/admin.grpc.pb.h"

namespace nodectl_test {

class FakeAdminService final : public node::admin::AdminService::Service {
 public:
  ~FakeAdminService() override { Stop(); }

  // Plaintext unless `credentials` are given (e.g. grpc::SslServerCredentials).
  bool Start(std::shared_ptr<grpc::ServerCredentials> credentials = nullptr) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(
        "127.0.0.1:0", credentials != nullptr ? credentials : grpc::InsecureServerCredentials(),
        &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return server_ != nullptr && port_ != 0;
  }
  void Stop() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.reset();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  // --- canned behaviour -------------------------------------------------------------------
  void SetError(grpc::Status s) {
    absl::MutexLock l(&mu_);
    error_ = std::move(s);
  }
  void SetStatus(node::admin::NodeStatus r) { Set(&status_, std::move(r)); }
  void SetPartitions(node::admin::ListPartitionsResponse r) { Set(&partitions_, std::move(r)); }
  void SetPeers(node::admin::ListPeersResponse r) { Set(&peers_, std::move(r)); }
  void SetStats(node::admin::FlowStats r) { Set(&stats_, std::move(r)); }
  void SetFlowResponse(node::admin::UpdatePartitionFlowResponse r) { Set(&flow_, std::move(r)); }
  void SetEgressResponse(node::admin::UpdateEgressResponse r) { Set(&egress_, std::move(r)); }
  void SetArbiterResponse(node::admin::UpdateArbiterResponse r) { Set(&arbiter_, std::move(r)); }
  // Watch: send this many updates (unix_millis = 1, 2, ...) and then, if `hold`, keep the
  // stream open until the client cancels (bounded to ~10 s); else end it with OK.
  void SetWatch(int updates, bool hold) {
    absl::MutexLock l(&mu_);
    watch_updates_ = updates;
    watch_hold_ = hold;
  }
  // Notified once a held watch has sent all its updates.
  absl::Notification& watch_holding() { return watch_holding_; }

  // --- recorded -----------------------------------------------------------------------------
  int calls() const {
    absl::MutexLock l(&mu_);
    return static_cast<int>(methods_.size());
  }
  std::vector<std::string> methods() const {
    absl::MutexLock l(&mu_);
    return methods_;
  }
  // The last request of `method`, as short text format ("" if none or empty).
  std::string last_request(const std::string& method) const {
    absl::MutexLock l(&mu_);
    auto it = requests_.find(method);
    return it == requests_.end() ? "<none>" : it->second;
  }
  std::string last_authorization() const {
    absl::MutexLock l(&mu_);
    return authorization_;
  }
  int watch_sent() const {
    absl::MutexLock l(&mu_);
    return watch_sent_;
  }

  // --- AdminService -------------------------------------------------------------------------
  grpc::Status GetNodeStatus(grpc::ServerContext* c, const node::admin::GetNodeStatusRequest* r,
                             node::admin::NodeStatus* out) override {
    return Handle("GetNodeStatus", c, *r, status_, out);
  }
  grpc::Status ListPartitions(grpc::ServerContext* c, const node::admin::ListPartitionsRequest* r,
                              node::admin::ListPartitionsResponse* out) override {
    return Handle("ListPartitions", c, *r, partitions_, out);
  }
  grpc::Status ListPeers(grpc::ServerContext* c, const node::admin::ListPeersRequest* r,
                         node::admin::ListPeersResponse* out) override {
    return Handle("ListPeers", c, *r, peers_, out);
  }
  grpc::Status GetFlowStats(grpc::ServerContext* c, const node::admin::GetFlowStatsRequest* r,
                            node::admin::FlowStats* out) override {
    return Handle("GetFlowStats", c, *r, stats_, out);
  }
  grpc::Status UpdatePartitionFlow(grpc::ServerContext* c,
                                   const node::admin::UpdatePartitionFlowRequest* r,
                                   node::admin::UpdatePartitionFlowResponse* out) override {
    return Handle("UpdatePartitionFlow", c, *r, flow_, out);
  }
  grpc::Status UpdateEgress(grpc::ServerContext* c, const node::admin::UpdateEgressRequest* r,
                            node::admin::UpdateEgressResponse* out) override {
    return Handle("UpdateEgress", c, *r, egress_, out);
  }
  grpc::Status UpdateArbiter(grpc::ServerContext* c, const node::admin::UpdateArbiterRequest* r,
                             node::admin::UpdateArbiterResponse* out) override {
    return Handle("UpdateArbiter", c, *r, arbiter_, out);
  }
  grpc::Status PausePartition(grpc::ServerContext* c, const node::admin::PausePartitionRequest* r,
                              node::admin::PausePartitionResponse* out) override {
    return Handle("PausePartition", c, *r, node::admin::PausePartitionResponse(), out);
  }
  grpc::Status ResumePartition(grpc::ServerContext* c, const node::admin::ResumePartitionRequest* r,
                               node::admin::ResumePartitionResponse* out) override {
    return Handle("ResumePartition", c, *r, node::admin::ResumePartitionResponse(), out);
  }
  grpc::Status CreatePartition(grpc::ServerContext* c, const node::admin::CreatePartitionRequest* r,
                               node::admin::CreatePartitionResponse* out) override {
    node::admin::CreatePartitionResponse resp;
    resp.mutable_status()->set_id(r->config().id());
    resp.mutable_status()->set_name(r->config().name());
    resp.mutable_status()->set_consensus_state("NORMAL");
    return Handle("CreatePartition", c, *r, resp, out);
  }
  grpc::Status StopPartition(grpc::ServerContext* c, const node::admin::StopPartitionRequest* r,
                             node::admin::StopPartitionResponse* out) override {
    node::admin::StopPartitionResponse resp;
    resp.mutable_status()->set_id(7);
    resp.mutable_status()->set_name(r->partition());
    resp.mutable_status()->set_consensus_state("STOPPED");
    return Handle("StopPartition", c, *r, resp, out);
  }
  grpc::Status StartPartition(grpc::ServerContext* c, const node::admin::StartPartitionRequest* r,
                              node::admin::StartPartitionResponse* out) override {
    node::admin::StartPartitionResponse resp;
    resp.mutable_status()->set_id(7);
    resp.mutable_status()->set_name(r->partition());
    resp.mutable_status()->set_consensus_state("NORMAL");
    resp.mutable_status()->set_height(12);
    return Handle("StartPartition", c, *r, resp, out);
  }
  grpc::Status RemovePartition(grpc::ServerContext* c, const node::admin::RemovePartitionRequest* r,
                               node::admin::RemovePartitionResponse* out) override {
    node::admin::RemovePartitionResponse resp;
    resp.set_data_dir("/data/partition-7");
    resp.set_data_deleted(r->delete_data());
    return Handle("RemovePartition", c, *r, resp, out);
  }
  grpc::Status WatchFlowStats(grpc::ServerContext* c, const node::admin::WatchFlowStatsRequest* r,
                              grpc::ServerWriter<node::admin::FlowStats>* writer) override {
    node::admin::FlowStats base;
    grpc::Status st = Handle("WatchFlowStats", c, *r, stats_, &base);
    if (!st.ok()) return st;
    int updates;
    bool hold;
    {
      absl::MutexLock l(&mu_);
      updates = watch_updates_;
      hold = watch_hold_;
    }
    for (int i = 1; i <= updates; ++i) {
      base.set_unix_millis(i);
      if (!writer->Write(base)) return grpc::Status::OK;  // the client cancelled
      absl::MutexLock l(&mu_);
      ++watch_sent_;
    }
    if (!hold) return grpc::Status::OK;
    watch_holding_.Notify();
    // The sync API has no blocking wait for cancellation; bounded check every 5 ms.
    for (int i = 0; i < 2000 && !c->IsCancelled(); ++i) absl::SleepFor(absl::Milliseconds(5));
    return grpc::Status::OK;
  }

 private:
  template <typename T>
  void Set(T* field, T value) {
    absl::MutexLock l(&mu_);
    *field = std::move(value);
  }

  template <typename Request, typename Response>
  grpc::Status Handle(const std::string& method, grpc::ServerContext* c, const Request& request,
                      const Response& canned, Response* out) {
    absl::MutexLock l(&mu_);
    methods_.push_back(method);
    std::string text;
    google::protobuf::TextFormat::Printer printer;
    printer.SetSingleLineMode(true);
    printer.PrintToString(request, &text);
    while (!text.empty() && text.back() == ' ') text.pop_back();
    requests_[method] = text;
    authorization_.clear();
    auto it = c->client_metadata().find("authorization");
    if (it != c->client_metadata().end()) {
      authorization_ = std::string(it->second.data(), it->second.size());
    }
    if (!error_.ok()) return error_;
    *out = canned;
    return grpc::Status::OK;
  }

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Notification watch_holding_;

  mutable absl::Mutex mu_;
  grpc::Status error_ ABSL_GUARDED_BY(mu_);
  node::admin::NodeStatus status_ ABSL_GUARDED_BY(mu_);
  node::admin::ListPartitionsResponse partitions_ ABSL_GUARDED_BY(mu_);
  node::admin::ListPeersResponse peers_ ABSL_GUARDED_BY(mu_);
  node::admin::FlowStats stats_ ABSL_GUARDED_BY(mu_);
  node::admin::UpdatePartitionFlowResponse flow_ ABSL_GUARDED_BY(mu_);
  node::admin::UpdateEgressResponse egress_ ABSL_GUARDED_BY(mu_);
  node::admin::UpdateArbiterResponse arbiter_ ABSL_GUARDED_BY(mu_);
  int watch_updates_ ABSL_GUARDED_BY(mu_) = 0;
  bool watch_hold_ ABSL_GUARDED_BY(mu_) = false;
  int watch_sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> methods_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> requests_ ABSL_GUARDED_BY(mu_);
  std::string authorization_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nodectl_test

#endif  // TESTS_TOOLS_FAKE_ADMIN_SERVICE_H_
