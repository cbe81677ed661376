#include "flowctl/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <string>

namespace flowctl {

void NameThisThread(absl::string_view name) {
  constexpr size_t kMaxName = 15;  // the kernel's TASK_COMM_LEN is 16 with the terminator
  const std::string cut(name.substr(0, std::min(name.size(), kMaxName)));
  pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace flowctl
