#include "safetensors_catalog.hpp"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "embedded_metadata.hpp"
#include "file_io.hpp"
#include "located_error.hpp"

namespace qload::formats {
namespace {

Status check_unique_across_files(const Catalog& catalog) {
  std::map<std::string_view, const TensorEntry*> seen;
  for (const TensorEntry& t : catalog.tensors) {
    const auto [it, inserted] = seen.emplace(t.name, &t);
    if (inserted) continue;
    return fail(located(
        Errc::kCorrupt,
        fmt::format("tensor name is in two files: {} and this one", quote_name(catalog.files[it->second->file].path)),
        catalog.files[t.file].path, t.name, t.offset));
  }
  return {};
}

Status check_total_size(const Catalog& catalog, const SafetensorsIndex& index, const std::string& index_path) {
  if (!index.total_size) return {};
  std::uint64_t sum = 0;
  for (const TensorEntry& t : catalog.tensors) {
    QLOAD_ASSIGN_OR_RETURN(sum, checked_add(sum, t.nbytes));
  }
  if (sum == *index.total_size) return {};
  return fail(located(
      Errc::kCorrupt,
      fmt::format("index metadata.total_size is {} but the shards' tensors hold {} bytes", *index.total_size, sum),
      index_path));
}

}  // namespace

Result<Catalog> build_catalog(std::vector<LoadedFile> files, const std::string& source) {
  Catalog catalog;  // not an aggregate (private name index)
  catalog.format = "safetensors";
  catalog.source = source;
  catalog.files.reserve(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    SafetensorsHeader& header = files[i].header;
    for (TensorEntry& t : header.tensors) {
      t.file = static_cast<std::uint32_t>(i);
      catalog.tensors.push_back(std::move(t));
    }
    catalog.files.push_back(CatalogFile{.path = std::move(files[i].path),
                                        .size = header.file_size,
                                        .data_offset = header.data_offset,
                                        .metadata = std::move(header.metadata),
                                        .identity = files[i].identity});
  }
  // Each file's tensors already come in this order; sorting keeps the invariant explicit.
  std::sort(catalog.tensors.begin(), catalog.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.file, a.offset, a.nbytes, a.name) < std::tie(b.file, b.offset, b.nbytes, b.name);
  });
  QLOAD_TRY(check_unique_across_files(catalog));
  catalog.index_names();
  QLOAD_TRY(read_embedded_metadata(catalog));
  return catalog;
}

Status check_against_index(const Catalog& catalog, const std::vector<std::string>& shard_names,
                           const SafetensorsIndex& index, const std::string& index_path) {
  for (const TensorEntry& t : catalog.tensors) {
    const std::string& shard = shard_names[t.file];
    const auto mapped = index.weight_map.find(t.name);
    if (mapped == index.weight_map.end())
      return fail(located(Errc::kCorrupt,
                          fmt::format("tensor is in shard {} but not in the index's weight_map", quote_name(shard)),
                          catalog.files[t.file].path, t.name, t.offset)
                      .with_note(fmt::format("index {}", index_path)));
    if (mapped->second != shard)
      return fail(located(Errc::kCorrupt,
                          fmt::format("tensor is in shard {} but the index maps it to {}", quote_name(shard),
                                      quote_name(mapped->second)),
                          catalog.files[t.file].path, t.name, t.offset)
                      .with_note(fmt::format("index {}", index_path)));
  }
  for (const auto& [name, shard] : index.weight_map) {
    if (catalog.find(name) != nullptr) continue;  // found above, in the shard it is mapped to
    const auto file = std::find(shard_names.begin(), shard_names.end(), shard);
    const std::string path = file == shard_names.end() ? index_path : catalog.files[file - shard_names.begin()].path;
    return fail(
        located(Errc::kCorrupt,
                fmt::format("the index maps this tensor to shard {}, which does not hold it", quote_name(shard)), path,
                name)
            .with_note(fmt::format("index {}", index_path)));
  }
  return check_total_size(catalog, index, index_path);
}

}  // namespace qload::formats
