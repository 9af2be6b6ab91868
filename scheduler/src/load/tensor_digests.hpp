// Expected digests by tensor index, and the check that turns a mismatch into an error.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/scheduler/load.hpp"

namespace qload::scheduler::detail {

using ExpectedDigests = std::vector<std::optional<std::uint64_t>>;

// options.expected_xxh3_64 by catalog index; kNotFound for a name the catalog lacks.
Result<ExpectedDigests> expected_digests(const formats::Catalog& catalog, const LoadOptions& options);

// kChecksumMismatch naming the tensor's file, name and offset if `expected` is set and differs.
Status check_digest(const formats::Catalog& catalog, std::uint32_t tensor, std::uint64_t actual,
                    const std::optional<std::uint64_t>& expected);

}  // namespace qload::scheduler::detail
