// libFuzzer target: a torch tensor's view of its storage (formats/src/torch/torch_view.hpp) and
// its gather (formats/strided.hpp). The input is a dtype, a storage entry's size and the size
// its persistent id declares, a storage offset, and size and stride tuples of up to 70 dims
// (over torch's 64), each number either one byte (small) or eight (anything, negative strides
// too). The catalog entry is built as the PyTorch driver builds it, over a synthetic storage of
// at most 64 KiB; it must be refused with a clean error (corrupt, overflow or unsupported) or lie
// inside the storage, agree with its shape and strides, and gather within the expansion bound
// to the values that indexing the storage element by element gives. A span one byte short
// must be refused. Anything else aborts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "qload/formats/strided.hpp"
#include "qload/formats/torch_file.hpp"
#include "torch/torch_view.hpp"

namespace {

using namespace qload;

constexpr std::uint64_t kMaxStorageBytes = 64 * 1024;
constexpr std::uint64_t kCheckedElements = 1 << 16;  // compared element by element, from the first

// Reads the input front to back; past its end every number is 0.
struct Input {
  std::span<const std::uint8_t> bytes;
  std::uint8_t byte() {
    if (bytes.empty()) return 0;
    const std::uint8_t b = bytes.front();
    bytes = bytes.subspan(1);
    return b;
  }
  // One byte below 0x80 is itself; otherwise the next eight bytes, little endian.
  std::uint64_t number() {
    const std::uint8_t tag = byte();
    if (tag < 0x80) return tag;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }
};

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const DTypeInfo> dtypes = all_dtypes();  // those of several elements a block are refused
  Input in{std::span(data, size)};
  formats::PickledTensor t{.name = "v", .storage_key = "0"};
  t.dtype = dtypes[in.byte() % dtypes.size()].dtype;
  const std::uint64_t element = dtype_info(t.dtype).block_bytes;
  const std::uint64_t entry_bytes = in.number() % (kMaxStorageBytes + 1);
  t.storage_bytes = in.number();
  t.storage_offset = in.number();
  const std::size_t rank = in.byte() % 71;
  for (std::size_t d = 0; d < rank; ++d) t.size.push_back(in.number());
  for (std::size_t d = 0; d < rank; ++d) t.stride.push_back(static_cast<std::int64_t>(in.number()));
  const formats::ZipEntry storage{.name = "a/data/0", .data_offset = 0, .size = entry_bytes};
  const auto entry = formats::torch_tensor_entry(t, storage, 0, "fuzz.pt");
  if (!entry) {
    const Errc code = entry.error().code();
    check(code == Errc::kCorrupt || code == Errc::kOverflow || code == Errc::kUnsupported);
    check(entry.error().tensor() == std::optional<std::string_view>("v"));
    return 0;
  }
  // Inside the storage entry and its declared size, and what shape and strides say.
  check(entry->offset <= entry_bytes && entry->nbytes <= entry_bytes - entry->offset);
  check(entry->nbytes == 0 || entry->offset + entry->nbytes <= t.storage_bytes);
  check(t.size.size() <= formats::kMaxTensorDims);
  const auto dense_bytes = entry->shape.nbytes(t.dtype);
  check(dense_bytes.has_value());
  const auto span =
      entry->strides.empty() ? dense_bytes : formats::strided_span_bytes(entry->shape, entry->strides, t.dtype);
  check(span.has_value() && (*span == entry->nbytes || (*dense_bytes == 0 && entry->nbytes == 0)));
  check(*dense_bytes <= std::max(formats::kViewExpansionFloorBytes, formats::kMaxViewExpansion * entry->nbytes));
  if (entry->strides.empty()) return 0;

  // The synthetic storage: byte i is a function of i, so a misplaced element shows.
  std::vector<std::byte> bytes(static_cast<std::size_t>(entry_bytes));
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>((i * 131 + i / 251) & 0xff);
  const auto stored = std::span<const std::byte>(bytes).subspan(static_cast<std::size_t>(entry->offset),
                                                                static_cast<std::size_t>(entry->nbytes));
  const formats::TensorEntry dense = formats::contiguous_entry(*entry);
  check(dense.nbytes == *dense_bytes);
  std::vector<std::byte> out(static_cast<std::size_t>(dense.nbytes));
  check(formats::gather_strided(*entry, stored, out).has_value());
  if (!stored.empty()) check(!formats::gather_strided(*entry, stored.first(stored.size() - 1), out));

  // Row-major element i against its index in the storage, from the view's first element.
  const std::size_t r = entry->shape.rank();
  std::vector<std::uint64_t> index(r, 0);
  const std::uint64_t count = std::min<std::uint64_t>(dense.nbytes / element, kCheckedElements);
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint64_t at = 0;
    for (std::size_t d = 0; d < r; ++d) at += index[d] * entry->strides[d];  // < span: no wrap
    check(std::memcmp(out.data() + i * element, stored.data() + at * element, element) == 0);
    for (std::size_t d = r; d-- > 0;) {
      if (++index[d] < entry->shape[d]) break;
      index[d] = 0;
    }
  }
  return 0;
}
