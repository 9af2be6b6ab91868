// Where a plan's arena lives and how placed bytes get there: host memory (memcpy, or a CPU
// conversion) or one GPU's memory (copies from pinned staging on copy lanes, conversion by a
// kernel). The read graph is the same for both; only these bodies differ.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "plan/decode_plan.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

// One slice of one tensor to deliver: its stored bytes (host memory, e.g. a staging slot) and
// where they go. `stored` holds whole elements whenever from != to.

//
// A 2-D delivery (a column shard's rows within one staged piece) has `rows` rows: row i's
// stored bytes are the `stored.size()` bytes at stored.data() + i * stored_pitch, and the
// placed rows follow each other in the arena, or are `placed_pitch` apart (a caller's
// destination with gaps between its rows). One strided copy (cudaMemcpy2DAsync) instead of one
// per row.
struct Delivery {
  // Bytes from one placed row's start to the next in the arena.
  std::uint64_t placed_row_step(std::uint64_t placed_row_bytes) const noexcept {
    return placed_pitch != 0 ? placed_pitch : placed_row_bytes;
  }
  std::span<const std::byte> stored;  // the (first) row
  std::uint64_t arena_offset = 0;     // of the slice's first placed byte
  DType from = DType::kU8;
  DType to = DType::kU8;
  std::uint64_t rows = 1;
  std::uint64_t stored_pitch = 0;  // rows > 1: bytes from one row's start to the next in stored memory
  std::uint64_t placed_pitch = 0;  // rows > 1: the same in the arena; 0: the placed rows are packed
  // `stored` is pageable memory (not the pinned staging pool): a GPU target copies it
  // synchronously, since the copy engines cannot read it directly (one row, no conversion).
  bool pageable = false;
};

class ArenaTarget {
 public:
  virtual ~ArenaTarget() = default;
  // The arena's first byte: a host pointer, or a device pointer when !on_host().
  virtual std::byte* base() const noexcept = 0;
  virtual bool on_host() const noexcept = 0;
  // Puts every delivery in place and returns once it is there (for a GPU: the copies and
  // kernels have completed), so the caller may reuse `stored` at once. Safe to call from
  // several threads at once (a GPU target serves at most lane_count() calls concurrently;
  // the executor's copy-lane budget guarantees it).
  virtual Status deliver(std::span<const Delivery> deliveries) = 0;
  // Rows [row_begin, row_end) of the quantized weight `tensor`, whose parts are in host memory,
  // dequantized to `dtype` at `arena_offset`; returns once they are there. A host arena
  // decodes on the CPU; a GPU copies the packed parts over (fewer bytes than the output) and
  // decodes them there, bit-identical to the CPU.
  virtual Status dequantize(const formats::LogicalTensor& tensor, std::span<const formats::PartBytes> parts,
                            std::uint64_t row_begin, std::uint64_t row_end, std::uint64_t arena_offset,
                            DType dtype) = 0;
  // The host memory deliveries come from could not be pinned (cudaHostRegister failed): a GPU
  // target then copies synchronously from it, as from any pageable memory. Slower, never wrong.
  virtual void copy_synchronously() {}
  // Moves the arena's memory out (into the Model) once the load has succeeded.
  virtual void release_into(std::vector<std::shared_ptr<HostBuffer>>& host,
                            std::vector<std::shared_ptr<cuda::DeviceBuffer>>& device) = 0;
  // The owner of the arena's memory (LoadContext::TensorCallback's keep_alive: a tensor streamed
  // from it stays valid while it is held); null for the caller's own memory (an external arena).
  virtual std::shared_ptr<const void> owner() const { return nullptr; }
};

// Puts `deliveries` in host memory at `base` (memcpy, or a CPU conversion), as a host arena does.
Status deliver_on_host(std::byte* base, std::span<const Delivery> deliveries);

// A host arena of plan.bytes (zero-filled, huge pages).
Result<std::unique_ptr<ArenaTarget>> make_host_target(const ArenaPlan& plan);

// A GPU arena of plan.bytes on plan.device, with `lanes` copy lanes (a stream and an event
// each, plus a scratch buffer of `scratch_bytes` when conversions or decodes run there: the
// stored bytes of one delivery, or the packed parts of one weight, land there first). With
// `pageable_sources` (weights decoded onto it: their packed parts, quantize and repack outputs
// come from pageable memory), each lane also gets a pair of pinned bounce buffers, so those
// copies overlap the CPU's work; without, such copies are synchronous. kUnsupported when CUDA
// or the device is missing, kOutOfMemory naming the device and bytes.
Result<std::unique_ptr<ArenaTarget>> make_cuda_target(const ArenaPlan& plan, std::uint32_t lanes,
                                                      std::uint64_t scratch_bytes, bool pageable_sources);

}  // namespace qload::scheduler::detail
