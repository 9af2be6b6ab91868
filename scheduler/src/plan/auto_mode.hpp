// load_mode auto: which of read and mmap serves a load best, decided from the checkpoint's
// files before planning.
#pragma once

#include "qload/formats/catalog.hpp"
#include "qload/scheduler/plan_options.hpp"

namespace qload::scheduler::detail {

// kMmap when mmap mode can serve `options` (one cpu device, no layout, nothing converted or
// decoded, no non-contiguous tensor) and the page cache holds at least kCachedEnough of the
// files' bytes (page_cache_fraction): a warm load then maps at page-cache speed where a read
// copies every byte. kRead otherwise: cold, reads with O_DIRECT and io_uring beat page faults
// one page at a time.
LoadMode choose_load_mode(const formats::Catalog& catalog, const PlanOptions& options);

}  // namespace qload::scheduler::detail
