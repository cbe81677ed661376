// NameThisThread: gives the calling thread a name that `top -H`, `ps -L`, `perf` and
// /proc/<pid>/task/<tid>/comm show (Linux keeps at most 15 bytes; longer names are cut).
//
//   thread_ = std::thread([this] { flowctl::NameThisThread("tick"); Loop(); });
#ifndef FLOWCTL_THREAD_NAME_H_
#define FLOWCTL_THREAD_NAME_H_

#include "absl/strings/string_view.h"

namespace flowctl {

// Best effort: a failure (no such facility) is ignored, since a name only helps observation.
void NameThisThread(absl::string_view name);

}  // namespace flowctl

#endif  // FLOWCTL_THREAD_NAME_H_
