#include <cstdio>

#include "commands.hpp"

namespace qload::cli {

int exit_code(const Error& error) {
  switch (error.code()) {
    case Errc::kInvalidArgument: return 64;
    case Errc::kCorrupt:
    case Errc::kTruncated:
    case Errc::kOverflow: return 65;
    case Errc::kNotFound:
    case Errc::kPermissionDenied: return 66;
    case Errc::kUnsupported:
    case Errc::kDevice: return 69;
    case Errc::kIo:
    case Errc::kFileChanged: return 74;
    case Errc::kChecksumMismatch: return 75;
    case Errc::kOutOfMemory:
    case Errc::kCancelled:
    case Errc::kInternal: return 70;
  }
  return 70;
}

int report(const Error& error) {
  std::fprintf(stderr, "qload: error: %s\n", error.to_string().c_str());
  return exit_code(error);
}

}  // namespace qload::cli
