// Built when CUDA is compiled in: the request described as DequantArgs (quant/device_args.cpp,
// which checks it as the CPU decoders would) and launched by quant/dequantize.cu.
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "qload/formats/quant_cuda.hpp"
#include "quant/decoders.hpp"
#include "quant/device_args.hpp"

namespace qload::formats {

Status dequantize_on_device(const LogicalTensor& tensor, std::span<const PartBytes> host_parts,
                            std::span<const std::byte* const> device_parts, std::uint64_t row_begin,
                            std::uint64_t row_end, DType out_dtype, std::byte* out, const cuda::Stream& stream) {
  if (stream.handle() == nullptr)
    return fail(Errc::kInvalidArgument, "dequantize_on_device: the stream was not created (Stream::create)");
  if (tensor.experts > 0 && !detail::stacked_rows_are_flat(tensor)) {
    // Stacked experts: one launch per expert, on its slices of the parts.
    const std::uint64_t n = tensor.rows / tensor.experts;
    const std::uint64_t row_bytes = tensor.cols * dtype_info(out_dtype).block_bytes;
    std::vector<const std::byte*> slices(device_parts.size());
    for (std::uint64_t e = row_begin / std::max<std::uint64_t>(n, 1); e < tensor.experts && e * n < row_end; ++e) {
      const std::uint64_t a = std::max(row_begin, e * n), b = std::min(row_end, (e + 1) * n);
      QLOAD_ASSIGN_OR_RETURN(const ExpertView view, expert_view(tensor, host_parts, e));
      if (device_parts.size() != host_parts.size())
        return fail(Errc::kInvalidArgument, "dequantize_on_device: one device pointer per part");
      for (std::size_t i = 0; i < slices.size(); ++i) slices[i] = device_parts[i] + e * view.parts[i].bytes.size();
      QLOAD_TRY(dequantize_on_device(view.tensor, view.parts, slices, a - e * n, b - e * n, out_dtype,
                                     out + (a - row_begin) * row_bytes, stream));
    }
    return {};
  }
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
