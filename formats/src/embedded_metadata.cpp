#include "embedded_metadata.hpp"

#include <fmt/format.h>

#include "file_io.hpp"
#include "located_error.hpp"

namespace qload::formats {
namespace {

bool is_embedded_metadata(const TensorEntry& t) {
  return t.dtype == DType::kU8 && t.name.find(".quant_state.bitsandbytes__") != std::string::npos;
}

}  // namespace

Status read_embedded_metadata(Catalog& catalog) {
  for (const TensorEntry& t : catalog.tensors) {
    if (!is_embedded_metadata(t)) continue;
    const std::string& path = catalog.files[t.file].path;
    if (t.nbytes > kEmbeddedMaxBytes || !t.strides.empty())
      return fail(located(Errc::kUnsupported,
                          fmt::format("a bitsandbytes quant_state of {} bytes{}", t.nbytes,
                                      t.strides.empty() ? "" : " stored as a strided view"),
                          path, t.name, t.offset));
    QLOAD_ASSIGN_OR_RETURN(const OpenedFile file, open_regular_file(path));
    std::string bytes(static_cast<std::size_t>(t.nbytes), '\0');
    QLOAD_TRY(pread_exact(file.fd.get(), std::as_writable_bytes(std::span(bytes)), t.offset, path));
    catalog.embedded.emplace(t.name, std::move(bytes));
  }
  return {};
}

}  // namespace qload::formats
