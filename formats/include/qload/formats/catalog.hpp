// The Catalog: what a checkpoint holds, independent of its container format.
//
// Every format driver (safetensors, GGUF, PyTorch zip) turns a source path into a Catalog: the
// files, and every stored tensor as {name, file, offset, nbytes, dtype, shape}. Everything
// downstream (planning, reading, verifying) works from the Catalog only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qload/io/input_file.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/shape.hpp"

namespace qload::formats {

struct CatalogFile {
  std::string path;                             // as opened (inside the model directory for sharded sources)
  std::uint64_t size = 0;                       // bytes, at the time the header was validated
  std::uint64_t data_offset = 0;                // where the tensor data region starts (after the header)
  std::map<std::string, std::string> metadata;  // the file's own metadata (safetensors __metadata__)
  // Device, inode, size and mtime of the descriptor the header was read through (and, for a
  // model directory, checked to be inside it). The load opens `path` again and refuses any
  // other inode (kFileChanged), so it reads only the file that was checked. Every driver sets
  // it; a catalog made by hand may leave it unset, and is then tied by size alone.
  std::optional<io::FileIdentity> identity;
};

struct TensorEntry {
  std::string name;
  std::uint32_t file = 0;    // index into Catalog::files
  std::uint64_t offset = 0;  // absolute byte offset of the first byte in that file
  std::uint64_t nbytes = 0;  // stored bytes (checked against dtype x shape)
  DType dtype = DType::kU8;  // storage dtype
  Shape shape;
  // GGUF: a tensor in one of ggml's block-quantized types (Q4_K, MXFP4...) is stored as U8
  // [..., bytes per row] (gguf-py's reader gives the same) and this names the type; its
  // decoded shape has elements in the last dim. detect_quantization makes it a quantized weight.
  std::optional<std::uint32_t> ggml_type;
  // A strided view (torch.save of a transposed, stepped or expanded tensor): each dim's stride
  // in elements, and offset / nbytes span its first element to the end of its last (strided.hpp).
  // Such a tensor is read as stored and made row-major on load. Empty: row-major contiguous.
  std::vector<std::uint64_t> strides;
};

inline constexpr std::uint64_t kEmbeddedMaxBytes = 64 * 1024;

struct Catalog {
  std::string format;  // driver name, e.g. "safetensors"
  std::string source;  // the path the user gave
  std::vector<CatalogFile> files;
  // Sorted by (file, offset): the order reads should follow. Zero-size tensors may share an
  // offset with the next tensor; ties sort by nbytes, then name.
  std::vector<TensorEntry> tensors;
  std::string config_json;          // config.json text when present (else empty)
  std::string quantization_config;  // its "quantization_config" object as JSON text, if any
  // Small tensors whose bytes describe other tensors, read when the catalog is built (name ->
  // bytes): bitsandbytes' `*.quant_state.bitsandbytes__nf4` / `__fp4` JSON, which alone says a
  // 4-bit weight's shape and block size (kEmbeddedMaxBytes each), and compressed-tensors'
  // `*.weight_shape` (I64 or I32 [2]), the only exact K of a pack-quantized weight whose K is not
  // a multiple of the values a word holds.
  std::map<std::string, std::string, std::less<>> embedded;

  // The tensor with this name, or nullptr. O(log n).
  const TensorEntry* find(std::string_view name) const;
  std::uint64_t total_tensor_bytes() const;

  // Builds the name index; drivers call it once the tensors are final.
  void index_names();

 private:
  std::map<std::string, std::size_t, std::less<>> by_name_;
};

}  // namespace qload::formats
