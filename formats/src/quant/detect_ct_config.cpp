// compressed-tensors configs (../shared/formats.md section 4): one rule per config group that
// quantizes weights, the global `format` unless the group names its own, and `ignore`.
#include <fmt/format.h>

#include "detect_config.hpp"
#include "located_error.hpp"

namespace qload::formats::detail {
namespace {

Error unsupported(const JsonPlace& place, std::string message) {
  return config_error(Errc::kUnsupported, std::move(message), place.path);
}

// actorder: "group" | "weight" | "static" | true (= "group") | false / null.
Result<std::string> actorder_of(const Json& weights, const JsonPlace& place) {
  const auto it = weights.find("actorder");
  if (it == weights.end() || it->is_null()) return std::string();
  if (it->is_boolean()) return std::string(it->get<bool>() ? "group" : "");
  QLOAD_ASSIGN_OR_RETURN(const auto text, get_string(weights, "actorder", place));
  return lower_ascii(*text);
}

struct WeightArgs {
  std::int64_t bits = 8;
  std::string type;
  bool sym = true;
  std::int64_t group_size = 0;
  std::string strategy;
  std::string actorder;
  std::optional<std::pair<std::uint32_t, std::uint32_t>> block;
};

Result<WeightArgs> weight_args(const Json& weights, const JsonPlace& place) {
  WeightArgs args;
  QLOAD_ASSIGN_OR_RETURN(const auto bits, get_int(weights, "num_bits", place));
  QLOAD_ASSIGN_OR_RETURN(const auto type, get_string(weights, "type", place));
  QLOAD_ASSIGN_OR_RETURN(const auto sym, get_bool(weights, "symmetric", place));
  QLOAD_ASSIGN_OR_RETURN(const auto group, get_int(weights, "group_size", place));
  QLOAD_ASSIGN_OR_RETURN(const auto strategy, get_string(weights, "strategy", place));
  QLOAD_ASSIGN_OR_RETURN(args.actorder, actorder_of(weights, place));
  QLOAD_ASSIGN_OR_RETURN(args.block, get_block(weights, "block_structure", place));
  args.bits = bits.value_or(8);
  args.type = lower_ascii(type.value_or("int"));
  args.sym = sym.value_or(true);
  args.group_size = group.value_or(0);
  // compressed-tensors' own default when strategy is unset.
  args.strategy = strategy                ? lower_ascii(*strategy)
                  : args.group_size > 0   ? "group"
                  : args.group_size == -1 ? "channel"
                                          : "tensor";
  return args;
}

Status set_layout(const WeightArgs& args, const JsonPlace& place, Rule& rule) {
  if (args.strategy == "tensor") {
    rule.layouts = {ScaleLayout::kTensor};
  } else if (args.strategy == "channel") {
    rule.layouts = {ScaleLayout::kRow};
  } else if (args.strategy == "group" || args.strategy == "tensor_group") {  // tensor_group: NVFP4's global scale
    if (args.group_size <= 0)
      return fail(config_error(
          Errc::kCorrupt,
          fmt::format("{} is group but {} is {}", place.key("strategy"), place.key("group_size"), args.group_size),
          place.path));
    rule.layouts = {ScaleLayout::kGroup};
    rule.group_size = args.group_size;
  } else if (args.strategy == "block") {
    if (!args.block)
      return fail(config_error(
          Errc::kCorrupt,
          fmt::format("{} is block but {} is missing", place.key("strategy"), place.key("block_structure")),
          place.path));
    rule.layouts = {ScaleLayout::kBlock};
    rule.block_rows = args.block->first;
    rule.block_cols = args.block->second;
  } else {
    return fail(unsupported(place, fmt::format("weights strategy {} is not supported", quote_name(args.strategy))));
  }
  return {};
}

// The part layout of `format` for these weights.
Status set_kind(const std::string& format, const WeightArgs& args, const JsonPlace& place, Rule& rule) {
  const bool naive = format == "naive-quantized";
  if (format == "pack-quantized" || format == "int-quantized" || (naive && args.type == "int")) {
    if (args.type != "int")
      return fail(config_error(
          Errc::kCorrupt, fmt::format("format {} with weights type {}", format, quote_name(args.type)), place.path));
    if (args.bits < 2 || args.bits > 8)
      return fail(unsupported(place, fmt::format("{} with {} bits is not supported (2 to 8)", format, args.bits)));
    if (args.strategy == "block")
      return fail(unsupported(place, fmt::format("{} with block scales is not supported", format)));
    if (format == "pack-quantized" && args.strategy == "tensor" && !args.sym)
      return fail(unsupported(place, "pack-quantized with an asymmetric per-tensor zero point is not supported"));
    rule.kind = format == "pack-quantized" ? PartKind::kCtPacked : PartKind::kCtInt;
    rule.g_idx_required = args.actorder == "group";
    return {};
  }
  if (format == "float-quantized" || naive) {
    if (args.type != "float")
      return fail(config_error(
          Errc::kCorrupt, fmt::format("format {} with weights type {}", format, quote_name(args.type)), place.path));
    if (args.bits != 8 || !args.sym)
      return fail(unsupported(place, fmt::format("{} with {} bits{} is not supported (FP8, symmetric)", format,
                                                 args.bits, args.sym ? "" : ", asymmetric")));
    rule.kind = PartKind::kFp8;
    rule.scale_inv_allowed = false;
    return {};
  }
  if (format == "nvfp4-pack-quantized" || format == "mxfp4-pack-quantized") {
    const bool nv = format == "nvfp4-pack-quantized";
    if (args.type != "float")
      return fail(config_error(
          Errc::kCorrupt, fmt::format("format {} with weights type {}", format, quote_name(args.type)), place.path));
    if (args.bits != 4 || !args.sym || args.group_size != (nv ? 16 : 32) ||
        args.strategy != (nv ? "tensor_group" : "group"))
      return fail(unsupported(
          place, fmt::format("{} with {} bits, group {}, strategy {}{} is not supported ({})", format, args.bits,
                             args.group_size, args.strategy, args.sym ? "" : ", asymmetric",
                             nv ? "4 bits, group 16, tensor_group, symmetric" : "4 bits, group 32, group, symmetric")));
    rule.kind = PartKind::kCtFp4;
    return {};
  }
  return fail(unsupported(place, fmt::format("compressed-tensors format {} is not supported (qload decodes "
                                             "pack-quantized, int-quantized, naive-quantized, float-quantized, "
                                             "nvfp4-pack-quantized, mxfp4-pack-quantized and dense)",
                                             quote_name(format))));
}

// One config group, or nullopt when it quantizes no weights (activations only).
Result<std::optional<Rule>> parse_group(const Json& group, const std::string& name, const std::string& global_format,
                                        const JsonPlace& place, PatternTally& tally) {
  if (!group.is_object())
    return fail(config_error(Errc::kCorrupt,
                             fmt::format("{} is {}, expected an object", place.where, group.type_name()), place.path));
  QLOAD_ASSIGN_OR_RETURN(std::vector<ModulePattern> targets,
                         get_patterns(group, "targets", ModulePattern::Kind::kCtTarget, place, tally));
  if (targets.empty())
    return fail(config_error(Errc::kCorrupt, fmt::format("{} is missing or empty", place.key("targets")), place.path));
  QLOAD_ASSIGN_OR_RETURN(const Json* weights, get_object(group, "weights", place));
  if (weights == nullptr) return std::nullopt;
  QLOAD_ASSIGN_OR_RETURN(const auto own_format, get_string(group, "format", place));
  const std::string format = own_format ? lower_ascii(*own_format) : global_format;
  if (format == "mixed-precision")
    return fail(config_error(
        Errc::kCorrupt, fmt::format("{} has no format of its own under the global format mixed-precision", place.where),
        place.path));
  Rule rule{.label = fmt::format("compressed-tensors group {} ({})", quote_name(name), format),
            .compressed_tensors = true,
            .targets = std::move(targets)};
  if (format == "dense") return rule;  // PartKind::kDense: stored unquantized
  const JsonPlace wplace{place.path, place.key("weights")};
  QLOAD_ASSIGN_OR_RETURN(const WeightArgs args, weight_args(*weights, wplace));
  rule.bits = static_cast<std::uint32_t>(args.bits < 0 ? 0 : args.bits);
  rule.sym = args.sym;
  QLOAD_TRY(set_layout(args, wplace, rule));
  QLOAD_TRY(set_kind(format, args, wplace, rule));
  return rule;
}

// Sparsity and transforms change what is stored (bitmasks, rotations): refused, not guessed.
Status check_extras(const Json& config, const JsonPlace& place) {
  QLOAD_ASSIGN_OR_RETURN(const Json* sparsity, get_object(config, "sparsity_config", place));
  if (sparsity != nullptr && !sparsity->empty()) {
    QLOAD_ASSIGN_OR_RETURN(const auto format,
                           get_string(*sparsity, "format", JsonPlace{place.path, place.key("sparsity_config")}));
    if (format && lower_ascii(*format) != "dense")
      return fail(unsupported(
          place, fmt::format("compressed-tensors sparsity format {} is not supported", quote_name(*format))));
  }
  QLOAD_ASSIGN_OR_RETURN(const Json* transform, get_object(config, "transform_config", place));
  if (transform != nullptr && !transform->empty())
    return fail(unsupported(place, "compressed-tensors transform_config (online rotations) is not supported"));
  return {};
}

}  // namespace

Result<QuantConfig> parse_compressed_tensors(const Json& config, const JsonPlace& place) {
  QLOAD_TRY(check_extras(config, place));
  QLOAD_ASSIGN_OR_RETURN(const auto global_format, get_string(config, "format", place));
  QLOAD_ASSIGN_OR_RETURN(const auto status, get_string(config, "quantization_status", place));
  QLOAD_ASSIGN_OR_RETURN(const Json* groups, get_object(config, "config_groups", place));
  QuantConfig out{.method = "compressed-tensors", .exclude_key = "ignore"};
  // Every group's targets and the ignore list count against one tally: the caps (detect.hpp)
  // bound the whole config, whose patterns are each compiled once, here.
  PatternTally tally;
  QLOAD_ASSIGN_OR_RETURN(out.exclude, get_patterns(config, "ignore", ModulePattern::Kind::kCtTarget, place, tally));
  if (groups == nullptr) return out;
  if (groups->size() > kMaxPatterns)
    return fail(unsupported(place, fmt::format("more than {} config_groups", kMaxPatterns)));
  const std::string format = lower_ascii(global_format.value_or("dense"));
  for (const auto& [name, group] : groups->items()) {
    const JsonPlace gplace{place.path, place.key("config_groups") + "." + escape_for_terminal(name.substr(0, 200))};
    QLOAD_ASSIGN_OR_RETURN(std::optional<Rule> rule, parse_group(group, name, format, gplace, tally));
    if (!rule) continue;
    if (rule->kind != PartKind::kDense && status && lower_ascii(*status) != "compressed")
      return fail(unsupported(place, fmt::format("quantization_status {}: only compressed checkpoints are "
                                                 "supported",
                                                 quote_name(*status))));
    out.rules.push_back(std::move(*rule));
  }
  return out;
}

}  // namespace qload::formats::detail
