#include "tensorsafe/status.h"

namespace tensorsafe {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kIOError: return "I/O error";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kLimitExceeded: return "limit exceeded";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view prefix) const {
  if (ok()) return *this;
  std::string m(prefix);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m), errno_);
}

Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
Status IOError(std::string m, int err) { return {StatusCode::kIOError, std::move(m), err}; }
Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
Status LimitExceeded(std::string m) { return {StatusCode::kLimitExceeded, std::move(m)}; }
Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

}  // namespace tensorsafe
