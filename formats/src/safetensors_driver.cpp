#include "safetensors_driver.hpp"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "file_io.hpp"
#include "located_error.hpp"
#include "model_dir.hpp"
#include "path_guard.hpp"
#include "qload/formats/safetensors_index.hpp"
#include "safetensors_catalog.hpp"

namespace qload::formats {
namespace fs = std::filesystem;
namespace {

// Reads and validates each named file of the model directory, in order, each through the one
// descriptor checked to be inside the directory (closed once its header is read: a 100,000
// shard index must not hold a descriptor per shard here).
Result<std::vector<LoadedFile>> load_files(const ModelRoot& root, const std::vector<std::string>& names) {
  std::vector<LoadedFile> files;
  files.reserve(names.size());
  for (const std::string& name : names) {
    QLOAD_ASSIGN_OR_RETURN(std::string path, resolve_inside(root, name));
    QLOAD_ASSIGN_OR_RETURN(const OpenedFile file, open_inside(root, path));
    QLOAD_ASSIGN_OR_RETURN(SafetensorsHeader header, read_safetensors_header(file, path));
    files.push_back(LoadedFile{.path = std::move(path), .header = std::move(header), .identity = file.identity});
  }
  return files;
}

Status read_config(const ModelRoot& root, Catalog& catalog) {
  return read_model_config(root, catalog);
}

Result<Catalog> open_indexed(const ModelRoot& root, const std::string& index_name, const std::string& source) {
  QLOAD_ASSIGN_OR_RETURN(const std::string index_path, resolve_inside(root, index_name));
  QLOAD_ASSIGN_OR_RETURN(const OpenedFile index_file, open_inside(root, index_path));
  QLOAD_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, read_small_file(index_file, index_path, kMaxIndexBytes));
  QLOAD_ASSIGN_OR_RETURN(const SafetensorsIndex index, parse_safetensors_index(bytes, index_path));
  std::set<std::string> unique;
  for (const auto& [tensor, shard] : index.weight_map) unique.insert(shard);
  const std::vector<std::string> shards(unique.begin(), unique.end());
  QLOAD_ASSIGN_OR_RETURN(std::vector<LoadedFile> files, load_files(root, shards));
  QLOAD_ASSIGN_OR_RETURN(Catalog catalog, build_catalog(std::move(files), source));
  QLOAD_TRY(check_against_index(catalog, shards, index, index_path));
  QLOAD_TRY(read_config(root, catalog));
  return catalog;
}

Result<Catalog> open_directory(const fs::path& dir, const std::string& source) {
  QLOAD_ASSIGN_OR_RETURN(const ModelRoot root, model_root(dir));
  QLOAD_ASSIGN_OR_RETURN(const ModelLayout layout, choose_layout(dir));
  if (layout.index) return open_indexed(root, *layout.index, source);
  QLOAD_ASSIGN_OR_RETURN(std::vector<LoadedFile> files, load_files(root, layout.files));
  QLOAD_ASSIGN_OR_RETURN(Catalog catalog, build_catalog(std::move(files), source));
  QLOAD_TRY(read_config(root, catalog));
  return catalog;
}

// A single file named by the user: no directory rules, and no config.json (the file's folder
// need not be a model directory).
Result<Catalog> open_single(const std::string& source) {
  QLOAD_ASSIGN_OR_RETURN(const OpenedFile file, open_regular_file(source));
  QLOAD_ASSIGN_OR_RETURN(SafetensorsHeader header, read_safetensors_header(file, source));
  std::vector<LoadedFile> files;
  files.push_back(LoadedFile{.path = source, .header = std::move(header), .identity = file.identity});
  return build_catalog(std::move(files), source);
}

Result<Catalog> open_safetensors(const std::string& source) {
  std::error_code ec;
  const fs::file_status status = fs::status(source, ec);
  if (ec) return fail(Error::from_errno(ec.value(), "stat").with_file(source));
  if (fs::is_directory(status)) return open_directory(source, source);
  if (!fs::is_regular_file(status))
    return fail(located(Errc::kInvalidArgument, "not a regular file or a directory", source));
  if (source.ends_with(kIndexSuffix)) {
    const fs::path index(source);
    const fs::path dir = index.has_parent_path() ? index.parent_path() : fs::path(".");
    QLOAD_ASSIGN_OR_RETURN(const ModelRoot root, model_root(dir));
    return open_indexed(root, index.filename().string(), source);
  }
  return open_single(source);
}

class SafetensorsDriver final : public FormatDriver {
 public:
  std::string_view name() const noexcept override { return "safetensors"; }

  bool recognizes(const std::string& source) const override {
    std::error_code ec;
    const fs::file_status status = fs::status(source, ec);
    if (ec) return false;
    if (fs::is_regular_file(status)) return source.ends_with(kSafetensorsSuffix) || source.ends_with(kIndexSuffix);
    return fs::is_directory(status) && has_safetensors_files(source);
  }

  Result<Catalog> open(const std::string& source) const override { return open_safetensors(source); }
};

}  // namespace

const FormatDriver& safetensors_driver() {
  static const SafetensorsDriver driver;  // stateless: one immutable instance is enough
  return driver;
}

}  // namespace qload::formats
