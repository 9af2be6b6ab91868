// The quantized weights the device dequantization is checked on, shared by the host check of
// its arithmetic (quant_device_args_test.cpp) and the GPU test (tests/gpu): every scheme,
// width, group size, zero-point kind, g_idx, scale dtype and layout, from fixed seeds, with K
// and N not multiples of 128.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "quant_int_reference.hpp"

namespace qload::testing::quant_ref {

using formats::ScaleLayout;

struct Case {
  std::string label;
  Weight weight;
};

inline void add_integer_cases(std::vector<Case>& cases, Rng& rng) {
  for (unsigned bits : {2u, 3u, 4u, 8u})
    for (std::uint64_t group : {32u, 128u, 0u})
      for (unsigned version : {1u, 2u})
        for (bool sym : {true, false})
          for (bool act_order : {false, true}) {
            const GptqCase g{bits, group, version, sym, act_order, bits == 3 ? DType::kBF16 : DType::kF16};
            cases.push_back({fmt::format("gptq {}-bit group {} v{} {} {}", bits, group, version, sym ? "sym" : "asym",
                                         act_order ? "act-order" : ""),
                             make_gptq(g, 352, 37, rng)});
          }
  for (std::uint64_t group : {32u, 64u, 128u}) {
    cases.push_back({fmt::format("awq gemm group {}", group), make_awq_gemm(384, 44, group, rng)});
    cases.push_back({fmt::format("awq gemv group {}", group), make_awq_gemv(384, 24, group, rng)});
  }
  for (unsigned bits : {2u, 3u, 4u, 8u})
    for (bool dense : {true, false})
      for (bool sym : {true, false})
        for (ScaleLayout layout : {ScaleLayout::kGroup, ScaleLayout::kRow}) {
          if (!dense && bits != 3) continue;  // padded differs from dense only for widths not dividing 32
          const CtCase c{.bits = bits,
                         .dense = dense,
                         .sym = sym,
                         .g_idx = sym && layout == ScaleLayout::kGroup,
                         .layout = layout,
                         .group = 32};
          cases.push_back({fmt::format("ct packed {}-bit {} {} layout {}", bits, dense ? "dense" : "padded",
                                       sym ? "sym g_idx" : "asym", static_cast<int>(layout)),
                           make_ct_packed(c, 90, 13, rng)});
        }
}

// An empty compressed-tensors int8 weight [n, k] (f16 scales), its parts still to add.
inline Weight ct_int_header(std::uint64_t n, std::uint64_t k, std::uint64_t group, bool sym, ScaleLayout layout) {
  Weight w;
  w.t.name = std::string(kName);
  w.t.rows = n;
  w.t.cols = k;
  w.t.params = {.scheme = QuantScheme::kCtInt,
                .bits = 8,
                .group_size = group,
                .sym = sym,
                .scale_layout = layout,
                .weight_dtype = DType::kI8,
                .scale_dtype = DType::kF16};
  return w;
}

inline Weight ct_int_weight(ScaleLayout layout, DType zero_dtype, Rng& rng) {
  const std::uint64_t n = 13, k = 90, group = 32;
  Weight w = ct_int_header(n, k, group, zero_dtype == DType::kBool, layout);
  const std::uint64_t groups = layout == ScaleLayout::kGroup ? ref_ceil(k, group) : 1;
  const std::uint64_t params = layout == ScaleLayout::kTensor ? 1 : n * groups;
  const Shape pshape = layout == ScaleLayout::kTensor ? Shape{1}
                       : layout == ScaleLayout::kRow  ? Shape{n, 1}
                                                      : Shape{n, groups};
  w.add("weight", DType::kI8, Shape{n, k}, random_bytes(n * k, rng));
  w.add("weight_scale", DType::kF16, pshape, random_scales(params, DType::kF16, rng));
  if (zero_dtype == DType::kI8) w.add("weight_zero_point", DType::kI8, pshape, random_bytes(params, rng));
  if (zero_dtype == DType::kI32) {
    std::vector<std::int32_t> z(params);
    for (std::int32_t& v : z) v = static_cast<std::int32_t>(rng() % 256) - 128;
    w.add("weight_zero_point", DType::kI32, pshape, i32_bytes(z));
  }
  return w;
}

// Every code of the FP8 dtype appears (NaN, subnormals, max), with scales over a wide range.
inline Weight fp8_weight(DType code, ScaleLayout layout, DType scale_dtype, std::uint64_t n, std::uint64_t k,
                         Rng& rng) {
  Weight w;
  w.t.name = std::string(kName);
  w.t.rows = n;
  w.t.cols = k;
  w.t.params = {.scheme = QuantScheme::kFp8,
                .bits = 8,
                .group_size = layout == ScaleLayout::kGroup ? 64u : 0u,
                .scale_layout = layout,
                .block_rows = layout == ScaleLayout::kBlock ? 128u : 0u,
                .block_cols = layout == ScaleLayout::kBlock ? 128u : 0u,
                .weight_dtype = code,
                .scale_dtype = scale_dtype};
  Bytes codes = random_bytes(n * k, rng);
  for (std::uint64_t i = 0; i < 256 && i < codes.size(); ++i) codes[i] = static_cast<std::byte>(i);
  w.add("weight", code, Shape{n, k}, std::move(codes));
  Shape scale_shape;
  switch (layout) {
    case ScaleLayout::kTensor: scale_shape = Shape{1}; break;
    case ScaleLayout::kRow: scale_shape = Shape{n, 1}; break;
    case ScaleLayout::kGroup: scale_shape = Shape{n, ref_ceil(k, 64)}; break;
    case ScaleLayout::kBlock: scale_shape = Shape{ref_ceil(n, 128), ref_ceil(k, 128)}; break;
    case ScaleLayout::kColumn: scale_shape = Shape{1, k}; break;  // Llama-4's fbgemm experts (per expert)
  }
  const std::uint64_t count = scale_shape.numel().value();
  w.add(layout == ScaleLayout::kBlock ? "weight_scale_inv" : "weight_scale", scale_dtype, scale_shape,
        random_scales(count, scale_dtype, rng));
  return w;
}

inline void add_float_cases(std::vector<Case>& cases, Rng& rng) {
  for (ScaleLayout layout : {ScaleLayout::kGroup, ScaleLayout::kRow, ScaleLayout::kTensor})
    for (DType z : {DType::kBool, DType::kI8, DType::kI32})
      cases.push_back({fmt::format("ct int layout {} zero {}", static_cast<int>(layout), dtype_name(z)),
                       ct_int_weight(layout, z, rng)});
  for (DType code : {DType::kF8_E4M3, DType::kF8_E5M2})
    for (DType scale : {DType::kF32, DType::kBF16, DType::kF16})
      for (ScaleLayout layout :
           {ScaleLayout::kTensor, ScaleLayout::kRow, ScaleLayout::kGroup, ScaleLayout::kBlock, ScaleLayout::kColumn})
        cases.push_back(
            {fmt::format("fp8 {} scale {} layout {}", dtype_name(code), dtype_name(scale), static_cast<int>(layout)),
             fp8_weight(code, layout, scale, 200, 300, rng)});
}

// Every GGML block type qload decodes, as {ggml type, block elements, block bytes}.
struct GgmlBlockType {
  std::uint32_t id;
  const char* name;
  std::uint32_t elems;
  std::uint32_t bytes;
};
inline constexpr GgmlBlockType kGgmlBlockTypes[] = {
    {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110},
    {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},   {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292},
    {20, "IQ4_NL", 32, 18}, {23, "IQ4_XS", 256, 136}, {34, "TQ1_0", 256, 54}, {35, "TQ2_0", 256, 66},
    {39, "MXFP4", 32, 17},  {40, "NVFP4", 64, 36},
};

// A GGML weight of random blocks (any bits are a valid block; NaN and Inf scales included).
inline Weight ggml_weight(const GgmlBlockType& type, std::uint64_t n, std::uint64_t k, Rng& rng) {
  Weight w;
  w.t.name = fmt::format("{}.weight", type.name);
  w.t.params.scheme = formats::QuantScheme::kGgml;
  w.t.params.ggml_type = type.id;
  w.t.rows = n;
  w.t.cols = k;
  const std::uint64_t row_bytes = k / type.elems * type.bytes;
  w.add("blocks", DType::kU8, Shape{n, row_bytes}, random_bytes(n * row_bytes, rng));
  return w;
}

// OCP MXFP4 (gpt-oss) of random blocks and exponents.
inline Weight mxfp4_weight(std::uint64_t n, std::uint64_t k, Rng& rng) {
  Weight w;
  w.t.name = "experts.gate_up_proj";
  w.t.params.scheme = formats::QuantScheme::kMxfp4;
  w.t.params.bits = 4;
  w.t.params.group_size = 32;
  w.t.rows = n;
  w.t.cols = k;
  w.add("blocks", DType::kU8, Shape{n, k / 32, 16}, random_bytes(n * k / 2, rng));
  w.add("scales", DType::kU8, Shape{n, k / 32}, random_bytes(n * k / 32, rng));
  return w;
}

// The same bytes as compressed-tensors' mxfp4-pack-quantized stores them: weight_packed [N, K/2]
// and weight_scale [N, K/32].
inline Weight ct_mxfp4_weight(std::uint64_t n, std::uint64_t k, Rng& rng) {
  Weight w = mxfp4_weight(n, k, rng);
  w.t.name = "model.layers.0.mlp.down_proj.weight";
  w.parts[0] = {"weight_packed", DType::kU8, Shape{n, k / 2}, w.parts[0].bytes};
  w.parts[1] = {"weight_scale", DType::kU8, Shape{n, k / 32}, w.parts[1].bytes};
  return w;
}

// compressed-tensors NVFP4 of random codes, E4M3 scales (NaN codes excluded) and a global scale
// that is not a power of two, so scale / global_scale rounds.
inline Weight nvfp4_weight(std::uint64_t n, std::uint64_t k, Rng& rng) {
  Weight w;
  w.t.name = "model.layers.0.mlp.up_proj.weight";
  w.t.params.scheme = formats::QuantScheme::kNvfp4;
  w.t.params.bits = 4;
  w.t.params.group_size = 16;
  w.t.rows = n;
  w.t.cols = k;
  Bytes scales = random_bytes(n * k / 16, rng);
  for (std::byte& s : scales)
    if ((std::to_integer<unsigned>(s) & 0x7fu) == 0x7fu) s &= std::byte{0xfe};
  const float global = 2688.0f / 3.7f;
  Bytes global_bytes(4);
  std::memcpy(global_bytes.data(), &global, 4);
  w.add("weight_packed", DType::kU8, Shape{n, k / 2}, random_bytes(n * k / 2, rng));
  w.add("weight_scale", DType::kF8_E4M3, Shape{n, k / 16}, std::move(scales));
  w.add("weight_global_scale", DType::kF32, Shape{1}, std::move(global_bytes));
  return w;
}

// The same codes and scales as ModelOpt stores them: weight, weight_scale and weight_scale_2
// (the inverse of the global scale, multiplied).
inline Weight modelopt_nvfp4_weight(std::uint64_t n, std::uint64_t k, Rng& rng) {
  Weight w = nvfp4_weight(n, k, rng);
  w.part("weight_packed").role = "weight";
  const float scale_2 = 3.7f / 2688.0f;
  Bytes bytes(4);
  std::memcpy(bytes.data(), &scale_2, 4);
  w.drop("weight_global_scale");
  w.add("weight_scale_2", DType::kF32, Shape{}, std::move(bytes));
  return w;
}

// bitsandbytes 4-bit: random codes over the flattened weight (K not a multiple of the block,
// so blocks span rows), the NF4 table, absmax plain or double-quantized.
inline Weight bnb4_weight(std::uint64_t n, std::uint64_t k, bool nested, Rng& rng) {
  Weight w;
  w.t.name = std::string(kName);
  w.t.rows = n;
  w.t.cols = k;
  const std::uint64_t block = 64, blocks = (n * k + block - 1) / block;
  w.t.params = {.scheme = formats::QuantScheme::kBnb4, .bits = 4, .group_size = block};
  w.t.params.nested_block = nested ? 256 : 0;
  w.t.params.nested_offset = nested ? 0.0371f : 0.0f;
  const auto floats = [](std::vector<float> v) {
    Bytes b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  std::vector<float> nf4 = {-1.0f,   -0.6962f, -0.5251f, -0.3949f, -0.2844f, -0.1848f, -0.0911f, 0.0f,
                            0.0796f, 0.1609f,  0.2461f,  0.3379f,  0.4407f,  0.5626f,  0.7230f,  1.0f};
  w.add("weight", DType::kU8, Shape{(n * k + 1) / 2, 1}, random_bytes((n * k + 1) / 2, rng));
  w.add("quant_map", DType::kF32, Shape{16}, floats(nf4));
  std::uniform_real_distribution<float> u(0.01f, 0.2f);
  if (!nested) {
    std::vector<float> absmax(blocks);
    for (float& a : absmax) a = u(rng);
    w.add("absmax", DType::kF32, Shape{blocks}, floats(absmax));
    return w;
  }
  std::vector<float> map(256), nested_absmax((blocks + 255) / 256);
  for (float& m : map) m = u(rng) * 5.0f - 0.5f;
  for (float& a : nested_absmax) a = u(rng);
  w.add("absmax", DType::kU8, Shape{blocks}, random_bytes(blocks, rng));
  w.add("nested_quant_map", DType::kF32, Shape{256}, floats(map));
  w.add("nested_absmax", DType::kF32, Shape{nested_absmax.size()}, floats(nested_absmax));
  return w;
}

// bitsandbytes 8-bit: random int8 rows and their SCB.
inline Weight bnb8_weight(std::uint64_t n, std::uint64_t k, Rng& rng) {
  Weight w;
  w.t.name = std::string(kName);
  w.t.rows = n;
  w.t.cols = k;
  w.t.params = {.scheme = formats::QuantScheme::kBnb8, .bits = 8, .group_size = k};
  w.add("weight", DType::kI8, Shape{n, k}, random_bytes(n * k, rng));
  w.add("SCB", DType::kF32, Shape{n}, random_scales(n, DType::kF32, rng));
  return w;
}

// Every case; `large` adds weights big enough that the GPU kernels' grid strides.
// A row-parallel GPTQ shard as qload's tensor-parallel plan makes it: the second half of K of
// `whole` (qweight rows and g_idx sliced), its scales and zeros whole, so g_idx indexes all of
// the weight's groups (QuantParams::groups). `whole` has a g_idx and K a multiple of 64.
inline Weight gptq_second_half_of_k(const Weight& whole) {
  const std::uint64_t k = whole.t.cols, n = whole.t.rows, bits = whole.t.params.bits;
  Weight w;
  w.t = whole.t;
  w.t.cols = k / 2;
  w.t.params.groups = ref_ceil(k, group_of(k, whole.t.params.group_size));
  const Bytes& qweight = whole.bytes("qweight");
  const std::uint64_t half_rows = k / 2 / 32 * bits;  // packed rows of half of K
  w.add("qweight", DType::kI32, Shape{half_rows, n},
        Bytes(qweight.begin() + static_cast<std::ptrdiff_t>(half_rows * n * 4), qweight.end()));
  w.add("qzeros", DType::kI32, whole.find("qzeros")->shape, whole.bytes("qzeros"));
  w.add("scales", whole.find("scales")->dtype, whole.find("scales")->shape, whole.bytes("scales"));
  const Bytes& g_idx = whole.bytes("g_idx");
  w.add("g_idx", DType::kI32, Shape{k / 2}, Bytes(g_idx.begin() + static_cast<std::ptrdiff_t>(k / 2 * 4), g_idx.end()));
  return w;
}

// The same for compressed-tensors int8 with weight_g_idx: a [13, 128] weight in groups of 32
// (act-order), and its shard of columns [64, 128) with weight_scale and weight_zero_point whole.
struct CtIntShard {
  Weight whole;
  Weight shard;
};
inline CtIntShard ct_int_second_half_of_k(Rng& rng) {
  const std::uint64_t n = 13, k = 128, group = 32, groups = k / group;
  CtIntShard out;
  Weight& w = out.whole;
  w = ct_int_header(n, k, group, /*sym=*/false, ScaleLayout::kGroup);
  w.add("weight", DType::kI8, Shape{n, k}, random_bytes(n * k, rng));
  w.add("weight_scale", DType::kF16, Shape{n, groups}, random_scales(n * groups, DType::kF16, rng));
  w.add("weight_zero_point", DType::kI8, Shape{n, groups}, random_bytes(n * groups, rng));
  w.add("weight_g_idx", DType::kI32, Shape{k}, i32_bytes(act_order_g_idx(k, group, rng)));
  Weight& h = out.shard;
  h.t = w.t;
  h.t.cols = k / 2;
  h.t.params.groups = groups;
  Bytes half;
  for (std::uint64_t r = 0; r < n; ++r)
    half.insert(half.end(), w.bytes("weight").begin() + static_cast<std::ptrdiff_t>(r * k + k / 2),
                w.bytes("weight").begin() + static_cast<std::ptrdiff_t>((r + 1) * k));
  h.add("weight", DType::kI8, Shape{n, k / 2}, std::move(half));
  h.add("weight_scale", DType::kF16, Shape{n, groups}, w.bytes("weight_scale"));
  h.add("weight_zero_point", DType::kI8, Shape{n, groups}, w.bytes("weight_zero_point"));
  const Bytes& g_idx = w.bytes("weight_g_idx");
  h.add("weight_g_idx", DType::kI32, Shape{k / 2},
        Bytes(g_idx.begin() + static_cast<std::ptrdiff_t>(k / 2 * 4), g_idx.end()));
  return out;
}

inline std::vector<Case> device_cases(bool large, std::uint64_t seed = 0x6770755f64657121) {
  Rng rng(seed);
  std::vector<Case> cases;
  add_integer_cases(cases, rng);
  add_float_cases(cases, rng);
  for (unsigned bits : {3u, 4u})
    cases.push_back({fmt::format("gptq {}-bit row-parallel shard", bits),
                     gptq_second_half_of_k(make_gptq({bits, 32, 2, false, true, DType::kF16}, 256, 40, rng))});
  cases.push_back({"ct int8 row-parallel shard", ct_int_second_half_of_k(rng).shard});
  for (const GgmlBlockType& type : kGgmlBlockTypes)
    cases.push_back({fmt::format("ggml {}", type.name), ggml_weight(type, 7, 3 * 256, rng)});
  cases.push_back({"mxfp4", mxfp4_weight(7, 96, rng)});
  cases.push_back({"mxfp4 as compressed-tensors", ct_mxfp4_weight(5, 64, rng)});
  cases.push_back({"nvfp4", nvfp4_weight(9, 80, rng)});
  cases.push_back({"nvfp4 as ModelOpt", modelopt_nvfp4_weight(7, 48, rng)});
  cases.push_back({"bnb nf4", bnb4_weight(7, 100, false, rng)});
  cases.push_back({"bnb int8", bnb8_weight(9, 70, rng)});
  cases.push_back({"bnb nf4 double-quantized", bnb4_weight(300, 100, true, rng)});  // 469 blocks: 2 nested
  if (!large) return cases;
  cases.push_back({"ggml Q4_K large", ggml_weight(kGgmlBlockTypes[8], 2600, 4096, rng)});
  cases.push_back({"gptq 4-bit large act-order", make_gptq({4, 128, 2, false, true, DType::kF16}, 4128, 2600, rng)});
  cases.push_back({"fp8 block large", fp8_weight(DType::kF8_E4M3, ScaleLayout::kBlock, DType::kF32, 2600, 4128, rng)});
  return cases;
}

// Experts of one geometry stacked as a MoE weight [E, N, K]: every part gains a leading dim E
// (vLLM's fused-MoE layout, LogicalTensor::experts).
inline Weight stack_experts(const std::vector<const Weight*>& experts) {
  Weight w;
  const Weight& first = *experts.front();
  const std::uint64_t e = experts.size();
  w.t = first.t;
  w.t.experts = e;
  w.t.shape = Shape{e, first.t.rows, first.t.cols};
  w.t.rows = e * first.t.rows;
  for (std::size_t p = 0; p < first.parts.size(); ++p) {
    std::vector<std::uint64_t> dims{e};
    dims.insert(dims.end(), first.parts[p].shape.dims().begin(), first.parts[p].shape.dims().end());
    Bytes bytes;
    for (const Weight* x : experts) bytes.insert(bytes.end(), x->parts[p].bytes.begin(), x->parts[p].bytes.end());
    w.add(first.parts[p].role, first.parts[p].dtype, Shape(dims), std::move(bytes));
  }
  return w;
}

// Every device case bitsandbytes 4-bit aside (its blocks run across the whole flattened
// weight, and no writer stacks it) as 3 stacked experts of different values.
inline std::vector<Case> stacked_cases() {
  std::vector<Case> out;
  const std::vector<Case> a = device_cases(false, 1), b = device_cases(false, 2), c = device_cases(false, 3);
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].weight.t.params.scheme == QuantScheme::kBnb4) continue;
    out.push_back({a[i].label + " x3 experts", stack_experts({&a[i].weight, &b[i].weight, &c[i].weight})});
  }
  return out;
}

// The CPU decoder's rows [a, b) of the case's weight as `out_dtype`.
inline std::vector<std::byte> cpu_rows(const Case& c, std::uint64_t a, std::uint64_t b, DType out_dtype) {
  std::vector<std::byte> out((b - a) * c.weight.t.cols * dtype_info(out_dtype).block_bytes);
  const std::vector<PartBytes> views = c.weight.views();
  const Status st = dequantize_rows(c.weight.t, views, a, b, out_dtype, out);
  if (!st) FAIL(st.error().to_string());
  return out;
}

// Element-wise equality of two decodes of rows [a, b), where any NaN equals any NaN (a GPU
// returns the canonical NaN; docs/formats.md); FAILs naming the first differing element.
inline void require_same_decode(const Case& c, std::uint64_t a, std::uint64_t b, DType out_dtype,
                                const std::vector<std::byte>& want, const std::vector<std::byte>& got) {
  REQUIRE(got.size() == want.size());
  const std::uint64_t elem = dtype_info(out_dtype).block_bytes;
  const auto is_nan = [&](const std::byte* p) {
    std::uint32_t x = 0;
    std::memcpy(&x, p, elem);
    if (elem == 4) return (x & 0x7fffffffu) > 0x7f800000u;
    return out_dtype == DType::kBF16 ? (x & 0x7fffu) > 0x7f80u : (x & 0x7fffu) > 0x7c00u;
  };
  for (std::uint64_t i = 0; i < want.size(); i += elem) {
    if (std::memcmp(want.data() + i, got.data() + i, elem) == 0 || (is_nan(want.data() + i) && is_nan(got.data() + i)))
      continue;
    const std::uint64_t e = i / elem;
    FAIL(fmt::format("{} to {}, rows [{}, {}): first difference at row {}, column {}", c.label, dtype_name(out_dtype),
                     a, b, a + e / c.weight.t.cols, e % c.weight.t.cols));
  }
}

}  // namespace qload::testing::quant_ref
