// The DequantArgs (dequantize_kernels.hpp) a device dequantization runs on: built on the C++23
// side from a LogicalTensor, after every check dequantize_rows makes (check_quantized_parts on
// the host copy of the parts), since a kernel cannot report a bad index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dequantize_kernels.hpp"
#include "qload/formats/quant_codec.hpp"

namespace qload::formats::detail {

// Rows [row_begin, row_end) of `tensor` into `out` (out_dtype F32, BF16 or F16), the parts at
// `device_parts[i]` (copies of host_parts[i], aligned to their element size). Errors as
// quant_cuda.hpp's dequantize_on_device.
Result<DequantArgs> describe_dequantize(const LogicalTensor& tensor, std::span<const PartBytes> host_parts,
                                        std::span<const std::byte* const> device_parts, std::uint64_t row_begin,
                                        std::uint64_t row_end, DType out_dtype, std::byte* out);

}  // namespace qload::formats::detail
