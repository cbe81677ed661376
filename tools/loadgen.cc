// loadgen: open-loop, partition-level load generator for noded. See tools/loadgen_runner.h for
// what a run does and tools/loadgen_flags.cc (or `loadgen --help`) for the flags.
//
// SIGINT/SIGTERM stop the offers early; the run then drains and reports as usual. A second
// signal exits at once with 130.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tools/loadgen_runner.h"

int main(int argc, char** argv) {
  // Block the signals before gRPC starts its threads (they inherit the mask) and take them on
  // one thread with sigwait: no async-signal-safety concerns.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  static std::atomic<bool> stop{false};
  std::thread([signals] {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) return;
    stop = true;
    if (sigwait(&signals, &sig) != 0) return;
    _exit(130);
  }).detach();

  std::vector<std::string> args(argv + 1, argv + argc);
  const int code = loadgen::RunLoadgen(
      args, {.out = &std::cout, .err = &std::cerr, .progress_tty = isatty(2) != 0, .stop = &stop});
  std::cout.flush();
  std::cerr.flush();
  _exit(code);
}
