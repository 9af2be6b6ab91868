#include "gguf_driver.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "../located_error.hpp"
#include "../path_guard.hpp"
#include "ggml_types.hpp"
#include "gguf_file.hpp"
#include "qload/formats/gguf.hpp"

namespace qload::formats {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kSuffix = ".gguf";

// The .gguf files directly in `dir`, sorted.
std::vector<std::string> gguf_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::error_code type_ec;
    if (e.path().extension() == kSuffix && e.is_regular_file(type_ec)) out.push_back(e.path().string());
  }
  std::ranges::sort(out);
  return out;
}

// "<prefix>-00002-of-00005.gguf": gguf-split's naming (five digits each, as llama.cpp writes).
struct SplitName {
  std::string prefix;
  unsigned index = 0;  // 1-based
  unsigned count = 0;
};

std::optional<SplitName> split_name(const std::string& path) {
  constexpr std::string_view kTail = "-00000-of-00000.gguf";
  if (path.size() < kTail.size() || !path.ends_with(kSuffix)) return std::nullopt;
  const std::string_view tail = std::string_view(path).substr(path.size() - kTail.size());
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-") return std::nullopt;
  SplitName s{.prefix = path.substr(0, path.size() - kTail.size())};
  const auto number = [](std::string_view digits, unsigned& out) {
    return std::ranges::all_of(digits, [](char c) { return c >= '0' && c <= '9'; }) &&
           std::from_chars(digits.data(), digits.data() + digits.size(), out).ec == std::errc{};
  };
  if (!number(tail.substr(1, 5), s.index) || !number(tail.substr(10, 5), s.count)) return std::nullopt;
  if (s.index == 0 || s.count == 0 || s.index > s.count) return std::nullopt;
  return s;
}

std::string split_path(const SplitName& s, unsigned index) {
  return fmt::format("{}-{:05}-of-{:05}.gguf", s.prefix, index, s.count);
}

// A split's own record of where it belongs ("split.no" is 0-based), checked against its name.
Status check_split_keys(const GgufHeader& h, const std::string& path, unsigned index, unsigned count) {
  for (const GgufKeyValue& kv : h.metadata) {
    const bool no = kv.key == "split.no", total = kv.key == "split.count";
    if (!no && !total) continue;
    const unsigned want = no ? index - 1 : count;
    if (kv.value != std::to_string(want))
      return fail(located(
          Errc::kCorrupt,
          fmt::format("{} is {} but the file is named as split {} of {}", kv.key, kv.value, index, count), path));
  }
  return {};
}

// Where a GGUF's files must resolve: `root` for every file but `named`, the one the user named
// (read as named, as a single safetensors file is). Null root: nothing to check.
struct GgufGuard {
  const ModelRoot* root = nullptr;
  std::string_view named;
};

Result<OpenedFile> open_guarded(const std::string& path, const GgufGuard& guard) {
  if (guard.root == nullptr || path == guard.named) return open_regular_file(path);
  return open_inside(*guard.root, path);
}

// One catalog over `paths` (one file, or a split GGUF's files in order): tensors in numpy's
// dims order (ggml's reversed), plain types as they are, block-quantized ones as their bytes
// (TensorEntry::ggml_type). The metadata is the first file's. Each file is read through the one
// descriptor `guard` checked, and its identity recorded for the load.
Result<Catalog> catalog_of(const std::vector<std::string>& paths, const std::string& source, bool split,
                           const GgufGuard& guard) {
  Catalog catalog;
  catalog.format = "gguf";
  catalog.source = source;
  std::set<std::string, std::less<>> names;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    const std::string& path = paths[f];
    QLOAD_ASSIGN_OR_RETURN(const OpenedFile opened, open_guarded(path, guard));
    QLOAD_ASSIGN_OR_RETURN(GgufHeader header, read_gguf_header(opened, path));
    if (split)
      QLOAD_TRY(check_split_keys(header, path, static_cast<unsigned>(f + 1), static_cast<unsigned>(paths.size())));
    CatalogFile file{.path = path,
                     .size = opened.size,
                     .data_offset = header.data_offset,
                     .metadata = {},
                     .identity = opened.identity};
    for (GgufKeyValue& kv : header.metadata) file.metadata[std::move(kv.key)] = std::move(kv.value);
    catalog.files.push_back(std::move(file));
    for (const GgufTensorInfo& t : header.tensors) {
      const gguf::GgmlType& type = *gguf::find_ggml_type(t.ggml_type);  // the parser checked it
      const std::uint64_t offset = header.data_offset + t.offset;
      if (!names.insert(t.name).second)
        return fail(located(Errc::kCorrupt, "the tensor is in two files of this split GGUF", path, t.name, offset));
      std::vector<std::uint64_t> dims(t.ne.rbegin(), t.ne.rend());
      std::optional<std::uint32_t> block_type;
      if (!type.dtype) {  // raw blocks: the last dim counts bytes (the parser checked whole blocks)
        dims.back() = dims.back() / type.block_elems * type.block_bytes;
        block_type = type.id;
      }
      catalog.tensors.push_back(TensorEntry{.name = t.name,
                                            .file = static_cast<std::uint32_t>(f),
                                            .offset = offset,
                                            .nbytes = t.nbytes,
                                            .dtype = type.dtype.value_or(DType::kU8),
                                            .shape = Shape(std::move(dims)),
                                            .ggml_type = block_type});
    }
  }
  catalog.index_names();
  return catalog;
}

// The files a `.gguf` path stands for: itself, or all the splits its name belongs to.
// `dir_root`: the model directory `path` was found in (every file must resolve inside it), or
// null when the user named `path` itself: then it is read as named, and its other splits must
// resolve inside its directory (a split is a shard, guarded as safetensors and torch shards are).
Result<Catalog> open_file(const std::string& path, const std::string& source, const ModelRoot* dir_root) {
  const std::optional<SplitName> split = split_name(path);
  if (!split) return catalog_of({path}, source, false, {.root = dir_root, .named = {}});
  std::optional<ModelRoot> sibling_root;
  if (dir_root == nullptr) {
    const fs::path named(path);
    QLOAD_ASSIGN_OR_RETURN(sibling_root, model_root(named.has_parent_path() ? named.parent_path() : fs::path(".")));
  }
  std::vector<std::string> paths;
  for (unsigned i = 1; i <= split->count; ++i) {
    paths.push_back(split_path(*split, i));
    std::error_code ec;
    if (!fs::is_regular_file(paths.back(), ec))
      return fail(located(Errc::kNotFound,
                          fmt::format("split {} of {} is missing (a split GGUF needs all its files)", i, split->count),
                          paths.back()));
  }
  if (dir_root != nullptr) return catalog_of(paths, source, true, {.root = dir_root, .named = {}});
  return catalog_of(paths, source, true, {.root = &*sibling_root, .named = path});
}

// A directory's GGUF: its one .gguf file, or the one split GGUF its files make up.
std::optional<std::string> directory_entry_point(const std::vector<std::string>& files) {
  if (files.size() == 1) return files.front();
  if (files.empty()) return std::nullopt;
  const std::optional<SplitName> first = split_name(files.front());
  if (!first || first->index != 1 || first->count != files.size()) return std::nullopt;
  for (unsigned i = 1; i <= first->count; ++i)
    if (files[i - 1] != split_path(*first, i)) return std::nullopt;
  return files.front();
}

class GgufDriver final : public FormatDriver {
 public:
  std::string_view name() const noexcept override { return "gguf"; }

  bool recognizes(const std::string& source) const override {
    std::error_code ec;
    const fs::file_status status = fs::status(source, ec);
    if (ec) return false;
    if (fs::is_regular_file(status)) return source.ends_with(kSuffix);
    return fs::is_directory(status) && directory_entry_point(gguf_files(source)).has_value();
  }

  Result<Catalog> open(const std::string& source) const override {
    std::error_code ec;
    const fs::file_status status = fs::status(source, ec);
    if (ec) return fail(Error::from_errno(ec.value(), "stat").with_file(source));
    if (!fs::is_directory(status)) return open_file(source, source, nullptr);
    const std::vector<std::string> files = gguf_files(source);
    if (const std::optional<std::string> entry = directory_entry_point(files)) {
      QLOAD_ASSIGN_OR_RETURN(const ModelRoot root, model_root(source));
      return open_file(*entry, source, &root);
    }
    return fail(located(files.empty() ? Errc::kNotFound : Errc::kUnsupported,
                        files.empty() ? "no .gguf file in this directory"
                                      : fmt::format("{} .gguf files in this directory that are not one split GGUF "
                                                    "(name the one to load)",
                                                    files.size()),
                        source));
  }
};

}  // namespace

const FormatDriver& gguf_driver() {
  static const GgufDriver driver;
  return driver;
}

}  // namespace qload::formats
