// Status propagation macros for absl::Status / absl::StatusOr, which the packaged Abseil lacks.
//
// Any layer may include this header (it lives in flowctl/, the lowest layer of our code).
//
//   absl::Status Load(const std::string& path) {
//     RETURN_IF_ERROR(CheckPath(path));
//     ASSIGN_OR_RETURN(std::string text, ReadFile(path));
//     return Parse(text);
//   }
#ifndef FLOWCTL_STATUS_MACROS_H_
#define FLOWCTL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr` (an absl::Status or a StatusOr<T>) and returns its status from the enclosing
// function when it is not OK.
#define RETURN_IF_ERROR(expr)                                                \
  do {                                                                       \
    const ::absl::Status _node_status = ::flowctl::internal::ToStatus(expr); \
    if (!_node_status.ok()) return _node_status;                             \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, else moves the value
// into `lhs`, which may be a declaration (`ASSIGN_OR_RETURN(auto x, F())`) or an lvalue.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  NODE_ASSIGN_OR_RETURN_IMPL_(NODE_STATUS_CONCAT_(_node_statusor_, __LINE__), lhs, rexpr)

#define NODE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr)  \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#define NODE_STATUS_CONCAT_INNER_(a, b) a##b
#define NODE_STATUS_CONCAT_(a, b) NODE_STATUS_CONCAT_INNER_(a, b)

namespace flowctl::internal {
inline const absl::Status& ToStatus(const absl::Status& s) { return s; }
template <typename T>
inline const absl::Status& ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace flowctl::internal

#endif  // FLOWCTL_STATUS_MACROS_H_
