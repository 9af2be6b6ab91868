// XXH3's accumulation over more bytes, with the widest vector unit this CPU has (AVX2 where
// present, else the baseline SSE2 the build targets). Every implementation gives the same digest
// (XXH3's specification; digest_test checks it on odd lengths and splits), so states filled by
// either mix freely.
#pragma once

#include <cstddef>

#include <xxhash.h>  // XXH_INLINE_ALL (set by the build)

namespace qload::io::detail {

void xxh3_update(XXH3_state_t* state, const void* bytes, std::size_t size) noexcept;

}  // namespace qload::io::detail
