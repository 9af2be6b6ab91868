// Guarded mappings for simulated device and pinned memory (sim_state.hpp).
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "sim_state.hpp"

namespace qload::cudasim {
namespace {

constexpr std::size_t kAlignment = 256;  // cudaMalloc's
constexpr std::byte kPoison{0xCD};       // fresh memory: never zero, as the real thing
constexpr std::byte kCanary{0xFD};
// Freed mappings kept inaccessible before they are returned to the system.
constexpr std::size_t kQuarantineBytes = std::size_t{512} << 20;

std::size_t page() {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

Range GuardedMemory::map(std::size_t size, MemoryKind kind, int device) {
  const std::size_t usable = round_up(size == 0 ? 1 : size, kAlignment);
  const std::size_t body = round_up(usable, page());
  const std::size_t total = body + 2 * page();
  void* m = ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return {};
  auto* mapping = static_cast<std::byte*>(m);
  if (::mprotect(mapping + page(), body, PROT_READ | PROT_WRITE) != 0) {
    ::munmap(m, total);
    return {};
  }
  std::byte* data = mapping + page() + body - usable;  // its end against the trailing guard
  std::memset(data, static_cast<int>(kPoison), size);
  std::memset(data + size, static_cast<int>(kCanary), usable - size);
  return Range{.data = data, .size = size, .kind = kind, .device = device, .mapping = mapping, .mapping_size = total};
}

bool GuardedMemory::unmap(const Range& range) {
  const std::size_t usable = round_up(range.size == 0 ? 1 : range.size, kAlignment);
  bool intact = true;
  for (std::size_t i = range.size; i < usable; ++i) intact = intact && range.data[i] == kCanary;
  ::mprotect(range.mapping, range.mapping_size, PROT_NONE);
  std::lock_guard lock(mutex_);
  quarantine_.push_back(range);
  quarantined_bytes_ += range.mapping_size;
  while (quarantined_bytes_ > kQuarantineBytes && !quarantine_.empty()) {
    ::munmap(quarantine_.front().mapping, quarantine_.front().mapping_size);
    quarantined_bytes_ -= quarantine_.front().mapping_size;
    quarantine_.pop_front();
  }
  return intact;
}

}  // namespace qload::cudasim
