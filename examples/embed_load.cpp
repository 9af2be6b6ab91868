// Embedding the loader, the way an inference server would: open a checkpoint, load it into
// host memory (or map it), look tensors up by name and use their bytes, then let the Model go.
//
//   qload_example_embed_load MODEL [--mmap] [--digests] [--direct-min BYTES] [--trace FILE]
//
// Prints the load report and the first values of a few tensors.
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "qload/scheduler/load.hpp"

namespace {

using qload::DType;

// Widens a 16-bit float (IEEE half or bfloat16) to float, enough for printing.
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    while ((mant & 0x400u) == 0) {  // normalise a subnormal
      mant <<= 1;
      --exp;
    }
    ++exp;
    mant &= 0x3ffu;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

// The value of element `i` as text; tensors of other dtypes print their first bytes in hex.
std::string element(const qload::scheduler::DeviceTensor& t, std::uint64_t i) {
  const std::byte* p = t.data;
  auto load = [&](auto v) {
    std::memcpy(&v, p + i * sizeof(v), sizeof(v));
    return v;
  };
  char buf[64];
  switch (t.dtype) {
    case DType::kF32: std::snprintf(buf, sizeof buf, "%g", load(float{})); break;
    case DType::kF64: std::snprintf(buf, sizeof buf, "%g", load(double{})); break;
    case DType::kF16: std::snprintf(buf, sizeof buf, "%g", half_to_float(load(std::uint16_t{}))); break;
    case DType::kBF16:
      std::snprintf(buf, sizeof buf, "%g", std::bit_cast<float>(std::uint32_t{load(std::uint16_t{})} << 16));
      break;
    case DType::kI32: std::snprintf(buf, sizeof buf, "%" PRId32, load(std::int32_t{})); break;
    case DType::kI64: std::snprintf(buf, sizeof buf, "%" PRId64, load(std::int64_t{})); break;
    default: std::snprintf(buf, sizeof buf, "0x%02x", static_cast<unsigned>(p[i])); break;
  }
  return buf;
}

void print_tensor(const qload::scheduler::DeviceTensor& t) {
  std::printf("%s %s %s on %s:", t.name.c_str(), std::string(qload::dtype_name(t.dtype)).c_str(),
              t.shape.to_string().c_str(), t.device.c_str());
  const std::uint64_t elem_bytes = qload::dtype_info(t.dtype).bits >= 8 ? qload::dtype_info(t.dtype).bits / 8 : 1;
  const std::uint64_t n = t.nbytes / elem_bytes;
  for (std::uint64_t i = 0; i < n && i < 4; ++i) std::printf(" %s", element(t, i).c_str());
  std::printf("%s\n", n > 4 ? " ..." : "");
}

int fail_with(const qload::Error& error) {
  std::fprintf(stderr, "qload: %s\n", error.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [--mmap] [--digests] [--direct-min BYTES] [--trace FILE]\n", argv[0]);
    return 64;
  }
  qload::scheduler::LoadOptions options;
  options.log = qload::Logger::to_stderr(qload::LogLevel::kWarn);
  qload::TraceRecorder trace;
  std::string trace_path;
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--mmap") options.plan.mode = qload::scheduler::LoadMode::kMmap;
    // Nothing is checked against digests here, so none are computed unless asked for.
    if (arg == "--digests") options.digests = qload::scheduler::LoadOptions::Digests::kOn;
    if (arg == "--direct-min" && i + 1 < argc) options.plan.direct_min_bytes = std::stoull(argv[++i]);
    if (arg == "--trace" && i + 1 < argc) trace_path = argv[++i];
  }
  // The call's hooks (trace, progress, streaming, cancellation) travel beside the options.
  qload::scheduler::LoadContext context;
  if (!trace_path.empty()) context.trace = &trace;

  // 1. Open: the format driver validates every header and lists the tensors.
  auto catalog = qload::scheduler::open_source(argv[1]);
  if (!catalog) return fail_with(catalog.error());
  // 2. Plan: arena offsets and read chunks, checked before any byte is read.
  auto plan = qload::scheduler::make_plan(*catalog, options.plan);
  if (!plan) return fail_with(plan.error());
  // 3. Load: a complete Model, or an error with everything released.
  auto model = qload::scheduler::load(*catalog, *plan, options, context);
  if (!model) return fail_with(model.error());

  std::fputs(model->report().summary().c_str(), stdout);
  std::size_t shown = 0;
  for (const qload::scheduler::DeviceTensor& t : model->tensors()) {
    if (shown++ == 3) break;
    print_tensor(t);
  }
  if (!trace_path.empty())
    if (auto written = trace.write(trace_path); !written) return fail_with(written.error());
  return 0;  // the Model's destructor frees its arena (or unmaps its files)
}
