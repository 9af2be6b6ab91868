// GPTQ, AWQ and FP8 configs (config.json quantization_config, AutoGPTQ quantize_config.json,
// AutoAWQ quant_config.json, ModelOpt hf_quant_config.json) as detection rules. The keys and
// their meaning: ../shared/formats.md sections 1-3; the decisions: docs/formats.md.
#include <algorithm>

#include <fmt/format.h>

#include "detect_config.hpp"
#include "located_error.hpp"

namespace qload::formats::detail {
namespace {

Result<std::int64_t> group_size_of(const Json& config, const char* key, const char* alias, std::int64_t fallback,
                                   const JsonPlace& place) {
  QLOAD_ASSIGN_OR_RETURN(const auto main, get_int(config, key, place));
  QLOAD_ASSIGN_OR_RETURN(const auto other, get_int(config, alias, place));
  if (main && other && *main != *other)
    return fail(config_error(Errc::kCorrupt,
                             fmt::format("{} is {} but {} is {}", place.key(key), *main, place.key(alias), *other),
                             place.path));
  const std::int64_t value = main.value_or(other.value_or(fallback));
  if (value != -1 && value <= 0)
    return fail(config_error(
        Errc::kCorrupt, fmt::format("{} is {}, expected -1 or a positive number", place.key(key), value), place.path));
  return value;
}

// checkpoint_format and its GPTQModel spelling `format`: missing or "gptq" is v1.
Result<std::uint32_t> gptq_version(const Json& config, const JsonPlace& place) {
  QLOAD_ASSIGN_OR_RETURN(const auto checkpoint_format, get_string(config, "checkpoint_format", place));
  QLOAD_ASSIGN_OR_RETURN(const auto format, get_string(config, "format", place));
  if (checkpoint_format && format && lower_ascii(*checkpoint_format) != lower_ascii(*format))
    return fail(config_error(Errc::kCorrupt,
                             fmt::format("{} is {} but {} is {}", place.key("checkpoint_format"),
                                         quote_name(*checkpoint_format), place.key("format"), quote_name(*format)),
                             place.path));
  const std::string value = lower_ascii(checkpoint_format.value_or(format.value_or("gptq")));
  if (value == "gptq") return 1u;
  if (value == "gptq_v2") return 2u;
  return fail(config_error(
      Errc::kUnsupported,
      fmt::format("GPTQ checkpoint format {} is not supported (qload decodes gptq and gptq_v2)", quote_name(value)),
      place.path));
}

// Whether GPTQModel wrote the checkpoint: its meta.quantizer (a list like ["gptqmodel:4.0.0"],
// or one string) names it. Its v1 zeros are stored by whole words (QuantParams).
Result<bool> written_by_gptqmodel(const Json& config, const JsonPlace& place) {
  QLOAD_ASSIGN_OR_RETURN(const Json* meta, get_object(config, "meta", place));
  if (meta == nullptr) return false;
  const auto names = [](const Json& v) {
    return v.is_string() && lower_ascii(v.get<std::string>()).starts_with("gptqmodel");
  };
  const auto quantizer = meta->find("quantizer");
  if (quantizer == meta->end()) return false;
  if (quantizer->is_array()) return std::ranges::any_of(*quantizer, names);
  return names(*quantizer);
}

// GPTQModel `dynamic`: "-:<regex>" keys skip modules; per-module overrides are not supported.
Result<std::vector<ModulePattern>> gptq_dynamic(const Json& config, const JsonPlace& place) {
  std::vector<ModulePattern> skip;
  PatternTally tally;
  QLOAD_ASSIGN_OR_RETURN(const Json* dynamic, get_object(config, "dynamic", place));
  if (dynamic == nullptr) return skip;
  if (dynamic->size() > kMaxPatterns)
    return fail(config_error(Errc::kUnsupported,
                             fmt::format("{} has more than {} entries", place.key("dynamic"), kMaxPatterns),
                             place.path));
  for (const auto& [key, value] : dynamic->items()) {
    if (key.starts_with("-:")) {
      QLOAD_ASSIGN_OR_RETURN(ModulePattern p, make_pattern(ModulePattern::Kind::kRegex, key.substr(2), place.path,
                                                           place.key("dynamic"), tally));
      skip.push_back(std::move(p));
    } else if (!value.is_object() || !value.empty()) {
      return fail(config_error(Errc::kUnsupported,
                               fmt::format("GPTQModel per-module overrides ({} entry {}) are not supported",
                                           place.key("dynamic"), quote_name(key)),
                               place.path));
    }
  }
  return skip;
}

Result<QuantConfig> parse_gptq(const Json& config, const JsonPlace& place) {
  QLOAD_ASSIGN_OR_RETURN(const auto bits, get_int(config, "bits", place));
  if (!bits) return fail(config_error(Errc::kCorrupt, fmt::format("{} is missing", place.key("bits")), place.path));
  if (*bits != 2 && *bits != 3 && *bits != 4 && *bits != 8)
    return fail(config_error(Errc::kUnsupported,
                             fmt::format("GPTQ with {} bits is not supported (qload decodes 2, 3, 4 and 8)", *bits),
                             place.path));
  QLOAD_ASSIGN_OR_RETURN(const std::int64_t group, group_size_of(config, "group_size", "group_size", 128, place));
  QLOAD_ASSIGN_OR_RETURN(const auto desc_act, get_bool(config, "desc_act", place));
  QLOAD_ASSIGN_OR_RETURN(const auto sym, get_bool(config, "sym", place));
  QLOAD_ASSIGN_OR_RETURN(const auto marlin, get_bool(config, "is_marlin_format", place));
  if (marlin.value_or(false))
    return fail(config_error(Errc::kUnsupported, "GPTQ Marlin-format checkpoints (is_marlin_format) are not supported",
                             place.path));
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t version, gptq_version(config, place));
  QLOAD_ASSIGN_OR_RETURN(const bool gptqmodel, written_by_gptqmodel(config, place));
  QuantConfig out{.method = "gptq", .exclude_key = "dynamic"};
  QLOAD_ASSIGN_OR_RETURN(out.exclude, gptq_dynamic(config, place));
  out.rules.push_back(Rule{.label = "gptq",
                           .kind = PartKind::kGptq,
                           .bits = static_cast<std::uint32_t>(*bits),
                           .group_size = group,
                           .sym = sym.value_or(true),
                           .gptq_version = version,
                           .gptq_v1_whole_word = version == 1 && gptqmodel,
                           .g_idx_required = desc_act.value_or(false)});
  return out;
}

Result<QuantConfig> parse_awq(const Json& config, const JsonPlace& place) {
  QLOAD_ASSIGN_OR_RETURN(const auto bits, get_int(config, "bits", place));
  QLOAD_ASSIGN_OR_RETURN(const auto w_bit, get_int(config, "w_bit", place));
  if (bits && w_bit && *bits != *w_bit)
    return fail(config_error(Errc::kCorrupt,
                             fmt::format("{} is {} but {} is {}", place.key("bits"), *bits, place.key("w_bit"), *w_bit),
                             place.path));
  const std::int64_t b = bits.value_or(w_bit.value_or(4));
  if (b != 4)
    return fail(
        config_error(Errc::kUnsupported, fmt::format("AWQ with {} bits is not supported (only 4)", b), place.path));
  QLOAD_ASSIGN_OR_RETURN(const std::int64_t group, group_size_of(config, "group_size", "q_group_size", 128, place));
  QLOAD_ASSIGN_OR_RETURN(const auto zero_point, get_bool(config, "zero_point", place));
  if (!zero_point.value_or(true))
    return fail(
        config_error(Errc::kUnsupported, "AWQ without zero points (zero_point false) is not supported", place.path));
  QLOAD_ASSIGN_OR_RETURN(const auto version, get_string(config, "version", place));
  const std::string v = lower_ascii(version.value_or("gemm"));
  if (v != "gemm" && v != "gemv")
    return fail(config_error(
        Errc::kUnsupported, fmt::format("AWQ version {} is not supported (qload decodes gemm and gemv)", quote_name(v)),
        place.path));
  if (v == "gemv" && group > 0 && group < 128 && group != 64 && group != 32)
    return fail(config_error(Errc::kUnsupported,
                             fmt::format("AWQ GEMV with group size {} (AutoAWQ supports 32, 64 and >= 128)", group),
                             place.path));
  QuantConfig out{.method = "awq", .exclude_key = "modules_to_not_convert"};
  PatternTally tally;  // this config's one list
  QLOAD_ASSIGN_OR_RETURN(
      out.exclude, get_patterns(config, "modules_to_not_convert", ModulePattern::Kind::kSubstringOrGlob, place, tally));
  out.rules.push_back(Rule{.label = "awq " + v,
                           .kind = v == "gemm" ? PartKind::kAwqGemm : PartKind::kAwqGemv,
                           .bits = 4,
                           .group_size = group,
                           .sym = false});
  return out;
}

Result<std::optional<DType>> fp8_format(const Json& config, const JsonPlace& place) {
  QLOAD_ASSIGN_OR_RETURN(const auto fmt_name, get_string(config, "fmt", place));
  if (!fmt_name) return std::nullopt;
  const std::string f = lower_ascii(*fmt_name);
  if (f == "e4m3") return DType::kF8_E4M3;
  if (f == "e5m2") return DType::kF8_E5M2;
  return fail(config_error(Errc::kUnsupported,
                           fmt::format("FP8 fmt {} is not supported (e4m3, e5m2)", quote_name(*fmt_name)), place.path));
}

Result<QuantConfig> parse_fp8(const Json& config, const JsonPlace& place) {
  Rule rule{.label = "fp8", .kind = PartKind::kFp8, .bits = 8, .layouts = {ScaleLayout::kTensor, ScaleLayout::kRow}};
  QLOAD_ASSIGN_OR_RETURN(rule.fp8_dtype, fp8_format(config, place));
  QLOAD_ASSIGN_OR_RETURN(const auto block, get_block(config, "weight_block_size", place));
  if (block) {
    rule.layouts = {ScaleLayout::kBlock};
    rule.block_rows = block->first;
    rule.block_cols = block->second;
    rule.scale_inv_allowed = true;
  }
  QuantConfig out{.method = "fp8", .exclude_key = "modules_to_not_convert"};
  PatternTally tally;  // this config's one list
  QLOAD_ASSIGN_OR_RETURN(
      out.exclude, get_patterns(config, "modules_to_not_convert", ModulePattern::Kind::kSubstringOrGlob, place, tally));
  out.rules.push_back(std::move(rule));
  return out;
}

Result<QuantConfig> parse_fbgemm(const Json& config, const JsonPlace& place) {
  QuantConfig out{.method = "fbgemm_fp8", .exclude_key = "modules_to_not_convert"};
  PatternTally tally;  // this config's one list
  QLOAD_ASSIGN_OR_RETURN(
      out.exclude, get_patterns(config, "modules_to_not_convert", ModulePattern::Kind::kSubstringOrGlob, place, tally));
  out.rules.push_back(Rule{.label = "fbgemm_fp8", .kind = PartKind::kFp8, .bits = 8, .layouts = {ScaleLayout::kRow}});
  return out;
}

// ModelOpt: hf_quant_config.json nests the fields under "quantization"; config.json's
// quantization_config has them at the top level.
Result<QuantConfig> parse_modelopt(const Json& config, const JsonPlace& outer) {
  QLOAD_ASSIGN_OR_RETURN(const Json* nested, get_object(config, "quantization", outer));
  const Json& body = nested != nullptr ? *nested : config;
  const JsonPlace place{outer.path, nested != nullptr ? outer.key("quantization") : outer.where};
  if (!body.contains("quant_algo"))
    return fail(config_error(Errc::kCorrupt, fmt::format("{} is missing", place.key("quant_algo")), place.path));
  QLOAD_ASSIGN_OR_RETURN(const auto algo, get_string(body, "quant_algo", place));
  QuantConfig out{.method = "modelopt", .exclude_key = "exclude_modules"};
  PatternTally tally;  // this config's one list
  const char* exclude_key = body.contains("exclude_modules") ? "exclude_modules" : "ignore";
  out.exclude_key = exclude_key;
  QLOAD_ASSIGN_OR_RETURN(out.exclude,
                         get_patterns(body, exclude_key, ModulePattern::Kind::kSubstringOrGlob, place, tally));
  if (!algo) return out;  // null: only the KV cache is quantized; weights are plain
  const std::string a = lower_ascii(*algo);
  Rule rule{.label = "modelopt " + *algo, .kind = PartKind::kFp8, .bits = 8};
  if (a == "fp8")
    rule.layouts = {ScaleLayout::kTensor};
  else if (a == "fp8_per_channel_per_token")
    rule.layouts = {ScaleLayout::kRow};
  else if (a == "nvfp4") {
    QLOAD_ASSIGN_OR_RETURN(const auto group, get_int(body, "group_size", place));
    if (group && *group != 16)
      return fail(
          config_error(Errc::kUnsupported,
                       fmt::format("ModelOpt NVFP4 {} {} (NVFP4 scales groups of 16)", place.key("group_size"), *group),
                       place.path));
    rule.kind = PartKind::kModeloptFp4;
    rule.bits = 4;
    rule.group_size = 16;
  } else
    return fail(config_error(Errc::kUnsupported,
                             fmt::format("ModelOpt quant_algo {} is not supported (qload decodes FP8, "
                                         "FP8_PER_CHANNEL_PER_TOKEN and NVFP4)",
                                         quote_name(*algo)),
                             place.path));
  out.rules.push_back(std::move(rule));
  return out;
}

}  // namespace

Result<QuantConfig> parse_method_config(const Json& config, const std::string& method, const JsonPlace& place) {
  if (method == "gptq") return parse_gptq(config, place);
  if (method == "awq") return parse_awq(config, place);
  if (method == "fp8") return parse_fp8(config, place);
  if (method == "fbgemm_fp8") return parse_fbgemm(config, place);
  if (method == "modelopt") return parse_modelopt(config, place);
  if (method == "compressed-tensors") return parse_compressed_tensors(config, place);
  // OCP MXFP4 as gpt-oss ships it: its weights are "<name>_blocks" / "<name>_scales" pairs,
  // which no rule's module suffixes cover (detect_mxfp4 finds them).
  if (method == "mxfp4") return QuantConfig{.method = "mxfp4", .exclude_key = "modules_to_not_convert"};
  // bitsandbytes: each 4-bit weight's quant_state tensor describes it (detect_bnb4), each 8-bit
  // weight its SCB (detect_bnb8).
  if (method == "bitsandbytes") return QuantConfig{.method = "bitsandbytes", .exclude_key = "llm_int8_skip_modules"};
  return fail(config_error(Errc::kUnsupported,
                           fmt::format("quant_method {} is not supported (qload decodes gptq, awq, fp8, fbgemm_fp8, "
                                       "modelopt, compressed-tensors, mxfp4 and bitsandbytes)",
                                       quote_name(method)),
                           place.path));
}

}  // namespace qload::formats::detail
