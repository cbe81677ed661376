// nodectl: the admin command-line tool, as a library so tests can run it in-process.
//
// RunNodectl parses the arguments (global flags may come before or after the subcommand),
// validates every value locally, calls the node's AdminService (proto/admin.proto) — or, for
// watch-commits and get-value, its ClientService (proto/client.proto, --client, no token) — and
// prints the answer as aligned tables, or as JSON with --json. It returns the process exit code:
//   0  success (also a `watch` or `watch-commits` ended by --count or by Ctrl-C)
//   1  the RPC failed: "nodectl: <CODE>: <message>" on err
//   2  usage error (unknown subcommand or flag, bad value): the message and usage on err
// `--help` (or `help [COMMAND]`) prints usage on out and returns 0.
//
// Thread-safety: RunNodectl may run on several threads at once (no global state). A
// CallCanceller lets another thread (main's signal thread, or a test) end the call in progress.
//
//   nodectl::CallCanceller c;
//   int code = nodectl::RunNodectl({"--admin", "127.0.0.1:50052", "stats"},
//                                  {.out = &std::cout, .err = &std::cerr, .canceller = &c});
#ifndef TOOLS_NODECTL_COMMANDS_H_
#define TOOLS_NODECTL_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "tools/nodectl_canceller.h"

namespace nodectl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRpcError = 1;
inline constexpr int kExitUsage = 2;

struct NodectlIo {
  std::ostream* out = nullptr;         // results and --help
  std::ostream* err = nullptr;         // errors and usage after an error
  CallCanceller* canceller = nullptr;  // optional
};

// `args` excludes the program name (argv[1..]).
int RunNodectl(const std::vector<std::string>& args, const NodectlIo& io);

}  // namespace nodectl

#endif  // TOOLS_NODECTL_COMMANDS_H_
