// libFuzzer target: a torch.save file held in memory. Input starting with a pickle PROTO
// opcode (0x80) goes straight to the restricted unpickler, so the fuzzer reaches it without
// building a zip; anything else is read as a zip (central directory, local headers), and a
// stored `<archive>/data.pkl` inside it is unpickled too.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "qload/formats/torch_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qload;
  const auto bytes = std::as_bytes(std::span(data, size));
  if (size > 0 && data[0] == 0x80) {
    (void)formats::read_state_dict_pickle(bytes, "fuzz.pkl");
    return 0;
  }
  const formats::ReadAt read = [&](std::uint64_t offset, std::span<std::byte> out) -> Status {
    if (offset > size || out.size() > size - offset) return fail(Errc::kTruncated, "past the end");
    if (!out.empty()) std::memcpy(out.data(), data + offset, out.size());  // an empty span may be null
    return {};
  };
  const auto entries = formats::read_zip_directory(size, read, "fuzz.pt");
  if (!entries) return 0;
  for (const formats::ZipEntry& e : *entries) {
    if (e.method != 0 || !e.name.ends_with("/data.pkl")) continue;
    (void)formats::read_state_dict_pickle(
        bytes.subspan(static_cast<std::size_t>(e.data_offset), static_cast<std::size_t>(e.size)), "fuzz.pt");
  }
  return 0;
}
