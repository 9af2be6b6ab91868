// Internals of detect_quantization (quant.hpp): the quantization config as a list of rules
// (detect_config.cpp, detect_ct_config.cpp), module-name patterns (detect_match.cpp), and the
// per-scheme part checks that turn one module's tensors into a LogicalTensor (detect_parts.cpp).
// docs/formats.md "Quantized checkpoints" lists every decision taken here.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/formats/quant.hpp"
#include "qload/runtime/error.hpp"

namespace re2 {
class RE2;
}

namespace qload::formats::detail {

// Side config files are small; anything larger is refused (kUnsupported, naming the file).
inline constexpr std::uint64_t kMaxQuantConfigBytes = 1u << 20;
// Bounds on what a config may list, and on the names matched against its regular expressions.
// kMaxPatterns holds for each list and for the whole config (every compressed-tensors group's
// targets and `ignore` together); at most kMaxRegexPatterns of those are regular expressions,
// each compiled once with at most kRegexMaxMem bytes for its program and its DFA cache, so a
// config's regular expressions hold at most 64 MiB (issue 45 finding 8: 1,000 entries under
// RE2's 8 MiB took 2.7 GB).
inline constexpr std::size_t kMaxPatterns = 4096;
inline constexpr std::size_t kMaxRegexPatterns = 256;
inline constexpr std::int64_t kRegexMaxMem = std::int64_t{256} << 10;
inline constexpr std::size_t kMaxPatternBytes = 1024;
inline constexpr std::size_t kMaxRegexSubjectBytes = 4096;
// The work detection may spend matching a config's patterns against the checkpoint's module
// names, in steps: a regular expression costs its program's instructions times the name's
// bytes (RE2's linear-time bound, whatever its DFA cache does), a glob or substring its bytes
// times the name's, an exact or class name one step per 16 bytes compared. Patterns x modules
// beyond it are refused (kUnsupported naming the config file and the key), where 300
// expressions over 7 names once took 48 s. A step took 0.001-15 ns measured (RE2 2022, one
// core: 15 ns where its DFA cache thrashes), so it bounds matching at ~16 s in the worst case
// measured and well under a second where RE2's DFA copes.
// Real configs spend a fraction: three 25-instruction expressions over the 69 k quantized
// modules (45-byte names) of a 384-expert MoE checkpoint is 0.23 G steps.
inline constexpr std::uint64_t kMaxMatchWork = std::uint64_t{1} << 30;

// The patterns one config has compiled so far, against the config-wide caps above.
struct PatternTally {
  std::size_t patterns = 0;
  std::size_t regexes = 0;
};

// One entry of a list naming modules (an exclusion list or compressed-tensors targets).
struct ModulePattern {
  enum class Kind : std::uint8_t {
    // transformers / AutoAWQ modules_to_not_convert, ModelOpt exclude_modules: the entry is a
    // substring of the module name; an entry with '*' or '?' is a glob over the whole name
    // ('*' also crosses dots; no bracket classes).
    kSubstringOrGlob,
    // compressed-tensors targets and ignore: "re:<regex>" (Python re.match, anchored at the
    // start), a class name (CamelCase, no '.': matches every module, qload cannot see classes),
    // or an exact module name.
    kCtTarget,
    // GPTQModel dynamic "-:<regex>" keys (Python re.match).
    kRegex,
  };
  Kind kind = Kind::kSubstringOrGlob;
  std::string text;                       // as written in the config
  std::shared_ptr<const re2::RE2> regex;  // kRegex, and kCtTarget "re:" entries
};

// How specifically a pattern matched (compressed-tensors resolves overlapping targets by this).
enum class MatchRank : std::uint8_t { kNone, kClass, kRegex, kExact };

// Compiles `text` (kUnsupported naming `path` and `key` for a regex RE2 cannot take, or one
// past the caps `tally` counts against).
Result<ModulePattern> make_pattern(ModulePattern::Kind kind, std::string text, const std::string& path,
                                   std::string_view key, PatternTally& tally);
// How `pattern` matches `module` (kUnsupported for a regex subject over kMaxRegexSubjectBytes).
Result<MatchRank> match_module(const ModulePattern& pattern, std::string_view module);
// What match_module(pattern, module) may cost at worst, in kMaxMatchWork's steps.
std::uint64_t match_cost(const ModulePattern& pattern, std::string_view module);

// Which stored parts a rule expects.
// kCtFp4: compressed-tensors nvfp4-pack-quantized (group 16) and mxfp4-pack-quantized (group 32).
// kModeloptFp4: ModelOpt NVFP4 (weight U8, weight_scale E4M3, weight_scale_2 F32).
enum class PartKind : std::uint8_t { kGptq, kAwqGemm, kAwqGemv, kFp8, kCtPacked, kCtInt, kCtFp4, kModeloptFp4, kDense };

// The part whose shape gives a rule's N and K ("qweight", "weight_packed" or "weight").
std::string_view anchor_of(PartKind kind);

// One way of quantizing: the whole checkpoint (GPTQ, AWQ, FP8) or one compressed-tensors
// config group. Group-size dependent fields are resolved per tensor, once K is known.
struct Rule {
  std::string label;  // for messages: "gptq", "compressed-tensors group 'group_0' (pack-quantized)"
  PartKind kind = PartKind::kDense;
  std::uint32_t bits = 4;
  std::int64_t group_size = 0;  // as configured: -1 = all of K, 0 = none
  bool sym = true;
  std::uint32_t gptq_version = 1;
  bool gptq_v1_whole_word = false;  // QuantParams::gptq_v1_whole_word (GPTQModel wrote it)
  bool g_idx_required = false;      // GPTQ desc_act, compressed-tensors actorder "group"
  // FP8 / compressed-tensors: the scale layouts accepted, tried in order against the scale's shape.
  std::vector<ScaleLayout> layouts;
  std::uint32_t block_rows = 0;
  std::uint32_t block_cols = 0;
  std::optional<DType> fp8_dtype;      // the config's "fmt", when given
  bool scale_inv_allowed = false;      // FP8 block scales may be named weight_scale_inv
  bool compressed_tensors = false;     // scale shapes as compressed-tensors writes them ([1], [N, 1])
  std::vector<ModulePattern> targets;  // compressed-tensors: modules this group covers
};

struct QuantConfig {
  std::string method;       // QuantizedCatalog::method
  std::string source;       // file name the config came from, "config.json", ... or "tensor names"
  std::string path;         // full path, for errors
  std::vector<Rule> rules;  // empty: nothing is quantized (compressed-tensors "dense", ModelOpt kv-cache only)
  std::string exclude_key;  // "modules_to_not_convert", "ignore", ... (messages)
  std::vector<ModulePattern> exclude;
};

// The quantization config, from config.json's quantization_config or a side file in the model
// directory (directory and index sources only); nullopt when there is none.
Result<std::optional<QuantConfig>> read_quant_config(const Catalog& catalog);

// One module's tensors with a suffix qload knows ("qweight", "weight_scale", ...).
struct ModuleTensors {
  std::string module;                                       // the name before the suffix
  std::map<std::string, std::uint32_t, std::less<>> parts;  // suffix -> index into Catalog::tensors
  std::optional<std::uint32_t> find(std::string_view suffix) const {
    const auto it = parts.find(suffix);
    return it == parts.end() ? std::nullopt : std::optional<std::uint32_t>(it->second);
  }
};

// Checks one module's parts against `rule` (every dtype and shape) and builds its logical tensor.
Result<LogicalTensor> build_logical(const Catalog& catalog, const ModuleTensors& module, const Rule& rule);

// The suffixes `kind` may carry; any other known quantized suffix contradicts the config.
bool part_allowed(PartKind kind, std::string_view suffix);

}  // namespace qload::formats::detail
