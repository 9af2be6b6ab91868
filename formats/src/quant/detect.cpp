// detect_quantization: the config (detect_sources.cpp) gives the rules; the tensor names give
// the modules, each module's parts are checked against its rule (detect_parts.cpp). Without a
// config, only self-describing layouts (FP8 and int8 with a per-tensor, per-row or 128x128
// block scale) are recognised by their suffixes; anything else that looks quantized is an
// error rather than a guess. Decisions: docs/formats.md "Quantized checkpoints".
#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

#include "decoders.hpp"
#include "detect.hpp"
#include "located_error.hpp"
#include "qload/formats/gguf.hpp"

namespace qload::formats {

std::string_view quant_scheme_name(QuantScheme scheme) noexcept {
  switch (scheme) {
    case QuantScheme::kGptq: return "gptq";
    case QuantScheme::kAwqGemm: return "awq-gemm";
    case QuantScheme::kAwqGemv: return "awq-gemv";
    case QuantScheme::kFp8: return "fp8";
    case QuantScheme::kCtPacked: return "ct-pack-quantized";
    case QuantScheme::kCtInt: return "ct-int-quantized";
    case QuantScheme::kGgml: return "ggml";
    case QuantScheme::kMxfp4: return "mxfp4";
    case QuantScheme::kNvfp4: return "nvfp4";
    case QuantScheme::kBnb4: return "bnb-4bit";
    case QuantScheme::kBnb8: return "bnb-int8";
  }
  return "unknown";
}

std::string weight_scheme_name(const QuantParams& params) {
  if (params.scheme == QuantScheme::kGgml) return fmt::format("ggml-{}", ggml_type_name(params.ggml_type));
  if (params.scheme == QuantScheme::kBnb4) return params.bnb_fp4 ? "bnb-fp4" : "bnb-nf4";
  return std::string(quant_scheme_name(params.scheme));
}

std::optional<std::uint32_t> LogicalTensor::part(std::string_view role) const {
  for (const auto& [part_role, index] : parts)
    if (part_role == role) return index;
  return std::nullopt;
}

namespace detail {
namespace {

using Modules = std::map<std::string, ModuleTensors, std::less<>>;

constexpr std::array<std::string_view, 15> kKnownSuffixes = {"qweight",
                                                             "qzeros",
                                                             "scales",
                                                             "g_idx",
                                                             "weight",
                                                             "weight_scale",
                                                             "weight_scale_inv",
                                                             "weight_packed",
                                                             "weight_zero_point",
                                                             "weight_shape",
                                                             "weight_g_idx",
                                                             "weight_global_scale",
                                                             "weight_scale_2",
                                                             "input_scale",
                                                             "input_global_scale"};
// Any of these makes a module a quantized one under a config.
constexpr std::array<std::string_view, 12> kQuantSuffixes = {"qweight",
                                                             "qzeros",
                                                             "scales",
                                                             "g_idx",
                                                             "weight_scale",
                                                             "weight_scale_inv",
                                                             "weight_packed",
                                                             "weight_zero_point",
                                                             "weight_shape",
                                                             "weight_g_idx",
                                                             "weight_global_scale",
                                                             "weight_scale_2"};
// Without a config, these mark a checkpoint as quantized (plain models may well have a
// "scales" or "g_idx" tensor of their own).
constexpr std::array<std::string_view, 6> kStrongSuffixes = {"qweight",      "qzeros",           "weight_packed",
                                                             "weight_scale", "weight_scale_inv", "weight_zero_point"};
constexpr std::string_view kNoConfigFiles =
    "config.json quantization_config, quantize_config.json, quant_config.json or hf_quant_config.json";

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& set, std::string_view s) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

template <std::size_t N>
std::optional<std::uint32_t> first_of(const ModuleTensors& m, const std::array<std::string_view, N>& set) {
  for (const auto& [suffix, index] : m.parts)
    if (contains(set, suffix)) return index;
  return std::nullopt;
}

Modules group_modules(const Catalog& catalog) {
  Modules modules;
  for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
    const std::string& name = catalog.tensors[i].name;
    const std::size_t dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0) continue;
    const std::string_view suffix = std::string_view(name).substr(dot + 1);
    if (!contains(kKnownSuffixes, suffix)) continue;
    ModuleTensors& m = modules[name.substr(0, dot)];
    m.module = name.substr(0, dot);
    m.parts.emplace(std::string(suffix), i);
  }
  return modules;
}

std::optional<DType> weight_dtype(const Catalog& catalog, const ModuleTensors& m) {
  const auto w = m.find("weight");
  return w ? std::optional<DType>(catalog.tensors[*w].dtype) : std::nullopt;
}

std::optional<DType> packed_dtype(const Catalog& catalog, const ModuleTensors& m) {
  const auto p = m.find("weight_packed");
  return p ? std::optional<DType>(catalog.tensors[*p].dtype) : std::nullopt;
}

bool is_fp8(std::optional<DType> d) {
  return d == DType::kF8_E4M3 || d == DType::kF8_E5M2;
}

// The module's first quantized-looking tensor: the one errors name.
std::uint32_t evidence(const ModuleTensors& m) {
  if (const auto q = first_of(m, kQuantSuffixes)) return *q;
  return m.parts.begin()->second;
}

// Whether a config must account for this module: a quantized part, or a weight stored in the
// narrow dtype of one of the config's rules (an FP8 or int8 weight whose scale is missing).
bool is_quantized(const Catalog& catalog, const QuantConfig& config, const ModuleTensors& m) {
  if (first_of(m, kQuantSuffixes)) return true;
  const std::optional<DType> w = weight_dtype(catalog, m);
  return std::any_of(config.rules.begin(), config.rules.end(), [&](const Rule& r) {
    return (r.kind == PartKind::kFp8 && is_fp8(w)) || (r.kind == PartKind::kCtInt && w == DType::kI8);
  });
}

// Whether a module's stored parts could be `rule`'s (used to split overlapping targets).
bool fits(const Catalog& catalog, const Rule& rule, const ModuleTensors& m) {
  const std::optional<DType> w = weight_dtype(catalog, m);
  switch (rule.kind) {
    case PartKind::kCtPacked: return packed_dtype(catalog, m) == DType::kI32;
    case PartKind::kCtFp4: return packed_dtype(catalog, m) == DType::kU8;
    case PartKind::kCtInt: return w == DType::kI8 && !m.find("weight_packed");
    case PartKind::kFp8: return is_fp8(w) && !m.find("weight_packed");
    default: return false;
  }
}

// One match, charged to the config's work budget (detect.hpp kMaxMatchWork) before it runs:
// patterns x modules is bounded however many of either the checkpoint and its config bring.
// `rule`: the rule whose targets `p` is one of, or null for the exclusion list.
Result<MatchRank> charged_match(const QuantConfig& config, const Rule* rule, const ModulePattern& p,
                                std::string_view module, std::uint64_t& work_left) {
  const std::uint64_t cost = match_cost(p, module);
  if (cost > work_left)
    return fail(Error(Errc::kUnsupported,
                      fmt::format("matching the patterns of {} ({}) against the checkpoint's module names needs "
                                  "more than {} steps, qload's budget for a config's patterns x modules (fewer or "
                                  "simpler patterns fit)",
                                  config.source, rule != nullptr ? "targets of " + rule->label : config.exclude_key,
                                  kMaxMatchWork))
                    .with_file(config.path));
  work_left -= cost;
  return match_module(p, module);
}

Result<MatchRank> best_rank(const QuantConfig& config, const Rule& rule, std::string_view module,
                            std::uint64_t& work_left) {
  MatchRank best = MatchRank::kNone;
  for (const ModulePattern& p : rule.targets) {
    QLOAD_ASSIGN_OR_RETURN(const MatchRank rank, charged_match(config, &rule, p, module, work_left));
    best = std::max(best, rank);
  }
  return best;
}

// compressed-tensors: the group whose target matches most specifically (exact name, regex,
// class name); a tie goes to the one group whose format fits the stored parts.
Result<const Rule*> select_rule(const Catalog& catalog, const QuantConfig& config, const ModuleTensors& m,
                                std::uint64_t& work_left) {
  if (config.rules.size() == 1 && config.rules.front().targets.empty()) return &config.rules.front();
  MatchRank best = MatchRank::kNone;
  std::vector<const Rule*> candidates;
  for (const Rule& rule : config.rules) {
    QLOAD_ASSIGN_OR_RETURN(const MatchRank rank, best_rank(config, rule, m.module, work_left));
    if (rank == MatchRank::kNone || rank < best) continue;
    if (rank > best) candidates.clear();
    best = rank;
    candidates.push_back(&rule);
  }
  const std::string& name = catalog.tensors[evidence(m)].name;
  if (candidates.empty())
    return fail(Error(Errc::kCorrupt, fmt::format("module {} has quantized tensors but no config_groups target "
                                                  "matches it",
                                                  quote_name(m.module)))
                    .with_tensor(name)
                    .with_file(config.path));
  if (candidates.size() == 1) return candidates.front();
  std::vector<const Rule*> fitting;
  for (const Rule* r : candidates)
    if (fits(catalog, *r, m)) fitting.push_back(r);
  if (fitting.size() == 1) return fitting.front();
  return fail(Error(Errc::kUnsupported, fmt::format("module {} matches {} and {} equally; qload cannot tell which "
                                                    "applies",
                                                    quote_name(m.module), candidates[0]->label, candidates[1]->label))
                  .with_tensor(name)
                  .with_file(config.path));
}

// Every part belongs to the rule's scheme, and the scheme's anchor part is there.
Status check_module(const Catalog& catalog, const QuantConfig& config, const Rule& rule, const ModuleTensors& m) {
  if (rule.kind == PartKind::kDense)
    return fail(Error(Errc::kCorrupt, fmt::format("contradictory quantization config: {} stores weights "
                                                  "unquantized, but the checkpoint has quantized tensors",
                                                  rule.label))
                    .with_tensor(catalog.tensors[evidence(m)].name)
                    .with_file(config.path));
  // Quantized parts first: they are the better evidence of what the checkpoint really is.
  for (const bool quant_pass : {true, false})
    for (const auto& [suffix, index] : m.parts)
      if (contains(kQuantSuffixes, suffix) == quant_pass && !part_allowed(rule.kind, suffix))
        return fail(
            Error(Errc::kCorrupt, fmt::format("contradictory quantization config: {} says {}, but {} is not a "
                                              "part of that scheme",
                                              config.source, rule.label, quote_name(catalog.tensors[index].name)))
                .with_tensor(catalog.tensors[index].name)
                .with_file(config.path));
  const std::string_view anchor = anchor_of(rule.kind);
  if (!m.find(anchor)) {
    const std::string& name = catalog.tensors[evidence(m)].name;
    return fail(Error(Errc::kCorrupt, fmt::format("{} has no {} ({})", quote_name(name),
                                                  quote_name(m.module + "." + std::string(anchor)), rule.label))
                    .with_tensor(name));
  }
  return {};
}

Result<const ModulePattern*> excluded_by(const QuantConfig& config, std::string_view module, std::uint64_t& work_left) {
  for (const ModulePattern& p : config.exclude) {
    QLOAD_ASSIGN_OR_RETURN(const MatchRank rank, charged_match(config, nullptr, p, module, work_left));
    if (rank == MatchRank::kExact || rank == MatchRank::kRegex) return &p;  // a class name cannot be resolved
  }
  return nullptr;
}

Status detect_with_config(const Catalog& catalog, const QuantConfig& config, const Modules& modules,
                          QuantizedCatalog& out) {
  std::uint64_t work_left = kMaxMatchWork;
  for (const auto& [name, m] : modules) {
    if (!is_quantized(catalog, config, m)) continue;
    const std::string& tensor = catalog.tensors[evidence(m)].name;
    QLOAD_ASSIGN_OR_RETURN(const ModulePattern* excluded, excluded_by(config, m.module, work_left));
    if (excluded != nullptr)
      return fail(Error(Errc::kCorrupt, fmt::format("module {} is excluded from quantization by {} entry {}, but "
                                                    "has quantized tensor {}",
                                                    quote_name(m.module), config.exclude_key,
                                                    quote_name(excluded->text), quote_name(tensor)))
                      .with_tensor(tensor)
                      .with_file(config.path));
    if (config.rules.empty())
      return fail(Error(Errc::kCorrupt, fmt::format("contradictory quantization config: {} ({}) quantizes no "
                                                    "weights, but {} looks quantized",
                                                    config.source, config.method, quote_name(tensor)))
                      .with_tensor(tensor)
                      .with_file(config.path));
    QLOAD_ASSIGN_OR_RETURN(const Rule* rule, select_rule(catalog, config, m, work_left));
    QLOAD_TRY(check_module(catalog, config, *rule, m));
    QLOAD_ASSIGN_OR_RETURN(LogicalTensor logical, build_logical(catalog, m, *rule));
    out.logical.push_back(std::move(logical));
  }
  return {};
}

// No config: FP8 and int8 weights with a scale describe themselves; others are refused.
Status detect_from_names(const Catalog& catalog, const Modules& modules, QuantizedCatalog& out) {
  const Rule fp8{.label = "fp8 (from tensor names)",
                 .kind = PartKind::kFp8,
                 .bits = 8,
                 .layouts = {ScaleLayout::kTensor, ScaleLayout::kRow}};
  const Rule fp8_block{.label = "fp8 block (from tensor names)",
                       .kind = PartKind::kFp8,
                       .bits = 8,
                       .layouts = {ScaleLayout::kBlock},
                       .block_rows = 128,
                       .block_cols = 128,
                       .scale_inv_allowed = true};
  const Rule int8{.label = "int8 (from tensor names)",
                  .kind = PartKind::kCtInt,
                  .bits = 8,
                  .layouts = {ScaleLayout::kTensor, ScaleLayout::kRow},
                  .compressed_tensors = true};
  std::vector<std::string> unknown;  // the first three, quoted
  std::string first;
  std::size_t unknown_count = 0;
  bool any_fp8 = false;
  bool any_int8 = false;
  for (const auto& [name, m] : modules) {
    const auto strong = first_of(m, kStrongSuffixes);
    if (!strong) continue;
    const std::optional<DType> w = weight_dtype(catalog, m);
    const Rule* rule = !is_fp8(w)                   ? (w == DType::kI8 ? &int8 : nullptr)
                       : m.find("weight_scale_inv") ? &fp8_block
                                                    : &fp8;
    const bool allowed = rule != nullptr && std::all_of(m.parts.begin(), m.parts.end(), [&](const auto& part) {
                           return part_allowed(rule->kind, part.first) && part.first != "weight_zero_point";
                         });
    if (!allowed) {
      if (first.empty()) first = catalog.tensors[*strong].name;
      if (unknown.size() < 3) unknown.push_back(quote_name(catalog.tensors[*strong].name));
      ++unknown_count;
      continue;
    }
    QLOAD_ASSIGN_OR_RETURN(LogicalTensor logical, build_logical(catalog, m, *rule));
    (rule->kind == PartKind::kFp8 ? any_fp8 : any_int8) = true;
    out.logical.push_back(std::move(logical));
  }
  if (unknown_count > 0) {
    return fail(Error(Errc::kCorrupt, fmt::format("tensors look quantized ({}{}) but no quantization config was "
                                                  "found ({}); for a single .safetensors file, pass its model "
                                                  "directory",
                                                  fmt::join(unknown, ", "),
                                                  unknown_count > unknown.size()
                                                      ? fmt::format(" and {} more", unknown_count - unknown.size())
                                                      : "",
                                                  kNoConfigFiles))
                    .with_tensor(first));
  }
  if (any_fp8 || any_int8) {
    out.method = any_fp8 && any_int8 ? "fp8+int8" : any_fp8 ? "fp8" : "int8";
    out.config_source = "tensor names";
  }
  return {};
}

}  // namespace

std::string_view anchor_of(PartKind kind) {
  switch (kind) {
    case PartKind::kGptq:
    case PartKind::kAwqGemm:
    case PartKind::kAwqGemv: return "qweight";
    case PartKind::kCtPacked:
    case PartKind::kCtFp4: return "weight_packed";
    case PartKind::kFp8:
    case PartKind::kCtInt:
    case PartKind::kModeloptFp4:
    case PartKind::kDense: return "weight";
  }
  return "weight";
}

}  // namespace detail

namespace {

// The weights, sorted by name, and every catalog tensor that is part of none.
QuantizedCatalog with_plain_tensors(const Catalog& catalog, QuantizedCatalog out) {
  std::sort(out.logical.begin(), out.logical.end(),
            [](const LogicalTensor& a, const LogicalTensor& b) { return a.name < b.name; });
  std::vector<bool> used(catalog.tensors.size(), false);
  for (const LogicalTensor& t : out.logical)
    for (const auto& [role, index] : t.parts) used[index] = true;
  for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i)
    if (!used[i]) out.plain.push_back(i);
  return out;
}

}  // namespace

Result<QuantizedCatalog> detect_quantization(const Catalog& catalog) {
  QuantizedCatalog out;
  if (catalog.format == "gguf") {
    // GGUF names each tensor's type itself: every block-typed tensor is a quantized weight.
    for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
      if (!catalog.tensors[i].ggml_type) continue;
      QLOAD_ASSIGN_OR_RETURN(LogicalTensor logical, detail::ggml_weight(catalog, i));
      out.logical.push_back(std::move(logical));
    }
    if (!out.logical.empty()) {
      out.method = "gguf";
      out.config_source = "GGUF tensor types";
    }
    return with_plain_tensors(catalog, std::move(out));
  }
  QLOAD_ASSIGN_OR_RETURN(const std::optional<detail::QuantConfig> config, detail::read_quant_config(catalog));
  const detail::Modules modules = detail::group_modules(catalog);
  if (config) {
    out.method = config->method;
    out.config_source = config->source;
    QLOAD_TRY(detail::detect_with_config(catalog, *config, modules, out));
    if (config->method == "mxfp4") QLOAD_TRY(detail::detect_mxfp4(catalog, out));
    if (config->method == "fbgemm_fp8") QLOAD_TRY(detail::detect_fbgemm_experts(catalog, out));
    if (config->method == "bitsandbytes") {
      QLOAD_TRY(detail::detect_bnb4(catalog, out));
      QLOAD_TRY(detail::detect_bnb8(catalog, out));
    }
  } else {
    QLOAD_TRY(detail::detect_from_names(catalog, modules, out));
  }
  return with_plain_tensors(catalog, std::move(out));
}

}  // namespace qload::formats
