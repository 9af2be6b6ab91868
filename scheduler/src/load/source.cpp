// Opening a source goes through the formats layer's driver registry. Kept in its own file:
// the loader itself works from any Catalog, however it was made.
#include "qload/formats/driver.hpp"
#include "qload/scheduler/load.hpp"

namespace qload::scheduler {

Result<formats::Catalog> open_source(const std::string& source) {
  return formats::open_catalog(source);
}

Result<Model> load_source(const std::string& source, const LoadOptions& options, const LoadContext& context) {
  QLOAD_ASSIGN_OR_RETURN(const formats::Catalog catalog, open_source(source));
  return load(catalog, options, context);
}

}  // namespace qload::scheduler
