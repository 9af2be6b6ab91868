#include "qload/scheduler/staging_pool.hpp"

#include <algorithm>
#include <cassert>
#include <mutex>

#include <fmt/format.h>

#include "qload/runtime/cuda_memory.hpp"
#include "qload/runtime/host_buffer.hpp"

namespace qload::scheduler {

namespace detail {
struct PoolState {
  HostBuffer memory;
  // Declared after `memory`: unregistered before the memory is unmapped.
  cuda::HostRegistration pinned;
  std::uint64_t slot_bytes = 0;
  std::size_t slot_count = 0;
  mutable std::mutex mutex;
  std::vector<std::uint32_t> free;  // LIFO: the most recently used slot is the warmest
  std::size_t leased = 0;
  std::size_t peak = 0;
};
}  // namespace detail

namespace {
constexpr std::uint64_t kSlotAlignment = 4096;
// The kernel refuses io_uring fixed buffers over 1 GiB.
constexpr std::uint64_t kMaxRegionBytes = std::uint64_t{1} << 30;
constexpr std::size_t kHugePage = std::size_t{2} << 20;
}  // namespace

Status StagingOptions::validate() const {
  if (slot_bytes == 0 || slot_bytes % kSlotAlignment != 0)
    return fail(Errc::kInvalidArgument,
                fmt::format("staging slot size {} is not a non-zero multiple of {}", slot_bytes, kSlotAlignment));
  if (total_bytes < slot_bytes)
    return fail(Errc::kInvalidArgument,
                fmt::format("staging budget {} bytes holds no {} byte slot", total_bytes, slot_bytes));
  if (slot_count() > UINT32_MAX) return fail(Errc::kInvalidArgument, "too many staging slots");
  return {};
}

StagingLease& StagingLease::operator=(StagingLease&& other) noexcept {
  if (this != &other) {
    reset();
    state_ = std::exchange(other.state_, nullptr);
    slot_ = std::exchange(other.slot_, 0);
  }
  return *this;
}

std::span<std::byte> StagingLease::bytes() const noexcept {
  if (state_ == nullptr) return {};
  return state_->memory.span().subspan(slot_ * state_->slot_bytes, state_->slot_bytes);
}

void StagingLease::reset() noexcept {
  if (state_ == nullptr) return;
  {
    std::lock_guard lock(state_->mutex);
    state_->free.push_back(slot_);
    --state_->leased;
  }
  state_ = nullptr;
  slot_ = 0;
}

Result<StagingPool> StagingPool::create(const StagingOptions& options) {
  QLOAD_TRY(options.validate());
  auto state = std::make_unique<detail::PoolState>();
  state->slot_bytes = options.slot_bytes;
  state->slot_count = options.slot_count();
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(options.slot_bytes, state->slot_count, &bytes) || bytes > SIZE_MAX)
    return fail(Errc::kOverflow, fmt::format("staging pool of {} x {} bytes", state->slot_count, options.slot_bytes));
  QLOAD_ASSIGN_OR_RETURN(state->memory, HostBuffer::allocate(static_cast<std::size_t>(bytes), kHugePage));
  state->free.reserve(state->slot_count);
  for (std::size_t i = state->slot_count; i-- > 0;) state->free.push_back(static_cast<std::uint32_t>(i));
  return StagingPool(std::move(state));
}

StagingPool::StagingPool(std::unique_ptr<detail::PoolState> state) : state_(std::move(state)) {}
StagingPool::StagingPool(StagingPool&&) noexcept = default;
StagingPool& StagingPool::operator=(StagingPool&&) noexcept = default;

StagingPool::~StagingPool() {
  // A lease outliving its pool would point into unmapped memory.
  assert(state_ == nullptr || state_->leased == 0);
}

StagingLease StagingPool::try_lease() {
  std::lock_guard lock(state_->mutex);
  if (state_->free.empty()) return {};
  const std::uint32_t slot = state_->free.back();
  state_->free.pop_back();
  state_->peak = std::max(state_->peak, ++state_->leased);
  return StagingLease(state_.get(), slot);
}

Status StagingPool::register_with(io::Reader& reader) const {
  const std::size_t per_region = std::max<std::size_t>(1, kMaxRegionBytes / state_->slot_bytes);
  std::vector<std::span<std::byte>> regions;
  for (std::size_t first = 0; first < state_->slot_count; first += per_region) {
    const std::size_t n = std::min(per_region, state_->slot_count - first);
    regions.push_back(state_->memory.span().subspan(first * state_->slot_bytes, n * state_->slot_bytes));
  }
  return reader.register_buffers(regions);
}

std::uint64_t StagingPool::slot_bytes() const noexcept {
  return state_->slot_bytes;
}
std::size_t StagingPool::slot_count() const noexcept {
  return state_->slot_count;
}
std::uint64_t StagingPool::leased_bytes() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->leased * state_->slot_bytes;
}
std::uint64_t StagingPool::peak_leased_bytes() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->peak * state_->slot_bytes;
}
void StagingPool::reset_peak() noexcept {
  std::lock_guard lock(state_->mutex);
  state_->peak = state_->leased;
}
bool StagingPool::contains(const std::byte* p) const noexcept {
  const std::byte* base = state_->memory.data();
  return p >= base && p < base + state_->memory.size();
}

Status StagingPool::pin() {
  if (state_->pinned.registered()) return {};
  QLOAD_ASSIGN_OR_RETURN(state_->pinned, cuda::HostRegistration::register_memory(state_->memory.span()));
  return {};
}

bool StagingPool::pinned() const noexcept {
  return state_->pinned.registered();
}

}  // namespace qload::scheduler
