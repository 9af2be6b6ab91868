// GGML block-quantized weights (QuantScheme::kGgml): the logical weight a GGUF tensor makes,
// and the CPU decoders, which run ggml_element.hpp's arithmetic a block at a time: hand-written
// AVX2 (rows_avx2.cpp) where the CPU has it, else ggml_rows.hpp's whole-block loops where
// there is one, else value() per element (a sub-block's scale once).
#include <fmt/format.h>

#include "../gguf/ggml_types.hpp"
#include "decoders.hpp"
#include "dequantize_element.hpp"
#include "ggml_rows.hpp"
#include "qload/formats/convert.hpp"
#include "row_decoders.hpp"

namespace qload::formats::detail {
namespace {

Error weight_error(const LogicalTensor& t, Errc code, std::string message) {
  return Error(code, std::move(message)).with_tensor(t.name);
}

struct BlockGeometry {
  const gguf::GgmlType* type = nullptr;
  std::uint64_t row_bytes = 0;
};

// The weight's block type and bytes per row, after checking that a row is whole blocks.
Result<BlockGeometry> block_geometry(const LogicalTensor& t) {
  const gguf::GgmlType* type = gguf::find_ggml_type(t.params.ggml_type);
  if (type == nullptr || type->dtype)
    return fail(weight_error(t, Errc::kInvalidArgument,
                             fmt::format("ggml type {} is not a block-quantized type", t.params.ggml_type)));
  if (t.cols % type->block_elems != 0)
    return fail(weight_error(
        t, Errc::kCorrupt,
        fmt::format("rows of {} elements are not whole {} blocks of {}", t.cols, type->name, type->block_elems)));
  return BlockGeometry{.type = type, .row_bytes = t.cols / type->block_elems * type->block_bytes};
}

// One block of T decoded to f32 at `y`.
template <typename T>
[[gnu::always_inline]] inline void block_f32(const std::uint8_t* b, float* y) {
  if constexpr (ggml::HasRows<T>) {  // ggml_rows.hpp: vectorised runs
    ggml::Rows::block(T{}, b, y);
  } else if constexpr (requires { typename T::Scale; }) {  // each sub-block's scale once
    for (unsigned j = 0; j < T::kElems / T::kSub; ++j) {
      const typename T::Scale s = T::scale(b, j);
      for (unsigned i = j * T::kSub; i < (j + 1) * T::kSub; ++i) *y++ = T::value(s, b, i);
    }
  } else {
    for (unsigned i = 0; i < T::kElems; ++i) *y++ = T::value(b, i);
  }
}

}  // namespace

// A 16-bit output goes through 16 KiB of f32 on the stack, so it never leaves L1.
Status decode_block_rows_portable(std::uint32_t type, const std::uint8_t* base, std::uint64_t row_bytes,
                                  std::uint64_t cols, std::uint64_t row_begin, std::uint64_t row_end, DType dtype,
                                  std::byte* out) {
  Status narrowed;
  ggml::with_block_type(type, [&](auto block) {
    using T = decltype(block);
    const auto rows = [&](auto each_block) {
      for (std::uint64_t n = row_begin; n < row_end; ++n) {
        const std::uint8_t* b = base + n * row_bytes;
        for (std::uint64_t k = 0; k < cols; k += T::kElems, b += T::kBytes) each_block(b);
      }
    };
    if (dtype == DType::kF32) {
      auto* y = reinterpret_cast<float*>(out);  // aligned: dequantize_rows checked
      rows([&](const std::uint8_t* b) {
        block_f32<T>(b, y);
        y += T::kElems;
      });
      return;
    }
    // 16-bit output: blocks decode into a few KiB of f32 that convert() (the conversion codec,
    // itself cloned per ISA) narrows while they are still in L1.
    constexpr unsigned kChunk = 4096 / T::kElems * T::kElems;
    alignas(64) float f32[kChunk];
    unsigned held = 0;
    const auto flush = [&] {
      const auto in = std::as_bytes(std::span(f32, held));
      if (narrowed) narrowed = convert(in, DType::kF32, std::span(out, 2 * std::size_t{held}), dtype);
      out += 2 * std::size_t{held};
      held = 0;
    };
    rows([&](const std::uint8_t* b) {
      block_f32<T>(b, f32 + held);
      held += T::kElems;
      if (held == kChunk) flush();
    });
    flush();
  });
  return narrowed;
}

bool ggml_decodable(std::uint32_t ggml_type) {
  return ggml::with_block_type(ggml_type, [](auto) {});
}

Result<LogicalTensor> ggml_weight(const Catalog& catalog, std::uint32_t index) {
  const TensorEntry& e = catalog.tensors[index];
  const gguf::GgmlType* type = gguf::find_ggml_type(e.ggml_type.value_or(0));
  // The driver stored the blocks as U8 [..., row bytes] of a known block type.
  if (type == nullptr || type->dtype || e.dtype != DType::kU8 || e.shape.rank() == 0 ||
      e.shape[e.shape.rank() - 1] % type->block_bytes != 0)
    return fail(Error(Errc::kInternal, "not a GGML block tensor").with_tensor(e.name));
  std::vector<std::uint64_t> dims(e.shape.dims().begin(), e.shape.dims().end());
  dims.back() = dims.back() / type->block_bytes * type->block_elems;
  LogicalTensor t{.name = e.name,
                  .params = {.scheme = QuantScheme::kGgml, .bits = 0, .weight_dtype = DType::kU8},
                  .rows = 1,
                  .cols = dims.back(),
                  .shape = Shape(dims),
                  .parts = {{"blocks", index}}};
  t.params.ggml_type = type->id;
  // The nominal bits are the first digit of the name (Q4_K, IQ2_XXS, TQ1_0, MXFP4); the blocks'
  // scales add a fraction of a bit.
  for (const char c : type->name)
    if (c >= '1' && c <= '9') {
      t.params.bits = static_cast<std::uint32_t>(c - '0');
      break;
    }
  // The parser bounded numel, not this product: with K = 0 the other dims may be anything.
  for (std::size_t d = 0; d + 1 < dims.size(); ++d) {
    auto rows = checked_mul(t.rows, dims[d]);
    if (!rows) return fail(Error(Errc::kOverflow, "its row count exceeds 2^64").with_tensor(e.name));
    t.rows = *rows;
  }
  if (dims.size() == 3) t.experts = dims[0];
  return t;
}

Status dequantize_ggml(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, DType dtype, std::span<std::byte> out) {
  QLOAD_ASSIGN_OR_RETURN(const BlockGeometry g, block_geometry(t));
  QLOAD_ASSIGN_OR_RETURN(const PartBytes* blocks, find_part(t, parts, "blocks"));
  if (blocks->dtype != DType::kU8 || blocks->bytes.size() != t.rows * g.row_bytes)
    return fail(weight_error(t, Errc::kCorrupt,
                             fmt::format("its blocks are {} bytes of {}, not {} rows of {} bytes", blocks->bytes.size(),
                                         dtype_name(blocks->dtype), t.rows, g.row_bytes)));
  const auto* base = reinterpret_cast<const std::uint8_t*>(blocks->bytes.data());
  if (!ggml_decodable(g.type->id))
    return fail(weight_error(t, Errc::kUnsupported,
                             fmt::format("ggml type {}: qload does not dequantize it (its blocks load as they are "
                                         "without --dequantize)",
                                         g.type->name)));
  if (decode_block_rows_avx512(g.type->id, base, g.row_bytes, t.cols, row_begin, row_end, dtype, out.data()) ||
      decode_block_rows_avx2(g.type->id, base, g.row_bytes, t.cols, row_begin, row_end, dtype, out.data()))
    return {};
  return decode_block_rows_portable(g.type->id, base, g.row_bytes, t.cols, row_begin, row_end, dtype, out.data());
}

Status dequantize_ggml(const LogicalTensor& t, std::span<const PartBytes> parts, std::uint64_t row_begin,
                       std::uint64_t row_end, std::span<float> out) {
  return dequantize_ggml(t, parts, row_begin, row_end, DType::kF32, std::as_writable_bytes(out));
}

QuantLayoutText ggml_layout(const LogicalTensor& t) {
  const gguf::GgmlType* type = gguf::find_ggml_type(t.params.ggml_type);
  const std::string_view name = type != nullptr ? type->name : "?";
  // Scales live in the blocks: per block of 32 (the "_0"/"_1" types), or per sub-block of a
  // 256-element super-block whose own f16 scale multiplies the sub-block's small one.
  const auto sub = [&](unsigned elems, unsigned bits) {
    return fmt::format("per-block {} ({}-bit, times one F16 scale per 256), in the {} blocks", elems, bits, name);
  };
  const std::string in_block = fmt::format("per-block {}, in the {} blocks", type ? type->block_elems : 0, name);
  QuantLayoutText out{.scales = in_block, .scale_dtype = "F16", .zero_points = "none (symmetric)"};
  switch (t.params.ggml_type) {
    case ggml::Q4_1::kId:
    case ggml::Q5_1::kId: out.zero_points = "per-block 32, an F16 minimum added (x = d*q + m)"; break;
    case ggml::Q2_K::kId:
      out.scales = sub(16, 4);
      out.zero_points = "per-block 16, 4-bit minimums times one F16 dmin per 256, subtracted";
      break;
    case ggml::Q3_K::kId: out.scales = sub(16, 6); break;
    case ggml::Q4_K::kId:
    case ggml::Q5_K::kId:
      out.scales = sub(32, 6);
      out.zero_points = "per-block 32, 6-bit minimums times one F16 dmin per 256, subtracted";
      break;
    case ggml::Q6_K::kId: out.scales = sub(16, 8); break;
    case ggml::IQ4_XS::kId: out.scales = sub(32, 6); break;
    case ggml::Q8_K::kId: out.scale_dtype = "F32"; break;
    case ggml::MXFP4::kId: out.scale_dtype = "E8M0"; break;
    case ggml::NVFP4::kId:
      out.scales = fmt::format("per-block 16, in the {} blocks", name);
      out.scale_dtype = "UE4M3";
      break;
    default: break;
  }
  return out;
}

}  // namespace qload::formats::detail
