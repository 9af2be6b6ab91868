// Copies under a parallel layout (PlanOptions::parallel, docs/parallel.md): tensor i's copies,
// one per tensor rank of its pipeline stage in every data replica held by this process, each
// at the next aligned offset of its device's arena; and decode jobs multiplied the same way.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/formats/model_config.hpp"
#include "qload/runtime/error.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

// The parts of quantized weights cut consistently per weight (quant_sharding.hpp): catalog
// index -> its slices per rank, with the split of its weight.
struct PartShards {
  Split split = Split::kReplicate;
  std::vector<ShardSlice> slices;
};

// The layout's sizes against the devices given, and what cannot be combined with it.
Status check_parallel(const PlanOptions& options, const Plan& plan);

// Every quantized weight's parts cut per rank (filling plan.decode.sharded_weights).
Result<std::map<std::uint32_t, PartShards>> plan_quantized_shards(const formats::Catalog& catalog,
                                                                  const PlanOptions& options,
                                                                  const formats::ModelGeometry& geometry, Plan& plan);

// Stored tensor i's copies on this process's devices in pipeline stage `stage`, placed in
// `dtype` at the next aligned offsets (`cursor`, per device), into plan.copies.shards.
Status place_shards(const formats::Catalog& catalog, std::uint32_t i, std::uint32_t stage, DType dtype,
                    const PlanOptions& options, const formats::ModelGeometry& geometry,
                    const std::map<std::uint32_t, PartShards>& part_shards, std::vector<std::uint64_t>& cursor,
                    Plan& plan);

// Where each decode job's outputs go. Outside a parallel layout: the device of its first input.
// Under one, each job becomes one job per copy of its weight on this process's devices: a
// tensor rank's shard (its inputs cut to the rank's slices first, DecodeJob::shard_inputs) or
// a data replica; a weight whose copies are all another process's is not decoded here.
Status place_decode_jobs(const formats::Catalog& catalog, const PlanOptions& options,
                         const formats::ModelGeometry& geometry, const std::vector<std::uint32_t>& device_of,
                         const std::vector<std::uint32_t>& stage_of,
                         const std::map<std::uint32_t, PartShards>& part_shards, Plan& plan);

}  // namespace qload::scheduler::detail
