// One module's stored parts checked against its rule: every dtype and shape follows from the
// bits, the group size and the K and N read off the anchor part (qweight, weight_packed or
// weight). Shapes: ../shared/formats.md sections 1-4. A mismatch names the part, the expected
// and the found dtype and shape.
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "detect.hpp"
#include "located_error.hpp"

namespace qload::formats::detail {
namespace {

constexpr std::array kScaleDtypes = {DType::kF16, DType::kBF16, DType::kF32};
constexpr std::array kI32 = {DType::kI32};
constexpr std::array kI8 = {DType::kI8};
constexpr std::array kFp8Dtypes = {DType::kF8_E4M3, DType::kF8_E5M2};
constexpr std::array kShapeDtypes = {DType::kI64, DType::kI32};
constexpr std::array kU8 = {DType::kU8};
constexpr std::array kE4M3 = {DType::kF8_E4M3};
constexpr std::array kF32 = {DType::kF32};

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

std::string dtypes_text(std::span<const DType> dtypes) {
  std::string out;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    if (i > 0) out += i + 1 == dtypes.size() ? " or " : ", ";
    out += dtype_name(dtypes[i]);
  }
  return out;
}

std::string shapes_text(std::span<const Shape> shapes) {
  std::string out;
  for (std::size_t i = 0; i < shapes.size(); ++i) out += (i > 0 ? " or " : "") + shapes[i].to_string();
  return out;
}

// The module being built: its rule, its tensors, and the logical tensor so far.
struct Builder {
  const Catalog& catalog;
  const ModuleTensors& module;
  const Rule& rule;
  LogicalTensor out;
  std::string facts;  // "4-bit, group 128, K 4096, N 11008": what the expected shapes follow from
  // Stacked experts: each part as one expert's slice of it (the leading dim dropped), which
  // the per-scheme checks below see in place of the catalog's entry.
  std::uint64_t experts = 0;
  std::map<std::uint32_t, TensorEntry> per_expert;

  const TensorEntry& tensor(std::uint32_t index) const {
    const auto it = per_expert.find(index);
    return it == per_expert.end() ? catalog.tensors[index] : it->second;
  }

  Error mismatch(std::string_view role, const TensorEntry& t, std::string_view dtypes, std::string_view shapes) const {
    const std::string per = experts > 0 ? fmt::format(" per expert of {}", experts) : "";
    Error error = Error(Errc::kCorrupt, fmt::format("{} part {}{}: expected {} {}{}, found {} {}{}", rule.label, role,
                                                    facts.empty() ? "" : " (" + facts + ")", dtypes, shapes, per,
                                                    dtype_name(t.dtype), t.shape.to_string(), per))
                      .with_tensor(t.name);
    if (t.file < catalog.files.size()) return std::move(error).with_file(catalog.files[t.file].path);
    return error;
  }

  Error missing(std::string_view role) const {
    return Error(Errc::kCorrupt, fmt::format("quantized weight {} has no part {} ({})", quote_name(out.name),
                                             quote_name(module.module + "." + std::string(role)), rule.label))
        .with_tensor(out.name);
  }

  // Checks part `role` when present (kCorrupt when absent and required) and records it.
  Result<const TensorEntry*> expect(std::string_view role, std::span<const DType> dtypes, std::span<const Shape> shapes,
                                    bool required = true) {
    const std::optional<std::uint32_t> index = module.find(role);
    if (!index) {
      if (required) return fail(missing(role));
      return nullptr;
    }
    const TensorEntry& t = tensor(*index);
    const bool dtype_ok = std::find(dtypes.begin(), dtypes.end(), t.dtype) != dtypes.end();
    const bool shape_ok = std::find(shapes.begin(), shapes.end(), t.shape) != shapes.end();
    if (!dtype_ok || !shape_ok) return fail(mismatch(role, t, dtypes_text(dtypes), shapes_text(shapes)));
    out.parts.emplace_back(std::string(role), *index);
    return &t;
  }
  Result<const TensorEntry*> expect(std::string_view role, std::span<const DType> dtypes, const Shape& shape,
                                    bool required = true) {
    return expect(role, dtypes, std::span<const Shape>(&shape, 1), required);
  }

  // The anchor part: its dtype in `dtypes`, rank 2, no zero dimension. `form` names the shape.
  Result<const TensorEntry*> anchor(std::string_view role, std::span<const DType> dtypes, std::string_view form) {
    const std::uint32_t index = *module.find(role);
    const TensorEntry& t = tensor(index);
    const bool ok = std::find(dtypes.begin(), dtypes.end(), t.dtype) != dtypes.end() && t.shape.rank() == 2 &&
                    t.shape[0] > 0 && t.shape[1] > 0;
    if (!ok) return fail(mismatch(role, t, dtypes_text(dtypes), form));
    out.parts.emplace_back(std::string(role), index);
    return &t;
  }

  // The configured group size for this K (-1: one group of all of K).
  std::uint64_t group(std::uint64_t k) const {
    return rule.group_size > 0 ? static_cast<std::uint64_t>(rule.group_size) : k;
  }

  Status input_scale() {
    static const std::array<Shape, 2> kScalar = {Shape{}, Shape{1}};
    QLOAD_TRY(expect("input_scale", kScaleDtypes, kScalar, false));
    return {};
  }
};

Result<LogicalTensor> build_gptq(Builder& b) {
  const std::uint32_t bits = b.rule.bits;
  QLOAD_ASSIGN_OR_RETURN(const TensorEntry* q, b.anchor("qweight", kI32, fmt::format("[K*{}/32, N]", bits)));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t rows32, checked_mul(q->shape[0], 32));
  if (rows32 % bits != 0)
    return fail(b.mismatch("qweight", *q, "I32", fmt::format("[K*{}/32, N] (rows a multiple of {})", bits, bits)));
  const std::uint64_t k = rows32 / bits;
  const std::uint64_t n = q->shape[1];
  const std::uint64_t g = b.group(k);
  const std::uint64_t groups = ceil_div(k, g);
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n_bits, checked_mul(n, bits));
  b.facts = fmt::format("{}-bit, group {}, K {}, N {}", bits, g, k, n);
  QLOAD_TRY(b.expect("qzeros", kI32, Shape{groups, ceil_div(n_bits, 32)}));
  QLOAD_ASSIGN_OR_RETURN(const TensorEntry* scales, b.expect("scales", kScaleDtypes, Shape{groups, n}));
  QLOAD_TRY(b.expect("g_idx", kI32, Shape{k}, b.rule.g_idx_required));
  b.out.rows = n;
  b.out.cols = k;
  b.out.params = QuantParams{.scheme = QuantScheme::kGptq,
                             .bits = bits,
                             .group_size = g,
                             .sym = b.rule.sym,
                             .gptq_version = b.rule.gptq_version,
                             .gptq_v1_whole_word = b.rule.gptq_v1_whole_word,
                             .scale_layout = ScaleLayout::kGroup,
                             .weight_dtype = DType::kI32,
                             .scale_dtype = scales->dtype};
  return std::move(b.out);
}

// AutoAWQ calculate_zeros_width: groups / 8 rounded up, then up to a multiple of 1, 2 or 4.
Result<std::uint64_t> awq_gemv_zero_words(const Builder& b, const TensorEntry& q, std::uint64_t k, std::uint64_t g) {
  const std::uint64_t multiple = g >= 128 ? 1 : g == 64 ? 2 : g == 32 ? 4 : 0;
  if (multiple == 0)
    return fail(Error(Errc::kUnsupported,
                      fmt::format("{}: group size {} (AutoAWQ GEMV supports 32, 64 and >= 128)", b.rule.label, g))
                    .with_tensor(q.name));
  return ceil_div(ceil_div(k / g, 8), multiple) * multiple;
}

Result<LogicalTensor> build_awq(Builder& b) {
  const bool gemv = b.rule.kind == PartKind::kAwqGemv;
  QLOAD_ASSIGN_OR_RETURN(const TensorEntry* q, b.anchor("qweight", kI32, gemv ? "[N, K/8]" : "[K, N/8]"));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t packed, checked_mul(q->shape[1], 8));
  const std::uint64_t k = gemv ? packed : q->shape[0];
  std::uint64_t n = gemv ? q->shape[0] : packed;
  // GEMM packs N 8 to a word; the scales hold the exact N when it is not a multiple of 8.
  if (const auto s = b.module.find("scales"); !gemv && s) {
    const Shape& shape = b.tensor(*s).shape;
    if (shape.rank() == 2 && shape[1] > 0 && ceil_div(shape[1], 8) == q->shape[1]) n = shape[1];
  }
  const std::uint64_t g = b.group(k);
  b.facts = fmt::format("4-bit, group {}, K {}, N {}", g, k, n);
  if (k % g != 0)
    return fail(
        Error(Errc::kCorrupt, fmt::format("{}: K {} is not a multiple of the group size {}", b.rule.label, k, g))
            .with_tensor(q->name));
  const TensorEntry* scales = nullptr;
  if (gemv) {
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t words, awq_gemv_zero_words(b, *q, k, g));
    QLOAD_TRY(b.expect("qzeros", kI32, Shape{n, words}));
    QLOAD_ASSIGN_OR_RETURN(scales, b.expect("scales", kScaleDtypes, Shape{n, words * 8}));
  } else {
    QLOAD_TRY(b.expect("qzeros", kI32, Shape{k / g, q->shape[1]}));
    QLOAD_ASSIGN_OR_RETURN(scales, b.expect("scales", kScaleDtypes, Shape{k / g, n}));
  }
  b.out.rows = n;
  b.out.cols = k;
  b.out.params = QuantParams{.scheme = gemv ? QuantScheme::kAwqGemv : QuantScheme::kAwqGemm,
                             .bits = 4,
                             .group_size = g,
                             .sym = false,
                             .scale_layout = ScaleLayout::kGroup,
                             .weight_dtype = DType::kI32,
                             .scale_dtype = scales->dtype};
  return std::move(b.out);
}

// The scale shapes of `layout` for an [n, k] weight. `ct` is compressed-tensors' stricter set.
std::vector<Shape> scale_shapes(const Rule& rule, ScaleLayout layout, std::uint64_t n, std::uint64_t k, bool ct) {
  switch (layout) {
    case ScaleLayout::kTensor: return ct ? std::vector<Shape>{Shape{1}} : std::vector<Shape>{Shape{}, Shape{1}};
    case ScaleLayout::kRow: return ct ? std::vector<Shape>{Shape{n, 1}} : std::vector<Shape>{Shape{n, 1}, Shape{n}};
    case ScaleLayout::kGroup:
      return {Shape{n, ceil_div(k, rule.group_size > 0 ? static_cast<std::uint64_t>(rule.group_size) : k)}};
    case ScaleLayout::kBlock: return {Shape{ceil_div(n, rule.block_rows), ceil_div(k, rule.block_cols)}};
    case ScaleLayout::kColumn: break;  // no rule has it (fbgemm_experts.cpp detects its weights)
  }
  return {};
}

// Picks the first of the rule's layouts whose shapes hold the stored scale, and records it.
Result<ScaleLayout> pick_scale(Builder& b, std::string_view role, std::uint64_t n, std::uint64_t k, bool ct) {
  const std::uint32_t index = *b.module.find(role);
  const TensorEntry& s = b.tensor(index);
  std::vector<Shape> all;
  for (const ScaleLayout layout : b.rule.layouts) {
    const std::vector<Shape> shapes = scale_shapes(b.rule, layout, n, k, ct);
    const bool dtype_ok = std::find(kScaleDtypes.begin(), kScaleDtypes.end(), s.dtype) != kScaleDtypes.end();
    if (dtype_ok && std::find(shapes.begin(), shapes.end(), s.shape) != shapes.end()) {
      b.out.parts.emplace_back(std::string(role), index);
      return layout;
    }
    all.insert(all.end(), shapes.begin(), shapes.end());
  }
  return fail(b.mismatch(role, s, dtypes_text(kScaleDtypes), shapes_text(all)));
}

Result<LogicalTensor> build_fp8(Builder& b) {
  QLOAD_ASSIGN_OR_RETURN(const TensorEntry* w, b.anchor("weight", kFp8Dtypes, "[N, K]"));
  if (b.rule.fp8_dtype && w->dtype != *b.rule.fp8_dtype)
    return fail(b.mismatch("weight", *w, dtype_name(*b.rule.fp8_dtype), "[N, K] (the config's fmt)"));
  const std::uint64_t n = w->shape[0];
  const std::uint64_t k = w->shape[1];
  b.facts = fmt::format("N {}, K {}", n, k);
  const bool has_inv = b.module.find("weight_scale_inv").has_value();
  const bool has_scale = b.module.find("weight_scale").has_value();
  if (has_inv && has_scale)
    return fail(
        Error(Errc::kCorrupt, fmt::format("{} has both weight_scale and weight_scale_inv", quote_name(b.module.module)))
            .with_tensor(b.out.name));
  if (has_inv && !b.rule.scale_inv_allowed)
    return fail(
        Error(Errc::kCorrupt,
              b.rule.compressed_tensors
                  ? fmt::format("weight_scale_inv is not a part of {} (its scale is weight_scale)", b.rule.label)
                  : fmt::format("weight_scale_inv is a block scale, but {} has no block size", b.rule.label))
            .with_tensor(b.tensor(*b.module.find("weight_scale_inv")).name));
  if (!has_inv && !has_scale) return fail(b.missing(b.rule.scale_inv_allowed ? "weight_scale_inv" : "weight_scale"));
  const std::string_view role = has_inv ? "weight_scale_inv" : "weight_scale";
  QLOAD_ASSIGN_OR_RETURN(const ScaleLayout layout, pick_scale(b, role, n, k, b.rule.compressed_tensors));
  QLOAD_TRY(b.input_scale());
  b.out.rows = n;
  b.out.cols = k;
  b.out.params =
      QuantParams{.scheme = QuantScheme::kFp8,
                  .bits = 8,
                  .group_size = layout == ScaleLayout::kGroup ? static_cast<std::uint64_t>(b.rule.group_size) : 0,
                  .sym = true,
                  .scale_layout = layout,
                  .block_rows = layout == ScaleLayout::kBlock ? b.rule.block_rows : 0,
                  .block_cols = layout == ScaleLayout::kBlock ? b.rule.block_cols : 0,
                  .weight_dtype = w->dtype,
                  .scale_dtype = b.tensor(*b.module.find(role)).dtype};
  return std::move(b.out);
}

// compressed-tensors zero point, g_idx and input scale, common to both integer layouts.
Status ct_extras(Builder& b, std::span<const DType> zp_dtypes, const Shape& zp_shape, std::uint64_t k) {
  if (b.rule.sym && b.module.find("weight_zero_point"))
    return fail(Error(Errc::kCorrupt, fmt::format("{} is symmetric, but {} has a weight_zero_point", b.rule.label,
                                                  quote_name(b.module.module)))
                    .with_tensor(b.tensor(*b.module.find("weight_zero_point")).name));
  if (!b.rule.sym) QLOAD_TRY(b.expect("weight_zero_point", zp_dtypes, zp_shape));
  QLOAD_TRY(b.expect("weight_g_idx", kI32, Shape{k}, b.rule.g_idx_required));
  return b.input_scale();
}

QuantParams ct_params(const Builder& b, QuantScheme scheme, ScaleLayout layout, std::uint64_t k, DType weight,
                      DType scale) {
  return QuantParams{.scheme = scheme,
                     .bits = b.rule.bits,
                     .group_size = layout == ScaleLayout::kGroup ? static_cast<std::uint64_t>(b.rule.group_size) : k,
                     .sym = b.rule.sym,
                     .scale_layout = layout,
                     .weight_dtype = weight,
                     .scale_dtype = scale,
                     .dense_bitstream = true};
}

// K as weight_shape states it, when the catalog read its bytes (Catalog::embedded): nullopt
// when it did not (then K is inferred); kCorrupt naming it when it contradicts weight_packed.
Result<std::optional<std::uint64_t>> stated_k(Builder& b, std::uint64_t n, std::uint64_t words, std::uint32_t bits) {
  const std::optional<std::uint32_t> index = b.module.find("weight_shape");
  if (!index || b.experts > 0) return std::nullopt;
  const TensorEntry& shape = b.tensor(*index);
  const auto it = b.catalog.embedded.find(shape.name);
  if (it == b.catalog.embedded.end()) return std::nullopt;
  const std::string& bytes = it->second;
  std::int64_t dims[2] = {-1, -1};
  for (int i = 0; i < 2; ++i) {
    if (bytes.size() == 16) {
      std::memcpy(&dims[i], bytes.data() + i * 8, 8);
    } else if (bytes.size() == 8) {
      std::int32_t d;
      std::memcpy(&d, bytes.data() + i * 4, 4);
      dims[i] = d;
    }
  }
  const auto k = static_cast<std::uint64_t>(dims[1]);
  const auto k_bits = dims[1] > 0 ? checked_mul(k, bits) : Result<std::uint64_t>(fail(Errc::kOverflow, "K"));
  // The dense bitstream qload decodes (docs/formats.md): an older writer's padded 3-, 5-, 6- or
  // 7-bit words do not fit, and are refused here rather than decoded as a stream.
  const bool fits = k_bits && ceil_div(*k_bits, 32) == words;
  if (dims[0] < 0 || static_cast<std::uint64_t>(dims[0]) != n || !fits)
    return fail(Error(Errc::kCorrupt,
                      fmt::format("{} part weight_shape says ({}, {}), which weight_packed [{}, {}] of {}-bit values "
                                  "cannot hold",
                                  b.rule.label, dims[0], dims[1], n, words, bits))
                    .with_tensor(shape.name));
  return k;
}

// weight_packed [N, ceil(K*b/32)] fixes K only to within 32/b values: weight_shape's K, read
// with the catalog, settles it; without it the group count narrows it, and the decoder checks
// weight_shape (docs/formats.md).
Result<std::uint64_t> ct_packed_k(Builder& b, const TensorEntry& packed, std::uint64_t& groups) {
  const std::uint32_t bits = b.rule.bits;
  const std::uint64_t n = packed.shape[0];
  const std::uint64_t words = packed.shape[1];
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t max_bits, checked_mul(words, 32));
  QLOAD_ASSIGN_OR_RETURN(const std::optional<std::uint64_t> stated, stated_k(b, n, words, bits));
  const std::uint64_t k_max = stated.value_or(max_bits / bits);
  std::uint64_t k = k_max;
  groups = 1;
  if (b.rule.layouts.front() != ScaleLayout::kGroup) return k;
  const auto g = static_cast<std::uint64_t>(b.rule.group_size);
  const std::uint32_t index = *b.module.find("weight_scale");
  const TensorEntry& s = b.tensor(index);
  const bool rows_ok = s.shape.rank() == 2 && s.shape[0] == n && s.shape[1] > 0;
  if (rows_ok) {
    groups = s.shape[1];
    const auto capacity = checked_mul(groups, g);
    if (capacity && *capacity < k) k = *capacity;
  }
  const auto k_bits = checked_mul(k, bits);
  if (!rows_ok || ceil_div(k, g) != groups || !k_bits || ceil_div(*k_bits, 32) != words)
    return fail(b.mismatch("weight_scale", s, dtypes_text(kScaleDtypes), Shape{n, ceil_div(k_max, g)}.to_string()));
  return k;
}

Result<LogicalTensor> build_ct_packed(Builder& b) {
  const std::uint32_t bits = b.rule.bits;
  QLOAD_ASSIGN_OR_RETURN(const TensorEntry* p,
                         b.anchor("weight_packed", kI32, fmt::format("[N, ceil(K*{}/32)]", bits)));
  const std::uint64_t n = p->shape[0];
  if (!b.module.find("weight_scale")) return fail(b.missing("weight_scale"));
  std::uint64_t groups = 1;
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t k, ct_packed_k(b, *p, groups));
  b.facts = fmt::format("{}-bit, N {}, K {}", bits, n, k);
  QLOAD_ASSIGN_OR_RETURN(const ScaleLayout layout, pick_scale(b, "weight_scale", n, k, true));
  const DType scale_dtype = b.tensor(*b.module.find("weight_scale")).dtype;
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n_bits, checked_mul(n, bits));
  QLOAD_TRY(ct_extras(b, kI32, Shape{ceil_div(n_bits, 32), groups}, k));
  QLOAD_TRY(b.expect("weight_shape", kShapeDtypes, Shape{2}));
  b.out.rows = n;
  b.out.cols = k;
  b.out.params = ct_params(b, QuantScheme::kCtPacked, layout, k, DType::kI32, scale_dtype);
  return std::move(b.out);
}

Result<LogicalTensor> build_ct_int(Builder& b) {
  QLOAD_ASSIGN_OR_RETURN(const TensorEntry* w, b.anchor("weight", kI8, "[N, K]"));
  const std::uint64_t n = w->shape[0];
  const std::uint64_t k = w->shape[1];
  b.facts = fmt::format("{}-bit, N {}, K {}", b.rule.bits, n, k);
  if (!b.module.find("weight_scale")) return fail(b.missing("weight_scale"));
  QLOAD_ASSIGN_OR_RETURN(const ScaleLayout layout, pick_scale(b, "weight_scale", n, k, true));
  const TensorEntry& scale = b.tensor(*b.module.find("weight_scale"));
  QLOAD_TRY(ct_extras(b, kI8, scale.shape, k));
  b.out.rows = n;
  b.out.cols = k;
  b.out.params = ct_params(b, QuantScheme::kCtInt, layout, k, DType::kI8, scale.dtype);
  return std::move(b.out);
}

// compressed-tensors FP4: nvfp4-pack-quantized (groups of 16, E4M3 scales divided by a global
// scale) and mxfp4-pack-quantized (groups of 32, E8M0 exponents stored as U8). Symmetric only.
Result<LogicalTensor> build_ct_fp4(Builder& b) {
  const bool nv = b.rule.group_size == 16;
  const std::uint64_t g = nv ? 16 : 32;
  QLOAD_ASSIGN_OR_RETURN(const TensorEntry* p, b.anchor("weight_packed", kU8, "[N, K/2]"));
  const std::uint64_t n = p->shape[0];
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t k, checked_mul(p->shape[1], 2));
  b.facts = fmt::format("FP4, group {}, N {}, K {}", g, n, k);
  if (k % g != 0)
    return fail(b.mismatch("weight_packed", *p, "U8", fmt::format("[N, K/2] with K a multiple of {}", g)));
  if (b.module.find("weight_zero_point"))
    return fail(Error(Errc::kCorrupt, fmt::format("{} is symmetric, but {} has a weight_zero_point", b.rule.label,
                                                  quote_name(b.module.module)))
                    .with_tensor(b.tensor(*b.module.find("weight_zero_point")).name));
  static const std::array<Shape, 2> kScalar = {Shape{}, Shape{1}};
  if (nv) {
    QLOAD_TRY(b.expect("weight_scale", kE4M3, Shape{n, k / g}));
    QLOAD_TRY(b.expect("weight_global_scale", kF32, kScalar));
  } else {
    QLOAD_TRY(b.expect("weight_scale", kU8, Shape{n, k / g}));
  }
  QLOAD_TRY(b.expect("input_global_scale", kF32, kScalar, false));
  QLOAD_TRY(b.input_scale());
  b.out.rows = n;
  b.out.cols = k;
  b.out.params = QuantParams{.scheme = nv ? QuantScheme::kNvfp4 : QuantScheme::kMxfp4,
                             .bits = 4,
                             .group_size = g,
                             .sym = true,
                             .scale_layout = ScaleLayout::kGroup,
                             .weight_dtype = DType::kU8,
                             .scale_dtype = nv ? DType::kF8_E4M3 : DType::kF8_E8M0};
  return std::move(b.out);
}

// ModelOpt NVFP4 (hf_quant_config.json quant_algo NVFP4): weight U8 [N, K/2] of E2M1 pairs,
// weight_scale E4M3 [N, K/16], weight_scale_2 F32 scalar, multiplied (not divided, as
// compressed-tensors' global scale is).
Result<LogicalTensor> build_modelopt_fp4(Builder& b) {
  QLOAD_ASSIGN_OR_RETURN(const TensorEntry* w, b.anchor("weight", kU8, "[N, K/2]"));
  const std::uint64_t n = w->shape[0];
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t k, checked_mul(w->shape[1], 2));
  b.facts = fmt::format("NVFP4, group 16, N {}, K {}", n, k);
  if (k % 16 != 0) return fail(b.mismatch("weight", *w, "U8", "[N, K/2] with K a multiple of 16"));
  static const std::array<Shape, 2> kScalar = {Shape{}, Shape{1}};
  QLOAD_TRY(b.expect("weight_scale", kE4M3, Shape{n, k / 16}));
  QLOAD_TRY(b.expect("weight_scale_2", kF32, kScalar));
  QLOAD_TRY(b.input_scale());
  b.out.rows = n;
  b.out.cols = k;
  b.out.params = QuantParams{.scheme = QuantScheme::kNvfp4,
                             .bits = 4,
                             .group_size = 16,
                             .sym = true,
                             .scale_layout = ScaleLayout::kGroup,
                             .weight_dtype = DType::kU8,
                             .scale_dtype = DType::kF8_E4M3};
  return std::move(b.out);
}

}  // namespace

bool part_allowed(PartKind kind, std::string_view suffix) {
  using S = std::string_view;
  const auto in = [&](std::initializer_list<S> set) { return std::find(set.begin(), set.end(), suffix) != set.end(); };
  switch (kind) {
    case PartKind::kGptq: return in({"qweight", "qzeros", "scales", "g_idx"});
    case PartKind::kAwqGemm:
    case PartKind::kAwqGemv: return in({"qweight", "qzeros", "scales"});
    case PartKind::kFp8: return in({"weight", "weight_scale", "weight_scale_inv", "input_scale"});
    case PartKind::kCtPacked:
      return in({"weight_packed", "weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx", "input_scale"});
    case PartKind::kCtInt: return in({"weight", "weight_scale", "weight_zero_point", "weight_g_idx", "input_scale"});
    case PartKind::kCtFp4:
      return in({"weight_packed", "weight_scale", "weight_global_scale", "input_global_scale", "input_scale"});
    case PartKind::kModeloptFp4: return in({"weight", "weight_scale", "weight_scale_2", "input_scale"});
    case PartKind::kDense: return in({"weight", "input_scale"});
  }
  return false;
}

namespace {

Result<LogicalTensor> build_by_kind(Builder& b) {
  switch (b.rule.kind) {
    case PartKind::kGptq: return build_gptq(b);
    case PartKind::kAwqGemm:
    case PartKind::kAwqGemv: return build_awq(b);
    case PartKind::kFp8: return build_fp8(b);
    case PartKind::kCtPacked: return build_ct_packed(b);
    case PartKind::kCtInt: return build_ct_int(b);
    case PartKind::kCtFp4: return build_ct_fp4(b);
    case PartKind::kModeloptFp4: return build_modelopt_fp4(b);
    case PartKind::kDense: break;
  }
  return fail(Error(Errc::kInternal, "no parts to build for a dense rule").with_tensor(b.module.module));
}

// A 3-D anchor means stacked experts [E, ...]: every part must then carry E as its leading
// dim (vLLM's fused-MoE layout), and is checked as one expert's slice.
Status stack_experts(Builder& b) {
  const std::optional<std::uint32_t> anchor = b.module.find(anchor_of(b.rule.kind));
  if (!anchor || b.catalog.tensors[*anchor].shape.rank() != 3) return {};
  const std::uint64_t experts = b.catalog.tensors[*anchor].shape[0];
  if (experts == 0) return {};  // the anchor check refuses the empty stack
  for (const auto& [suffix, index] : b.module.parts) {
    const TensorEntry& t = b.catalog.tensors[index];
    if (t.shape.rank() == 0 || t.shape[0] != experts) {
      Error error = Error(Errc::kCorrupt, fmt::format("{} part {} of {} stacked experts is {}: expected [{}, ...]",
                                                      b.rule.label, suffix, experts, t.shape.to_string(), experts))
                        .with_tensor(t.name);
      if (t.file < b.catalog.files.size()) return fail(std::move(error).with_file(b.catalog.files[t.file].path));
      return fail(std::move(error));
    }
    TensorEntry slice = t;
    slice.shape = Shape(std::vector<std::uint64_t>(t.shape.dims().begin() + 1, t.shape.dims().end()));
    slice.nbytes = t.nbytes / experts;
    b.per_expert.emplace(index, std::move(slice));
  }
  b.experts = experts;
  return {};
}

}  // namespace

Result<LogicalTensor> build_logical(const Catalog& catalog, const ModuleTensors& module, const Rule& rule) {
  Builder b{
      .catalog = catalog, .module = module, .rule = rule, .out = LogicalTensor{.name = module.module + ".weight"}};
  QLOAD_TRY(stack_experts(b));
  QLOAD_ASSIGN_OR_RETURN(LogicalTensor out, build_by_kind(b));
  if (b.experts > 0) {
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t rows, checked_mul(out.rows, b.experts));
    out.shape = Shape{b.experts, out.rows, out.cols};
    out.rows = rows;
    out.experts = b.experts;
  }
  return out;
}

}  // namespace qload::formats::detail
