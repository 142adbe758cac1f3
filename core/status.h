// Status and Result<T> for the engine's code: the public types (include/starling/status.h) under
// their internal names, and the constructors of each kind of error.
#pragma once

#include <starling/status.h>

#include <string>
#include <utility>

namespace starling::core {

// The engine's statuses are the public ones (include/starling/status.h): one type from the
// transport up to the user's trainer, so nothing is converted at the door.
using ::starling::Result;
using ::starling::Status;
using ::starling::StatusCode;
using ::starling::statusCodeName;

inline Status invalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status notFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
inline Status peerGone(std::string m) { return {StatusCode::kPeerGone, std::move(m)}; }
inline Status ioError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status diverged(std::string m) { return {StatusCode::kDiverged, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status failedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status internalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

}  // namespace starling::core

// Early return of a non-ok Status from a function returning Status or Result<T>.
#define STARLING_RETURN_IF_ERROR(expr)                  \
  do {                                                  \
    ::starling::core::Status _st = (expr);              \
    if (!_st.isOk()) return _st;                        \
  } while (0)
