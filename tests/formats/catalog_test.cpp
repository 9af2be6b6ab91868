// The Catalog's name index and totals, and the driver registry.
#include <catch2/catch.hpp>

#include "formats_test_support.hpp"

using namespace qload;
using namespace qload::testing;
using formats::Catalog;
using formats::TensorEntry;

TEST_CASE("Catalog::find uses the name index, which survives copies and moves", "[formats][catalog]") {
  Catalog catalog;
  catalog.tensors.push_back(TensorEntry{.name = "b", .file = 0, .offset = 8, .nbytes = 4});
  catalog.tensors.push_back(TensorEntry{.name = "a", .file = 0, .offset = 12, .nbytes = 6});
  CHECK(catalog.find("a") == nullptr);  // not indexed yet
  catalog.index_names();
  REQUIRE(catalog.find("a") != nullptr);
  CHECK(catalog.find("a")->offset == 12);
  CHECK(catalog.find("c") == nullptr);
  CHECK(catalog.total_tensor_bytes() == 10);
  const Catalog copy = catalog;
  REQUIRE(copy.find("b") != nullptr);
  CHECK(copy.find("b") == &copy.tensors[0]);
  const Catalog moved = std::move(catalog);
  CHECK(moved.find("a") == &moved.tensors[1]);
}

TEST_CASE("total_tensor_bytes saturates rather than wrapping", "[formats][catalog]") {
  Catalog catalog;
  catalog.tensors.push_back(TensorEntry{.name = "x", .nbytes = UINT64_MAX - 1});
  catalog.tensors.push_back(TensorEntry{.name = "y", .nbytes = 5});
  CHECK(catalog.total_tensor_bytes() == UINT64_MAX);
}

TEST_CASE("the registry lists safetensors, gguf and pytorch and opens what a driver recognizes",
          "[formats][registry]") {
  REQUIRE_FALSE(formats::drivers().empty());
  CHECK(formats::drivers()[0]->name() == "safetensors");
  CHECK(formats::find_driver("safetensors") == formats::drivers()[0]);
  CHECK(formats::find_driver("gguf") == formats::drivers()[1]);
  CHECK(formats::find_driver("pytorch") == formats::drivers()[2]);
  CHECK(formats::find_driver("tensorflow") == nullptr);
  ScratchDir dir;
  write_shard(dir.file("model.safetensors"), {{"w", DType::kU8, Shape{2}}});
  const auto catalog = formats::open_catalog(dir.file("model.safetensors"));
  REQUIRE(catalog);
  CHECK(catalog->format == "safetensors");
  CHECK(formats::open_catalog(dir.path().string()));
  check_error(formats::open_catalog(dir.file("missing")),
              {Errc::kNotFound, "open checkpoint", dir.file("missing"), "", std::nullopt});
  write_text(dir.file("notes.txt"), "hello");
  check_error(formats::open_catalog(dir.file("notes.txt")),
              {Errc::kUnsupported, "no format driver recognizes this source (tried: safetensors, gguf, pytorch)",
               dir.file("notes.txt"), "", std::nullopt});
}
