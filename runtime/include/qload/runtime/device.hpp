// Where tensors land: the host ("cpu", "cpu:N") or one CUDA GPU ("cuda:N").
//
// A device is a value: parsing "cuda:1" does not touch the driver. Whether the device exists
// is asked of probe_cuda() (cuda.hpp) when a load starts.
#pragma once

#include <compare>
#include <string>
#include <string_view>
#include <vector>

#include "qload/runtime/error.hpp"

namespace qload {

struct Device {
  enum class Kind : std::uint8_t { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // cpu:N are distinct host arenas (parallel placement); cuda:N the GPU ordinal

  bool is_cpu() const noexcept { return kind == Kind::kCpu; }
  bool is_cuda() const noexcept { return kind == Kind::kCuda; }
  // "cpu" for cpu:0 (the default host device), else "cpu:N" / "cuda:N".
  std::string to_string() const;
  auto operator<=>(const Device&) const = default;
};

// "cpu", "cpu:N", "cuda" (= cuda:0) or "cuda:N" with N a decimal in [0, 1023].
// kInvalidArgument naming the text otherwise.
Result<Device> parse_device(std::string_view text);
// A comma-separated list ("cuda:0,cuda:1"); duplicates and an empty list are errors.
Result<std::vector<Device>> parse_device_list(std::string_view text);

}  // namespace qload
