// torch.save files built byte by byte for the C++ tests (the Python suite checks files torch
// itself wrote): a state-dict pickle as torch's pickler emits it (protocol 2) and a zip of
// stored entries around it. CRCs are left 0: qload never reads them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qload/runtime/dtype.hpp"

namespace qload::testing {

struct PickleBytes {
  std::vector<std::byte> bytes;

  PickleBytes& op(std::uint8_t c) {
    bytes.push_back(static_cast<std::byte>(c));
    return *this;
  }
  PickleBytes& raw(const std::string& s) {
    for (const char c : s) bytes.push_back(static_cast<std::byte>(c));
    return *this;
  }
  PickleBytes& u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) op(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  PickleBytes& str(const std::string& s) { return op('X').u32(static_cast<std::uint32_t>(s.size())).raw(s); }
  PickleBytes& integer(std::int32_t v) { return op('J').u32(static_cast<std::uint32_t>(v)); }
  PickleBytes& long8(std::int64_t v) {  // LONG1 of 8 bytes
    op(0x8a).op(8);
    for (int i = 0; i < 8; ++i) op(static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i)));
    return *this;
  }
  PickleBytes& tuple8(const std::vector<std::int64_t>& values) {
    op('(');
    for (const std::int64_t v : values) long8(v);
    return op('t');
  }
  PickleBytes& global(const std::string& module, const std::string& name) {
    return op('c').raw(module + "\n" + name + "\n");
  }
  PickleBytes& tuple(const std::vector<std::int32_t>& values) {
    op('(');
    for (const std::int32_t v : values) integer(v);
    return op('t');
  }
  PickleBytes& put(std::uint8_t memo) { return op('q').op(memo); }  // BINPUT
  PickleBytes& get(std::uint8_t memo) { return op('h').op(memo); }  // BINGET
  // _rebuild_tensor_v2 over storage `key` (`storage_class`, `storage_numel` elements) whose size
  // and stride tuples `sizes(*this)` pushes (memo entries of hostile pickles, say).
  template <class PushSizes>
  PickleBytes& rebuild_with(const std::string& storage_class, const std::string& key, std::int32_t storage_numel,
                            std::int32_t offset, const PushSizes& sizes) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').str("storage").global("torch", storage_class).str(key).str("cpu").integer(storage_numel).op('t').op('Q');
    integer(offset);
    sizes(*this);
    op(0x89).global("collections", "OrderedDict").op(')').op('R');
    return op('t').op('R');
  }
  // `name`: a tensor of sizes `size` and strides `stride`.
  PickleBytes& tensor(const std::string& name, const std::string& storage_class, const std::string& key,
                      std::int32_t storage_numel, std::int32_t offset, const std::vector<std::int32_t>& size,
                      const std::vector<std::int32_t>& stride) {
    return str(name).rebuild_with(storage_class, key, storage_numel, offset,
                                  [&](PickleBytes& p) { p.tuple(size).tuple(stride); });
  }
  PickleBytes& begin_dict() { return op(0x80).op(2).op('}').op('('); }
  PickleBytes& end_dict() { return op('u').op('.'); }
};

// A zip of stored entries, in order.
inline std::vector<std::byte> zip_stored(const std::vector<std::pair<std::string, std::vector<std::byte>>>& entries) {
  std::vector<std::byte> out, directory;
  const auto put = [](std::vector<std::byte>& v, std::uint64_t x, int width) {
    for (int i = 0; i < width; ++i) v.push_back(static_cast<std::byte>(x >> (8 * i)));
  };
  for (const auto& [name, data] : entries) {
    const std::uint64_t local = out.size();
    put(out, 0x04034b50, 4);
    put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 4);
    put(out, data.size(), 4), put(out, data.size(), 4), put(out, name.size(), 2), put(out, 0, 2);
    for (const char c : name) out.push_back(static_cast<std::byte>(c));
    out.insert(out.end(), data.begin(), data.end());
    put(directory, 0x02014b50, 4);
    put(directory, 20, 2), put(directory, 20, 2), put(directory, 0, 2), put(directory, 0, 2);
    put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 4);
    put(directory, data.size(), 4), put(directory, data.size(), 4), put(directory, name.size(), 2);
    put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 4);
    put(directory, local, 4);
    for (const char c : name) directory.push_back(static_cast<std::byte>(c));
  }
  const std::uint64_t at = out.size();
  out.insert(out.end(), directory.begin(), directory.end());
  put(out, 0x06054b50, 4);
  put(out, 0, 2), put(out, 0, 2), put(out, entries.size(), 2), put(out, entries.size(), 2);
  put(out, directory.size(), 4), put(out, at, 4), put(out, 0, 2);
  return out;
}

}  // namespace qload::testing
