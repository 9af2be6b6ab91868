// One pass over a checkpoint: file digests equal a whole-file hash, tensor digests equal the
// hash of exactly each tensor's bytes, however the chunks cut the tensors.
#include <catch2/catch.hpp>

#include <filesystem>

#include "qload/formats/checkpoint_digest.hpp"
#include "qload/formats/driver.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "support/scratch.hpp"

using namespace qload;

TEST_CASE("checkpoint digests cover every file and exactly each tensor's bytes", "[formats][digest]") {
  testing::ScratchDir dir;
  // Odd sizes (so tensors start at unaligned offsets), an empty tensor and a scalar.
  const auto a = testing::random_bytes(3 * 12345, 1), b = testing::random_bytes(0, 2), c = testing::random_bytes(4, 3),
             d = testing::random_bytes(2 * 70001, 4);
  const std::vector<formats::WriterTensor> tensors{{"a", DType::kU8, Shape{3, 12345}, a},
                                                   {"b", DType::kF32, Shape{0, 7}, b},
                                                   {"c", DType::kF32, Shape{}, c},
                                                   {"d", DType::kBF16, Shape{70001}, d}};
  const std::string path = dir.file("model.safetensors");
  REQUIRE(formats::write_safetensors(path, tensors));
  const formats::Catalog catalog = formats::open_catalog(path).value();

  for (std::size_t chunk : {std::size_t{4096}, std::size_t{777}, std::size_t{1} << 20}) {
    INFO("chunk " << chunk);
    auto reader = io::make_reader({}, Logger{}).value();
    const auto digest = formats::digest_checkpoint(*reader, catalog, {.chunk_bytes = chunk, .chunks_in_flight = 4});
    REQUIRE(digest);
    REQUIRE(digest->files.size() == 1);
    CHECK(digest->files[0].path == path);
    CHECK(digest->files[0].bytes == std::filesystem::file_size(path));
    auto whole = io::make_reader({}, Logger{}).value();
    CHECK(digest->files[0].xxh3_128 == io::digest_file(*whole, whole->open_file(path).value())->xxh3_128);
    REQUIRE(digest->tensors.size() == 4);
    for (const auto& t : digest->tensors) {
      INFO(t.name);
      const auto& expected = t.name == "a" ? a : t.name == "b" ? b : t.name == "c" ? c : d;
      CHECK(t.xxh3_64 == io::xxh3_64(expected));
    }
  }
}
