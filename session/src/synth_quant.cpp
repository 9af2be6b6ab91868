// Quantized synthetic weights (synth_quant.hpp): each linear weight becomes the parts a real
// producer writes, built with the formats layer's own encoders (quant_pack.hpp, quant_codec.hpp)
// so the bytes follow ../shared/formats.md sections 1-4. Integer schemes draw random codes,
// zeros and scales; FP8 schemes quantize the weight synth would have written unquantized.
#include "synth_quant.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "qload/formats/convert.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_pack.hpp"

namespace qload::session::detail {
namespace {

using formats::QuantizeTarget;
using Parts = std::vector<std::vector<std::byte>>;
using Compute = std::function<Status(Parts& parts)>;

constexpr std::uint64_t kGroupSize = 128;  // every grouped integer scheme
// Sub-streams of a tensor's stream, one per kind of value drawn.
constexpr std::uint64_t kCodeStream = 1;
constexpr std::uint64_t kZeroStream = 2;
constexpr std::uint64_t kScaleStream = 3;

enum class Kind : std::uint8_t { kGptq, kAwq, kFp8, kCtPack, kCtFp8, kCtNvfp4 };

struct Scheme {
  std::string_view name;
  Kind kind = Kind::kGptq;
  std::uint32_t bits = 4;
  QuantizeTarget target = QuantizeTarget::kFp8Row;  // kFp8, kCtFp8
  bool sym = true;                                  // kCtPack: false stores zero points
};

constexpr std::array<Scheme, 11> kSchemes = {{{"gptq4", Kind::kGptq, 4},
                                              {"gptq3", Kind::kGptq, 3},
                                              {"gptq8", Kind::kGptq, 8},
                                              {"awq", Kind::kAwq, 4},
                                              {"fp8-block", Kind::kFp8, 8, QuantizeTarget::kFp8Block},
                                              {"fp8-channel", Kind::kFp8, 8, QuantizeTarget::kFp8Row},
                                              {"fp8-tensor", Kind::kFp8, 8, QuantizeTarget::kFp8Tensor},
                                              {"ct-pack4", Kind::kCtPack, 4},
                                              {"ct-pack4-asym", Kind::kCtPack, 4, QuantizeTarget::kFp8Row, false},
                                              {"ct-fp8", Kind::kCtFp8, 8, QuantizeTarget::kFp8Row},
                                              {"ct-nvfp4", Kind::kCtNvfp4, 4}}};

constexpr bool names_match() {
  for (std::size_t i = 0; i < kSchemes.size(); ++i)
    if (kSchemes[i].name != kSynthQuantNames[i]) return false;
  return kSchemes.size() == kSynthQuantNames.size();
}
static_assert(names_match(), "kSchemes must list kSynthQuantNames in order");

const Scheme* find_scheme(std::string_view name) {
  const auto it = std::find_if(kSchemes.begin(), kSchemes.end(), [&](const Scheme& s) { return s.name == name; });
  return it == kSchemes.end() ? nullptr : &*it;
}

bool grouped(Kind kind) {
  return kind == Kind::kGptq || kind == Kind::kAwq || kind == Kind::kCtPack;
}

// The LogicalTensor the formats encoders take for an integer scheme on an [n, k] weight.
formats::LogicalTensor int_tensor(const Scheme& s, const SynthOptions& o, std::string name, std::uint64_t n,
                                  std::uint64_t k) {
  formats::QuantParams p{.bits = s.bits, .group_size = kGroupSize, .weight_dtype = DType::kI32};
  switch (s.kind) {
    case Kind::kGptq: p.scheme = formats::QuantScheme::kGptq, p.gptq_version = 1; break;
    case Kind::kAwq: p.scheme = formats::QuantScheme::kAwqGemm, p.sym = false; break;
    default: p.scheme = formats::QuantScheme::kCtPacked, p.scale_dtype = o.dtype, p.sym = s.sym; break;
  }
  return formats::LogicalTensor{.name = std::move(name), .params = p, .rows = n, .cols = k, .parts = {}};
}

// One quantized weight's parts, computed together on the first fill and released part by part
// after each part's last chunk. A part asked for again after its release is recomputed (the
// values are a function of the stream, so the bytes are the same).
class PartSet {
 public:
  PartSet(std::vector<std::uint64_t> sizes, Compute compute)
      : sizes_(std::move(sizes)), compute_(std::move(compute)), parts_(sizes_.size()) {}

  Status fill(std::size_t part, std::uint64_t offset, std::span<std::byte> out) {
    if (parts_[part].size() != sizes_[part]) {
      for (std::size_t i = 0; i < parts_.size(); ++i) parts_[i].assign(sizes_[i], std::byte{0});
      QLOAD_TRY(compute_(parts_));
    }
    if (offset > sizes_[part] || out.size() > sizes_[part] - offset)
      return fail(Errc::kInternal, fmt::format("synth part {}: chunk [{}, +{}) past its {} bytes", part, offset,
                                               out.size(), sizes_[part]));
    std::memcpy(out.data(), parts_[part].data() + offset, out.size());
    if (offset + out.size() == sizes_[part]) std::vector<std::byte>().swap(parts_[part]);
    return {};
  }

 private:
  std::vector<std::uint64_t> sizes_;
  Compute compute_;
  Parts parts_;
};

struct PartSpec {
  std::string suffix;
  DType dtype = DType::kU8;
  Shape shape;
};

Result<std::vector<formats::WriterTensor>> make_parts(std::string_view prefix, std::vector<PartSpec> specs,
                                                      Compute compute) {
  std::vector<std::uint64_t> sizes;
  for (const PartSpec& spec : specs) {
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, spec.shape.nbytes(spec.dtype));
    sizes.push_back(bytes);
  }
  auto set = std::make_shared<PartSet>(std::move(sizes), std::move(compute));
  std::vector<formats::WriterTensor> out;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    auto fill = [set, i](std::uint64_t offset, std::span<std::byte> bytes) { return set->fill(i, offset, bytes); };
    out.push_back({fmt::format("{}.{}", prefix, specs[i].suffix), specs[i].dtype, std::move(specs[i].shape), {}, fill});
  }
  return out;
}

// `count` random codes in [0, 2^bits) minus `offset`: code i is byte i % 8 of
// mix(stream ^ mix(i / 8)), masked.
template <typename T>
std::vector<T> random_codes(std::uint64_t stream, std::uint64_t count, std::uint32_t bits, int offset = 0) {
  std::vector<T> out(count);
  const std::uint64_t mask = (1u << bits) - 1;
  for (std::uint64_t i = 0; i < count; i += 8) {
    const std::uint64_t r = mix(stream ^ mix(i / 8));
    for (std::uint64_t j = 0; j < 8 && i + j < count; ++j)
      out[i + j] = static_cast<T>(static_cast<int>((r >> (8 * j)) & mask) - offset);
  }
  return out;
}

// Scales in [1e-3, 1e-2] as `dtype` (F16, BF16 or F32) elements, one per element of `out`.
void random_scales(std::uint64_t stream, DType dtype, std::span<std::byte> out) {
  const std::size_t size = dtype == DType::kF32 ? 4 : 2;
  for (std::size_t i = 0; i * size < out.size(); ++i) {
    const float u = static_cast<float>(mix(stream ^ mix(i)) >> 40) * 0x1p-24f;
    const auto bits = std::bit_cast<std::uint32_t>(1e-3f + 9e-3f * u);
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + i * size, &bits, 4);
    } else {
      const std::uint16_t half =
          dtype == DType::kF16 ? formats::f32_to_f16_bits(bits) : formats::f32_to_bf16_bits(bits);
      std::memcpy(out.data() + i * size, &half, 2);
    }
  }
}

// GPTQ v1 symmetric: qweight, qzeros (z = 2^(b-1), stored minus 1 by pack_gptq), scales, g_idx.
Result<std::vector<formats::WriterTensor>> gptq_parts(const formats::LogicalTensor& t, std::string_view prefix,
                                                      std::uint64_t stream) {
  QLOAD_ASSIGN_OR_RETURN(const formats::PackedShapes s, formats::packed_shapes(t));
  Compute compute = [t, stream, groups = s.groups](Parts& parts) -> Status {
    const auto q = random_codes<std::uint8_t>(mix(stream + kCodeStream), t.cols * t.rows, t.params.bits);
    const std::vector<std::uint8_t> zeros(groups * t.rows, static_cast<std::uint8_t>(1u << (t.params.bits - 1)));
    QLOAD_TRY(formats::pack_gptq(t, q, zeros, parts[0], parts[1]));
    random_scales(mix(stream + kScaleStream), DType::kF16, parts[2]);
    for (std::uint64_t k = 0; k < t.cols; ++k) {
      const auto g = static_cast<std::int32_t>(k / t.params.group_size);
      std::memcpy(parts[3].data() + k * 4, &g, 4);
    }
    return {};
  };
  return make_parts(prefix,
                    {{"qweight", DType::kI32, s.weight},
                     {"qzeros", DType::kI32, s.zeros},
                     {"scales", DType::kF16, s.scales},
                     {"g_idx", DType::kI32, Shape{t.cols}}},
                    std::move(compute));
}

// AWQ GEMM: random codes and zeros in [0, 16), F16 scales.
Result<std::vector<formats::WriterTensor>> awq_parts(const formats::LogicalTensor& t, std::string_view prefix,
                                                     std::uint64_t stream) {
  QLOAD_ASSIGN_OR_RETURN(const formats::PackedShapes s, formats::packed_shapes(t));
  Compute compute = [t, stream, groups = s.groups](Parts& parts) -> Status {
    const auto q = random_codes<std::uint8_t>(mix(stream + kCodeStream), t.cols * t.rows, 4);
    const auto zeros = random_codes<std::uint8_t>(mix(stream + kZeroStream), groups * t.rows, 4);
    QLOAD_TRY(formats::pack_awq_gemm(t, q, zeros, parts[0], parts[1]));
    random_scales(mix(stream + kScaleStream), DType::kF16, parts[2]);
    return {};
  };
  return make_parts(
      prefix, {{"qweight", DType::kI32, s.weight}, {"qzeros", DType::kI32, s.zeros}, {"scales", DType::kF16, s.scales}},
      std::move(compute));
}

// compressed-tensors pack-quantized: signed codes in [-8, 8), scales [N, groups]; asymmetric:
// signed zero points in [-8, 8) too, packed along N.
Result<std::vector<formats::WriterTensor>> ct_pack_parts(const formats::LogicalTensor& t, std::string_view prefix,
                                                         std::uint64_t stream) {
  QLOAD_ASSIGN_OR_RETURN(const formats::PackedShapes s, formats::packed_shapes(t));
  Compute compute = [t, s, stream](Parts& parts) -> Status {
    const int offset = 1 << (t.params.bits - 1);
    const auto q = random_codes<std::int8_t>(mix(stream + kCodeStream), t.rows * t.cols, t.params.bits, offset);
    std::vector<std::int8_t> zeros;
    if (s.has_zeros)
      zeros = random_codes<std::int8_t>(mix(stream + kZeroStream), t.rows * s.groups, t.params.bits, offset);
    std::span<std::byte> zero_point = s.has_zeros ? std::span(parts[2]) : std::span<std::byte>();
    QLOAD_TRY(formats::pack_ct(t, q, zeros, parts[0], zero_point));
    random_scales(mix(stream + kScaleStream), t.params.scale_dtype, parts[1]);
    const std::array<std::int64_t, 2> shape = {static_cast<std::int64_t>(t.rows), static_cast<std::int64_t>(t.cols)};
    std::memcpy(parts.back().data(), shape.data(), sizeof(shape));
    return {};
  };
  std::vector<PartSpec> specs = {{"weight_packed", DType::kI32, s.weight},
                                 {"weight_scale", t.params.scale_dtype, s.scales}};
  if (s.has_zeros) specs.push_back({"weight_zero_point", DType::kI32, s.zeros});
  specs.push_back({"weight_shape", DType::kI64, Shape{2}});
  return make_parts(prefix, std::move(specs), std::move(compute));
}

// compressed-tensors NVFP4: random E2M1 pairs, E4M3 group scales in [2^-6, 2^2) and a global
// scale of 1000 (what calibration gives a weight whose amax is about 2.7).
Result<std::vector<formats::WriterTensor>> ct_nvfp4_parts(std::string_view prefix, std::uint64_t n, std::uint64_t k,
                                                          std::uint64_t stream) {
  Compute compute = [stream](Parts& parts) -> Status {
    const auto codes = random_codes<std::uint8_t>(mix(stream + kCodeStream), parts[0].size(), 8);
    std::memcpy(parts[0].data(), codes.data(), codes.size());
    // E4M3 exponent field 1..8 (biased 7): 2^-6 .. 2^1 times 1.m.
    const auto scales = random_codes<std::uint8_t>(mix(stream + kScaleStream), parts[1].size(), 6);
    for (std::size_t i = 0; i < scales.size(); ++i)
      parts[1][i] = static_cast<std::byte>(((1u + (scales[i] >> 3)) << 3) | (scales[i] & 7u));
    const float global = 1000.0f;
    std::memcpy(parts[2].data(), &global, sizeof global);
    return {};
  };
  return make_parts(prefix,
                    {{"weight_packed", DType::kU8, Shape{n, k / 2}},
                     {"weight_scale", DType::kF8_E4M3, Shape{n, k / 16}},
                     {"weight_global_scale", DType::kF32, Shape{1}}},
                    std::move(compute));
}

// The unquantized weight quantized with formats::quantize; ct-fp8 stores the F32 per-row scale
// in the weight's dtype, as compressed-tensors does.
Result<std::vector<formats::WriterTensor>> fp8_parts(const Scheme& scheme, const SynthOptions& o,
                                                     std::string_view prefix, std::uint64_t n, std::uint64_t k,
                                                     formats::TensorFill original) {
  QLOAD_ASSIGN_OR_RETURN(const formats::QuantizedLayout layout, formats::quantized_layout(n, k, scheme.target));
  const bool ct = scheme.kind == Kind::kCtFp8;
  const DType scale_dtype = ct ? o.dtype : DType::kF32;
  const DType dtype = o.dtype;
  const QuantizeTarget target = scheme.target;
  Compute compute = [dtype, target, ct, n, k, scale_bytes = layout.scale_bytes,
                     original = std::move(original)](Parts& parts) -> Status {
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t in_bytes, (Shape{n, k}.nbytes(dtype)));
    std::vector<std::byte> in(in_bytes);
    QLOAD_TRY(original(0, in));
    if (!ct) return formats::quantize(in, dtype, n, k, target, parts[0], parts[1]);
    std::vector<std::byte> scale(scale_bytes);
    QLOAD_TRY(formats::quantize(in, dtype, n, k, target, parts[0], scale));
    return formats::convert(scale, DType::kF32, parts[1], dtype);
  };
  return make_parts(
      prefix, {{"weight", layout.weight_dtype, Shape{n, k}}, {layout.scale_suffix, scale_dtype, layout.scale_shape}},
      std::move(compute));
}

}  // namespace

Status validate_quant(const SynthOptions& o) {
  if (o.quant.empty()) return {};
  const Scheme* s = find_scheme(o.quant);
  if (s == nullptr)
    return fail(Errc::kInvalidArgument, fmt::format("unknown quantization '{}'; valid: {}",
                                                    escape_for_terminal(o.quant), fmt::join(kSynthQuantNames, ", ")));
  const std::uint64_t kv = std::uint64_t{o.hidden} / o.heads * o.kv_heads;
  using Size = std::pair<std::string_view, std::uint64_t>;
  if (grouped(s->kind))
    for (const auto& [what, k] : {Size{"hidden", o.hidden}, Size{"intermediate", o.intermediate}})
      if (k % kGroupSize != 0)
        return fail(Errc::kInvalidArgument,
                    fmt::format("--quant {} needs every linear K (in features) to be a multiple of the group size {}: "
                                "{} is {}",
                                s->name, kGroupSize, what, k));
  if (s->kind == Kind::kCtNvfp4)
    for (const auto& [what, k] : {Size{"hidden", o.hidden}, Size{"intermediate", o.intermediate}})
      if (k % 16 != 0)
        return fail(Errc::kInvalidArgument,
                    fmt::format("--quant ct-nvfp4 scales every 16 columns, so every linear K (in features) must be a "
                                "multiple of 16: {} is {}",
                                what, k));
  if (s->kind == Kind::kAwq)
    for (const auto& [what, n] : {Size{"hidden", o.hidden}, Size{"intermediate", o.intermediate},
                                  Size{"kv_heads * head_dim (k_proj, v_proj out features)", kv}})
      if (n % 8 != 0)
        return fail(Errc::kInvalidArgument,
                    fmt::format("--quant awq packs 8 output columns per int32 word, so every linear N must be a "
                                "multiple of 8: {} is {}",
                                what, n));
  if (!grouped(s->kind)) return {};
  // And whatever else the encoders require of each linear shape.
  const std::uint64_t h = o.hidden, i = o.intermediate;
  const std::array<std::pair<std::uint64_t, std::uint64_t>, 4> linear = {{{h, h}, {kv, h}, {i, h}, {h, i}}};
  for (const auto& [n, k] : linear)
    if (const auto shapes = formats::packed_shapes(int_tensor(*s, o, "linear", n, k)); !shapes)
      return fail(Errc::kInvalidArgument, fmt::format("--quant {} cannot encode a [{}, {}] weight: {}", s->name, n, k,
                                                      shapes.error().message()));
  return {};
}

nlohmann::json quantization_config(const SynthOptions& o) {
  using nlohmann::json;
  const Scheme& s = *find_scheme(o.quant);
  const auto ct = [](const char* format, json weights) {
    return json{
        {"quant_method", "compressed-tensors"},
        {"format", format},
        {"quantization_status", "compressed"},
        {"config_groups", {{"group_0", {{"targets", json::array({"Linear"})}, {"weights", std::move(weights)}}}}},
        {"ignore", json::array({"lm_head"})}};
  };
  switch (s.kind) {
    case Kind::kGptq:
      return {{"quant_method", "gptq"}, {"bits", s.bits}, {"group_size", kGroupSize},
              {"desc_act", false},      {"sym", true},    {"checkpoint_format", "gptq"}};
    case Kind::kAwq:
      return {
          {"quant_method", "awq"}, {"bits", 4}, {"group_size", kGroupSize}, {"version", "gemm"}, {"zero_point", true}};
    case Kind::kCtPack:
      return ct(
          "pack-quantized",
          {{"num_bits", 4}, {"type", "int"}, {"symmetric", s.sym}, {"strategy", "group"}, {"group_size", kGroupSize}});
    case Kind::kCtFp8:
      return ct("float-quantized", {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "channel"}});
    case Kind::kCtNvfp4:
      return ct(
          "nvfp4-pack-quantized",
          {{"num_bits", 4}, {"type", "float"}, {"symmetric", true}, {"strategy", "tensor_group"}, {"group_size", 16}});
    case Kind::kFp8: break;
  }
  // Exactly what `qload convert --quantize` writes (cli/cmd_convert.cpp).
  switch (s.target) {
    case QuantizeTarget::kFp8Block:
      return {{"quant_method", "fp8"},
              {"fmt", "e4m3"},
              {"activation_scheme", "dynamic"},
              {"weight_block_size", {128, 128}}};
    case QuantizeTarget::kFp8Row: return {{"quant_method", "fbgemm_fp8"}};
    default: return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}};
  }
}

bool is_quantized_linear(std::string_view name) {
  constexpr std::array<std::string_view, 7> kLinear = {
      ".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight", ".self_attn.o_proj.weight",
      ".mlp.gate_proj.weight",    ".mlp.up_proj.weight",      ".mlp.down_proj.weight"};
  return std::any_of(kLinear.begin(), kLinear.end(), [&](std::string_view s) { return name.ends_with(s); });
}

Result<std::vector<formats::WriterTensor>> quantized_parts(const SynthOptions& o, const std::string& name,
                                                           const Shape& shape, std::uint64_t stream,
                                                           formats::TensorFill original) {
  const Scheme* s = find_scheme(o.quant);
  if (s == nullptr || shape.rank() != 2 || !name.ends_with(".weight"))
    return fail(Error(Errc::kInternal, "quantized_parts: not a linear weight of a known scheme").with_tensor(name));
  const std::string_view prefix = std::string_view(name).substr(0, name.size() - std::string_view(".weight").size());
  const std::uint64_t n = shape[0];
  const std::uint64_t k = shape[1];
  switch (s->kind) {
    case Kind::kGptq: return gptq_parts(int_tensor(*s, o, name, n, k), prefix, stream);
    case Kind::kAwq: return awq_parts(int_tensor(*s, o, name, n, k), prefix, stream);
    case Kind::kCtPack: return ct_pack_parts(int_tensor(*s, o, name, n, k), prefix, stream);
    case Kind::kCtNvfp4: return ct_nvfp4_parts(prefix, n, k, stream);
    case Kind::kFp8:
    case Kind::kCtFp8: return fp8_parts(*s, o, prefix, n, k, std::move(original));
  }
  return fail(Error(Errc::kInternal, "quantized_parts: unknown scheme").with_tensor(name));
}

}  // namespace qload::session::detail
