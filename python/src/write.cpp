// qload._qload's write side: safetensors headers and files through qload's own writer
// (formats/safetensors_writer.hpp), for qload.torch / qload.numpy save, save_file, save_model.
//
// The Python half orders the tensors (the reference writer's order: dtype alignment, then name)
// and hands each one as a C-contiguous uint8 array of its bytes; the arrays stay referenced by
// the caller's list while the GIL is released for the write.
#include "write.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "errors.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "qload/runtime/dtype.hpp"

namespace qload::python {
namespace {

using Bytes = nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
// (name, safetensors dtype code, shape, the tensor's bytes)
using TensorArg = std::tuple<std::string, std::string, std::vector<std::uint64_t>, Bytes>;
using Metadata = std::optional<std::map<std::string, std::string>>;

std::vector<formats::WriterTensor> writer_tensors(const std::vector<TensorArg>& tensors) {
  std::vector<formats::WriterTensor> out;
  out.reserve(tensors.size());
  for (const auto& [name, dtype_code, dims, bytes] : tensors) {
    const std::optional<DType> dtype = parse_dtype(dtype_code);
    if (!dtype)
      raise(Error(Errc::kInvalidArgument, fmt::format("unknown safetensors dtype '{}'", dtype_code)).with_tensor(name));
    out.push_back({.name = name,
                   .dtype = *dtype,
                   .shape = Shape(dims),
                   .bytes = std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
                   .fill = {}});
  }
  return out;
}

// The header bytes (length field and padded JSON) for `tensors` in the order given.
nb::bytes header(const std::vector<TensorArg>& tensors, const Metadata& metadata) {
  const std::vector<formats::WriterTensor> writer = writer_tensors(tensors);
  const std::vector<std::byte> bytes = unwrap(formats::build_safetensors_header(
      writer, metadata.value_or(std::map<std::string, std::string>{}), metadata.has_value()));
  return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Writes the file atomically (a temp file renamed over `path`).
void write(const std::string& path, const std::vector<TensorArg>& tensors, const Metadata& metadata) {
  const std::vector<formats::WriterTensor> writer = writer_tensors(tensors);
  formats::WriterOptions options;
  if (metadata) options.metadata = *metadata;
  options.empty_metadata_entry = metadata.has_value();
  Status written;
  {
    nb::gil_scoped_release released;  // the arrays are held by `tensors`, which the caller keeps
    written = formats::write_safetensors(path, writer, options);
  }
  if (!written) raise(written.error());
}

}  // namespace

void bind_write(nb::module_& m) {
  m.def("safetensors_header", &header, nb::arg("tensors"), nb::arg("metadata").none(),
        "The length field and padded JSON header for [(name, dtype, shape, uint8 bytes)], in that order; "
        "metadata None omits __metadata__, {} writes it empty.");
  m.def("write_safetensors", &write, nb::arg("path"), nb::arg("tensors"), nb::arg("metadata").none(),
        "Writes a .safetensors file atomically: the header, then each tensor's bytes in the order given.");
}

}  // namespace qload::python
