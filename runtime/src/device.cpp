#include "qload/runtime/device.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

namespace qload {
namespace {

constexpr int kMaxIndex = 1023;
constexpr std::string_view kExpected = "expected cpu, cpu:N, cuda or cuda:N with N in 0..1023";

std::unexpected<Error> not_a_device(std::string_view text) {
  return fail(Errc::kInvalidArgument, fmt::format("'{}' is not a device ({})", escape_for_terminal(text), kExpected));
}

// Plain decimal digits only: no sign, no spaces, no leading zero ("01" would make two
// spellings of one device), and at most four digits so the value cannot overflow.
std::optional<int> parse_index(std::string_view digits) {
  if (digits.empty() || digits.size() > 4) return std::nullopt;
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;
  int value = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > kMaxIndex) return std::nullopt;
  return value;
}

std::optional<Device::Kind> parse_kind(std::string_view name) {
  if (name == "cpu") return Device::Kind::kCpu;
  if (name == "cuda") return Device::Kind::kCuda;
  return std::nullopt;
}

}  // namespace

std::string Device::to_string() const {
  if (is_cpu()) return index == 0 ? std::string("cpu") : fmt::format("cpu:{}", index);
  return fmt::format("cuda:{}", index);
}

Result<Device> parse_device(std::string_view text) {
  const std::size_t colon = text.find(':');
  const std::optional<Device::Kind> kind = parse_kind(text.substr(0, colon));
  if (!kind) return not_a_device(text);
  if (colon == std::string_view::npos) return Device{*kind, 0};
  const std::optional<int> index = parse_index(text.substr(colon + 1));
  if (!index) return not_a_device(text);
  return Device{*kind, *index};
}

Result<std::vector<Device>> parse_device_list(std::string_view text) {
  if (text.empty()) return fail(Errc::kInvalidArgument, "device list '' is empty");
  const auto bad_list = [&](std::string_view why) {
    return fail(Errc::kInvalidArgument, fmt::format("device list '{}': {}", escape_for_terminal(text), why));
  };
  std::vector<Device> devices;
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (item.empty()) return bad_list("has an empty element");
    const Result<Device> device = parse_device(item);
    if (!device) return bad_list(device.error().message());
    if (std::ranges::find(devices, *device) != devices.end())
      return bad_list(fmt::format("names {} twice", device->to_string()));
    devices.push_back(*device);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return devices;
}

}  // namespace qload
