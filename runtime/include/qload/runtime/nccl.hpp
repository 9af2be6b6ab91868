// Whether NCCL can be used here. NCCL is loaded at run time (dlopen of libnccl.so.2) rather
// than linked, so a binary built with NCCL headers still starts on a machine without NCCL.
#pragma once

#include <string>

namespace qload {

struct NcclInfo {
  bool compiled = false;    // NCCL headers were found at configure time
  int header_version = 0;   // NCCL_VERSION_CODE of those headers
  int library_version = 0;  // ncclGetVersion() of the library found now, 0 if none
  std::string unavailable_reason;
};

NcclInfo probe_nccl();

}  // namespace qload
