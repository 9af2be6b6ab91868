// XXH3 with AVX2 chosen at run time. The build targets baseline x86-64, where xxhash compiles
// its SSE2 kernel: measured on the 2-vCPU VM, hashing a 2 GiB buffer ran at 3.8-4.1 GB/s with
// SSE2 and 6.5-11.9 GB/s with AVX2, and a warm load spends about as long hashing as copying.
// xxhash's own dispatcher (xxh_x86dispatch.c) is not in Debian's headers, so this file does
// what it does for the one call that matters: xxhash's AVX2 kernels are compiled with the target
// attribute (XXH_DISPATCH_AVX2, XXH_TARGET_AVX2), and the generic update loop is inlined into a
// function of that target. Nothing here is built with -mavx2, so no shared inline function is
// emitted with AVX2 instructions (as formats/src/quant/rows_avx2.cpp explains).
#if defined(__x86_64__)
#include <immintrin.h>  // xxhash includes it only when AVX2 is its compile-time choice
#define XXH_DISPATCH_AVX2 1
#define XXH_TARGET_AVX2 __attribute__((target("avx2")))
#endif
#include "xxh3_update.hpp"

namespace qload::io::detail {

#if defined(__x86_64__)
namespace {

__attribute__((target("avx2"))) void update_avx2(XXH3_state_t* state, const void* bytes, std::size_t size) {
  (void)XXH3_update(state, static_cast<const xxh_u8*>(bytes), size, XXH3_accumulate_512_avx2, XXH3_scrambleAcc_avx2);
}

bool has_avx2() noexcept {
  static const bool avx2 = __builtin_cpu_supports("avx2");  // a fact of the CPU, read once
  return avx2;
}

}  // namespace
#endif

void xxh3_update(XXH3_state_t* state, const void* bytes, std::size_t size) noexcept {
#if defined(__x86_64__)
  if (has_avx2()) {
    update_avx2(state, bytes, size);
    return;
  }
#endif
  (void)XXH3_128bits_update(state, bytes, size);
}

}  // namespace qload::io::detail
