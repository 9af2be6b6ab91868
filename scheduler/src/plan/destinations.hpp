// Caller-owned destinations (PlanOptions::destinations): which tensors go into the caller's
// memory, checked against the checkpoint before anything is read, and one external arena per
// device holding them.
#pragma once

#include "plan/arena_layout.hpp"
#include "qload/formats/catalog.hpp"
#include "qload/runtime/error.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

// With destinations_only: drops the decode jobs none of whose outputs has a destination (their
// inputs are then not read). A job with some outputs destined and others not (a quantized
// weight without its scale) is kInvalidArgument naming the output left out.
Status drop_undestined_jobs(const PlanOptions& options, std::vector<DecodeJob>& jobs);

// Places every destined tensor (stored, a region of a stored one, or a decode output) in its
// device's external arena (appended to plan.layout.arenas) at its address, after
// place_in_arenas has laid out the rest. Errors name the tensor: kNotFound (no such tensor),
// kInvalidArgument (a decode input, the wrong dtype or size, misaligned, overlapping another
// destination), kUnsupported (a region of a decode output).
Status bind_destinations(const formats::Catalog& catalog, const PlanOptions& options, const TensorRoles& roles,
                         Plan& plan);

}  // namespace qload::scheduler::detail
