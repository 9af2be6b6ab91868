// Synthetic checkpoints for the scheduler tests: raw files of random bytes with tensors at
// random offsets, described by hand-built Catalogs (no format driver involved).
#pragma once

#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/scheduler/load.hpp"
#include "support/scratch.hpp"

namespace qload::testing {

struct SyntheticShape {
  std::size_t files_max = 3;
  std::size_t tensors_max = 24;         // per file
  std::uint64_t large_bytes = 1 << 20;  // "large" tensors are up to this size
  std::uint64_t max_gap = 70000;        // random gaps between tensors, up to this
};

struct SyntheticCheckpoint {
  ScratchDir dir;
  formats::Catalog catalog;
  std::vector<std::vector<std::byte>> bytes;  // per file

  std::span<const std::byte> tensor_bytes(std::size_t i) const {
    const formats::TensorEntry& t = catalog.tensors[i];
    return std::span(bytes[t.file]).subspan(t.offset, t.nbytes);
  }
};

// A tensor of `nbytes` with a dtype and shape consistent with it: scalars (F32, shape []),
// zero-size tensors (F32 [0, 3]), 2-D F16 / U8 tensors.
inline void shape_tensor(formats::TensorEntry& t, std::uint64_t nbytes, std::mt19937_64& rng) {
  t.nbytes = nbytes;
  if (nbytes == 0) {
    t.dtype = DType::kF32;
    t.shape = Shape{0, 3};
  } else if (nbytes == 4 && rng() % 2 == 0) {
    t.dtype = DType::kF32;
    t.shape = Shape{};
  } else if (nbytes % 4 == 0 && rng() % 2 == 0) {
    t.dtype = DType::kF16;
    t.shape = Shape{2, nbytes / 4};
  } else {
    t.dtype = DType::kU8;
    t.shape = Shape{nbytes};
  }
}

inline std::uint64_t random_tensor_bytes(std::mt19937_64& rng, const SyntheticShape& shape) {
  switch (rng() % 8) {
    case 0: return 0;
    case 1: return 4;  // often a scalar
    case 2: return 2 * (1 + rng() % shape.large_bytes / 2);
    case 3: return 1 + rng() % 64;
    default: return 1 + rng() % 40000;
  }
}

// Writes 1..files_max files of random bytes, each with 0..tensors_max tensors at random
// (non-overlapping) offsets with random gaps, and the Catalog describing them.
inline void make_synthetic(SyntheticCheckpoint& out, std::uint64_t seed, const SyntheticShape& shape = {}) {
  std::mt19937_64 rng(seed);
  const std::size_t files = 1 + rng() % shape.files_max;
  out.catalog.format = "synthetic";
  out.catalog.source = out.dir.path().string();
  for (std::size_t f = 0; f < files; ++f) {
    const std::uint64_t header = rng() % 5000;  // bytes before the first tensor
    std::uint64_t pos = header;
    const std::size_t n = rng() % (shape.tensors_max + 1);
    for (std::size_t i = 0; i < n; ++i) {
      if (rng() % 3 == 0) pos += rng() % (shape.max_gap + 1);
      formats::TensorEntry t;
      t.name = "f" + std::to_string(f) + ".t" + std::to_string(i);
      t.file = static_cast<std::uint32_t>(f);
      t.offset = pos;
      shape_tensor(t, random_tensor_bytes(rng, shape), rng);
      pos += t.nbytes;
      out.catalog.tensors.push_back(std::move(t));
    }
    const std::uint64_t size = pos + rng() % 3000;  // trailing bytes after the last tensor
    const std::string path = out.dir.file("shard" + std::to_string(f) + ".bin");
    out.bytes.push_back(random_bytes(size, seed * 131 + f));
    write_file(path, out.bytes.back());
    out.catalog.files.push_back(formats::CatalogFile{.path = path, .size = size, .data_offset = header});
  }
  out.catalog.index_names();
}

// Retypes F16 tensors at even indices as BF16 and some non-empty U8 tensors (4k bytes) as F32:
// random bytes are valid bit patterns of any float type, NaNs and subnormals included, so the
// same files exercise every conversion.
inline void mix_float_dtypes(SyntheticCheckpoint& ckpt) {
  for (std::size_t i = 0; i < ckpt.catalog.tensors.size(); ++i) {
    formats::TensorEntry& t = ckpt.catalog.tensors[i];
    if (t.dtype == DType::kF16 && i % 2 == 0) t.dtype = DType::kBF16;
    if (t.dtype == DType::kU8 && t.nbytes % 4 == 0 && t.nbytes > 0 && i % 3 == 0) {
      t.dtype = DType::kF32;
      t.shape = Shape{t.nbytes / 4};
    }
  }
}

// `n` host devices ("cpu:0" ...), with chunks and staging slots of 16 KiB so that even small
// tensors span chunks.
inline scheduler::LoadOptions host_devices(int n) {
  scheduler::LoadOptions o;
  o.plan.devices.clear();
  for (int i = 0; i < n; ++i) o.plan.devices.push_back(Device{.index = i});
  o.plan.chunk_bytes = o.staging.slot_bytes = 16 << 10;
  o.staging.total_bytes = 4 * o.staging.slot_bytes;
  return o;
}

inline int thread_count() {
  DIR* dir = ::opendir("/proc/self/task");
  int n = 0;
  while (const dirent* e = ::readdir(dir))
    if (e->d_name[0] != '.') ++n;
  ::closedir(dir);
  return n;
}

}  // namespace qload::testing
