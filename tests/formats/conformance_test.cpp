// One suite over every registered driver (style.md: tensorstore's all_kvstores_test): each
// must recognise its own sample, open it, list its tensors, read a range through the catalog,
// and reject garbage with typed errors that name the file. A new driver fails here until it
// adds a sample below.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>

#include "formats_test_support.hpp"
#include "gguf_bytes.hpp"
#include "torch_bytes.hpp"

using namespace qload;
using namespace qload::testing;

namespace {

// A driver's sample file: `write` stores `tensors`, tensor i holding
// random_bytes(nbytes, sample_seed(i)), so reads through the catalog can be checked.
struct Sample {
  std::string file_name;  // garbage is written under the same name, so it is "recognised"
  std::function<void(const std::string& path)> write;
  std::vector<ShardTensor> tensors;
};

const std::map<std::string, Sample>& samples() {
  static const std::map<std::string, Sample> all{
      {"safetensors",
       Sample{"sample.safetensors",
              [](const std::string& path) {
                write_shard(path, {{"embed", DType::kBF16, Shape{4, 3}}, {"bias", DType::kF32, Shape{3}}});
              },
              {{"embed", DType::kBF16, Shape{4, 3}}, {"bias", DType::kF32, Shape{3}}}}},
      {"gguf",
       Sample{"sample.gguf",
              [](const std::string& path) {
                // ggml stores dims innermost first: [3, 4] is numpy's (4, 3). BF16 then F32.
                GgufBytes g;
                g.header(2, 1).kv_str("general.architecture", "llama");
                g.tensor("embed", {3, 4}, 30, 0).tensor("bias", {3}, 0, 32);
                g.pad_to(32).data(random_bytes(24, sample_seed(0))).pad_to(32).data(random_bytes(12, sample_seed(1)));
                write_file(path, g.bytes);
              },
              {{"embed", DType::kBF16, Shape{4, 3}}, {"bias", DType::kF32, Shape{3}}}}},
      {"pytorch", Sample{"pytorch_model.bin",
                         [](const std::string& path) {
                           // torch.save's layout: a state-dict pickle and one stored entry per storage.
                           PickleBytes p;
                           p.begin_dict()
                               .tensor("embed", "BFloat16Storage", "0", 12, 0, {4, 3}, {3, 1})
                               .tensor("bias", "FloatStorage", "1", 3, 0, {3}, {1})
                               .end_dict();
                           write_file(path, zip_stored({{"archive/data.pkl", p.bytes},
                                                        {"archive/byteorder",
                                                         {std::byte{'l'}, std::byte{'i'}, std::byte{'t'},
                                                          std::byte{'t'}, std::byte{'l'}, std::byte{'e'}}},
                                                        {"archive/data/0", random_bytes(24, sample_seed(0))},
                                                        {"archive/data/1", random_bytes(12, sample_seed(1))}}));
                         },
                         {{"embed", DType::kBF16, Shape{4, 3}}, {"bias", DType::kF32, Shape{3}}}}},
  };
  return all;
}

bool is_typed_rejection(Errc code) {
  return code == Errc::kCorrupt || code == Errc::kTruncated || code == Errc::kUnsupported || code == Errc::kOverflow ||
         code == Errc::kNotFound || code == Errc::kInvalidArgument;
}

}  // namespace

TEST_CASE("every driver recognises, opens, lists and reads its own sample", "[formats][conformance]") {
  for (const formats::FormatDriver* driver : formats::drivers()) {
    INFO("driver " << driver->name());
    const auto sample = samples().find(std::string(driver->name()));
    REQUIRE(sample != samples().end());  // add a sample for every new driver
    ScratchDir dir;
    const std::string path = dir.file(sample->second.file_name);
    sample->second.write(path);
    CHECK(driver->recognizes(path));
    CHECK(driver->recognizes(dir.path().string()));
    const auto catalog = driver->open(path);
    REQUIRE(catalog);
    CHECK(catalog->format == driver->name());
    REQUIRE(catalog->tensors.size() == sample->second.tensors.size());
    for (const ShardTensor& want : sample->second.tensors) {
      const formats::TensorEntry* t = catalog->find(want.name);
      REQUIRE(t != nullptr);
      CHECK(t->dtype == want.dtype);
      CHECK(t->shape == want.shape);
      CHECK(t->nbytes == *want.shape.nbytes(want.dtype));
      CHECK(t->offset + t->nbytes <= catalog->files[t->file].size);
    }
    for (std::size_t i = 0; i < sample->second.tensors.size(); ++i) {
      // Read a range through the catalog: the bytes are where it says.
      const formats::TensorEntry* t = catalog->find(sample->second.tensors[i].name);
      CHECK(read_file_range(catalog->files[t->file].path, t->offset, t->nbytes) ==
            random_bytes(t->nbytes, sample_seed(i)));
    }
    CHECK(std::is_sorted(catalog->tensors.begin(), catalog->tensors.end(), [](const auto& a, const auto& b) {
      return std::tie(a.file, a.offset) < std::tie(b.file, b.offset);
    }));
  }
}

TEST_CASE("every driver rejects garbage with typed errors that name the file", "[formats][conformance]") {
  for (const formats::FormatDriver* driver : formats::drivers()) {
    INFO("driver " << driver->name());
    const auto sample = samples().find(std::string(driver->name()));
    REQUIRE(sample != samples().end());
    ScratchDir dir;
    const std::string path = dir.file(sample->second.file_name);
    for (const std::size_t size : {0u, 1u, 7u, 8u, 9u, 64u, 4096u, 65537u}) {
      for (const std::uint64_t seed : {1u, 2u, 3u}) {
        INFO("random file of " << size << " bytes, seed " << seed);
        write_file(path, random_bytes(size, seed * 1000 + size));
        const auto result = driver->open(path);
        REQUIRE_FALSE(result.has_value());
        CHECK(is_typed_rejection(result.error().code()));
        CHECK(result.error().file() == path);
      }
    }
    std::filesystem::remove(path);
    CHECK_FALSE(driver->recognizes(dir.path().string()));
    const auto empty_dir = driver->open(dir.path().string());
    REQUIRE_FALSE(empty_dir.has_value());
    CHECK(is_typed_rejection(empty_dir.error().code()));
    CHECK(empty_dir.error().file() == dir.path().string());
  }
}
