// Floating-point dtype conversion on load: bf16 <-> f16, f32 -> bf16 / f16, f16 / bf16 -> f32
// (and the identity). The CPU functions here and the CUDA kernels (convert_cuda.hpp) produce
// bit-identical results.
//
// Rounding and special values (one rule for every narrowing conversion):
//   - round to nearest, ties to even, in one step from the exact source value (bf16 -> f16
//     and f16 -> bf16 go through f32, which holds every f16 and bf16 value exactly, so there
//     is still only one rounding);
//   - values beyond the target's largest finite value after rounding become +-Inf;
//   - subnormal results are produced (no flush to zero), subnormal inputs are honoured;
//   - NaN stays NaN of the same sign, quieted (the quiet bit set, the payload's top bits kept
//     where they fit, never turned into Inf); Inf stays Inf; -0 stays -0.
// Widening conversions (f16 -> f32, bf16 -> f32) are exact; a NaN keeps its whole payload
// and, like every NaN out of this codec, comes out quiet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

// Whether convert() handles from -> to: both in {F16, BF16, F32}, including from == to.
bool is_convertible(DType from, DType to) noexcept;

// Output bytes for `input_bytes` of `from` converted to `to`. Requires is_convertible and
// input_bytes a multiple of from's element size.
std::uint64_t converted_bytes(std::uint64_t input_bytes, DType from, DType to) noexcept;

// Converts whole elements: `in` holds N elements of `from`, `out` must be exactly N elements
// of `to`. Vectorised by the compiler (the loops are written branch-free for it); one thread:
// the scheduler runs many conversions at once. kInvalidArgument for an unsupported pair,
// sizes that do not match, or spans that overlap (allowed only when from == to).
Status convert(std::span<const std::byte> in, DType from, std::span<std::byte> out, DType to);

// Scalar conversions, the definition of the rules above (convert() and the CUDA kernels do
// the same arithmetic).
std::uint16_t f32_to_bf16_bits(std::uint32_t f32_bits) noexcept;
std::uint16_t f32_to_f16_bits(std::uint32_t f32_bits) noexcept;
std::uint32_t bf16_to_f32_bits(std::uint16_t bf16_bits) noexcept;
std::uint32_t f16_to_f32_bits(std::uint16_t f16_bits) noexcept;

}  // namespace qload::formats
