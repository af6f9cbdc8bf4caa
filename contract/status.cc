// Names of the runtime's error codes.

#include "contract/status.h"

namespace graphc {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kInvalidArgument: return "invalid-argument";
    case ErrorCode::kPlanTooSmall: return "plan-too-small";
    case ErrorCode::kPlanWrongIdentifier: return "plan-wrong-identifier";
    case ErrorCode::kPlanMalformed: return "plan-malformed";
    case ErrorCode::kPlanUnsupportedVersion: return "plan-unsupported-version";
    case ErrorCode::kPlanBadIndex: return "plan-bad-index";
    case ErrorCode::kPlanOffsetOverflow: return "plan-offset-overflow";
    case ErrorCode::kPlanBufferOutOfRange: return "plan-buffer-out-of-range";
    case ErrorCode::kPlanBadShape: return "plan-bad-shape";
    case ErrorCode::kPlanBadValue: return "plan-bad-value";
    case ErrorCode::kPlanAliasedOperands: return "plan-aliased-operands";
    case ErrorCode::kPlanMissingKernel: return "plan-missing-kernel";
    case ErrorCode::kPlanIntegrity: return "plan-integrity";
    case ErrorCode::kPlanUnsafeCode: return "plan-unsafe-code";
    case ErrorCode::kPlanUntrusted: return "plan-untrusted";
    case ErrorCode::kPlanUndefinedRead: return "plan-undefined-read";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kBackend: return "backend";
    case ErrorCode::kNonFinite: return "non-finite";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kUnavailable: return "device-unavailable";
    case ErrorCode::kMismatch: return "mismatch";
  }
  return "unknown";
}

std::string Status::ToString() const {
  return std::string("error[") + ErrorCodeName(code_) + "]: " + message_;
}

}  // namespace graphc
