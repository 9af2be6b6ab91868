// The per-scheme decoders behind dequantize_rows (quant_codec.hpp). Each writes rows
// [row_begin, row_end) of the f32 [N, K] weight into `out` ((row_end - row_begin) * K floats),
// after checking its parts (present, dtype, byte size) against the logical tensor.
#pragma once

#include <cstdint>
#include <span>

#include "qload/formats/quant_codec.hpp"

namespace qload::formats::detail {

// The part called `role`, or kCorrupt naming the tensor and the missing role.
Result<const PartBytes*> find_part(const LogicalTensor& tensor, std::span<const PartBytes> parts,
                                   std::string_view role);

// GPTQ, AWQ (GEMM and GEMV), compressed-tensors pack-quantized and int-quantized.
Status dequantize_gptq(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, std::span<float> out);
Status dequantize_awq(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                      std::uint64_t row_end, std::span<float> out);
Status dequantize_ct_packed(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                            std::uint64_t row_end, std::span<float> out);
Status dequantize_ct_int(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                         std::uint64_t row_end, std::span<float> out);
// FP8 with any scale layout.
Status dequantize_fp8(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                      std::uint64_t row_end, std::span<float> out);

// A scale or float part element as f32 (F32, F16, BF16; the caller checked the dtype).
float load_scale(const PartBytes& part, std::uint64_t index) noexcept;

}  // namespace qload::formats::detail
