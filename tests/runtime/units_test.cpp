#include <catch2/catch.hpp>

#include "qload/runtime/units.hpp"

using namespace qload;

TEST_CASE("byte sizes parse with binary and decimal units", "[units]") {
  CHECK(parse_byte_size("4096").value() == 4096);
  CHECK(parse_byte_size("0").value() == 0);
  CHECK(parse_byte_size("12B").value() == 12);
  CHECK(parse_byte_size("8MiB").value() == 8ull << 20);
  CHECK(parse_byte_size("8 MiB").value() == 8ull << 20);
  CHECK(parse_byte_size("1GiB").value() == 1ull << 30);
  CHECK(parse_byte_size("2TiB").value() == 2ull << 40);
  CHECK(parse_byte_size("512KB").value() == 512000);
  CHECK(parse_byte_size("1.5GiB").value() == 3ull << 29);
  CHECK(parse_byte_size("0.5KiB").value() == 512);
}

TEST_CASE("malformed or overflowing byte sizes are errors", "[units]") {
  for (const char* bad : {"", "MiB", "8mib", "8 M", "-1", "1.2.3MiB", "0.3B", "0.0001KiB", "8MiBs", " 8MiB"}) {
    INFO(bad);
    auto r = parse_byte_size(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }
  auto big = parse_byte_size("20000000TiB");
  REQUIRE_FALSE(big);
  CHECK(big.error().code() == Errc::kOverflow);
}

TEST_CASE("byte counts format for people", "[units]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(8ull << 20) == "8.00 MiB");
  CHECK(format_bytes(3ull << 29) == "1.50 GiB");
}
