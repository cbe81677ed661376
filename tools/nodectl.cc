// nodectl: the admin command-line tool for noded. See tools/nodectl_commands.h for the
// subcommands and exit codes, or run `nodectl --help`.
//
// Ctrl-C (SIGINT) or SIGTERM cancels the call in progress, so `nodectl watch` ends cleanly with
// exit 0; a second signal exits at once with 130.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tools/nodectl_commands.h"

int main(int argc, char** argv) {
  // Block the signals before gRPC starts its threads (they inherit the mask), then take them
  // synchronously on one thread: no async-signal-safety concerns around the canceller's mutex.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  nodectl::CallCanceller canceller;
  std::thread signal_thread([&signals, &canceller] {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) return;
    canceller.Cancel();
    if (sigwait(&signals, &sig) != 0) return;
    _exit(130);
  });
  // The thread stays blocked in sigwait until the process exits.
  signal_thread.detach();

  std::vector<std::string> args(argv + 1, argv + argc);
  int code =
      nodectl::RunNodectl(args, {.out = &std::cout, .err = &std::cerr, .canceller = &canceller});
  std::cout.flush();
  // Skip static destructors: the detached signal thread still references `canceller`.
  _exit(code);
}
