// Plain C++ interface of dequantize.cu (nvcc compiles that file in its own C++17 dialect, so
// nothing from the C++23 side crosses this header). quant_cuda.cpp fills DequantArgs from a
// checked LogicalTensor; the kernel trusts every field.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qload::formats::detail {

enum class DeviceScheme : int {
  kGptq,
  kAwqGemm,
  kAwqGemv,
  kCtPacked,
  kCtInt,
  kFp8,
  kGgml,
  kMxfp4,
  kNvfp4,
  kBnb4,
  kBnb8
};
enum class DeviceFloat : int { kF32, kF16, kBF16 };  // a scale or output element
enum class DeviceCode : int { kE4M3, kE5M2 };        // an FP8 weight element
enum class DeviceIndex : int { kNone, kI32, kI64 };  // g_idx, or a CT int zero point
enum class DeviceScaleIndex : int { kTensor, kRow, kGroup, kBlock };

// Everything a kernel needs about one [rows, cols] weight. Pointers are device memory,
// aligned to their element size.
struct DequantArgs {
  DeviceScheme scheme = DeviceScheme::kGptq;
  std::uint64_t rows = 0;  // N
  std::uint64_t cols = 0;  // K
  unsigned bits = 4;
  std::uint64_t group_size = 1;  // columns of K per group when g_idx is absent (>= 1)
  std::uint64_t groups = 1;

  const std::uint32_t* weight = nullptr;  // packed words (GPTQ, AWQ, CT packed)
  const std::uint8_t* codes = nullptr;    // FP8 codes or int8 values (CT int), [N, K]; GGML blocks
  std::uint32_t ggml_type = 0;            // GGML: the block type (ggml_element.hpp)
  std::uint64_t row_bytes = 0;            // GGML: bytes of blocks per row
  // One scale byte per group (codes: the E2M1 pairs): MXFP4 E8M0 exponents per 32, NVFP4 E4M3
  // scales per 16, each divided by global_scale (compressed-tensors) or multiplied by it
  // (ModelOpt's weight_scale_2, global_multiplies).
  const std::uint8_t* scale_codes = nullptr;
  float global_scale = 1.0f;
  bool global_multiplies = false;
  // bitsandbytes 4-bit (codes: the packed nibbles; group_size: the block size): code_map [16],
  // absmax F32 per block, or (nested_block > 0) scale_codes U8 per block into nested_map [256]
  // times nested_absmax per nested_block blocks, plus nested_offset.
  const float* code_map = nullptr;
  const float* absmax = nullptr;  // bitsandbytes: 4-bit blocks' absmax; 8-bit: each row's (SCB)
  const float* nested_map = nullptr;
  const float* nested_absmax = nullptr;
  std::uint64_t nested_block = 0;
  float nested_offset = 0.0f;
  DeviceCode code = DeviceCode::kE4M3;
  std::uint64_t weight_words = 0;  // words per packed row: AWQ GEMM/GEMV, CT packed

  const std::uint32_t* zeros = nullptr;   // packed zero points (GPTQ, AWQ, CT packed); null: none
  std::uint64_t zero_words = 0;           // words per qzeros row (GPTQ, AWQ GEMV)
  bool gptq_v1 = false;                   // stored zero = z - 1 (per field)
  std::uint32_t gptq_v1_word_offset = 0;  // non-zero: v1 read by whole words (GPTQModel), this added
  bool dense = true;                      // CT packed: bitstream (true) or 32/b fields a word
  const void* int_zeros = nullptr;        // CT int zero points, indexed like the scales; null: none
  bool int_zeros_i8 = false;              // int8 zero points (else int32)

  const void* scales = nullptr;
  DeviceFloat scale_type = DeviceFloat::kF16;
  std::uint64_t scale_stride = 0;                           // GPTQ/AWQ GEMM: N; AWQ GEMV: 8*Wz (row width)
  DeviceScaleIndex scale_index = DeviceScaleIndex::kGroup;  // CT and FP8
  std::uint64_t rows_per_scale = 1;                         // FP8: rows sharing a scale row
  std::uint64_t cols_per_scale = 1;                         // FP8: columns sharing a scale
  std::uint64_t scale_cols = 1;                             // FP8: scale elements per scale row

  const void* g_idx = nullptr;  // group of every column of K; null: k / group_size
  DeviceIndex g_idx_type = DeviceIndex::kNone;

  std::uint64_t row_begin = 0;  // rows [row_begin, row_end) of the weight are written
  std::uint64_t row_end = 0;
  void* out = nullptr;  // [row_end - row_begin, K] of out_type
  DeviceFloat out_type = DeviceFloat::kF32;
};

// Enqueues the dequantization on `stream` (a cudaStream_t of `device`), making `device`
// current for the launch (and leaving it so). 0 once enqueued, else non-zero with a message.
int launch_dequantize(const DequantArgs& args, int device, void* stream, char* message, std::size_t message_size);

}  // namespace qload::formats::detail
