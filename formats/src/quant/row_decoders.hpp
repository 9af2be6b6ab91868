// The CPU's row decoders that have an instruction-set-specific form: GGML blocks, OCP MXFP4 and
// NVFP4 (and GPTQ rows, gptq.cpp), decoded straight to F32, BF16 or F16. ggml.cpp, mxfp4.cpp and nvfp4.cpp try
// the AVX-512 one first (rows_avx512.cpp), then the AVX2 one (rows_avx2.cpp), and fall back to the portable one; all
// give the same bits (rows_avx2_test checks every covered type and output on random blocks, NaN, Inf and subnormal
// scales included; fuzz_quant_rows any bytes). One freedom: where a NaN scale meets a NaN minimum, IEEE 754 lets either
// payload through and compilers may swap an addition's operands, so that element is a NaN of either payload.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dequantize_kernels.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats::detail {

// Rows [row_begin, row_end) of `type` blocks, `row_bytes` each from `base`, `cols` elements a row,
// decoded to `dtype` (F32, BF16 or F16) at `out`: ggml_rows.hpp's whole-block loops where there is
// one, else value() per element. A type with no decoder (ggml_decodable) writes nothing.
Status decode_block_rows_portable(std::uint32_t type, const std::uint8_t* base, std::uint64_t row_bytes,
                                  std::uint64_t cols, std::uint64_t row_begin, std::uint64_t row_end, DType dtype,
                                  std::byte* out);

// Whether decode_block_rows_avx2 decodes `type` on this CPU (AVX2 and F16C, and a type it covers).
bool ggml_avx2_decodes(std::uint32_t type) noexcept;

// The same rows through hand-written AVX2 (rows_avx2.cpp): false, and nothing written, where
// ggml_avx2_decodes(type) is false.
bool decode_block_rows_avx2(std::uint32_t type, const std::uint8_t* base, std::uint64_t row_bytes, std::uint64_t cols,
                            std::uint64_t row_begin, std::uint64_t row_end, DType dtype, std::byte* out);

// OCP MXFP4 (gpt-oss, compressed-tensors mxfp4): rows of `cols` elements, codes [rows, cols / 2]
// (element 2j the low nibble of byte j) and one E8M0 exponent per 32, through AVX2; false, and
// nothing written, where the CPU lacks it.
bool decode_mxfp4_rows_avx2(const std::uint8_t* codes, const std::uint8_t* exponents, std::uint64_t cols,
                            std::uint64_t row_begin, std::uint64_t row_end, DType dtype, std::byte* out);

// NVFP4 (compressed-tensors, ModelOpt): rows of `a.cols` elements, codes [rows, cols / 2] and
// one E4M3 scale per 16 with the global scale (element::Nvfp4), through AVX2; false, and nothing
// written, where the CPU lacks it or the global scale is NaN.
bool decode_nvfp4_rows_avx2(const DequantArgs& a, std::uint64_t row_begin, std::uint64_t row_end, DType dtype,
                            std::byte* out);

// Whether this CPU has AVX2 and F16C, which every *_avx2 decoder needs (read once).
bool cpu_has_avx2() noexcept;

// A GPTQ weight's groups, as decode_gptq_row_avx2 takes them: contiguous runs of `words` qweight
// words, or where `index` is set (act-order), column k's group index[k], each below the count of
// groups the row's z and s hold.
struct GptqGroups {
  std::uint64_t words = 0;
  const std::uint32_t* index = nullptr;
};

// GPTQ with `bits` 2, 4 or 8 (gptq.cpp's layout), one output row: columns [32 / bits * w0,
// 32 / bits * w1) from the qweight words w0 .. w1 - 1 of that row, word w at word index w * stride
// of `qweight` (read unaligned), with zero point z[g] and scale s[g] for column k's group g,
// written to `dtype` (F32, BF16 or F16) at `out` (column 32 / bits * w0 first) as the portable
// decoder and the conversion codec write them. False, and nothing written, where the CPU lacks
// AVX2, bits is another width, or w0, w1 or groups.words (without an index) is not a multiple of
// bits / 2 (16 columns go out at a time).
bool decode_gptq_row_avx2(unsigned bits, const std::byte* qweight, std::uint64_t stride, std::uint64_t w0,
                          std::uint64_t w1, const GptqGroups& groups, const std::int32_t* z, const float* s,
                          DType dtype, std::byte* out);

// in[k] narrowed to BF16 for k < count (a multiple of 16) as the AVX2 decoders narrow blocks
// whose elements are zeros or normal values below 2^111 (rows_avx2.cpp's split_top), for
// its test: false, nothing written, where the CPU lacks AVX2.
bool narrow_bf16_split_avx2(const float* in, std::uint64_t count, std::uint16_t* out);

// The same four through AVX-512 (F, VL, BW, DQ) with its BF16 conversions (rows_avx512.cpp):
// false, and nothing written, where the CPU lacks them (or, for NVFP4, the global scale is NaN).
bool ggml_avx512_decodes(std::uint32_t type) noexcept;
bool decode_block_rows_avx512(std::uint32_t type, const std::uint8_t* base, std::uint64_t row_bytes, std::uint64_t cols,
                              std::uint64_t row_begin, std::uint64_t row_end, DType dtype, std::byte* out);
bool decode_mxfp4_rows_avx512(const std::uint8_t* codes, const std::uint8_t* exponents, std::uint64_t cols,
                              std::uint64_t row_begin, std::uint64_t row_end, DType dtype, std::byte* out);
bool decode_nvfp4_rows_avx512(const DequantArgs& a, std::uint64_t row_begin, std::uint64_t row_end, DType dtype,
                              std::byte* out);

// out[k] = table[codes[k]] (16-bit words, out at any byte offset) for k < count, through
// AVX-512 BW (FP8's narrowed tables, fp8.cpp): false, nothing written, where the CPU lacks it.
bool lookup_words_avx512(const std::uint16_t* table, const std::uint8_t* codes, std::uint64_t count, std::byte* out);

}  // namespace qload::formats::detail
