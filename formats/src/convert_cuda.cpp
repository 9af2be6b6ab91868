// Built when CUDA is compiled in: checks the request on the C++23 side, where Status lives,
// and hands the launch to convert.cu through a plain interface.
#include <fmt/format.h>

#include <cstdint>

#include "convert_kernels.hpp"
#include "qload/formats/convert.hpp"
#include "qload/formats/convert_cuda.hpp"

namespace qload::formats {
namespace {

detail::ConvertPair pair_of(DType from, DType to) noexcept {
  using detail::ConvertPair;
  if (from == to) return ConvertPair::kIdentity;
  if (from == DType::kF32) return to == DType::kBF16 ? ConvertPair::kF32ToBF16 : ConvertPair::kF32ToF16;
  if (from == DType::kBF16) return to == DType::kF32 ? ConvertPair::kBF16ToF32 : ConvertPair::kBF16ToF16;
  return to == DType::kF32 ? ConvertPair::kF16ToF32 : ConvertPair::kF16ToBF16;
}

Status check_request(const std::byte* in, DType from, std::byte* out, DType to, std::uint64_t count,
                     const cuda::Stream& stream) {
  if (!is_convertible(from, to))
    return fail(Errc::kInvalidArgument, fmt::format("cannot convert {} to {} on the device: only F16, BF16 and F32 "
                                                    "convert",
                                                    dtype_name(from), dtype_name(to)));
  if (stream.handle() == nullptr)
    return fail(Errc::kInvalidArgument, "convert_on_device: the stream was not created (Stream::create)");
  if (in == nullptr || out == nullptr) return fail(Errc::kInvalidArgument, "convert_on_device: null device pointer");
  const std::uint64_t in_size = dtype_info(from).block_bytes;
  const std::uint64_t out_size = dtype_info(to).block_bytes;
  std::uint64_t in_bytes = 0;
  std::uint64_t out_bytes = 0;
  if (__builtin_mul_overflow(count, in_size, &in_bytes) || __builtin_mul_overflow(count, out_size, &out_bytes))
    return fail(Errc::kInvalidArgument, fmt::format("convert_on_device: {} elements do not fit in memory", count));
  // The kernels load and store whole elements: a misaligned pointer would fault the kernel
  // (and poison the context) instead of failing here.
  const auto in_address = reinterpret_cast<std::uintptr_t>(in);
  const auto out_address = reinterpret_cast<std::uintptr_t>(out);
  if (in_address % in_size != 0 || out_address % out_size != 0)
    return fail(Errc::kInvalidArgument,
                fmt::format("convert_on_device: device pointers must be aligned to their element size ({} input "
                            "{:#x}, {} output {:#x})",
                            dtype_name(from), in_address, dtype_name(to), out_address));
  if (in_address < out_address + out_bytes && out_address < in_address + in_bytes)
    return fail(Errc::kInvalidArgument, "convert_on_device: input and output overlap");
  return {};
}

}  // namespace

Status convert_on_device(const std::byte* in, DType from, std::byte* out, DType to, std::uint64_t count,
                         const cuda::Stream& stream) {
  if (count == 0) return {};
  QLOAD_TRY(check_request(in, from, out, to, count, stream));
  char message[256] = {};
  if (detail::launch_convert(pair_of(from, to), in, out, count, dtype_info(from).block_bytes, stream.device(),
                             stream.handle(), message, sizeof message) != 0)
    return fail(Errc::kDevice, fmt::format("cuda:{}: converting {} {} to {}: {}", stream.device(), count,
                                           dtype_name(from), dtype_name(to), message));
  return {};
}

}  // namespace qload::formats
