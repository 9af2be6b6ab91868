// Hand-built catalogs for the detect_quantization tests (quant_detect_test.cpp,
// quant_detect_ct_test.cpp): tensors by name, dtype and shape, and each scheme's parts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "qload/formats/catalog.hpp"
#include "qload/formats/quant.hpp"

namespace qload::testing::quant_detect {

using namespace qload::formats;

struct T {
  std::string name;
  DType dtype;
  Shape shape;
};

inline Catalog make_catalog(const std::vector<T>& tensors, std::string quantization_config = {},
                            std::string source = {}) {
  Catalog c;
  c.format = "safetensors";
  c.source = std::move(source);
  c.quantization_config = std::move(quantization_config);
  std::uint64_t offset = 0;
  for (const T& t : tensors)
    c.tensors.push_back(TensorEntry{.name = t.name, .offset = offset++, .dtype = t.dtype, .shape = t.shape});
  c.index_names();
  return c;
}

inline std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

// GPTQ parts of an [n, k] weight.
inline void gptq(std::vector<T>& out, const std::string& p, std::uint64_t k, std::uint64_t n, std::uint64_t bits,
                 std::uint64_t group, bool g_idx = false) {
  const std::uint64_t groups = ceil_div(k, group);
  out.push_back({p + ".qweight", DType::kI32, Shape{k * bits / 32, n}});
  out.push_back({p + ".qzeros", DType::kI32, Shape{groups, ceil_div(n * bits, 32)}});
  out.push_back({p + ".scales", DType::kF16, Shape{groups, n}});
  if (g_idx) out.push_back({p + ".g_idx", DType::kI32, Shape{k}});
}

inline void awq_gemm(std::vector<T>& out, const std::string& p, std::uint64_t k, std::uint64_t n, std::uint64_t group) {
  out.push_back({p + ".qweight", DType::kI32, Shape{k, n / 8}});
  out.push_back({p + ".qzeros", DType::kI32, Shape{k / group, n / 8}});
  out.push_back({p + ".scales", DType::kF16, Shape{k / group, n}});
}

inline void awq_gemv(std::vector<T>& out, const std::string& p, std::uint64_t k, std::uint64_t n,
                     std::uint64_t zero_words) {
  out.push_back({p + ".qweight", DType::kI32, Shape{n, k / 8}});
  out.push_back({p + ".qzeros", DType::kI32, Shape{n, zero_words}});
  out.push_back({p + ".scales", DType::kF16, Shape{n, 8 * zero_words}});
}

// compressed-tensors pack-quantized, group strategy.
inline void ct_packed(std::vector<T>& out, const std::string& p, std::uint64_t k, std::uint64_t n, std::uint64_t bits,
                      std::uint64_t group, bool asym = false) {
  out.push_back({p + ".weight_packed", DType::kI32, Shape{n, ceil_div(k * bits, 32)}});
  out.push_back({p + ".weight_scale", DType::kBF16, Shape{n, ceil_div(k, group)}});
  out.push_back({p + ".weight_shape", DType::kI64, Shape{2}});
  if (asym) out.push_back({p + ".weight_zero_point", DType::kI32, Shape{ceil_div(n * bits, 32), ceil_div(k, group)}});
}

// Replaces tensor `name`'s dtype and shape.
inline std::vector<T> with(std::vector<T> tensors, const std::string& name, DType dtype, Shape shape) {
  for (T& t : tensors)
    if (t.name == name) t = T{name, dtype, std::move(shape)};
  return tensors;
}

inline std::vector<T> without(std::vector<T> tensors, const std::string& name) {
  std::erase_if(tensors, [&](const T& t) { return t.name == name; });
  return tensors;
}

inline const LogicalTensor& only_logical(const QuantizedCatalog& q) {
  REQUIRE(q.logical.size() == 1);
  return q.logical.front();
}

inline std::string role_name(const Catalog& c, const LogicalTensor& t, std::string_view role) {
  const auto index = t.part(role);
  REQUIRE(index.has_value());
  return c.tensors[*index].name;
}

inline const std::string kGptq = R"({"quant_method":"gptq","bits":4,"group_size":128,"desc_act":false,"sym":true})";

inline std::string ct_config(const std::string& weights, const std::string& format, const std::string& extra = {}) {
  return R"({"quant_method":"compressed-tensors","format":")" + format +
         R"(","quantization_status":"compressed","config_groups":{"group_0":{"targets":["Linear"],"weights":)" +
         weights + "}}" + extra + "}";
}

inline const std::string kW4A16 = R"({"num_bits":4,"type":"int","symmetric":true,"strategy":"group","group_size":128})";

}  // namespace qload::testing::quant_detect
