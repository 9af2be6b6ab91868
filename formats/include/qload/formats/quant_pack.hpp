// Encoders and repackers for the integer quantized schemes (GPTQ, AWQ GEMM/GEMV,
// compressed-tensors pack-quantized): integer codes in, the stored part bytes out exactly as
// the producers write them (../shared/formats.md sections 1, 2, 4). Used to synthesise test
// checkpoints and by the loader to repack a weight for a kernel that wants another layout.
//
// The geometry always comes from a LogicalTensor: rows = N (out features), cols = K (in
// features), params.bits / group_size / gptq_version / sym / scale_layout / dense_bitstream;
// its name only labels errors. Packed parts are little-endian int32 words as bytes. Every
// function checks the sizes of its spans against packed_shapes() (kInvalidArgument otherwise)
// and writes its whole outputs; none keeps a reference. All are thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <span>

#include "qload/formats/quant.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/shape.hpp"

namespace qload::formats {

// The stored shapes of a weight's parts, the ones decoders check (bytes = shape in the dtype).
struct PackedShapes {
  DType weight_dtype = DType::kI32;  // I32 packed words; I8 for kCtInt
  Shape weight;                      // qweight / weight_packed / weight
  bool has_zeros = false;            // GPTQ and AWQ always; compressed-tensors when asymmetric
  Shape zeros;                       // qzeros / weight_zero_point (I32 packed; kCtInt: as scales)
  Shape scales;                      // scales / weight_scale (scale dtype)
  std::uint64_t groups = 0;          // groups along K (1 for a per-row or per-tensor scale)
};
// GPTQ: weight [K*b/32, N], zeros [groups, ceil(N*b/32)], scales [groups, N] (b in {2,3,4,8},
// K % 32 == 0). AWQ GEMM: [K, ceil(N/8)], [groups, ceil(N/8)], [groups, N]. AWQ GEMV:
// [N, ceil(K/8)], [N, Wz], [N, 8*Wz] (G >= 128, 64 or 32). compressed-tensors packed: weight
// [N, ceil(K*b/32)] (padded layout: [N, ceil(K/(32/b))]), zeros [ceil(N*b/32), groups] (padded:
// [ceil(N/(32/b)), groups]), scales [N, groups] / [N, 1] / [1]. groups = ceil(K / group_size);
// a group size of 0 means one group. kUnsupported for a scheme or option not covered (FP8,
// block scales, other widths), kOverflow for sizes that do not fit.
Result<PackedShapes> packed_shapes(const LogicalTensor& t);

// GPTQ: q [K][N] codes and zeros [groups][N] true zero points (both < 2^bits, row-major) to
// qweight and qzeros. gptq_version 1 stores (z - 1) & (2^bits - 1) per field (no borrow into
// the next field), or with gptq_v1_whole_word the version-2 words minus gptq_v1_word_offset
// (GPTQModel's writer, borrows and all); version 2 stores z. Scales are stored as given.
Status pack_gptq(const LogicalTensor& t, std::span<const std::uint8_t> q, std::span<const std::uint8_t> zeros,
                 std::span<std::byte> qweight, std::span<std::byte> qzeros);

// AWQ GEMM (4-bit): q [K][N], zeros [groups][N] to qweight [K, N/8] and qzeros [groups, N/8],
// nibble i of word c holding column 8c + [0,2,4,6,1,3,5,7][i]. Scales are stored as given.
Status pack_awq_gemm(const LogicalTensor& t, std::span<const std::uint8_t> q, std::span<const std::uint8_t> zeros,
                     std::span<std::byte> qweight, std::span<std::byte> qzeros);

// AWQ GEMV (4-bit): q [K][N], zeros [groups][N] and scales [groups][N] (elements of
// t.params.scale_dtype) to qweight [N, K/8] and qzeros [N, Wz] in natural order and scales
// transposed to [N, 8*Wz], zero past column `groups`.
Status pack_awq_gemv(const LogicalTensor& t, std::span<const std::uint8_t> q, std::span<const std::uint8_t> zeros,
                     std::span<const std::byte> scales, std::span<std::byte> qweight, std::span<std::byte> qzeros,
                     std::span<std::byte> scales_out);

// compressed-tensors pack-quantized: q [N][K] and zero points [N][groups] as signed values in
// [-2^(b-1), 2^(b-1)), stored offset binary (+2^(b-1)), q packed along K, zero points along N
// (dense bitstream or 32/b per word per params.dense_bitstream). `zeros` and `zero_point` are
// empty when params.sym.
Status pack_ct(const LogicalTensor& t, std::span<const std::int8_t> q, std::span<const std::int8_t> zeros,
               std::span<std::byte> weight_packed, std::span<std::byte> zero_point);

// Repacking. GPTQ v1 qzeros to v2 (t: the v1 tensor): every field +1 mod 2^bits, per field.
Status gptq_v1_zeros_to_v2(const LogicalTensor& t, std::span<const std::byte> qzeros_v1,
                           std::span<std::byte> qzeros_v2);

// The GPTQ v2 tensor holding the same values as an AWQ GEMM one (bits 4, same group size and
// scale dtype, no parts): the geometry for awq_gemm_to_gptq's outputs.
LogicalTensor awq_gemm_as_gptq(const LogicalTensor& awq);
// AWQ GEMM qweight / qzeros to GPTQ v2 qweight (repacked along K) and qzeros (along N, natural
// order); scales are unchanged ([groups, N] in both). kUnsupported unless K % 32 == 0.
Status awq_gemm_to_gptq(const LogicalTensor& awq, std::span<const std::byte> qweight, std::span<const std::byte> qzeros,
                        std::span<std::byte> gptq_qweight, std::span<std::byte> gptq_qzeros);

// GPTQ act-order (desc_act) to contiguous groups: perm = the stable sort of 0..K-1 by g_idx
// (I32 [K]; kCorrupt for an entry outside [0, groups)); qweight_out row k holds input column
// perm[k] and g_idx_out[k] = g_idx[perm[k]] (non-decreasing). The weight W'[n, k] = W[n, perm[k]],
// so a server feeding x'[k] = x[perm[k]] computes the same product. Zeros and scales are
// unchanged.
Status gptq_act_order_sort(const LogicalTensor& t, std::span<const std::byte> g_idx, std::span<const std::byte> qweight,
                           std::span<std::int32_t> perm, std::span<std::byte> qweight_out,
                           std::span<std::byte> g_idx_out);

}  // namespace qload::formats
