// The one timing rule the benchmarks share: the best wall time of `repeat` runs (the least
// disturbed run on a shared machine; scatter is reported separately where it matters).
#pragma once

#include <algorithm>
#include <chrono>

namespace qload::bench {

template <typename F>
double best_seconds(int repeat, F&& run) {
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace qload::bench
