// GGUF (llama.cpp's container, versions 2 and 3): the header parser. The layout, all little
// endian: magic "GGUF", u32 version, u64 tensor count, u64 key-value count; the key-values
// (string key, u32 type, value; arrays are u32 element type, u64 count, elements); the tensor
// infos (string name, u32 dims, u64 ne[dims] innermost first, u32 ggml type, u64 offset into
// the data section); padding to `general.alignment` (32 unless set); the data section.
//
// Validation follows llama.cpp's gguf.cpp: counts and string lengths bounded by the bytes that
// could hold them, no nested arrays, no duplicate keys or tensor names, at most 4 dims, no
// element count overflow, rows a whole number of blocks, an alignment that is a power of two,
// and tensors packed in order, each at the padded end of the one before, inside the file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qload/formats/header_limits.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

// One key-value, its value rendered as text: numbers and booleans as written, strings as
// they are, arrays as "[1, 2, 3]" up to 16 elements and "[N x type]" beyond (a tokenizer's
// vocabulary is hundreds of thousands of strings).
struct GgufKeyValue {
  std::string key;
  std::string type;  // "u32", "string", "array[string]"...
  std::string value;
};

struct GgufTensorInfo {
  std::string name;
  std::uint32_t ggml_type = 0;
  std::vector<std::uint64_t> ne;  // dims as stored: innermost (contiguous) first
  std::uint64_t offset = 0;       // from the start of the data section
  std::uint64_t nbytes = 0;
  std::uint64_t info_offset = 0;  // where its tensor info starts in the file (for errors)
};

struct GgufHeader {
  std::uint32_t version = 0;
  std::uint64_t alignment = 32;
  std::uint64_t data_offset = 0;  // absolute: where the data section starts
  std::vector<GgufKeyValue> metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order (= offset order)
};

// Parses the header from `prefix`, the first bytes of a file of `file_size` bytes. When the
// header runs past `prefix` but not past the file, fails with kTruncated and sets `*wanted`
// (if given) to how many bytes of the file the parser needs at least: read more and call
// again. Errors name `path`, the tensor and the absolute offset where known.
Result<GgufHeader> parse_gguf_bytes(std::span<const std::byte> prefix, std::uint64_t file_size, const std::string& path,
                                    std::uint64_t* wanted = nullptr);

// Reads and parses a file's header (reading more of the file as the header needs, up to
// kMaxGgufHeaderBytes). The caps of header_limits.hpp hold as for safetensors: parse_gguf_bytes
// refuses (kUnsupported) a header past kMaxHeaderBytes, more than kMaxHeaderEntries tensors
// plus key-values, or an array longer than kMaxHeaderEntries, before storing any of it.
inline constexpr std::uint64_t kMaxGgufHeaderBytes = kMaxHeaderBytes;
Result<GgufHeader> read_gguf_header(const std::string& path);

// The ggml type's name ("Q4_K"), or "type N" for an unknown one.
std::string ggml_type_name(std::uint32_t ggml_type);

// A ggml type's block: `elems` elements in `bytes` bytes ({0, 0} for an unknown type).
struct GgmlBlockSize {
  std::uint32_t elems = 0;
  std::uint32_t bytes = 0;
};
GgmlBlockSize ggml_block_size(std::uint32_t ggml_type);

}  // namespace qload::formats
