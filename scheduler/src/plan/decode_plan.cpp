#include "plan/decode_plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "qload/formats/quant_pack.hpp"

namespace qload::scheduler::detail {
namespace {

bool is_floating(DType d) {
  return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32;
}

// "<prefix>.weight" -> "<prefix>.<suffix>".
std::string sibling_name(const std::string& weight_name, std::string_view suffix) {
  return weight_name.substr(0, weight_name.size() - std::string_view("weight").size()) + std::string(suffix);
}

// A repack job for `lt` when it needs one (GPTQ v1, GPTQ with g_idx, AWQ GEMM), else none.
Result<std::optional<DecodeJob>> repack_job(const formats::Catalog& catalog, const formats::LogicalTensor& lt,
                                            std::uint32_t l) {
  if (!needs_repack(lt)) return std::optional<DecodeJob>();
  if (lt.experts > 0)
    return fail(Error(Errc::kUnsupported, fmt::format("repacking a weight of {} stacked experts is not supported; "
                                                      "load it as stored or dequantized",
                                                      lt.experts))
                    .with_tensor(lt.name));
  DecodeJob job{.kind = DecodeJob::Kind::kRepack, .logical = l, .repacked = repacked_params(lt)};
  for (const auto& [role, index] : lt.parts) job.inputs.push_back(index);
  const formats::TensorEntry& scales = catalog.tensors[*lt.part("scales")];
  QLOAD_ASSIGN_OR_RETURN(job.outputs, repack_outputs(lt, scales.dtype, scales.shape));
  for (const DecodeOutput& out : job.outputs)
    if (const formats::TensorEntry* same = catalog.find(out.name);
        same != nullptr && std::ranges::none_of(lt.parts, [&](const auto& part) {
          return part.second == static_cast<std::uint32_t>(same - catalog.tensors.data());
        }))
      return fail(
          Error(Errc::kCorrupt, "a repacked part's name is already another stored tensor").with_tensor(out.name));
  return std::optional<DecodeJob>(std::move(job));
}

}  // namespace

bool needs_repack(const formats::LogicalTensor& lt) {
  const formats::QuantParams& p = lt.params;
  const bool gptq = p.scheme == formats::QuantScheme::kGptq;
  return p.scheme == formats::QuantScheme::kAwqGemm || (gptq && (p.gptq_version == 1 || lt.part("g_idx")));
}

namespace {

// The GPTQ v2 weight a repack turns `lt` into (its geometry and group count kept).
formats::LogicalTensor repack_target(const formats::LogicalTensor& lt) {
  if (lt.params.scheme == formats::QuantScheme::kAwqGemm) return formats::awq_gemm_as_gptq(lt);
  formats::LogicalTensor t = lt;
  t.params.gptq_version = 2;
  return t;
}

}  // namespace

formats::QuantParams repacked_params(const formats::LogicalTensor& lt) {
  return repack_target(lt).params;
}

Result<std::vector<DecodeOutput>> repack_outputs(const formats::LogicalTensor& lt, DType scales_dtype,
                                                 const Shape& scales_shape) {
  QLOAD_ASSIGN_OR_RETURN(const formats::PackedShapes shapes, formats::packed_shapes(repack_target(lt)));
  std::vector<DecodeOutput> outputs;
  auto add = [&](std::string role, DType dtype, Shape shape) -> Status {
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, shape.nbytes(dtype));
    std::string name = sibling_name(lt.name, role);
    outputs.push_back(
        DecodeOutput{.name = std::move(name), .role = std::move(role), .dtype = dtype, .shape = shape, .bytes = bytes});
    return {};
  };
  QLOAD_TRY(add("qweight", DType::kI32, shapes.weight));
  QLOAD_TRY(add("qzeros", DType::kI32, shapes.zeros));
  QLOAD_TRY(add("scales", scales_dtype, scales_shape));
  if (lt.params.scheme == formats::QuantScheme::kGptq && lt.part("g_idx")) {  // act-order: sorted, with its order
    QLOAD_TRY(add("g_idx", DType::kI32, Shape{lt.cols}));
    QLOAD_TRY(add("perm", DType::kI32, Shape{lt.cols}));
  }
  return outputs;
}

// A mixture of experts' router: Mixtral's block_sparse_moe.gate, Qwen-MoE's and DeepSeek's
// mlp.gate, gpt-oss's mlp.router, Qwen2-MoE's shared_expert_gate, GGUF's ffn_gate_inp. Its
// logits pick the experts; every quantizer leaves it as it is, and vLLM builds it unquantized
// (a quantized one is a checkpoint vLLM refuses).
bool is_router_name(std::string_view n) {
  return n.ends_with(".gate.weight") || n.ends_with(".router.weight") || n.ends_with("shared_expert_gate.weight") ||
         n.ends_with("ffn_gate_inp.weight");
}

bool is_quantizable_name(std::string_view n) {
  // "embd", "output.weight": GGUF's token_embd and output head.
  return n.ends_with(".weight") && n.find("embed") == std::string::npos && n.find("embd") == std::string::npos &&
         n.find("norm") == std::string::npos && n.find("lm_head") == std::string::npos && n != "output.weight" &&
         !is_router_name(n);
}

Result<formats::QuantizedLayout> named_quantized_layout(const std::string& name, std::uint64_t rows, std::uint64_t cols,
                                                        formats::QuantizeTarget target) {
  auto layout = formats::quantized_layout(rows, cols, target);
  if (!layout) return fail(std::move(layout.error()).with_tensor(name));
  return layout;
}

bool is_quantizable_weight(const formats::TensorEntry& t) {
  return is_floating(t.dtype) && t.shape.rank() == 2 && is_quantizable_name(t.name);
}

std::vector<bool> quantized_parts(const formats::Catalog& catalog, const formats::QuantizedCatalog& quant) {
  std::vector<bool> out(catalog.tensors.size(), false);
  for (const formats::LogicalTensor& lt : quant.logical)
    for (const auto& [role, index] : lt.parts) out[index] = true;
  return out;
}

namespace {

// The policy for `name`: the per-weight rule's if it has one, else the global options'.
Result<WeightPolicy> policy_of(const PlanOptions& options, std::string_view name, bool quantized) {
  using Action = WeightPolicy::Action;
  if (options.weight_policy) {
    QLOAD_ASSIGN_OR_RETURN(std::optional<WeightPolicy> rule, options.weight_policy(name));
    if (rule) {
      if (quantized && rule->action == Action::kQuantize)
        return fail(Error(Errc::kInvalidArgument,
                          "a rule asks to quantize a weight that is already quantized (dequantize and quantize "
                          "together requantize it)")
                        .with_tensor(std::string(name)));
      if (!quantized && rule->action == Action::kRequantize) rule->action = Action::kQuantize;
      return *rule;
    }
  }
  if (quantized && options.dequantize && options.quantize)
    return WeightPolicy{.action = Action::kRequantize, .dtype = *options.dequantize, .target = *options.quantize};
  if (quantized && options.dequantize) return WeightPolicy{.action = Action::kDequantize, .dtype = *options.dequantize};
  if (quantized && options.repack) return WeightPolicy{.action = Action::kRepack};
  if (!quantized && options.quantize) return WeightPolicy{.action = Action::kQuantize, .target = *options.quantize};
  return WeightPolicy{};
}

bool is_own_part(const formats::Catalog& catalog, const formats::LogicalTensor& lt, std::string_view name) {
  return std::ranges::any_of(lt.parts, [&](const auto& part) { return catalog.tensors[part.second].name == name; });
}

// The dequantized weight's name may be a part's (FP8 and int8 keep "weight"), never another tensor's.
Status check_decoded_name(const formats::Catalog& catalog, const formats::LogicalTensor& lt) {
  if (catalog.find(lt.name) != nullptr && !is_own_part(catalog, lt, lt.name))
    return fail(Error(Errc::kCorrupt, "the dequantized weight's name is already a stored tensor").with_tensor(lt.name));
  return {};
}

// Whether quantize-on-load could take `lt` once dequantized (as it would a plain weight).
bool is_requantizable(const formats::LogicalTensor& lt) {
  return lt.dequantized_shape().rank() == 2 && is_quantizable_name(lt.name);
}

Result<DecodeJob> dequantize_job(const formats::Catalog& catalog, const formats::LogicalTensor& lt, std::uint32_t l,
                                 DType dtype) {
  QLOAD_TRY(check_decoded_name(catalog, lt));
  DecodeJob job{.kind = DecodeJob::Kind::kDequantize, .logical = l};
  for (const auto& [role, index] : lt.parts) job.inputs.push_back(index);
  auto elems = checked_mul(lt.rows, lt.cols);
  auto bytes = elems ? checked_mul(*elems, dtype_info(dtype).block_bytes) : elems;
  if (!bytes) return fail(Error(Errc::kOverflow, "dequantized size exceeds 2^64").with_tensor(lt.name));
  job.outputs.push_back(
      DecodeOutput{.name = lt.name, .dtype = dtype, .shape = lt.dequantized_shape(), .bytes = *bytes});
  return job;
}

// The weight and scale quantizing `name` ([rows, cols]) to `target` writes. The scale's name
// may be one of `source`'s parts (a requantized weight's old scale), never another tensor's.
Result<std::vector<DecodeOutput>> quantize_outputs(const formats::Catalog& catalog, const std::string& name,
                                                   std::uint64_t rows, std::uint64_t cols,
                                                   formats::QuantizeTarget target,
                                                   const formats::LogicalTensor* source = nullptr) {
  QLOAD_ASSIGN_OR_RETURN(const formats::QuantizedLayout layout, named_quantized_layout(name, rows, cols, target));
  const std::string scale_name = sibling_name(name, layout.scale_suffix);
  if (catalog.find(scale_name) != nullptr && (source == nullptr || !is_own_part(catalog, *source, scale_name)))
    return fail(
        Error(Errc::kCorrupt, fmt::format("cannot quantize: '{}' already exists", scale_name)).with_tensor(name));
  return std::vector<DecodeOutput>{
      DecodeOutput{
          .name = name, .dtype = layout.weight_dtype, .shape = Shape{rows, cols}, .bytes = layout.weight_bytes},
      DecodeOutput{.name = scale_name, .dtype = DType::kF32, .shape = layout.scale_shape, .bytes = layout.scale_bytes}};
}

Result<DecodeJob> quantize_job(const formats::Catalog& catalog, std::uint32_t i, formats::QuantizeTarget target) {
  const formats::TensorEntry& t = catalog.tensors[i];
  DecodeJob job{.kind = DecodeJob::Kind::kQuantize, .input = i, .target = target, .inputs = {i}};
  QLOAD_ASSIGN_OR_RETURN(job.outputs, quantize_outputs(catalog, t.name, t.shape[0], t.shape[1], target));
  return job;
}

Result<DecodeJob> requantize_job(const formats::Catalog& catalog, const formats::LogicalTensor& lt, std::uint32_t l,
                                 const WeightPolicy& policy) {
  QLOAD_TRY(check_decoded_name(catalog, lt));
  DecodeJob job{.kind = DecodeJob::Kind::kRequantize, .logical = l, .through = policy.dtype, .target = policy.target};
  for (const auto& [role, index] : lt.parts) job.inputs.push_back(index);
  const Shape shape = lt.dequantized_shape();
  QLOAD_ASSIGN_OR_RETURN(job.outputs, quantize_outputs(catalog, lt.name, shape[0], shape[1], policy.target, &lt));
  return job;
}

}  // namespace

Result<std::vector<DecodeJob>> plan_decode_jobs(const formats::Catalog& catalog, const formats::QuantizedCatalog& quant,
                                                const PlanOptions& options) {
  std::vector<DecodeJob> dequantize, repack, quantize;  // in this order (requantize with dequantize), as documented
  for (std::uint32_t l = 0; l < quant.logical.size(); ++l) {
    const formats::LogicalTensor& lt = quant.logical[l];
    QLOAD_ASSIGN_OR_RETURN(const WeightPolicy policy, policy_of(options, lt.name, /*quantized=*/true));
    if (policy.action == WeightPolicy::Action::kRequantize && is_requantizable(lt)) {
      QLOAD_ASSIGN_OR_RETURN(DecodeJob job, requantize_job(catalog, lt, l, policy));
      dequantize.push_back(std::move(job));
    } else if (policy.action == WeightPolicy::Action::kDequantize ||
               policy.action == WeightPolicy::Action::kRequantize) {
      QLOAD_ASSIGN_OR_RETURN(DecodeJob job, dequantize_job(catalog, lt, l, policy.dtype));
      dequantize.push_back(std::move(job));
    } else if (policy.action == WeightPolicy::Action::kRepack) {
      QLOAD_ASSIGN_OR_RETURN(std::optional<DecodeJob> job, repack_job(catalog, lt, l));
      if (job) repack.push_back(std::move(*job));
    }
  }
  const std::vector<bool> parts = quantized_parts(catalog, quant);
  for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
    const formats::TensorEntry& t = catalog.tensors[i];
    if (parts[i] || !is_quantizable_weight(t)) continue;
    QLOAD_ASSIGN_OR_RETURN(const WeightPolicy policy, policy_of(options, t.name, /*quantized=*/false));
    if (policy.action != WeightPolicy::Action::kQuantize) continue;
    QLOAD_ASSIGN_OR_RETURN(DecodeJob job, quantize_job(catalog, i, policy.target));
    quantize.push_back(std::move(job));
  }
  QLOAD_ASSIGN_OR_RETURN(std::vector<DecodeJob> gathers, contiguous_jobs(catalog, parts, quantize, options));
  std::vector<DecodeJob> jobs = std::move(dequantize);
  for (DecodeJob& j : repack) jobs.push_back(std::move(j));
  for (DecodeJob& j : quantize) jobs.push_back(std::move(j));
  for (DecodeJob& j : gathers) jobs.push_back(std::move(j));
  // Catalog order for quantize and contiguous jobs together (each has one input).
  std::stable_sort(jobs.end() - static_cast<std::ptrdiff_t>(quantize.size() + gathers.size()), jobs.end(),
                   [](const DecodeJob& a, const DecodeJob& b) { return a.input < b.input; });
  return jobs;
}

Result<std::vector<DecodeJob>> contiguous_jobs(const formats::Catalog& catalog, const std::vector<bool>& parts,
                                               const std::vector<DecodeJob>& taken, const PlanOptions& options) {
  std::vector<bool> gathered(catalog.tensors.size(), false);
  for (const DecodeJob& job : taken)
    for (const std::uint32_t i : job.inputs) gathered[i] = true;
  std::vector<DecodeJob> jobs;
  for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
    const formats::TensorEntry& t = catalog.tensors[i];
    if (t.strides.empty() || gathered[i]) continue;
    if (i < parts.size() && parts[i])
      return fail(Error(Errc::kUnsupported,
                        "a part of a quantized weight stored as a non-contiguous view: qload decodes parts stored "
                        "row-major (save them with .contiguous())")
                      .with_tensor(t.name)
                      .with_file(catalog.files[t.file].path)
                      .with_offset(t.offset));
    const DType dtype = options.dtype && is_floating(t.dtype) ? *options.dtype : t.dtype;
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, t.shape.nbytes(dtype));
    jobs.push_back(
        DecodeJob{.kind = DecodeJob::Kind::kContiguous,
                  .input = i,
                  .inputs = {i},
                  .outputs = {DecodeOutput{.name = t.name, .dtype = dtype, .shape = t.shape, .bytes = bytes}}});
  }
  return jobs;
}

}  // namespace qload::scheduler::detail
