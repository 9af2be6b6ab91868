#include "qload/formats/catalog.hpp"

namespace qload::formats {

const TensorEntry* Catalog::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors[it->second];
}

std::uint64_t Catalog::total_tensor_bytes() const {
  // Drivers validated every tensor against its file's size, so the sum fits in practice;
  // saturating keeps a hand-built catalog from wrapping to a small number.
  std::uint64_t total = 0;
  for (const TensorEntry& t : tensors)
    if (__builtin_add_overflow(total, t.nbytes, &total)) return UINT64_MAX;
  return total;
}

void Catalog::index_names() {
  // Indices, not pointers: a copied or moved Catalog keeps a valid index.
  by_name_.clear();
  for (std::size_t i = 0; i < tensors.size(); ++i) by_name_.emplace(tensors[i].name, i);
}

}  // namespace qload::formats
