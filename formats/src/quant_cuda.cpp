// Built when CUDA is compiled in: the request described as DequantArgs (quant/device_args.cpp,
// which checks it as the CPU decoders would) and launched by quant/dequantize.cu.
#include <fmt/format.h>

#include "qload/formats/quant_cuda.hpp"
#include "quant/device_args.hpp"

namespace qload::formats {

Status dequantize_on_device(const LogicalTensor& tensor, std::span<const PartBytes> host_parts,
                            std::span<const std::byte* const> device_parts, std::uint64_t row_begin,
                            std::uint64_t row_end, DType out_dtype, std::byte* out, const cuda::Stream& stream) {
  if (stream.handle() == nullptr)
    return fail(Errc::kInvalidArgument, "dequantize_on_device: the stream was not created (Stream::create)");
  QLOAD_ASSIGN_OR_RETURN(
      const detail::DequantArgs args,
      detail::describe_dequantize(tensor, host_parts, device_parts, row_begin, row_end, out_dtype, out));
  char message[256] = {};
  if (detail::launch_dequantize(args, stream.device(), stream.handle(), message, sizeof message) != 0)
    return fail(
        Error(Errc::kDevice, fmt::format("cuda:{}: dequantizing a [{}, {}] {} weight: {}", stream.device(), tensor.rows,
                                         tensor.cols, quant_scheme_name(tensor.params.scheme), message))
            .with_tensor(tensor.name));
  return {};
}

}  // namespace qload::formats
