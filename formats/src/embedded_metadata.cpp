#include "embedded_metadata.hpp"

#include <map>

#include <fmt/format.h>

#include "file_io.hpp"
#include "located_error.hpp"

namespace qload::formats {
namespace {

bool is_quant_state(const TensorEntry& t) {
  return t.dtype == DType::kU8 && t.name.find(".quant_state.bitsandbytes__") != std::string::npos;
}

bool is_weight_shape(const TensorEntry& t) {
  return t.name.ends_with(".weight_shape") && (t.dtype == DType::kI64 || t.dtype == DType::kI32) &&
         t.shape.rank() == 1 && t.shape[0] == 2 && t.strides.empty();
}

}  // namespace

Status read_embedded_metadata(Catalog& catalog) {
  std::map<std::uint32_t, OpenedFile> opened;  // each file once, however many it holds
  for (const TensorEntry& t : catalog.tensors) {
    const bool state = is_quant_state(t);
    if (!state && !is_weight_shape(t)) continue;
    const std::string& path = catalog.files[t.file].path;
    if (state && (t.nbytes > kEmbeddedMaxBytes || !t.strides.empty()))
      return fail(located(Errc::kUnsupported,
                          fmt::format("a bitsandbytes quant_state of {} bytes{}", t.nbytes,
                                      t.strides.empty() ? "" : " stored as a strided view"),
                          path, t.name, t.offset));
    auto file = opened.find(t.file);
    if (file == opened.end()) {
      QLOAD_ASSIGN_OR_RETURN(OpenedFile f, open_regular_file(path));
      // Only the inode whose header was read (and checked to be inside the model directory).
      const std::optional<io::FileIdentity>& recorded = catalog.files[t.file].identity;
      if (recorded && (f.identity.dev != recorded->dev || f.identity.ino != recorded->ino))
        return fail(located(Errc::kFileChanged, "file replaced since its header was read", path, t.name, t.offset));
      file = opened.emplace(t.file, std::move(f)).first;
    }
    std::string bytes(static_cast<std::size_t>(t.nbytes), '\0');
    QLOAD_TRY(pread_exact(file->second.fd.get(), std::as_writable_bytes(std::span(bytes)), t.offset, path));
    catalog.embedded.emplace(t.name, std::move(bytes));
  }
  return {};
}

}  // namespace qload::formats
