// The dtype table: the safetensors names, bit widths and block sizes, parsing, and the byte
// size of a number of elements (including the sub-byte F4 / F6 types).
#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "qload/runtime/dtype.hpp"
#include "qload/runtime/shape.hpp"

namespace {

using qload::DType;
using qload::DTypeKind;

struct Expected {
  std::string_view name;
  DType dtype;
  unsigned bits;
  DTypeKind kind;
};

// Known answers, written out by hand from the safetensors specification (not from the table).
constexpr Expected kExpected[] = {
    {"BOOL", DType::kBool, 8, DTypeKind::kBool},
    {"U8", DType::kU8, 8, DTypeKind::kUnsigned},
    {"I8", DType::kI8, 8, DTypeKind::kSigned},
    {"I16", DType::kI16, 16, DTypeKind::kSigned},
    {"U16", DType::kU16, 16, DTypeKind::kUnsigned},
    {"I32", DType::kI32, 32, DTypeKind::kSigned},
    {"U32", DType::kU32, 32, DTypeKind::kUnsigned},
    {"I64", DType::kI64, 64, DTypeKind::kSigned},
    {"U64", DType::kU64, 64, DTypeKind::kUnsigned},
    {"F16", DType::kF16, 16, DTypeKind::kFloat},
    {"BF16", DType::kBF16, 16, DTypeKind::kFloat},
    {"F32", DType::kF32, 32, DTypeKind::kFloat},
    {"F64", DType::kF64, 64, DTypeKind::kFloat},
    {"C64", DType::kC64, 64, DTypeKind::kComplex},
    {"F8_E4M3", DType::kF8_E4M3, 8, DTypeKind::kFloat},
    {"F8_E5M2", DType::kF8_E5M2, 8, DTypeKind::kFloat},
    {"F8_E8M0", DType::kF8_E8M0, 8, DTypeKind::kFloat},
    {"F8_E4M3FNUZ", DType::kF8_E4M3FNUZ, 8, DTypeKind::kFloat},
    {"F8_E5M2FNUZ", DType::kF8_E5M2FNUZ, 8, DTypeKind::kFloat},
    {"F4", DType::kF4, 4, DTypeKind::kFloat},
    {"F6_E2M3", DType::kF6_E2M3, 6, DTypeKind::kFloat},
    {"F6_E3M2", DType::kF6_E3M2, 6, DTypeKind::kFloat},
};

}  // namespace

TEST_CASE("dtype table covers exactly the 22 safetensors dtypes", "[dtype]") {
  const auto table = qload::all_dtypes();
  REQUIRE(table.size() == 22);
  std::set<std::string_view> table_names;
  for (const auto& info : table) table_names.insert(info.name);
  std::set<std::string_view> expected_names;
  for (const auto& e : kExpected) expected_names.insert(e.name);
  CHECK(table_names.size() == 22);  // no duplicates
  CHECK(table_names == expected_names);
}

TEST_CASE("dtype table is in enum order", "[dtype]") {
  const auto table = qload::all_dtypes();
  for (std::size_t i = 0; i < table.size(); ++i) {
    CAPTURE(i);
    CHECK(static_cast<std::size_t>(table[i].dtype) == i);
    CHECK(&qload::dtype_info(table[i].dtype) == &table[i]);
  }
}

TEST_CASE("every dtype has the right name, bit width and kind", "[dtype]") {
  for (const auto& e : kExpected) {
    CAPTURE(e.name);
    const auto& info = qload::dtype_info(e.dtype);
    CHECK(info.dtype == e.dtype);
    CHECK(info.name == e.name);
    CHECK(qload::dtype_name(e.dtype) == e.name);
    CHECK(info.bits == e.bits);
    CHECK(info.kind == e.kind);
  }
}

TEST_CASE("dtype blocks: whole-byte types are one element, sub-byte types group to bytes", "[dtype]") {
  struct Block {
    DType dtype;
    std::uint32_t elems;
    std::uint32_t bytes;
  };
  const Block blocks[] = {
      {DType::kBool, 1, 1},    {DType::kU8, 1, 1},  {DType::kI16, 1, 2},     {DType::kBF16, 1, 2},
      {DType::kF32, 1, 4},     {DType::kF64, 1, 8}, {DType::kC64, 1, 8},     {DType::kU64, 1, 8},
      {DType::kF8_E8M0, 1, 1}, {DType::kF4, 2, 1},  {DType::kF6_E2M3, 4, 3}, {DType::kF6_E3M2, 4, 3},
  };
  for (const auto& b : blocks) {
    CAPTURE(qload::dtype_name(b.dtype));
    CHECK(qload::dtype_info(b.dtype).block_elems == b.elems);
    CHECK(qload::dtype_info(b.dtype).block_bytes == b.bytes);
  }
}

TEST_CASE("parse_dtype round-trips every safetensors name", "[dtype]") {
  for (const auto& e : kExpected) {
    CAPTURE(e.name);
    const auto parsed = qload::parse_dtype(e.name);
    REQUIRE(parsed.has_value());
    CHECK(*parsed == e.dtype);
    CHECK(qload::dtype_name(*parsed) == e.name);
  }
}

TEST_CASE("parse_dtype rejects lowercase, empty, padded and unknown names", "[dtype]") {
  CHECK_FALSE(qload::parse_dtype("bf16").has_value());
  CHECK_FALSE(qload::parse_dtype("f32").has_value());
  CHECK_FALSE(qload::parse_dtype("Bf16").has_value());
  CHECK_FALSE(qload::parse_dtype("f8_e4m3").has_value());
  CHECK_FALSE(qload::parse_dtype("").has_value());
  CHECK_FALSE(qload::parse_dtype(" F32").has_value());
  CHECK_FALSE(qload::parse_dtype("F32 ").has_value());
  CHECK_FALSE(qload::parse_dtype("F").has_value());
  CHECK_FALSE(qload::parse_dtype("F8").has_value());
  CHECK_FALSE(qload::parse_dtype("F6").has_value());
  CHECK_FALSE(qload::parse_dtype("C128").has_value());
  CHECK_FALSE(qload::parse_dtype("Q4_0").has_value());
  CHECK_FALSE(qload::parse_dtype("float32").has_value());
  CHECK_FALSE(qload::parse_dtype(std::string_view("F32\0", 4)).has_value());
}

TEST_CASE("bytes_for_elements of whole-byte types is elements times size", "[dtype]") {
  CHECK(qload::bytes_for_elements(DType::kF32, 0).value() == 0);
  CHECK(qload::bytes_for_elements(DType::kF32, 10).value() == 40);
  CHECK(qload::bytes_for_elements(DType::kBF16, 3).value() == 6);
  CHECK(qload::bytes_for_elements(DType::kBool, 5).value() == 5);
  CHECK(qload::bytes_for_elements(DType::kF8_E4M3, 7).value() == 7);
  CHECK(qload::bytes_for_elements(DType::kI64, 3).value() == 24);
  CHECK(qload::bytes_for_elements(DType::kC64, 1).value() == 8);
  CHECK(qload::bytes_for_elements(DType::kC64, 5).value() == 40);
}

TEST_CASE("bytes_for_elements of F4 packs two per byte and rejects odd counts", "[dtype]") {
  CHECK(qload::bytes_for_elements(DType::kF4, 4).value() == 2);
  CHECK(qload::bytes_for_elements(DType::kF4, 2).value() == 1);
  CHECK(qload::bytes_for_elements(DType::kF4, 0).value() == 0);
  const auto odd = qload::bytes_for_elements(DType::kF4, 3);
  REQUIRE_FALSE(odd.has_value());
  CHECK(odd.error().code() == qload::Errc::kCorrupt);
  CHECK_FALSE(qload::bytes_for_elements(DType::kF4, 1).has_value());
}

TEST_CASE("bytes_for_elements of F6 packs four per three bytes and rejects partial groups", "[dtype]") {
  for (DType d : {DType::kF6_E2M3, DType::kF6_E3M2}) {
    CAPTURE(qload::dtype_name(d));
    CHECK(qload::bytes_for_elements(d, 4).value() == 3);
    CHECK(qload::bytes_for_elements(d, 8).value() == 6);
    const auto six = qload::bytes_for_elements(d, 6);
    REQUIRE_FALSE(six.has_value());
    CHECK(six.error().code() == qload::Errc::kCorrupt);
    CHECK_FALSE(qload::bytes_for_elements(d, 1).has_value());
    CHECK_FALSE(qload::bytes_for_elements(d, 2).has_value());
    CHECK_FALSE(qload::bytes_for_elements(d, 3).has_value());
  }
}

TEST_CASE("bytes_for_elements reports overflow rather than wrapping", "[dtype]") {
  const std::uint64_t big = std::uint64_t{1} << 62;
  CHECK(qload::bytes_for_elements(DType::kU16, big).value() == std::uint64_t{1} << 63);
  const auto r = qload::bytes_for_elements(DType::kF32, big);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == qload::Errc::kOverflow);
  // F4 never overflows: the byte count is half the element count.
  CHECK(qload::bytes_for_elements(DType::kF4, UINT64_MAX - 1).value() == UINT64_MAX / 2);
}
