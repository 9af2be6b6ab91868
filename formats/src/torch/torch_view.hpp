// Where a torch tensor's elements lie in its storage entry: the catalog entry for one tensor of
// a state dict (torch_file.hpp), over the bytes from its first element to the end of its last,
// with its strides when it is not row-major (strided.hpp). Every number is the file's, so every
// product and sum is checked.
#pragma once

#include <cstdint>
#include <string>

#include "qload/formats/catalog.hpp"
#include "qload/formats/torch_file.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

// Tensor `t` of file `file` (index into the catalog's files, at `path`) over `storage`, its
// stored entry in the archive. Refused, naming `path` and the tensor: more than kMaxTensorDims
// dimensions, strides that are not one per dimension or negative, or a dtype that is not one
// element per block (kCorrupt); an element count or byte size past 2^62 / 2^64 (kCorrupt /
// kOverflow); a view expanding past check_view_expansion's bound (kUnsupported); elements
// outside the entry or the storage's declared size (kCorrupt, with the entry's offset).
Result<TensorEntry> torch_tensor_entry(const PickledTensor& t, const ZipEntry& storage, std::uint32_t file,
                                       const std::string& path);

}  // namespace qload::formats
