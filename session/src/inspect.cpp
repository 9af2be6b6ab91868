#include "qload/session/inspect.hpp"

#include "qload/formats/driver.hpp"

namespace qload::session {

Result<Inspection> inspect(const std::string& source) {
  QLOAD_ASSIGN_OR_RETURN(formats::Catalog catalog, formats::open_catalog(source));
  QLOAD_ASSIGN_OR_RETURN(formats::QuantizedCatalog quant, formats::detect_quantization(catalog));
  return Inspection{.catalog = std::move(catalog), .quant = std::move(quant)};
}

}  // namespace qload::session
