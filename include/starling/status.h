// Status and Result<T>: how every fallible Starling function reports failure, inside the engine
// and at its public door alike (one type: core/status.h only names it for internal code).
//
// No exception crosses a module boundary; functions that can fail return a Status (or a Result<T>
// carrying either a value or a non-ok Status). Both are [[nodiscard]]. Thread-safety: values, safe
// to copy between threads. Nothing here blocks. Standard library only: this header is installed.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace starling {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is wrong (bad scenario value, bad option)
  kNotFound,         // a named file, peer or key does not exist
  kCorruption,       // bytes that do not decode (bad frame, malformed LIBSVM line)
  kTimeout,          // a deadline passed
  kPeerGone,         // the remote side disconnected or failed
  kIoError,          // the operating system refused (open, write, socket)
  kCancelled,        // the operation was stopped on purpose
  kFailedPrecondition,  // the object is not in a state that allows the call
  kUnavailable,      // a peer could not be reached in time
  kDiverged,         // the numbers blew up (non-finite or beyond the divergence limit)
  kInternal,         // a bug; should never be seen
};

// "ok", "invalid argument", "timeout", ...
std::string_view statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "kind: message", or "ok".
  std::string toString() const;

  // Returns a copy with `context + ": "` put in front of the message (callers add context, they
  // do not log the error again).
  Status withContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a T or a non-ok Status: `if (!r) fail(r.status().toString()); use(*r);`. Accessing the
// value of an error is a bug (asserted).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).isOk() && "Result built from an ok Status");
  }

  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }

  const Status& status() const {
    static const Status kOk;
    return isOk() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    assert(isOk());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(isOk());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(isOk());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace starling
