// The simulated driver's state, configuration and control API (sim_state.hpp, control.hpp).
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "sim_state.hpp"

namespace qload::cudasim {
namespace {

std::size_t parse_bytes(const char* text, std::size_t fallback) {
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  std::string_view unit(end);
  double scale = 1;
  if (unit == "KiB") scale = 1024.0;
  if (unit == "MiB") scale = 1024.0 * 1024;
  if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  if (unit == "KB") scale = 1e3;
  if (unit == "MB") scale = 1e6;
  if (unit == "GB") scale = 1e9;
  if (value <= 0) return fallback;
  return static_cast<std::size_t>(value * scale);
}

long parse_long(const char* text, long fallback) {
  if (text == nullptr || *text == '\0') return fallback;
  return std::strtol(text, nullptr, 10);
}

bool parse_fault(std::string_view name, Fault& out) {
  static constexpr std::pair<std::string_view, Fault> kNames[] = {
      {"malloc", Fault::kMalloc},      {"host_alloc", Fault::kHostAlloc}, {"host_register", Fault::kHostRegister},
      {"copy", Fault::kCopy},          {"launch", Fault::kLaunch},        {"device_lost", Fault::kDeviceLost},
      {"nccl_init", Fault::kNcclInit}, {"nccl_error", Fault::kNcclError}, {"nccl_hang", Fault::kNcclHang}};
  for (const auto& [n, f] : kNames)
    if (n == name) {
      out = f;
      return true;
    }
  return false;
}

std::vector<FaultPlan> faults_from_environment() {
  std::vector<FaultPlan> plans;
  const char* text = std::getenv("QLOAD_CUDASIM_FAULTS");
  if (text == nullptr) return plans;
  std::string_view rest(text);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const std::size_t colon = item.find(':');
    Fault fault{};
    if (colon == std::string_view::npos || !parse_fault(item.substr(0, colon), fault)) {
      std::fprintf(stderr, "qload cudasim: QLOAD_CUDASIM_FAULTS: cannot read '%.*s' (kind:N)\n",
                   static_cast<int>(item.size()), item.data());
      std::abort();
    }
    const int nth = std::atoi(std::string(item.substr(colon + 1)).c_str());
    plans.push_back(FaultPlan{.fault = fault, .device = -1, .remaining = nth < 1 ? 1 : nth});
  }
  return plans;
}

}  // namespace

Config config_from_environment() {
  Config c;
  c.devices = static_cast<int>(parse_long(std::getenv("QLOAD_CUDASIM_DEVICES"), c.devices));
  if (c.devices < 0) c.devices = 0;
  c.memory_per_device = parse_bytes(std::getenv("QLOAD_CUDASIM_MEMORY"), c.memory_per_device);
  c.seed = static_cast<std::uint64_t>(parse_long(std::getenv("QLOAD_CUDASIM_SEED"), 1));
  c.max_delay_us = static_cast<unsigned>(parse_long(std::getenv("QLOAD_CUDASIM_DELAY_US"), c.max_delay_us));
  const char* on_error = std::getenv("QLOAD_CUDASIM_ON_ERROR");
  c.abort_on_misuse = on_error == nullptr || std::string_view(on_error) != "continue";
  return c;
}

State::State(Config c)
    : config(c),
      devices(static_cast<std::size_t>(c.devices)),
      faults(faults_from_environment()),
      max_delay_us(c.max_delay_us) {}

State& State::get() {
  // Never destroyed: engine threads and late destructors may still call in during exit.
  static State* const state = new State(config_from_environment());
  return *state;
}

const Range* State::find(const void* p, std::size_t size) const {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  auto it = ranges.upper_bound(address);
  if (it == ranges.begin()) return nullptr;
  --it;
  const Range& r = it->second;
  const auto begin = reinterpret_cast<std::uintptr_t>(r.data);
  if (address < begin || address - begin > r.size || size > r.size - (address - begin)) return nullptr;
  return &r;
}

bool State::fault_fires(Fault fault, int device) {
  for (auto it = faults.begin(); it != faults.end(); ++it) {
    if (it->fault != fault || (it->device >= 0 && it->device != device)) continue;
    if (--it->remaining > 0) continue;
    faults.erase(it);
    return true;
  }
  return false;
}

void State::report(const std::string& what) {
  std::fprintf(stderr, "qload cudasim: ERROR: %s\n", what.c_str());
  if (config.abort_on_misuse) {
    std::fprintf(stderr, "qload cudasim: aborting (QLOAD_CUDASIM_ON_ERROR=continue only reports)\n");
    std::abort();
  }
  std::lock_guard lock(mutex);
  misuse.push_back(what);
}

std::shared_ptr<Engine> State::make_engine(int device) {
  static std::atomic<std::uint64_t> counter{0};
  auto engine = std::make_shared<Engine>(device, config.seed * 1'000'003u + counter++, max_delay_us);
  engines.push_back(engine);
  std::erase_if(engines, [](const std::weak_ptr<Engine>& e) { return e.expired(); });
  return engine;
}

CUstream_st* State::legacy_stream(int device) {
  DeviceState& d = devices[static_cast<std::size_t>(device)];
  if (!d.legacy) {
    d.legacy = std::make_unique<CUstream_st>();
    d.legacy->engine = make_engine(device);
    d.legacy->legacy = true;
  }
  return d.legacy.get();
}

void State::drain(int device) {
  std::vector<std::shared_ptr<Engine>> live;
  {
    std::lock_guard lock(mutex);
    for (const auto& weak : engines)
      if (auto e = weak.lock(); e && (device < 0 || e->device() == device)) live.push_back(std::move(e));
  }
  for (const auto& e : live) e->drain();
}

void State::note_host_copy(const void* p, const std::shared_ptr<Engine>& engine, std::uint64_t ticket) {
  auto it = ranges.upper_bound(reinterpret_cast<std::uintptr_t>(p));
  if (it == ranges.begin()) return;
  Range& r = std::prev(it)->second;
  if (r.kind == MemoryKind::kDevice || static_cast<const std::byte*>(p) >= r.data + r.size) return;
  std::erase_if(r.copies, [&](const auto& c) { return c.first.expired() || c.first.lock() == engine; });
  r.copies.emplace_back(engine, ticket);
}

void State::wait_for_host_copies(const void* p) {
  std::vector<std::pair<std::weak_ptr<Engine>, std::uint64_t>> copies;
  {
    std::lock_guard lock(mutex);
    if (auto it = ranges.find(reinterpret_cast<std::uintptr_t>(p)); it != ranges.end()) copies = it->second.copies;
  }
  for (const auto& [weak, ticket] : copies)
    if (auto engine = weak.lock()) engine->wait_for(ticket);
}

int& current_device() {
  thread_local int device = 0;
  return device;
}

// ---------------------------------------------------------------------------------------------
// control.hpp

void inject(Fault fault, int nth, int device) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  s.faults.push_back(FaultPlan{.fault = fault, .device = device, .remaining = nth < 1 ? 1 : nth});
}

void reset() {
  State& s = State::get();
  s.drain(-1);
  std::lock_guard lock(s.mutex);
  s.faults.clear();
  s.misuse.clear();
  s.peak_pinned_bytes = s.pinned_bytes;
  s.max_delay_us = s.config.max_delay_us;
  for (DeviceState& d : s.devices) d.sticky = cudaSuccess;
}

bool context_created(int device) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  return device >= 0 && device < s.config.devices && s.devices[static_cast<std::size_t>(device)].context;
}

void forget_contexts() {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  for (DeviceState& d : s.devices) d.context = false;
}

std::size_t live_allocations(int device) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  std::size_t n = 0;
  for (const auto& [_, r] : s.ranges) n += r.kind == MemoryKind::kDevice && r.device == device ? 1 : 0;
  return n;
}

std::size_t live_bytes(int device) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  std::size_t n = 0;
  for (const auto& [_, r] : s.ranges) n += r.kind == MemoryKind::kDevice && r.device == device ? r.size : 0;
  return n;
}

std::size_t pinned_ranges() {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  std::size_t n = 0;
  for (const auto& [_, r] : s.ranges) n += r.kind != MemoryKind::kDevice ? 1 : 0;
  return n;
}

void set_max_delay_us(unsigned us) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  s.max_delay_us = us;
}

std::size_t peak_pinned_bytes() {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  return s.peak_pinned_bytes;
}

std::vector<std::string> reports() {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  return s.misuse;
}

int device_count() {
  return State::get().config.devices;
}

}  // namespace qload::cudasim
