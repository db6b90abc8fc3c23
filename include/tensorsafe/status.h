// Status and Result<T>: how every tensorsafe operation reports failure.
//
// Corrupt or hostile input is an expected outcome, never an exception or an
// abort: functions return a Status (or a Result<T> holding either a value or a
// non-OK Status). The set of codes is small and fixed; the message names the
// file, the entry and the numbers involved. Codes are stable (the CLI maps them
// to exit codes, Python to exception classes): never renumber.
//
// Thread safety: Status and Result are values; distinct objects may be used
// from distinct threads freely.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tensorsafe {

// Persisted in no file, but exposed to the CLI (exit codes, docs/ERRORS.md)
// and to Python: never renumber.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // the caller passed something unusable
  kNotFound = 2,            // no tensor, key or file of that name
  kCorruption = 3,          // the bytes contradict the format
  kUnsupported = 4,         // valid, but a feature/version/dtype we do not handle
  kIOError = 5,             // the OS said no; errno() says why
  kOutOfRange = 6,          // an index or slice outside the tensor
  kLimitExceeded = 7,       // a resource limit from the options was hit
  kFailedPrecondition = 8,  // the object is in the wrong state for the call
  kInternal = 9,            // a bug in tensorsafe
};

// Returns a stable lower-case name such as "corruption".
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message, int err = 0) : code_(code), errno_(err), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // The errno captured for kIOError, else 0.
  int error_number() const { return errno_; }
  const std::string& message() const { return message_; }
  // "corruption: entry 17 \"w\": ..." ; "ok" for OK.
  std::string ToString() const;

  // Prepends context ("file.tsafe: ") to the message, keeping code and errno.
  Status WithContext(std::string_view prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  int errno_ = 0;
  std::string message_;
};

// Helpers that read like the codes.
Status InvalidArgument(std::string msg);
Status NotFound(std::string msg);
Status Corruption(std::string msg);
Status Unsupported(std::string msg);
Status IOError(std::string msg, int err);
Status OutOfRange(std::string msg);
Status LimitExceeded(std::string msg);
Status FailedPrecondition(std::string msg);
Status Internal(std::string msg);

// The OK status that Result<T>::status() refers to when it holds a value.
inline const Status& OkStatusRef() {
  static const Status ok;
  return ok;
}

// Either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error; OK when a value is held. On an lvalue, a reference valid as
  // long as this Result (no copy of the message); on a temporary, a value,
  // so `const auto& s = F().status();` binds a lifetime-extended copy rather
  // than a reference into the dead temporary.
  const Status& status() const& { return ok() ? OkStatusRef() : std::get<Status>(v_); }
  Status status() && { return ok() ? Status::OK() : std::get<Status>(std::move(v_)); }
  Status status() const&& { return ok() ? Status::OK() : std::get<Status>(v_); }

  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tensorsafe

#define TS_CONCAT_INNER_(a, b) a##b
#define TS_CONCAT_(a, b) TS_CONCAT_INNER_(a, b)

// Returns early from the enclosing function when `expr` (a Status) fails.
#define TS_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::tensorsafe::Status ts_status_ = (expr); \
    if (!ts_status_.ok()) return ts_status_;  \
  } while (0)

// `TS_ASSIGN_OR_RETURN(auto x, F());` binds the value or returns the error.
#define TS_ASSIGN_OR_RETURN(lhs, expr) TS_ASSIGN_OR_RETURN_IMPL_(TS_CONCAT_(ts_result_, __LINE__), lhs, expr)
#define TS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()
