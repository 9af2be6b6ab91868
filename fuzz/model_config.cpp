// libFuzzer target: config.json text, read as qload reads it (its quantization_config
// included), then the model geometry and the quantization scheme detected against one of four
// typical tensor sets (chosen by the first byte): GPTQ, AWQ, FP8 with scales, and
// compressed-tensors packed int4. Detection cross-checks the config with these tensors. With
// the compressed-tensors set and bit 2 of the first byte, the next 16 bytes are weight_shape's
// as the catalog read them from the file (Catalog::embedded), which detection takes K from.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model_dir.hpp"
#include "qload/formats/catalog.hpp"
#include "qload/formats/model_config.hpp"
#include "qload/formats/quant.hpp"

namespace {

using qload::DType;
using qload::Shape;
using qload::formats::Catalog;
using qload::formats::TensorEntry;

void add(Catalog& c, const std::string& name, DType dtype, Shape shape) {
  const std::uint64_t bytes = qload::bytes_for_elements(dtype, shape.numel().value_or(0)).value_or(0);
  const std::uint64_t offset = c.tensors.empty() ? 64 : c.tensors.back().offset + c.tensors.back().nbytes;
  c.tensors.push_back(TensorEntry{
      .name = name, .file = 0, .offset = offset, .nbytes = bytes, .dtype = dtype, .shape = std::move(shape)});
}

// One linear layer (K = 256 inputs, N = 128 outputs, groups of 128) stored four ways.
Catalog tensors_for(std::uint8_t kind) {
  Catalog c;
  c.format = "safetensors";
  const std::string m = "model.layers.0.mlp.down_proj.";
  switch (kind % 4) {
    case 0:  // GPTQ: qweight packs 8 rows per int32
      add(c, m + "qweight", DType::kI32, Shape{32, 128});
      add(c, m + "qzeros", DType::kI32, Shape{2, 16});
      add(c, m + "scales", DType::kF16, Shape{2, 128});
      add(c, m + "g_idx", DType::kI32, Shape{256});
      break;
    case 1:  // AWQ: qweight packs 8 columns per int32
      add(c, m + "qweight", DType::kI32, Shape{256, 16});
      add(c, m + "qzeros", DType::kI32, Shape{2, 16});
      add(c, m + "scales", DType::kF16, Shape{2, 128});
      break;
    case 2:  // FP8 with per-tensor scales
      add(c, m + "weight", DType::kF8_E4M3, Shape{128, 256});
      add(c, m + "weight_scale", DType::kF32, Shape{});
      add(c, m + "input_scale", DType::kF32, Shape{});
      break;
    default:  // compressed-tensors pack-quantized int4
      add(c, m + "weight_packed", DType::kI32, Shape{128, 32});
      add(c, m + "weight_scale", DType::kF16, Shape{128, 2});
      add(c, m + "weight_shape", DType::kI64, Shape{2});
      break;
  }
  add(c, "model.norm.weight", DType::kF16, Shape{256});
  c.files.push_back({.path = "fuzz.safetensors",
                     .size = c.tensors.back().offset + c.tensors.back().nbytes,
                     .data_offset = 64,
                     .metadata = {}});
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  Catalog catalog = tensors_for(data[0]);
  std::size_t at = 1;
  if (data[0] % 4 == 3 && (data[0] & 4) != 0) {
    if (size < 17) return 0;
    catalog.embedded.emplace("model.layers.0.mlp.down_proj.weight_shape",
                             std::string(reinterpret_cast<const char*>(data) + 1, 16));
    at = 17;
  }
  const std::string text(reinterpret_cast<const char*>(data) + at, size - at);
  if (!qload::formats::set_model_config(text, "config.json", catalog)) return 0;
  (void)qload::formats::read_geometry(catalog);
  (void)qload::formats::detect_quantization(catalog);
  return 0;
}
