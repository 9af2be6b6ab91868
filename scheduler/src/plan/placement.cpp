#include "plan/placement.hpp"

#include <algorithm>
#include <charconv>

namespace qload::scheduler::detail {

std::optional<std::uint32_t> layer_of(std::string_view name) {
  static constexpr std::string_view kLayerWords[] = {"layers", "layer", "h", "blocks"};
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t dot = std::min(name.find('.', start), name.size());
    const std::string_view word = name.substr(start, dot - start);
    if (dot < name.size() && std::ranges::find(kLayerWords, word) != std::end(kLayerWords)) {
      const std::size_t next = std::min(name.find('.', dot + 1), name.size());
      const std::string_view digits = name.substr(dot + 1, next - dot - 1);
      std::uint32_t layer = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), layer);
      if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty()) return layer;
    }
    start = dot + 1;
  }
  return std::nullopt;
}

std::vector<std::uint32_t> assign_devices(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order,
                                          Placement placement, std::uint32_t device_count) {
  std::vector<std::uint32_t> device(catalog.tensors.size(), 0);
  if (device_count <= 1) return device;
  if (placement == Placement::kRoundRobin) {
    for (std::size_t k = 0; k < order.size(); ++k) device[order[k]] = static_cast<std::uint32_t>(k % device_count);
    return device;
  }
  std::vector<std::optional<std::uint32_t>> layers(catalog.tensors.size());
  std::uint64_t layer_count = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    layers[i] = layer_of(catalog.tensors[i].name);
    if (layers[i]) layer_count = std::max<std::uint64_t>(layer_count, std::uint64_t{*layers[i]} + 1);
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (layers[i])
      device[i] = static_cast<std::uint32_t>(std::uint64_t{*layers[i]} * device_count / layer_count);
    else
      device[i] = catalog.tensors[i].name.find("embed") != std::string::npos ? 0 : device_count - 1;
  }
  return device;
}

}  // namespace qload::scheduler::detail
