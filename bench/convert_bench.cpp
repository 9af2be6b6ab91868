// qload_convert_bench: single-thread throughput of the CPU float conversions (convert.hpp).
//
// For each pair, GB/s of *output* bytes (10^9 bytes/s), next to a memcpy of the same number of
// bytes in the same run: the conversion is a copy that also computes, so memcpy is its
// ceiling, and the ratio says how much of it the arithmetic costs. The buffers are much
// larger than the caches by default (--elements), so both sides are memory-bound the way a
// load's conversion of a staged chunk is. Every measurement is the best of --repeat runs
// (single runs on a shared machine scatter). --quick is a smoke run for ctest.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "best_seconds.hpp"
#include "qload/formats/convert.hpp"
#include "qload/runtime/dtype.hpp"

namespace {

using qload::bench::best_seconds;

}  // namespace

int main(int argc, char** argv) {
  using qload::DType;
  CLI::App app{"qload_convert_bench: CPU float conversion throughput against memcpy"};
  std::uint64_t elements = std::uint64_t{64} << 20;
  int repeat = 7;
  bool quick = false;
  app.add_option("--elements", elements, "elements per conversion (default 64 Mi)")->check(CLI::PositiveNumber);
  app.add_option("--repeat", repeat, "runs per measurement; the best counts")->check(CLI::PositiveNumber);
  app.add_flag("--quick", quick, "a smoke run: 1 Mi elements, 2 runs");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    elements = std::uint64_t{1} << 20;
    repeat = 2;
  }

  // Random f32 bit patterns: every class (NaN, Inf, subnormal) shows up, and the loops are
  // branch-free, so the data does not change the speed; 16-bit inputs reuse the same bytes.
  std::vector<std::byte> in(elements * 4);
  std::vector<std::byte> out(elements * 4);
  std::mt19937 rng(1);
  for (std::size_t i = 0; i < in.size(); i += 4) {
    const auto x = static_cast<std::uint32_t>(rng());
    std::memcpy(in.data() + i, &x, 4);
  }
  std::memset(out.data(), 0, out.size());  // fault the pages in before timing

  struct Pair {
    DType from, to;
  };
  const Pair pairs[] = {{DType::kF32, DType::kBF16}, {DType::kF32, DType::kF16},  {DType::kBF16, DType::kF32},
                        {DType::kF16, DType::kF32},  {DType::kF16, DType::kBF16}, {DType::kBF16, DType::kF16}};
  fmt::print("{} elements, best of {} runs, one thread; GB/s of output bytes\n", elements, repeat);
  fmt::print("{:<12} {:>10} {:>10} {:>8}\n", "pair", "convert", "memcpy", "ratio");
  for (const Pair& p : pairs) {
    const std::span<const std::byte> src(in.data(), elements * qload::dtype_info(p.from).block_bytes);
    const std::span<std::byte> dst(out.data(), elements * qload::dtype_info(p.to).block_bytes);
    bool ok = true;
    const double convert_s =
        best_seconds(repeat, [&] { ok = ok && qload::formats::convert(src, p.from, dst, p.to).has_value(); });
    if (!ok) {
      fmt::print(stderr, "convert {} -> {} failed\n", qload::dtype_name(p.from), qload::dtype_name(p.to));
      return 1;
    }
    const double memcpy_s = best_seconds(repeat, [&] { std::memcpy(dst.data(), src.data(), dst.size()); });
    const double convert_gbs = static_cast<double>(dst.size()) / convert_s / 1e9;
    const double memcpy_gbs = static_cast<double>(dst.size()) / memcpy_s / 1e9;
    fmt::print("{:<12} {:>10.2f} {:>10.2f} {:>8.2f}\n",
               fmt::format("{}->{}", qload::dtype_name(p.from), qload::dtype_name(p.to)), convert_gbs, memcpy_gbs,
               convert_gbs / memcpy_gbs);
  }
  return 0;
}
