// CPU side of convert.hpp. The arithmetic lives in convert_bits.hpp (shared with the CUDA
// kernels); this file validates spans and runs that arithmetic in loops the compiler
// vectorises.
#include "qload/formats/convert.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "convert_bits.hpp"

namespace qload::formats {
namespace {

// safetensors stores little-endian; the loops copy elements in native order.
static_assert(std::endian::native == std::endian::little, "convert() assumes a little-endian host");

bool is_float_dtype(DType d) noexcept {
  return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32;
}

std::uint16_t f16_to_bf16(std::uint16_t h) noexcept {
  return bits::f32_to_bf16(bits::f16_to_f32(h));
}
std::uint16_t bf16_to_f16(std::uint16_t h) noexcept {
  return bits::f32_to_f16(bits::bf16_to_f32(h));
}

// One element at a time through memcpy: `in` and `out` may sit at any byte offset (a tensor
// inside a file buffer), and GCC turns these copies into unaligned vector loads and stores.
// __restrict lets it vectorise without a run-time overlap check (convert() rejects
// overlapping spans except for the identity).
template <typename In, typename Out, Out (*Fn)(In)>
[[gnu::always_inline]] inline void convert_loop(const std::byte* __restrict in, std::byte* __restrict out,
                                                std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    In x;
    std::memcpy(&x, in + i * sizeof(In), sizeof(In));
    const Out y = Fn(x);
    std::memcpy(out + i * sizeof(Out), &y, sizeof(Out));
  }
}

// Each loop is compiled three times (GCC function multi-versioning, picked once at load time
// by an ifunc that checks the CPU's ISA level): for x86-64-v4 (AVX-512: masks, 16-to-8-bit
// narrowing moves; 1.3-1.8x over AVX2 on the arithmetic-bound pairs), for AVX2 (per-element
// shifts and 32-to-16-bit packs; 2-4x over baseline) and for baseline x86-64, so the binary
// runs on any x86-64. All are the same integer arithmetic, so they give the same bits
// (checked once over all 2^32 f32 inputs and all 16-bit inputs when this was written).
// One version under ThreadSanitizer: it instruments the ifunc resolvers, which run during
// relocation, before its runtime is up (a crash at start-up).
#if defined(QLOAD_HAS_TSAN)
#define QLOAD_CONVERT_CLONES
#else
#define QLOAD_CONVERT_CLONES [[gnu::target_clones("arch=x86-64-v4", "avx2", "default")]]
#endif

QLOAD_CONVERT_CLONES void run_f32_to_bf16(const std::byte* in, std::byte* out, std::size_t count) {
  convert_loop<std::uint32_t, std::uint16_t, bits::f32_to_bf16>(in, out, count);
}
QLOAD_CONVERT_CLONES void run_f32_to_f16(const std::byte* in, std::byte* out, std::size_t count) {
  convert_loop<std::uint32_t, std::uint16_t, bits::f32_to_f16>(in, out, count);
}
QLOAD_CONVERT_CLONES void run_bf16_to_f32(const std::byte* in, std::byte* out, std::size_t count) {
  convert_loop<std::uint16_t, std::uint32_t, bits::bf16_to_f32>(in, out, count);
}
QLOAD_CONVERT_CLONES void run_f16_to_f32(const std::byte* in, std::byte* out, std::size_t count) {
  convert_loop<std::uint16_t, std::uint32_t, bits::f16_to_f32>(in, out, count);
}
QLOAD_CONVERT_CLONES void run_f16_to_bf16(const std::byte* in, std::byte* out, std::size_t count) {
  convert_loop<std::uint16_t, std::uint16_t, f16_to_bf16>(in, out, count);
}
QLOAD_CONVERT_CLONES void run_bf16_to_f16(const std::byte* in, std::byte* out, std::size_t count) {
  convert_loop<std::uint16_t, std::uint16_t, bf16_to_f16>(in, out, count);
}

#undef QLOAD_CONVERT_CLONES

bool overlaps(std::span<const std::byte> a, std::span<std::byte> b) noexcept {
  // Compared as integers: relational operators on pointers into different objects are
  // unspecified.
  const auto a_begin = reinterpret_cast<std::uintptr_t>(a.data());
  const auto b_begin = reinterpret_cast<std::uintptr_t>(b.data());
  return a_begin < b_begin + b.size() && b_begin < a_begin + a.size();
}

}  // namespace

bool is_convertible(DType from, DType to) noexcept {
  return is_float_dtype(from) && is_float_dtype(to);
}

std::uint64_t converted_bytes(std::uint64_t input_bytes, DType from, DType to) noexcept {
  // Outside the contract (an unsupported pair) the answer is 0 bytes, which no caller can
  // mistake for room to write into; a result past 2^64 saturates instead of wrapping.
  if (!is_convertible(from, to)) return 0;
  const std::uint64_t count = input_bytes / dtype_info(from).block_bytes;
  std::uint64_t out = 0;
  if (__builtin_mul_overflow(count, std::uint64_t{dtype_info(to).block_bytes}, &out)) return UINT64_MAX;
  return out;
}

Status convert(std::span<const std::byte> in, DType from, std::span<std::byte> out, DType to) {
  if (!is_convertible(from, to))
    return fail(Errc::kInvalidArgument, fmt::format("cannot convert {} to {}: only F16, BF16 and F32 convert",
                                                    dtype_name(from), dtype_name(to)));
  const std::size_t in_size = dtype_info(from).block_bytes;
  const std::size_t out_size = dtype_info(to).block_bytes;
  if (in.size() % in_size != 0)
    return fail(Errc::kInvalidArgument,
                fmt::format("{} input bytes are not a whole number of {} elements", in.size(), dtype_name(from)));
  const std::size_t count = in.size() / in_size;
  if (out.size() / out_size != count || out.size() % out_size != 0)
    return fail(Errc::kInvalidArgument, fmt::format("{} {} elements need {} output bytes of {}, got {}", count,
                                                    dtype_name(from), count * out_size, dtype_name(to), out.size()));
  if (count == 0) return {};
  if (from == to) {
    std::memmove(out.data(), in.data(), in.size());  // memmove: converting in place is allowed here
    return {};
  }
  // The loops are compiled with __restrict: overlapping spans would give garbage, not an
  // in-place conversion.
  if (overlaps(in, out)) return fail(Errc::kInvalidArgument, "convert: input and output overlap");
  void (*run)(const std::byte*, std::byte*, std::size_t) = nullptr;
  if (from == DType::kF32) run = to == DType::kBF16 ? run_f32_to_bf16 : run_f32_to_f16;
  if (from == DType::kBF16) run = to == DType::kF32 ? run_bf16_to_f32 : run_bf16_to_f16;
  if (from == DType::kF16) run = to == DType::kF32 ? run_f16_to_f32 : run_f16_to_bf16;
  run(in.data(), out.data(), count);
  return {};
}

std::uint16_t f32_to_bf16_bits(std::uint32_t f32_bits) noexcept {
  return bits::f32_to_bf16(f32_bits);
}
std::uint16_t f32_to_f16_bits(std::uint32_t f32_bits) noexcept {
  return bits::f32_to_f16(f32_bits);
}
std::uint32_t bf16_to_f32_bits(std::uint16_t bf16_bits) noexcept {
  return bits::bf16_to_f32(bf16_bits);
}
std::uint32_t f16_to_f32_bits(std::uint16_t f16_bits) noexcept {
  return bits::f16_to_f32(f16_bits);
}

}  // namespace qload::formats
