// The one place drivers are listed. A new format adds its driver here and a sample to
// tests/formats/conformance_test.cpp; nothing else dispatches on formats.
#include <array>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "gguf/gguf_driver.hpp"
#include "located_error.hpp"
#include "qload/formats/driver.hpp"
#include "safetensors_driver.hpp"
#include "torch/torch_driver.hpp"

namespace qload::formats {

std::span<const FormatDriver* const> drivers() {
  static const std::array<const FormatDriver*, 3> all{&safetensors_driver(), &gguf_driver(), &torch_driver()};
  return all;
}

const FormatDriver* find_driver(std::string_view name) {
  for (const FormatDriver* driver : drivers())
    if (driver->name() == name) return driver;
  return nullptr;
}

Result<Catalog> open_catalog(const std::string& source) {
  std::error_code ec;
  if (!std::filesystem::exists(source, ec))
    return fail(Error::from_errno(ec ? ec.value() : ENOENT, "open checkpoint").with_file(source));
  std::string tried;
  for (const FormatDriver* driver : drivers()) {
    if (driver->recognizes(source)) return driver->open(source);
    tried += tried.empty() ? driver->name() : fmt::format(", {}", driver->name());
  }
  return fail(
      located(Errc::kUnsupported, fmt::format("no format driver recognizes this source (tried: {})", tried), source));
}

}  // namespace qload::formats
