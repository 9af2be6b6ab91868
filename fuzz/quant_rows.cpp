// libFuzzer target, differential: the x86 row decoders (rows_avx512.cpp, rows_avx2.cpp) against
// the portable ones on any bytes; FP8's BF16 / F16 tables (fp8.cpp) against its f32 elements
// narrowed by convert(); GPTQ and AWQ GEMV written straight in each output dtype (rows_avx2.cpp)
// against the portable F32 decoders narrowed by convert(). The input picks a format (a GGML block
// type, OCP MXFP4, NVFP4, FP8, GPTQ or AWQ GEMV), a few rows and columns, for NVFP4 the global
// scale and its use, for FP8 the code dtype and the scale layout, for GPTQ the width, version,
// zero convention, group size and scale dtype; the rest are the blocks, codes and scales (any
// bytes are valid ones). Each instruction set this CPU has must write the portable decoder's
// bytes for F32, BF16 and F16, and nothing past the rows: a difference aborts, naming the format,
// output and first differing byte. One freedom: where two NaNs meet in one operation (a NaN scale
// and a NaN minimum), IEEE 754 lets the result be either, and compilers may swap the operands of
// an addition, so an element that is NaN on both sides is equal whatever its payload. (A NaN
// global scale stays with the portable NVFP4 decoder, as the dispatch does.)
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "gguf/ggml_types.hpp"
#include "qload/formats/convert.hpp"
#include "qload/formats/quant_codec.hpp"
#include "quant/decoders.hpp"
#include "quant/fp4_rows.hpp"
#include "quant/row_decoders.hpp"

namespace {

using namespace qload;
using namespace qload::formats::detail;

constexpr DType kOutputs[] = {DType::kF32, DType::kBF16, DType::kF16};
constexpr std::size_t kSentinel = 16;  // bytes past the rows that must stay untouched

std::size_t out_bytes(std::uint64_t elems, DType dtype) {
  return static_cast<std::size_t>(elems * (dtype_info(dtype).bits / 8));
}

// Whether element i (of `dtype`) is a NaN in these bytes.
bool is_nan(const std::vector<std::byte>& bytes, std::size_t i, DType dtype) {
  if (dtype == DType::kF32) {
    std::uint32_t x = 0;
    std::memcpy(&x, bytes.data() + 4 * i, 4);
    return (x & 0x7fffffffu) > 0x7f800000u;
  }
  std::uint16_t x = 0;
  std::memcpy(&x, bytes.data() + 2 * i, 2);
  return (x & 0x7fffu) > (dtype == DType::kBF16 ? 0x7f80u : 0x7c00u);
}

// The first byte where `got` differs from `want` other than inside an element NaN in both, or
// want.size().
std::size_t first_difference(const std::vector<std::byte>& want, const std::vector<std::byte>& got, DType dtype) {
  const std::size_t width = dtype_info(dtype).bits / 8, elements = (want.size() - kSentinel) / width;
  for (std::size_t at = 0; at < want.size(); ++at) {
    if (want[at] == got[at]) continue;
    const std::size_t i = at / width;
    if (i < elements && is_nan(want, i, dtype) && is_nan(got, i, dtype)) {
      at = (i + 1) * width - 1;
      continue;
    }
    return at;
  }
  return want.size();
}

[[noreturn]] void differ(const char* what, DType dtype, const std::vector<std::byte>& want,
                         const std::vector<std::byte>& got) {
  const std::size_t at = first_difference(want, got, dtype);
  std::fprintf(stderr, "%s to %s: the fast decoder differs from the reference one at byte %zu (%02x, not %02x)\n", what,
               std::string(dtype_name(dtype)).c_str(), at, static_cast<unsigned>(got[at]),
               static_cast<unsigned>(want[at]));
  std::abort();
}

// GGML: type id, rows 1-4, 1-3 blocks a row.
void ggml_case(std::uint8_t type_byte, std::uint8_t shape, std::span<const std::uint8_t> rest) {
  const formats::gguf::GgmlType* type = formats::gguf::find_ggml_type(type_byte % 42);
  if (type == nullptr || type->block_elems <= 1) return;
  const std::uint64_t rows = 1 + shape % 4, blocks = 1 + (shape >> 2) % 3;
  const std::uint64_t cols = blocks * type->block_elems, row_bytes = blocks * type->block_bytes;
  if (rest.size() < rows * row_bytes) return;
  for (const DType dtype : kOutputs) {
    const std::size_t bytes = out_bytes(rows * cols, dtype);
    std::vector<std::byte> want(bytes + kSentinel, std::byte{0x5a});
    if (!decode_block_rows_portable(type->id, rest.data(), row_bytes, cols, 0, rows, dtype, want.data())) continue;
    struct Isa {
      const char* name;
      decltype(&decode_block_rows_avx2) decode;
    };
    for (const Isa isa : {Isa{"AVX-512", decode_block_rows_avx512}, Isa{"AVX2", decode_block_rows_avx2}}) {
      std::vector<std::byte> got(bytes + kSentinel, std::byte{0x5a});
      if (isa.decode(type->id, rest.data(), row_bytes, cols, 0, rows, dtype, got.data()) &&
          first_difference(want, got, dtype) != want.size())
        differ((std::string(type->name) + " (" + isa.name + ")").c_str(), dtype, want, got);
    }
  }
}

// OCP MXFP4 (group 32) or NVFP4 (group 16): rows 1-4, 1-19 groups a row; NVFP4 takes the
// global scale from 4 input bytes and whether it multiplies from one bit.
void fp4_case(bool nvfp4, std::uint8_t shape, std::span<const std::uint8_t> rest) {
  const std::uint64_t group = nvfp4 ? 16 : 32, rows = 1 + shape % 4, groups = 1 + (shape >> 2) % 19;
  const std::uint64_t cols = groups * group;
  DequantArgs a;
  if (nvfp4) {
    if (rest.size() < 5) return;
    std::uint32_t bits = 0;
    std::memcpy(&bits, rest.data(), 4);
    a.global_scale = std::bit_cast<float>(bits);
    a.global_multiplies = (rest[4] & 1) != 0;
    rest = rest.subspan(5);
  }
  const std::uint64_t code_bytes = rows * cols / 2, scale_bytes = rows * groups;
  if (rest.size() < code_bytes + scale_bytes) return;
  a.cols = cols;
  a.groups = groups;
  a.codes = rest.data();
  a.scale_codes = rest.data() + code_bytes;
  std::vector<float> f32(static_cast<std::size_t>(rows * cols));
  if (nvfp4)
    decode_fp4_rows<element::Nvfp4>(a, group, 0, rows, f32.data());
  else
    decode_fp4_rows<element::Mxfp4>(a, group, 0, rows, f32.data());
  for (const DType dtype : kOutputs) {
    const std::size_t bytes = out_bytes(rows * cols, dtype);
    std::vector<std::byte> want(bytes + kSentinel, std::byte{0x5a});
    if (!formats::convert(std::as_bytes(std::span(f32)), DType::kF32, std::span(want).first(bytes), dtype)) continue;
    const auto check = [&](const char* isa, auto decode) {
      std::vector<std::byte> got(bytes + kSentinel, std::byte{0x5a});
      if (decode(got.data()) && first_difference(want, got, dtype) != want.size()) differ(isa, dtype, want, got);
    };
    if (nvfp4) {
      if (std::isnan(a.global_scale)) continue;  // the portable decoder's own case
      check("NVFP4 (AVX-512)", [&](std::byte* out) { return decode_nvfp4_rows_avx512(a, 0, rows, dtype, out); });
      check("NVFP4 (AVX2)", [&](std::byte* out) { return decode_nvfp4_rows_avx2(a, 0, rows, dtype, out); });
    } else {
      check("MXFP4 (AVX-512)", [&](std::byte* out) {
        return decode_mxfp4_rows_avx512(a.codes, a.scale_codes, cols, 0, rows, dtype, out);
      });
      check("MXFP4 (AVX2)",
            [&](std::byte* out) { return decode_mxfp4_rows_avx2(a.codes, a.scale_codes, cols, 0, rows, dtype, out); });
    }
  }
}

// FP8: E4M3 or E5M2 codes (bit 0 of `kind`), a per-tensor, per-row, block or group scale (bits
// 1-2) of F32 scales from the input, rows 1-8 and 64-2048 columns; block sides and group sizes
// from bits 3-7, so that some scales cover 1024 elements or more (the tables) and some fewer (the
// f32 path). dequantize_rows to BF16 and F16 must be its F32 elements narrowed by convert().
void fp8_case(std::uint8_t kind, std::uint8_t shape, std::span<const std::uint8_t> rest) {
  using formats::LogicalTensor;
  using formats::QuantScheme;
  using formats::ScaleLayout;
  const std::uint64_t rows = 1 + shape % 8, cols = 64 * (1 + (shape >> 3) % 32);
  constexpr ScaleLayout kLayouts[] = {ScaleLayout::kTensor, ScaleLayout::kRow, ScaleLayout::kBlock,
                                      ScaleLayout::kGroup};
  LogicalTensor t;
  t.name = "fuzz.weight";
  t.rows = rows;
  t.cols = cols;
  t.params.scheme = QuantScheme::kFp8;
  t.params.bits = 8;
  t.params.weight_dtype = (kind & 1) != 0 ? DType::kF8_E5M2 : DType::kF8_E4M3;
  t.params.scale_dtype = DType::kF32;
  t.params.scale_layout = kLayouts[(kind >> 1) % 4];
  const std::uint32_t side = 1u << (kind >> 3) % 8;  // 1-128
  std::uint64_t scales = 1;
  Shape scale_shape{1};
  switch (t.params.scale_layout) {
    case ScaleLayout::kRow:
      scales = rows;
      scale_shape = Shape{rows, 1};
      break;
    case ScaleLayout::kBlock:
      t.params.block_rows = side;
      t.params.block_cols = side * 8;
      scales = (rows + side - 1) / side * ((cols + side * 8 - 1) / (side * 8));
      scale_shape = Shape{(rows + side - 1) / side, (cols + side * 8 - 1) / (side * 8)};
      break;
    case ScaleLayout::kGroup:
      t.params.group_size = side * 16;
      scales = rows * ((cols + side * 16 - 1) / (side * 16));
      scale_shape = Shape{rows, (cols + side * 16 - 1) / (side * 16)};
      break;
    default: break;
  }
  if (rest.size() < rows * cols + scales * 4) return;
  const std::vector<formats::PartBytes> parts = {
      {"weight", t.params.weight_dtype, Shape{rows, cols}, std::as_bytes(rest.first(rows * cols))},
      {"weight_scale", DType::kF32, scale_shape, std::as_bytes(rest.subspan(rows * cols, scales * 4))}};
  std::vector<float> f32(static_cast<std::size_t>(rows * cols));
  if (!formats::dequantize_rows(t, parts, 0, rows, DType::kF32, std::as_writable_bytes(std::span(f32)))) std::abort();
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    const std::size_t bytes = out_bytes(rows * cols, dtype);
    std::vector<std::byte> want(bytes + kSentinel, std::byte{0x5a}), got(bytes + kSentinel, std::byte{0x5a});
    if (!formats::convert(std::as_bytes(std::span(f32)), DType::kF32, std::span(want).first(bytes), dtype))
      std::abort();
    if (!formats::dequantize_rows(t, parts, 0, rows, dtype, std::span(got).first(bytes))) std::abort();
    if (first_difference(want, got, dtype) != want.size()) differ("FP8 (tables)", dtype, want, got);
  }
}

// GPTQ: version 1 or 2 and v1's zero convention (bits 0-1 of `kind`), the group size (16, 24,
// 32, 128 or one group: bits 2-4; 24 is left to the portable decoder), the scale dtype (bits 5-6)
// and act-order (bit 7: a g_idx of input bytes modulo the group count); N 1-40 from `shape`; K
// 32-640 and the width (4, 2, 8 or 3 bits; 3 is the portable decoder's) from the next byte; the
// rest are qweight, qzeros, scales (and g_idx's bytes). dequantize_rows to F32, BF16 and F16
// must be the portable F32 decode (decoders.hpp dequantize_gptq), narrowed by convert() for the
// last two.
void gptq_case(std::uint8_t kind, std::uint8_t shape, std::span<const std::uint8_t> rest) {
  using formats::LogicalTensor;
  using formats::QuantScheme;
  if (rest.empty()) return;
  constexpr unsigned kBits[] = {4, 2, 8, 3};
  const std::uint64_t n = 1 + shape % 40, k = 32 * (1 + rest[0] % 20);
  const unsigned bits = kBits[rest[0] / 20 % 4];
  rest = rest.subspan(1);
  constexpr std::uint64_t kGroups[] = {16, 24, 32, 128, 0, 0, 0, 0};
  constexpr DType kScales[] = {DType::kF16, DType::kBF16, DType::kF32, DType::kF32};
  LogicalTensor t;
  t.name = "fuzz.qweight";
  t.rows = n;
  t.cols = k;
  t.params.scheme = QuantScheme::kGptq;
  t.params.bits = bits;
  t.params.sym = false;
  t.params.gptq_version = (kind & 1) != 0 ? 1 : 2;
  t.params.gptq_v1_whole_word = (kind & 2) != 0;
  t.params.group_size = kGroups[(kind >> 2) % 8];
  const DType scale_dtype = kScales[(kind >> 5) % 4];
  const std::uint64_t group = t.params.group_size == 0 || t.params.group_size > k ? k : t.params.group_size;
  const std::uint64_t groups = (k + group - 1) / group, zero_words = (n * bits + 31) / 32;
  const std::uint64_t weight_bytes = k * bits / 32 * n * 4, zero_bytes = groups * zero_words * 4,
                      scale_bytes = groups * n * (dtype_info(scale_dtype).bits / 8);
  const bool act_order = (kind & 0x80) != 0;
  const std::uint64_t index_bytes = act_order ? k : 0;
  if (rest.size() < weight_bytes + zero_bytes + scale_bytes + index_bytes) return;
  const auto bytes = std::as_bytes(rest);
  std::vector<formats::PartBytes> parts = {
      {"qweight", DType::kI32, Shape{k * bits / 32, n}, bytes.first(weight_bytes)},
      {"qzeros", DType::kI32, Shape{groups, zero_words}, bytes.subspan(weight_bytes, zero_bytes)},
      {"scales", scale_dtype, Shape{groups, n}, bytes.subspan(weight_bytes + zero_bytes, scale_bytes)}};
  std::vector<std::int32_t> g_idx;
  for (std::uint64_t i = 0; i < index_bytes; ++i)
    g_idx.push_back(static_cast<std::int32_t>(rest[weight_bytes + zero_bytes + scale_bytes + i] % groups));
  if (act_order) parts.push_back({"g_idx", DType::kI32, Shape{k}, std::as_bytes(std::span(g_idx))});
  std::vector<float> f32(static_cast<std::size_t>(n * k));
  if (!dequantize_gptq(t, parts, 0, n, f32)) std::abort();
  for (const DType dtype : kOutputs) {
    const std::size_t out = out_bytes(n * k, dtype);
    std::vector<std::byte> want(out + kSentinel, std::byte{0x5a}), got(out + kSentinel, std::byte{0x5a});
    if (!formats::convert(std::as_bytes(std::span(f32)), DType::kF32, std::span(want).first(out), dtype)) std::abort();
    if (!formats::dequantize_rows(t, parts, 0, n, dtype, std::span(got).first(out))) std::abort();
    if (first_difference(want, got, dtype) != want.size()) differ("GPTQ (direct)", dtype, want, got);
  }
}

// AWQ GEMV (rows of adjacent 4-bit words, through the GPTQ rows' decoder): the group size (32,
// 64, 128 or 256: bits 0-1 of `kind`) and the scale dtype (bits 2-3), N 1-40 from `shape`, K
// 32-640 from the next byte; the rest are qweight, qzeros and scales. As gptq_case, against the
// portable F32 decode (dequantize_awq) narrowed by convert().
void awq_gemv_case(std::uint8_t kind, std::uint8_t shape, std::span<const std::uint8_t> rest) {
  using formats::LogicalTensor;
  using formats::QuantScheme;
  if (rest.empty()) return;
  constexpr std::uint64_t kGroups[] = {32, 64, 128, 256};
  constexpr DType kScales[] = {DType::kF16, DType::kBF16, DType::kF32, DType::kF32};
  const std::uint64_t n = 1 + shape % 40, k = 32 * (1 + rest[0] % 20), group = kGroups[kind % 4];
  rest = rest.subspan(1);
  const DType scale_dtype = kScales[(kind >> 2) % 4];
  const std::uint64_t groups = (k + group - 1) / group, multiple = group >= 128 ? 1 : group == 64 ? 2 : 4;
  const std::uint64_t zero_words = ((groups + 7) / 8 + multiple - 1) / multiple * multiple;  // AutoAWQ's width
  LogicalTensor t;
  t.name = "fuzz.qweight";
  t.rows = n;
  t.cols = k;
  t.params.scheme = QuantScheme::kAwqGemv;
  t.params.bits = 4;
  t.params.group_size = group;
  const std::uint64_t weight_bytes = n * k / 8 * 4, zero_bytes = n * zero_words * 4,
                      scale_bytes = n * 8 * zero_words * (dtype_info(scale_dtype).bits / 8);
  if (rest.size() < weight_bytes + zero_bytes + scale_bytes) return;
  const auto bytes = std::as_bytes(rest);
  const std::vector<formats::PartBytes> parts = {
      {"qweight", DType::kI32, Shape{n, k / 8}, bytes.first(weight_bytes)},
      {"qzeros", DType::kI32, Shape{n, zero_words}, bytes.subspan(weight_bytes, zero_bytes)},
      {"scales", scale_dtype, Shape{n, 8 * zero_words}, bytes.subspan(weight_bytes + zero_bytes, scale_bytes)}};
  std::vector<float> f32(static_cast<std::size_t>(n * k));
  if (!dequantize_awq(t, parts, 0, n, f32)) return;  // a group size AutoAWQ does not define (one of K)
  for (const DType dtype : kOutputs) {
    const std::size_t out = out_bytes(n * k, dtype);
    std::vector<std::byte> want(out + kSentinel, std::byte{0x5a}), got(out + kSentinel, std::byte{0x5a});
    if (!formats::convert(std::as_bytes(std::span(f32)), DType::kF32, std::span(want).first(out), dtype)) std::abort();
    if (!formats::dequantize_rows(t, parts, 0, n, dtype, std::span(got).first(out))) std::abort();
    if (first_difference(want, got, dtype) != want.size()) differ("AWQ GEMV (direct)", dtype, want, got);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::span<const std::uint8_t> rest(data + 3, size - 3);
  switch (data[0] % 6) {
    case 0: ggml_case(data[1], data[2], rest); break;
    case 1: fp4_case(false, data[2], rest); break;
    case 2: fp4_case(true, data[2], rest); break;
    case 3: fp8_case(data[1], data[2], rest); break;
    case 4: gptq_case(data[1], data[2], rest); break;
    default: awq_gemv_case(data[1], data[2], rest); break;
  }
  return 0;
}
