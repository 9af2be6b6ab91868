// The PyTorch driver: `torch.save` zip files (`.bin`, `.pt`, `.pth`), a model directory's
// `pytorch_model.bin` (or its one `.bin`), and `*.bin.index.json` sharding. Each file's zip
// directory and pickled state dict are read (torch_file.hpp); every tensor becomes a catalog
// entry over its storage's bytes in the file, so loading is the same read path as safetensors.
// A strided view (a transposed or stepped tensor) spans the bytes from its first element to its
// last and keeps its strides (torch_view.hpp); the load gathers it row-major, as `.contiguous()`
// would.
#include "torch_driver.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <tuple>

#include <fmt/format.h>

#include "../embedded_metadata.hpp"
#include "../file_io.hpp"
#include "../located_error.hpp"
#include "../model_dir.hpp"
#include "../path_guard.hpp"
#include "qload/formats/safetensors_index.hpp"
#include "qload/formats/torch_file.hpp"
#include "torch_view.hpp"

namespace qload::formats {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kBinIndexSuffix = ".bin.index.json";
constexpr std::string_view kDefaultBin = "pytorch_model.bin";

bool has_torch_suffix(std::string_view name) {
  return name.ends_with(".bin") || name.ends_with(".pt") || name.ends_with(".pth");
}

// The file at `path`, checked to be inside `root` when there is one (a model directory's file;
// null: a file the user named, read as named).
Result<OpenedFile> open_guarded(const std::string& path, const ModelRoot* root) {
  return root == nullptr ? open_regular_file(path) : open_inside(*root, path);
}

// A `.bin` / `.pt` / `.pth` file that starts as a zip does: `.bin` is a common name for any
// blob, so the suffix alone does not claim a file.
bool is_torch_zip(const std::string& path, const ModelRoot* root) {
  if (!has_torch_suffix(path)) return false;
  auto file = open_guarded(path, root);
  std::array<std::byte, 4> magic{};
  if (!file || file->size < magic.size() || !pread_exact(file->fd.get(), magic, 0, path)) return false;
  return magic == std::array{std::byte{'P'}, std::byte{'K'}, std::byte{3}, std::byte{4}};
}

// An entry's bytes (stored entries only: PyTorch never compresses).
Result<std::vector<std::byte>> read_entry(const OpenedFile& file, const ZipEntry& e, const std::string& path,
                                          std::uint64_t max_bytes) {
  if (e.method != 0)
    return fail(located(Errc::kUnsupported,
                        fmt::format("zip entry {} is compressed (method {}); torch.save stores entries, and qload "
                                    "reads only stored ones",
                                    quote_name(e.name), e.method),
                        path, {}, e.data_offset));
  if (e.size > max_bytes)
    return fail(located(Errc::kUnsupported, fmt::format("zip entry {} of {} bytes", quote_name(e.name), e.size), path));
  QLOAD_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, allocate_bytes(e.size, path));
  QLOAD_TRY(pread_exact(file.fd.get(), bytes, e.data_offset, path));
  return bytes;
}

// One torch.save file's tensors, appended to `catalog`, all read through one descriptor
// (checked to be inside `root` when there is one), whose identity the load is tied to.
Status add_file(const std::string& path, const ModelRoot* root, Catalog& catalog) {
  QLOAD_ASSIGN_OR_RETURN(const OpenedFile file, open_guarded(path, root));
  const ReadAt read = [&](std::uint64_t offset, std::span<std::byte> out) {
    return pread_exact(file.fd.get(), out, offset, path);
  };
  QLOAD_ASSIGN_OR_RETURN(const std::vector<ZipEntry> entries, read_zip_directory(file.size, read, path));
  std::map<std::string_view, const ZipEntry*> by_name;
  const ZipEntry* pickle = nullptr;
  for (const ZipEntry& e : entries) {
    by_name.emplace(e.name, &e);
    const std::size_t slash = e.name.find('/');
    if (slash == std::string::npos || e.name.substr(slash + 1) != "data.pkl") continue;
    if (pickle != nullptr)
      return fail(located(Errc::kCorrupt, "two data.pkl entries: not one torch.save archive", path));
    pickle = &e;
  }
  if (pickle == nullptr)
    return fail(located(Errc::kUnsupported,
                        "a zip archive without <archive>/data.pkl: not a torch.save file (the legacy pre-1.6 format "
                        "is not read; re-save it with a current torch)",
                        path));
  const std::string prefix = pickle->name.substr(0, pickle->name.size() - std::string_view("data.pkl").size());
  if (const auto order = by_name.find(prefix + "byteorder"); order != by_name.end()) {
    QLOAD_ASSIGN_OR_RETURN(const std::vector<std::byte> text, read_entry(file, *order->second, path, 16));
    if (std::string_view(reinterpret_cast<const char*>(text.data()), text.size()) != "little")
      return fail(located(Errc::kUnsupported, "a big-endian torch.save file", path));
  }
  QLOAD_ASSIGN_OR_RETURN(const std::vector<std::byte> pickled, read_entry(file, *pickle, path, kMaxPickleBytes));
  QLOAD_ASSIGN_OR_RETURN(const std::vector<PickledTensor> tensors, read_state_dict_pickle(pickled, path));
  const auto index = static_cast<std::uint32_t>(catalog.files.size());
  catalog.files.push_back(
      CatalogFile{.path = path, .size = file.size, .data_offset = 0, .metadata = {}, .identity = file.identity});
  for (const PickledTensor& t : tensors) {
    const auto storage = by_name.find(prefix + "data/" + t.storage_key);
    if (storage == by_name.end())
      return fail(located(Errc::kCorrupt,
                          fmt::format("its storage {} is not in the archive", quote_name(t.storage_key)), path,
                          t.name));
    if (storage->second->method != 0)
      return fail(located(Errc::kUnsupported, "its storage entry is compressed", path, t.name));
    QLOAD_ASSIGN_OR_RETURN(TensorEntry entry, torch_tensor_entry(t, *storage->second, index, path));
    catalog.tensors.push_back(std::move(entry));
  }
  return {};
}

Result<Catalog> catalog_of(const std::vector<std::string>& paths, const std::string& source, const ModelRoot* root) {
  Catalog catalog;
  catalog.format = "pytorch";
  catalog.source = source;
  for (const std::string& path : paths) QLOAD_TRY(add_file(path, root, catalog));
  // File order, as every catalog lists its tensors (reads walk files forwards); a pickle's
  // order is the state dict's. Tied tensors share bytes and keep their own names.
  std::ranges::stable_sort(catalog.tensors, [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.file, a.offset) < std::tie(b.file, b.offset);
  });
  std::set<std::string_view> names;
  for (const TensorEntry& t : catalog.tensors)
    if (!names.insert(t.name).second)
      return fail(
          located(Errc::kCorrupt, "the tensor is in two files of this checkpoint", catalog.files[t.file].path, t.name));
  QLOAD_TRY(read_embedded_metadata(catalog));  // bitsandbytes 4-bit checkpoints saved as .bin
  catalog.index_names();
  return catalog;
}

// `*.bin.index.json`: the shards it names, each tensor where the map says.
Result<Catalog> open_indexed(const ModelRoot& root, const std::string& index_name, const std::string& source) {
  QLOAD_ASSIGN_OR_RETURN(const std::string index_path, resolve_inside(root, index_name));
  QLOAD_ASSIGN_OR_RETURN(const OpenedFile index_file, open_inside(root, index_path));
  QLOAD_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, read_small_file(index_file, index_path, kMaxIndexBytes));
  QLOAD_ASSIGN_OR_RETURN(const SafetensorsIndex index, parse_safetensors_index(bytes, index_path));
  std::set<std::string> unique;
  for (const auto& [tensor, shard] : index.weight_map) unique.insert(shard);
  std::vector<std::string> paths;
  for (const std::string& shard : unique) {
    QLOAD_ASSIGN_OR_RETURN(std::string path, resolve_inside(root, shard));
    paths.push_back(std::move(path));
  }
  QLOAD_ASSIGN_OR_RETURN(Catalog catalog, catalog_of(paths, source, &root));
  for (const auto& [tensor, shard] : index.weight_map) {
    const TensorEntry* t = catalog.find(tensor);
    const std::string& path = paths[static_cast<std::size_t>(std::distance(unique.begin(), unique.find(shard)))];
    if (t == nullptr || catalog.files[t->file].path != path)
      return fail(located(Errc::kCorrupt,
                          fmt::format("the index puts it in {}, which does not hold it", quote_name(shard)), index_path,
                          tensor));
  }
  if (catalog.tensors.size() != index.weight_map.size())
    return fail(located(
        Errc::kCorrupt,
        fmt::format("the shards hold {} tensors, the index maps {}", catalog.tensors.size(), index.weight_map.size()),
        index_path));
  QLOAD_TRY(read_model_config(root, catalog));
  return catalog;
}

// A model directory's torch checkpoint: its one `*.bin.index.json`, else `pytorch_model.bin`,
// else its one `.bin` / `.pt` / `.pth` file.
std::optional<std::string> directory_entry(const fs::path& dir) {
  std::vector<std::string> indexes, files;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code type_ec;
    if (name.starts_with(".") || !e.is_regular_file(type_ec)) continue;
    if (name.ends_with(kBinIndexSuffix)) indexes.push_back(name);
    if (has_torch_suffix(name)) files.push_back(name);
    if (indexes.size() + files.size() > kMaxDirectoryFiles) break;
  }
  if (indexes.size() == 1) return indexes.front();
  if (!indexes.empty()) return std::nullopt;
  if (std::ranges::find(files, kDefaultBin) != files.end()) return std::string(kDefaultBin);
  if (files.size() != 1) return std::nullopt;
  const Result<ModelRoot> root = model_root(dir);
  if (root && is_torch_zip((dir / files.front()).string(), &*root)) return files.front();
  return std::nullopt;
}

Result<Catalog> open_torch(const std::string& source) {
  std::error_code ec;
  const fs::file_status status = fs::status(source, ec);
  if (ec) return fail(Error::from_errno(ec.value(), "stat").with_file(source));
  if (!fs::is_directory(status)) {
    if (source.ends_with(kBinIndexSuffix)) {
      const fs::path index(source);
      const fs::path dir = index.has_parent_path() ? index.parent_path() : fs::path(".");
      QLOAD_ASSIGN_OR_RETURN(const ModelRoot root, model_root(dir));
      return open_indexed(root, index.filename().string(), source);
    }
    return catalog_of({source}, source, nullptr);  // a file named by the user: no config.json
  }
  const std::optional<std::string> entry = directory_entry(source);
  if (!entry)
    return fail(located(Errc::kUnsupported,
                        "no single torch checkpoint in this directory (one *.bin.index.json, pytorch_model.bin, or "
                        "one .bin/.pt/.pth file)",
                        source));
  QLOAD_ASSIGN_OR_RETURN(const ModelRoot root, model_root(source));
  if (entry->ends_with(kBinIndexSuffix)) return open_indexed(root, *entry, source);
  QLOAD_ASSIGN_OR_RETURN(const std::string path, resolve_inside(root, *entry));
  QLOAD_ASSIGN_OR_RETURN(Catalog catalog, catalog_of({path}, source, &root));
  QLOAD_TRY(read_model_config(root, catalog));
  return catalog;
}

class TorchDriver final : public FormatDriver {
 public:
  std::string_view name() const noexcept override { return "pytorch"; }

  bool recognizes(const std::string& source) const override {
    std::error_code ec;
    const fs::file_status status = fs::status(source, ec);
    if (ec) return false;
    if (fs::is_regular_file(status)) return source.ends_with(kBinIndexSuffix) || is_torch_zip(source, nullptr);
    return fs::is_directory(status) && directory_entry(source).has_value();
  }

  Result<Catalog> open(const std::string& source) const override { return open_torch(source); }
};

}  // namespace

const FormatDriver& torch_driver() {
  static const TorchDriver driver;
  return driver;
}

}  // namespace qload::formats
