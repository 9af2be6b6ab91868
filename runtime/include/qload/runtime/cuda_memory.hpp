// Move-only owners for the CUDA objects a load uses, and the copies between them.
//
// Every build has these types. Without CUDA compiled in, or without a driver or GPU, every
// factory returns kUnsupported with the reason (the same text probe_cuda() gives), so callers
// never need #ifdefs. With CUDA, errors name the call, the device and the byte counts:
// cudaMalloc failing is kOutOfMemory ("cuda:0: cannot allocate 12.0 GiB (free 3.1 GiB)"),
// other failures kDevice.
//
// Handles are opaque pointers (void*) in this header so that no layer above includes
// cuda_runtime.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "qload/runtime/error.hpp"

namespace qload::cuda {

// Device memory from cudaMalloc on one device; freed (on that device) by the destructor.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : device_(other.device_), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  // `size` bytes on `device` (cudaMalloc: at least 256-byte aligned). size 0 gives an empty
  // buffer without calling CUDA.
  static Result<DeviceBuffer> allocate(int device, std::size_t size);

  int device() const noexcept { return device_; }
  std::byte* data() const noexcept { return data_; }  // a device pointer: never dereference on the host
  std::size_t size() const noexcept { return size_; }
  void reset() noexcept;

 private:
  int device_ = 0;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// A non-blocking stream on one device (cudaStreamNonBlocking: never syncs with stream 0).
class Stream {
 public:
  Stream() = default;
  Stream(Stream&& other) noexcept : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { reset(); }

  static Result<Stream> create(int device);
  int device() const noexcept { return device_; }
  void* handle() const noexcept { return handle_; }  // a cudaStream_t
  Status synchronize() const;
  void reset() noexcept;

 private:
  int device_ = 0;
  void* handle_ = nullptr;
};

// An event without timing (cudaEventDisableTiming), waited on with blocking sync so a waiting
// thread sleeps instead of spinning.
class Event {
 public:
  Event() = default;
  Event(Event&& other) noexcept : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)) {}
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { reset(); }

  static Result<Event> create(int device);
  Status record(const Stream& stream) const;
  Status synchronize() const;  // waits until the work recorded before it has completed
  void* handle() const noexcept { return handle_; }
  void reset() noexcept;

 private:
  int device_ = 0;
  void* handle_ = nullptr;
};

// Host memory page-locked in place with cudaHostRegister (portable, so every device's copy
// engines can DMA from it) for as long as this object lives. The memory itself stays owned by
// its allocator (a HostBuffer), so O_DIRECT alignment is unchanged; register once, not per
// request.
class HostRegistration {
 public:
  HostRegistration() = default;
  HostRegistration(HostRegistration&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  ~HostRegistration() { reset(); }

  static Result<HostRegistration> register_memory(std::span<std::byte> memory);
  bool registered() const noexcept { return data_ != nullptr; }
  void reset() noexcept;

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Page-locked host memory allocated by the driver (cudaHostAlloc, portable): the other way to
// get memory copy engines can DMA from. Move-only; cudaFreeHost on destruction.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer() { reset(); }

  static Result<PinnedHostBuffer> allocate(std::size_t size);
  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  void reset() noexcept;

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Asynchronous host-to-device copy on `stream` (cudaMemcpyAsync; `src` should be registered
// memory, or the copy is staged by the driver and synchronous).
Status copy_to_device_async(std::byte* device_dst, const std::byte* host_src, std::size_t bytes, const Stream& stream);
// Asynchronous strided host-to-device copy (cudaMemcpy2DAsync): `rows` rows of `width` bytes,
// row i read at host_src + i * src_pitch and written at device_dst + i * dst_pitch.
Status copy_2d_to_device_async(std::byte* device_dst, std::size_t dst_pitch, const std::byte* host_src,
                               std::size_t src_pitch, std::size_t width, std::size_t rows, const Stream& stream);
// Synchronous host-to-device copy (cudaMemcpy) from any host memory, pinned or not: for bytes
// the copy engines cannot read directly (pageable buffers) and for tests.
Status copy_to_device(std::byte* device_dst, const std::byte* host_src, std::size_t bytes, int device);
// Synchronous device-to-host copy (cudaMemcpy) for dumps and tests.
Status copy_to_host(std::byte* host_dst, const std::byte* device_src, std::size_t bytes, int device);
// Asynchronous device-to-device copy on `stream` (cudaMemcpyAsync, both pointers on its device).
Status copy_on_device_async(std::byte* device_dst, const std::byte* device_src, std::size_t bytes,
                            const Stream& stream);
// Synchronous device-to-device copy on one device.
Status copy_on_device(std::byte* device_dst, const std::byte* device_src, std::size_t bytes, int device);

struct MemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};
// cudaMemGetInfo on `device`.
Result<MemoryInfo> memory_info(int device);

// Makes `device` the calling thread's current CUDA device (cudaSetDevice), the one libraries
// such as NCCL create their resources on.
Status make_current(int device);

}  // namespace qload::cuda
