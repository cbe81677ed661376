// nodectl's client API subcommands: watch-commits (ClientService.WatchCommits, one line per
// committed block) and get-value (ClientService.GetValue). They talk to --client and never send
// the admin token. Thread-safety as RunNodectl.
//
//   {.name = "watch-commits", ..., .run = RunWatchCommits},
#ifndef TOOLS_NODECTL_CLIENT_COMMANDS_H_
#define TOOLS_NODECTL_CLIENT_COMMANDS_H_

#include "tools/nodectl_context.h"
#include "tools/nodectl_flags.h"

namespace nodectl {

int RunWatchCommits(Context& ctx, const ParsedFlags& f);
int RunGetValue(Context& ctx, const ParsedFlags& f);

}  // namespace nodectl

#endif  // TOOLS_NODECTL_CLIENT_COMMANDS_H_
