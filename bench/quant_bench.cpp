// qload_quant_bench: CPU throughput of the quantized-weight decoders (quant_codec.hpp
// dequantize_rows) and of quantize on load, against memcpy of the same bytes in the same run.
//
// Every scheme qload decodes gets one random [N, K] weight (default 4096 x 4096, a llama
// hidden x hidden projection), built with the formats layer's own encoders (quant_pack.hpp;
// formats::quantize for FP8 and int8) exactly as a producer stores it. Each decode writes all N
// rows to bf16 and to f32, once on one thread and once split over T threads (std::thread, one
// contiguous row range each, T = hardware threads by default), the way the scheduler splits a
// tensor over workers. GB/s are of *output* bytes (10^9 bytes/s): a decode writes the
// dequantized weight, so a memcpy of that many bytes with the same number of threads is its
// ceiling, and the ratio says how far the arithmetic (and the reads of the packed parts) keep
// it from that. Quantize on load (bf16 -> fp8 per tensor / per row / 128x128 block, int8 per
// row) is reported in GB/s of *input* bytes against memcpy of the input.
//
// Every measurement is the best of --repeat runs (single runs on a shared machine scatter).
// By default every decode run writes into the same buffer, faulted in once (a destination already
// resident); --fresh-output gives each decode run, and its memcpy, a new mapping as the load's
// arena is (runtime HostBuffer, huge pages advised), mapped and unmapped outside the timer, so
// that the page faults and the kernel's zeroing a load pays are in the figure.
// Sanity: each decode's result is compared, byte for byte, with a second decode of the same
// weight over a different (uneven) row split, and the threaded result with both; the threaded
// quantize results with the single-threaded one. A mismatch or an error exits 1, so a broken
// benchmark cannot print numbers. --quick is a smoke run for ctest.
//
// --isa avx2 (or portable) decodes GGML blocks (avx2: also MXFP4 and NVFP4) through that
// instruction set's decoder alone (quant/row_decoders.hpp), so that a CPU with AVX-512 also
// measures what a CPU with only AVX2 (or neither) gets; the other schemes, and auto, go through
// dequantize_rows' own choice.
//
// --gpu N times the CUDA decoders instead (quant_cuda.hpp, parts already in device memory),
// against a device-to-device copy of the output bytes on the same stream, and checks every
// result against the CPU decoder's bytes (a NaN only has to be a NaN).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "best_seconds.hpp"
#include "qload/formats/convert.hpp"
#include "qload/formats/convert_cuda.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_cuda.hpp"
#include "qload/formats/quant_pack.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/shape.hpp"
#include "quant/device_args.hpp"   // --isa avx2: MXFP4's and NVFP4's arguments
#include "quant/row_decoders.hpp"  // --isa: one instruction set's GGML, MXFP4 and NVFP4 decoders
#include "quant_weights.hpp"

namespace {

using qload::DType;
using qload::Errc;
using qload::Error;
using qload::fail;
using qload::Result;
using qload::Shape;
using qload::Status;
namespace fq = qload::formats;
namespace fqd = qload::formats::detail;
using qload::bench::quant::Bytes;
using qload::bench::quant::kGroupSize;
using qload::bench::quant::make_weights;
using qload::bench::quant::OwnedPart;
using qload::bench::quant::random_bf16;
using qload::bench::quant::Weight;

using qload::bench::best_seconds;

// ---- measurements --------------------------------------------------------------------------

struct Options {
  std::uint64_t rows = 4096;
  std::uint64_t cols = 4096;
  int repeat = 3;
  unsigned threads = 0;
  int device = -1;            // a CUDA device: time the GPU decoders instead of the CPU ones
  std::string only;           // decode only the schemes whose name contains this, and skip quantize
  std::string isa = "auto";   // GGML blocks: auto (dequantize_rows' choice), avx2 or portable
  bool fresh_output = false;  // a new mapping per run (as the arena) instead of one resident buffer
};

// The best of --repeat runs of run(dst), dst `shared` or (--fresh-output) a new HostBuffer of
// its size each run, allocated and released outside the timer; then last(dst) on the last run's
// destination, untimed (a check of what it wrote).
template <typename Run, typename Last>
Result<double> best_seconds_into(const Options& o, std::span<std::byte> shared, Run&& run, Last&& last) {
  double best = 1e30;
  for (int r = 0; r < o.repeat; ++r) {
    qload::HostBuffer fresh;
    std::span<std::byte> dst = shared;
    if (o.fresh_output) {
      QLOAD_ASSIGN_OR_RETURN(fresh, qload::HostBuffer::allocate(shared.size()));
      dst = std::span(fresh.data(), shared.size());
    }
    const auto start = std::chrono::steady_clock::now();
    run(dst);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (r + 1 == o.repeat) last(dst);
  }
  return best;
}

// Throughput of one operation on 1 and on T threads, with memcpy of the same bytes beside it
// (0: not measured).
struct Speed {
  double gbps_1 = 0, memcpy_1 = 0, gbps_t = 0, memcpy_t = 0;
};

nlohmann::json speed_json(const Speed& s) {
  return {{"gbps_1", s.gbps_1}, {"memcpy_gbps_1", s.memcpy_1}, {"gbps_t", s.gbps_t}, {"memcpy_gbps_t", s.memcpy_t}};
}

// Runs body(i, begin, end) for `parts` contiguous ranges i of [0, n) whose boundaries are
// multiples of `align`, one std::thread each (the spawn is part of what is timed, as a pool
// wake-up would be); empty ranges are skipped.
void parallel_ranges(std::uint64_t n, unsigned parts, std::uint64_t align,
                     const std::function<void(unsigned, std::uint64_t, std::uint64_t)>& body) {
  std::vector<std::thread> threads;
  const std::uint64_t units = (n + align - 1) / align;
  for (unsigned i = 0; i < parts; ++i) {
    const std::uint64_t begin = std::min(n, units * i / parts * align);
    const std::uint64_t end = std::min(n, units * (i + 1) / parts * align);
    if (begin < end) threads.emplace_back(body, i, begin, end);
  }
  for (std::thread& t : threads) t.join();
}

// The first failure among per-thread results.
Status first_failure(std::vector<Status>& results) {
  for (Status& s : results)
    if (!s) return s;
  return {};
}

// memcpy of `bytes` from src to dst (or, --fresh-output, to new mappings of that size), on 1 and
// on T threads (each its own slice).
Status time_memcpy(const Options& o, const std::byte* src, std::byte* dst, std::uint64_t bytes, Speed& s) {
  const auto gbps = [bytes](double sec) { return static_cast<double>(bytes) / sec / 1e9; };
  const std::span<std::byte> shared(dst, bytes);
  const auto nothing = [](std::span<std::byte>) {};
  QLOAD_ASSIGN_OR_RETURN(const double one,
                         best_seconds_into(
                             o, shared, [&](std::span<std::byte> d) { std::memcpy(d.data(), src, bytes); }, nothing));
  QLOAD_ASSIGN_OR_RETURN(const double threaded, best_seconds_into(
                                                    o, shared,
                                                    [&](std::span<std::byte> d) {
                                                      parallel_ranges(bytes, o.threads, 4096,
                                                                      [&](unsigned, std::uint64_t b, std::uint64_t e) {
                                                                        std::memcpy(d.data() + b, src + b, e - b);
                                                                      });
                                                    },
                                                    nothing));
  s.memcpy_1 = gbps(one);
  s.memcpy_t = gbps(threaded);
  return {};
}

// Buffers as large as the largest output (f32), faulted in once, shared by every measurement.
struct Buffers {
  Bytes out;
  Bytes check;
};

// Rows [0, N) of `w` decoded to `dtype` into `out`: in one call (bounds empty), else one call
// per range between consecutive `bounds`, on a thread each when `threaded`.
// Rows [begin, end) of `w` to `dtype` at `out`: through dequantize_rows, or for GGML blocks with
// `isa` avx2 or portable through that decoder alone.
Status decode_range(const Weight& w, std::span<const fq::PartBytes> views, std::string_view isa, std::uint64_t begin,
                    std::uint64_t end, DType dtype, std::span<std::byte> out) {
  const fq::QuantScheme scheme = w.t.params.scheme;
  if (isa == "avx2" && (scheme == fq::QuantScheme::kMxfp4 || scheme == fq::QuantScheme::kNvfp4)) {
    // The parts are host memory here, so the device kernels' arguments describe them as they are.
    std::vector<const std::byte*> parts;
    for (const fq::PartBytes& v : views) parts.push_back(v.bytes.data());
    QLOAD_ASSIGN_OR_RETURN(const fqd::DequantArgs a,
                           fqd::describe_dequantize(w.t, views, parts, begin, end, dtype, out.data()));
    const bool decoded =
        scheme == fq::QuantScheme::kNvfp4
            ? fqd::decode_nvfp4_rows_avx2(a, begin, end, dtype, out.data())
            : fqd::decode_mxfp4_rows_avx2(a.codes, a.scale_codes, a.cols, begin, end, dtype, out.data());
    if (!decoded) return fail(Errc::kUnsupported, fmt::format("{}: this CPU has no AVX2 decoder for it", w.name));
    return {};
  }
  if (isa == "auto" || scheme != fq::QuantScheme::kGgml) return fq::dequantize_rows(w.t, views, begin, end, dtype, out);
  const auto* blocks = reinterpret_cast<const std::uint8_t*>(views.front().bytes.data());
  const std::uint64_t row_bytes = views.front().bytes.size() / w.t.rows;
  // The detail decoders write rows [begin, end) from `out` on, reading row n at blocks + n * row_bytes.
  if (isa == "portable")
    return fqd::decode_block_rows_portable(w.t.params.ggml_type, blocks, row_bytes, w.t.cols, begin, end, dtype,
                                           out.data());
  if (!fqd::decode_block_rows_avx2(w.t.params.ggml_type, blocks, row_bytes, w.t.cols, begin, end, dtype, out.data()))
    return fail(Errc::kUnsupported, fmt::format("{}: this CPU has no AVX2 decoder for it", w.name));
  return {};
}

Status decode(const Options& o, const Weight& w, std::span<const fq::PartBytes> views, DType dtype,
              const std::vector<std::uint64_t>& bounds, bool threaded, std::span<std::byte> out) {
  const std::uint64_t row_bytes = w.t.cols * qload::dtype_info(dtype).block_bytes;
  std::vector<Status> results(bounds.size() - 1);
  const auto run = [&](std::size_t i) {
    results[i] = decode_range(w, views, o.isa, bounds[i], bounds[i + 1], dtype,
                              out.subspan(bounds[i] * row_bytes, (bounds[i + 1] - bounds[i]) * row_bytes));
  };
  if (threaded) {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i + 1 < bounds.size(); ++i) threads.emplace_back(run, i);
    for (std::thread& t : threads) t.join();
  } else {
    for (std::size_t i = 0; i + 1 < bounds.size(); ++i) run(i);
  }
  return first_failure(results);
}

// The timed threaded split: T equal row ranges. The check split shares no inner boundary with
// it or with the single call: rows [0, 1), [1, N/3 + 5), [N/3 + 5, N).
std::vector<std::uint64_t> even_bounds(std::uint64_t n, unsigned parts) {
  std::vector<std::uint64_t> b;
  for (unsigned i = 0; i <= parts; ++i) b.push_back(n * i / parts);
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}
std::vector<std::uint64_t> odd_bounds(std::uint64_t n) {
  std::vector<std::uint64_t> b = {0, std::min<std::uint64_t>(1, n), std::min(n, n / 3 + 5), n};
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}

Result<Speed> time_decode(const Options& o, const Weight& w, DType dtype, Buffers& buf) {
  const std::vector<fq::PartBytes> views = w.views();
  const std::uint64_t bytes = w.t.rows * w.t.cols * qload::dtype_info(dtype).block_bytes;
  const std::span<std::byte> out(buf.out.data(), bytes);
  const std::span<std::byte> check(buf.check.data(), bytes);
  const auto gbps = [bytes](double sec) { return static_cast<double>(bytes) / sec / 1e9; };
  const auto mismatch = [&](std::span<const std::byte> got, std::string_view which) -> Status {
    if (std::memcmp(got.data(), check.data(), bytes) == 0) return {};
    return fail(Errc::kInternal, fmt::format("{} -> {}: the {} decode differs from the decode split at other rows",
                                             w.name, qload::dtype_name(dtype), which));
  };
  Status status;  // the first failure of a timed run or of the last run's check
  const auto timed = [&](const std::vector<std::uint64_t>& bounds, bool threaded) {
    return [&, bounds, threaded](std::span<std::byte> dst) {
      if (status) status = decode(o, w, views, dtype, bounds, threaded, dst);
    };
  };
  const auto checked = [&](std::string_view which) {
    return [&, which](std::span<std::byte> dst) {
      if (status) status = mismatch(dst, which);
    };
  };

  std::memset(check.data(), 0xA5, bytes);  // a decode that writes nothing cannot match
  QLOAD_TRY(decode(o, w, views, dtype, odd_bounds(w.t.rows), false, check));
  Speed s;
  QLOAD_ASSIGN_OR_RETURN(const double one,
                         best_seconds_into(o, out, timed({0, w.t.rows}, false), checked("single-threaded")));
  QLOAD_TRY(status);
  std::memset(out.data(), 0x5A, bytes);
  QLOAD_ASSIGN_OR_RETURN(const double threaded,
                         best_seconds_into(o, out, timed(even_bounds(w.t.rows, o.threads), true), checked("threaded")));
  QLOAD_TRY(status);
  s.gbps_1 = gbps(one);
  s.gbps_t = gbps(threaded);
  QLOAD_TRY(time_memcpy(o, check.data(), out.data(), bytes, s));
  return s;
}

// Quantizes rows [r0, r1) of the bf16 [N, K] `in` into the matching rows of `weight` and of
// `scale` (block rows for kFp8Block: r0 and r1 are multiples of 128 or N; the one scale for
// kFp8Tensor, which is only ever called on all rows).
Status quantize_rows(std::span<const std::byte> in, std::uint64_t k, fq::QuantizeTarget target, std::uint64_t r0,
                     std::uint64_t r1, std::span<std::byte> weight, std::span<std::byte> scale) {
  if (target == fq::QuantizeTarget::kFp8Tensor)
    return fq::quantize(in.subspan(r0 * k * 2, (r1 - r0) * k * 2), DType::kBF16, r1 - r0, k, target,
                        weight.subspan(r0 * k, (r1 - r0) * k), scale);
  const bool block = target == fq::QuantizeTarget::kFp8Block;
  const std::uint64_t s0 = block ? r0 / 128 : r0;
  const std::uint64_t s1 = block ? (r1 + 127) / 128 : r1;
  const std::uint64_t scale_cols = block ? (k + 127) / 128 : 1;
  return fq::quantize(in.subspan(r0 * k * 2, (r1 - r0) * k * 2), DType::kBF16, r1 - r0, k, target,
                      weight.subspan(r0 * k, (r1 - r0) * k),
                      scale.subspan(s0 * scale_cols * 4, (s1 - s0) * scale_cols * 4));
}

// Quantize bf16 [N, K] to `target`: one call on one thread; on T threads, row ranges (multiples
// of 128 rows for blocks, so no block straddles two ranges) side by side, checked equal to the
// single call. A per-tensor scale needs the whole tensor's amax first, so no threaded figure.
Result<Speed> time_quantize(const Options& o, fq::QuantizeTarget target, const Bytes& in, Buffers& buf) {
  QLOAD_ASSIGN_OR_RETURN(const fq::QuantizedLayout layout, fq::quantized_layout(o.rows, o.cols, target));
  Bytes scale(layout.scale_bytes);
  Bytes scale_t(layout.scale_bytes);
  const std::span<std::byte> weight(buf.out.data(), layout.weight_bytes);
  const std::span<std::byte> weight_t(buf.check.data(), layout.weight_bytes);
  const auto gbps = [&](double sec) { return static_cast<double>(in.size()) / sec / 1e9; };
  Status status;
  Speed sp;
  sp.gbps_1 = gbps(best_seconds(o.repeat, [&] {
    if (status) status = quantize_rows(in, o.cols, target, 0, o.rows, weight, scale);
  }));
  QLOAD_TRY(status);
  if (target != fq::QuantizeTarget::kFp8Tensor) {
    const std::uint64_t align = target == fq::QuantizeTarget::kFp8Block ? 128 : 1;
    std::memset(weight_t.data(), 0x5A, weight_t.size());
    sp.gbps_t = gbps(best_seconds(o.repeat, [&] {
      std::vector<Status> results(o.threads);
      parallel_ranges(o.rows, o.threads, align, [&](unsigned i, std::uint64_t r0, std::uint64_t r1) {
        results[i] = quantize_rows(in, o.cols, target, r0, r1, weight_t, scale_t);
      });
      if (status) status = first_failure(results);
    }));
    QLOAD_TRY(status);
    if (std::memcmp(weight.data(), weight_t.data(), weight.size()) != 0 || scale != scale_t)
      return fail(Errc::kInternal, fmt::format("quantize bf16 -> {}: the threaded result differs from the single call",
                                               fq::quantize_target_name(target)));
  }
  Options resident = o;  // quantize writes into the shared buffers: its memcpy does too
  resident.fresh_output = false;
  QLOAD_TRY(time_memcpy(resident, in.data(), buf.out.data(), in.size(), sp));
  return sp;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "unknown";
  return fmt::format("{} {} {}", a, b, c);
}

std::string ratio(double a, double b) {
  return b > 0 && a > 0 ? fmt::format("{:.2f}", a / b) : "-";
}
std::string gbps_text(double v) {
  return v > 0 ? fmt::format("{:.2f}", v) : "-";
}

void print_row(std::string_view name, std::string_view out, std::string_view bits, const Speed& s) {
  fmt::print("{:<26} {:<4} {:>6} {:>7} {:>7} {:>6} {:>7} {:>7} {:>6}\n", name, out, bits, gbps_text(s.gbps_1),
             gbps_text(s.memcpy_1), ratio(s.gbps_1, s.memcpy_1), gbps_text(s.gbps_t), gbps_text(s.memcpy_t),
             ratio(s.gbps_t, s.memcpy_t));
}

Status run_decodes(const Options& o, std::span<const Weight> weights, Buffers& buf, nlohmann::json& report) {
  fmt::print("\ndecode (dequantize_rows): GB/s of output; ratio = decode / memcpy of the same bytes, same threads\n");
  fmt::print("{:<26} {:<4} {:>6} {:>7} {:>7} {:>6} {:>7} {:>7} {:>6}\n", "scheme", "out", "bits/w", "1 thr", "memcpy",
             "ratio", fmt::format("{} thr", o.threads), "memcpy", "ratio");
  for (const Weight& w : weights) {
    const double bits_per_weight = static_cast<double>(w.stored_bytes()) * 8 / static_cast<double>(o.rows * o.cols);
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      QLOAD_ASSIGN_OR_RETURN(const Speed s, time_decode(o, w, dtype, buf));
      print_row(w.name, dtype == DType::kBF16 ? "bf16" : "f32", fmt::format("{:.2f}", bits_per_weight), s);
      nlohmann::json row = speed_json(s);
      row["scheme"] = w.name;
      row["out_dtype"] = qload::dtype_name(dtype);
      row["stored_bytes"] = w.stored_bytes();
      row["out_bytes"] = o.rows * o.cols * qload::dtype_info(dtype).block_bytes;
      report["decode"].push_back(std::move(row));
    }
  }
  return {};
}

// ---- on a GPU (--device cuda:N) ------------------------------------------------------------

// One weight's parts in device memory (an allocation each, so every pointer is aligned).
struct DeviceParts {
  std::vector<qload::cuda::DeviceBuffer> buffers;
  std::vector<const std::byte*> pointers;
};

Result<DeviceParts> upload(const Weight& w, const qload::cuda::Stream& stream) {
  DeviceParts d;
  for (const OwnedPart& p : w.parts) {
    QLOAD_ASSIGN_OR_RETURN(qload::cuda::DeviceBuffer b,
                           qload::cuda::DeviceBuffer::allocate(stream.device(), p.bytes.size()));
    // Untimed set-up from pageable vectors: a synchronous copy (an async one would be staged
    // synchronously by the driver anyway, and the simulator reports it).
    QLOAD_TRY(qload::cuda::copy_to_device(b.data(), p.bytes.data(), p.bytes.size(), stream.device()));
    d.pointers.push_back(b.data());
    d.buffers.push_back(std::move(b));
  }
  QLOAD_TRY(stream.synchronize());
  return d;
}

// Seconds per call of `enqueue` (which launches work on `stream`): `calls` back-to-back launches
// and one synchronize, best of --repeat, after one untimed warm-up.
Result<double> device_seconds(const Options& o, const qload::cuda::Stream& stream, int calls,
                              const std::function<Status()>& enqueue) {
  QLOAD_TRY(enqueue());
  QLOAD_TRY(stream.synchronize());
  Status status;
  const double best = best_seconds(o.repeat, [&] {
    for (int i = 0; i < calls && status; ++i) status = enqueue();
    if (status) status = stream.synchronize();
  });
  QLOAD_TRY(status);
  return best / calls;
}

// Element-wise equality, where two NaNs are equal (device NaNs are canonical, docs/formats.md).
bool same_decode(std::span<const std::byte> a, std::span<const std::byte> b, DType dtype) {
  const std::size_t e = qload::dtype_info(dtype).block_bytes;
  for (std::size_t i = 0; i < a.size(); i += e) {
    if (std::memcmp(a.data() + i, b.data() + i, e) == 0) continue;
    std::uint32_t x = 0, y = 0;
    std::memcpy(&x, a.data() + i, e);
    std::memcpy(&y, b.data() + i, e);
    const std::uint32_t mag = e == 4 ? 0x7fffffffu : 0x7fffu;
    const std::uint32_t inf = e == 4 ? 0x7f800000u : dtype == DType::kBF16 ? 0x7f80u : 0x7c00u;
    if ((x & mag) <= inf || (y & mag) <= inf) return false;
  }
  return true;
}

// Every weight decoded by the CUDA kernels (quant_cuda.hpp) from parts already in device
// memory, to bf16 and f32; against a device-to-device copy of the output bytes on the same
// stream (cudaMemcpyAsync). Each result is checked against the CPU decoder's bytes.
Status run_gpu_decodes(const Options& o, std::span<const Weight> weights, int device, Buffers& buf,
                       nlohmann::json& report) {
  namespace cuda = qload::cuda;
  QLOAD_ASSIGN_OR_RETURN(const cuda::Stream stream, cuda::Stream::create(device));
  const std::uint64_t max_bytes = o.rows * o.cols * 4;
  QLOAD_ASSIGN_OR_RETURN(const cuda::DeviceBuffer out, cuda::DeviceBuffer::allocate(device, max_bytes));
  QLOAD_ASSIGN_OR_RETURN(const cuda::DeviceBuffer copy, cuda::DeviceBuffer::allocate(device, max_bytes));
  constexpr int kCalls = 20;
  fmt::print(
      "\ndecode on cuda:{} (dequantize_on_device, parts in device memory): GB/s of output; ratio = decode / "
      "device-to-device copy of the output bytes\n",
      device);
  fmt::print("{:<26} {:<4} {:>6} {:>8} {:>8} {:>6}\n", "scheme", "out", "bits/w", "GB/s", "d2d", "ratio");
  for (const Weight& w : weights) {
    QLOAD_ASSIGN_OR_RETURN(const DeviceParts parts, upload(w, stream));
    const std::vector<fq::PartBytes> views = w.views();
    const double bits_per_weight = static_cast<double>(w.stored_bytes()) * 8 / static_cast<double>(o.rows * o.cols);
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      const std::uint64_t bytes = o.rows * o.cols * qload::dtype_info(dtype).block_bytes;
      QLOAD_ASSIGN_OR_RETURN(const double decode_s, device_seconds(o, stream, kCalls, [&] {
                               return fq::dequantize_on_device(w.t, views, parts.pointers, 0, w.t.rows, dtype,
                                                               out.data(), stream);
                             }));
      QLOAD_ASSIGN_OR_RETURN(const double copy_s, device_seconds(o, stream, kCalls, [&] {
                               return cuda::copy_on_device_async(copy.data(), out.data(), bytes, stream);
                             }));
      // The decode's bytes against the CPU's.
      const std::span<std::byte> got(buf.out.data(), bytes);
      const std::span<std::byte> want(buf.check.data(), bytes);
      QLOAD_TRY(cuda::copy_to_host(got.data(), out.data(), bytes, device));
      QLOAD_TRY(fq::dequantize_rows(w.t, views, 0, w.t.rows, dtype, want));
      if (!same_decode(got, want, dtype))
        return fail(Errc::kInternal, fmt::format("{} -> {}: the GPU decode differs from the CPU decode", w.name,
                                                 qload::dtype_name(dtype)));
      const double gbps = static_cast<double>(bytes) / decode_s / 1e9;
      const double d2d = static_cast<double>(bytes) / copy_s / 1e9;
      fmt::print("{:<26} {:<4} {:>6.2f} {:>8.1f} {:>8.1f} {:>6}\n", w.name, dtype == DType::kBF16 ? "bf16" : "f32",
                 bits_per_weight, gbps, d2d, ratio(gbps, d2d));
      report["gpu_decode"].push_back({{"scheme", w.name},
                                      {"out_dtype", qload::dtype_name(dtype)},
                                      {"stored_bytes", w.stored_bytes()},
                                      {"out_bytes", bytes},
                                      {"gbps", gbps},
                                      {"d2d_gbps", d2d}});
    }
  }
  return {};
}

Status run_quantizes(const Options& o, Buffers& buf, nlohmann::json& report) {
  fmt::print(
      "\nquantize on load (formats::quantize, bf16 in): GB/s of input; ratio = quantize / memcpy of the input\n");
  const Bytes in = random_bf16(o.rows, o.cols, 41);
  for (fq::QuantizeTarget target : {fq::QuantizeTarget::kFp8Tensor, fq::QuantizeTarget::kFp8Row,
                                    fq::QuantizeTarget::kFp8Block, fq::QuantizeTarget::kInt8Row}) {
    QLOAD_ASSIGN_OR_RETURN(const Speed s, time_quantize(o, target, in, buf));
    print_row(fmt::format("bf16 -> {}", fq::quantize_target_name(target)), "", "", s);
    nlohmann::json row = speed_json(s);
    row["target"] = fq::quantize_target_name(target);
    row["in_bytes"] = in.size();
    report["quantize"].push_back(std::move(row));
  }
  return {};
}

Status run(const Options& o, const std::string& json_path) {
  const std::string loadavg = load_average();
  fmt::print(
      "[{} x {}] weight, best of {} runs, T = {} threads, GGML blocks through the {} decoder, output to {}, load "
      "average {} (at start)\n",
      o.rows, o.cols, o.repeat, o.threads, o.isa == "auto" ? "library's choice of" : o.isa,
      o.fresh_output ? "a new mapping each run" : "one resident buffer", loadavg);
  QLOAD_ASSIGN_OR_RETURN(const std::vector<Weight> weights, make_weights(o.rows, o.cols, o.only));
  Buffers buf{Bytes(o.rows * o.cols * 4), Bytes(o.rows * o.cols * 4)};
  std::memset(buf.out.data(), 0, buf.out.size());  // fault the pages in before timing
  std::memset(buf.check.data(), 0, buf.check.size());
  nlohmann::json report = {{"schema", "qload.quant_bench/1"},
                           {"rows", o.rows},
                           {"cols", o.cols},
                           {"repeat", o.repeat},
                           {"threads", o.threads},
                           {"ggml_isa", o.isa},
                           {"fresh_output", o.fresh_output},
                           {"loadavg_start", loadavg}};
  if (o.device >= 0) {
    QLOAD_TRY(run_gpu_decodes(o, weights, o.device, buf, report));
  } else {
    QLOAD_TRY(run_decodes(o, weights, buf, report));
    if (o.only.empty()) QLOAD_TRY(run_quantizes(o, buf, report));
  }
  report["loadavg_end"] = load_average();
  fmt::print("\nevery decode matched a second decode over another row split; load average {} (at end)\n",
             load_average());
  if (json_path.empty()) return {};
  std::ofstream f(json_path);
  f << report.dump(2) << '\n';
  if (!f) return fail(Error(Errc::kIo, "cannot write the JSON report").with_file(json_path));
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"qload_quant_bench: CPU decode and quantize throughput of the quantized formats against memcpy"};
  Options o;
  bool quick = false;
  std::string json_path;
  app.add_option("--rows", o.rows, "N, output features (default 4096)")->check(CLI::PositiveNumber);
  app.add_option("--cols", o.cols, "K, input features, a multiple of 128 (default 4096)")->check(CLI::PositiveNumber);
  app.add_option("--repeat", o.repeat, "runs per measurement; the best counts (default 3)")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "T, threads of the threaded runs (default: hardware threads)")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "also write the results as JSON to this file");
  app.add_flag("--quick", quick, "a smoke run: [256 x 512], 1 run");
  app.add_option("--only", o.only, "decode only the schemes whose name contains this (\"gguf\"), no quantize");
  app.add_option("--isa", o.isa,
                 "GGML blocks through one CPU decoder: auto (the library's choice), avx2 or portable; avx2 also "
                 "takes MXFP4 and NVFP4")
      ->check(CLI::IsMember({"auto", "avx2", "portable"}));
  app.add_flag("--fresh-output", o.fresh_output,
               "CPU decodes and their memcpy: each run writes into a new mapping, as a load's arena does (page faults "
               "timed), not into one resident buffer");
  app.add_option("--gpu", o.device, "time the CUDA decoders on this device instead of the CPU ones")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    o.rows = 256;
    o.cols = 512;
    o.repeat = 1;
  }
  if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
  if (o.cols % kGroupSize != 0 || o.rows % 8 != 0) {
    fmt::print(stderr, "--cols must be a multiple of {} and --rows of 8 (GPTQ / AWQ packing)\n", kGroupSize);
    return 64;
  }
  if (Status s = run(o, json_path); !s) {
    fmt::print(stderr, "qload_quant_bench: FAILED: {}\n", s.error().to_string());
    return 1;
  }
  return 0;
}
