// Format drivers and their registry. A driver recognises sources it can read and turns them
// into a Catalog; all drivers are listed in one place (registry.cpp) and one conformance
// suite (tests/formats/conformance_test.cpp) runs over each of them.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "qload/formats/catalog.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

class FormatDriver {
 public:
  virtual ~FormatDriver() = default;
  virtual std::string_view name() const noexcept = 0;
  // Cheap check (extension, magic bytes, index file) whether `source` is this driver's.
  virtual bool recognizes(const std::string& source) const = 0;
  // Validates every header fully before returning: a Catalog is only ever built from
  // structurally valid files. Errors name the file, tensor and byte offset.
  virtual Result<Catalog> open(const std::string& source) const = 0;
};

// Every registered driver, in probing order.
std::span<const FormatDriver* const> drivers();
const FormatDriver* find_driver(std::string_view name);
// Opens `source` with the first driver that recognises it; kUnsupported if none does. A source
// that does not exist as a path and is a Hugging Face model id ("org/name[@revision]") is opened
// from its snapshot in the local Hugging Face cache (hub_cache.hpp: the cache folder from the
// environment, or `hub_cache`), and errors from the open then carry a note naming the id.
Result<Catalog> open_catalog(const std::string& source);
Result<Catalog> open_catalog(const std::string& source, const std::filesystem::path& hub_cache);

}  // namespace qload::formats
