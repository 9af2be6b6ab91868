// A checkpoint of strided views over one BF16 [48, 64] storage (formats::TensorEntry::strides,
// as torch.save stores transposed or stepped tensors), with each view's values computed by
// indexing the storage element by element: the reference the strided load tests compare with.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "qload/formats/convert.hpp"
#include "qload/formats/strided.hpp"
#include "scheduler/scheduler_test_support.hpp"

namespace qload::testing::strided_views {

inline constexpr std::uint64_t kRows = 48, kCols = 64;                       // the storage: a BF16 [48, 64]
inline constexpr const char* kQ = "model.layers.0.self_attn.q_proj.weight";  // its transpose [64, 48]: split by rows
inline constexpr const char* kO =
    "model.layers.0.self_attn.o_proj.weight";              // every other row and column [24, 32]: by cols
inline constexpr const char* kNorm = "model.norm.weight";  // row 1 expanded to [4, 16]: replicated
inline constexpr const char* kGate = "model.layers.0.mlp.gate_proj.weight";  // rows 32.. as stored [16, 64]

struct StridedCheckpoint {
  ScratchDir dir;
  std::vector<std::byte> storage;  // BF16 [48, 64], normal values (quantizable)
  formats::Catalog catalog;

  StridedCheckpoint() {
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> values(kRows * kCols);
    for (float& v : values) v = dist(rng);
    storage.resize(values.size() * 2);
    REQUIRE(formats::convert(std::as_bytes(std::span(values)), DType::kF32, storage, DType::kBF16));
    write_file(dir.file("m.bin"), storage);
    catalog.format = "test";
    catalog.source = dir.path().string();
    catalog.files.push_back({.path = dir.file("m.bin"), .size = storage.size()});
    add(kQ, 0, Shape{kCols, kRows}, {1, kCols});
    add(kO, 0, Shape{kRows / 2, kCols / 2}, {2 * kCols, 2});
    add(kNorm, kCols, Shape{4, 16}, {0, 1});
    add(kGate, 32 * kCols, Shape{16, kCols}, {});
    catalog.index_names();
  }

  void add(const char* name, std::uint64_t first, Shape shape, std::vector<std::uint64_t> strides) {
    formats::TensorEntry t{
        .name = name, .offset = first * 2, .dtype = DType::kBF16, .shape = shape, .strides = std::move(strides)};
    t.nbytes = t.strides.empty() ? shape.nbytes(DType::kBF16).value()
                                 : formats::strided_span_bytes(shape, t.strides, DType::kBF16).value();
    catalog.tensors.push_back(std::move(t));
  }

  // Tensor `name`'s rows [r0, r1) and columns [c0, c1), row-major, each element read from the
  // storage at its own index (no gather code).
  std::vector<std::byte> dense(const char* name, std::uint64_t r0 = 0, std::uint64_t r1 = UINT64_MAX,
                               std::uint64_t c0 = 0, std::uint64_t c1 = UINT64_MAX) const {
    const formats::TensorEntry& t = *catalog.find(name);
    const std::vector<std::uint64_t> strides =
        t.strides.empty() ? std::vector<std::uint64_t>{t.shape[1], 1} : t.strides;
    std::vector<std::byte> out;
    for (std::uint64_t r = r0; r < std::min(r1, t.shape[0]); ++r)
      for (std::uint64_t c = c0; c < std::min(c1, t.shape[1]); ++c) {
        const std::byte* at = storage.data() + t.offset + (r * strides[0] + c * strides[1]) * 2;
        out.insert(out.end(), at, at + 2);
      }
    return out;
  }
};

}  // namespace qload::testing::strided_views
