// How much of a checkpoint the page cache holds, asked without reading it.
#pragma once

#include "qload/formats/catalog.hpp"

namespace qload::scheduler {

// The fraction (0..1) of the catalog's file bytes the page cache holds (io::page_cache_resident
// _fraction over each file, weighted by size); a file that cannot be asked counts as cold. An
// empty catalog counts as held (nothing to read).
double page_cache_fraction(const formats::Catalog& catalog);

// What load_mode auto and share_cached auto take as a checkpoint the page cache holds.
inline constexpr double kCachedEnough = 0.9;

}  // namespace qload::scheduler
