// What CUDA this build and this machine offer. Works in every build: without CUDA compiled
// in, probe_cuda() says so; with it, a machine without a driver or GPU gets a reason, not a
// crash (cudart is linked statically and reports cudaErrorInsufficientDriver / NoDevice).
#pragma once

#include <string>
#include <vector>

#include "qload/runtime/error.hpp"

namespace qload {

struct CudaDevice {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  std::size_t memory_bytes = 0;
};

struct CudaInfo {
  bool compiled = false;    // built with CUDA support
  int runtime_version = 0;  // cudart version compiled in (e.g. 13000), 0 if not compiled
  int driver_version = 0;   // 0 if no driver
  std::vector<CudaDevice> devices;
  std::string unavailable_reason;  // why `devices` is empty, if it is
};

CudaInfo probe_cuda();

// Runs a small kernel on `device` and checks its output: proves the compiled device code
// (sm_80 / sm_90 images) loads and runs there. kUnsupported without CUDA or a GPU.
Status cuda_self_test(int device);

}  // namespace qload
