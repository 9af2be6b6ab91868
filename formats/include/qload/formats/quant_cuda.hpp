// The CUDA side of quant_codec.hpp: dequantization of a quantized weight whose parts are in
// GPU memory, into GPU memory, bit-identical to dequantize_rows for every non-NaN output (a
// NaN output is a NaN on both; its payload may differ). Present in every build; without CUDA
// compiled in, kUnsupported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "qload/formats/quant_codec.hpp"
#include "qload/runtime/cuda_memory.hpp"

namespace qload::formats {

// Enqueues the dequantization of rows [row_begin, row_end) of the [N, K] weight `tensor` to
// `out` (device memory, (row_end - row_begin) * K elements of out_dtype: F32, BF16 or F16) on
// `stream`, and returns once launched.
// `host_parts` are the parts in host memory and `device_parts[i]` the device copy of
// host_parts[i]: the host bytes are what gets checked (check_quantized_parts: every error
// dequantize_rows reports, g_idx and zero-point ranges included), since a kernel cannot
// report a bad index; the device bytes must be the same. Device pointers must be aligned to
// their element size. kInvalidArgument for a bad request, kDevice if the launch fails.
Status dequantize_on_device(const LogicalTensor& tensor, std::span<const PartBytes> host_parts,
                            std::span<const std::byte* const> device_parts, std::uint64_t row_begin,
                            std::uint64_t row_end, DType out_dtype, std::byte* out, const cuda::Stream& stream);

}  // namespace qload::formats
