// Driving the simulated CUDA runtime from tests: inject faults, inspect what the code under
// test did to the simulated devices, and reset between test cases.
//
// The environment configures a process before its first CUDA call:
//   QLOAD_CUDASIM_DEVICES   simulated GPUs (default 2; 0: no device)
//   QLOAD_CUDASIM_MEMORY    memory per GPU (default 1 GiB; "512MiB", "2GiB", bytes)
//   QLOAD_CUDASIM_SEED      seed of the engine delays (default 1): a failing order replays
//   QLOAD_CUDASIM_DELAY_US  longest random delay before each queued operation (default 50)
//   QLOAD_CUDASIM_FAULTS    e.g. "malloc:3,device_lost:40": the 3rd cudaMalloc fails, the
//                           40th operation loses the device (kinds below, counted from 1;
//                           also nccl_init, nccl_error, nccl_hang)
//   QLOAD_CUDASIM_ON_ERROR  "abort" (default): a misuse (unpinned async copy, source changed
//                           before its copy ran, device memory overrun, bad free) prints a
//                           report and aborts, as a sanitizer does; "continue": report only
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace qload::cudasim {

enum class Fault {
  kMalloc,        // cudaMalloc returns cudaErrorMemoryAllocation
  kHostAlloc,     // cudaHostAlloc returns cudaErrorMemoryAllocation
  kHostRegister,  // cudaHostRegister returns cudaErrorInvalidValue (as on a kernel without pinning rights)
  kCopy,          // a copy (sync or async) fails: cudaErrorLaunchFailure, sticky on that device
  kLaunch,        // a kernel launch fails: cudaErrorLaunchFailure, sticky on that device
  kDeviceLost,    // the device is gone: every later call on it returns cudaErrorDevicesUnavailable
  // The simulated NCCL (libnccl.so.2), counted per communicator's device:
  kNcclInit,   // creating a communicator fails (ncclSystemError); its peers wait for it forever
  kNcclError,  // a collective fails as it runs (ncclSystemError here, ncclRemoteError at the peers)
  kNcclHang,   // a collective never completes and reports nothing, until the communicator is aborted
};

// The `nth` call of that kind from now on (1: the next one) fails; device -1: any device.
void inject(Fault fault, int nth, int device = -1);

// Clears injected faults, sticky errors, recorded misuse, the pinned peak and a delay set by
// set_max_delay_us; waits for every stream to drain.
// Allocations stay (a leak is the test's to find through live_allocations).
void reset();

// The longest random delay before each operation of streams created from now on (until
// reset(), which restores QLOAD_CUDASIM_DELAY_US): a test widens the window in which work
// nothing waited for has not happened yet.
void set_max_delay_us(unsigned us);

// Whether the code created a context on `device` (cudaSetDevice, an allocation, a stream...).
// Reading properties and counting devices does not.
bool context_created(int device);
void forget_contexts();

// Device allocations (cudaMalloc) alive on `device`, and their bytes.
std::size_t live_allocations(int device);
std::size_t live_bytes(int device);
// Pinned host ranges alive (cudaHostAlloc and cudaHostRegister).
std::size_t pinned_ranges();
// The most host bytes pinned at once (cudaHostAlloc and cudaHostRegister) since the last reset.
std::size_t peak_pinned_bytes();

// Misuse reported so far (with QLOAD_CUDASIM_ON_ERROR=continue), oldest first.
std::vector<std::string> reports();

// The simulated devices, from QLOAD_CUDASIM_DEVICES.
int device_count();

}  // namespace qload::cudasim
