// What the format allows and qload must accept: padding, unaligned offsets, empty tensors,
// scalars, sub-byte dtypes, every dtype spelling, escaped names.
#include <catch2/catch.hpp>

#include "formats_test_support.hpp"
#include "qload/formats/safetensors.hpp"

using namespace qload;
using namespace qload::testing;

namespace {

formats::SafetensorsHeader parse_ok(std::string_view header, const std::vector<std::byte>& data = {}) {
  const auto bytes = safetensors_bytes(header, data);
  auto result = formats::parse_safetensors_bytes(bytes, "mem");
  INFO("header: " << header);
  if (!result) FAIL(result.error().to_string());
  return std::move(*result);
}

}  // namespace

TEST_CASE("JSON whitespace padding at either end of the header is accepted", "[formats][safetensors]") {
  const std::string body = "{" + entry("t", "U8", "[2]", 0, 2) + "}";
  for (const std::string& header :
       std::initializer_list<std::string>{body + "      ", "   " + body, "\n\t " + body + " \r\n", body}) {
    const auto parsed = parse_ok(header, zeros(2));
    REQUIRE(parsed.tensors.size() == 1);
    CHECK(parsed.header_bytes == header.size());
    CHECK(parsed.data_offset == 8 + header.size());
    CHECK(parsed.tensors[0].offset == parsed.data_offset);
  }
}

TEST_CASE("unaligned data offsets are accepted (odd-sized U8 tensors)", "[formats][safetensors]") {
  const std::string header = "{" + entry("odd", "U8", "[3]", 0, 3) + "," + entry("f", "F32", "[2]", 3, 11) + "," +
                             entry("h", "F16", "[1]", 11, 13) + "}";
  const auto parsed = parse_ok(header, zeros(13));
  REQUIRE(parsed.tensors.size() == 3);
  CHECK(parsed.tensors[1].name == "f");
  CHECK(parsed.tensors[1].offset == data_at(header, 3));
  CHECK(parsed.tensors[1].offset % 4 != 0);
  CHECK(parsed.tensors[2].offset == data_at(header, 11));
}

TEST_CASE("zero-size tensors and rank-0 scalars are accepted", "[formats][safetensors]") {
  // Zero-size tensors may sit anywhere, including on another tensor's first byte and at the end.
  const std::string header = "{" + entry("empty_first", "F32", "[0]", 0, 0) + "," + entry("scalar", "F64", "[]", 0, 8) +
                             "," + entry("empty_mid", "I8", "[3,0,2]", 8, 8) + "," + entry("b", "BF16", "[]", 8, 10) +
                             "," + entry("empty_end", "U8", "[0]", 10, 10) + "}";
  const auto parsed = parse_ok(header, zeros(10));
  REQUIRE(parsed.tensors.size() == 5);
  CHECK(parsed.tensors[0].name == "empty_first");
  CHECK(parsed.tensors[0].nbytes == 0);
  CHECK(parsed.tensors[1].name == "scalar");
  CHECK(parsed.tensors[1].shape.rank() == 0);
  CHECK(parsed.tensors[1].nbytes == 8);
  CHECK(parsed.tensors[2].name == "empty_mid");
  CHECK(parsed.tensors[2].shape == Shape{3, 0, 2});
  CHECK(parsed.tensors[4].name == "empty_end");
  CHECK(parsed.tensors[4].offset == data_at(header, 10));
}

TEST_CASE("sub-byte dtypes: F4 packs 2 per byte, F6 4 per 3 bytes", "[formats][safetensors]") {
  const std::string header = "{" + entry("f4", "F4", "[2,3]", 0, 3) + "," + entry("f6a", "F6_E2M3", "[4]", 3, 6) + "," +
                             entry("f6b", "F6_E3M2", "[2,4]", 6, 12) + "," + entry("f4s", "F4", "[2]", 12, 13) + "}";
  const auto parsed = parse_ok(header, zeros(13));
  REQUIRE(parsed.tensors.size() == 4);
  CHECK(parsed.tensors[0].dtype == DType::kF4);
  CHECK(parsed.tensors[0].nbytes == 3);
  CHECK(parsed.tensors[1].nbytes == 3);
  CHECK(parsed.tensors[2].nbytes == 6);
  CHECK(parsed.tensors[3].nbytes == 1);
}

TEST_CASE("every safetensors dtype spelling is accepted", "[formats][safetensors]") {
  std::string header = "{";
  std::uint64_t offset = 0;
  for (const DTypeInfo& info : all_dtypes()) {
    const std::string shape = "[" + std::to_string(info.block_elems) + "]";
    header += (offset ? "," : "") +
              entry(std::string("t_") + std::string(info.name), info.name, shape, offset, offset + info.block_bytes);
    offset += info.block_bytes;
  }
  header += "}";
  const auto parsed = parse_ok(header, zeros(offset));
  REQUIRE(parsed.tensors.size() == all_dtypes().size());
  for (std::size_t i = 0; i < parsed.tensors.size(); ++i) {
    CHECK(parsed.tensors[i].dtype == all_dtypes()[i].dtype);
    CHECK(parsed.tensors[i].nbytes == all_dtypes()[i].block_bytes);
  }
}

TEST_CASE("an empty header and an empty object are a valid file with no tensors", "[formats][safetensors]") {
  const auto parsed = parse_ok("{}");
  CHECK(parsed.tensors.empty());
  CHECK(parsed.metadata.empty());
  CHECK(parsed.data_offset == 10);
  const auto with_metadata = parse_ok(R"({"__metadata__":{"format":"pt","note":"a \"quoted\" \u00e9"}}    )");
  CHECK(with_metadata.metadata.at("format") == "pt");
  CHECK(with_metadata.metadata.at("note") == "a \"quoted\" \xc3\xa9");
  // The reference reads __metadata__ as an optional map, so null means none.
  CHECK(parse_ok(R"({"__metadata__":null})").metadata.empty());
}

TEST_CASE("names are JSON-unescaped and entries may come in any order", "[formats][safetensors]") {
  const std::string header = R"({"z\n\u0000\"":{"data_offsets":[2,2],"shape":[0,1],"dtype":"U8"},)"
                             R"("caf\u00e9":{"shape":[2],"dtype":"U8","data_offsets":[0,2]}})";
  const auto parsed = parse_ok(header, zeros(2));
  REQUIRE(parsed.tensors.size() == 2);
  CHECK(parsed.tensors[0].name == "caf\xc3\xa9");
  CHECK(parsed.tensors[1].name == std::string("z\n\0\"", 4));
  CHECK(parsed.tensors[1].shape == Shape{0, 1});
  CHECK(parsed.tensors[1].nbytes == 0);  // shape [0, 1]: empty, at relative offset 2
}
