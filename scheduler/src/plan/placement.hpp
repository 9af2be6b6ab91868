// Which device each tensor goes to (PlanOptions::placement), decided from names and file order
// only, so the same catalog always gives the same answer.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

// The decoder layer a tensor name belongs to: the number after a "layers", "layer", "h" or
// "blocks" component ("model.layers.12.mlp.up_proj.weight" -> 12), or none.
std::optional<std::uint32_t> layer_of(std::string_view name);

// Device index (into `device_count` devices) per tensor, parallel to catalog.tensors; `order`
// lists tensor indices in file order.
std::vector<std::uint32_t> assign_devices(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order,
                                          Placement placement, std::uint32_t device_count);

}  // namespace qload::scheduler::detail
