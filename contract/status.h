// Errors as values for the runtime: every failure is a Status
// with a named code that graphrun prints as one line before exiting with 1.

#ifndef GRAPHC_CONTRACT_STATUS_H_
#define GRAPHC_CONTRACT_STATUS_H_

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace graphc {

enum class ErrorCode {
  kOk = 0,
  kIo,                     // a file cannot be read or written
  kInvalidArgument,        // a bad flag or API argument
  kPlanTooSmall,           // fewer bytes than a FlatBuffers header
  kPlanWrongIdentifier,    // not a graphc plan ("GPLN")
  kPlanMalformed,          // FlatBuffers verification failed: truncated or corrupt
  kPlanUnsupportedVersion, // written by a newer (or unknown) compiler
  kPlanBadIndex,           // an index outside the table it refers to
  kPlanOffsetOverflow,     // offset + size overflows 64 bits
  kPlanBufferOutOfRange,   // a buffer ends past its region
  kPlanBadShape,           // a shape inconsistent with its op or its size
  kPlanBadValue,           // an attribute or enum value out of range
  kPlanAliasedOperands,    // an op reads and writes overlapping memory undeclared
  kPlanMissingKernel,      // no binary for the device, or a kernel missing from it
  kPlanIntegrity,          // a recorded SHA-256 does not match: a corrupt plan
  kPlanUnsafeCode,         // the embedded kernel library could run code when loaded,
                           // imports what graphc's kernels never do, or does not
                           // match the plan's launch table
  kPlanUntrusted,          // not signed by a key the user trusts
  kPlanUndefinedRead,      // a program reads memory nothing initialized
  kUnsupported,            // valid, but this build or device cannot run it
  kBackend,                // the device or a library failed
  kNonFinite,              // a tensor holds NaN or infinity where it must not
  kInternal,               // a bug: an exception escaped (reported, never a crash)
  kUnavailable,            // the device asked for is absent or unusable here
  kMismatch,               // two backends computed the same command differently
};

// A stable, greppable name such as "plan-bad-index".
const char* ErrorCodeName(ErrorCode code);

class Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message)
      : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "error[plan-bad-index]: <message>"
  std::string ToString() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

template <typename T>
class StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : value_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(value_).ok());
  }
  bool ok() const { return std::holds_alternative<T>(value_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(value_);
  }
  T& value() { return std::get<T>(value_); }
  const T& value() const { return std::get<T>(value_); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> value_;
};

// Returns the Status `expr` evaluates to from the enclosing function when it
// is an error (for chains of checks, each of which may fail).
#define GRAPHC_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    ::graphc::Status graphc_status_ = (expr);           \
    if (!graphc_status_.ok()) return graphc_status_;    \
  } while (0)

}  // namespace graphc

#endif  // GRAPHC_CONTRACT_STATUS_H_
