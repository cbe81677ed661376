// RunLoadgen: one whole loadgen run (flags -> setup -> open-loop offers -> drain -> report).
//
// Setup: resolves every partition by name with GetChainStatus on every target (its id and start
// height; any failure = unreachable, exit 1), derives the sender keys, reads each sender's nonce
// with GetAccount, pre-signs the buffers (tools/loadgen_txs.h explains the nonce bookkeeping),
// and reads view-change counters from --admin. Then the clock starts:
//   - the offer loop (calling thread) wakes every --batch-ms, computes each partition's due
//     offers from its Schedule and sends them as one async SubmitTxBatch (<= 1000 txs per RPC,
//     round-robin over targets). It never waits for answers; when a target already has
//     --max-in-flight RPCs outstanding the offers are counted as client_dropped instead.
//   - answers arrive on gRPC's callback threads: accepted / rejected-by-reason per tx; rejected
//     txs go back to their sender to be re-offered first. A rejection's retry-after hint
//     (TxResult.retry_after_ms, or the "retry-after-ms" trailer of a failed RPC) is kept with
//     the tx; with --honour-retry-after it also holds the tx's sender until answer time + hint
//     (tools/loadgen_txs.h), and offers due while all senders a batch could take from are held
//     count as held. Either way each re-offer of a hinted tx is scored as sent after or before
//     its hint, and accepted or not (tools/loadgen_stats.h, HintCounts): a run without the flag
//     is the baseline for how well the hints predict acceptance.
//   - a poller thread per partition calls GetChainStatus on every target every --poll-ms and
//     reads the new blocks (GetBlock, hashes only) from the one furthest ahead, so a lagging
//     replica hides nothing; a block's tx hashes that match sent txs give
//     commit latency = block observed - tx sent (the latest send, for a re-offered tx).
//   - a signer thread tops up pre-signed buffers that run low (counted as signed_during_run).
// After --duration, offers stop and the run waits up to --drain for outstanding RPCs and commits;
// every wait is bounded. Finally the summary, expectations and --out files.
//
// Output: per-second lines and the summary on `out`, progress and errors on `err`.
// Exit codes: 0 ok, 1 failed expectation / unreachable target / unwritable --out, 2 usage.
//
// Thread-safety: RunLoadgen may be called from any thread; runs share nothing.
//
//   int code = loadgen::RunLoadgen({"--targets", "127.0.0.1:50051", "--scenario", "a:rate=10",
//                                   "--duration", "2s"}, {.out = &std::cout, .err = &std::cerr});
#ifndef TOOLS_LOADGEN_RUNNER_H_
#define TOOLS_LOADGEN_RUNNER_H_

#include <atomic>
#include <ostream>
#include <string>
#include <vector>

namespace loadgen {

struct RunIo {
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // A single-line progress indicator rewritten with '\r' (for a terminal); else a progress
  // line every 10 s.
  bool progress_tty = false;
  // When set to true (e.g. by SIGINT), offers stop and the run drains and reports early.
  const std::atomic<bool>* stop = nullptr;
};

int RunLoadgen(const std::vector<std::string>& args, const RunIo& io);

}  // namespace loadgen

#endif  // TOOLS_LOADGEN_RUNNER_H_
