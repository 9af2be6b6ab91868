// Shapes: element and byte counts with overflow checks, strides, checked arithmetic, printing.
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "qload/runtime/shape.hpp"

namespace {

using qload::DType;
using qload::Errc;
using qload::Shape;

constexpr std::uint64_t kMax = UINT64_MAX;
constexpr std::uint64_t k2p32 = std::uint64_t{1} << 32;
constexpr std::uint64_t k2p62 = std::uint64_t{1} << 62;

}  // namespace

TEST_CASE("numel of a scalar is 1", "[shape]") {
  const Shape scalar;
  CHECK(scalar.rank() == 0);
  CHECK(scalar.numel().value() == 1);
  CHECK(scalar.nbytes(DType::kF32).value() == 4);
  CHECK(Shape(std::vector<std::uint64_t>{}).numel().value() == 1);
}

TEST_CASE("numel is the product of the dimensions", "[shape]") {
  CHECK(Shape{7}.numel().value() == 7);
  CHECK(Shape{2, 3, 4}.numel().value() == 24);
  CHECK(Shape{1, 1, 1, 1}.numel().value() == 1);
  CHECK(Shape{4096, 11008}.numel().value() == 45088768);
}

TEST_CASE("numel of a shape with a zero dimension is 0", "[shape]") {
  CHECK(Shape{0}.numel().value() == 0);
  CHECK(Shape{3, 0, 5}.numel().value() == 0);
  CHECK(Shape{0, 5}.nbytes(DType::kF32).value() == 0);
}

TEST_CASE("nbytes of a 4096x11008 BF16 weight is 90177536", "[shape]") {
  CHECK(Shape{4096, 11008}.nbytes(DType::kBF16).value() == 90177536);
  CHECK(Shape{4096, 11008}.nbytes(DType::kF32).value() == 180355072);
  CHECK(Shape{4096, 11008}.nbytes(DType::kF4).value() == 22544384);
}

TEST_CASE("numel overflow is reported as kOverflow", "[shape]") {
  const auto r = Shape{k2p32, k2p32}.numel();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::kOverflow);
  // The largest product that fits is fine.
  CHECK(Shape{k2p32 - 1, k2p32 + 1}.numel().value() == kMax);
  CHECK(Shape{kMax}.numel().value() == kMax);
  CHECK_FALSE(Shape{kMax, 2}.numel().has_value());
  // nbytes passes the numel overflow on.
  const auto b = Shape{k2p32, k2p32}.nbytes(DType::kU8);
  REQUIRE_FALSE(b.has_value());
  CHECK(b.error().code() == Errc::kOverflow);
}

TEST_CASE("nbytes overflow when the elements fit but the bytes do not", "[shape]") {
  const Shape shape{k2p62, 2};
  REQUIRE(shape.numel().value() == std::uint64_t{1} << 63);
  const auto r = shape.nbytes(DType::kF32);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::kOverflow);
  // One byte per element still fits.
  CHECK(shape.nbytes(DType::kU8).value() == std::uint64_t{1} << 63);
}

TEST_CASE("numel with a huge dimension and a zero dimension is 0 in either order", "[shape]") {
  CHECK(Shape{kMax, 0}.numel().value() == 0);
  CHECK(Shape{0, kMax}.numel().value() == 0);
  CHECK(Shape{kMax, 0}.nbytes(DType::kF64).value() == 0);
  CHECK(Shape{0, kMax}.nbytes(DType::kF64).value() == 0);
}

TEST_CASE("numel is 0 when a zero dimension follows dimensions whose product overflows", "[shape]") {
  // The header promises "0 if any dimension is 0": the mathematically right product is 0, so
  // a zero later in the shape must win over an intermediate overflow.
  const auto r = Shape{k2p32, k2p32, 0}.numel();
  CAPTURE(r.has_value() ? std::string("value") : r.error().to_string());
  REQUIRE(r.has_value());
  CHECK(*r == 0);
  CHECK(Shape{kMax, kMax, 0}.nbytes(DType::kF32).value() == 0);
}

TEST_CASE("nbytes rejects sub-byte element counts that are not whole blocks", "[shape]") {
  const auto r = Shape{3}.nbytes(DType::kF4);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::kCorrupt);
  // The message names the shape and dtype.
  CHECK(r.error().message().find("[3]") != std::string::npos);
  CHECK(r.error().message().find("F4") != std::string::npos);
  CHECK(Shape{2, 3}.nbytes(DType::kF4).value() == 3);
  CHECK(Shape{2, 6}.nbytes(DType::kF6_E3M2).value() == 9);
  CHECK(Shape{3, 2}.nbytes(DType::kF6_E2M3).has_value() == false);
}

TEST_CASE("contiguous_strides are row-major in elements", "[shape]") {
  CHECK(Shape{2, 3, 4}.contiguous_strides() == std::vector<std::int64_t>{12, 4, 1});
  CHECK(Shape{4096, 11008}.contiguous_strides() == std::vector<std::int64_t>{11008, 1});
  CHECK(Shape{5}.contiguous_strides() == std::vector<std::int64_t>{1});
  CHECK(Shape{}.contiguous_strides().empty());
}

TEST_CASE("checked_add edge cases", "[shape]") {
  CHECK(qload::checked_add(0, 0).value() == 0);
  CHECK(qload::checked_add(kMax, 0).value() == kMax);
  CHECK(qload::checked_add(kMax - 1, 1).value() == kMax);
  CHECK(qload::checked_add(std::uint64_t{1} << 63, (std::uint64_t{1} << 63) - 1).value() == kMax);
  const auto r = qload::checked_add(kMax, 1);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::kOverflow);
  CHECK_FALSE(qload::checked_add(std::uint64_t{1} << 63, std::uint64_t{1} << 63).has_value());
}

TEST_CASE("checked_mul edge cases", "[shape]") {
  CHECK(qload::checked_mul(0, kMax).value() == 0);
  CHECK(qload::checked_mul(kMax, 0).value() == 0);
  CHECK(qload::checked_mul(kMax, 1).value() == kMax);
  CHECK(qload::checked_mul(k2p32 - 1, k2p32 + 1).value() == kMax);
  CHECK(qload::checked_mul(k2p32, k2p32 - 1).value() == kMax - (k2p32 - 1));
  const auto r = qload::checked_mul(k2p32, k2p32);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::kOverflow);
  CHECK_FALSE(qload::checked_mul(kMax, 2).has_value());
  CHECK_FALSE(qload::checked_mul(std::uint64_t{1} << 63, 2).has_value());
}

TEST_CASE("Shape to_string prints bracketed comma-separated dimensions", "[shape]") {
  CHECK(Shape{2, 3}.to_string() == "[2, 3]");
  CHECK(Shape{4096, 11008}.to_string() == "[4096, 11008]");
  CHECK(Shape{7}.to_string() == "[7]");
  CHECK(Shape{}.to_string() == "[]");
  CHECK(Shape{kMax}.to_string() == "[18446744073709551615]");
}

TEST_CASE("Shape equality, indexing and dims", "[shape]") {
  const Shape a{2, 3};
  CHECK(a == Shape{2, 3});
  CHECK_FALSE(a == Shape{3, 2});
  CHECK_FALSE(a == Shape{2, 3, 1});
  CHECK(a == Shape(std::vector<std::uint64_t>{2, 3}));
  CHECK(a[0] == 2);
  CHECK(a[1] == 3);
  CHECK_THROWS_AS(a[2], std::out_of_range);
  REQUIRE(a.dims().size() == 2);
  CHECK(a.dims()[1] == 3);
}
