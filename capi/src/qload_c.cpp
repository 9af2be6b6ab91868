// The C ABI over the session layer. Every entry point catches everything (no C++ exception
// crosses the boundary), checks its pointers, and leaves its error in a thread-local string.
#include "qload/qload.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "qload/runtime/device.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/version.hpp"
#include "qload/session/inspect.hpp"
#include "qload/session/load.hpp"
#include "qload/session/report.hpp"
#include "qload/session/spec_fields.hpp"

#include "c_handles.hpp"
#include "c_status.hpp"
#include "dlpack_bridge.hpp"

namespace {

using namespace qload;
using capi::destination_of;
using capi::dl_tensor_of;
using capi::failed;
using capi::guarded;
using capi::shape_of;
using capi::strides_of;

// The fields of qload_options this library knows, up to and including `internal`.
constexpr std::size_t kOptionsSize = sizeof(qload_options);
// The first ABI version 1 struct ended at `internal`; fields after it are read only when the
// caller's struct_size includes them.
constexpr std::size_t kFirstOptionsSize = offsetof(qload_options, internal) + sizeof(void*);

// Whether the caller's struct (struct_size bytes) reaches past the field at `offset` of `size`.
bool caller_knows(const qload_options* o, std::size_t offset, std::size_t size) {
  return offset + size <= o->struct_size;
}

struct OptionSettings {
  std::vector<session::SettingFlag> settings;
  std::map<std::string, scheduler::TensorRegion> regions;  // qload_options_set_region's
};

std::string text(const char* s) {
  return s == nullptr ? std::string() : std::string(s);
}

Result<session::LoadSpec> spec_of(const char* source, const qload_options* o) {
  session::LoadSpec spec{.source = source, .names = session::spec_names(session::SpecClient::kC)};
  if (o == nullptr) return spec;
  if (o->struct_size < kFirstOptionsSize)
    return fail(Errc::kInvalidArgument,
                fmt::format("qload_options.struct_size is {}, smaller than the {} bytes of ABI version {}: create "
                            "options with qload_options_create",
                            o->struct_size, kFirstOptionsSize, QLOAD_ABI_VERSION));
  if (o->struct_size > kOptionsSize) {
    // A newer caller's fields this library does not know: only zeros (unset) can be ignored.
    const auto* extra = reinterpret_cast<const unsigned char*>(o) + kOptionsSize;
    for (std::size_t i = 0; i < o->struct_size - kOptionsSize; ++i)
      if (extra[i] != 0)
        return fail(Errc::kUnsupported,
                    fmt::format("qload_options.struct_size is {}: this library (ABI version {}) knows {} bytes, and "
                                "the fields beyond them are set",
                                o->struct_size, QLOAD_ABI_VERSION, kOptionsSize));
  }
  spec.devices = text(o->devices);
  spec.placement = text(o->placement);
  spec.dtype = text(o->dtype);
  spec.dequantize = text(o->dequantize);
  spec.quantize = text(o->quantize);
  spec.lock = text(o->lock);
  if (caller_knows(o, offsetof(qload_options, recipe), sizeof o->recipe)) spec.recipe = text(o->recipe);
  spec.repack = o->repack != 0;
  spec.tensor_parallel = o->tensor_parallel;
  spec.pipeline_parallel = o->pipeline_parallel;
  spec.data_parallel = o->data_parallel;
  if (o->internal != nullptr) {
    spec.settings = static_cast<const OptionSettings*>(o->internal)->settings;
    spec.regions = static_cast<const OptionSettings*>(o->internal)->regions;
  }
  if (caller_knows(o, offsetof(qload_options, world_token), sizeof o->world_token) && o->world_size > 0) {
    distributed::World w{.rank = o->rank,
                         .size = o->world_size,
                         .local_rank = o->local_world_size == 0 ? o->rank : o->local_rank,
                         .local_size = o->local_world_size == 0 ? o->world_size : o->local_world_size,
                         .master_addr = text(o->master_addr),
                         .master_port = 29500,
                         .token = text(o->world_token),
                         .runtime_dir = text(std::getenv("XDG_RUNTIME_DIR"))};
    if (o->master_port > 65535)
      return fail(Errc::kInvalidArgument,
                  fmt::format("qload_options.master_port: {} is outside 1..65535", o->master_port));
    if (o->master_port != 0) w.master_port = static_cast<std::uint16_t>(o->master_port);
    spec.world = std::move(w);
  }
  if (caller_knows(o, offsetof(qload_options, nccl_comm_count), sizeof o->nccl_comm_count) && o->nccl_comm_count > 0) {
    if (o->nccl_comms == nullptr)
      return fail(Errc::kInvalidArgument,
                  fmt::format("qload_options.nccl_comms is NULL with nccl_comm_count {}", o->nccl_comm_count));
    spec.nccl_comms.assign(o->nccl_comms, o->nccl_comms + o->nccl_comm_count);
  }
  if (caller_knows(o, offsetof(qload_options, share_reads), sizeof o->share_reads))
    spec.share_reads = o->share_reads != 0;
  return spec;
}

}  // namespace

namespace {

// The tensor callback as the session layer calls it.
scheduler::LoadContext::TensorCallback stream_to(qload_tensor_callback callback, void* user_data) {
  return [callback, user_data](std::uint32_t index, const scheduler::DeviceTensor& t,
                               const std::shared_ptr<const void>&) -> Status {
    std::vector<std::int64_t> shape = shape_of(t);
    std::vector<std::int64_t> strides = strides_of(t);
    const qload_tensor_info info = capi::info_of(t, shape);
    const Result<DLTensor> tensor = dl_tensor_of(t, shape, strides);
    if (const int stop = callback(user_data, index, &info, tensor ? &*tensor : nullptr); stop != 0)
      return fail(Errc::kCancelled, fmt::format("the tensor callback returned {}: load stopped", stop));
    return {};
  };
}

// A session document as compact UTF-8 (invalid bytes in names replaced, as the CLI prints them).
std::string json_text(const nlohmann::json& document) {
  return document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// qload_load and qload_load_stream: the session's one load, and the model handle over it
// (NULL `out`: freed at once).
qload_status load_session(const char* function, qload_session* s, const session::LoadHooks& hooks, qload_model** out,
                          const std::function<Error(Error)>& explain = {}) {
  if (s == nullptr) return failed(QLOAD_ERR_INVALID_ARGUMENT, fmt::format("{}: session is NULL", function));
  if (!s->request)
    return failed(QLOAD_ERR_INVALID_ARGUMENT, fmt::format("{}: this session has already loaded", function));
  Result<session::LoadRequest> request = std::move(*s->request);
  s->request.reset();
  auto loaded = session::load(std::move(request), hooks);
  if (!loaded) return failed(explain ? explain(std::move(loaded.error())) : loaded.error());
  if (out == nullptr) return QLOAD_OK;
  auto handle = std::make_unique<qload_model>();
  handle->model = std::make_shared<const scheduler::Model>(std::move(loaded->model));
  handle->report_json = json_text(session::load_report_json(handle->model->report()));
  for (const scheduler::DeviceTensor& t : handle->model->tensors()) handle->shapes.push_back(shape_of(t));
  for (const scheduler::QuantizedWeight& w : handle->model->quantized()) {
    std::vector<const char*> roles;
    std::vector<std::size_t> parts;
    for (const auto& [role, index] : w.parts) {
      roles.push_back(role.c_str());
      parts.push_back(index);
    }
    handle->roles.push_back(std::move(roles));
    handle->parts.push_back(std::move(parts));
    handle->schemes.push_back(formats::weight_scheme_name(w.params));
  }
  *out = handle.release();
  return QLOAD_OK;
}

// The misuses every model accessor refuses: a NULL model or out-pointer, an index out of range.
qload_status check_pointers(const char* function, const qload_model* model, const void* out) {
  if (model != nullptr && out != nullptr) return QLOAD_OK;
  return failed(QLOAD_ERR_INVALID_ARGUMENT, fmt::format("{}: model and out must not be NULL", function));
}
qload_status check_index(const char* function, std::size_t index, std::size_t count, std::string_view items) {
  if (index < count) return QLOAD_OK;
  return failed(QLOAD_ERR_INVALID_ARGUMENT, fmt::format("{}: index {} of {} {}", function, index, count, items));
}

}  // namespace

extern "C" {

const char* qload_version(void) {
  return qload::version().data();
}
int qload_abi_version(void) {
  return QLOAD_ABI_VERSION;
}
const char* qload_last_error(void) {
  return capi::last_error().c_str();
}

qload_status qload_options_create(qload_options** out) {
  return guarded([&] {
    if (out == nullptr) return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_options_create: out is NULL");
    auto* o = new qload_options{};
    o->struct_size = static_cast<std::uint32_t>(kOptionsSize);
    *out = o;
    return QLOAD_OK;
  });
}

qload_status qload_options_set(qload_options* options, const char* name, const char* value) {
  return guarded([&] {
    if (options == nullptr || name == nullptr || value == nullptr)
      return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_options_set: options, name and value must not be NULL");
    // Checked now, so the caller learns of a typo where it made it.
    ResolvedSettings check;
    if (Status s = check.set(name, value, SettingSource::kOption, fmt::format("qload_options_set {}", name)); !s)
      return failed(s.error());
    if (options->internal == nullptr) options->internal = new OptionSettings;
    static_cast<OptionSettings*>(options->internal)
        ->settings.push_back({name, value, fmt::format("qload_options_set {}", name)});
    return QLOAD_OK;
  });
}

qload_status qload_options_set_region(qload_options* options, const char* tensor, uint32_t dim, uint64_t begin,
                                      uint64_t end) {
  return guarded([&] {
    if (options == nullptr || tensor == nullptr)
      return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_options_set_region: options and tensor must not be NULL");
    if (begin > end)
      return failed(QLOAD_ERR_INVALID_ARGUMENT,
                    fmt::format("qload_options_set_region {}: begin {} is after end {}", tensor, begin, end));
    if (options->internal == nullptr) options->internal = new OptionSettings;
    static_cast<OptionSettings*>(options->internal)->regions[tensor] = {.dim = dim, .begin = begin, .end = end};
    return QLOAD_OK;
  });
}

void qload_options_free(qload_options* options) {
  if (options == nullptr) return;
  delete static_cast<OptionSettings*>(options->internal);
  delete options;
}

qload_status qload_open(const char* source, const qload_options* options, qload_session** out) {
  return guarded([&] {
    if (source == nullptr || out == nullptr)
      return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_open: source and out must not be NULL");
    *out = nullptr;
    auto spec = spec_of(source, options);
    if (!spec) return failed(spec.error());
    auto request = session::build_request(*spec, Logger::to_stderr(LogLevel::kWarn));
    if (!request) return failed(request.error());
    *out = new qload_session{.request = std::move(*request)};
    return QLOAD_OK;
  });
}

qload_status qload_load(qload_session* s, qload_model** out) {
  return guarded([&] {
    if (out == nullptr) return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_load: out is NULL");
    *out = nullptr;
    return load_session("qload_load", s, {}, out);
  });
}

qload_status qload_load_stream(qload_session* s, qload_tensor_callback callback, void* user_data, qload_model** out) {
  return guarded([&] {
    if (callback == nullptr) return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_load_stream: callback is NULL");
    if (out != nullptr) *out = nullptr;
    return load_session("qload_load_stream", s, {.on_tensor = stream_to(callback, user_data)}, out);
  });
}

qload_status qload_load_into(qload_session* s, const qload_destination* destinations, size_t count,
                             qload_model** rest) {
  return guarded([&] {
    if (destinations == nullptr && count > 0)
      return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_load_into: destinations is NULL");
    if (rest != nullptr) *rest = nullptr;
    if (s == nullptr) return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_load_into: session is NULL");
    if (!s->request) return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_load_into: this session has already loaded");
    std::map<std::string, scheduler::Destination, std::less<>> mapped;
    for (std::size_t i = 0; i < count; ++i) {
      auto destination = destination_of(destinations[i]);
      if (!destination) return failed(destination.error());
      if (!mapped.emplace(destinations[i].tensor, std::move(*destination)).second)
        return failed(Error(Errc::kInvalidArgument, "qload_load_into: two destinations name this tensor")
                          .with_tensor(destinations[i].tensor));
    }
    if (count == 0 && rest == nullptr)
      return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_load_into: no destinations and no rest: nothing to load");
    if (Status set = session::set_destinations(*s->request, std::move(mapped), rest == nullptr); !set)
      return failed(set.error());
    // A failed load says which destinations it had completely written (and verified).
    std::mutex mutex;
    std::vector<std::string> written;
    session::LoadHooks hooks;
    hooks.on_tensor = [&](std::uint32_t, const scheduler::DeviceTensor& t, const std::shared_ptr<const void>&) {
      if (!t.caller_owned) return Status{};
      const std::lock_guard lock(mutex);
      written.push_back(t.name);
      return Status{};
    };
    const auto explain = [&](Error error) {
      const std::lock_guard lock(mutex);
      std::string names;
      for (std::size_t i = 0; i < written.size() && i < 8; ++i) names += (i > 0 ? ", " : "") + written[i];
      if (written.size() > 8) names += fmt::format(" and {} more", written.size() - 8);
      return std::move(error).with_note(fmt::format("destinations completely written before the failure: {} of {}{}",
                                                    written.size(), count, names.empty() ? "" : " (" + names + ")"));
    };
    qload_model* model = nullptr;
    const qload_status status = load_session("qload_load_into", s, hooks, rest != nullptr ? &model : nullptr, explain);
    if (rest != nullptr) *rest = model;
    return status;
  });
}

void qload_session_free(qload_session* session) {
  delete session;
}

qload_status qload_model_tensor_count(const qload_model* model, size_t* out) {
  return guarded([&] {
    if (const qload_status s = check_pointers("qload_model_tensor_count", model, out); s != QLOAD_OK) return s;
    *out = model->model->tensors().size();
    return QLOAD_OK;
  });
}

qload_status qload_model_tensor_info(const qload_model* model, size_t index, qload_tensor_info* out) {
  return guarded([&] {
    if (const qload_status s = check_pointers("qload_model_tensor_info", model, out); s != QLOAD_OK) return s;
    const auto& tensors = model->model->tensors();
    if (const qload_status s = check_index("qload_model_tensor_info", index, tensors.size(), "tensors"); s != QLOAD_OK)
      return s;
    *out = capi::info_of(tensors[index], model->shapes[index]);
    return QLOAD_OK;
  });
}

qload_status qload_model_tensor_dlpack(const qload_model* model, size_t index, DLManagedTensorVersioned** out) {
  return guarded([&] {
    if (const qload_status s = check_pointers("qload_model_tensor_dlpack", model, out); s != QLOAD_OK) return s;
    *out = nullptr;
    const auto& tensors = model->model->tensors();
    if (const qload_status s = check_index("qload_model_tensor_dlpack", index, tensors.size(), "tensors");
        s != QLOAD_OK)
      return s;
    const scheduler::DeviceTensor& t = tensors[index];
    auto exported = capi::export_dlpack(t, model->model, model->shapes[index]);
    if (!exported) return failed(exported.error());
    *out = *exported;
    return QLOAD_OK;
  });
}

qload_status qload_model_quantized_count(const qload_model* model, size_t* out) {
  return guarded([&] {
    if (const qload_status s = check_pointers("qload_model_quantized_count", model, out); s != QLOAD_OK) return s;
    *out = model->model->quantized().size();
    return QLOAD_OK;
  });
}

qload_status qload_model_quantized_info(const qload_model* model, size_t index, qload_quantized_info* out) {
  return guarded([&] {
    if (const qload_status s = check_pointers("qload_model_quantized_info", model, out); s != QLOAD_OK) return s;
    const auto& weights = model->model->quantized();
    if (const qload_status s = check_index("qload_model_quantized_info", index, weights.size(), "quantized weights");
        s != QLOAD_OK)
      return s;
    const scheduler::QuantizedWeight& w = weights[index];
    *out = qload_quantized_info{.name = w.name.c_str(),
                                .scheme = model->schemes[index].c_str(),
                                .bits = w.params.bits,
                                .group_size = w.params.group_size,
                                .rows = w.rows,
                                .cols = w.cols,
                                .device = w.device.c_str(),
                                .part_count = model->parts[index].size(),
                                .part_roles = model->roles[index].data(),
                                .part_tensors = model->parts[index].data(),
                                .experts = w.experts};
    return QLOAD_OK;
  });
}

void qload_model_free(qload_model* model) {
  delete model;
}

qload_status qload_model_report_json(const qload_model* model, const char** out) {
  return guarded([&] {
    if (const qload_status s = check_pointers("qload_model_report_json", model, out); s != QLOAD_OK) return s;
    *out = model->report_json.c_str();
    return QLOAD_OK;
  });
}

qload_status qload_inspect_json(const char* source, char** out) {
  return guarded([&] {
    if (source == nullptr || out == nullptr)
      return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_inspect_json: source and out must not be NULL");
    Result<session::Inspection> inspection = session::inspect(source);
    if (!inspection) return failed(inspection.error());
    const std::string text = json_text(session::inspection_json(*inspection));
    char* copy = static_cast<char*>(std::malloc(text.size() + 1));
    if (copy == nullptr) return failed(QLOAD_ERR_OUT_OF_MEMORY, "qload_inspect_json: out of memory");
    std::memcpy(copy, text.c_str(), text.size() + 1);
    *out = copy;
    return QLOAD_OK;
  });
}

void qload_string_free(char* text) {
  std::free(text);
}

}  // extern "C"
