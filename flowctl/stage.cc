#include "flowctl/stage.h"

#include "absl/strings/str_cat.h"

namespace flowctl {

std::string Decision::ToString() const {
  if (admitted_) return "admit";
  return absl::StrCat("rejected by ", stage_, ": ", reason_, " (retry after ",
                      absl::FormatDuration(retry_after_), ")");
}

}  // namespace flowctl
