// One crafted file per safetensors validation rule (docs/formats.md, in the order they are
// checked): each must be rejected with its own code, a clear message, and the file, tensor and
// byte offset where the problem is.
#include <catch2/catch.hpp>

#include <limits>

#include "formats_test_support.hpp"
#include "qload/formats/safetensors.hpp"

using namespace qload;
using namespace qload::testing;
using formats::Catalog;

namespace {

Result<Catalog> open_crafted(const ScratchDir& dir, std::string_view header, const std::vector<std::byte>& data = {},
                             std::optional<std::uint64_t> declared = std::nullopt) {
  return safetensors().open(write_safetensors_file(dir, "crafted.safetensors", header, data, declared));
}

// Rejected for the entry `tensor`, at an offset inside that entry's text (JSON-stage errors
// point just past the offending token, so the exact byte is the lexer's business).
void check_entry_error(const ScratchDir& dir, const std::string& header, Errc code, const std::string& message_has,
                       const std::string& tensor) {
  INFO("header: " << header);
  const auto result = open_crafted(dir, header, zeros(64));
  check_error(result, {code, message_has, dir.file("crafted.safetensors"), tensor, std::nullopt});
  REQUIRE(result.error().offset().has_value());
  CHECK(*result.error().offset() >= header_pos(header, "\"" + tensor + "\""));
  CHECK(*result.error().offset() <= 8 + header.size());
}

}  // namespace

TEST_CASE("a file shorter than the 8-byte length field is truncated", "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const std::size_t size : {0u, 5u, 7u}) {
    const std::string path = dir.file("short.safetensors");
    write_file(path, zeros(size));
    check_error(safetensors().open(path), {Errc::kTruncated, "too small for the 8-byte header length", path, "", 0});
  }
}

TEST_CASE("a header length above 100,000,000 is rejected before it is allocated", "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const std::uint64_t n : {std::uint64_t{100'000'001}, std::numeric_limits<std::uint64_t>::max()}) {
    const auto result = open_crafted(dir, "{}", {}, n);
    check_error(result,
                {Errc::kCorrupt, "exceeds the limit of 100000000 bytes", dir.file("crafted.safetensors"), "", 0});
  }
  // Exactly the limit is allowed by that rule (and then fails the next one: the file is tiny).
  check_error(open_crafted(dir, "{}", {}, 100'000'000), {Errc::kTruncated, "runs past the end of the file", "", "", 0});
}

TEST_CASE("a header length past the end of the file is truncated, never allocated", "[formats][safetensors][rules]") {
  ScratchDir dir;
  const std::string path = write_safetensors_file(dir, "past.safetensors", "{}", {}, 99'999'999);
  check_error(safetensors().open(path), {Errc::kTruncated, "runs past the end of the file (10 bytes)", path, "", 0});
  // With the format's limit lifted, sizes no allocator could satisfy still fail on the file
  // size or the overflow check: allocating first would have reported kOutOfMemory instead.
  const formats::SafetensorsLimits unlimited{.max_header_bytes = std::numeric_limits<std::uint64_t>::max()};
  for (const std::uint64_t n : {std::uint64_t{1} << 62, std::numeric_limits<std::uint64_t>::max() - 8}) {
    write_file(path, safetensors_bytes("{}", {}, n));
    check_error(formats::read_safetensors_header(path, unlimited),
                {Errc::kTruncated, "runs past the end", path, "", 0});
  }
  write_file(path, safetensors_bytes("{}", {}, std::numeric_limits<std::uint64_t>::max() - 3));
  check_error(formats::read_safetensors_header(path, unlimited),
              {Errc::kOverflow, "does not fit in 64 bits", path, "", 0});
  const auto bytes = safetensors_bytes("{}", {}, std::numeric_limits<std::uint64_t>::max() - 3);
  check_error(formats::parse_safetensors_bytes(bytes, "mem", unlimited),
              {Errc::kOverflow, "does not fit", "mem", "", 0});
}

TEST_CASE("a header that is not UTF-8 is rejected at the bad byte", "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const std::string& bad :
       std::initializer_list<std::string>{"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    const std::string header = "{\"t" + bad + "\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}";
    check_error(open_crafted(dir, header),
                {Errc::kCorrupt, "not valid UTF-8", dir.file("crafted.safetensors"), "", header_pos(header, bad)});
  }
}

TEST_CASE("a header that is not JSON is rejected with the parser's position", "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const std::string& header :
       std::initializer_list<std::string>{"{\"a\":{\"dtype\":\"F32\",}", "{\"a\" 1}", "{} x", "{}\n{}", "{\"a\":tru}",
                                          "{\"\\x\":1}", "{/*c*/}", "{\"a\":\"\x01\"}"}) {
    INFO("header: " << header);
    const auto result = open_crafted(dir, header);
    check_error(result,
                {Errc::kCorrupt, "header is not valid JSON", dir.file("crafted.safetensors"), "", std::nullopt});
    REQUIRE(result.error().offset().has_value());
    CHECK(*result.error().offset() >= 8);
    CHECK(*result.error().offset() <= 8 + header.size());
  }
}

TEST_CASE("a NUL byte anywhere in the header is rejected (nlohmann would stop reading there)",
          "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const std::string& header : std::initializer_list<std::string>{
           std::string("{}\0\0\0\0\0\0", 8), std::string("{}\0{\"x\":1}", 10), std::string("{\"a\0\":{}}", 9)}) {
    check_error(open_crafted(dir, header), {Errc::kCorrupt, "header contains a NUL byte",
                                            dir.file("crafted.safetensors"), "", 8 + header.find('\0')});
  }
}

TEST_CASE("a header that is not a JSON object is rejected", "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const std::string& header :
       std::initializer_list<std::string>{"[]", "\"x\"", "1", "", "        ", "\xef\xbb\xbf{}", "  null"}) {
    INFO("header: " << header);
    check_error(open_crafted(dir, header),
                {Errc::kCorrupt, "not a JSON object", dir.file("crafted.safetensors"), "", std::nullopt});
  }
}

TEST_CASE("every entry is an object with exactly dtype, shape and data_offsets", "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const std::string& value : std::initializer_list<std::string>{"5", "[]", "\"x\"", "null", "true"})
    check_entry_error(dir, "{\"t\":" + value + "}", Errc::kCorrupt, "must be an object with dtype, shape", "t");
  check_entry_error(dir, R"({"t":{"dtype":"U8","shape":[1]}})", Errc::kCorrupt, "missing data_offsets", "t");
  check_entry_error(dir, R"({"t":{}})", Errc::kCorrupt, "missing dtype, shape, data_offsets", "t");
  check_entry_error(dir, R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}})", Errc::kCorrupt,
                    "unknown field 'extra'", "t");
  check_entry_error(dir, R"({"t":{"dtype":"U8","shape":[1],"dtype":"U8","data_offsets":[0,1]}})", Errc::kCorrupt,
                    "field dtype appears twice", "t");
}

TEST_CASE("dtype must be a known safetensors spelling", "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const std::string& dtype : std::initializer_list<std::string>{"f32", "F128", "float32", "Q4_0", ""})
    check_entry_error(dir, "{\"t\":{\"dtype\":\"" + dtype + R"(","shape":[1],"data_offsets":[0,1]}})",
                      Errc::kUnsupported, "unknown dtype", "t");
  check_entry_error(dir, R"({"t":{"dtype":5,"shape":[1],"data_offsets":[0,1]}})", Errc::kCorrupt,
                    "dtype must be a string", "t");
}

TEST_CASE("shape must be an array of non-negative integers that fit in 64 bits", "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const std::string& shape : std::initializer_list<std::string>{"[-1]", "[-0]", "[1.5]", "[1e3]", "[\"3\"]",
                                                                     "[[1]]", "3", "null", "{}", "[2,-9]"})
    check_entry_error(dir, R"({"t":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,1]}})", Errc::kCorrupt,
                      "shape must be an array of non-negative integers", "t");
  check_entry_error(dir, R"({"t":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}})", Errc::kOverflow,
                    "does not fit in 64 bits", "t");
}

TEST_CASE("data_offsets must be exactly two non-negative integers", "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const std::string& offsets :
       std::initializer_list<std::string>{"[0]", "[]", "[0,1,2]", "[-1,0]", "[0,1.0]", "\"0,1\"", "[[0],1]", "{}"})
    check_entry_error(dir, R"({"t":{"dtype":"U8","shape":[1],"data_offsets":)" + offsets + "}}", Errc::kCorrupt,
                      "data_offsets must be an array of two non-negative integers", "t");
  check_entry_error(dir, R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,99999999999999999999]}})", Errc::kOverflow,
                    "does not fit in 64 bits", "t");
}

TEST_CASE("END before BEGIN is rejected at the tensor's data", "[formats][safetensors][rules]") {
  ScratchDir dir;
  const std::string header = "{" + entry("t", "U8", "[4]", 4, 0) + "}";
  check_error(open_crafted(dir, header, zeros(4)),
              {Errc::kCorrupt, "END is before BEGIN", dir.file("crafted.safetensors"), "t", data_at(header, 4)});
}

TEST_CASE("data offsets start at 0 and are contiguous: no gaps, no overlaps", "[formats][safetensors][rules]") {
  ScratchDir dir;
  const std::string path = dir.file("crafted.safetensors");
  SECTION("a gap before the first tensor") {
    const std::string header = "{" + entry("a", "U8", "[4]", 4, 8) + "}";
    check_error(open_crafted(dir, header, zeros(8)),
                {Errc::kCorrupt, "the first tensor must start at 0", path, "a", data_at(header, 4)});
  }
  SECTION("a gap between tensors") {
    const std::string header = "{" + entry("a", "U8", "[4]", 0, 4) + "," + entry("b", "U8", "[4]", 6, 10) + "}";
    check_error(open_crafted(dir, header, zeros(10)),
                {Errc::kCorrupt, "gap of 2 bytes after tensor 'a'", path, "b", data_at(header, 6)});
  }
  SECTION("overlapping tensors") {
    const std::string header = "{" + entry("a", "U8", "[4]", 0, 4) + "," + entry("b", "U8", "[4]", 2, 6) + "}";
    check_error(open_crafted(dir, header, zeros(6)),
                {Errc::kCorrupt, "overlaps tensor 'a', which ends at 4", path, "b", data_at(header, 2)});
  }
  SECTION("two tensors aliasing the same bytes (test_json_attack)") {
    const std::string header = "{" + entry("b", "U8", "[4]", 0, 4) + "," + entry("a", "U8", "[4]", 0, 4) + "}";
    check_error(open_crafted(dir, header, zeros(4)),
                {Errc::kCorrupt, "overlaps tensor 'a'", path, "b", data_at(header, 0)});
  }
}

TEST_CASE("a dtype x shape product that overflows is rejected", "[formats][safetensors][rules]") {
  ScratchDir dir;
  // numel overflows; then numel fits but numel * 4 bytes does not (test_validation_overflow).
  for (const std::string& shape : std::initializer_list<std::string>{
           "[2,18446744073709551614]", "[2,9223372036854775807]", "[4611686018427387904]"}) {
    const std::string header = "{" + entry("t", "I32", shape, 0, 8) + "}";
    check_error(open_crafted(dir, header, zeros(8)),
                {Errc::kOverflow, "tensor size", dir.file("crafted.safetensors"), "t", data_at(header, 0)});
  }
  const std::string header = "{" + entry("t", "I32", "[2,9223372036854775807]", 0, 8) + "}";
  check_error(open_crafted(dir, header, zeros(8)), {Errc::kOverflow, "does not fit in 64 bits", "", "t", std::nullopt});
}

TEST_CASE("a sub-byte tensor must fill a whole number of bytes", "[formats][safetensors][rules]") {
  ScratchDir dir;
  for (const auto& [dtype, shape] : {std::pair{"F4", "[3]"}, {"F4", "[1,1]"}, {"F6_E2M3", "[2]"}, {"F6_E3M2", "[5]"}}) {
    const std::string header = "{" + entry("t", dtype, shape, 0, 2) + "}";
    check_error(open_crafted(dir, header, zeros(2)),
                {Errc::kCorrupt, "not a whole number of", dir.file("crafted.safetensors"), "t", data_at(header, 0)});
  }
}

TEST_CASE("END - BEGIN must equal the tensor's byte size", "[formats][safetensors][rules]") {
  ScratchDir dir;
  const std::string header = "{" + entry("a", "U8", "[2]", 0, 2) + "," + entry("b", "F32", "[2]", 2, 6) + "}";
  check_error(open_crafted(dir, header, zeros(6)), {Errc::kCorrupt, "span 4 bytes but F32 [2] needs 8",
                                                    dir.file("crafted.safetensors"), "b", data_at(header, 2)});
}

TEST_CASE("the data ends exactly at the end of the file", "[formats][safetensors][rules]") {
  ScratchDir dir;
  const std::string path = dir.file("crafted.safetensors");
  const std::string header = "{" + entry("a", "U8", "[3]", 0, 3) + "," + entry("b", "U8", "[5]", 3, 8) + "}";
  SECTION("trailing bytes (polyglot files)") {
    check_error(open_crafted(dir, header, zeros(10)),
                {Errc::kCorrupt, "2 trailing bytes after the tensor data", path, "", data_at(header, 8)});
  }
  SECTION("a file 2 bytes short") {
    check_error(open_crafted(dir, header, zeros(6)),
                {Errc::kTruncated, "file is 2 bytes short", path, "b", data_at(header, 6)});
  }
  SECTION("no tensors, but data") {
    check_error(open_crafted(dir, "{}", zeros(1)), {Errc::kCorrupt, "1 trailing bytes", path, "", data_at("{}", 0)});
  }
}

TEST_CASE("__metadata__ must be an object of string to string", "[formats][safetensors][rules]") {
  ScratchDir dir;
  const std::string path = dir.file("crafted.safetensors");
  for (const std::string& value : std::initializer_list<std::string>{"5", "[]", "\"x\"", "true"})
    check_error(open_crafted(dir, "{\"__metadata__\":" + value + "}"),
                {Errc::kCorrupt, "__metadata__ must be an object of string values", path, "", std::nullopt});
  for (const std::string& value : std::initializer_list<std::string>{"1", "null", "true", "[\"x\"]", "{\"b\":\"c\"}"})
    check_error(open_crafted(dir, "{\"__metadata__\":{\"a\":" + value + "}}"),
                {Errc::kCorrupt, "__metadata__ value of key 'a' must be a string", path, "", std::nullopt});
  // 10^4 levels of nesting stop at the first level (security.md test 36): no recursion.
  const std::string deep = "{\"__metadata__\":{\"a\":" + std::string(10000, '[') + std::string(10000, ']') + "}}";
  check_error(open_crafted(dir, deep), {Errc::kCorrupt, "must be a string (found an array)", path, "", 8 + 22});
}

TEST_CASE("duplicate keys are rejected, wherever they are", "[formats][safetensors][rules]") {
  ScratchDir dir;
  const std::string path = dir.file("crafted.safetensors");
  SECTION("a tensor name twice: the second entry is named") {
    const std::string header = "{" + entry("w", "U8", "[2]", 0, 2) + "," + entry("x", "U8", "[1]", 2, 3) + "," +
                               entry("w", "U8", "[1]", 3, 4) + "}";
    const auto second = header.rfind("\"w\"");
    check_error(open_crafted(dir, header, zeros(4)),
                {Errc::kCorrupt, "duplicate tensor name", path, "w", 8 + second + 3});
  }
  SECTION("__metadata__ twice") {
    check_error(open_crafted(dir, R"({"__metadata__":{},"__metadata__":{}})"),
                {Errc::kCorrupt, "__metadata__ appears twice", path, "", std::nullopt});
  }
  SECTION("a metadata key twice") {
    check_error(open_crafted(dir, R"({"__metadata__":{"k":"1","k":"2"}})"),
                {Errc::kCorrupt, "__metadata__ key 'k' appears twice", path, "", std::nullopt});
  }
}

TEST_CASE("the number of entries is bounded before they are stored", "[formats][safetensors][rules]") {
  std::string header = "{";
  for (int i = 0; i < 4; ++i) header += (i ? "," : "") + entry("t" + std::to_string(i), "U8", "[1]", i, i + 1);
  header += "}";
  const auto bytes = safetensors_bytes(header, zeros(4));
  REQUIRE(formats::parse_safetensors_bytes(bytes, "mem").has_value());
  const auto result = formats::parse_safetensors_bytes(bytes, "mem", {.max_tensors = 3});
  check_error(result, {Errc::kUnsupported, "more than 3 tensor entries", "mem", "t3", std::nullopt});
}

TEST_CASE("100k entries aliasing the same bytes are rejected in linear-ish time", "[formats][safetensors][rules]") {
  // attacks/safetensors_abuse_attempt_2.py: many entries pointing at one small buffer.
  std::string header = "{";
  for (int i = 0; i < 100'000; ++i) header += (i ? "," : "") + entry("t" + std::to_string(i), "F32", "[1]", 0, 4);
  header += "}";
  ScratchDir dir;
  const auto result = open_crafted(dir, header, zeros(4));
  check_error(result,
              {Errc::kCorrupt, "overlaps tensor", dir.file("crafted.safetensors"), std::nullopt, data_at(header, 0)});
}
