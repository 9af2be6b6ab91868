// Arena layout (read mode): each tensor at the next multiple of the alignment in its device's
// arena (or the scratch arena), in file order, so reads and copies walk the arenas forwards;
// decode outputs follow on the device of their first input. Each arena is exactly as long as
// its last tensor's end. Host arenas under HostLayout::kFileImage instead keep each tensor kept
// as stored congruent to its file offset modulo kFileImageAlignment, in spans laid out as in the
// file, each starting and ending on a fresh block (plan.hpp, make_chunks). Under a parallel
// layout each tensor's copies are placed instead (parallel_copies.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/runtime/error.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

// Who goes where, besides the device placement: tensors read into scratch (decode inputs)
// and tensors that must keep their stored dtype (quantized parts).
struct TensorRoles {
  std::vector<bool> to_scratch;
  std::vector<bool> quantized_part;
};

// Fills plan.layout (arenas, tensors, placed bytes), the decode jobs' output offsets, and under
// shared reads who reads what (plan.copies).
Status place_in_arenas(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order,
                       const PlanOptions& options, const TensorRoles& roles, Plan& plan);

}  // namespace qload::scheduler::detail
