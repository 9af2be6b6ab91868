// Built when CUDA is not compiled in: the device conversions exist but say why they cannot
// run, so callers need no #ifdef.
#include "qload/formats/convert_cuda.hpp"

namespace qload::formats {

Status convert_on_device(const std::byte*, DType, std::byte*, DType, std::uint64_t, const cuda::Stream&) {
  return fail(Errc::kUnsupported, "this qload was built without CUDA");
}

}  // namespace qload::formats
