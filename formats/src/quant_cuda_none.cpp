// Built when CUDA is not compiled in: device dequantization exists but says why it cannot run.
#include "qload/formats/quant_cuda.hpp"

namespace qload::formats {

Status dequantize_on_device(const LogicalTensor&, std::span<const PartBytes>, std::span<const std::byte* const>,
                            std::uint64_t, std::uint64_t, DType, std::byte*, const cuda::Stream&) {
  return fail(Errc::kUnsupported, "this qload was built without CUDA");
}

}  // namespace qload::formats
