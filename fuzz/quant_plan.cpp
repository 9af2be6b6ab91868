// libFuzzer target: quantize, dequantize and requantize on load, planned and run through the
// decode graph (issue 45). The input picks a checkpoint (a plain safetensors weight, an FP8
// weight with its scale, or a GGUF weight of a ggml type), a weight shape whose dims may be 0
// or huge, and the load's decode policy; the file is written to a scratch folder and loaded on
// the host. The load must end in a clean Result: a crash, a sanitizer report, a hang or more
// than the fuzzer's memory limit is a bug. Data is only as large as the input (at most 1 MiB),
// so a huge weight that is not zero-element fails as truncated: the interesting shapes are the
// zero-element ones, whose other dims nothing but the planner bounds.
//
// Input: byte 0 checkpoint kind, 1 dtype / ggml type, 2 policy, 3 rank, 4..27 three dims (8
// bytes each, see dim()), 28 the FP8 scale's shape; the rest is tensor data.
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "gguf/ggml_types.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/scheduler/load.hpp"

namespace {

using namespace qload;

constexpr std::size_t kHeader = 29;
constexpr std::uint64_t kMaxData = 1 << 20;

// Small (0..512), zero, 2^k plus a little (2^62 + 16, 2^63...), or any 64-bit value.
std::uint64_t dim(const std::uint8_t* b) {
  switch (b[0] & 3) {
    case 0: return (b[1] | (b[2] << 8)) % 513;
    case 1: return 0;
    case 2: return (std::uint64_t{1} << (b[1] % 64)) + b[2] % 32;
    default: {
      std::uint64_t v;
      std::memcpy(&v, b, 8);
      return v;
    }
  }
}

// Bytes of `dims` elements of `elem_bytes` each, or none when that overflows or exceeds kMaxData.
std::optional<std::uint64_t> small_bytes(const std::vector<std::uint64_t>& dims, std::uint64_t elem_bytes,
                                         std::uint64_t block_elems = 1) {
  unsigned __int128 n = 1;
  for (const std::uint64_t d : dims) {
    n *= d;
    if (n > kMaxData * 64) return n == 0 ? std::optional<std::uint64_t>(0) : std::nullopt;
  }
  if (n % block_elems != 0) return std::nullopt;
  n = n / block_elems * elem_bytes;
  if (n > kMaxData) return std::nullopt;
  return static_cast<std::uint64_t>(n);
}

// `bytes` of data: the input's, then zeros.
std::vector<std::byte> data_of(std::span<const std::uint8_t> rest, std::uint64_t bytes) {
  std::vector<std::byte> d(bytes);
  const std::size_t n = std::min<std::size_t>(rest.size(), d.size());
  if (n > 0) std::memcpy(d.data(), rest.data(), n);
  return d;
}

std::string json_dims(const std::vector<std::uint64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

struct StTensor {
  std::string name, dtype;
  std::vector<std::uint64_t> shape;
  std::vector<std::byte> data;
};

void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors) {
  std::string header = "{";
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const StTensor& t = tensors[i];
    header += std::string(i == 0 ? "\"" : ", \"") + t.name + "\": {\"dtype\": \"" + t.dtype +
              "\", \"shape\": " + json_dims(t.shape) + ", \"data_offsets\": [" + std::to_string(offset) + ", " +
              std::to_string(offset + t.data.size()) + "]}";
    offset += t.data.size();
  }
  header += "}";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::uint64_t size = header.size();
  out.write(reinterpret_cast<const char*>(&size), 8);
  out << header;
  for (const StTensor& t : tensors)
    if (!t.data.empty())
      out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
}

void put(std::vector<std::byte>& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  out.insert(out.end(), b, b + n);
}
void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  put(out, &v, 8);
}
void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  put(out, &v, 4);
}

// One weight "blk.0.ffn_down.weight" of `type` with GGUF dims `ne` (innermost first).
void write_gguf(const std::string& path, std::uint32_t type, const std::vector<std::uint64_t>& ne,
                std::span<const std::uint8_t> rest) {
  std::vector<std::byte> g;
  put(g, "GGUF", 4);
  put_u32(g, 3);
  put_u64(g, 1);  // tensors
  put_u64(g, 0);  // key-value pairs
  const std::string name = "blk.0.ffn_down.weight";
  put_u64(g, name.size());
  put(g, name.data(), name.size());
  put_u32(g, static_cast<std::uint32_t>(ne.size()));
  for (const std::uint64_t n : ne) put_u64(g, n);
  put_u32(g, type);
  put_u64(g, 0);
  while (g.size() % 32 != 0) g.push_back(std::byte{0});
  const formats::gguf::GgmlType* t = formats::gguf::find_ggml_type(type);
  const std::optional<std::uint64_t> bytes =
      t == nullptr ? std::nullopt : small_bytes(ne, t->block_bytes, t->block_elems);
  const std::vector<std::byte> data = data_of(rest, bytes.value_or(std::min<std::uint64_t>(rest.size(), kMaxData)));
  g.insert(g.end(), data.begin(), data.end());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(g.data()), g.size());
}

constexpr std::array<const char*, 5> kStDtypes = {"F32", "BF16", "F16", "F8_E4M3", "I8"};
constexpr std::array<std::uint64_t, 5> kStSizes = {4, 2, 2, 1, 1};
// Plain (F32, F16, BF16), legacy blocks, K-quants, an IQ type, MXFP4; any other id as given.
constexpr std::array<std::uint32_t, 12> kGgmlTypes = {0, 1, 30, 2, 3, 6, 8, 10, 12, 14, 16, 39};

const std::string& scratch() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/qload-fuzz-quant-plan-XXXXXX";
    const char* made = mkdtemp(tmpl);
    if (made == nullptr) std::abort();
    return std::string(made);
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kHeader) return 0;
  const std::span<const std::uint8_t> rest(data + kHeader, size - kHeader);
  const std::uint8_t kind = data[0] % 3, policy = data[2];
  const std::size_t rank = 1 + data[3] % 3;
  std::vector<std::uint64_t> dims;
  for (std::size_t d = 0; d < rank; ++d) dims.push_back(dim(data + 4 + 8 * d));
  const std::string dir = scratch();
  std::string source = dir;
  const std::string weight = "model.layers.0.mlp.up_proj.weight";
  std::ofstream(dir + "/config.json", std::ios::trunc)
      << (kind == 1 ? R"({"model_type": "llama", "quantization_config": {"quant_method": "fbgemm_fp8"}})"
                    : R"({"model_type": "llama"})");
  if (kind == 2) {
    const std::uint32_t type = data[1] < 240 ? kGgmlTypes[data[1] % kGgmlTypes.size()] : data[1] - 200u;
    std::remove((dir + "/model.safetensors").c_str());
    write_gguf(dir + "/m.gguf", type, dims, rest);
    source = dir + "/m.gguf";
  } else {
    std::remove((dir + "/m.gguf").c_str());
    std::vector<StTensor> tensors;
    const std::size_t dt = kind == 1 ? 3 : data[1] % kStDtypes.size();
    const std::optional<std::uint64_t> bytes = small_bytes(dims, kStSizes[dt]);
    tensors.push_back(
        {.name = weight, .dtype = kStDtypes[dt], .shape = dims, .data = data_of(rest, bytes.value_or(0))});
    if (kind == 1) {  // the FP8 weight's scale: per row as fbgemm writes it, or another shape
      const std::uint64_t n = dims.size() == 2 ? dims[0] : 1;
      std::vector<std::uint64_t> scale_shape;
      switch (data[28] % 4) {
        case 0: scale_shape = {n, 1}; break;
        case 1: scale_shape = {1}; break;
        case 2: scale_shape = {n}; break;
        default: scale_shape = {static_cast<std::uint64_t>(data[28] / 4), 1}; break;
      }
      const std::optional<std::uint64_t> scale_bytes = small_bytes(scale_shape, 4);
      tensors.push_back({.name = "model.layers.0.mlp.up_proj.weight_scale",
                         .dtype = "F32",
                         .shape = scale_shape,
                         .data = std::vector<std::byte>(scale_bytes.value_or(0), std::byte{0x3c})});
    }
    write_safetensors(dir + "/model.safetensors", tensors);
  }
  scheduler::LoadOptions options;
  options.plan.devices = {Device{}};
  options.cpu_workers = 2;
  options.plan.chunk_bytes = options.staging.slot_bytes = 64 << 10;
  options.staging.total_bytes = 4 * options.staging.slot_bytes;
  if (policy & 4) options.plan.quantize = static_cast<formats::QuantizeTarget>(policy & 3);
  if (policy & 8) {
    constexpr std::array<DType, 3> kOut = {DType::kF32, DType::kBF16, DType::kF16};
    options.plan.dequantize = kOut[(policy >> 4) % 3];
  }
  auto model = scheduler::load_source(source, options);
  if (std::getenv("QLOAD_FUZZ_PRINT") != nullptr)  // what a seed reaches, for whoever writes seeds
    std::fprintf(stderr, "quant_plan: %s\n", model ? "loaded" : model.error().to_string().c_str());
  if (model)  // every tensor's bytes are its shape's in its dtype
    for (const scheduler::DeviceTensor& t : model->tensors()) {
      auto bytes = t.shape.nbytes(t.dtype);
      if (!bytes || *bytes != t.nbytes) std::abort();
    }
  return 0;
}
