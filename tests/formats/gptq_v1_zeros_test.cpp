// GPTQ v1 zero points, both conventions (docs/formats.md "GPTQ version"). GPTQModel saves v1 by
// subtracting gptq_v1_word_offset(b) from each whole v2 qzeros word (borrows cross fields where
// z = 0) and loads by adding it back; exllama, vLLM and AutoGPTQ read each field as
// (stored + 1) & (2^b - 1). Here: a v2 weight, written as GPTQModel writes v1, decodes by whole
// words to exactly the v2 weight (the decoder, the kernels' arithmetic and the v1 -> v2 repack),
// and the per-field reading of the same bytes differs where a borrow happened.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_pack.hpp"
#include "quant/dequantize_element.hpp"
#include "quant/device_args.hpp"
#include "quant_int_reference.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing::quant_ref;

namespace {

// The device kernels' arithmetic, run here on the host (decode() is the CPU decoder's).
std::vector<float> decode_elementwise(const Weight& w) {
  std::vector<float> out(w.t.rows * w.t.cols);
  std::vector<const std::byte*> pointers;
  for (const OwnedPart& p : w.parts) pointers.push_back(p.bytes.data());
  const std::vector<PartBytes> views = w.views();
  const auto args = detail::describe_dequantize(w.t, views, pointers, 0, w.t.rows, DType::kF32,
                                                reinterpret_cast<std::byte*>(out.data()));
  if (!args) FAIL(args.error().to_string());
  for (std::uint64_t n = 0; n < w.t.rows; ++n)
    for (std::uint64_t k = 0; k < w.t.cols; ++k)
      out[n * w.t.cols + k] = detail::element::dequantize_element(*args, n, k);
  return out;
}

// GPTQModel's convert_gptq_v2_to_v1_format: every qzeros word minus the offset, mod 2^32.
Weight as_gptqmodel_v1(const Weight& v2) {
  Weight w = v2;
  w.t.params.gptq_version = 1;
  w.t.params.gptq_v1_whole_word = true;
  Bytes& z = w.part("qzeros").bytes;
  const std::uint32_t offset = gptq_v1_word_offset(w.t.params.bits);
  for (std::size_t i = 0; i < z.size(); i += 4) {
    std::uint32_t word;
    std::memcpy(&word, z.data() + i, 4);
    word -= offset;
    std::memcpy(z.data() + i, &word, 4);
  }
  return w;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST_CASE("gptq v1 by whole words: GPTQModel's v1 decodes to its v2, per field does not", "[quant]") {
  Rng rng(23);
  for (unsigned bits : {2u, 4u, 8u}) {
    INFO(bits << "-bit");
    // Random asymmetric zeros, and a true zero in the low byte of every word: borrows happen.
    Weight v2 = make_gptq({.bits = bits, .group = 32, .version = 2, .sym = false}, 128, 40, rng);
    Bytes& zeros = v2.part("qzeros").bytes;
    for (std::size_t i = 0; i < zeros.size(); i += 4) zeros[i] = std::byte{0};
    const Weight v1 = as_gptqmodel_v1(v2);
    const std::vector<float> want = decode(v2);
    CHECK(same_bits(decode(v1), want));
    CHECK(same_bits(decode_elementwise(v1), want));

    // The v1 -> v2 repack gives GPTQModel's v2 words back.
    Bytes repacked(v1.bytes("qzeros").size());
    REQUIRE(gptq_v1_zeros_to_v2(v1.t, v1.bytes("qzeros"), repacked));
    CHECK(repacked == v2.bytes("qzeros"));

    // Read per field (exllama / vLLM), the same bytes give other weights wherever a zero below
    // borrowed: the reason the convention follows the writer.
    Weight per_field = v1;
    per_field.t.params.gptq_v1_whole_word = false;
    const std::vector<float> other = decode(per_field);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < want.size(); ++i) differ += std::memcmp(&want[i], &other[i], 4) != 0;
    CHECK(differ > 0);
    CHECK(differ < want.size() / 2);
  }
}

TEST_CASE("gptq v1 packing by whole words writes GPTQModel's words", "[quant]") {
  Rng rng(29);
  const std::uint64_t k = 64, n = 24, groups = 2;
  LogicalTensor t;
  t.name = "w";
  t.rows = n;
  t.cols = k;
  t.params = {.scheme = QuantScheme::kGptq, .bits = 4, .group_size = 32, .sym = false, .gptq_version = 2};
  std::vector<std::uint8_t> q(k * n), zeros(groups * n);
  for (auto& v : q) v = static_cast<std::uint8_t>(rng() % 16);
  for (auto& v : zeros) v = static_cast<std::uint8_t>(rng() % 3 == 0 ? 0 : rng() % 16);  // zeros borrow
  const PackedShapes s = *packed_shapes(t);
  const auto bytes = [](const Shape& shape) { return Bytes(*shape.numel() * 4); };
  Bytes qweight_v2 = bytes(s.weight), qzeros_v2 = bytes(s.zeros);
  REQUIRE(pack_gptq(t, q, zeros, qweight_v2, qzeros_v2));
  t.params.gptq_version = 1;
  t.params.gptq_v1_whole_word = true;
  Bytes qweight_v1 = bytes(s.weight), qzeros_v1 = bytes(s.zeros);
  REQUIRE(pack_gptq(t, q, zeros, qweight_v1, qzeros_v1));
  CHECK(qweight_v1 == qweight_v2);
  for (std::size_t i = 0; i < qzeros_v1.size(); i += 4) {
    std::uint32_t a, b;
    std::memcpy(&a, qzeros_v1.data() + i, 4);
    std::memcpy(&b, qzeros_v2.data() + i, 4);
    CHECK(a == b - 0x11111111u);
  }
}
