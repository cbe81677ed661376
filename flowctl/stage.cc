#include "flowctl/stage.h"

#include "absl/strings/str_cat.h"

namespace flowctl {

absl::StatusCode RejectStatusCode(RejectKind kind) {
  switch (kind) {
    case RejectKind::kOverloaded:
      return absl::StatusCode::kResourceExhausted;
    case RejectKind::kUnavailable:
      return absl::StatusCode::kUnavailable;
    case RejectKind::kInvalid:
      return absl::StatusCode::kInvalidArgument;
  }
  return absl::StatusCode::kResourceExhausted;  // unreachable: the switch covers every kind
}

absl::string_view RejectKindName(RejectKind kind) {
  switch (kind) {
    case RejectKind::kOverloaded:
      return "overloaded";
    case RejectKind::kUnavailable:
      return "unavailable";
    case RejectKind::kInvalid:
      return "invalid";
  }
  return "overloaded";
}

absl::string_view DropReasonName(DropReason reason) {
  switch (reason) {
    case DropReason::kRefused:
      return "refused";
    case DropReason::kExpired:
      return "expired";
    case DropReason::kRemoved:
      return "removed";
  }
  return "removed";
}

absl::Status Decision::ToStatus() const {
  if (admitted_) return absl::OkStatus();
  return absl::Status(RejectStatusCode(kind_),
                      absl::StrCat("rejected by stage '", stage_, "': ", reason_));
}

std::string Decision::ToString() const {
  if (admitted_) return "admit";
  return absl::StrCat("rejected by ", stage_, " (", RejectKindName(kind_), "): ", reason_,
                      " (retry after ", absl::FormatDuration(retry_after_), ")");
}

}  // namespace flowctl
