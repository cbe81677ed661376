// What the peer links' synchronous reader cost against gRPC's callback API, for paced small
// messages (votes of many partitions reach a link a few ms apart, one stream message each). The
// model behind moving the links to the callback API (session 33; p2p/grpc_transport.h):
//   BM_PacedReceive/0/<interval_us>  the sync API: a handler thread blocked in Read(), as the
//                                    node's accepted peer links read before that (gRPC's polling
//                                    thread takes the socket event and hands the read over)
//   BM_PacedReceive/1/<interval_us>  the callback API: a ServerBidiReactor whose OnReadDone runs
//                                    on a gRPC callback thread (usually the one that took the
//                                    event)
//   BM_PacedReceive/2/<interval_us>  the node's link before, both ends: the sending thread hands
//                                    each frame to a writer thread (as a worker hands a vote to
//                                    PeerConnection's writer), which writes it on a sync stream;
//                                    a sync reader receives it
//   BM_PacedReceive/3/<interval_us>  the callback API at both ends: the sending thread starts the
//                                    write itself on a ClientBidiReactor when none is in flight
//                                    (OnWriteDone starts the next queued one); a callback reader,
//                                    as the node's links do now
// One 300-byte frame every interval over loopback, both ends in this process. Modes 0 and 1
// write from the pacing thread on a sync stream. Counters, per message: the process's CPU
// (getrusage utime + stime) and context switches (voluntary + involuntary), both ends together,
// the pacing thread's own sleeps included (the same in every mode).
//
//   build/tests/bench/bench_p2p_reader --benchmark_repetitions=3
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "proto/p2p.grpc.pb.h"
#include "tests/bench/bare_peer_stream.h"

namespace p2p {
namespace {

using node::p2p::StreamMessage;

constexpr int kMessagesPerIteration = 2000;
constexpr size_t kFrameBytes = 300;

class CallbackCounting final : public node::p2p::PeerService::CallbackService {
 public:
  grpc::ServerBidiReactor<StreamMessage, StreamMessage>* Connect(
      grpc::CallbackServerContext*) override {
    return new Reader(this);
  }
  std::atomic<int64_t> frames{0};

 private:
  class Reader final : public grpc::ServerBidiReactor<StreamMessage, StreamMessage> {
   public:
    explicit Reader(CallbackCounting* s) : s_(s) { StartRead(&m_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      s_->frames.fetch_add(m_.frames().frames_size(), std::memory_order_release);
      StartRead(&m_);
    }
    void OnDone() override { delete this; }

   private:
    CallbackCounting* const s_;
    StreamMessage m_;
  };
};

// Mode 2's sender: frames handed to a writer thread that writes them on a sync stream.
class ThreadWriter {
 public:
  explicit ThreadWriter(grpc::ClientReaderWriter<StreamMessage, StreamMessage>* stream)
      : stream_(stream), thread_([this] { Loop(); }) {}
  ~ThreadWriter() {
    {
      absl::MutexLock l(&mu_);
      done_ = true;
    }
    thread_.join();
  }
  void Push(const StreamMessage& m) {
    absl::MutexLock l(&mu_);
    queue_.push_back(m);
  }

 private:
  void Loop() {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ || !queue_.empty(); };
    for (;;) {
      StreamMessage m;
      {
        absl::MutexLock l(&mu_);
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;
        m = std::move(queue_.front());
        queue_.pop_front();
      }
      CHECK(stream_->Write(m));
    }
  }
  grpc::ClientReaderWriter<StreamMessage, StreamMessage>* const stream_;
  absl::Mutex mu_;
  std::deque<StreamMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Mode 3's sender: a client reactor; the caller starts a write when none is in flight.
class ReactorWriter final : public grpc::ClientBidiReactor<StreamMessage, StreamMessage> {
 public:
  explicit ReactorWriter(node::p2p::PeerService::Stub* stub) {
    stub->async()->Connect(&ctx_, this);
    AddHold();  // writes are started from outside the reactor's callbacks
    StartCall();
  }
  ~ReactorWriter() override { CHECK(done_.HasBeenNotified()) << "destroyed before Close()"; }
  void Push(const StreamMessage& m) {
    bool start = false;
    {
      absl::MutexLock l(&mu_);
      queue_.push_back(m);
      if (!in_flight_) {
        TakeNextLocked();
        start = true;
      }
    }
    if (start) StartWrite(&writing_);  // outside mu_: never under a lock a reaction takes
  }
  void Close() {
    {
      absl::MutexLock l(&mu_);
      auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !in_flight_; };
      mu_.Await(absl::Condition(&idle));
    }
    StartWritesDone();
    RemoveHold();
    done_.WaitForNotification();
  }
  void OnWriteDone(bool ok) override {
    CHECK(ok);
    bool start = false;
    {
      absl::MutexLock l(&mu_);
      in_flight_ = false;
      if (!queue_.empty()) {
        TakeNextLocked();
        start = true;
      }
    }
    if (start) StartWrite(&writing_);
  }
  void OnDone(const grpc::Status& s) override {
    CHECK(s.ok()) << s.error_message();
    done_.Notify();
  }

 private:
  // Moves the next queued frame into writing_ (untouched until its OnWriteDone) and marks a
  // write in flight; the caller starts it after unlocking.
  void TakeNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = std::move(queue_.front());
    queue_.pop_front();
    in_flight_ = true;
  }
  grpc::ClientContext ctx_;
  absl::Mutex mu_;
  std::deque<StreamMessage> queue_ ABSL_GUARDED_BY(mu_);
  StreamMessage writing_;  // written under mu_ while no write is in flight; read by gRPC after
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification done_;
};

struct Usage {
  double cpu_s;
  int64_t switches;
};

Usage ProcessUsage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
              static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6,
          u.ru_nvcsw + u.ru_nivcsw};
}

void BM_PacedReceive(benchmark::State& state) {
  const int64_t mode = state.range(0);
  const bool callback = mode == 1 || mode == 3;
  const absl::Duration interval = absl::Microseconds(state.range(1));
  bench::CountingService sync_service;
  CallbackCounting callback_service;
  std::atomic<int64_t>& frames = callback ? callback_service.frames : sync_service.frames;
  bench::LoopbackPeerServer loop(callback ? static_cast<grpc::Service*>(&callback_service)
                                          : &sync_service);
  node::p2p::PeerService::Stub* const stub = loop.stub.get();
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<StreamMessage, StreamMessage>> stream;
  std::unique_ptr<ThreadWriter> thread_writer;
  std::unique_ptr<ReactorWriter> reactor_writer;
  if (mode == 3) {
    reactor_writer = std::make_unique<ReactorWriter>(stub);
  } else {
    stream = stub->Connect(&ctx);
    if (mode == 2) thread_writer = std::make_unique<ThreadWriter>(stream.get());
  }
  auto send = [&](const StreamMessage& m) {
    if (reactor_writer != nullptr) {
      reactor_writer->Push(m);
    } else if (thread_writer != nullptr) {
      thread_writer->Push(m);
    } else {
      CHECK(stream->Write(m));
    }
  };
  StreamMessage msg;
  node::p2p::Frame* f = msg.mutable_frames()->add_frames();
  f->mutable_header()->set_partition(1);
  f->mutable_header()->set_channel(node::p2p::CONSENSUS);
  f->mutable_header()->set_length(kFrameBytes);
  f->mutable_header()->set_chunk_count(1);
  f->set_payload(std::string(kFrameBytes, 'v'));
  // One frame before the clock starts, so every mode's connection is set up outside the timing.
  int64_t sent = 1;
  send(msg);
  const absl::Time warm_deadline = absl::Now() + absl::Seconds(30);
  while (frames.load(std::memory_order_acquire) < 1) {
    CHECK(absl::Now() < warm_deadline) << "no connection";
    absl::SleepFor(absl::Milliseconds(1));
  }
  int64_t timed = 0;
  double cpu_s = 0;
  int64_t switches = 0;
  for (auto _ : state) {
    const Usage before = ProcessUsage();
    absl::Time next = absl::Now();
    for (int i = 0; i < kMessagesPerIteration; ++i) {
      next += interval;
      absl::SleepFor(next - absl::Now());  // negative: at once
      f->mutable_header()->set_message_id(static_cast<uint64_t>(sent));
      send(msg);
      ++sent;
      ++timed;
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (frames.load(std::memory_order_acquire) < sent) {
      CHECK(absl::Now() < deadline) << "frames lost: " << frames.load() << " of " << sent;
      absl::SleepFor(absl::Microseconds(100));
    }
    const Usage after = ProcessUsage();
    cpu_s += after.cpu_s - before.cpu_s;
    switches += after.switches - before.switches;
  }
  state.counters["cpu_us_per_msg"] = cpu_s * 1e6 / static_cast<double>(timed);
  state.counters["switches_per_msg"] = static_cast<double>(switches) / static_cast<double>(timed);
  if (reactor_writer != nullptr) {
    reactor_writer->Close();
  } else {
    thread_writer.reset();
    stream->WritesDone();
    const grpc::Status st = stream->Finish();
    CHECK(st.ok()) << st.error_message();
  }
  loop.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}
BENCHMARK(BM_PacedReceive)
    ->ArgsProduct({{0, 1, 2, 3}, {500, 2000}})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace p2p
