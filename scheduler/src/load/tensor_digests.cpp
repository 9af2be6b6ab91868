#include "load/tensor_digests.hpp"

#include <fmt/format.h>

#include "qload/io/digest.hpp"

namespace qload::scheduler::detail {

Result<ExpectedDigests> expected_digests(const formats::Catalog& catalog, const LoadOptions& options) {
  ExpectedDigests out(catalog.tensors.size());
  if (options.expected_xxh3_64.empty()) return out;
  std::size_t matched = 0;
  for (std::size_t i = 0; i < catalog.tensors.size(); ++i) {
    auto it = options.expected_xxh3_64.find(catalog.tensors[i].name);
    if (it == options.expected_xxh3_64.end()) continue;
    out[i] = it->second;
    ++matched;
  }
  if (matched != options.expected_xxh3_64.size()) {
    // Name the first expected tensor that is missing: a lock for another model must not pass.
    for (const auto& [name, digest] : options.expected_xxh3_64) {
      bool found = false;
      for (const formats::TensorEntry& t : catalog.tensors) found = found || t.name == name;
      if (!found)
        return fail(
            Error(Errc::kNotFound, "a digest is expected for a tensor the checkpoint does not have").with_tensor(name));
    }
  }
  return out;
}

Status check_digest(const formats::Catalog& catalog, std::uint32_t tensor, std::uint64_t actual,
                    const std::optional<std::uint64_t>& expected) {
  if (!expected || *expected == actual) return {};
  const formats::TensorEntry& t = catalog.tensors[tensor];
  return fail(Error(Errc::kChecksumMismatch, fmt::format("xxh3-64 of the tensor's {} bytes is {}, expected {}",
                                                         t.nbytes, io::hex64(actual), io::hex64(*expected)))
                  .with_offset(t.offset)
                  .with_tensor(t.name)
                  .with_file(catalog.files[t.file].path));
}

}  // namespace qload::scheduler::detail
