// Llama-4's FP8 MoE experts as transformers' FbgemmFp8Llama4TextExperts stores them (quant_method
// fbgemm_fp8): `<p>.gate_up_proj` F8_E4M3 [E, H, 2I] with `<p>.gate_up_proj_scale` F32 [E, 1, 2I],
// and `<p>.down_proj` F8_E4M3 [E, I, H] with `<p>.down_proj_scale` F32 [E, H, 1]. Each expert's
// weight is stored transposed ([K, N], the operand torch.bmm takes; fbgemm's rowwise GEMM is
// given its transpose) with one scale per output channel n: W[e, k, n] = f32(code) * scale[e, n],
// dequantized in the stored orientation, which is what transformers' bf16 Llama4TextExperts holds.
// Source: transformers src/transformers/integrations/fbgemm_fp8.py (../shared/formats.md 3.4).
#include <fmt/format.h>

#include "../located_error.hpp"
#include "decoders.hpp"

namespace qload::formats::detail {
namespace {

constexpr std::string_view kScaleSuffix = "_scale";

bool is_fp8(DType d) {
  return d == DType::kF8_E4M3 || d == DType::kF8_E5M2;
}

Error expert_error(const Catalog& catalog, const TensorEntry& t, std::string message) {
  Error e = Error(Errc::kCorrupt, std::move(message)).with_tensor(t.name);
  if (t.file < catalog.files.size()) e = std::move(e).with_file(catalog.files[t.file].path);
  return e;
}

}  // namespace

Status detect_fbgemm_experts(const Catalog& catalog, QuantizedCatalog& out) {
  for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
    const TensorEntry& w = catalog.tensors[i];
    if (!is_fp8(w.dtype) || w.shape.rank() != 3) continue;
    const TensorEntry* s = catalog.find(w.name + std::string(kScaleSuffix));
    if (s == nullptr) continue;  // a 3-D F8 tensor with no scale of its own stays as stored
    const std::uint64_t e = w.shape[0], k = w.shape[1], n = w.shape[2];
    const bool shaped = s->shape == Shape{e, 1, n} || s->shape == Shape{e, n, 1};
    const bool typed = s->dtype == DType::kF32 || s->dtype == DType::kBF16 || s->dtype == DType::kF16;
    if (!shaped || !typed)
      return fail(expert_error(catalog, *s,
                               fmt::format("the scale of FP8 experts {} {} is {} {}; expected F32 [{}, 1, {}] or "
                                           "[{}, {}, 1] (one per expert and output channel)",
                                           quote_name(w.name), w.shape.to_string(), dtype_name(s->dtype),
                                           s->shape.to_string(), e, n, e, n)));
    if (e == 0 || k == 0 || n == 0)
      return fail(expert_error(catalog, w, fmt::format("FP8 experts of shape {}", w.shape.to_string())));
    out.logical.push_back(LogicalTensor{
        .name = w.name,
        .params = {.scheme = QuantScheme::kFp8,
                   .bits = 8,
                   .scale_layout = ScaleLayout::kColumn,
                   .weight_dtype = w.dtype,
                   .scale_dtype = s->dtype},
        .rows = e * k,  // the catalog bounded each dim by the tensor's bytes
        .cols = n,
        .shape = w.shape,
        .experts = e,
        .parts = {{"weight", i}, {"weight_scale", static_cast<std::uint32_t>(s - catalog.tensors.data())}}});
  }
  return {};
}

}  // namespace qload::formats::detail
