// XXH3 digests: streaming over bytes as they arrive, and whole files read through a Reader.
//
// One XXH3 state yields both the 64-bit and the 128-bit digest (they share the accumulation
// and differ only in finalisation). A whole file's digests equal `xxhsum -H3` (XXH3 64) and
// `xxhsum -H2` (XXH128) of that file; tests check exactly that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "qload/io/reader.hpp"
#include "qload/runtime/error.hpp"

namespace qload::io {

struct Xxh128 {
  std::uint64_t high = 0;
  std::uint64_t low = 0;
  // 32 lowercase hex digits in canonical (big-endian) order, as xxhsum prints them.
  std::string hex() const;
  friend bool operator==(const Xxh128&, const Xxh128&) = default;
};

// 16 lowercase hex digits.
std::string hex64(std::uint64_t value);

std::uint64_t xxh3_64(std::span<const std::byte> bytes) noexcept;
Xxh128 xxh3_128(std::span<const std::byte> bytes) noexcept;

// Incremental XXH3 over bytes fed in order. Move-only (owns the hash state).
class Xxh3Stream {
 public:
  Xxh3Stream();
  Xxh3Stream(Xxh3Stream&&) noexcept;
  Xxh3Stream& operator=(Xxh3Stream&&) noexcept;
  ~Xxh3Stream();

  void update(std::span<const std::byte> bytes) noexcept;
  std::uint64_t digest64() const noexcept;
  Xxh128 digest128() const noexcept;
  std::uint64_t bytes_seen() const noexcept { return bytes_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::uint64_t bytes_ = 0;
};

// kChecksumMismatch naming `path` and `offset` if xxh3_64(bytes) != expected.
Status verify_xxh3_64(std::span<const std::byte> bytes, std::uint64_t expected, const std::string& path,
                      std::uint64_t offset);

struct FileDigest {
  std::uint64_t xxh3_64 = 0;
  Xxh128 xxh3_128;
  std::uint64_t bytes = 0;
};

struct DigestOptions {
  std::size_t chunk_bytes = std::size_t{8} << 20;  // size of each read
  std::size_t chunks_in_flight = 8;                // reads outstanding (and buffers held)
  // Called with each chunk in file order, right after it is hashed (e.g. to hash the tensors
  // inside the file in the same pass). Bytes are valid only during the call.
  std::function<void(std::uint64_t offset, std::span<const std::byte> bytes)> on_bytes;
};

// Reads file `id` through `reader` in chunks, several in flight, and hashes each chunk as
// soon as every chunk before it has been hashed (completions may arrive out of order; at
// most chunks_in_flight buffers are held). Host memory: chunk_bytes * chunks_in_flight.
Result<FileDigest> digest_file(Reader& reader, FileId id, const DigestOptions& options = {});

}  // namespace qload::io
