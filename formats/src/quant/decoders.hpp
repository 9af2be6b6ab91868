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

// Whether a stacked weight (LogicalTensor::experts > 1) decodes as one flat [E * N, K] weight:
// GGML and MXFP4 rows carry their own scales. Every other scheme decodes expert by expert
// (expert_view).
inline bool stacked_rows_are_flat(const LogicalTensor& t) noexcept {
  return t.params.scheme == QuantScheme::kGgml || t.params.scheme == QuantScheme::kMxfp4;
}

// GPTQ, AWQ (GEMM and GEMV), compressed-tensors pack-quantized and int-quantized.
Status dequantize_gptq(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, std::span<float> out);
// GPTQ with 2, 4 or 8 bits (act-order, or contiguous groups of a multiple of 16 columns),
// written straight to `dtype` (F32, BF16 or F16) through AVX2: false (nothing written) for any
// other weight or CPU, after the same checks as dequantize_gptq.
Result<bool> dequantize_gptq_direct(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                                    std::uint64_t row_end, DType dtype, std::span<std::byte> out);
Status dequantize_awq(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                      std::uint64_t row_end, std::span<float> out);
// AWQ GEMV with groups of a multiple of 16 columns, written straight to `dtype` (F32, BF16 or
// F16) through AVX2: false (nothing written) for GEMM, other groups or another CPU, after the
// same checks as dequantize_awq.
Result<bool> dequantize_awq_direct(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                                   std::uint64_t row_end, DType dtype, std::span<std::byte> out);
Status dequantize_ct_packed(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                            std::uint64_t row_end, std::span<float> out);
Status dequantize_ct_int(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                         std::uint64_t row_end, std::span<float> out);
// FP8 with any scale layout.
Status dequantize_fp8(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                      std::uint64_t row_end, std::span<float> out);
// The same straight to BF16 or F16 bytes, where each scale covers at least kFp8TableMin
// elements: one table of the 256 codes' narrowed products per scale, each element a lookup.
// False, nothing written, for other scale layouts and dtypes (dequantize_rows then takes the f32
// path, which gives the same bits).
Result<bool> dequantize_fp8_narrow(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                                   std::uint64_t row_end, DType dtype, std::span<std::byte> out);

// GGML blocks (GGUF): the decoder (ggml.cpp); whether a ggml type has one here; the logical
// weight of catalog tensor `index` (one with a ggml_type).
Status dequantize_ggml(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, std::span<float> out);
// The same, straight to F32, BF16 or F16 bytes (`out` holds (row_end - row_begin) * cols of
// `dtype`; F32 output aligned to 4): dequantize_rows' path for GGML weights, whose 16-bit
// outputs skip the f32 slab.
Status dequantize_ggml(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, DType dtype, std::span<std::byte> out);
bool ggml_decodable(std::uint32_t ggml_type);
Result<LogicalTensor> ggml_weight(const Catalog& catalog, std::uint32_t index);
QuantLayoutText ggml_layout(const LogicalTensor& t);  // describe_layout's words for a GGML type

// OCP MXFP4 (mxfp4.cpp): the decoder, and every "<name>_blocks" / "<name>_scales" pair of the
// catalog as a weight named <name> (kCorrupt naming the tensor when the two do not match).
Status dequantize_mxfp4(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                        std::uint64_t row_end, std::span<float> out);
// The same straight to F32, BF16 or F16 bytes where the CPU has an AVX-512 or AVX2 decoder
// (rows_avx512.cpp, rows_avx2.cpp): false, nothing written, where it has not (dequantize_rows
// then takes the f32 path).
Result<bool> dequantize_mxfp4_direct(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                                     std::uint64_t row_end, DType dtype, std::span<std::byte> out);
Status detect_mxfp4(const Catalog& catalog, QuantizedCatalog& out);

// Llama-4's fbgemm FP8 experts (fbgemm_experts.cpp): every 3-D F8 `<name>` with a `<name>_scale`
// of one scale per expert and output channel becomes a kFp8 weight with ScaleLayout::kColumn
// (kCorrupt naming the scale when its shape or dtype does not fit).
Status detect_fbgemm_experts(const Catalog& catalog, QuantizedCatalog& out);
// The roles of an MXFP4 weight's two parts: gpt-oss's blocks / scales, or compressed-tensors'
// weight_packed / weight_scale (the same bytes).
struct Mxfp4Roles {
  std::string_view blocks, scales;
};
Mxfp4Roles mxfp4_roles(std::span<const PartBytes> parts);

// bitsandbytes 4-bit (bnb.cpp): the decoder, and every `<w>.quant_state.bitsandbytes__nf4` /
// `__fp4` of the catalog (its JSON in Catalog::embedded) as the weight `<w>` with its parts.
Status dequantize_bnb4(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, std::span<float> out);
Status detect_bnb4(const Catalog& catalog, QuantizedCatalog& out);
// bitsandbytes 8-bit: every `<p>.SCB` with its `<p>.weight` (I8) and `<p>.weight_format`.
Status dequantize_bnb8(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, std::span<float> out);
Status detect_bnb8(const Catalog& catalog, QuantizedCatalog& out);

// NVFP4 (nvfp4.cpp): compressed-tensors' weight_packed / weight_global_scale (each scale
// divided by the global scale) or ModelOpt's weight / weight_scale_2 (multiplied by it).
Status dequantize_nvfp4(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                        std::uint64_t row_end, std::span<float> out);
// The same straight to F32, BF16 or F16 bytes where the CPU has an AVX-512 or AVX2 decoder (as
// MXFP4's).
Result<bool> dequantize_nvfp4_direct(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                                     std::uint64_t row_end, DType dtype, std::span<std::byte> out);
struct Nvfp4Global {
  std::string_view packed;  // the role of the E2M1 pairs
  float value = 1.0f;
  bool multiplies = false;  // ModelOpt's weight_scale_2
};
// Its packed role and global scale, after the part checks (kCorrupt naming the tensor when
// the global scale is absent or mis-sized).
Result<Nvfp4Global> nvfp4_global(const LogicalTensor& t, std::span<const PartBytes> parts);

// How an FP8 scale tensor covers the [N, K] weight: weight row n, column k uses scale element
// (n / rows_per_scale) * scale_cols + k / cols_per_scale.
struct ScaleGrid {
  std::uint64_t rows_per_scale = 1;
  std::uint64_t cols_per_scale = 1;
  std::uint64_t scale_cols = 1;
};
// An FP8 weight's checked parts: the codes, the scale (weight_scale_inv preferred over
// weight_scale) and how it broadcasts.
struct Fp8Parts {
  const PartBytes* weight = nullptr;
  const PartBytes* scale = nullptr;
  ScaleGrid grid;
};
Result<Fp8Parts> checked_fp8_parts(const LogicalTensor& t, std::span<const PartBytes> parts);

// kCorrupt naming the entry when an I32 weight_zero_point of a kCtInt weight holds a value
// the decoder refuses (|zp| > 2^23, so q - zp would not be an exact float).
Status check_ct_int_zeros(const LogicalTensor& t, std::span<const PartBytes> parts);

// A scale or float part element as f32 (F32, F16, BF16; the caller checked the dtype).
float load_scale(const PartBytes& part, std::uint64_t index) noexcept;

}  // namespace qload::formats::detail
