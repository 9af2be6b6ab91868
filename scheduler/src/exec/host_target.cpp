// The host arena: deliveries are memcpy, or a CPU conversion straight from staging.
#include <algorithm>
#include <cstring>

#include "exec/arena_target.hpp"
#include "qload/formats/convert.hpp"

namespace qload::scheduler::detail {
namespace {

constexpr std::uint64_t kHugePage = std::uint64_t{2} << 20;

class HostTarget final : public ArenaTarget {
 public:
  explicit HostTarget(HostBuffer arena)
      : arena_(std::make_shared<HostBuffer>(std::move(arena))), base_(arena_->data()) {}
  // The caller's memory (an external arena): written, never owned.
  explicit HostTarget(std::byte* caller_memory) : base_(caller_memory) {}
  std::byte* base() const noexcept override { return base_; }
  bool on_host() const noexcept override { return true; }

  Status deliver(std::span<const Delivery> deliveries) override { return deliver_on_host(base_, deliveries); }

  Status dequantize(const formats::LogicalTensor& tensor, std::span<const formats::PartBytes> parts,
                    std::uint64_t row_begin, std::uint64_t row_end, std::uint64_t arena_offset, DType dtype) override {
    const std::uint64_t bytes = (row_end - row_begin) * tensor.cols * dtype_info(dtype).block_bytes;
    return formats::dequantize_rows(tensor, parts, row_begin, row_end, dtype,
                                    std::span(base_ + arena_offset, static_cast<std::size_t>(bytes)));
  }

  void release_into(std::vector<std::shared_ptr<HostBuffer>>& host,
                    std::vector<std::shared_ptr<cuda::DeviceBuffer>>&) override {
    if (arena_) host.push_back(std::move(arena_));
  }

  std::shared_ptr<const void> owner() const override { return arena_; }

 private:
  // Shared: a tensor streamed out of it keeps it (LoadContext::TensorCallback's keep_alive).
  // Null for the caller's memory.
  std::shared_ptr<HostBuffer> arena_;
  std::byte* base_ = nullptr;
};

}  // namespace

Status deliver_on_host(std::byte* base, std::span<const Delivery> deliveries) {
  for (const Delivery& d : deliveries) {
    const std::uint64_t out_bytes =
        d.from == d.to ? d.stored.size() : formats::converted_bytes(d.stored.size(), d.from, d.to);
    for (std::uint64_t row = 0; row < d.rows; ++row) {
      std::byte* out = base + d.arena_offset + row * d.placed_row_step(out_bytes);
      const std::span<const std::byte> in(d.stored.data() + row * d.stored_pitch, d.stored.size());
      if (d.from == d.to) {
        std::memcpy(out, in.data(), in.size());
      } else {
        QLOAD_TRY(formats::convert(in, d.from, std::span(out, static_cast<std::size_t>(out_bytes)), d.to));
      }
    }
  }
  return {};
}

Result<std::unique_ptr<ArenaTarget>> make_host_target(const ArenaPlan& plan) {
  if (plan.external)  // NOLINTNEXTLINE(performance-no-int-to-ptr): the caller's address, given as a number
    return std::unique_ptr<ArenaTarget>(std::make_unique<HostTarget>(reinterpret_cast<std::byte*>(plan.address)));
  const auto bytes = static_cast<std::size_t>(plan.bytes);
  const std::size_t alignment = std::max(plan.alignment, kHugePage);
  QLOAD_ASSIGN_OR_RETURN(HostBuffer arena, HostBuffer::allocate(bytes, alignment));
  return std::unique_ptr<ArenaTarget>(std::make_unique<HostTarget>(std::move(arena)));
}

}  // namespace qload::scheduler::detail
