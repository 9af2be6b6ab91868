// The caps every format's header is held to (docs/security.md P4): one place, so safetensors,
// GGUF and whatever comes next promise the same bounds.
#pragma once

#include <cstdint>

namespace qload::formats {

// Header bytes: safetensors' own cap on N (the reference rejects larger headers); GGUF's
// key-values and tensor infos together.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// Entries: tensors (safetensors), tensors plus key-values (GGUF), and a GGUF array's length.
// Checked before anything is stored, so a header of millions of tiny entries costs bounded
// memory and time.
inline constexpr std::uint64_t kMaxHeaderEntries = 10'000'000;

}  // namespace qload::formats
