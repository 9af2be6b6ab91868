// The zip central directory (APPNOTE.TXT 6.3): the end of central directory record (and its
// zip64 locator and record), then one central header per entry and each entry's local header,
// which says where its data starts. Nothing is decompressed: PyTorch stores every entry, and a
// compressed entry is refused when it is read (torch_catalog.cpp), so a zip bomb has nothing
// to expand.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "../located_error.hpp"
#include "qload/formats/torch_file.hpp"

namespace qload::formats {
namespace {

constexpr std::uint32_t kEndSignature = 0x06054b50;
constexpr std::uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr std::uint32_t kZip64EndSignature = 0x06064b50;
constexpr std::uint32_t kCentralSignature = 0x02014b50;
constexpr std::uint32_t kLocalSignature = 0x04034b50;
constexpr std::uint64_t kEndBytes = 22, kZip64LocatorBytes = 20, kZip64EndBytes = 56;
constexpr std::uint64_t kCentralBytes = 46, kLocalBytes = 30;
constexpr std::uint64_t kMaxComment = 0xffff;

// Little-endian fields of a byte span, bounds-checked by the callers' sizes.
struct Fields {
  std::span<const std::byte> bytes;
  std::uint64_t u(std::size_t at, std::size_t width) const {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < width; ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(bytes[at + i])) << (8 * i);
    return v;
  }
  std::uint16_t u16(std::size_t at) const { return static_cast<std::uint16_t>(u(at, 2)); }
  std::uint32_t u32(std::size_t at) const { return static_cast<std::uint32_t>(u(at, 4)); }
  std::uint64_t u64(std::size_t at) const { return u(at, 8); }
};

Error corrupt(const std::string& path, std::string message, std::uint64_t offset, std::string_view entry = {}) {
  return located(Errc::kCorrupt, "zip: " + std::move(message), path, entry, offset);
}

struct Directory {
  std::uint64_t entries = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint64_t end_at = 0;  // where the records after the directory start (its data must end before)
};

// The end of central directory record: the last one in the file's final 64 KiB + 22 bytes.
Result<Directory> find_directory(std::uint64_t file_size, const ReadAt& read, const std::string& path) {
  if (file_size < kEndBytes) return fail(corrupt(path, "the file is too short to be a zip archive", 0));
  const std::uint64_t tail_size = std::min(file_size, kEndBytes + kMaxComment);
  std::vector<std::byte> tail(static_cast<std::size_t>(tail_size));
  const std::uint64_t tail_at = file_size - tail_size;
  QLOAD_TRY(read(tail_at, tail));
  const Fields f{tail};
  std::optional<std::uint64_t> end;
  for (std::uint64_t i = tail_size - kEndBytes + 1; i-- > 0;)
    if (f.u32(i) == kEndSignature && f.u16(i + 20) == tail_size - kEndBytes - i) {  // the comment reaches the end
      end = i;
      break;
    }
  if (!end) return fail(corrupt(path, "no end of central directory record (not a zip archive?)", file_size));
  const std::uint64_t at = *end;
  if (f.u16(at + 4) != 0 || f.u16(at + 6) != 0 || f.u16(at + 8) != f.u16(at + 10))
    return fail(
        located(Errc::kUnsupported, "zip: archives spanning several disks are not supported", path, {}, tail_at + at));
  Directory d{.entries = f.u16(at + 10), .offset = f.u32(at + 16), .size = f.u32(at + 12), .end_at = tail_at + at};
  const bool zip64 = d.entries == 0xffff || d.offset == 0xffffffff || d.size == 0xffffffff;
  if (!zip64 || at < kZip64LocatorBytes || f.u32(at - kZip64LocatorBytes) != kZip64LocatorSignature) return d;
  // zip64: the locator just before the end record points at the zip64 end record.
  const std::uint64_t record = f.u64(at - kZip64LocatorBytes + 8);
  if (record > file_size || file_size - record < kZip64EndBytes)
    return fail(corrupt(path, "the zip64 end record lies outside the file", tail_at + at - kZip64LocatorBytes));
  std::array<std::byte, kZip64EndBytes> z{};
  QLOAD_TRY(read(record, z));
  const Fields r{z};
  if (r.u32(0) != kZip64EndSignature) return fail(corrupt(path, "bad zip64 end record signature", record));
  if (r.u32(16) != 0 || r.u32(20) != 0 || r.u64(24) != r.u64(32))
    return fail(
        located(Errc::kUnsupported, "zip: archives spanning several disks are not supported", path, {}, record));
  return Directory{.entries = r.u64(32), .offset = r.u64(48), .size = r.u64(40), .end_at = record};
}

// The zip64 extra field (id 1) of a central header: the 64-bit values of the fields that are
// 0xffffffff, in the order uncompressed size, compressed size, local header offset.
Status apply_zip64_extra(Fields extra, std::uint64_t& uncompressed, std::uint64_t& compressed, std::uint64_t& local,
                         const std::string& path, std::uint64_t at, std::string_view name) {
  std::size_t i = 0;
  while (i + 4 <= extra.bytes.size()) {
    const std::uint16_t id = extra.u16(i), len = extra.u16(i + 2);
    if (i + 4 + len > extra.bytes.size()) return fail(corrupt(path, "an extra field runs past its header", at, name));
    if (id == 1) {
      std::size_t p = i + 4;
      for (std::uint64_t* v : {&uncompressed, &compressed, &local}) {
        if (*v != 0xffffffff) continue;
        if (p + 8 > i + 4 + len) return fail(corrupt(path, "a zip64 extra field is too short", at, name));
        *v = extra.u64(p);
        p += 8;
      }
      return {};
    }
    i += 4 + len;
  }
  if (uncompressed == 0xffffffff || compressed == 0xffffffff || local == 0xffffffff)
    return fail(corrupt(path, "a 32-bit field says zip64 but the entry has no zip64 extra field", at, name));
  return {};
}

}  // namespace

Result<std::vector<ZipEntry>> read_zip_directory(std::uint64_t file_size, const ReadAt& read, const std::string& path) {
  QLOAD_ASSIGN_OR_RETURN(const Directory d, find_directory(file_size, read, path));
  if (d.offset > d.end_at || d.size > d.end_at - d.offset)
    return fail(
        corrupt(path, fmt::format("the central directory ({} bytes at {}) runs past its end record", d.size, d.offset),
                d.end_at));
  if (d.size > kMaxZipDirectoryBytes)
    return fail(located(Errc::kUnsupported, fmt::format("zip: a central directory of {} bytes", d.size), path));
  if (d.entries > d.size / kCentralBytes || d.entries > kMaxZipEntries)
    return fail(corrupt(path, fmt::format("{} entries cannot fit a central directory of {} bytes", d.entries, d.size),
                        d.end_at));
  std::vector<std::byte> dir(static_cast<std::size_t>(d.size));
  QLOAD_TRY(read(d.offset, dir));
  const Fields f{dir};
  std::vector<ZipEntry> out;
  out.reserve(static_cast<std::size_t>(d.entries));
  std::set<std::string, std::less<>> names;
  std::uint64_t i = 0;
  for (std::uint64_t e = 0; e < d.entries; ++e) {
    const std::uint64_t at = d.offset + i;
    if (d.size - i < kCentralBytes || f.u32(i) != kCentralSignature)
      return fail(corrupt(path, fmt::format("central directory entry {} is missing or has a bad signature", e), at));
    const std::uint16_t flags = f.u16(i + 8), method = f.u16(i + 10);
    std::uint64_t compressed = f.u32(i + 20), uncompressed = f.u32(i + 24), local = f.u32(i + 42);
    const std::uint64_t name_len = f.u16(i + 28), extra_len = f.u16(i + 30), comment_len = f.u16(i + 32);
    if (d.size - i - kCentralBytes < name_len + extra_len + comment_len)
      return fail(corrupt(path, fmt::format("central directory entry {} runs past the directory", e), at));
    std::string name(reinterpret_cast<const char*>(dir.data() + i + kCentralBytes), name_len);
    QLOAD_TRY(apply_zip64_extra(Fields{f.bytes.subspan(i + kCentralBytes + name_len, extra_len)}, uncompressed,
                                compressed, local, path, at, name));
    if ((flags & 1u) != 0) return fail(located(Errc::kUnsupported, "zip: an encrypted entry", path, name, at));
    if (method == 0 && compressed != uncompressed)
      return fail(corrupt(
          path, fmt::format("a stored entry of {} bytes says it expands to {}", compressed, uncompressed), at, name));
    // The local header: its own name and extra lengths say where the data starts.
    if (local > d.offset || d.offset - local < kLocalBytes)
      return fail(corrupt(path, "the local header lies outside the entries' area", at, name));
    std::array<std::byte, kLocalBytes> lh{};
    QLOAD_TRY(read(local, lh));
    const Fields l{lh};
    if (l.u32(0) != kLocalSignature) return fail(corrupt(path, "bad local header signature", local, name));
    const std::uint64_t data = local + kLocalBytes + l.u16(26) + l.u16(28);
    if (data > d.offset || compressed > d.offset - data)
      return fail(corrupt(path,
                          fmt::format("the entry's {} bytes at {} run into the central directory", compressed, data),
                          local, name));
    if (!names.insert(name).second) return fail(corrupt(path, "two entries have the same name", at, name));
    out.push_back(ZipEntry{.name = std::move(name), .data_offset = data, .size = compressed, .method = method});
    i += kCentralBytes + name_len + extra_len + comment_len;
  }
  return out;
}

}  // namespace qload::formats
