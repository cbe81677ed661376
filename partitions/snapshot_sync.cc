#include "partitions/snapshot_sync.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "flowctl/status_macros.h"
#include "glog/logging.h"
#include "partitions/block.h"

namespace partitions {
namespace {

using ::node::partition::PartitionMessage;
using ::node::partition::SnapshotChunk;
using ::node::partition::SnapshotChunkInfo;
using ::node::partition::SnapshotManifest;
using ::node::partition::SnapshotProgress;
using ::node::partition::SnapshotRequest;

// The largest chunk a server reads for one request: a chunk is cut after the entry that makes
// it reach kSnapshotChunkBytes, so this leaves room for one large value.
constexpr size_t kMaxChunkReadBytes = 8 << 20;
// The most a server reads for one chunk, keys written after the asked height (skipped) included.
constexpr uint64_t kMaxChunkScanBytes = 64 << 20;

std::string TargetKey() { return absl::StrCat(kSnapshotMetaPrefix, "target"); }
std::string ChunkPrefix() { return absl::StrCat(kSnapshotMetaPrefix, "chunk/"); }
std::string ChunkDoneKey(uint32_t index) {
  std::string k = ChunkPrefix();
  for (int i = 3; i >= 0; --i) k.push_back(static_cast<char>((index >> (8 * i)) & 0xff));
  return k;
}

StateRoot ChunkLanes(const SnapshotChunkInfo& info) {
  std::optional<StateRoot> lanes = StateRoot::Parse(info.lanes());
  return lanes.value_or(StateRoot());
}

}  // namespace

// ---- Manifest and chunk checks ----

absl::StatusOr<SnapshotManifest> BuildSnapshotManifest(const Ledger& ledger, uint64_t seq,
                                                       uint64_t* scanned) {
  SnapshotManifest m;
  m.set_seq(seq);
  ASSIGN_OR_RETURN(*m.mutable_block(), ledger.GetBlock(seq));
  ASSIGN_OR_RETURN(std::vector<node::chain::Receipt> receipts, ledger.GetBlockReceipts(seq));
  for (auto& r : receipts) *m.add_receipts() = std::move(r);
  SnapshotChunkInfo* open = nullptr;
  StateRoot lanes;
  auto close = [&] {
    if (open != nullptr) open->set_lanes(lanes.Serialize());
    open = nullptr;
    lanes = StateRoot();
  };
  RETURN_IF_ERROR(ledger.ScanStateAt(
      seq, "",
      [&](absl::string_view key, absl::string_view value) {
        if (open == nullptr) {
          open = m.add_chunks();
          open->set_first_key(std::string(key));
        }
        open->set_entries(open->entries() + 1);
        open->set_bytes(open->bytes() + key.size() + value.size());
        lanes.Add(key, value);
        if (open->bytes() >= kSnapshotChunkBytes || open->entries() >= kSnapshotChunkEntries)
          close();
        return true;
      },
      /*max_scanned=*/0, scanned));
  close();
  return m;
}

absl::Status ValidateSnapshotManifest(const SnapshotManifest& m, const SnapshotTarget& target,
                                      uint32_t partition) {
  const node::chain::Block& block = m.block();
  const node::chain::BlockHeader& h = block.header();
  if (m.seq() != target.seq || h.height() != target.seq) {
    return absl::InvalidArgumentError(absl::StrCat("manifest of seq ", m.seq(), " with block ",
                                                   h.height(), ", not ", target.seq));
  }
  if (h.partition() != partition) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest block is for partition ", h.partition()));
  }
  if (h.state_root() != target.state_root) {
    return absl::InvalidArgumentError("manifest block's state root is not the agreed one");
  }
  const int n = block.tx_hashes_size();
  if (h.tx_count() != static_cast<uint32_t>(n) || block.txs_size() != n || m.receipts_size() != n ||
      h.tx_root() != TxRoot(block.tx_hashes())) {
    return absl::InvalidArgumentError(
        "manifest block's txs, bodies, receipts and tx root do not agree");
  }
  StateRoot sum;
  for (int i = 0; i < m.chunks_size(); ++i) {
    const SnapshotChunkInfo& c = m.chunks(i);
    if (c.entries() == 0 || c.entries() > kSnapshotChunkEntries) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest chunk ", i, " has ", c.entries(), " entries"));
    }
    if (i > 0 && c.first_key() <= m.chunks(i - 1).first_key()) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest chunk ", i, " does not start after chunk ", i - 1));
    }
    std::optional<StateRoot> lanes = StateRoot::Parse(c.lanes());
    if (!lanes.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest chunk ", i, " lanes are ", c.lanes().size(), " bytes"));
    }
    sum.Merge(*lanes);
  }
  if (sum.Root() != target.state_root) {
    return absl::InvalidArgumentError("manifest chunks do not sum to the agreed state root");
  }
  return absl::OkStatus();
}

absl::Status ValidateSnapshotChunk(const SnapshotChunk& chunk, const SnapshotManifest& manifest) {
  if (chunk.chunk() >= static_cast<uint32_t>(manifest.chunks_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", chunk.chunk(), " is not in the manifest"));
  }
  const int index = static_cast<int>(chunk.chunk());
  const SnapshotChunkInfo& info = manifest.chunks(index);
  if (chunk.keys_size() != static_cast<int>(info.entries()) ||
      chunk.values_size() != chunk.keys_size()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", index, ": ", chunk.keys_size(),
                                                   " keys and ", chunk.values_size(),
                                                   " values, the manifest says ", info.entries()));
  }
  if (chunk.keys(0) != info.first_key()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", index, " starts at another key"));
  }
  for (int i = 1; i < chunk.keys_size(); ++i) {
    if (chunk.keys(i) <= chunk.keys(i - 1)) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", index, ": keys out of order"));
    }
  }
  if (index + 1 < manifest.chunks_size() &&
      chunk.keys(chunk.keys_size() - 1) >= manifest.chunks(index + 1).first_key()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", index, " runs into chunk ", index + 1));
  }
  StateRoot lanes;
  for (int i = 0; i < chunk.keys_size(); ++i) lanes.Add(chunk.keys(i), chunk.values(i));
  if (!(lanes == ChunkLanes(info))) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", index, " does not hash to its manifest entry"));
  }
  return absl::OkStatus();
}

// ---- SnapshotServer ----

SnapshotServer::SnapshotServer(const Ledger* ledger, const flowctl::Clock* clock, Options options)
    : ledger_(ledger), clock_(clock), options_(options) {}

flowctl::TokenBucket& SnapshotServer::BudgetOf(uint32_t peer) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<flowctl::TokenBucket>& b = budgets_[peer];
  if (b == nullptr) {
    b = std::make_unique<flowctl::TokenBucket>(options_.serve_bytes_per_second,
                                               options_.serve_bytes_per_second, clock_);
  }
  return *b;
}

PartitionMessage SnapshotServer::Answer(uint32_t from, const SnapshotRequest& request) {
  flowctl::TokenBucket& budget = BudgetOf(from);
  PartitionMessage reply;
  if (request.manifest()) {
    *reply.mutable_snapshot_manifest() = Manifest(budget, request.seq());
  } else {
    *reply.mutable_snapshot_chunk() = Chunk(budget, request);
  }
  return reply;
}

SnapshotManifest SnapshotServer::Manifest(flowctl::TokenBucket& budget, uint64_t seq) {
  SnapshotManifest refused;
  refused.set_seq(seq);
  // The cost of a manifest is known only once built: serve while the peer's budget is not in
  // debt, then charge what was read (or, cached, what is sent).
  if (budget.Available() <= 0) {
    refused.set_refused("busy: over the snapshot serving budget");
    absl::MutexLock lock(&mu_);
    ++stats_.refused;
    return refused;
  }
  {
    absl::MutexLock lock(&mu_);
    if (cached_.has_value() && cached_->seq() == seq) {
      ++stats_.manifests;
      budget.Consume(static_cast<double>(cached_->ByteSizeLong()));
      return *cached_;
    }
  }
  uint64_t scanned = 0;
  absl::StatusOr<SnapshotManifest> m = BuildSnapshotManifest(*ledger_, seq, &scanned);
  budget.Consume(static_cast<double>(scanned));
  absl::MutexLock lock(&mu_);
  if (!m.ok()) {
    refused.set_refused(std::string(m.status().message()));
    ++stats_.refused;
    return refused;
  }
  ++stats_.manifests;
  cached_ = *m;
  return *std::move(m);
}

SnapshotChunk SnapshotServer::Chunk(flowctl::TokenBucket& budget, const SnapshotRequest& request) {
  SnapshotChunk chunk;
  chunk.set_seq(request.seq());
  chunk.set_chunk(request.chunk());
  auto refuse = [&](std::string why) {
    chunk.clear_keys();
    chunk.clear_values();
    chunk.set_refused(std::move(why));
    absl::MutexLock lock(&mu_);
    ++stats_.refused;
    return chunk;
  };
  if (request.entries() == 0 || request.entries() > kSnapshotChunkEntries) {
    return refuse(absl::StrCat("a chunk holds 1 to ", kSnapshotChunkEntries, " entries"));
  }
  if (budget.Available() <= 0) return refuse("busy: over the snapshot serving budget");
  size_t bytes = 0;
  uint64_t scanned = 0;
  absl::Status s = ledger_->ScanStateAt(
      request.seq(), request.first_key(),
      [&](absl::string_view key, absl::string_view value) {
        chunk.add_keys(std::string(key));
        chunk.add_values(std::string(value));
        bytes += key.size() + value.size();
        return chunk.keys_size() < static_cast<int>(request.entries()) &&
               bytes < kMaxChunkReadBytes;
      },
      kMaxChunkScanBytes, &scanned);
  budget.Consume(static_cast<double>(scanned));
  if (!s.ok()) return refuse(std::string(s.message()));
  if (chunk.keys_size() < static_cast<int>(request.entries()) && scanned >= kMaxChunkScanBytes) {
    return refuse("too many keys written after that height: ask for a newer snapshot");
  }
  absl::MutexLock lock(&mu_);
  ++stats_.chunks;
  stats_.bytes += bytes;
  return chunk;
}

SnapshotServer::Stats SnapshotServer::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

// ---- SnapshotFetcher ----

SnapshotFetcher::SnapshotFetcher(Ledger* ledger, Options options)
    : ledger_(ledger), options_(options) {}

absl::Status SnapshotFetcher::Start(const SnapshotTarget& target, int64_t now,
                                    std::vector<Send>* out) {
  if (target_.has_value() && *target_ == target) return absl::OkStatus();
  Abandon();
  stats_ = Stats{.seq = target.seq};
  // Resume what an earlier run (maybe before a restart) staged for this very target.
  SnapshotProgress progress;
  absl::StatusOr<std::string> stored = ledger_->GetConsensusMeta(TargetKey());
  if (!stored.ok() && !absl::IsNotFound(stored.status())) return stored.status();
  const bool resume =
      stored.ok() && progress.ParseFromString(*stored) && progress.seq() == target.seq &&
      progress.chain_digest() == target.chain_digest && progress.state_root() == target.state_root;
  target_ = target;
  last_progress_nanos_ = now;
  if (resume && progress.has_manifest()) {
    RETURN_IF_ERROR(
        ledger_->ScanConsensusMeta(ChunkPrefix(), [&](absl::string_view key, absl::string_view) {
          if (key.size() != 4) return;
          uint32_t index = 0;
          for (unsigned char c : key) index = (index << 8) | c;
          done_.insert(index);
        }));
    stats_.chunks_resumed = done_.size();
    RETURN_IF_ERROR(Adopt(progress.manifest()));
    LOG(INFO) << "snapshot of partition " << ledger_->partition() << " at " << target.seq
              << ": resuming with " << done_.size() << " of " << manifest_.chunks_size()
              << " chunks staged";
    FillChunkRequests(now, out);
    return absl::OkStatus();
  }
  if (!resume) {
    RETURN_IF_ERROR(ledger_->ClearStaged(kSnapshotMetaPrefix));
    RETURN_IF_ERROR(SaveProgress(nullptr));
  }
  for (uint32_t peer = 0; peer < options_.n; ++peer) {
    if (peer != options_.self) AskManifest(peer, now, out);
  }
  return absl::OkStatus();
}

absl::Status SnapshotFetcher::SaveProgress(const SnapshotManifest* manifest) {
  SnapshotProgress progress;
  progress.set_seq(target_->seq);
  progress.set_chain_digest(target_->chain_digest);
  progress.set_state_root(target_->state_root);
  if (manifest != nullptr) *progress.mutable_manifest() = *manifest;
  return ledger_->StageState({}, {{TargetKey(), progress.SerializeAsString()}});
}

void SnapshotFetcher::AskManifest(uint32_t peer, int64_t now, std::vector<Send>* out) {
  Send s;
  s.to = peer;
  SnapshotRequest* req = s.msg.mutable_snapshot_request();
  req->set_seq(target_->seq);
  req->set_manifest(true);
  out->push_back(std::move(s));
  manifest_asked_[peer] = now;
}

absl::Status SnapshotFetcher::OnManifest(uint32_t from, const SnapshotManifest& manifest,
                                         int64_t now, std::vector<Send>* out) {
  if (!target_.has_value() || phase_ != Phase::kManifest || manifest.seq() != target_->seq ||
      manifest_asked_.count(from) == 0 || !manifest_answered_.insert(from).second) {
    return absl::OkStatus();
  }
  if (!manifest.refused().empty()) {
    ++stats_.refusals;
    manifest_answered_.erase(from);  // asked again on the retry tick
    return absl::OkStatus();
  }
  if (absl::Status v = ValidateSnapshotManifest(manifest, *target_, ledger_->partition());
      !v.ok()) {
    ++stats_.bad_manifests;
    bad_peers_.insert(from);
    LOG(WARNING) << "snapshot of partition " << ledger_->partition() << ": replica " << from
                 << " sent a bad manifest: " << v.message();
    return absl::OkStatus();
  }
  const std::string digest = base::Sha256Bytes(manifest.SerializeAsString());
  candidates_.emplace(digest, manifest);
  std::set<uint32_t>& voters = votes_[digest];
  voters.insert(from);
  const uint32_t f = (options_.n - 1) / 3;
  if (voters.size() < f + 1) return absl::OkStatus();
  RETURN_IF_ERROR(SaveProgress(&candidates_[digest]));
  RETURN_IF_ERROR(Adopt(candidates_[digest]));
  last_progress_nanos_ = now;
  FillChunkRequests(now, out);
  return absl::OkStatus();
}

absl::Status SnapshotFetcher::Adopt(const SnapshotManifest& manifest) {
  // Checked again: a resumed one comes from disk.
  RETURN_IF_ERROR(ValidateSnapshotManifest(manifest, *target_, ledger_->partition()));
  manifest_ = manifest;
  phase_ = Phase::kChunks;
  candidates_.clear();
  votes_.clear();
  manifest_asked_.clear();
  manifest_answered_.clear();
  stats_.chunks_total = static_cast<uint64_t>(manifest_.chunks_size());
  stats_.chunks_done = done_.size();
  return absl::OkStatus();
}

uint32_t SnapshotFetcher::NextPeer() {
  if (bad_peers_.size() + 1 >= options_.n) bad_peers_.clear();  // nobody left: try them again
  for (uint32_t tries = 0; tries < options_.n; ++tries) {
    const uint32_t peer = next_peer_++ % options_.n;
    if (peer != options_.self && bad_peers_.count(peer) == 0) return peer;
  }
  return (options_.self + 1) % options_.n;
}

void SnapshotFetcher::FillChunkRequests(int64_t now, std::vector<Send>* out) {
  if (options_.n < 2 || now < backoff_until_) return;
  for (int index = 0; index < manifest_.chunks_size() &&
                      in_flight_.size() < static_cast<size_t>(options_.max_in_flight);
       ++index) {
    const auto i = static_cast<uint32_t>(index);
    if (done_.count(i) > 0 || in_flight_.count(i) > 0) continue;
    const uint32_t peer = NextPeer();
    Send s;
    s.to = peer;
    SnapshotRequest* req = s.msg.mutable_snapshot_request();
    req->set_seq(target_->seq);
    req->set_chunk(i);
    req->set_first_key(manifest_.chunks(index).first_key());
    req->set_entries(manifest_.chunks(index).entries());
    out->push_back(std::move(s));
    in_flight_[i] = {.peer = peer, .sent_nanos = now};
  }
}

absl::Status SnapshotFetcher::OnChunk(uint32_t from, const SnapshotChunk& chunk, int64_t now,
                                      std::vector<Send>* out) {
  if (!target_.has_value() || phase_ != Phase::kChunks || chunk.seq() != target_->seq) {
    return absl::OkStatus();
  }
  auto it = in_flight_.find(chunk.chunk());
  if (it == in_flight_.end() || it->second.peer != from) return absl::OkStatus();
  in_flight_.erase(it);
  if (!chunk.refused().empty()) {
    // Busy (or cannot serve it): that chunk waits a while before it is asked of the next peer.
    ++stats_.refusals;
    backoff_until_ = now + options_.retry_nanos / 4;
  } else if (absl::Status v = ValidateSnapshotChunk(chunk, manifest_); !v.ok()) {
    ++stats_.bad_chunks;
    bad_peers_.insert(from);
    LOG(WARNING) << "snapshot of partition " << ledger_->partition() << ": replica " << from
                 << " sent a bad chunk, asking another: " << v.message();
  } else {
    std::vector<std::pair<std::string, std::string>> entries;
    entries.reserve(static_cast<size_t>(chunk.keys_size()));
    for (int i = 0; i < chunk.keys_size(); ++i) {
      entries.emplace_back(chunk.keys(i), chunk.values(i));
    }
    RETURN_IF_ERROR(ledger_->StageState(entries, {{ChunkDoneKey(chunk.chunk()), ""}}));
    done_.insert(chunk.chunk());
    last_progress_nanos_ = now;
    stats_.chunks_done = done_.size();
    stats_.bytes += manifest_.chunks(static_cast<int>(chunk.chunk())).bytes();
  }
  FillChunkRequests(now, out);
  return absl::OkStatus();
}

int64_t SnapshotFetcher::Tick(int64_t now, std::vector<Send>* out) {
  if (!target_.has_value()) return flowctl::TokenBucket::kNever;
  int64_t next = flowctl::TokenBucket::kNever;
  if (phase_ == Phase::kManifest) {
    // Ask again whoever has not answered, or refused (then forgotten), for a retry period.
    for (uint32_t peer = 0; peer < options_.n; ++peer) {
      if (peer == options_.self || manifest_answered_.count(peer) > 0) continue;
      auto it = manifest_asked_.find(peer);
      if (it == manifest_asked_.end() || now - it->second >= options_.retry_nanos) {
        if (it != manifest_asked_.end()) ++stats_.retries;
        AskManifest(peer, now, out);
      }
      next = std::min(next, manifest_asked_[peer] + options_.retry_nanos);
    }
    return next;
  }
  std::vector<uint32_t> late;
  for (const auto& [index, req] : in_flight_) {
    if (now - req.sent_nanos >= options_.retry_nanos) late.push_back(index);
  }
  for (uint32_t index : late) {
    in_flight_.erase(index);
    ++stats_.retries;
  }
  FillChunkRequests(now, out);
  for (const auto& [index, req] : in_flight_) {
    next = std::min(next, req.sent_nanos + options_.retry_nanos);
  }
  if (!complete() && now < backoff_until_) next = std::min(next, backoff_until_);
  return next;
}

bool SnapshotFetcher::complete() const {
  return target_.has_value() && phase_ == Phase::kChunks &&
         done_.size() == static_cast<size_t>(manifest_.chunks_size());
}

SnapshotFetcher::Stats SnapshotFetcher::stats() const { return stats_; }

absl::StatusOr<StateRoot> SnapshotFetcher::Install(const ConsensusMetaWrites& meta) {
  CHECK(complete()) << "Install of an incomplete snapshot";
  StateRoot lanes;
  for (const SnapshotChunkInfo& c : manifest_.chunks()) lanes.Merge(ChunkLanes(c));
  std::vector<node::chain::Receipt> receipts(manifest_.receipts().begin(),
                                             manifest_.receipts().end());
  RETURN_IF_ERROR(
      ledger_->InstallStagedState(manifest_.block(), receipts, lanes, meta, kSnapshotMetaPrefix));
  Abandon();
  return lanes;
}

void SnapshotFetcher::Abandon() {
  target_.reset();
  phase_ = Phase::kManifest;
  candidates_.clear();
  votes_.clear();
  manifest_asked_.clear();
  manifest_answered_.clear();
  manifest_.Clear();
  done_.clear();
  in_flight_.clear();
  bad_peers_.clear();
  backoff_until_ = 0;
}

}  // namespace partitions
