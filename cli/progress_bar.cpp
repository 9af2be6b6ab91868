#include "progress_bar.hpp"

#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "qload/runtime/units.hpp"

namespace qload::cli {

void ProgressBar::update(std::uint64_t done, std::uint64_t total) {
  if (!enabled_ || total == 0) return;
  const auto now = Clock::now();
  if (done < total && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * static_cast<double>(done) / static_cast<double>(total));
  const std::string bar = std::string(static_cast<std::size_t>(filled), '#') + std::string(kWidth - filled, ' ');
  std::fprintf(stderr, "\r[%s] %s / %s  %.2f GB/s  ETA %.1f s ", bar.c_str(), format_bytes(done).c_str(),
               format_bytes(total).c_str(), rate / 1e9, eta);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fputs("\r\x1b[2K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace qload::cli
