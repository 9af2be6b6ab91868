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
#include "qload/formats/hub_cache.hpp"
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

namespace {

Result<Catalog> open_path(const std::string& source) {
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

// `given` as the user named it, `resolved` what hub_cache made of it.
Result<Catalog> open_resolved(const std::string& given, Result<std::string> resolved) {
  if (!resolved) return fail(std::move(resolved).error());
  Result<Catalog> catalog = open_path(*resolved);
  if (!catalog && *resolved != given)
    return fail(std::move(catalog).error().with_note(fmt::format("Hugging Face model {}", given)));
  return catalog;
}

}  // namespace

Result<Catalog> open_catalog(const std::string& source) {
  return open_resolved(source, resolve_source(source));
}

Result<Catalog> open_catalog(const std::string& source, const std::filesystem::path& hub_cache) {
  return open_resolved(source, resolve_source(source, hub_cache));
}

}  // namespace qload::formats
