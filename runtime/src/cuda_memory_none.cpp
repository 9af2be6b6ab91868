// Built when CUDA is not compiled in: every factory and copy says why, with the text
// probe_cuda() gives, so callers need no #ifdefs. Everything else behaves as a CUDA build on
// a machine without a GPU: empty requests (size 0, nothing to register) succeed without
// CUDA, and misuse of an empty Stream or Event is kInvalidArgument in both.
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"

namespace qload::cuda {
namespace {

std::unexpected<Error> no_cuda() {
  return fail(Errc::kUnsupported, probe_cuda().unavailable_reason);
}

}  // namespace

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  device_ = other.device_;
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

Result<DeviceBuffer> DeviceBuffer::allocate(int device, std::size_t size) {
  if (size != 0) return no_cuda();
  DeviceBuffer buffer;
  buffer.device_ = device;
  return buffer;
}

// Nothing can have been allocated, so there is nothing to free.
void DeviceBuffer::reset() noexcept {
  data_ = nullptr;
  size_ = 0;
}

Stream& Stream::operator=(Stream&& other) noexcept {
  device_ = other.device_;
  handle_ = std::exchange(other.handle_, nullptr);
  return *this;
}

Result<Stream> Stream::create(int) {
  return no_cuda();
}
Status Stream::synchronize() const {
  if (handle_ == nullptr) return fail(Errc::kInvalidArgument, "synchronize on an empty Stream");
  return no_cuda();
}
void Stream::reset() noexcept {
  handle_ = nullptr;
}

Event& Event::operator=(Event&& other) noexcept {
  device_ = other.device_;
  handle_ = std::exchange(other.handle_, nullptr);
  return *this;
}

Result<Event> Event::create(int) {
  return no_cuda();
}
Status Event::record(const Stream& stream) const {
  if (handle_ == nullptr || stream.handle() == nullptr)
    return fail(Errc::kInvalidArgument, "record with an empty Event or Stream");
  return no_cuda();
}
Status Event::synchronize() const {
  if (handle_ == nullptr) return fail(Errc::kInvalidArgument, "synchronize on an empty Event");
  return no_cuda();
}
void Event::reset() noexcept {
  handle_ = nullptr;
}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

Result<HostRegistration> HostRegistration::register_memory(std::span<std::byte> memory) {
  if (!memory.empty()) return no_cuda();
  return HostRegistration{};
}

void HostRegistration::reset() noexcept {
  data_ = nullptr;
  size_ = 0;
}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

Result<PinnedHostBuffer> PinnedHostBuffer::allocate(std::size_t size) {
  if (size != 0) return no_cuda();
  return PinnedHostBuffer{};
}

void PinnedHostBuffer::reset() noexcept {
  data_ = nullptr;
  size_ = 0;
}

Status copy_to_device_async(std::byte*, const std::byte*, std::size_t, const Stream& stream) {
  if (stream.handle() == nullptr) return fail(Errc::kInvalidArgument, "copy_to_device_async on an empty Stream");
  return no_cuda();
}
Status copy_2d_to_device_async(std::byte*, std::size_t, const std::byte*, std::size_t, std::size_t, std::size_t,
                               const Stream& stream) {
  if (stream.handle() == nullptr) return fail(Errc::kInvalidArgument, "copy_2d_to_device_async on an empty Stream");
  return no_cuda();
}
Status copy_to_device(std::byte*, const std::byte*, std::size_t, int) {
  return no_cuda();
}
Status copy_to_host(std::byte*, const std::byte*, std::size_t, int) {
  return no_cuda();
}
Status copy_on_device_async(std::byte*, const std::byte*, std::size_t, const Stream&) {
  return no_cuda();
}

Status copy_on_device(std::byte*, const std::byte*, std::size_t, int) {
  return no_cuda();
}

Result<MemoryInfo> memory_info(int) {
  return no_cuda();
}

Status make_current(int) {
  return no_cuda();
}

}  // namespace qload::cuda
