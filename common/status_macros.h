// The project's one status idiom (tensorstore's shape): propagate a failed absl::Status
// or absl::StatusOr to the caller, unchanged. Convert to grpc::Status once, at the edge
// (server/status_convert.h).
//
//   GC_RETURN_IF_ERROR(CheckShape(shape));
//   GC_ASSIGN_OR_RETURN(const DType dtype, DTypeFromProto(tensor.dtype(), "factors.dtype"));
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define GC_STATUS_CONCAT_INNER(a, b) a##b
#define GC_STATUS_CONCAT(a, b) GC_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` (an absl::Status) when it is not OK.
#define GC_RETURN_IF_ERROR(expr)                                        \
  do {                                                                  \
    if (::absl::Status gc_status_ = (expr); !gc_status_.ok()) return gc_status_; \
  } while (0)

// Evaluates `expr` (an absl::StatusOr<T>); returns its status when it is not OK, else
// moves its value into `lhs`, which may be a declaration ("const Shape shape").
#define GC_ASSIGN_OR_RETURN(lhs, expr) \
  GC_ASSIGN_OR_RETURN_IMPL(GC_STATUS_CONCAT(gc_status_or_, __LINE__), lhs, expr)

#define GC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)          \
  auto tmp = (expr);                                      \
  if (!tmp.ok()) return std::move(tmp).status();          \
  lhs = std::move(tmp).value()
