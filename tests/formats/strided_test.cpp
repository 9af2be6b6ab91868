// Strided views (formats/strided.hpp): the bytes a view spans and its elements gathered
// row-major, against element-by-element index arithmetic written out here.
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>

#include "qload/formats/strided.hpp"

using namespace qload;
using namespace qload::formats;

namespace {

// Storage of `n` I32 elements 0, 1, 2, ...
std::vector<std::byte> counting(std::size_t n) {
  std::vector<std::int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  std::vector<std::byte> out(n * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<std::int32_t> gather(const TensorEntry& t, std::span<const std::byte> storage) {
  std::vector<std::byte> dense(contiguous_entry(t).nbytes);
  REQUIRE(gather_strided(t, storage.subspan(t.offset), dense));
  std::vector<std::int32_t> out(dense.size() / 4);
  if (!dense.empty()) std::memcpy(out.data(), dense.data(), dense.size());  // empty vectors may hold null
  return out;
}

TensorEntry view(Shape shape, std::vector<std::uint64_t> strides, std::uint64_t first = 0) {
  TensorEntry t{.name = "v", .offset = first * 4, .dtype = DType::kI32, .shape = shape, .strides = std::move(strides)};
  t.nbytes = strided_span_bytes(t.shape, t.strides, t.dtype).value();
  return t;
}

}  // namespace

TEST_CASE("strided: spans and row-major strides", "[formats][strided]") {
  CHECK(strided_span_bytes(Shape{3, 4}, std::vector<std::uint64_t>{1, 3}, DType::kF32).value() == 48);
  CHECK(strided_span_bytes(Shape{2, 3}, std::vector<std::uint64_t>{10, 2}, DType::kBF16).value() == (10 + 4 + 1) * 2);
  CHECK(strided_span_bytes(Shape{4, 8}, std::vector<std::uint64_t>{0, 1}, DType::kF32).value() == 32);  // expanded
  CHECK(strided_span_bytes(Shape{0, 8}, std::vector<std::uint64_t>{1, 9}, DType::kF32).value() == 0);
  CHECK(strided_span_bytes(Shape{}, std::vector<std::uint64_t>{}, DType::kF64).value() == 8);
  CHECK(strided_span_bytes(Shape{1 << 20, 1 << 20}, std::vector<std::uint64_t>{std::uint64_t{1} << 44, 1}, DType::kF32)
            .error()
            .code() == Errc::kOverflow);
  CHECK(strided_span_bytes(Shape{2, 2}, std::vector<std::uint64_t>{1}, DType::kF32).error().code() ==
        Errc::kInvalidArgument);
  CHECK(is_row_major(Shape{3, 4}, std::vector<std::uint64_t>{4, 1}));
  CHECK(is_row_major(Shape{1, 4}, std::vector<std::uint64_t>{99, 1}));  // a dim of 1 takes any stride
  CHECK(is_row_major(Shape{3, 0}, std::vector<std::uint64_t>{7, 7}));
  CHECK_FALSE(is_row_major(Shape{3, 4}, std::vector<std::uint64_t>{1, 3}));
  CHECK_FALSE(is_row_major(Shape{3, 4}, std::vector<std::uint64_t>{8, 1}));  // rows of a wider tensor
}

TEST_CASE("strided: a view gathered row-major equals indexing its storage", "[formats][strided]") {
  const std::vector<std::byte> storage = counting(200);
  SECTION("transposed [4, 3] of a [3, 4]") {
    CHECK(gather(view(Shape{4, 3}, {1, 4}), storage) ==
          std::vector<std::int32_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  }
  SECTION("every other column of rows 1.. of a [5, 10], from element 10") {
    CHECK(gather(view(Shape{2, 3}, {10, 2}, 10), storage) == std::vector<std::int32_t>{10, 12, 14, 20, 22, 24});
  }
  SECTION("expanded: one row repeated") {
    CHECK(gather(view(Shape{3, 2}, {0, 1}, 5), storage) == std::vector<std::int32_t>{5, 6, 5, 6, 5, 6});
  }
  SECTION("a permuted 3-D [2, 3, 4] of a [4, 2, 3]: element (a, b, c) at c*6 + a*3 + b") {
    std::vector<std::int32_t> want;
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 3; ++b)
        for (int c = 0; c < 4; ++c) want.push_back(c * 6 + a * 3 + b);
    CHECK(gather(view(Shape{2, 3, 4}, {3, 1, 6}), storage) == want);
  }
  SECTION("a scalar, and nothing") {
    CHECK(gather(view(Shape{}, {}, 7), storage) == std::vector<std::int32_t>{7});
    CHECK(gather(view(Shape{0, 3}, {1, 5}), storage).empty());
  }
  SECTION("a span too short is an error, not a read past it") {
    const TensorEntry t = view(Shape{4, 3}, {1, 4});
    std::vector<std::byte> dense(48);
    CHECK(gather_strided(t, std::span(storage).first(40), dense).error().code() == Errc::kInvalidArgument);
  }
}

TEST_CASE("strided: a view expands when gathered only within its bound", "[formats][strided]") {
  const auto floats = [](std::uint64_t n) { return n * 4; };
  // Non-overlapping views never exceed their span; overlapping ones up to the floor or 16x.
  CHECK(check_view_expansion(Shape{4, 3}, DType::kF32, floats(12)));
  CHECK(check_view_expansion(Shape{512, 512}, DType::kF32, 4));               // 1 MiB from one float: the floor
  CHECK(check_view_expansion(Shape{16, 65536}, DType::kF32, floats(65536)));  // 16x a row
  const auto past = check_view_expansion(Shape{17, 65536}, DType::kF32, floats(65536));
  REQUIRE_FALSE(past);
  CHECK(past.error().code() == Errc::kUnsupported);
  CHECK_THAT(past.error().message(), Catch::Contains("elements overlap"));
  // One float as [32768, 16384] (2 GB), and a shape whose bytes do not fit in 64 bits.
  CHECK(check_view_expansion(Shape{32768, 16384}, DType::kF32, 4).error().code() == Errc::kUnsupported);
  CHECK(check_view_expansion(Shape{std::uint64_t{1} << 62, 4}, DType::kF32, 4).error().code() == Errc::kOverflow);
}

TEST_CASE("strided: a dim of one element steps nowhere, whatever its stride", "[formats][strided]") {
  // Its stride times the element size wraps 2^64: it is never multiplied.
  const std::vector<std::byte> storage = counting(8);
  CHECK(gather(view(Shape{1, 2, 3}, {std::uint64_t{1} << 62, 1, 2}, 1), storage) ==
        std::vector<std::int32_t>{1, 3, 5, 2, 4, 6});
}
