// libFuzzer target: a whole GGUF file held in memory (header, key-values, tensor infos, data).
// Every count and length is bounded by the input's size, so nothing large is allocated. Block-
// quantized tensors whose data lies inside the input are then dequantized (a few rows each):
// the decoder must accept any bytes as blocks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "qload/formats/gguf.hpp"
#include "qload/formats/quant_codec.hpp"

namespace {

void dequantize_blocks(const qload::formats::GgufTensorInfo& t, std::span<const std::byte> data) {
  using namespace qload;
  const formats::GgmlBlockSize block = formats::ggml_block_size(t.ggml_type);
  if (block.elems <= 1 || t.ne.empty()) return;
  formats::LogicalTensor w;
  w.name = t.name;
  w.params.scheme = formats::QuantScheme::kGgml;
  w.params.ggml_type = t.ggml_type;
  w.cols = t.ne[0];
  w.rows = w.cols == 0 ? 0 : t.nbytes / (w.cols / block.elems * block.bytes);
  const formats::PartBytes part{.role = "blocks", .dtype = DType::kU8, .shape = {}, .bytes = data};
  const std::uint64_t rows = std::min<std::uint64_t>(w.rows, w.cols == 0 ? 0 : (std::uint64_t{1} << 16) / w.cols);
  std::vector<std::byte> out(static_cast<std::size_t>(rows * w.cols * 4));
  (void)formats::dequantize_rows(w, std::span(&part, 1), 0, rows, DType::kF32, out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  const auto header = qload::formats::parse_gguf_bytes(bytes, size, "fuzz.gguf");
  if (!header) return 0;
  for (const qload::formats::GgufTensorInfo& t : header->tensors) {
    const std::uint64_t at = header->data_offset + t.offset;  // inside the file: the parser checked
    if (at + t.nbytes <= size) dequantize_blocks(t, bytes.subspan(static_cast<std::size_t>(at), t.nbytes));
  }
  return 0;
}
