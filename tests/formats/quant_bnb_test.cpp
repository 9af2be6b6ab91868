// bitsandbytes 4-bit as transformers saves it: the quant_state JSON read with the catalog,
// detection of each weight and its parts, and the decode on hand-worked values (high nibble
// first, blocks over the flattened weight, double-quantized absmax). Equality with
// bitsandbytes' own CPU dequantize_4bit on weights it quantized is python.clients
// (test_quantized_libraries.py).
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include "formats_test_support.hpp"
#include "qload/formats/driver.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/safetensors_writer.hpp"

using namespace qload;
using namespace qload::testing;

namespace {

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

struct BnbWeight {
  std::uint64_t n = 2, k = 40, block = 16;  // 80 elements, 5 blocks, the last one partial
  bool nested = false;
  std::string quant_type = "nf4";
  std::vector<std::uint8_t> packed;
  std::vector<float> map, absmax, nested_map, nested_absmax;
  std::vector<std::uint8_t> absmax_codes;
  float offset = 0.25f;

  BnbWeight() {
    for (std::uint64_t j = 0; j < n * k / 2; ++j)
      packed.push_back(static_cast<std::uint8_t>((((2 * j) % 16) << 4) | ((2 * j + 1) % 16)));
    for (int c = 0; c < 16; ++c) map.push_back(static_cast<float>(c - 8) / 8.0f);
    absmax = {1.0f, 2.0f, 0.5f, 3.0f, 0.125f};
    for (int c = 0; c < 256; ++c) nested_map.push_back(static_cast<float>(c) / 256.0f);
    absmax_codes = {0, 64, 128, 200, 255};
    nested_absmax = {3.0f};
  }
  // The reference: element i is the high nibble of byte i / 2 when i is even.
  float expected(std::uint64_t i) const {
    const std::uint8_t byte = packed[i / 2];
    const unsigned code = i % 2 == 0 ? byte >> 4 : byte & 15u;
    const std::uint64_t b = i / block;
    const float scale = nested ? nested_map[absmax_codes[b]] * nested_absmax[0] + offset : absmax[b];
    return map[code] * scale;
  }
  std::string state() const {
    std::string s = R"({"quant_type": ")" + quant_type + R"(", "blocksize": )" + std::to_string(block) +
                    R"(, "dtype": "bfloat16", "shape": [)" + std::to_string(n) + ", " + std::to_string(k) + "]";
    if (nested) s += R"(, "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.25)";
    return s + "}";
  }
  void write(const ScratchDir& dir, const std::string& state_suffix = "nf4") const {
    const std::string w = "model.layers.0.mlp.up_proj.weight";
    const std::string json = state();
    std::vector<std::vector<std::byte>> keep = {bytes_of(packed),       bytes_of(map),        bytes_of(absmax),
                                                bytes_of(absmax_codes), bytes_of(nested_map), bytes_of(nested_absmax)};
    std::vector<std::byte> state_bytes(json.size());
    std::memcpy(state_bytes.data(), json.data(), json.size());
    std::vector<formats::WriterTensor> t = {
        {w, DType::kU8, Shape{n * k / 2, 1}, keep[0], {}},
        {w + ".quant_map", DType::kF32, Shape{16}, keep[1], {}},
        {w + ".quant_state.bitsandbytes__" + state_suffix, DType::kU8, Shape{json.size()}, state_bytes, {}},
        {"model.norm.weight", DType::kF32, Shape{16}, keep[1], {}}};
    if (nested) {
      t.push_back({w + ".absmax", DType::kU8, Shape{absmax_codes.size()}, keep[3], {}});
      t.push_back({w + ".nested_quant_map", DType::kF32, Shape{256}, keep[4], {}});
      t.push_back({w + ".nested_absmax", DType::kF32, Shape{1}, keep[5], {}});
    } else {
      t.push_back({w + ".absmax", DType::kF32, Shape{absmax.size()}, keep[2], {}});
    }
    REQUIRE(formats::write_safetensors(dir.file("model.safetensors"), t));
    std::ofstream(dir.file("config.json"))
        << R"({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "nf4"}})";
  }
};

std::vector<float> decode(const formats::Catalog& c, const formats::LogicalTensor& t) {
  std::vector<std::vector<std::byte>> storage;
  std::vector<formats::PartBytes> parts;
  storage.reserve(t.parts.size());
  for (const auto& [role, index] : t.parts) {
    const formats::TensorEntry& e = c.tensors[index];
    storage.push_back(read_file_range(c.files[e.file].path, e.offset, e.nbytes));
    parts.push_back({role, e.dtype, e.shape, storage.back()});
  }
  std::vector<float> out(t.rows * t.cols);
  const Status s = formats::dequantize_rows(t, parts, 0, t.rows, DType::kF32, std::as_writable_bytes(std::span(out)));
  if (!s) FAIL(s.error().to_string());
  return out;
}

}  // namespace

TEST_CASE("bitsandbytes 4-bit: quant_state JSON, parts and the decode, plain and double-quantized", "[quant][bnb]") {
  for (const bool nested : {false, true}) {
    INFO("nested " << nested);
    BnbWeight w;
    w.nested = nested;
    ScratchDir dir;
    w.write(dir);
    const auto catalog = formats::open_catalog(dir.path().string());
    if (!catalog) FAIL(catalog.error().to_string());
    CHECK(catalog->embedded.size() == 1);
    const auto q = formats::detect_quantization(*catalog);
    if (!q) FAIL(q.error().to_string());
    CHECK(q->method == "bitsandbytes");
    REQUIRE(q->logical.size() == 1);
    const formats::LogicalTensor& t = q->logical.front();
    CHECK(t.name == "model.layers.0.mlp.up_proj.weight");
    CHECK(formats::weight_scheme_name(t.params) == "bnb-nf4");
    CHECK((t.rows == 2 && t.cols == 40 && t.params.group_size == 16));
    CHECK(t.params.nested_block == (nested ? 256u : 0u));
    CHECK(q->plain.size() == 1);  // model.norm.weight
    const std::vector<float> got = decode(*catalog, t);
    for (std::uint64_t i = 0; i < got.size(); ++i) {
      INFO("element " << i);
      CHECK(got[i] == w.expected(i));
    }
    const formats::QuantLayoutText layout = formats::describe_layout(t, *catalog);
    CHECK_THAT(layout.scales, Catch::Contains("per-block 16"));
  }
}

TEST_CASE("bitsandbytes 4-bit: states and parts that disagree are refused, naming the tensor", "[quant][bnb]") {
  {
    BnbWeight w;
    ScratchDir dir;
    w.write(dir, "fp4");  // the name says fp4, the JSON nf4
    const auto q = formats::detect_quantization(*formats::open_catalog(dir.path().string()));
    REQUIRE_FALSE(q);
    CHECK_THAT(q.error().to_string(), Catch::Contains("quant_type is 'nf4'"));
  }
  {
    BnbWeight w;
    w.absmax.pop_back();  // 4 absmax for 5 blocks
    ScratchDir dir;
    w.write(dir);
    const auto q = formats::detect_quantization(*formats::open_catalog(dir.path().string()));
    REQUIRE_FALSE(q);
    CHECK(q.error().code() == Errc::kCorrupt);
    CHECK(q.error().tensor() == std::optional<std::string_view>("model.layers.0.mlp.up_proj.weight.absmax"));
  }
  {
    BnbWeight w;
    w.block = 12;  // not a power of two
    ScratchDir dir;
    w.write(dir);
    const auto q = formats::detect_quantization(*formats::open_catalog(dir.path().string()));
    REQUIRE_FALSE(q);
    CHECK_THAT(q.error().to_string(), Catch::Contains("blocksize is not a power of two"));
  }
}

TEST_CASE("bitsandbytes 8-bit: SCB per row, W = (q * SCB) * f32(1/127)", "[quant][bnb]") {
  ScratchDir dir;
  const std::vector<std::int8_t> q = {-127, -1, 0, 1, 64, 127, 5, -5};
  const std::vector<float> scb = {2.0f, 0.3f};
  const std::vector<std::uint8_t> format = {0};
  const auto qb = bytes_of(q), sb = bytes_of(scb), fb = bytes_of(format);
  const std::vector<formats::WriterTensor> tensors = {{"l.weight", DType::kI8, Shape{2, 4}, qb, {}},
                                                      {"l.SCB", DType::kF32, Shape{2}, sb, {}},
                                                      {"l.weight_format", DType::kU8, Shape{}, fb, {}},
                                                      {"l.bias", DType::kF32, Shape{2}, sb, {}}};
  REQUIRE(formats::write_safetensors(dir.file("model.safetensors"), tensors));
  std::ofstream(dir.file("config.json"))
      << R"({"quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": true}})";
  const auto catalog = formats::open_catalog(dir.path().string());
  REQUIRE(catalog);
  const auto qc = formats::detect_quantization(*catalog);
  if (!qc) FAIL(qc.error().to_string());
  REQUIRE(qc->logical.size() == 1);
  const formats::LogicalTensor& t = qc->logical.front();
  CHECK(formats::weight_scheme_name(t.params) == "bnb-int8");
  CHECK((t.rows == 2 && t.cols == 4));
  const std::vector<float> got = decode(*catalog, t);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float want = (static_cast<float>(q[i]) * scb[i / 4]) * static_cast<float>(7.874015718698502e-3);
    CHECK(got[i] == want);
  }
  // An SCB of the wrong length is refused by name.
  const std::vector<formats::WriterTensor> short_scb = {{"l.weight", DType::kI8, Shape{2, 4}, qb, {}},
                                                        {"l.SCB", DType::kF32, Shape{1}, std::span(sb).first(4), {}}};
  REQUIRE(formats::write_safetensors(dir.file("model.safetensors"), short_scb));
  const auto bad = formats::detect_quantization(*formats::open_catalog(dir.path().string()));
  REQUIRE_FALSE(bad);
  CHECK(bad.error().tensor() == std::optional<std::string_view>("l.SCB"));
}
