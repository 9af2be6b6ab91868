#include "model_dir.hpp"

#include <algorithm>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "file_io.hpp"
#include "located_error.hpp"
#include "qload/formats/strict_json.hpp"

namespace qload::formats {
namespace fs = std::filesystem;
namespace {

struct Listing {
  std::vector<std::string> indexes;
  std::vector<std::string> files;
};

Result<Listing> list_dir(const fs::path& dir) {
  Listing out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with('.')) continue;
    if (name.ends_with(kIndexSuffix))
      out.indexes.push_back(name);
    else if (name.ends_with(kSafetensorsSuffix))
      out.files.push_back(name);
    else
      continue;
    if (out.indexes.size() + out.files.size() > kMaxDirectoryFiles)
      return fail(located(Errc::kUnsupported,
                          fmt::format("more than {} safetensors files in one directory", kMaxDirectoryFiles),
                          dir.string()));
  }
  if (ec) return fail(Error::from_errno(ec.value(), "list directory").with_file(dir.string()));
  std::sort(out.indexes.begin(), out.indexes.end());
  std::sort(out.files.begin(), out.files.end());
  return out;
}

}  // namespace

Result<ModelLayout> choose_layout(const fs::path& dir) {
  QLOAD_ASSIGN_OR_RETURN(Listing listing, list_dir(dir));
  if (listing.indexes.size() > 1)
    return fail(located(Errc::kInvalidArgument,
                        fmt::format("{} safetensors index files ({}); pass the one to use as the source",
                                    listing.indexes.size(), fmt::join(listing.indexes, ", ")),
                        dir.string()));
  if (listing.indexes.size() == 1) return ModelLayout{.index = listing.indexes.front(), .files = {}};
  if (listing.files.empty())
    return fail(
        located(Errc::kNotFound, "no *.safetensors or *.safetensors.index.json files in the directory", dir.string()));
  const auto model = std::find(listing.files.begin(), listing.files.end(), "model.safetensors");
  if (model != listing.files.end()) return ModelLayout{.index = {}, .files = {*model}};
  return ModelLayout{.index = {}, .files = std::move(listing.files)};
}

bool has_safetensors_files(const fs::path& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with('.') && (name.ends_with(kSafetensorsSuffix) || name.ends_with(kIndexSuffix))) return true;
  }
  return false;
}

Status read_model_config(const ModelRoot& root, Catalog& catalog) {
  QLOAD_ASSIGN_OR_RETURN(const std::string resolved_path, resolve_inside(root, "config.json"));
  std::error_code ec;
  if (!fs::exists(resolved_path, ec)) return {};
  QLOAD_ASSIGN_OR_RETURN(const OpenedFile file, open_inside(root, resolved_path));
  QLOAD_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, read_small_file(file, resolved_path, kMaxConfigBytes));
  return set_model_config(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), resolved_path,
                          catalog);
}

Status set_model_config(std::string text, const std::string& resolved_path, Catalog& catalog) {
  QLOAD_ASSIGN_OR_RETURN(const nlohmann::json config, parse_strict_json_object(text, resolved_path));
  const auto quant = config.find("quantization_config");
  if (quant != config.end() && !quant->is_null()) {
    if (!quant->is_object())
      return fail(located(Errc::kCorrupt, "quantization_config is not an object", resolved_path));
    try {
      catalog.quantization_config = quant->dump();
    } catch (const std::exception& ex) {  // text was validated UTF-8, so only allocation can fail
      return fail(
          located(Errc::kOutOfMemory, fmt::format("re-serialising quantization_config: {}", ex.what()), resolved_path));
    }
  }
  catalog.config_json = std::move(text);
  return {};
}

}  // namespace qload::formats
