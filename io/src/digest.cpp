#include "qload/io/digest.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include <fmt/format.h>
#include <xxhash.h>  // XXH_INLINE_ALL (set by the build): no library to link or carry

#include "qload/runtime/host_buffer.hpp"
#include "xxh3_update.hpp"

namespace qload::io {

std::string hex64(std::uint64_t value) {
  return fmt::format("{:016x}", value);
}
std::string Xxh128::hex() const {
  return fmt::format("{:016x}{:016x}", high, low);
}

namespace {
// Below this, the one-shot baseline functions (no state to set up) are as fast; above it, the
// stream goes through detail::xxh3_update's wider kernel. Either way the digest is the same.
constexpr std::size_t kStreamedFrom = 4096;
}  // namespace

std::uint64_t xxh3_64(std::span<const std::byte> bytes) noexcept {
  if (bytes.size() < kStreamedFrom) return XXH3_64bits(bytes.data(), bytes.size());
  XXH3_state_t state;
  (void)XXH3_64bits_reset(&state);
  detail::xxh3_update(&state, bytes.data(), bytes.size());
  return XXH3_64bits_digest(&state);
}

Xxh128 xxh3_128(std::span<const std::byte> bytes) noexcept {
  XXH128_hash_t h;
  if (bytes.size() < kStreamedFrom) {
    h = XXH3_128bits(bytes.data(), bytes.size());
  } else {
    XXH3_state_t state;
    (void)XXH3_128bits_reset(&state);
    detail::xxh3_update(&state, bytes.data(), bytes.size());
    h = XXH3_128bits_digest(&state);
  }
  return {h.high64, h.low64};
}

struct Xxh3Stream::State {
  XXH3_state_t xxh;
};

Xxh3Stream::Xxh3Stream() : state_(std::make_unique<State>()) {
  XXH3_128bits_reset(&state_->xxh);
}
Xxh3Stream::Xxh3Stream(Xxh3Stream&&) noexcept = default;
Xxh3Stream& Xxh3Stream::operator=(Xxh3Stream&&) noexcept = default;
Xxh3Stream::~Xxh3Stream() = default;

void Xxh3Stream::update(std::span<const std::byte> bytes) noexcept {
  detail::xxh3_update(&state_->xxh, bytes.data(), bytes.size());
  bytes_ += bytes.size();
}
std::uint64_t Xxh3Stream::digest64() const noexcept {
  return XXH3_64bits_digest(&state_->xxh);
}
Xxh128 Xxh3Stream::digest128() const noexcept {
  const XXH128_hash_t h = XXH3_128bits_digest(&state_->xxh);
  return {h.high64, h.low64};
}

Status verify_xxh3_64(std::span<const std::byte> bytes, std::uint64_t expected, const std::string& path,
                      std::uint64_t offset) {
  const std::uint64_t actual = xxh3_64(bytes);
  if (actual == expected) return {};
  return fail(Error(Errc::kChecksumMismatch,
                    fmt::format("xxh3-64 of {} bytes is {}, expected {}", bytes.size(), hex64(actual), hex64(expected)))
                  .with_offset(offset)
                  .with_file(path));
}

Result<FileDigest> digest_file(Reader& reader, FileId id, const DigestOptions& options) {
  if (options.chunk_bytes == 0 || options.chunks_in_flight == 0)
    return fail(Errc::kInvalidArgument, "digest_file needs a non-zero chunk size and depth");
  const std::uint64_t size = reader.file(id).size();
  const std::size_t slots = options.chunks_in_flight;
  QLOAD_ASSIGN_OR_RETURN(HostBuffer buffer, HostBuffer::allocate(options.chunk_bytes * slots));
  const std::uint64_t chunks = (size + options.chunk_bytes - 1) / options.chunk_bytes;

  Xxh3Stream stream;
  std::vector<bool> ready(slots, false);  // chunk in slot has arrived, not yet hashed
  std::uint64_t next_submit = 0, next_hash = 0;
  std::optional<Error> first_error;
  auto chunk_span = [&](std::uint64_t chunk) {
    const std::uint64_t offset = chunk * options.chunk_bytes;
    const auto len = static_cast<std::size_t>(std::min<std::uint64_t>(options.chunk_bytes, size - offset));
    return std::span<std::byte>(buffer.data() + (chunk % slots) * options.chunk_bytes, len);
  };
  auto submit_more = [&]() -> Status {
    std::vector<ReadRequest> batch;
    while (next_submit < chunks && next_submit < next_hash + slots) {
      batch.push_back(ReadRequest{id, next_submit * options.chunk_bytes, chunk_span(next_submit), next_submit});
      ++next_submit;
    }
    return batch.empty() ? Status{} : reader.submit(batch);
  };

  QLOAD_TRY(submit_more());
  std::array<ReadCompletion, 16> done;
  std::uint64_t outstanding = next_submit;
  while (outstanding > 0) {
    QLOAD_ASSIGN_OR_RETURN(const std::size_t n, reader.wait(done, 1));
    outstanding -= n;
    for (std::size_t i = 0; i < n; ++i) {
      if (!done[i].status) {
        if (!first_error) first_error = std::move(done[i].status.error());
        continue;
      }
      ready[done[i].tag % slots] = true;
    }
    if (first_error) continue;  // drain what is in flight, submit nothing new
    while (next_hash < next_submit && ready[next_hash % slots]) {
      ready[next_hash % slots] = false;
      stream.update(chunk_span(next_hash));
      if (options.on_bytes) options.on_bytes(next_hash * options.chunk_bytes, chunk_span(next_hash));
      ++next_hash;
    }
    const std::uint64_t before = next_submit;
    if (Status s = submit_more(); !s) {
      // Reads already in flight still target `buffer`: record the error and drain them.
      first_error = std::move(s.error());
      continue;
    }
    outstanding += next_submit - before;
  }
  if (first_error) return fail(std::move(*first_error));
  return FileDigest{stream.digest64(), stream.digest128(), stream.bytes_seen()};
}

}  // namespace qload::io
