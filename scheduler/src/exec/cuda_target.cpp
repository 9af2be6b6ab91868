// A GPU arena: one cudaMalloc for the whole plan arena, and copy lanes that move staged bytes
// over PCIe in their stored size; a conversion runs as a kernel on the GPU after the copy.
//
// Compiled in every build: the CUDA wrappers below it return kUnsupported without CUDA, so
// make_cuda_target fails cleanly and nothing here needs an #ifdef.
#include <array>
#include <cstring>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "exec/arena_target.hpp"
#include "qload/formats/convert.hpp"
#include "qload/formats/convert_cuda.hpp"
#include "qload/formats/quant_cuda.hpp"
#include "qload/runtime/cuda.hpp"

namespace qload::scheduler::detail {
namespace {

// Kernels read their input at natural alignment; each converted slice starts its scratch
// space on this boundary.
constexpr std::uint64_t kScratchAlignment = 16;

// Bytes from pageable host memory (the packed parts of weights dequantized here, quantize and
// repack outputs, relayed shards) go through two pinned halves per lane: the CPU copies into
// one while the copy engine reads the other. Bounded (2 x this per lane), unlike pinning the
// memory they come from.
constexpr std::size_t kBounceHalfBytes = std::size_t{4} << 20;

struct Lane {
  cuda::Stream stream;
  cuda::Event event;  // recorded after a delivery's last copy or kernel
  cuda::DeviceBuffer scratch;
  cuda::PinnedHostBuffer bounce;       // 2 x kBounceHalfBytes; empty: pageable bytes are copied synchronously
  std::array<cuda::Event, 2> drained;  // per half: recorded after the copy that reads it
  unsigned next_half = 0;
};

class CudaTarget final : public ArenaTarget {
 public:
  // `arena` is empty for the caller's memory at `base` (an external arena): written, never owned.
  CudaTarget(Device device, cuda::DeviceBuffer arena, std::byte* base, std::vector<Lane> lanes)
      : device_(device),
        arena_(arena.data() != nullptr ? std::make_shared<cuda::DeviceBuffer>(std::move(arena)) : nullptr),
        base_(base),
        lanes_(std::move(lanes)) {
    for (std::uint32_t i = 0; i < lanes_.size(); ++i) free_.push_back(i);
  }
  std::byte* base() const noexcept override { return base_; }
  bool on_host() const noexcept override { return false; }

  Status deliver(std::span<const Delivery> deliveries) override {
    return on_lane([&](Lane& lane) { return enqueue(lane, deliveries); });
  }

  Status dequantize(const formats::LogicalTensor& tensor, std::span<const formats::PartBytes> parts,
                    std::uint64_t row_begin, std::uint64_t row_end, std::uint64_t arena_offset, DType dtype) override {
    return on_lane([&](Lane& lane) -> Status {
      // The packed parts go to the lane's scratch (sized for the largest weight's parts by
      // the load), each at an alignment every element type accepts.
      std::vector<const std::byte*> device_parts;
      std::uint64_t used = 0;
      for (const formats::PartBytes& p : parts) {
        const std::uint64_t at = (used + kDecodePartAlignment - 1) / kDecodePartAlignment * kDecodePartAlignment;
        if (at + p.bytes.size() > lane.scratch.size())
          return fail(Error(Errc::kInternal, fmt::format("{}: decode scratch of {} bytes is too small",
                                                         device_.to_string(), lane.scratch.size()))
                          .with_tensor(tensor.name));
        QLOAD_TRY(copy_pageable(lane, lane.scratch.data() + at, p.bytes.data(), p.bytes.size()));
        device_parts.push_back(lane.scratch.data() + at);
        used = at + p.bytes.size();
      }
      return formats::dequantize_on_device(tensor, parts, device_parts, row_begin, row_end, dtype, base_ + arena_offset,
                                           lane.stream);
    });
  }

  void copy_synchronously() override { synchronous_ = true; }

  void release_into(std::vector<std::shared_ptr<HostBuffer>>&,
                    std::vector<std::shared_ptr<cuda::DeviceBuffer>>& device) override {
    lanes_.clear();
    if (arena_) device.push_back(std::move(arena_));
  }
  std::shared_ptr<const void> owner() const override { return arena_; }

 private:
  Status enqueue(Lane& lane, std::span<const Delivery> deliveries) {
    std::uint64_t scratch_used = 0;
    for (const Delivery& d : deliveries) {
      std::byte* out = base_ + d.arena_offset;
      const std::uint64_t stored_bytes = d.stored.size() * d.rows;  // contiguous once copied
      // Rows land `dst_pitch` apart: in the arena (packed, or a destination's row pitch), or
      // next to each other in scratch for a conversion after.
      const auto copy = [&](std::byte* dst, std::uint64_t dst_pitch) -> Status {
        if (d.pageable) {  // the copy engines cannot read it: through the lane's pinned halves
          for (std::uint64_t i = 0; i < d.rows; ++i)
            QLOAD_TRY(copy_pageable(lane, dst + i * dst_pitch, d.stored.data() + i * d.stored_pitch, d.stored.size()));
          return {};
        }
        if (synchronous_) {  // nothing is pinned: the driver stages every copy, synchronously
          for (std::uint64_t i = 0; i < d.rows; ++i)
            QLOAD_TRY(cuda::copy_to_device(dst + i * dst_pitch, d.stored.data() + i * d.stored_pitch, d.stored.size(),
                                           device_.index));
          return {};
        }
        if (d.rows == 1) return cuda::copy_to_device_async(dst, d.stored.data(), d.stored.size(), lane.stream);
        return cuda::copy_2d_to_device_async(dst, dst_pitch, d.stored.data(), d.stored_pitch, d.stored.size(), d.rows,
                                             lane.stream);
      };
      if (d.from == d.to) {
        QLOAD_TRY(copy(out, d.placed_row_step(d.stored.size())));
        continue;
      }
      const std::uint64_t at = (scratch_used + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
      if (at + stored_bytes > lane.scratch.size())
        return fail(Errc::kInternal, fmt::format("{}: conversion scratch of {} bytes is too small", device_.to_string(),
                                                 lane.scratch.size()));
      std::byte* staged = lane.scratch.data() + at;
      QLOAD_TRY(copy(staged, d.stored.size()));
      if (d.placed_pitch == 0) {
        const std::uint64_t count = stored_bytes / dtype_info(d.from).block_bytes;
        QLOAD_TRY(formats::convert_on_device(staged, d.from, out, d.to, count, lane.stream));
      } else {  // rows a pitch apart: one conversion per row (a destination's pitched rows are few)
        const std::uint64_t count = d.stored.size() / dtype_info(d.from).block_bytes;
        for (std::uint64_t i = 0; i < d.rows; ++i)
          QLOAD_TRY(formats::convert_on_device(staged + i * d.stored.size(), d.from, out + i * d.placed_pitch, d.to,
                                               count, lane.stream));
      }
      scratch_used = at + stored_bytes;
    }
    return {};
  }

  // `bytes` from pageable host memory to `dst`, in pieces through the lane's pinned halves:
  // each half is refilled only once the copy that read it has run.
  Status copy_pageable(Lane& lane, std::byte* dst, const std::byte* src, std::size_t bytes) {
    if (synchronous_ || lane.bounce.size() == 0) return cuda::copy_to_device(dst, src, bytes, device_.index);
    for (std::size_t done = 0; done < bytes;) {
      const unsigned half = lane.next_half;
      lane.next_half ^= 1;
      QLOAD_TRY(lane.drained[half].synchronize());
      std::byte* pinned = lane.bounce.data() + half * kBounceHalfBytes;
      const std::size_t n = std::min(kBounceHalfBytes, bytes - done);
      std::memcpy(pinned, src + done, n);
      QLOAD_TRY(cuda::copy_to_device_async(dst + done, pinned, n, lane.stream));
      QLOAD_TRY(lane.drained[half].record(lane.stream));
      done += n;
    }
    return {};
  }

  // Runs `work` (which enqueues copies and kernels) on a free lane and waits for all of it.
  // Whatever failed, nothing may still be reading the caller's host memory once this returns.
  template <typename Work>
  Status on_lane(Work work) {
    const std::optional<std::uint32_t> index = take_lane();
    if (!index) return fail(Errc::kInternal, fmt::format("{}: more deliveries than copy lanes", device_.to_string()));
    Lane& lane = lanes_[*index];
    Status status = work(lane);
    if (status) status = lane.event.record(lane.stream);
    if (status) status = lane.event.synchronize();
    if (!status) (void)lane.stream.synchronize();
    give_back(*index);
    if (!status) return fail(std::move(status).error().with_note(fmt::format("delivering to {}", device_.to_string())));
    return {};
  }

  std::optional<std::uint32_t> take_lane() {
    std::lock_guard lock(mutex_);
    if (free_.empty()) return std::nullopt;
    const std::uint32_t i = free_.back();
    free_.pop_back();
    return i;
  }
  void give_back(std::uint32_t i) {
    std::lock_guard lock(mutex_);
    free_.push_back(i);
  }

  Device device_;
  std::shared_ptr<cuda::DeviceBuffer> arena_;  // null: the caller's memory; shared with streamed tensors
  std::byte* base_ = nullptr;
  std::vector<Lane> lanes_;
  std::mutex mutex_;
  std::vector<std::uint32_t> free_;  // lanes not delivering now
  bool synchronous_ = false;         // copy_synchronously(): set before the load's tasks run
};

// kUnsupported naming the device when this machine cannot serve it.
Status check_device(const Device& device) {
  const CudaInfo info = probe_cuda();
  if (!info.compiled)
    return fail(Errc::kUnsupported, fmt::format("{}: this qload was built without CUDA", device.to_string()));
  if (info.devices.empty())
    return fail(Errc::kUnsupported, fmt::format("{}: {}", device.to_string(), info.unavailable_reason));
  if (static_cast<std::size_t>(device.index) >= info.devices.size())
    return fail(Errc::kUnsupported,
                fmt::format("{}: this machine has {} CUDA device(s)", device.to_string(), info.devices.size()));
  return {};
}

}  // namespace

Result<std::unique_ptr<ArenaTarget>> make_cuda_target(const ArenaPlan& plan, std::uint32_t lanes,
                                                      std::uint64_t scratch_bytes, bool pageable_sources) {
  QLOAD_TRY(check_device(plan.device));
  const int device = plan.device.index;
  cuda::DeviceBuffer arena;
  if (!plan.external) {
    QLOAD_ASSIGN_OR_RETURN(arena, cuda::DeviceBuffer::allocate(device, static_cast<std::size_t>(plan.bytes)));
  }
  // NOLINTNEXTLINE(performance-no-int-to-ptr): an external arena's address is the caller's, given as a number
  std::byte* const base = plan.external ? reinterpret_cast<std::byte*>(plan.address) : arena.data();
  std::vector<Lane> made;
  for (std::uint32_t i = 0; i < lanes; ++i) {
    Lane lane;
    QLOAD_ASSIGN_OR_RETURN(lane.stream, cuda::Stream::create(device));
    QLOAD_ASSIGN_OR_RETURN(lane.event, cuda::Event::create(device));
    QLOAD_ASSIGN_OR_RETURN(lane.scratch, cuda::DeviceBuffer::allocate(device, static_cast<std::size_t>(scratch_bytes)));
    if (pageable_sources) {
      // Where pinned memory is scarce, the copies are synchronous instead (copy_pageable).
      if (Result<cuda::PinnedHostBuffer> bounce = cuda::PinnedHostBuffer::allocate(2 * kBounceHalfBytes))
        lane.bounce = std::move(*bounce);
      for (cuda::Event& e : lane.drained) {
        QLOAD_ASSIGN_OR_RETURN(e, cuda::Event::create(device));
      }
    }
    made.push_back(std::move(lane));
  }
  return std::unique_ptr<ArenaTarget>(
      std::make_unique<CudaTarget>(plan.device, std::move(arena), base, std::move(made)));
}

}  // namespace qload::scheduler::detail
