// qload_io_bench's shared pieces (io_bench.cpp measures; io_bench_file.cpp makes and cools the
// file): its options, what a run measures, and the scratch file it reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qload/io/reader.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace qload::bench {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
constexpr std::size_t kBaselineChunk = 8 * kMiB;  // the read() loop's fixed request size
constexpr std::size_t kWriteBlock = 64 * kMiB;    // scratch file generation block
constexpr std::size_t kAlign = 4096;              // O_DIRECT alignment every file system takes
constexpr double kGoal = 0.95;                    // io_uring must reach this ratio of read()

enum class Mode { kBuffered, kDirect };
enum class Cache { kCold, kWarm };
enum class DropMethod { kDropCaches, kFadvise };

inline std::string_view name(Mode m) {
  return m == Mode::kBuffered ? "buffered" : "direct";
}
inline std::string_view name(Cache c) {
  return c == Cache::kCold ? "cold" : "warm";
}
inline std::string_view name(DropMethod d) {
  return d == DropMethod::kDropCaches ? "drop_caches" : "fadvise";
}

struct Options {
  std::string file;  // reuse (or create and, with --keep, leave) this file
  std::string dir;   // where a scratch file goes when --file is not given
  std::uint64_t size = 2 * kGiB;
  std::uint64_t chunk = 8 * kMiB;
  std::vector<std::uint32_t> depths{1, 2, 4, 8, 16, 32, 64};
  std::vector<std::string> modes{"buffered", "direct"};
  std::vector<std::string> caches{"cold", "warm"};
  std::vector<std::string> engines{"uring", "pread"};
  std::string drop = "auto";
  unsigned baseline_runs = 2;
  unsigned repeat = 2;
  double settle = 0;  // seconds to wait after each drop before a cold run
  bool verify = false;
  bool no_register = false;  // skip register_buffers: measures what fixed buffers are worth
  bool keep = false;
  bool quick = false;
  std::string json;
};

// One timed sequential read of the whole file.
struct Measurement {
  std::uint64_t bytes = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // user + system of the whole process (engine threads included)
  io::ReaderStats stats;   // engine runs only
  double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};

struct Row {
  Mode mode = Mode::kBuffered;
  Cache cache = Cache::kCold;
  std::string engine;       // "read()", "io_uring" or "pread"
  std::uint32_t depth = 0;  // 0 for the read() baseline
  Measurement m;            // the best of the runs
  bool verified = false;
  std::vector<double> samples;  // GB/s of every run, in order
};

// Everything the runs share: the file, how to make it cold, the digest to check against.
struct Context {
  Options opts;
  std::string path;
  std::uint64_t size = 0;
  UniqueFd fd;  // buffered descriptor kept open for fadvise and residency checks
  DropMethod drop = DropMethod::kFadvise;
  std::optional<std::uint64_t> reference;  // XXH3-64 of the whole file
  Logger log;
};

// Removes the file on destruction when this run created it and --keep was not given.
class ScratchFile {
 public:
  ScratchFile(std::string path, bool remove) : path_(std::move(path)), remove_(remove) {}
  ScratchFile(ScratchFile&& o) noexcept : path_(std::move(o.path_)), remove_(std::exchange(o.remove_, false)) {}
  ScratchFile& operator=(ScratchFile&&) = delete;
  ~ScratchFile() {
    if (remove_) ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool remove_;
};

// The file to read: --file as given (created at --size when missing), or a scratch file of
// random bytes under --dir; its digest kept when this run wrote it.
Result<ScratchFile> prepare_file(Context& ctx);
// Opens ctx.fd (buffered) on `path` and takes its size.
Status open_file(Context& ctx, const std::string& path);
// Empties the page cache of the file (drop_caches as root, else fadvise), then checks it.
Status drop_cache(const Context& ctx);
Status make_cold(const Context& ctx);
// drop_caches when --drop auto and this process may write it, else fadvise.
Status choose_drop_method(Context& ctx);

}  // namespace qload::bench
