// The simulated CUDA runtime (QLOAD_CUDA_SIM=ON): the part of cuda_runtime.h that qload uses,
// implemented on the host by cudasim/src. Kernels (.cu files) compile as host C++ against this
// header and run on the simulated stream's engine thread, one (block, thread) after another;
// they are launched through QLOAD_LAUNCH_KERNEL (qload/runtime/cuda_launch.hpp), never with
// <<<>>>.
//
// Strict, not permissive: device memory lives in guarded mappings (out of bounds and use
// after free fault), streams run asynchronously with random seeded delays, async copies check
// that their host source is pinned and unchanged between enqueue and execution, and faults
// can be injected (qload/cudasim/control.hpp). Error codes have CUDA's values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#define CUDART_VERSION 13000

// Device-code qualifiers: plain host C++ here.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorDevicesUnavailable = 46,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorLaunchFailure = 719,
  cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
};

struct CUstream_st;
struct CUevent_st;
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;

constexpr unsigned cudaStreamDefault = 0x0;
constexpr unsigned cudaStreamNonBlocking = 0x1;
constexpr unsigned cudaEventDefault = 0x0;
constexpr unsigned cudaEventBlockingSync = 0x1;
constexpr unsigned cudaEventDisableTiming = 0x2;
constexpr unsigned cudaHostAllocDefault = 0x0;
constexpr unsigned cudaHostAllocPortable = 0x1;
constexpr unsigned cudaHostRegisterDefault = 0x0;
constexpr unsigned cudaHostRegisterPortable = 0x1;

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount;
};

// The built-in variables of the kernel running on this (engine) thread.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

cudaError_t cudaMalloc(void** ptr, std::size_t size);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total);
cudaError_t cudaHostAlloc(void** ptr, std::size_t size, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaHostRegister(void* ptr, std::size_t size, unsigned flags);
cudaError_t cudaHostUnregister(void* ptr);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                              std::size_t height, cudaMemcpyKind kind, cudaStream_t stream = nullptr);

template <typename T>
cudaError_t cudaMalloc(T** ptr, std::size_t size) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), size);
}
template <typename T>
cudaError_t cudaHostAlloc(T** ptr, std::size_t size, unsigned flags) {
  return cudaHostAlloc(reinterpret_cast<void**>(ptr), size, flags);
}

namespace qload::cudasim {
// Enqueues `body` as a kernel of `grid` x `block` threads on `stream` (nullptr: the current
// device's default stream); the engine runs it once per thread with the built-ins set. Launch
// errors (an empty grid, more than 1024 threads a block, a stream of another device) are
// returned, as cudaGetLastError would after a real launch.
cudaError_t launch(dim3 grid, dim3 block, cudaStream_t stream, std::function<void()> body);
}  // namespace qload::cudasim
