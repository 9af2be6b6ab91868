// The safetensors writer: round trips through the parser, reference layout (space padding,
// given order), streaming through fill callbacks, and atomic output on failure.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "formats_test_support.hpp"
#include "qload/formats/safetensors.hpp"
#include "qload/formats/safetensors_writer.hpp"

using namespace qload;
using namespace qload::testing;
using formats::WriterTensor;

namespace {

std::vector<std::string> dir_names(const ScratchDir& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Owned {
  WriterTensor tensor;
  std::vector<std::byte> bytes;
};

std::vector<Owned> mixed_tensors() {
  std::vector<Owned> out;
  const auto add = [&](std::string name, DType dtype, Shape shape) {
    const std::uint64_t n = *shape.nbytes(dtype);
    out.push_back({WriterTensor{.name = std::move(name), .dtype = dtype, .shape = std::move(shape)},
                   random_bytes(n, out.size() + 1)});
  };
  add("embed", DType::kBF16, Shape{7, 3});
  add("odd.bytes", DType::kU8, Shape{5});  // everything after this is unaligned
  add("scale", DType::kF32, Shape{});
  add("empty", DType::kI64, Shape{0, 9});
  add("fp4", DType::kF4, Shape{3, 2});
  add("fp6", DType::kF6_E3M2, Shape{8});
  add("fp8", DType::kF8_E4M3, Shape{2, 2, 2});
  add("quote\"back\\slash\nnl\x01ctl \xc3\xa9", DType::kI16, Shape{2});
  for (Owned& o : out) o.tensor.bytes = o.bytes;
  return out;
}

std::vector<WriterTensor> views(const std::vector<Owned>& owned) {
  std::vector<WriterTensor> out;
  for (const Owned& o : owned) out.push_back(o.tensor);
  return out;
}

}  // namespace

TEST_CASE("writer output parses back to the same tensors, bytes and metadata", "[formats][writer]") {
  ScratchDir dir;
  const auto owned = mixed_tensors();
  const std::string path = dir.file("out.safetensors");
  REQUIRE(formats::write_safetensors(path, views(owned), {.metadata = {{"format", "pt"}, {"k\"ey", "v\nal"}}}));
  const auto header = formats::read_safetensors_header(path);
  REQUIRE(header);
  CHECK(header->metadata == std::map<std::string, std::string>{{"format", "pt"}, {"k\"ey", "v\nal"}});
  REQUIRE(header->tensors.size() == owned.size());
  std::uint64_t offset = header->data_offset;
  for (std::size_t i = 0; i < owned.size(); ++i) {
    // Written in the given order, back to back; the parser returns them in offset order.
    const auto& t = header->tensors[i];
    const auto& want = owned[i];
    INFO(want.tensor.name);
    CHECK(t.name == want.tensor.name);
    CHECK(t.dtype == want.tensor.dtype);
    CHECK(t.shape == want.tensor.shape);
    CHECK(t.offset == offset);
    CHECK(t.nbytes == want.bytes.size());
    CHECK(read_file_range(path, t.offset, t.nbytes) == want.bytes);
    offset += t.nbytes;
  }
  CHECK(offset == std::filesystem::file_size(path));
  CHECK(dir_names(dir) == std::vector<std::string>{"out.safetensors"});
}

TEST_CASE("the header is padded with spaces to a multiple of 8, as the reference does", "[formats][writer]") {
  const auto owned = mixed_tensors();
  const auto tensors = views(owned);
  for (std::size_t count = 0; count <= tensors.size(); ++count) {
    const auto header = formats::build_safetensors_header(std::span(tensors).first(count), {});
    REQUIRE(header);
    const std::uint64_t n = header->size() - 8;
    std::uint64_t declared = 0;
    for (int i = 7; i >= 0; --i) declared = (declared << 8) | std::to_integer<std::uint64_t>((*header)[i]);
    CHECK(declared == n);
    CHECK(n % 8 == 0);
    const std::string text(reinterpret_cast<const char*>(header->data() + 8), n);
    const auto close = text.rfind('}');
    CHECK(text.find_first_not_of(' ', close + 1) == std::string::npos);
    CHECK(text.size() - close - 1 < 8);
  }
  const auto empty = formats::build_safetensors_header({}, {});
  REQUIRE(empty);
  CHECK(std::string(reinterpret_cast<const char*>(empty->data() + 8), empty->size() - 8) == "{}      ");
}

TEST_CASE("fill callbacks stream a tensor in chunks, never as one buffer", "[formats][writer]") {
  ScratchDir dir;
  const auto expected = random_bytes(1'000'003, 99);
  std::uint64_t next = 0;
  std::size_t largest_chunk = 0;
  WriterTensor big{.name = "big", .dtype = DType::kU8, .shape = Shape{expected.size()}};
  big.fill = [&](std::uint64_t offset, std::span<std::byte> out) -> Status {
    CHECK(offset == next);  // consecutive chunks from 0
    largest_chunk = std::max(largest_chunk, out.size());
    std::copy_n(expected.begin() + static_cast<std::ptrdiff_t>(offset), out.size(), out.begin());
    next += out.size();
    return {};
  };
  const auto small = random_bytes(3, 5);
  const std::vector<WriterTensor> tensors{
      WriterTensor{.name = "small", .dtype = DType::kU8, .shape = Shape{3}, .bytes = small}, big};
  const std::string path = dir.file("big.safetensors");
  REQUIRE(formats::write_safetensors(path, tensors, {.chunk_bytes = 4099}));
  CHECK(next == expected.size());
  CHECK(largest_chunk == 4099);
  const auto header = formats::read_safetensors_header(path);
  REQUIRE(header);
  REQUIRE(header->tensors.size() == 2);
  CHECK(read_file_range(path, header->tensors[1].offset, expected.size()) == expected);
}

TEST_CASE("a failed write leaves no output and no temp file, and keeps an existing file", "[formats][writer]") {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  write_text(path, "previous contents");
  WriterTensor failing{.name = "w", .dtype = DType::kF32, .shape = Shape{1024, 16}};
  failing.fill = [](std::uint64_t offset, std::span<std::byte> out) -> Status {
    if (offset >= 8192) return fail(Errc::kIo, "source went away");
    std::fill(out.begin(), out.end(), std::byte{1});
    return {};
  };
  const std::vector<WriterTensor> tensors{failing};
  const Status status = formats::write_safetensors(path, tensors, {.chunk_bytes = 4096});
  check_error(status, {Errc::kIo, "source went away", path, "w", std::nullopt});
  REQUIRE(status.error().offset().has_value());
  CHECK(*status.error().offset() > 8192);  // the file offset of the failed chunk
  CHECK(dir_names(dir) == std::vector<std::string>{"model.safetensors"});
  CHECK(read_file_range(path, 0, 17) == bytes_of("previous contents"));
}

TEST_CASE("the writer rejects what the parser would reject, before creating anything", "[formats][writer]") {
  ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");
  const auto four = random_bytes(4, 1);
  const auto one = random_bytes(1, 1);
  const auto write = [&](std::vector<WriterTensor> tensors, std::map<std::string, std::string> metadata = {}) {
    return formats::write_safetensors(path, tensors, {.metadata = std::move(metadata)});
  };
  const auto u8 = [](std::string name, std::span<const std::byte> bytes, Shape shape) {
    return WriterTensor{.name = std::move(name), .dtype = DType::kU8, .shape = std::move(shape), .bytes = bytes};
  };
  check_error(write({u8("a", four, Shape{4}), u8("a", one, Shape{1})}),
              {Errc::kInvalidArgument, "duplicate tensor name", path, "a", std::nullopt});
  check_error(write({u8("__metadata__", four, Shape{4})}),
              {Errc::kInvalidArgument, "reserved", path, "__metadata__", std::nullopt});
  check_error(write({u8("a", four, Shape{3})}),
              {Errc::kInvalidArgument, "needs 3 bytes but 4 were given", path, "a", std::nullopt});
  check_error(write({u8("bad\xff", four, Shape{4})}),
              {Errc::kInvalidArgument, "not valid UTF-8", path, "bad\xff", std::nullopt});
  check_error(write({u8("a", four, Shape{4})}, {{"k", "\xc0"}}),
              {Errc::kInvalidArgument, "metadata value of k is not valid UTF-8", path, "", std::nullopt});
  check_error(write({WriterTensor{.name = "f4", .dtype = DType::kF4, .shape = Shape{3}, .bytes = one}}),
              {Errc::kCorrupt, "not a whole number", path, "f4", std::nullopt});
  check_error(write({WriterTensor{.name = "o", .dtype = DType::kF32, .shape = Shape{1ull << 62}}}),
              {Errc::kOverflow, "", path, "o", std::nullopt});
  CHECK(dir_names(dir).empty());
  const std::string nowhere = dir.file("missing/dir/x.safetensors");
  check_error(formats::write_safetensors(nowhere, std::vector<WriterTensor>{u8("a", four, Shape{4})}),
              {Errc::kNotFound, "create temp file", nowhere, std::nullopt, std::nullopt});
}
