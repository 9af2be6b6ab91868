#include "qload/runtime/nccl.hpp"

namespace qload {

NcclInfo probe_nccl() {
  NcclInfo info;
  info.unavailable_reason = "this build of qload has no NCCL support";
  return info;
}

}  // namespace qload
