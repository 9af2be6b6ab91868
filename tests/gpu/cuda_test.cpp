// CUDA availability and device code. Every build runs these: without CUDA compiled in or
// without a GPU they check that qload says why instead of crashing; on a GPU machine the
// [gpu] case runs the sm_80/sm_90 kernel for real.
#include <catch2/catch.hpp>

#include <iostream>

#include "qload/runtime/cuda.hpp"
#include "qload/runtime/nccl.hpp"

using namespace qload;

TEST_CASE("probing CUDA never crashes and explains an absent GPU", "[cuda]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    CHECK_FALSE(info.unavailable_reason.empty());
    auto status = cuda_self_test(0);
    REQUIRE_FALSE(status);
    CHECK(status.error().code() == Errc::kUnsupported);
    CHECK(status.error().message() == info.unavailable_reason);
  } else {
    CHECK(info.compiled);
    CHECK(info.driver_version > 0);
  }
#ifdef QLOAD_TEST_EXPECT_CUDA
  CHECK(info.compiled);
  CHECK(info.runtime_version >= 12000);
#endif
}

TEST_CASE("probing NCCL never crashes", "[cuda]") {
  const NcclInfo info = probe_nccl();
  if (info.compiled) {
    CHECK(info.header_version > 0);
    if (info.library_version == 0) CHECK_FALSE(info.unavailable_reason.empty());
  } else {
    CHECK_FALSE(info.unavailable_reason.empty());
  }
}

TEST_CASE("device code runs on every visible GPU", "[gpu]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return;
  }
  for (const CudaDevice& d : info.devices) {
    INFO("cuda:" << d.index << " " << d.name);
    auto status = cuda_self_test(d.index);
    CHECK(status);
    if (!status) std::cerr << status.error().to_string() << "\n";
  }
}
