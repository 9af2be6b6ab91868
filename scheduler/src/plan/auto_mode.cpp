#include "plan/auto_mode.hpp"

#include <algorithm>

#include "qload/io/input_file.hpp"
#include "qload/io/page_cache.hpp"
#include "qload/scheduler/page_cache.hpp"

namespace qload::scheduler {

double page_cache_fraction(const formats::Catalog& catalog) {
  double total = 0, resident = 0;
  for (const formats::CatalogFile& file : catalog.files) {
    total += static_cast<double>(file.size);
    // The same non-blocking open as the load's (a FIFO planted here cannot hang the choice); a
    // file that is not the catalog's inode counts as cold, and the load itself refuses it.
    const Result<io::RegularFile> opened = io::open_regular(file.path);
    if (!opened) continue;
    if (file.identity && (opened->identity.dev != file.identity->dev || opened->identity.ino != file.identity->ino))
      continue;
    resident +=
        io::page_cache_resident_fraction(opened->fd.get(), file.size).value_or(0.0) * static_cast<double>(file.size);
  }
  return total == 0 ? 1.0 : resident / total;
}

namespace detail {
namespace {

bool mmap_can_serve(const formats::Catalog& catalog, const PlanOptions& o) {
  if (o.devices.size() != 1 || !o.devices.front().is_cpu() || !o.parallel.trivial()) return false;
  if (o.dtype || o.dequantize || o.quantize || o.repack || o.weight_policy) return false;
  return std::ranges::none_of(catalog.tensors, [](const formats::TensorEntry& t) { return !t.strides.empty(); });
}

}  // namespace

LoadMode choose_load_mode(const formats::Catalog& catalog, const PlanOptions& options) {
  if (!mmap_can_serve(catalog, options)) return LoadMode::kRead;
  return page_cache_fraction(catalog) >= kCachedEnough ? LoadMode::kMmap : LoadMode::kRead;
}

}  // namespace detail
}  // namespace qload::scheduler
