#include "c_status.hpp"

#include <utility>

namespace qload::capi {

std::string& last_error() {
  thread_local std::string text;
  return text;
}

qload_status status_of(Errc code) noexcept {
  switch (code) {
    case Errc::kInvalidArgument: return QLOAD_ERR_INVALID_ARGUMENT;
    case Errc::kNotFound: return QLOAD_ERR_NOT_FOUND;
    case Errc::kPermissionDenied: return QLOAD_ERR_PERMISSION;
    case Errc::kIo: return QLOAD_ERR_IO;
    case Errc::kTruncated:
    case Errc::kCorrupt:
    case Errc::kFileChanged: return QLOAD_ERR_CORRUPT;
    case Errc::kChecksumMismatch: return QLOAD_ERR_CHECKSUM;
    case Errc::kUnsupported: return QLOAD_ERR_UNSUPPORTED;
    case Errc::kOutOfMemory: return QLOAD_ERR_OUT_OF_MEMORY;
    case Errc::kOverflow: return QLOAD_ERR_OVERFLOW;
    case Errc::kCancelled: return QLOAD_ERR_CANCELLED;
    case Errc::kDevice: return QLOAD_ERR_DEVICE;
    case Errc::kInternal: return QLOAD_ERR_INTERNAL;
  }
  return QLOAD_ERR_INTERNAL;
}

qload_status failed(const Error& error) {
  last_error() = error.to_string();
  return status_of(error.code());
}

qload_status failed(qload_status status, std::string message) {
  last_error() = std::move(message);
  return status;
}

}  // namespace qload::capi
