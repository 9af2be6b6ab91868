// Built when CUDA is compiled in. Host-side only: talks to cudart, no device code.
//
// Every per-device call is preceded by cudaSetDevice: the current device is per thread and
// any thread may own or free these objects. A failure is first checked against "is there
// CUDA at all" so a machine without a driver or GPU gets probe_cuda()'s reason as
// kUnsupported instead of a driver error code.
#include "qload/runtime/cuda_memory.hpp"

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "qload/runtime/cuda.hpp"
#include "qload/runtime/units.hpp"

namespace qload::cuda {
namespace {

std::string describe(cudaError_t err) {
  return fmt::format("{}: {}", cudaGetErrorName(err), cudaGetErrorString(err));
}

// True when the failure means "no driver or no device", not a fault of this call. Only
// asked after a failure, so the success path costs nothing.
bool cuda_absent() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  return err != cudaSuccess || count == 0;
}

// Turns a failed call into an Error. `what` names the call and its arguments
// ("cudaMemcpyAsync of 4.00 MiB to cuda:0").
Error failure(cudaError_t err, std::string_view what) {
  (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  if (cuda_absent()) return Error(Errc::kUnsupported, probe_cuda().unavailable_reason);
  return Error(Errc::kDevice, fmt::format("{}: {}", what, describe(err)));
}

// `what` is a callable giving the description, so the success path formats nothing.
template <typename Describe>
Status check(cudaError_t err, const Describe& what) {
  if (err == cudaSuccess) [[likely]]
    return {};
  return fail(failure(err, what()));
}

Status use_device(int device) {
  return check(cudaSetDevice(device), [&] { return fmt::format("cudaSetDevice(cuda:{})", device); });
}

std::string bytes_text(std::size_t bytes) {
  return fmt::format("{} ({} bytes)", format_bytes(bytes), bytes);
}

cudaStream_t as_stream(void* handle) {
  return static_cast<cudaStream_t>(handle);
}
cudaEvent_t as_event(void* handle) {
  return static_cast<cudaEvent_t>(handle);
}

// Destructors cannot report, and a free that fails during teardown (driver already shut
// down, sticky context error) leaves nothing useful to do; the error is cleared so it does
// not surface on an unrelated later call.
void ignore_teardown(cudaError_t err) noexcept {
  if (err != cudaSuccess) (void)cudaGetLastError();
}

// Runs `destroy` with `device` current. The caller's current device is not restored: with
// CUDA 12, cudaSetDevice creates the primary context of the device it names, and
// cudaGetDevice answers 0 on a thread that never chose one, so "restoring" could create a
// context on a GPU this process never meant to use.
template <typename Destroy>
void on_device_noexcept(int device, const Destroy& destroy) noexcept {
  ignore_teardown(cudaSetDevice(device));
  ignore_teardown(destroy());
}

// cudaMalloc said no: report how much there is, so the reader can see whether the request
// or the device is the problem.
Error out_of_memory(int device, std::size_t size) {
  std::string message = fmt::format("cuda:{}: cannot allocate {}", device, format_bytes(size));
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
    message += fmt::format(" (free {} of {})", format_bytes(free_bytes), format_bytes(total_bytes));
  else
    (void)cudaGetLastError();
  return Error(Errc::kOutOfMemory, std::move(message));
}

}  // namespace

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Result<DeviceBuffer> DeviceBuffer::allocate(int device, std::size_t size) {
  DeviceBuffer buffer;
  buffer.device_ = device;
  if (size == 0) return buffer;
  QLOAD_TRY(use_device(device));
  void* data = nullptr;
  const cudaError_t err = cudaMalloc(&data, size);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return fail(out_of_memory(device, size));
  }
  QLOAD_TRY(check(err, [&] { return fmt::format("cudaMalloc of {} on cuda:{}", bytes_text(size), device); }));
  buffer.data_ = static_cast<std::byte*>(data);
  buffer.size_ = size;
  return buffer;
}

void DeviceBuffer::reset() noexcept {
  if (data_ != nullptr) {
    // With another device current, cudaFree would first create that device's context: a
    // teardown must not touch GPUs this buffer never used.
    on_device_noexcept(device_, [&] { return cudaFree(data_); });
  }
  data_ = nullptr;
  size_ = 0;
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Result<Stream> Stream::create(int device) {
  QLOAD_TRY(use_device(device));
  cudaStream_t handle = nullptr;
  QLOAD_TRY(check(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking),
                  [&] { return fmt::format("cudaStreamCreateWithFlags on cuda:{}", device); }));
  Stream stream;
  stream.device_ = device;
  stream.handle_ = handle;
  return stream;
}

Status Stream::synchronize() const {
  // A null handle would silently mean the legacy default stream, which syncs everything.
  if (handle_ == nullptr) return fail(Errc::kInvalidArgument, "synchronize on an empty Stream");
  QLOAD_TRY(use_device(device_));
  return check(cudaStreamSynchronize(as_stream(handle_)),
               [&] { return fmt::format("cudaStreamSynchronize on cuda:{}", device_); });
}

void Stream::reset() noexcept {
  if (handle_ != nullptr) {
    on_device_noexcept(device_, [&] { return cudaStreamDestroy(as_stream(handle_)); });
  }
  handle_ = nullptr;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Result<Event> Event::create(int device) {
  QLOAD_TRY(use_device(device));
  cudaEvent_t handle = nullptr;
  QLOAD_TRY(check(cudaEventCreateWithFlags(&handle, cudaEventDisableTiming | cudaEventBlockingSync),
                  [&] { return fmt::format("cudaEventCreateWithFlags on cuda:{}", device); }));
  Event event;
  event.device_ = device;
  event.handle_ = handle;
  return event;
}

Status Event::record(const Stream& stream) const {
  if (handle_ == nullptr || stream.handle() == nullptr)
    return fail(Errc::kInvalidArgument, "record with an empty Event or Stream");
  if (stream.device() != device_)
    return fail(Errc::kInvalidArgument,
                fmt::format("cannot record an event of cuda:{} on a stream of cuda:{}", device_, stream.device()));
  QLOAD_TRY(use_device(device_));
  return check(cudaEventRecord(as_event(handle_), as_stream(stream.handle())),
               [&] { return fmt::format("cudaEventRecord on cuda:{}", device_); });
}

Status Event::synchronize() const {
  if (handle_ == nullptr) return fail(Errc::kInvalidArgument, "synchronize on an empty Event");
  QLOAD_TRY(use_device(device_));
  return check(cudaEventSynchronize(as_event(handle_)),
               [&] { return fmt::format("cudaEventSynchronize on cuda:{}", device_); });
}

void Event::reset() noexcept {
  if (handle_ != nullptr) {
    on_device_noexcept(device_, [&] { return cudaEventDestroy(as_event(handle_)); });
  }
  handle_ = nullptr;
}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Result<HostRegistration> HostRegistration::register_memory(std::span<std::byte> memory) {
  HostRegistration registration;
  if (memory.empty()) return registration;  // nothing to pin; registered() stays false
  QLOAD_TRY(check(cudaHostRegister(memory.data(), memory.size(), cudaHostRegisterPortable),
                  [&] { return fmt::format("cudaHostRegister of {}", bytes_text(memory.size())); }));
  registration.data_ = memory.data();
  registration.size_ = memory.size();
  return registration;
}

void HostRegistration::reset() noexcept {
  if (data_ != nullptr) ignore_teardown(cudaHostUnregister(data_));
  data_ = nullptr;
  size_ = 0;
}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Result<PinnedHostBuffer> PinnedHostBuffer::allocate(std::size_t size) {
  PinnedHostBuffer buffer;
  if (size == 0) return buffer;
  void* p = nullptr;
  QLOAD_TRY(check(cudaHostAlloc(&p, size, cudaHostAllocPortable),
                  [&] { return fmt::format("cudaHostAlloc of {}", bytes_text(size)); }));
  buffer.data_ = static_cast<std::byte*>(p);
  buffer.size_ = size;
  return buffer;
}

void PinnedHostBuffer::reset() noexcept {
  if (data_ != nullptr) ignore_teardown(cudaFreeHost(data_));
  data_ = nullptr;
  size_ = 0;
}

Status copy_to_device_async(std::byte* device_dst, const std::byte* host_src, std::size_t bytes, const Stream& stream) {
  if (stream.handle() == nullptr) return fail(Errc::kInvalidArgument, "copy_to_device_async on an empty Stream");
  QLOAD_TRY(use_device(stream.device()));
  return check(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, as_stream(stream.handle())),
               [&] { return fmt::format("cudaMemcpyAsync of {} to cuda:{}", bytes_text(bytes), stream.device()); });
}

Status copy_2d_to_device_async(std::byte* device_dst, std::size_t dst_pitch, const std::byte* host_src,
                               std::size_t src_pitch, std::size_t width, std::size_t rows, const Stream& stream) {
  if (stream.handle() == nullptr) return fail(Errc::kInvalidArgument, "copy_2d_to_device_async on an empty Stream");
  QLOAD_TRY(use_device(stream.device()));
  return check(cudaMemcpy2DAsync(device_dst, dst_pitch, host_src, src_pitch, width, rows, cudaMemcpyHostToDevice,
                                 as_stream(stream.handle())),
               [&] {
                 return fmt::format("cudaMemcpy2DAsync of {} rows of {} to cuda:{}", rows, bytes_text(width),
                                    stream.device());
               });
}

Status copy_to_device(std::byte* device_dst, const std::byte* host_src, std::size_t bytes, int device) {
  QLOAD_TRY(use_device(device));
  return check(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice),
               [&] { return fmt::format("cudaMemcpy of {} to cuda:{}", bytes_text(bytes), device); });
}

Status copy_to_host(std::byte* host_dst, const std::byte* device_src, std::size_t bytes, int device) {
  QLOAD_TRY(use_device(device));
  return check(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost),
               [&] { return fmt::format("cudaMemcpy of {} from cuda:{}", bytes_text(bytes), device); });
}

Status copy_on_device_async(std::byte* device_dst, const std::byte* device_src, std::size_t bytes,
                            const Stream& stream) {
  if (stream.handle() == nullptr) return fail(Errc::kInvalidArgument, "copy_on_device_async on an empty Stream");
  QLOAD_TRY(use_device(stream.device()));
  return check(cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream.handle())),
               [&] { return fmt::format("cudaMemcpyAsync of {} within cuda:{}", bytes_text(bytes), stream.device()); });
}

Status copy_on_device(std::byte* device_dst, const std::byte* device_src, std::size_t bytes, int device) {
  QLOAD_TRY(use_device(device));
  const auto what = [&] { return fmt::format("cudaMemcpy of {} within cuda:{}", bytes_text(bytes), device); };
  QLOAD_TRY(check(cudaMemcpy(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice), what));
  // A device-to-device cudaMemcpy may return before the copy is done; wait on the default
  // stream it was queued on, so the promise "synchronous" holds (and errors surface here).
  return check(cudaStreamSynchronize(nullptr), what);
}

Status make_current(int device) {
  return use_device(device);
}

Result<MemoryInfo> memory_info(int device) {
  QLOAD_TRY(use_device(device));
  MemoryInfo info;
  QLOAD_TRY(check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes),
                  [&] { return fmt::format("cudaMemGetInfo on cuda:{}", device); }));
  return info;
}

}  // namespace qload::cuda
