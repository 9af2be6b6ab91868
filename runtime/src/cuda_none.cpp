// Built when CUDA is not compiled in.
#include "qload/runtime/cuda.hpp"

namespace qload {

CudaInfo probe_cuda() {
  CudaInfo info;
  info.unavailable_reason = "this build of qload has no CUDA support (configure with QLOAD_CUDA=ON)";
  return info;
}

Status cuda_self_test(int) {
  return fail(Errc::kUnsupported, probe_cuda().unavailable_reason);
}

}  // namespace qload
