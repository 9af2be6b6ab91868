// The simulated CUDA runtime calls (cuda_runtime.h).
#include <fmt/format.h>
#include <xxhash.h>

#include <cstring>
#include <utility>

#include "sim_state.hpp"

thread_local uint3 threadIdx{0, 0, 0};
thread_local uint3 blockIdx{0, 0, 0};
thread_local dim3 blockDim{1, 1, 1};
thread_local dim3 gridDim{1, 1, 1};

using qload::cudasim::current_device;
using qload::cudasim::Engine;
using qload::cudasim::Fault;
using qload::cudasim::MemoryKind;
using qload::cudasim::Operation;
using qload::cudasim::Range;
using qload::cudasim::State;

namespace {

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t result(cudaError_t err) {
  if (err != cudaSuccess) last_error = err;
  return err;
}

bool valid_device(const State& s, int device) {
  return device >= 0 && device < s.config.devices;
}

// Under s.mutex: the device's sticky error, after counting one operation for device_lost.
cudaError_t device_health(State& s, int device) {
  qload::cudasim::DeviceState& d = s.devices[static_cast<std::size_t>(device)];
  if (d.sticky == cudaSuccess && s.fault_fires(Fault::kDeviceLost, device)) d.sticky = cudaErrorDevicesUnavailable;
  return d.sticky;
}

// Under s.mutex: the call makes a context on the device, as the real runtime's do.
void touch(State& s, int device) {
  s.devices[static_cast<std::size_t>(device)].context = true;
}

// Under s.mutex: what every call working on `device` starts with. It makes a context there, as
// the real runtime's calls do; `health`: the device's sticky error, if any, ends the call.
cudaError_t on_device(State& s, int device, bool health = true) {
  if (!valid_device(s, device)) return cudaErrorInvalidDevice;
  touch(s, device);
  return health ? device_health(s, device) : cudaSuccess;
}

std::shared_ptr<Engine> engine_of(State& s, cudaStream_t stream, int device) {
  return stream != nullptr ? stream->engine : s.legacy_stream(device)->engine;
}

// The engine `stream` runs on: its own, or (null) the current device's legacy stream.
std::shared_ptr<Engine> engine_for(State& s, cudaStream_t stream) {
  std::lock_guard lock(s.mutex);
  return engine_of(s, stream, stream != nullptr ? stream->engine->device() : current_device());
}

std::string describe(const State& s, const void* p) {
  const Range* r = s.find(p, 0);
  if (r == nullptr) return fmt::format("{} (pageable host memory)", p);
  const auto offset = static_cast<std::size_t>(static_cast<const std::byte*>(p) - r->data);
  const char* kind = r->kind == MemoryKind::kDevice       ? "device memory of cuda:"
                     : r->kind == MemoryKind::kPinnedHost ? "pinned host buffer"
                                                          : "registered host range";
  return r->kind == MemoryKind::kDevice
             ? fmt::format("{} (offset {} of {} bytes of {}{})", p, offset, r->size, kind, r->device)
             : fmt::format("{} (offset {} of the {}-byte {} at {})", p, offset, r->size, kind,
                           static_cast<const void*>(r->data));
}

struct CopyPlan {
  cudaError_t error = cudaSuccess;
  std::string misuse;
  bool host_source = false;
};

// Under s.mutex: checks a copy of `dst_bytes` to `dst` and `src_bytes` from `src` against
// `kind`: device sides must lie within one device allocation, host sides must not be device
// memory, and an async copy's host side must be pinned (a misuse otherwise, not an error).
CopyPlan check_copy(const State& s, void* dst, std::size_t dst_bytes, const void* src, std::size_t src_bytes,
                    cudaMemcpyKind kind, bool async, const char* call) {
  const Range* d = s.find(dst, 0);
  const Range* r = s.find(src, 0);
  const bool dst_device = d != nullptr && d->kind == MemoryKind::kDevice;
  const bool src_device = r != nullptr && r->kind == MemoryKind::kDevice;
  if (kind == cudaMemcpyDefault)
    kind = src_device ? (dst_device ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                      : (dst_device ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  const bool want_dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  CopyPlan plan{.host_source = !want_src_device};
  const auto error = [&](std::string text) {
    plan.error = cudaErrorInvalidValue;
    plan.misuse = std::move(text);
    return plan;
  };
  if (want_dst_device != dst_device)
    return error(
        fmt::format("{}: destination {} {} device memory", call, describe(s, dst), want_dst_device ? "is not" : "is"));
  if (want_src_device != src_device)
    return error(
        fmt::format("{}: source {} {} device memory", call, describe(s, src), want_src_device ? "is not" : "is"));
  if (d != nullptr && s.find(dst, dst_bytes) != d)
    return error(fmt::format("{}: {} bytes to {} run past its end", call, dst_bytes, describe(s, dst)));
  if (r != nullptr && s.find(src, src_bytes) != r)
    return error(fmt::format("{}: {} bytes from {} run past its end", call, src_bytes, describe(s, src)));
  if (async && kind == cudaMemcpyHostToDevice && r == nullptr)
    plan.misuse = fmt::format(
        "{}: an asynchronous copy of {} bytes from pageable memory at {} (pin or register "
        "it; the driver would stage it and copy synchronously)",
        call, src_bytes, src);
  if (async && kind == cudaMemcpyDeviceToHost && d == nullptr)
    plan.misuse = fmt::format("{}: an asynchronous copy of {} bytes into pageable memory at {}", call, dst_bytes, dst);
  return plan;
}

std::uint64_t hash_rows(const void* p, std::size_t pitch, std::size_t width, std::size_t rows) {
  std::uint64_t h = 0;
  for (std::size_t i = 0; i < rows; ++i) h = h * 31 + XXH3_64bits(static_cast<const std::byte*>(p) + i * pitch, width);
  return h;
}

// A copy of `rows` rows of `width` bytes, on `stream`, or synchronously on the legacy stream.
cudaError_t copy(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                 std::size_t rows, cudaMemcpyKind kind, cudaStream_t stream, bool async, const char* call) {
  State& s = State::get();
  if (rows > 1 && (dpitch < width || spitch < width)) return result(cudaErrorInvalidValue);
  const std::size_t dst_bytes = rows == 0 ? 0 : (rows - 1) * dpitch + width;
  const std::size_t src_bytes = rows == 0 ? 0 : (rows - 1) * spitch + width;
  std::shared_ptr<Engine> engine;
  bool fail = false;
  CopyPlan plan;
  std::string where;
  {
    std::lock_guard lock(s.mutex);
    const int device = stream != nullptr ? stream->engine->device() : current_device();
    if (cudaError_t err = on_device(s, device); err != cudaSuccess) return result(err);
    plan = check_copy(s, dst, dst_bytes, src, src_bytes, kind, async, call);
    if (plan.error == cudaSuccess) {
      fail = s.fault_fires(Fault::kCopy, device);
      engine = engine_of(s, stream, device);
      if (async && plan.host_source) where = describe(s, src);
    }
  }
  if (!plan.misuse.empty()) s.report(plan.misuse);
  if (plan.error != cudaSuccess) return result(plan.error);
  const int device = engine->device();
  // An async copy reads its host source later, and must read the bytes as they were when it
  // was issued: a changed source is a buffer reused too early.
  const bool check_source = async && plan.host_source;
  const std::uint64_t issued = check_source ? hash_rows(src, spitch, width, rows) : 0;
  const std::uint64_t ticket = engine->enqueue(
      Operation{.what = call, .run = [=, where = std::move(where)] {
                  State& st = State::get();
                  if (fail) {
                    std::lock_guard lock(st.mutex);
                    st.devices[static_cast<std::size_t>(device)].sticky = cudaErrorLaunchFailure;
                    return;
                  }
                  if (check_source && hash_rows(src, spitch, width, rows) != issued)
                    st.report(
                        fmt::format("{}: the {} source bytes at {} changed between the copy's issue and its execution "
                                    "(a staging buffer reused before the copy that reads it completed)",
                                    call, rows * width, where));
                  for (std::size_t i = 0; i < rows; ++i)
                    std::memcpy(static_cast<std::byte*>(dst) + i * dpitch,
                                static_cast<const std::byte*>(src) + i * spitch, width);
                }});
  {
    std::lock_guard lock(s.mutex);
    s.note_host_copy(plan.host_source ? src : dst, engine, ticket);  // its host side, if pinned
  }
  if (async) return cudaSuccess;
  engine->wait_for(ticket);
  std::lock_guard lock(s.mutex);
  return result(s.devices[static_cast<std::size_t>(device)].sticky);
}

}  // namespace

cudaError_t cudaGetDeviceCount(int* count) {
  const State& s = State::get();
  *count = s.config.devices;
  return result(s.config.devices == 0 ? cudaErrorNoDevice : cudaSuccess);
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  State& s = State::get();
  if (!valid_device(s, device)) return result(cudaErrorInvalidDevice);
  std::lock_guard lock(s.mutex);
  touch(s, device);  // CUDA 12 and later: cudaSetDevice initialises the device's primary context
  current_device() = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  const State& s = State::get();
  if (!valid_device(s, device)) return result(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "qload cudasim GPU %d (simulated)", device);
  prop->totalGlobalMem = s.config.memory_per_device;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 4;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  const State& s = State::get();
  if (!valid_device(s, device)) return result(cudaErrorInvalidDevice);
  if (attr != cudaDevAttrMultiProcessorCount) return result(cudaErrorInvalidValue);
  *value = 4;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  State& s = State::get();
  const int device = current_device();
  {
    std::lock_guard lock(s.mutex);
    if (cudaError_t err = on_device(s, device, false); err != cudaSuccess) return result(err);
  }
  s.drain(device);
  std::lock_guard lock(s.mutex);
  return result(s.devices[static_cast<std::size_t>(device)].sticky);
}

cudaError_t cudaGetLastError() {
  return std::exchange(last_error, cudaSuccess);
}

cudaError_t cudaPeekAtLastError() {
  return last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorDevicesUnavailable: return "cudaErrorDevicesUnavailable";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorUnknown: return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorDevicesUnavailable: return "CUDA-capable device(s) is/are busy or unavailable";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unknown error";
}

cudaError_t cudaMalloc(void** ptr, std::size_t size) {
  State& s = State::get();
  const int device = current_device();
  std::lock_guard lock(s.mutex);
  if (cudaError_t err = on_device(s, device); err != cudaSuccess) return result(err);
  qload::cudasim::DeviceState& d = s.devices[static_cast<std::size_t>(device)];
  if (s.fault_fires(Fault::kMalloc, device) || size > s.config.memory_per_device - d.used)
    return result(cudaErrorMemoryAllocation);
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  const Range r = s.memory.map(size, MemoryKind::kDevice, device);
  if (r.data == nullptr) return result(cudaErrorMemoryAllocation);
  s.ranges.emplace(reinterpret_cast<std::uintptr_t>(r.data), r);
  d.used += size;
  *ptr = r.data;
  return cudaSuccess;
}

namespace {

// cudaFree and cudaFreeHost: the range must start at `ptr` and be of `kind`.
cudaError_t release(void* ptr, MemoryKind kind, const char* call) {
  State& s = State::get();
  if (ptr == nullptr) return cudaSuccess;
  Range range;
  bool known = false;
  {
    std::lock_guard lock(s.mutex);
    auto it = s.ranges.find(reinterpret_cast<std::uintptr_t>(ptr));
    known = it != s.ranges.end() && it->second.kind == kind;
    if (known) range = it->second;
  }
  if (!known) {
    s.report(fmt::format("{}({}): not a pointer {} returned, or already freed", call, ptr,
                         kind == MemoryKind::kDevice ? "cudaMalloc" : "cudaHostAlloc"));
    return result(cudaErrorInvalidValue);
  }
  // Freeing waits for the device's work first (cudaFree synchronises), so no queued copy or
  // kernel still uses the memory; pinned memory, for the copies that use it.
  if (kind == MemoryKind::kDevice)
    s.drain(range.device);
  else
    s.wait_for_host_copies(ptr);
  bool intact = true;
  {
    std::lock_guard lock(s.mutex);
    s.ranges.erase(reinterpret_cast<std::uintptr_t>(ptr));
    if (kind == MemoryKind::kDevice) s.devices[static_cast<std::size_t>(range.device)].used -= range.size;
    if (kind == MemoryKind::kPinnedHost) s.pinned_bytes -= range.size;
    intact = s.memory.unmap(range);
  }
  if (!intact)
    s.report(fmt::format("{}({}): the bytes after its {} bytes were overwritten (a write past the end)", call, ptr,
                         range.size));
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaFree(void* ptr) {
  return release(ptr, MemoryKind::kDevice, "cudaFree");
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  State& s = State::get();
  const int device = current_device();
  std::lock_guard lock(s.mutex);
  if (cudaError_t err = on_device(s, device); err != cudaSuccess) return result(err);
  *total = s.config.memory_per_device;
  *free = *total - s.devices[static_cast<std::size_t>(device)].used;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, std::size_t size, unsigned /*flags*/) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  const int device = current_device();
  if (cudaError_t err = on_device(s, device, false); err != cudaSuccess) return result(err);
  if (s.fault_fires(Fault::kHostAlloc, device)) return result(cudaErrorMemoryAllocation);
  const Range r = s.memory.map(size, MemoryKind::kPinnedHost, -1);
  if (r.data == nullptr) return result(cudaErrorMemoryAllocation);
  s.ranges.emplace(reinterpret_cast<std::uintptr_t>(r.data), r);
  s.add_pinned(size);
  *ptr = r.data;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  return release(ptr, MemoryKind::kPinnedHost, "cudaFreeHost");
}

cudaError_t cudaHostRegister(void* ptr, std::size_t size, unsigned /*flags*/) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  const int device = current_device();
  if (cudaError_t err = on_device(s, device, false); err != cudaSuccess) return result(err);
  if (ptr == nullptr || size == 0) return result(cudaErrorInvalidValue);
  if (s.fault_fires(Fault::kHostRegister, device)) return result(cudaErrorInvalidValue);
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  auto next = s.ranges.lower_bound(begin);
  if (next != s.ranges.end() && next->first < begin + size) return result(cudaErrorHostMemoryAlreadyRegistered);
  if (next != s.ranges.begin() && std::prev(next)->first + std::prev(next)->second.size > begin)
    return result(cudaErrorHostMemoryAlreadyRegistered);
  s.ranges.emplace(begin, Range{.data = static_cast<std::byte*>(ptr),
                                .size = size,
                                .kind = MemoryKind::kRegisteredHost,
                                .device = -1,
                                .mapping = nullptr,
                                .mapping_size = 0});
  s.add_pinned(size);
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  State& s = State::get();
  {
    std::lock_guard lock(s.mutex);
    auto it = s.ranges.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == s.ranges.end() || it->second.kind != MemoryKind::kRegisteredHost)
      return result(cudaErrorHostMemoryNotRegistered);
  }
  s.wait_for_host_copies(ptr);  // no queued copy still reads the range
  std::lock_guard lock(s.mutex);
  if (auto it = s.ranges.find(reinterpret_cast<std::uintptr_t>(ptr)); it != s.ranges.end()) {
    s.pinned_bytes -= it->second.size;
    s.ranges.erase(it);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned /*flags*/) {
  State& s = State::get();
  const int device = current_device();
  std::lock_guard lock(s.mutex);
  if (cudaError_t err = on_device(s, device); err != cudaSuccess) return result(err);
  auto* st = new CUstream_st;
  st->engine = s.make_engine(device);
  *stream = st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream->legacy) return result(cudaErrorInvalidResourceHandle);
  delete stream;  // its engine finishes the queued work (as the real one does) unless an event holds it
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  State& s = State::get();
  if (stream == nullptr && !valid_device(s, current_device())) return result(cudaErrorInvalidDevice);
  const std::shared_ptr<Engine> engine = engine_for(s, stream);
  engine->drain();
  std::lock_guard lock(s.mutex);
  return result(s.devices[static_cast<std::size_t>(engine->device())].sticky);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  const std::shared_ptr<Engine> engine = engine_for(State::get(), stream);
  return engine->completed() >= engine->enqueued() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned /*flags*/) {
  State& s = State::get();
  if (event == nullptr) return result(cudaErrorInvalidResourceHandle);
  const std::shared_ptr<Engine> engine = engine_for(s, stream);
  std::shared_ptr<Engine> waited = event->engine;
  const std::uint64_t ticket = event->ticket;
  if (waited && waited != engine)
    engine->enqueue(Operation{.what = "cudaStreamWaitEvent", .run = [waited, ticket] { waited->wait_for(ticket); }});
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned /*flags*/) {
  State& s = State::get();
  const int device = current_device();
  std::lock_guard lock(s.mutex);
  if (cudaError_t err = on_device(s, device, false); err != cudaSuccess) return result(err);
  *event = new CUevent_st{.device = device, .engine = nullptr, .ticket = 0};
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return result(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  State& s = State::get();
  if (event == nullptr) return result(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Engine> engine = engine_for(s, stream);
  if (engine->device() != event->device) return result(cudaErrorInvalidResourceHandle);
  event->ticket = engine->enqueue(Operation{.what = "cudaEventRecord", .run = [] {}});
  event->engine = std::move(engine);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return result(cudaErrorInvalidResourceHandle);
  if (event->engine) event->engine->wait_for(event->ticket);
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  return result(s.devices[static_cast<std::size_t>(event->device)].sticky);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return result(cudaErrorInvalidResourceHandle);
  if (!event->engine) return cudaSuccess;
  return event->engine->completed() >= event->ticket ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind) {
  return copy(dst, count, src, count, count, 1, kind, nullptr, false, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, count, src, count, count, 1, kind, stream, true, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                              std::size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, dpitch, src, spitch, width, height, kind, stream, true, "cudaMemcpy2DAsync");
}

namespace qload::cudasim {

cudaError_t launch(dim3 grid, dim3 block, cudaStream_t stream, std::function<void()> body) {
  State& s = State::get();
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > 1024 || grid.y > 65535 || grid.z > 65535)
    return result(cudaErrorInvalidConfiguration);
  std::shared_ptr<Engine> engine;
  bool fail = false;
  {
    std::lock_guard lock(s.mutex);
    const int device = current_device();
    if (cudaError_t err = on_device(s, device); err != cudaSuccess) return result(err);
    // A kernel runs on the current device; a stream of another device is refused.
    if (stream != nullptr && stream->engine->device() != device) return result(cudaErrorInvalidResourceHandle);
    fail = s.fault_fires(Fault::kLaunch, device);
    engine = engine_of(s, stream, device);
  }
  const int device = engine->device();
  engine->enqueue(Operation{.what = "kernel", .run = [=, body = std::move(body)] {
                              if (fail) {
                                State& st = State::get();
                                std::lock_guard lock(st.mutex);
                                st.devices[static_cast<std::size_t>(device)].sticky = cudaErrorLaunchFailure;
                                return;
                              }
                              gridDim = grid;
                              blockDim = block;
                              for (unsigned bz = 0; bz < grid.z; ++bz)
                                for (unsigned by = 0; by < grid.y; ++by)
                                  for (unsigned bx = 0; bx < grid.x; ++bx) {
                                    blockIdx = uint3{bx, by, bz};
                                    for (unsigned tz = 0; tz < block.z; ++tz)
                                      for (unsigned ty = 0; ty < block.y; ++ty)
                                        for (unsigned tx = 0; tx < block.x; ++tx) {
                                          threadIdx = uint3{tx, ty, tz};
                                          body();
                                        }
                                  }
                            }});
  return cudaSuccess;
}

}  // namespace qload::cudasim
