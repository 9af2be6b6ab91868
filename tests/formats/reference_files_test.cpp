// Files written by the reference implementation (Python safetensors, see
// make_reference_files.py) must parse to exactly the layout it wrote, and qload's writer must
// reproduce them byte for byte. No Python is needed at test time: the files and the expected
// table are committed.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "formats_test_support.hpp"
#include "qload/formats/safetensors.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "qload/io/digest.hpp"

using namespace qload;
using namespace qload::testing;
namespace fs = std::filesystem;

namespace {

struct ExpectedTensor {
  const char* file;
  const char* name;
  const char* dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t offset;
  std::uint64_t nbytes;
  std::uint64_t xxh3;
};

const std::vector<ExpectedTensor>& expected_tensors() {
  static const std::vector<ExpectedTensor> table{
#include "reference_expected.inc"
  };
  return table;
}

// tests/formats/data, as CMake says.
fs::path data_dir() {
  const fs::path dir = QLOAD_TEST_FORMATS_DATA;
  REQUIRE(fs::is_directory(dir));
  return dir;
}

std::vector<std::byte> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  const std::vector<char> chars{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

std::vector<std::string> reference_files() {
  std::vector<std::string> files;
  for (const auto& t : expected_tensors())
    if (files.empty() || files.back() != t.file) files.push_back(t.file);
  return files;
}

}  // namespace

TEST_CASE("files from the reference writer parse to the layout it wrote", "[formats][reference]") {
  REQUIRE(expected_tensors().size() >= 20);
  for (const std::string& file : reference_files()) {
    INFO(file);
    const fs::path path = data_dir() / file;
    const auto header = formats::read_safetensors_header(path.string());
    REQUIRE(header);
    const auto bytes = read_all(path);
    std::size_t count = 0;
    for (const ExpectedTensor& want : expected_tensors()) {
      if (want.file != file) continue;
      INFO(want.name);
      REQUIRE(count < header->tensors.size());
      const formats::TensorEntry& got = header->tensors[count++];  // both sorted by (offset, name)
      CHECK(got.name == want.name);
      CHECK(dtype_name(got.dtype) == want.dtype);
      CHECK(got.shape == Shape(want.shape));
      CHECK(got.offset == want.offset);
      CHECK(got.nbytes == want.nbytes);
      REQUIRE(got.offset + got.nbytes <= bytes.size());
      CHECK(io::xxh3_64(std::span(bytes).subspan(got.offset, got.nbytes)) == want.xxh3);
    }
    CHECK(count == header->tensors.size());
    CHECK(header->metadata.size() == 1);
  }
}

TEST_CASE("the reference writer's sharded checkpoint opens as one catalog", "[formats][reference]") {
  const fs::path dir = data_dir() / "reference_sharded";
  const auto catalog = safetensors().open(dir.string());
  REQUIRE(catalog);
  CHECK(catalog->files.size() == 2);
  CHECK(catalog->tensors.size() == 4);
  for (const ExpectedTensor& want : expected_tensors()) {
    if (!std::string_view(want.file).starts_with("reference_sharded/")) continue;
    const formats::TensorEntry* got = catalog->find(want.name);
    REQUIRE(got != nullptr);
    CHECK(catalog->files[got->file].path == (data_dir() / want.file).string());
    CHECK(got->offset == want.offset);
  }
  CHECK(catalog->quantization_config == R"({"bits":8,"quant_method":"fp8"})");
}

TEST_CASE("qload's writer reproduces reference files byte for byte", "[formats][reference][writer]") {
  ScratchDir scratch;
  for (const std::string& file : reference_files()) {
    INFO(file);
    const fs::path path = data_dir() / file;
    const auto original = read_all(path);
    const auto header = formats::read_safetensors_header(path.string());
    REQUIRE(header);
    // Same tensors, in the order the reference laid them out, with the same metadata.
    std::vector<formats::WriterTensor> tensors;
    for (const formats::TensorEntry& t : header->tensors)
      tensors.push_back({.name = t.name,
                         .dtype = t.dtype,
                         .shape = t.shape,
                         .bytes = std::span(original).subspan(t.offset, t.nbytes)});
    const std::string out = scratch.file("rewritten.safetensors");
    REQUIRE(formats::write_safetensors(out, tensors, {.metadata = header->metadata}));
    CHECK(read_all(out) == original);
  }
}
