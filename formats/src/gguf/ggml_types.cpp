#include "ggml_types.hpp"

#include <array>

namespace qload::formats::gguf {
namespace {

constexpr std::uint32_t kQK = 256;  // elements per K-quant super-block

// From ggml.h / ggml-common.h; equal to gguf-py 0.19's GGML_QUANT_SIZES (checked by
// python/tests/gguf/test_gguf.py) but for Q8_1: ggml's block_q8_1 holds d and s as f16 (36
// bytes) since 2023, gguf-py still says two f32 (40). llama.cpp is the reader of record.
constexpr std::array<GgmlType, 34> kTypes{{
    {0, "F32", 1, 4, DType::kF32},
    {1, "F16", 1, 2, DType::kF16},
    {2, "Q4_0", 32, 2 + 16, std::nullopt},
    {3, "Q4_1", 32, 2 + 2 + 16, std::nullopt},
    {6, "Q5_0", 32, 2 + 4 + 16, std::nullopt},
    {7, "Q5_1", 32, 2 + 2 + 4 + 16, std::nullopt},
    {8, "Q8_0", 32, 2 + 32, std::nullopt},
    {9, "Q8_1", 32, 2 + 2 + 32, std::nullopt},
    {10, "Q2_K", kQK, 2 + 2 + kQK / 16 + kQK / 4, std::nullopt},
    {11, "Q3_K", kQK, 2 + kQK / 4 + kQK / 8 + 12, std::nullopt},
    {12, "Q4_K", kQK, 2 + 2 + kQK / 2 + 12, std::nullopt},
    {13, "Q5_K", kQK, 2 + 2 + kQK / 2 + kQK / 8 + 12, std::nullopt},
    {14, "Q6_K", kQK, 2 + kQK / 2 + kQK / 4 + kQK / 16, std::nullopt},
    {15, "Q8_K", kQK, 4 + kQK + kQK / 8, std::nullopt},
    {16, "IQ2_XXS", kQK, 2 + kQK / 4, std::nullopt},
    {17, "IQ2_XS", kQK, 2 + kQK / 4 + kQK / 32, std::nullopt},
    {18, "IQ3_XXS", kQK, 2 + kQK / 4 + kQK / 8, std::nullopt},
    {19, "IQ1_S", kQK, 2 + kQK / 8 + kQK / 16, std::nullopt},
    {20, "IQ4_NL", 32, 2 + 16, std::nullopt},
    {21, "IQ3_S", kQK, 2 + kQK / 4 + kQK / 8 + kQK / 32 + 4, std::nullopt},
    {22, "IQ2_S", kQK, 2 + kQK / 4 + kQK / 16, std::nullopt},
    {23, "IQ4_XS", kQK, 2 + 2 + kQK / 2 + kQK / 64, std::nullopt},
    {24, "I8", 1, 1, DType::kI8},
    {25, "I16", 1, 2, DType::kI16},
    {26, "I32", 1, 4, DType::kI32},
    {27, "I64", 1, 8, DType::kI64},
    {28, "F64", 1, 8, DType::kF64},
    {29, "IQ1_M", kQK, kQK / 8 + kQK / 16 + kQK / 32, std::nullopt},
    {30, "BF16", 1, 2, DType::kBF16},
    {34, "TQ1_0", kQK, 2 + 4 * 13, std::nullopt},
    {35, "TQ2_0", kQK, 2 + 64, std::nullopt},
    {39, "MXFP4", 32, 1 + 16, std::nullopt},
    {40, "NVFP4", 64, 4 + 32, std::nullopt},
    {41, "Q1_0", 128, 2 + 16, std::nullopt},
}};

}  // namespace

const GgmlType* find_ggml_type(std::uint32_t id) noexcept {
  for (const GgmlType& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

}  // namespace qload::formats::gguf
