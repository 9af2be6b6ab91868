// qload_io_bench: sequential read throughput of qload's I/O engines against a plain read() loop.
//
// The question (issue 2): reading one large file through io::Reader the way a load does (a
// staging pool of `depth` chunk-sized slots, each resubmitted for the next chunk as soon as
// its read completes) must reach 0.95x of the best a plain `read()` loop gets from the same
// file in the same run. Measured for buffered and O_DIRECT reads, cold and warm page cache,
// both engines (io_uring, pread pool) and a range of queue depths. See docs/benchmarks.md.
//
// Hashing is kept off the timed path: on 2 cores XXH3 over every byte would turn the
// benchmark into a CPU benchmark. --verify adds an untimed pass per configuration that runs
// the same staging loop, hashes the chunks in file order and compares with the digest of the
// bytes the file was written with (or of a plain read() pass when the file is reused).
//
// Every configuration runs --repeat times (read(): --baseline-runs) and the best run counts:
// single runs on a shared VM scatter by tens of percent (docs/benchmarks.md has the causes).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "qload/io/digest.hpp"
#include "qload/io/page_cache.hpp"
#include "qload/io/reader.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/log.hpp"
#include "qload/runtime/unique_fd.hpp"

#include "io_bench.hpp"

namespace qload::bench {
namespace {

// ---------------------------------------------------------------------------------------------
// Small system helpers

double cpu_seconds_now() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const auto sec = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
  };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

// Runs `body` (returning Status) and measures wall and CPU time around it.
template <typename Body>
Result<Measurement> timed(std::uint64_t bytes, Body&& body) {
  const double cpu0 = cpu_seconds_now();
  const auto t0 = std::chrono::steady_clock::now();
  QLOAD_TRY(body());
  const auto t1 = std::chrono::steady_clock::now();
  Measurement m;
  m.bytes = bytes;
  m.seconds = std::chrono::duration<double>(t1 - t0).count();
  m.cpu_seconds = cpu_seconds_now() - cpu0;
  return m;
}

// ---------------------------------------------------------------------------------------------
// Baseline: the plain read() loop

// Reads the whole file with read() into one buffer, kBaselineChunk at a time. Direct mode
// uses an O_DIRECT descriptor; the buffer (HostBuffer) is aligned either way. `hash` is fed
// in order when given (the untimed verify pass); the timed runs pass nullptr.
Status read_loop(const std::string& path, Mode mode, std::uint64_t size, const HostBuffer& buffer,
                 io::Xxh3Stream* hash) {
  const int flags = O_RDONLY | O_CLOEXEC | (mode == Mode::kDirect ? O_DIRECT : 0);
  UniqueFd fd(::open(path.c_str(), flags));
  if (!fd) return fail(Error::from_errno(errno, "open for the read() baseline").with_file(path));
  std::uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(Error::from_errno(errno, "read").with_file(path).with_offset(total));
    if (n == 0) break;
    if (hash != nullptr) hash->update({buffer.data(), static_cast<std::size_t>(n)});
    total += static_cast<std::uint64_t>(n);
  }
  if (total != size)
    return fail(Error(Errc::kTruncated, fmt::format("read() delivered {} of {} bytes", total, size)).with_file(path));
  return {};
}

Result<HostBuffer> prefaulted_buffer(std::size_t size) {
  QLOAD_ASSIGN_OR_RETURN(HostBuffer buffer, HostBuffer::allocate(size, kAlign));
  // Touch every page now: a staging pool lives as long as the loader, so first-touch page
  // faults are not part of the steady state being measured (for either side).
  std::memset(buffer.data(), 0, buffer.size());
  return buffer;
}

Result<Measurement> run_baseline(const Context& ctx, Mode mode, Cache cache) {
  QLOAD_ASSIGN_OR_RETURN(HostBuffer buffer, prefaulted_buffer(kBaselineChunk));
  if (cache == Cache::kCold) QLOAD_TRY(make_cold(ctx));
  return timed(ctx.size, [&] { return read_loop(ctx.path, mode, ctx.size, buffer, nullptr); });
}

// ---------------------------------------------------------------------------------------------
// The engines: a staging-pool loop over io::Reader

// One reader with the file open and its staging slots registered.
struct Rig {
  HostBuffer staging;  // declared first, destroyed last: ~Reader waits for reads landing here
  std::unique_ptr<io::Reader> reader;
  io::FileId file = 0;
};

Result<Rig> make_rig(const Context& ctx, Mode mode, io::EngineKind engine, std::uint32_t depth) {
  io::ReaderOptions ro;
  ro.engine = engine;
  ro.queue_depth = depth;
  ro.direct = mode == Mode::kDirect ? io::DirectMode::kOn : io::DirectMode::kOff;
  Rig rig;
  QLOAD_ASSIGN_OR_RETURN(rig.staging, prefaulted_buffer(ctx.opts.chunk * depth));
  QLOAD_ASSIGN_OR_RETURN(rig.reader, engine == io::EngineKind::kUring ? io::make_uring_reader(ro, ctx.log)
                                                                      : io::make_pread_reader(ro, ctx.log));
  QLOAD_ASSIGN_OR_RETURN(rig.file, rig.reader->open_file(ctx.path));
  std::vector<std::span<std::byte>> slots;
  for (std::uint32_t s = 0; s < depth; ++s)
    slots.push_back(rig.staging.span().subspan(s * ctx.opts.chunk, ctx.opts.chunk));
  if (!ctx.opts.no_register) QLOAD_TRY(rig.reader->register_buffers(slots));
  return rig;
}

// Reads the file chunk by chunk through `depth` slots, keeping every free slot busy. A slot is
// released when its read completes (timed runs), or, when hashing, once every chunk before it
// has been hashed: completions can arrive out of order, and the stream needs file order.
class StagingLoop {
 public:
  StagingLoop(Rig& rig, std::uint64_t size, std::size_t chunk, std::uint32_t depth, io::Xxh3Stream* hash)
      : rig_(rig),
        size_(size),
        chunk_(chunk),
        depth_(depth),
        hash_(hash),
        chunks_((size + chunk - 1) / chunk),
        window_(depth),
        arrived_(depth, false) {
    for (std::uint32_t s = depth; s > 0; --s) free_.push_back(s - 1);
    batch_.reserve(depth);
  }

  Status run() {
    QLOAD_TRY(submit_free_slots());
    std::array<io::ReadCompletion, 64> done;
    while (completed_ < next_submit_) {
      QLOAD_ASSIGN_OR_RETURN(const std::size_t n, rig_.reader->wait(done, 1));
      for (std::size_t i = 0; i < n; ++i) on_completion(done[i]);
      if (error_) continue;  // drain what is in flight; the slots are still being written
      if (hash_ != nullptr) hash_in_order();
      if (Status s = submit_free_slots(); !s) error_ = std::move(s.error());
    }
    if (error_) return fail(std::move(*error_));
    if (completed_ != chunks_) return fail(Errc::kInternal, "staging loop ended early");
    return {};
  }

 private:
  std::span<std::byte> dest(std::uint32_t slot, std::uint64_t chunk) const {
    const std::uint64_t len = std::min<std::uint64_t>(chunk_, size_ - chunk * chunk_);
    return rig_.staging.span().subspan(slot * chunk_, static_cast<std::size_t>(len));
  }

  // One submit() for every slot that is free (the engines batch SQEs per call).
  Status submit_free_slots() {
    batch_.clear();
    while (!free_.empty() && next_submit_ < chunks_) {
      const std::uint32_t slot = free_.back();
      free_.pop_back();
      window_[next_submit_ % depth_] = slot;
      batch_.push_back(io::ReadRequest{rig_.file, next_submit_ * chunk_, dest(slot, next_submit_), slot});
      ++next_submit_;
    }
    return batch_.empty() ? Status{} : rig_.reader->submit(batch_);
  }

  void on_completion(io::ReadCompletion& c) {
    ++completed_;
    if (!c.status) {
      if (!error_) error_ = std::move(c.status.error());
      return;
    }
    const auto slot = static_cast<std::uint32_t>(c.tag);
    if (hash_ == nullptr) {
      free_.push_back(slot);
    } else {
      arrived_[slot] = true;
    }
  }

  // Held chunks are always within [next_hash_, next_hash_ + depth), so window_ maps each to
  // its slot without a search.
  void hash_in_order() {
    while (next_hash_ < next_submit_) {
      const std::uint32_t slot = window_[next_hash_ % depth_];
      if (!arrived_[slot]) return;
      hash_->update(dest(slot, next_hash_));
      arrived_[slot] = false;
      free_.push_back(slot);
      ++next_hash_;
    }
  }

  Rig& rig_;
  std::uint64_t size_;
  std::uint64_t chunk_;
  std::uint32_t depth_;
  io::Xxh3Stream* hash_;
  std::uint64_t chunks_;
  std::uint64_t next_submit_ = 0, next_hash_ = 0, completed_ = 0;
  std::vector<std::uint32_t> free_;
  std::vector<std::uint32_t> window_;  // chunk % depth -> slot, while the chunk is held
  std::vector<bool> arrived_;          // by slot: read done, not hashed yet
  std::vector<io::ReadRequest> batch_;
  std::optional<Error> error_;
};

Status check_digest(const Context& ctx, const io::Xxh3Stream& hash, std::string_view what) {
  if (!ctx.reference) return fail(Errc::kInternal, "no reference digest to verify against");
  if (hash.bytes_seen() == ctx.size && hash.digest64() == *ctx.reference) return {};
  return fail(Error(Errc::kChecksumMismatch,
                    fmt::format("{}: xxh3-64 {} over {} bytes, expected {} over {}", what, io::hex64(hash.digest64()),
                                hash.bytes_seen(), io::hex64(*ctx.reference), ctx.size))
                  .with_file(ctx.path));
}

// One timed run on a fresh reader (as a load would make), then the verify pass if asked.
Result<Row> run_engine(const Context& ctx, Mode mode, Cache cache, io::EngineKind engine, std::uint32_t depth,
                       bool verify) {
  QLOAD_ASSIGN_OR_RETURN(Rig rig, make_rig(ctx, mode, engine, depth));
  Row row{mode, cache, std::string(rig.reader->engine()), depth, {}, false, {}};
  if (cache == Cache::kCold) QLOAD_TRY(make_cold(ctx));
  QLOAD_ASSIGN_OR_RETURN(
      row.m, timed(ctx.size, [&] { return StagingLoop(rig, ctx.size, ctx.opts.chunk, depth, nullptr).run(); }));
  row.m.stats = rig.reader->stats();
  row.samples.push_back(row.m.gbps());
  if (verify) {
    io::Xxh3Stream hash;
    QLOAD_TRY(StagingLoop(rig, ctx.size, ctx.opts.chunk, depth, &hash).run());
    QLOAD_TRY(check_digest(ctx, hash, fmt::format("{} {} depth {}", name(mode), row.engine, depth)));
    row.verified = true;
  }
  return row;
}

// ---------------------------------------------------------------------------------------------
// One mode + cache group

std::string depth_text(const Row& r) {
  return r.depth == 0 ? "-" : fmt::format("{}", r.depth);
}

std::string samples_text(const Row& r) {
  std::string out;
  for (const double s : r.samples) out += fmt::format("{}{:.3f}", out.empty() ? "" : " ", s);
  return out;
}

void print_progress(const Row& r) {
  // Peak reads in flight shows whether the staging loop really kept `depth` reads going.
  const std::string flight = r.depth == 0 ? "" : fmt::format("  peak in flight {}", r.m.stats.max_in_flight);
  fmt::print(stderr, "  {:<8} {:<4} {:<8} depth {:>2}  {:6.3f} GB/s  {:5.2f} s  cpu {:3.0f}%{}{}\n", name(r.mode),
             name(r.cache), r.engine, depth_text(r), r.m.gbps(), r.m.seconds, 100 * r.m.cpu_seconds / r.m.seconds,
             flight, r.verified ? "  verified" : "");
}

// Makes the cache state the group needs and says what it is: a warm group reads the file once
// first; a cold group checks that a drop really leaves none of the file cached.
Status prepare_cache(Context& ctx, Mode mode, Cache cache) {
  if (cache == Cache::kWarm) {
    QLOAD_ASSIGN_OR_RETURN(HostBuffer buffer, prefaulted_buffer(kBaselineChunk));
    QLOAD_TRY(read_loop(ctx.path, Mode::kBuffered, ctx.size, buffer, nullptr));
  } else {
    QLOAD_TRY(drop_cache(ctx));
  }
  QLOAD_ASSIGN_OR_RETURN(const double resident, io::page_cache_resident_fraction(ctx.fd.get(), ctx.size));
  fmt::print(stderr, "{}/{}: {:.1f}% of the file is in the page cache at the start\n", name(mode), name(cache),
             100 * resident);
  return {};
}

Status verify_baseline(Context& ctx, Mode mode) {
  QLOAD_ASSIGN_OR_RETURN(HostBuffer buffer, prefaulted_buffer(kBaselineChunk));
  io::Xxh3Stream hash;
  QLOAD_TRY(read_loop(ctx.path, mode, ctx.size, buffer, &hash));
  if (!ctx.reference) ctx.reference = hash.digest64();  // a reused file: read() is the reference
  return check_digest(ctx, hash, fmt::format("{} read()", name(mode)));
}

Result<Row> baseline_row(const Context& ctx, Mode mode, Cache cache) {
  QLOAD_ASSIGN_OR_RETURN(Measurement m, run_baseline(ctx, mode, cache));
  Row row{mode, cache, "read()", 0, m, ctx.opts.verify, {m.gbps()}};
  print_progress(row);
  return row;
}

// Engines get --repeat runs and the best counts, as the baseline does: on a shared virtual
// machine single runs scatter widely (see docs/benchmarks.md), and a best-of-N baseline
// against single-shot engine runs would charge that scatter to the engines.
Result<Row> best_engine_row(const Context& ctx, Mode mode, Cache cache, io::EngineKind engine, std::uint32_t depth) {
  Row best;
  for (unsigned i = 0; i < ctx.opts.repeat; ++i) {
    QLOAD_ASSIGN_OR_RETURN(Row row, run_engine(ctx, mode, cache, engine, depth, ctx.opts.verify && i == 0));
    print_progress(row);
    std::vector<double> samples = std::move(best.samples);
    samples.push_back(row.m.gbps());
    const bool verified = best.verified || row.verified;
    if (i == 0 || row.m.gbps() > best.m.gbps()) best = std::move(row);
    best.samples = std::move(samples);
    best.verified = verified;
  }
  return best;
}

// Baseline runs bracket the engine runs (half before, half after), so a drift in the disk or
// the host below it during the group shows up in the baseline instead of only in the engines.
Status run_group(Context& ctx, Mode mode, Cache cache, const std::vector<io::EngineKind>& engines,
                 std::vector<Row>& rows) {
  QLOAD_TRY(prepare_cache(ctx, mode, cache));
  if (ctx.opts.verify) QLOAD_TRY(verify_baseline(ctx, mode));
  const unsigned before = (ctx.opts.baseline_runs + 1) / 2;
  for (unsigned i = 0; i < before; ++i) {
    QLOAD_ASSIGN_OR_RETURN(rows.emplace_back(), baseline_row(ctx, mode, cache));
  }
  for (const std::uint32_t depth : ctx.opts.depths) {
    for (const io::EngineKind engine : engines) {
      QLOAD_ASSIGN_OR_RETURN(rows.emplace_back(), best_engine_row(ctx, mode, cache, engine, depth));
    }
  }
  for (unsigned i = before; i < ctx.opts.baseline_runs; ++i) {
    QLOAD_ASSIGN_OR_RETURN(rows.emplace_back(), baseline_row(ctx, mode, cache));
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Report

double best_baseline(const std::vector<Row>& rows, Mode mode, Cache cache) {
  double best = 0;
  for (const Row& r : rows)
    if (r.mode == mode && r.cache == cache && r.depth == 0) best = std::max(best, r.m.gbps());
  return best;
}

double ratio(const std::vector<Row>& rows, const Row& r) {
  const double base = best_baseline(rows, r.mode, r.cache);
  return base > 0 ? r.m.gbps() / base : 0;
}

void print_table(const std::vector<Row>& rows) {
  fmt::print("\n{:<8}  {:<5}  {:<8}  {:>5}  {:>7}  {:>6}  {:>5}  {}\n", "mode", "cache", "engine", "depth", "GB/s",
             "ratio", "cpu%", "runs (GB/s)");
  for (const Row& r : rows) {
    fmt::print("{:<8}  {:<5}  {:<8}  {:>5}  {:7.3f}  {:6.3f}  {:5.0f}  {}\n", name(r.mode), name(r.cache), r.engine,
               depth_text(r), r.m.gbps(), ratio(rows, r), 100 * r.m.cpu_seconds / r.m.seconds, samples_text(r));
  }
}

struct Verdict {
  Mode mode;
  Cache cache;
  double baseline = 0;
  double worst = 0;  // worst io_uring ratio; 0 if io_uring did not run
  std::uint32_t worst_depth = 0;
};

std::vector<Verdict> verdicts(const std::vector<Row>& rows) {
  std::vector<Verdict> out;
  for (const Row& r : rows) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const Verdict& v) { return v.mode == r.mode && v.cache == r.cache; });
    if (it == out.end()) it = out.insert(out.end(), Verdict{r.mode, r.cache, best_baseline(rows, r.mode, r.cache)});
    if (r.engine != "io_uring") continue;
    const double q = ratio(rows, r);
    if (it->worst_depth == 0 || q < it->worst) {
      it->worst = q;
      it->worst_depth = r.depth;
    }
  }
  return out;
}

void print_verdicts(const std::vector<Verdict>& vs) {
  fmt::print("\n");
  for (const Verdict& v : vs) {
    if (v.worst_depth == 0) continue;
    fmt::print("{}/{}: worst io_uring ratio {:.3f} (depth {}) vs goal {:.2f}: {}  [best read() {:.3f} GB/s]\n",
               name(v.mode), name(v.cache), v.worst, v.worst_depth, kGoal, v.worst >= kGoal ? "met" : "MISSED",
               v.baseline);
  }
}

nlohmann::json machine_json() {
  utsname u{};
  ::uname(&u);
  struct sysinfo si {};
  ::sysinfo(&si);
  return {{"cpus", ::sysconf(_SC_NPROCESSORS_ONLN)},
          {"memory_bytes", std::uint64_t{si.totalram} * si.mem_unit},
          {"kernel", u.release}};
}

Status write_json(const Context& ctx, const std::vector<Row>& rows, const std::vector<Verdict>& vs) {
  nlohmann::json results = nlohmann::json::array();
  for (const Row& r : rows) {
    results.push_back({{"mode", name(r.mode)},
                       {"cache", name(r.cache)},
                       {"engine", r.engine},
                       {"depth", r.depth},
                       {"bytes", r.m.bytes},
                       {"seconds", r.m.seconds},
                       {"gbps", r.m.gbps()},
                       {"ratio", ratio(rows, r)},
                       {"cpu_seconds", r.m.cpu_seconds},
                       {"verified", r.verified},
                       {"samples_gbps", r.samples},
                       {"ops", r.m.stats.ops},
                       {"submit_calls", r.m.stats.submit_calls},
                       {"direct_bytes", r.m.stats.direct_bytes},
                       {"fixed_buffer_ops", r.m.stats.fixed_buffer_ops},
                       {"short_reads", r.m.stats.short_reads},
                       {"retries", r.m.stats.retries},
                       {"max_in_flight", r.m.stats.max_in_flight}});
  }
  nlohmann::json summary = nlohmann::json::array();
  for (const Verdict& v : vs)
    if (v.worst_depth != 0)
      summary.push_back({{"mode", name(v.mode)},
                         {"cache", name(v.cache)},
                         {"best_baseline_gbps", v.baseline},
                         {"worst_uring_ratio", v.worst},
                         {"worst_uring_depth", v.worst_depth},
                         {"goal", kGoal},
                         {"met", v.worst >= kGoal}});
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  std::array<char, 32> stamp{};
  std::strftime(stamp.data(), stamp.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  const nlohmann::json doc{{"schema", "qload.io_bench/1"},
                           {"time", stamp.data()},
                           {"machine", machine_json()},
                           {"file", {{"path", ctx.path}, {"bytes", ctx.size}}},
                           {"chunk_bytes", ctx.opts.chunk},
                           {"baseline_chunk_bytes", kBaselineChunk},
                           {"drop", name(ctx.drop)},
                           {"results", results},
                           {"summary", summary}};
  std::ofstream out(ctx.opts.json);
  out << doc.dump(2) << '\n';
  if (!out) return fail(Error(Errc::kIo, "cannot write the JSON report").with_file(ctx.opts.json));
  return {};
}

// ---------------------------------------------------------------------------------------------
// main

Status validate(const Options& o) {
  if (o.chunk == 0 || o.chunk % kAlign != 0 || o.chunk > kGiB)
    return fail(Errc::kInvalidArgument,
                fmt::format("--chunk {} must be a multiple of {} up to 1 GiB", o.chunk, kAlign));
  for (const std::uint32_t d : o.depths)
    if (d == 0 || d > 256) return fail(Errc::kInvalidArgument, fmt::format("depth {} is outside 1..256", d));
  if (o.size == 0) return fail(Errc::kInvalidArgument, "--size must be positive");
  return {};
}

Status run(Context& ctx) {
  QLOAD_TRY(validate(ctx.opts));
  std::vector<io::EngineKind> engines;
  for (const std::string& e : ctx.opts.engines) {
    QLOAD_ASSIGN_OR_RETURN(engines.emplace_back(), io::parse_engine(e));
  }
  QLOAD_ASSIGN_OR_RETURN(const ScratchFile file, prepare_file(ctx));
  QLOAD_TRY(open_file(ctx, file.path()));
  QLOAD_TRY(choose_drop_method(ctx));
  fmt::print(stderr, "file {} ({} MiB), chunk {} KiB, read() chunk {} KiB\n", ctx.path, ctx.size >> 20,
             ctx.opts.chunk >> 10, kBaselineChunk >> 10);

  std::vector<Row> rows;
  for (const std::string& m : ctx.opts.modes) {
    const Mode mode = m == "direct" ? Mode::kDirect : Mode::kBuffered;
    for (const std::string& c : ctx.opts.caches) {
      const Cache cache = c == "warm" ? Cache::kWarm : Cache::kCold;
      if (mode == Mode::kDirect && cache == Cache::kWarm) {
        fmt::print(stderr, "direct/warm skipped: O_DIRECT bypasses the page cache, so it equals direct/cold\n");
        continue;
      }
      QLOAD_TRY(run_group(ctx, mode, cache, engines, rows));
    }
  }
  print_table(rows);
  const std::vector<Verdict> vs = verdicts(rows);
  print_verdicts(vs);
  if (!ctx.opts.json.empty()) QLOAD_TRY(write_json(ctx, rows, vs));
  return {};
}

void add_options(CLI::App& app, Options& o) {
  app.add_option("--file", o.file, "Test file: reused if it exists, else created there (kept only with --keep)");
  app.add_option("--dir", o.dir, "Directory for the scratch file (default $TMPDIR or /tmp)");
  app.add_option("--size", o.size, "Size of a created test file (default 2GiB; --quick 256MiB)")
      ->transform(CLI::AsSizeValue(true));
  app.add_option("--chunk", o.chunk, "Bytes per engine read request (default 8MiB)")->transform(CLI::AsSizeValue(true));
  app.add_option("--depths", o.depths, "Queue depths (default 1,2,4,8,16,32,64; --quick 1,8,32)")->delimiter(',');
  app.add_option("--modes", o.modes, "Read modes to run (default buffered,direct)")
      ->delimiter(',')
      ->check(CLI::IsMember({"buffered", "direct"}));
  app.add_option("--caches", o.caches, "Page cache states to run (default cold,warm)")
      ->delimiter(',')
      ->check(CLI::IsMember({"cold", "warm"}));
  app.add_option("--engines", o.engines, "Engines to run (default uring,pread)")
      ->delimiter(',')
      ->check(CLI::IsMember({"uring", "pread"}));
  app.add_option("--drop", o.drop,
                 "How cold runs empty the page cache: auto (drop_caches as root), "
                 "drop_caches or fadvise")
      ->check(CLI::IsMember({"auto", "drop_caches", "fadvise"}));
  app.add_option("--settle", o.settle, "Seconds to wait after each page cache drop before a cold run (default 0)")
      ->check(CLI::Range(0.0, 60.0));
  app.add_option("--baseline-runs", o.baseline_runs, "read() runs per mode and cache; the best counts (default 2)")
      ->check(CLI::Range(1, 10));
  app.add_option("--repeat", o.repeat, "Runs per engine configuration; the best counts (default 2)")
      ->check(CLI::Range(1, 10));
  app.add_flag("--verify", o.verify, "Check every configuration's bytes against the file's XXH3-64 (untimed pass)");
  app.add_flag("--no-register", o.no_register, "Do not register the staging slots with the engine (fixed buffers)");
  app.add_flag("--keep", o.keep, "Do not remove a test file this run created");
  app.add_flag("--quick", o.quick, "Small smoke run: 256MiB file, depths 1,8,32");
  app.add_option("--json", o.json, "Also write the results as JSON to this file");
}

}  // namespace
}  // namespace qload::bench

int main(int argc, char** argv) {
  using namespace qload::bench;
  CLI::App app{"qload_io_bench: sequential read throughput of qload's I/O engines vs a plain read() loop"};
  Context ctx;
  add_options(app, ctx.opts);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 64;  // sysexits EX_USAGE
  }
  if (ctx.opts.quick) {  // quick only changes what was not given explicitly
    if (app.count("--size") == 0) ctx.opts.size = 256 * kMiB;
    if (app.count("--depths") == 0) ctx.opts.depths = {1, 8, 32};
  }
  ctx.log = qload::Logger::to_stderr(qload::LogLevel::kInfo);
  if (qload::Status s = run(ctx); !s) {
    fmt::print(stderr, "qload_io_bench: {}\n", s.error().to_string());
    return 1;
  }
  return 0;
}
