#include "qload/session/source.hpp"

#include "qload/formats/hub_cache.hpp"

namespace qload::session {

Result<std::string> resolve_source(const std::string& source, const std::string& hub_cache) {
  return hub_cache.empty() ? formats::resolve_source(source) : formats::resolve_source(source, hub_cache);
}

}  // namespace qload::session
