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
  for (const char* bad : {"", "MiB", "8mib", "8 X", "-1", "1.2.3MiB", "0.3B", "0.0001KiB", "8MiBs", " 8MiB"}) {
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

TEST_CASE("byte sizes: the K/M/G shorthand is binary, and sizes print back exactly", "[units]") {
  CHECK(parse_byte_size("4096K").value() == 4ull << 20);
  CHECK(parse_byte_size("1G").value() == 1ull << 30);
  for (const std::uint64_t n : {0ull, 1ull, 4097ull, 256ull << 20, 512'000'000ull, 3ull << 29, 1ull << 40}) {
    INFO(n);
    CHECK(parse_byte_size(format_byte_size(n)).value() == n);
  }
  CHECK(format_byte_size(256ull << 20) == "256MiB");
  CHECK(format_byte_size(512'000'000) == "512MB");
  CHECK(format_byte_size(4097) == "4097");
}

TEST_CASE("durations and booleans parse, and malformed ones are errors", "[units]") {
  using namespace std::chrono_literals;
  CHECK(parse_duration("30s").value() == 30s);
  CHECK(parse_duration("500ms").value() == 500ms);
  CHECK(parse_duration("1.5h").value() == 90min);
  CHECK(parse_duration("2 m").value() == 2min);
  CHECK(parse_duration("300").value() == 300s);
  CHECK(parse_duration("0.001").value() == 1ms);
  for (const char* bad : {"", "abc", "s", "10x", "-5s", "1e3s", "5 s s"}) {
    INFO(bad);
    CHECK(parse_duration(bad).error().code() == Errc::kInvalidArgument);
  }
  CHECK(format_duration(90min) == "90m");
  CHECK(format_duration(1500ms) == "1500ms");
  CHECK(parse_bool("Yes").value());
  CHECK_FALSE(parse_bool("off").value());
  CHECK_FALSE(parse_bool("2"));
}
