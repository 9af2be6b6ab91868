// PyTorch checkpoints (`torch.save`'s zip format: `pytorch_model.bin`, `*.pt`, `*.pth`), read
// without running pickle. A file is a zip archive of stored (uncompressed) entries:
// `<archive>/data.pkl` (the pickled state dict), `<archive>/data/<key>` (one per storage, raw
// little-endian bytes), `<archive>/byteorder`, `<archive>/version`. qload reads the zip's
// central directory, runs `data.pkl` through a restricted unpickler that knows only what a
// state dict is made of (`torch._utils._rebuild_tensor_v2` / `_v3` / `_rebuild_parameter`,
// `collections.OrderedDict`, the storage types and dtypes, persistent ids), and refuses everything
// else naming the global or opcode and its byte offset. Tensors then load like any other:
// straight from the storages' bytes in the file.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

// ---- zip -----------------------------------------------------------------------------------

struct ZipEntry {
  std::string name;
  std::uint64_t data_offset = 0;  // absolute: the entry's first byte of data
  std::uint64_t size = 0;         // stored size (compressed size = uncompressed size for method 0)
  std::uint16_t method = 0;       // 0: stored; anything else is refused when the entry is read
};

// Reads `out.size()` bytes at `offset` of the file.
using ReadAt = std::function<Status(std::uint64_t offset, std::span<std::byte> out)>;

// Bounds on what a directory may declare.
inline constexpr std::uint64_t kMaxZipEntries = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kMaxZipDirectoryBytes = std::uint64_t{256} << 20;

// The central directory of a zip (zip64 too) of `file_size` bytes: every entry's name, method,
// size and where its data starts (from its local header). Checks: the end records and every
// header's signature, counts bounded by the directory's bytes, every entry's data inside the
// file, no encrypted entries, no duplicate names. Errors (kCorrupt, kUnsupported for
// multi-disk archives) name `path` and the offset.
Result<std::vector<ZipEntry>> read_zip_directory(std::uint64_t file_size, const ReadAt& read, const std::string& path);

// ---- pickle --------------------------------------------------------------------------------

// One tensor of a pickled state dict, as `_rebuild_tensor_v2` would build it.
struct PickledTensor {
  std::string name;
  std::string storage_key;  // the entry `<archive>/data/<key>`
  DType dtype = DType::kF32;
  std::uint64_t storage_bytes = 0;   // the storage's size as its persistent id declares it
  std::uint64_t storage_offset = 0;  // in elements
  std::vector<std::uint64_t> size;
  std::vector<std::int64_t> stride;
};

// Limits of the unpickler (a state dict needs far less).
inline constexpr std::uint64_t kMaxPickleObjects = std::uint64_t{1} << 22;  // objects, memo entries, marks, stack
inline constexpr std::uint32_t kMaxPickleDepth = 64;                        // nesting of containers
inline constexpr std::uint64_t kMaxPickleBytes = std::uint64_t{1} << 30;
inline constexpr std::uint64_t kMaxPickleTupleItems = 4096;  // a state dict's tuples: sizes, strides, arguments
inline constexpr std::size_t kMaxTensorDims = 64;            // torch's own limit on a tensor's dimensions
// The work budget: bytes an unpickle may copy, hash or compare out of objects it reuses (dict
// keys each time they are set, each named tensor's name, storage key and sizes), per byte of
// pickle plus a base. A state dict torch wrote needs about one byte per byte; a pickle that
// reuses one big object many times runs out and is kUnsupported.
inline constexpr std::uint64_t kPickleWorkPerByte = 4;
inline constexpr std::uint64_t kPickleWorkBaseBytes = std::uint64_t{64} << 20;

// Runs `pickle` (protocols 2 to 5) in a restricted unpickler and returns the state dict it
// builds: a dict or OrderedDict (possibly with `_metadata`, ignored) of names to tensors, in
// the pickle's order (a name set twice keeps its last tensor, in its first place). kUnsupported
// naming the global for any callable other than the state dict's own, and for input past the
// limits above; kCorrupt naming the opcode and offset for malformed input, and naming the tensor
// for one of over kMaxTensorDims dimensions or with a negative size.
Result<std::vector<PickledTensor>> read_state_dict_pickle(std::span<const std::byte> pickle, const std::string& path);

}  // namespace qload::formats
