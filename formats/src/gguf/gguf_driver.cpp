#include "gguf_driver.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "../located_error.hpp"
#include "ggml_types.hpp"
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

// The catalog of one GGUF file: plain-typed tensors as they are (numpy's dims order: ggml's
// reversed); GGML's block-quantized types are refused for now, naming the tensor.
Result<Catalog> catalog_of(const std::string& path, const std::string& source) {
  QLOAD_ASSIGN_OR_RETURN(GgufHeader header, read_gguf_header(path));
  std::error_code ec;
  const std::uint64_t size = fs::file_size(path, ec);
  if (ec) return fail(Error::from_errno(ec.value(), "stat").with_file(path));
  Catalog catalog;
  catalog.format = "gguf";
  catalog.source = source;
  CatalogFile file{.path = path, .size = size, .data_offset = header.data_offset, .metadata = {}};
  for (GgufKeyValue& kv : header.metadata) file.metadata[std::move(kv.key)] = std::move(kv.value);
  catalog.files.push_back(std::move(file));
  for (const GgufTensorInfo& t : header.tensors) {
    const gguf::GgmlType& type = *gguf::find_ggml_type(t.ggml_type);  // the parser checked it
    if (!type.dtype)
      return fail(located(Errc::kUnsupported,
                          fmt::format("ggml type {}: GGML block-quantized tensors are not loaded yet (only F32, F16, "
                                      "BF16, F64 and integer tensors)",
                                      type.name),
                          path, t.name, header.data_offset + t.offset));
    std::vector<std::uint64_t> dims(t.ne.rbegin(), t.ne.rend());
    catalog.tensors.push_back(TensorEntry{.name = t.name,
                                          .file = 0,
                                          .offset = header.data_offset + t.offset,
                                          .nbytes = t.nbytes,
                                          .dtype = *type.dtype,
                                          .shape = Shape(std::move(dims))});
  }
  catalog.index_names();
  return catalog;
}

class GgufDriver final : public FormatDriver {
 public:
  std::string_view name() const noexcept override { return "gguf"; }

  bool recognizes(const std::string& source) const override {
    std::error_code ec;
    const fs::file_status status = fs::status(source, ec);
    if (ec) return false;
    if (fs::is_regular_file(status)) return source.ends_with(kSuffix);
    return fs::is_directory(status) && gguf_files(source).size() == 1;
  }

  Result<Catalog> open(const std::string& source) const override {
    std::error_code ec;
    const fs::file_status status = fs::status(source, ec);
    if (ec) return fail(Error::from_errno(ec.value(), "stat").with_file(source));
    if (!fs::is_directory(status)) return catalog_of(source, source);
    const std::vector<std::string> files = gguf_files(source);
    if (files.size() != 1)
      return fail(located(files.empty() ? Errc::kNotFound : Errc::kUnsupported,
                          files.empty() ? "no .gguf file in this directory"
                                        : fmt::format("{} .gguf files in this directory (name the one to load; split "
                                                      "GGUFs are not read yet)",
                                                      files.size()),
                          source));
    return catalog_of(files.front(), source);
  }
};

}  // namespace

const FormatDriver& gguf_driver() {
  static const GgufDriver driver;
  return driver;
}

}  // namespace qload::formats
