// qload_h2d_bench: the host-to-device copy ceiling that GPU loads are measured against.
//
// The question (issue 4): a warm `qload load --device cuda:N` must reach 0.85x of what the
// machine can copy from pinned host memory to the device at all, and a cold one 0.9x of
// min(plain read, this ceiling). This program measures the ceiling on one device:
//   - pinned, one copy: one cudaMemcpyAsync of the whole --size buffer from registered
//     (page-locked) host memory: the best the copy engines and the PCIe link give,
//   - pinned, 16 MiB x 2 streams: the same bytes in 16 MiB pieces alternating over two
//     streams, the way qload's staging slots feed the device; the gap to the one-copy number
//     is what per-copy overhead costs a load,
//   - pageable, one copy: for reference, the same copy from memory that is not registered
//     (the driver stages it through its own pinned buffers, as a naive loader's copies are);
//   - host writes: one memcpy of the buffer by the CPU into the registered buffer, into
//     cudaHostAlloc'd memory and into an unregistered buffer. A load reads files into pinned staging,
//     so if registering memory makes CPU writes to it slow (an uncached mapping, as some
//     virtual machines give), every load is held to that rate whatever the PCIe link does.
//
// Each is timed with a steady clock around the enqueue and an event wait, --repeat times; the
// best run counts (single runs on a shared machine scatter). GB/s = 10^9 bytes/s. After the
// runs the device bytes are copied back and compared, so a copy that silently did nothing
// cannot pass for a fast one.
//
// Only qload's CUDA wrappers are used (no cuda_runtime.h), so this builds in every
// configuration; without a GPU it prints "no GPU: <reason>" and exits 69 (EX_UNAVAILABLE).
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/unique_fd.hpp"
#include "qload/runtime/units.hpp"

namespace qload::bench {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kPieceBytes = 16 * kMiB;  // qload's default staging slot
constexpr std::size_t kStreams = 2;
constexpr std::size_t kHugePage = 2 * kMiB;
constexpr int kExitUnavailable = 69;  // sysexits EX_UNAVAILABLE: no GPU here
constexpr int kExitUsage = 64;        // sysexits EX_USAGE

struct Options {
  int device = 0;
  std::string size = "1GiB";
  std::size_t bytes = 0;  // --size, parsed
  unsigned repeat = 5;
  std::string json;
  std::string read_file;  // --read-file: also time reading it into registered and pageable memory
};

// Everything the measurements share. Members are destroyed in reverse order of declaration,
// so the events and streams go first and the registration is undone before the host memory
// it pins is unmapped.
struct Context {
  int device = 0;
  std::string name;
  std::size_t bytes = 0;
  cuda::MemoryInfo memory;  // before our allocation
  HostBuffer pinned_host;
  HostBuffer pageable_host;
  HostBuffer pageable_target;            // for the host-write rows
  cuda::PinnedHostBuffer driver_pinned;  // cudaHostAlloc'd, for the host-write rows
  cuda::HostRegistration registration;
  cuda::DeviceBuffer device_buffer;
  std::array<cuda::Stream, kStreams> streams;
  std::array<cuda::Event, kStreams> events;
};

struct Row {
  std::string what;
  std::string json_key;
  double best_gbps = 0;
  std::vector<double> samples;  // GB/s of every run, in order
};

// A failure the caller should report as "no GPU" (exit 69) rather than as a bench failure.
bool is_unavailable(const Error& e) {
  return e.code() == Errc::kUnsupported;
}

// Deterministic, position-dependent bytes, so a copy that lands at the wrong offset or not
// at all is caught by the check at the end. Writing them also faults the pages in before any
// timing.
void fill_pattern(std::byte* data, std::size_t bytes) {
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  std::size_t i = 0;
  for (; i + sizeof(x) <= bytes; i += sizeof(x)) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(data + i, &x, sizeof(x));
  }
  for (; i < bytes; ++i) data[i] = static_cast<std::byte>(i);
}

Result<Context> make_context(const Options& o, std::size_t bytes) {
  Context ctx;
  ctx.device = o.device;
  ctx.bytes = bytes;
  QLOAD_ASSIGN_OR_RETURN(ctx.pinned_host, HostBuffer::allocate(bytes, kHugePage));
  QLOAD_ASSIGN_OR_RETURN(ctx.pageable_host, HostBuffer::allocate(bytes, kHugePage));
  fill_pattern(ctx.pinned_host.data(), bytes);
  std::memcpy(ctx.pageable_host.data(), ctx.pinned_host.data(), bytes);
  QLOAD_ASSIGN_OR_RETURN(ctx.pageable_target, HostBuffer::allocate(bytes, kHugePage));
  std::memcpy(ctx.pageable_target.data(), ctx.pinned_host.data(), bytes);  // faults its pages in
  QLOAD_ASSIGN_OR_RETURN(ctx.memory, cuda::memory_info(o.device));
  QLOAD_ASSIGN_OR_RETURN(ctx.device_buffer, cuda::DeviceBuffer::allocate(o.device, bytes));
  QLOAD_ASSIGN_OR_RETURN(ctx.registration, cuda::HostRegistration::register_memory(ctx.pinned_host.span()));
  QLOAD_ASSIGN_OR_RETURN(ctx.driver_pinned, cuda::PinnedHostBuffer::allocate(bytes));
  for (std::size_t i = 0; i < kStreams; ++i) {
    QLOAD_ASSIGN_OR_RETURN(ctx.streams[i], cuda::Stream::create(o.device));
    QLOAD_ASSIGN_OR_RETURN(ctx.events[i], cuda::Event::create(o.device));
  }
  return ctx;
}

// Waits until everything queued so far on every stream has completed.
Status wait_all(const Context& ctx) {
  for (std::size_t i = 0; i < kStreams; ++i) QLOAD_TRY(ctx.events[i].record(ctx.streams[i]));
  for (const cuda::Event& e : ctx.events) QLOAD_TRY(e.synchronize());
  return {};
}

// The whole buffer in one copy on the first stream.
Status copy_whole(const Context& ctx, const HostBuffer& src) {
  QLOAD_TRY(cuda::copy_to_device_async(ctx.device_buffer.data(), src.data(), ctx.bytes, ctx.streams[0]));
  return wait_all(ctx);
}

// The same from pageable memory: a synchronous copy, which is what the driver makes of an
// asynchronous one from pageable memory (it stages it through its own pinned buffers).
Status copy_whole_pageable(const Context& ctx, const HostBuffer& src) {
  return cuda::copy_to_device(ctx.device_buffer.data(), src.data(), ctx.bytes, ctx.device_buffer.device());
}

// The whole buffer in kPieceBytes pieces, piece i on stream i % kStreams.
Status copy_pieces(const Context& ctx, const HostBuffer& src) {
  std::size_t piece = 0;
  for (std::size_t offset = 0; offset < ctx.bytes; offset += kPieceBytes, ++piece) {
    const std::size_t n = std::min(kPieceBytes, ctx.bytes - offset);
    QLOAD_TRY(cuda::copy_to_device_async(ctx.device_buffer.data() + offset, src.data() + offset, n,
                                         ctx.streams[piece % kStreams]));
  }
  return wait_all(ctx);
}

// One untimed warm-up (first-use costs: lazy module loading, page-table setup for the
// registration), then `repeat` timed runs.
Result<Row> measure(const Context& ctx, unsigned repeat, Row row, const std::function<Status()>& copy) {
  QLOAD_TRY(copy());
  for (unsigned r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    QLOAD_TRY(copy());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double gbps = static_cast<double>(ctx.bytes) / seconds / 1e9;
    row.samples.push_back(gbps);
    row.best_gbps = std::max(row.best_gbps, gbps);
  }
  return row;
}

// Copies the device buffer back piece by piece and compares it with the source bytes.
Status verify(const Context& ctx) {
  QLOAD_ASSIGN_OR_RETURN(HostBuffer back, HostBuffer::allocate(kPieceBytes, kHugePage));
  for (std::size_t offset = 0; offset < ctx.bytes; offset += kPieceBytes) {
    const std::size_t n = std::min(kPieceBytes, ctx.bytes - offset);
    QLOAD_TRY(cuda::copy_to_host(back.data(), ctx.device_buffer.data() + offset, n, ctx.device));
    if (std::memcmp(back.data(), ctx.pinned_host.data() + offset, n) != 0)
      return fail(
          Error(Errc::kChecksumMismatch, "device bytes differ from the host bytes copied there").with_offset(offset));
  }
  return {};
}

// Reads the whole file in kPieceBytes preads spread over `threads` threads, piece i landing
// at (i mod pieces-in-dst) in `dst`: what a load's reads into staging do, without the loader.
// Run warm (the file read once first), this separates "pinned memory is slow to read into"
// from anything the scheduler does.
Status read_file_into(const std::string& path, std::byte* dst, std::size_t dst_bytes, unsigned threads) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(Error::from_errno(errno, "open").with_file(path));
  const off_t size = ::lseek(fd.get(), 0, SEEK_END);
  const std::size_t pieces = (static_cast<std::size_t>(size) + kPieceBytes - 1) / kPieceBytes;
  const std::size_t slots = dst_bytes / kPieceBytes;
  std::vector<std::thread> pool;
  std::atomic<bool> failed = false;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t i = t; i < pieces; i += threads) {
        const auto offset = static_cast<off_t>(i * kPieceBytes);
        if (::pread(fd.get(), dst + (i % slots) * kPieceBytes, kPieceBytes, offset) < 0) failed = true;
      }
    });
  for (std::thread& th : pool) th.join();
  if (failed) return fail(Error(Errc::kIo, "pread failed").with_file(path));
  return {};
}

Status append_file_rows(const Context& ctx, unsigned repeat, const std::string& path, std::vector<Row>& rows) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(Error::from_errno(errno, "open").with_file(path));
  const auto file_bytes = static_cast<std::size_t>(::lseek(fd.get(), 0, SEEK_END));
  for (const unsigned threads : {1u, 8u}) {
    for (const bool registered : {true, false}) {
      std::byte* dst = registered ? ctx.pinned_host.data() : ctx.pageable_target.data();
      Row row{fmt::format("file pread -> {}, {} thr", registered ? "registered" : "pageable", threads),
              fmt::format("file_read_{}_{}t_gbps", registered ? "registered" : "pageable", threads),
              0,
              {}};
      // measure() divides ctx.bytes by the time: scale to the file's size afterwards.
      QLOAD_ASSIGN_OR_RETURN(
          row, measure(ctx, repeat, std::move(row), [&] { return read_file_into(path, dst, ctx.bytes, threads); }));
      const double scale = static_cast<double>(file_bytes) / static_cast<double>(ctx.bytes);
      for (double& g : row.samples) g *= scale;
      row.best_gbps *= scale;
      rows.push_back(std::move(row));
    }
  }
  return {};
}

Result<std::vector<Row>> run_all(const Context& ctx, unsigned repeat) {
  std::vector<Row> rows;
  QLOAD_ASSIGN_OR_RETURN(Row whole, measure(ctx, repeat, {"pinned, one copy", "pinned_gbps", 0, {}},
                                            [&] { return copy_whole(ctx, ctx.pinned_host); }));
  rows.push_back(std::move(whole));
  QLOAD_ASSIGN_OR_RETURN(Row pieces,
                         measure(ctx, repeat, {"pinned, 16 MiB x 2 streams", "pinned_16mib_2streams_gbps", 0, {}},
                                 [&] { return copy_pieces(ctx, ctx.pinned_host); }));
  rows.push_back(std::move(pieces));
  QLOAD_ASSIGN_OR_RETURN(Row pageable, measure(ctx, repeat, {"pageable, one copy", "pageable_gbps", 0, {}},
                                               [&] { return copy_whole_pageable(ctx, ctx.pageable_host); }));
  rows.push_back(std::move(pageable));
  QLOAD_TRY(verify(ctx));
  // Same bytes over same bytes: the device copy's source stays what verify compared.
  const auto host_write = [&](std::byte* to) {
    std::memcpy(to, ctx.pageable_host.data(), ctx.bytes);
    return Status{};
  };
  QLOAD_ASSIGN_OR_RETURN(Row into_pinned,
                         measure(ctx, repeat, {"host write into registered", "host_write_registered_gbps", 0, {}},
                                 [&] { return host_write(ctx.pinned_host.data()); }));
  rows.push_back(std::move(into_pinned));
  QLOAD_ASSIGN_OR_RETURN(Row into_driver,
                         measure(ctx, repeat, {"host write into cudaHostAlloc", "host_write_host_alloc_gbps", 0, {}},
                                 [&] { return host_write(ctx.driver_pinned.data()); }));
  QLOAD_ASSIGN_OR_RETURN(Row into_pageable,
                         measure(ctx, repeat, {"host write into pageable", "host_write_pageable_gbps", 0, {}},
                                 [&] { return host_write(ctx.pageable_target.data()); }));
  rows.push_back(std::move(into_driver));
  rows.push_back(std::move(into_pageable));
  return rows;
}

void print_table(const Context& ctx, unsigned repeat, const std::vector<Row>& rows) {
  fmt::print("qload_h2d_bench: cuda:{} ({}), {} per copy, best of {}; device bytes verified\n", ctx.device, ctx.name,
             format_bytes(ctx.bytes), repeat);
  fmt::print("device memory before the benchmark: {} free of {}\n", format_bytes(ctx.memory.free_bytes),
             format_bytes(ctx.memory.total_bytes));
  fmt::print("{:<28} {:>7}  {}\n", "copy", "GB/s", "all runs (GB/s)");
  for (const Row& row : rows) {
    std::string runs;
    for (double g : row.samples) runs += fmt::format("{}{:.2f}", runs.empty() ? "" : " ", g);
    fmt::print("{:<28} {:7.2f}  {}\n", row.what, row.best_gbps, runs);
  }
}

Status write_json(const Options& o, const Context& ctx, const std::vector<Row>& rows) {
  nlohmann::json doc{{"schema", "qload.h2d_bench/1"},
                     {"device", fmt::format("cuda:{}", ctx.device)},
                     {"name", ctx.name},
                     {"bytes", ctx.bytes},
                     {"piece_bytes", kPieceBytes},
                     {"repeat", o.repeat}};
  for (const Row& row : rows) {
    doc[row.json_key] = row.best_gbps;
    doc["runs"][row.json_key] = row.samples;
  }
  std::ofstream out(o.json);
  out << doc.dump(2) << '\n';
  if (!out) return fail(Error(Errc::kIo, "cannot write the JSON report").with_file(o.json));
  return {};
}

void add_options(CLI::App& app, Options& o) {
  app.add_option("--device", o.device, "CUDA device index (default 0)")->check(CLI::NonNegativeNumber);
  app.add_option("--size", o.size, "Bytes per copy, e.g. 1GiB, 512MiB (default 1GiB)");
  app.add_option("--repeat", o.repeat, "Timed runs per copy kind; the best counts (default 5)")
      ->check(CLI::Range(1, 100));
  app.add_option("--json", o.json, "Also write the results as JSON to this file");
  app.add_option("--read-file", o.read_file,
                 "Also time preads of this file (16 MiB pieces, 1 and 8 threads) into registered and pageable "
                 "memory; read it once first to time the page cache");
}

// The device to measure, or why there is none (the text of the "no GPU" line).
Result<CudaDevice> find_device(int index) {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) return fail(Errc::kUnsupported, info.unavailable_reason);
  for (const CudaDevice& d : info.devices)
    if (d.index == index) return d;
  return fail(Errc::kUnsupported,
              fmt::format("cuda:{} does not exist ({} devices visible)", index, info.devices.size()));
}

// Exit status: 0, 1 (a measurement failed), 69 (no GPU).
int run(const Options& o) {
  auto device = find_device(o.device);
  if (!device) {
    fmt::print(stderr, "no GPU: {}\n", device.error().message());
    return kExitUnavailable;
  }
  auto ctx = make_context(o, o.bytes);
  if (!ctx) {
    if (is_unavailable(ctx.error())) {
      fmt::print(stderr, "no GPU: {}\n", ctx.error().message());
      return kExitUnavailable;
    }
    fmt::print(stderr, "qload_h2d_bench: {}\n", ctx.error().to_string());
    return 1;
  }
  ctx->name = device->name;
  auto rows = run_all(*ctx, o.repeat);
  if (rows && !o.read_file.empty()) {
    if (Status s = append_file_rows(*ctx, o.repeat, o.read_file, *rows); !s) rows = fail(s.error());
  }
  if (!rows) {
    fmt::print(stderr, "qload_h2d_bench: {}\n", rows.error().to_string());
    return 1;
  }
  print_table(*ctx, o.repeat, *rows);
  if (!o.json.empty()) {
    if (Status s = write_json(o, *ctx, *rows); !s) {
      fmt::print(stderr, "qload_h2d_bench: {}\n", s.error().to_string());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace qload::bench

int main(int argc, char** argv) {
  using namespace qload::bench;
  CLI::App app{"qload_h2d_bench: the pinned host-to-device copy ceiling of one GPU"};
  Options o;
  add_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  // Checked before the GPU is asked about, so a typo is a usage error everywhere.
  const auto size = qload::parse_byte_size(o.size);
  if (!size || *size == 0) {
    fmt::print(stderr, "qload_h2d_bench: error: --size {}: {}\n", o.size,
               size ? "must be more than 0 bytes" : size.error().message());
    return kExitUsage;
  }
  o.bytes = static_cast<std::size_t>(*size);
  return run(o);
}
