// libFuzzer target: a torch.save file. Input starting with a pickle PROTO opcode (0x80) goes
// straight to the restricted unpickler, so the fuzzer reaches it without building a zip;
// anything else is read as a zip (central directory, local headers), a stored
// `<archive>/data.pkl` inside it is unpickled, and the whole input is opened as a `.pt` file by
// the PyTorch driver: every tensor it catalogs must lie inside the file, and each strided view
// is gathered row-major from the bytes it spans (formats/strided.hpp).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "qload/formats/driver.hpp"
#include "qload/formats/strided.hpp"
#include "qload/formats/torch_file.hpp"

namespace {

// Views of up to this many bytes once gathered are gathered (an expanded view of a few bytes
// may stand for terabytes; the planner refuses those against the machine's memory).
constexpr std::uint64_t kMaxGatherBytes = 1 << 20;

void open_as_file(std::span<const std::byte> bytes) {
  using namespace qload;
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir != nullptr ? dir : "/tmp") + "/qload-fuzz-torch-" + std::to_string(::getpid()) + ".pt";
  }();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const auto catalog = formats::open_catalog(path);
  if (!catalog) return;
  for (const formats::TensorEntry& t : catalog->tensors) {
    if (t.offset > bytes.size() || t.nbytes > bytes.size() - t.offset) __builtin_trap();  // outside the file
    if (t.strides.empty()) continue;
    const formats::TensorEntry dense = formats::contiguous_entry(t);
    if (dense.nbytes > kMaxGatherBytes) continue;
    std::vector<std::byte> out(static_cast<std::size_t>(dense.nbytes));
    if (!formats::gather_strided(t, bytes.subspan(static_cast<std::size_t>(t.offset)), out)) __builtin_trap();
  }
}

}  // namespace

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
  open_as_file(bytes);
  return 0;
}
