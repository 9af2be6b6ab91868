// Where the quantization config comes from: config.json's quantization_config when the catalog
// has one, else the side files producers write next to the weights. Side files are read only
// for directory and index sources, like config.json (docs/formats.md "config.json"), through
// the same path guard, and at most kMaxQuantConfigBytes each.
#include <array>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "detect_config.hpp"
#include "file_io.hpp"
#include "model_dir.hpp"
#include "path_guard.hpp"
#include "qload/formats/strict_json.hpp"

namespace qload::formats::detail {
namespace fs = std::filesystem;
namespace {

// The model directory of a directory or index source; nullopt for a single file.
std::optional<fs::path> model_directory(const std::string& source) {
  if (source.empty()) return std::nullopt;
  std::error_code ec;
  if (fs::is_directory(source, ec)) return fs::path(source);
  if (source.ends_with(kIndexSuffix)) {
    const fs::path index(source);
    return index.has_parent_path() ? index.parent_path() : fs::path(".");
  }
  return std::nullopt;
}

// The method of a side file without quant_method, from its keys, else from its name.
std::string implied_method(const Json& config, std::string_view file) {
  if (config.contains("quantization") || config.contains("producer")) return "modelopt";
  if (config.contains("w_bit") || config.contains("q_group_size")) return "awq";
  if (config.contains("bits")) return "gptq";
  if (file == "quant_config.json") return "awq";
  if (file == "hf_quant_config.json") return "modelopt";
  return "gptq";
}

Result<QuantConfig> parse_file_config(const std::string& text, const std::string& path, std::string_view file,
                                      std::string_view where) {
  QLOAD_ASSIGN_OR_RETURN(const Json config, parse_strict_json_object(text, path));
  const JsonPlace place{path, std::string(where)};
  QLOAD_ASSIGN_OR_RETURN(const auto method, get_string(config, "quant_method", place));
  if (!method && file == "config.json")
    return fail(config_error(Errc::kCorrupt, "quantization_config has no quant_method", path));
  QLOAD_ASSIGN_OR_RETURN(
      QuantConfig out,
      parse_method_config(config, method ? lower_ascii(*method) : implied_method(config, file), place));
  out.source = std::string(file);
  out.path = path;
  return out;
}

Result<std::optional<QuantConfig>> read_side_files(const fs::path& dir) {
  static constexpr std::array<std::string_view, 3> kFiles = {"quantize_config.json", "quant_config.json",
                                                             "hf_quant_config.json"};
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  QLOAD_ASSIGN_OR_RETURN(const ModelRoot root, model_root(dir));
  std::vector<QuantConfig> found;
  for (const std::string_view file : kFiles) {
    QLOAD_ASSIGN_OR_RETURN(const std::string path, resolve_inside(root, file));
    if (!fs::exists(path, ec)) continue;
    // Read through the descriptor checked to be inside the directory, not the path again.
    QLOAD_ASSIGN_OR_RETURN(const OpenedFile opened, open_inside(root, path));
    QLOAD_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, read_small_file(opened, path, kMaxQuantConfigBytes));
    const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    QLOAD_ASSIGN_OR_RETURN(QuantConfig config, parse_file_config(text, path, file, ""));
    found.push_back(std::move(config));
  }
  if (found.empty()) return std::nullopt;
  for (const QuantConfig& other : found)
    if (other.method != found.front().method)
      return fail(config_error(Errc::kCorrupt,
                               fmt::format("{} says {} but {} says {}", found.front().source, found.front().method,
                                           other.source, other.method),
                               other.path));
  return std::move(found.front());
}

}  // namespace

Result<std::optional<QuantConfig>> read_quant_config(const Catalog& catalog) {
  const std::optional<fs::path> dir = model_directory(catalog.source);
  if (!catalog.quantization_config.empty()) {
    const std::string path = dir ? (*dir / "config.json").string() : std::string("config.json");
    QLOAD_ASSIGN_OR_RETURN(QuantConfig config,
                           parse_file_config(catalog.quantization_config, path, "config.json", "quantization_config"));
    return config;
  }
  if (!dir) return std::nullopt;
  return read_side_files(*dir);
}

}  // namespace qload::formats::detail
