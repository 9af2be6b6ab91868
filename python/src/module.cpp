// qload._qload: the Python package's native half, over the session layer (the one application
// layer every client goes through). It hands tensors out as DLPack-capable arrays that point
// into qload's memory; the Python half (python/qload/) turns them into numpy arrays or torch
// tensors and gives them their real dtypes.
//
// Memory: every array's owner is the Python Model object, so the arenas live until the last
// array (or the model) is gone. The GIL is released while a load runs; progress callbacks and
// streamed tensors take it back only for as long as they touch Python. Ctrl-C cancels a load
// (interruptible.hpp).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "errors.hpp"
#include "interruptible.hpp"
#include "qload/runtime/device.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"
#include "qload/runtime/settings.hpp"
#include "qload/session/inspect.hpp"
#include "qload/session/load.hpp"
#include "qload/session/pull_stream.hpp"
#include "qload/session/report.hpp"
#include "qload/session/request.hpp"
#include "qload/session/source.hpp"
#include "qload/session/spec_fields.hpp"
#include "write.hpp"

namespace nb = nanobind;

namespace qload::python {
namespace {

// ---------------------------------------------------------------------------------------------
// dtypes: each qload dtype travels as a "carrier" DLPack type of the same width that every
// framework accepts (bf16 and the fp8 family as unsigned integers); the Python half views it
// as the real type. Packed sub-byte types (F4, F6) travel as their raw bytes.

struct Carrier {
  nb::dlpack::dtype dtype;
  bool raw_bytes = false;  // shape is [nbytes], not the tensor's
};

Carrier carrier_of(DType d) {
  using nb::dlpack::dtype_code;
  const auto t = [](dtype_code c, int bits) {
    return nb::dlpack::dtype{static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(bits), 1};
  };
  switch (d) {
    case DType::kBool: return {t(dtype_code::Bool, 8)};
    case DType::kU8: return {t(dtype_code::UInt, 8)};
    case DType::kI8: return {t(dtype_code::Int, 8)};
    case DType::kI16: return {t(dtype_code::Int, 16)};
    case DType::kU16: return {t(dtype_code::UInt, 16)};
    case DType::kI32: return {t(dtype_code::Int, 32)};
    case DType::kU32: return {t(dtype_code::UInt, 32)};
    case DType::kI64: return {t(dtype_code::Int, 64)};
    case DType::kU64: return {t(dtype_code::UInt, 64)};
    case DType::kF16: return {t(dtype_code::Float, 16)};
    case DType::kF32: return {t(dtype_code::Float, 32)};
    case DType::kF64: return {t(dtype_code::Float, 64)};
    case DType::kC64: return {t(dtype_code::Complex, 64)};
    case DType::kBF16: return {t(dtype_code::UInt, 16)};
    case DType::kF8_E4M3:
    case DType::kF8_E5M2:
    case DType::kF8_E8M0:
    case DType::kF8_E4M3FNUZ:
    case DType::kF8_E5M2FNUZ: return {t(dtype_code::UInt, 8)};
    case DType::kF4:
    case DType::kF6_E2M3:
    case DType::kF6_E3M2: return {t(dtype_code::UInt, 8), true};
  }
  return {t(dtype_code::UInt, 8), true};
}

using Array = nb::ndarray<nb::array_api>;
using ReadOnlyArray = nb::ndarray<nb::array_api, nb::ro>;

// The array for `t`, owned by `owner` (which keeps t's memory alive).
nb::object make_array(const scheduler::DeviceTensor& t, nb::handle owner) {
  const Carrier c = carrier_of(t.dtype);
  std::vector<std::size_t> shape;
  std::vector<std::int64_t> strides;
  if (c.raw_bytes) {
    shape = {static_cast<std::size_t>(t.nbytes)};
  } else {
    for (std::size_t i = 0; i < t.shape.rank(); ++i) shape.push_back(static_cast<std::size_t>(t.shape[i]));
    strides = t.strides;
  }
  int device_type = nb::device::cpu::value;
  int device_id = 0;
  if (!t.host) {
    device_type = nb::device::cuda::value;
    device_id = std::stoi(t.device.substr(t.device.find(':') + 1));
  }
  // A zero-size tensor may have no memory at all; DLPack wants a non-null pointer anyway.
  static std::byte empty_tensor_memory[16];
  void* data = t.nbytes == 0 ? static_cast<void*>(empty_tensor_memory) : const_cast<std::byte*>(t.data);
  const std::int64_t* stride_ptr = strides.empty() ? nullptr : strides.data();
  if (t.writable || !t.host)
    return nb::cast(Array(data, shape.size(), shape.data(), owner, stride_ptr, c.dtype, device_type, device_id));
  return nb::cast(ReadOnlyArray(data, shape.size(), shape.data(), owner, stride_ptr, c.dtype, device_type, device_id));
}

nb::list shape_list(const Shape& shape) {
  nb::list out;
  for (const std::uint64_t dim : shape.dims()) out.append(dim);
  return out;
}

nb::dict tensor_info(const scheduler::DeviceTensor& t) {
  nb::dict d;
  d["name"] = t.name;
  d["dtype"] = std::string(dtype_name(t.dtype));
  d["shape"] = shape_list(t.shape);
  d["device"] = t.device;
  d["nbytes"] = t.nbytes;
  return d;
}

// ---------------------------------------------------------------------------------------------
// Loading

struct LoadArgs {
  std::string source;
  std::string recipe;
  std::string device;
  std::string placement;
  bool repack = false;
  std::string dtype;
  std::string dequantize;
  std::string quantize;
  std::string lock;
  std::vector<std::pair<std::string, std::string>> settings;
  std::uint32_t tensor_parallel = 0, pipeline_parallel = 0, data_parallel = 0;  // 0: none
  bool share_reads = false;
  std::optional<distributed::World> world;  // world=: this process's place among the load's processes
  // regions=: (name, dim, begin, end) of each tensor to load in part (LoadSpec::regions)
  std::vector<std::tuple<std::string, std::uint32_t, std::uint64_t, std::uint64_t>> regions;
};

session::LoadSpec make_spec(const LoadArgs& a) {
  session::LoadSpec spec;
  spec.source = a.source;
  spec.recipe = a.recipe;
  spec.devices = a.device;
  spec.placement = a.placement;
  spec.repack = a.repack;
  spec.dtype = a.dtype;
  spec.dequantize = a.dequantize;
  spec.quantize = a.quantize;
  spec.lock = a.lock;
  spec.tensor_parallel = a.tensor_parallel;
  spec.pipeline_parallel = a.pipeline_parallel;
  spec.data_parallel = a.data_parallel;
  spec.share_reads = a.share_reads;
  spec.world = a.world;
  for (const auto& [name, dim, begin, end] : a.regions)
    spec.regions[name] = scheduler::TensorRegion{.dim = dim, .begin = begin, .end = end};
  for (const auto& [name, value] : a.settings)
    spec.settings.push_back({.name = name, .value = value, .where = "settings[" + name + "]"});
  spec.names = session::spec_names(session::SpecClient::kPython);
  return spec;
}

// Log lines go to Python's warnings only when asked; by default qload stays quiet in a library.
Logger quiet_logger() {
  return Logger{};
}

// A load's report, as Model.report and Stream.report hand it to Python: the session's document
// (session/report.hpp), the same keys the CLI's --json gives.
nb::dict report_dict(const scheduler::LoadReport& r) {
  return nb::cast<nb::dict>(nb::module_::import_("json").attr("loads")(session::load_report_json(r).dump()));
}

class Model {
 public:
  explicit Model(scheduler::Model model) : model_(std::move(model)) {}

  nb::list infos() const {
    nb::list out;
    for (const scheduler::DeviceTensor& t : model_.tensors()) out.append(tensor_info(t));
    return out;
  }
  const scheduler::DeviceTensor& get(const std::string& name) const {
    const scheduler::DeviceTensor* t = model_.find(name);
    if (t == nullptr) raise(Error(Errc::kNotFound, "no tensor of that name in the model").with_tensor(name));
    return *t;
  }
  // Every tensor, in model order: [(name, array)].
  nb::list arrays(nb::handle self) const {
    nb::list out;
    for (const scheduler::DeviceTensor& t : model_.tensors())
      if (!t.caller_owned)  // a load_into's destinations are the caller's own tensors already
        out.append(nb::make_tuple(t.name, make_array(t, self), std::string(dtype_name(t.dtype))));
    return out;
  }
  nb::dict report() const { return report_dict(model_.report()); }
  nb::list quantized() const {
    nb::list out;
    const auto tensors = model_.tensors();
    for (const scheduler::QuantizedWeight& q : model_.quantized()) {
      nb::dict d;
      d["name"] = q.name;
      d["scheme"] = formats::weight_scheme_name(q.params);
      d["bits"] = q.params.bits;
      d["group_size"] = q.params.group_size;
      d["symmetric"] = q.params.sym;
      d["rows"] = q.rows;
      d["cols"] = q.cols;
      d["experts"] = q.experts;
      d["device"] = q.device;
      nb::dict parts;
      for (const auto& [role, index] : q.parts) parts[nb::str(role.c_str())] = tensors[index].name;
      d["parts"] = parts;
      out.append(d);
    }
    return out;
  }

 private:
  scheduler::Model model_;
};

// A Python progress callable as the session calls it (on the loading thread): with the GIL, its
// exceptions reported as unraisable rather than stopping the load. None: no hook.
std::function<void(std::uint64_t, std::uint64_t)> progress_hook(const nb::object& progress) {
  if (progress.is_none()) return {};
  return [&progress](std::uint64_t done, std::uint64_t total) {
    nb::gil_scoped_acquire gil;
    try {
      progress(done, total);
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("qload progress callback");
    }
  };
}

Model load(const LoadArgs& args, nb::object progress) {
  session::LoadHooks hooks;
  hooks.progress = progress_hook(progress);
  Result<session::LoadOutcome> outcome = run_interruptibly([&](std::stop_token stop) {
    hooks.stop = std::move(stop);
    return session::load(make_spec(args), quiet_logger(), hooks);
  });
  if (!outcome) raise(outcome.error());
  return Model(std::move(outcome->model));
}

// ---------------------------------------------------------------------------------------------
// Loading into the caller's tensors: the Python half describes each (address, bytes, dtype,
// shape, device, region) and keeps it alive for the call; a failed load's exception lists, as
// `written`, the destinations that were completely written before it failed.

// (name, address, bytes, dtype, shape, device, region, rows, row pitch in bytes: 0 for packed rows)
using DestinationArgs = std::tuple<std::string, std::uintptr_t, std::uint64_t, std::string, std::vector<std::uint64_t>,
                                   std::string, std::optional<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>>,
                                   std::vector<std::pair<std::uint64_t, std::uint64_t>>, std::uint64_t>;

std::map<std::string, scheduler::Destination, std::less<>> destinations_of(const std::vector<DestinationArgs>& list) {
  std::map<std::string, scheduler::Destination, std::less<>> out;
  for (const auto& [name, address, bytes, dtype_text, shape, device_text, region, rows, row_pitch] : list) {
    const std::optional<DType> dtype = parse_dtype(dtype_text);
    if (!dtype) raise(Error(Errc::kInvalidArgument, "unknown dtype " + dtype_text).with_tensor(name));
    Result<Device> device = parse_device(device_text);
    if (!device) raise(Error(device.error()).with_tensor(name));
    scheduler::Destination d{.device = *device,
                             .address = address,
                             .bytes = bytes,
                             .row_pitch = row_pitch,
                             .dtype = *dtype,
                             .rows = rows,
                             .shape = Shape(shape)};
    if (region) {
      const auto& [dim, begin, end] = *region;
      d.region = scheduler::TensorRegion{.dim = dim, .begin = begin, .end = end};
    }
    if (!out.emplace(name, d).second)
      raise(Error(Errc::kInvalidArgument, "two destinations name this tensor").with_tensor(name));
  }
  return out;
}

// (report, Model of the rest or None).
nb::tuple load_into(const LoadArgs& args, const std::vector<DestinationArgs>& destinations, bool rest,
                    nb::object progress) {
  session::LoadSpec spec = make_spec(args);
  spec.destinations = destinations_of(destinations);
  spec.destinations_only = !rest;
  session::LoadHooks hooks;
  hooks.progress = progress_hook(progress);
  std::mutex mutex;
  std::vector<std::string> written;  // in completion order
  hooks.on_tensor = [&](std::uint32_t, const scheduler::DeviceTensor& t, const std::shared_ptr<const void>&) -> Status {
    if (!t.caller_owned) return {};
    std::lock_guard lock(mutex);
    written.push_back(t.name);
    return {};
  };
  Result<session::LoadOutcome> outcome = run_interruptibly([&](std::stop_token stop) {
    hooks.stop = std::move(stop);
    return session::load(spec, quiet_logger(), hooks);
  });
  if (!outcome) {
    nb::list names;
    for (const std::string& n : written) names.append(n);
    raise(outcome.error(), names);
  }
  nb::dict report = report_dict(outcome->model.report());
  if (!rest) return nb::make_tuple(report, nb::none());
  return nb::make_tuple(report, nb::cast(Model(std::move(outcome->model))));
}

// ---------------------------------------------------------------------------------------------
// Streaming: session::PullStream runs the load on a thread of its own and queues each tensor,
// once verified; the Python iterator takes them in completion order. Zero-copy: a tensor points
// into the load's arena, or mmap mode's mapping, and holds it (the scheduler's keep_alive), so it
// stays valid if the load later fails or the stream is dropped; where the load has no such owner
// (shared reads: handed over at the end), the stream copies the tensor into memory of its own.

class Stream {
 public:
  explicit Stream(LoadArgs args)
      : stream_(std::make_unique<session::PullStream>([spec = make_spec(args)](const session::LoadHooks& hooks) {
          return session::load(spec, quiet_logger(), hooks);
        })) {}
  ~Stream() {
    nb::gil_scoped_release no_gil;  // cancelling joins the load's thread
    stream_.reset();
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // The load's report once it has succeeded and every tensor was taken; None before, or if
  // it failed.
  nb::object report() {
    const std::optional<scheduler::LoadReport> r = stream_->report();
    return r ? nb::object(report_dict(*r)) : nb::none();
  }

  // The next tensor as (name, array, dtype), or StopIteration; raises the load's error. A
  // Ctrl-C while waiting raises KeyboardInterrupt (the load goes on until the stream is dropped).
  nb::object next() {
    Result<session::StreamItem> item = session::StreamItem(session::StreamPending{});
    bool interrupted = false;
    {
      nb::gil_scoped_release no_gil;
      while (item && std::holds_alternative<session::StreamPending>(*item) && !interrupted) {
        item = stream_->next_for(kSignalPoll);
        if (item && std::holds_alternative<session::StreamPending>(*item)) interrupted = signal_raised();
      }
    }
    if (interrupted) throw nb::python_error();  // the signal handler's exception
    if (!item) raise(item.error());
    if (std::holds_alternative<session::StreamEnd>(*item)) throw nb::stop_iteration();
    session::StreamedTensor* raw = std::get<std::unique_ptr<session::StreamedTensor>>(*item).release();
    nb::capsule owner(raw, [](void* p) noexcept { delete static_cast<session::StreamedTensor*>(p); });
    return nb::make_tuple(raw->view.name, make_array(raw->view, owner), std::string(dtype_name(raw->view.dtype)));
  }

 private:
  std::unique_ptr<session::PullStream> stream_;
};

// ---------------------------------------------------------------------------------------------
// Inspecting (safe_open's keys and metadata without loading)

// session::inspection_json's document as text (qload.inspect parses it): one definition of the
// keys for the CLI, C and Python.
std::string inspect(const std::string& source) {
  Result<session::Inspection> r = [&] {
    nb::gil_scoped_release no_gil;
    return session::inspect(source);
  }();
  return session::inspection_json(unwrap(std::move(r))).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Each setting parsed as a load parses it (name, type, bounds, and how the options take it),
// without the environment: a client (the vLLM plugin) refuses a bad setting when it is given,
// not once a server has built its model and started loading.
void check_settings(const std::vector<std::pair<std::string, std::string>>& settings) {
  ResolvedSettings resolved;
  for (const auto& [name, value] : settings)
    if (Status set = resolved.set(name, value, SettingSource::kOption, "settings[" + name + "]"); !set)
      raise(set.error());
  resolved.fit_defaults();
  scheduler::LoadOptions options;
  if (Status applied = options.apply(resolved.values()); !applied) raise(applied.error());
}

std::string resolve(const std::string& source, const std::string& cache_dir) {
  Result<std::string> r = [&] {
    nb::gil_scoped_release no_gil;  // lists the snapshot: a network filesystem can be slow
    return session::resolve_source(source, cache_dir);
  }();
  return unwrap(std::move(r));
}

}  // namespace
}  // namespace qload::python

NB_MODULE(_qload, m) {
  using namespace qload::python;
  m.doc() = "qload's native module; use the `qload` package.";
  register_errors(m);

  nb::class_<qload::distributed::World>(m, "World")
      .def(nb::init<>())
      .def_rw("rank", &qload::distributed::World::rank)
      .def_rw("size", &qload::distributed::World::size)
      .def_rw("local_rank", &qload::distributed::World::local_rank)
      .def_rw("local_size", &qload::distributed::World::local_size)
      .def_rw("master_addr", &qload::distributed::World::master_addr)
      .def_rw("master_port", &qload::distributed::World::master_port)
      .def_rw("token", &qload::distributed::World::token)
      .def_rw("runtime_dir", &qload::distributed::World::runtime_dir);

  nb::class_<LoadArgs>(m, "LoadArgs")
      .def(nb::init<>())
      .def_rw("source", &LoadArgs::source)
      .def_rw("recipe", &LoadArgs::recipe)
      .def_rw("device", &LoadArgs::device)
      .def_rw("placement", &LoadArgs::placement)
      .def_rw("repack", &LoadArgs::repack)
      .def_rw("dtype", &LoadArgs::dtype)
      .def_rw("dequantize", &LoadArgs::dequantize)
      .def_rw("quantize", &LoadArgs::quantize)
      .def_rw("lock", &LoadArgs::lock)
      .def_rw("settings", &LoadArgs::settings)
      .def_rw("tensor_parallel", &LoadArgs::tensor_parallel)
      .def_rw("pipeline_parallel", &LoadArgs::pipeline_parallel)
      .def_rw("data_parallel", &LoadArgs::data_parallel)
      .def_rw("share_reads", &LoadArgs::share_reads)
      .def_rw("world", &LoadArgs::world)
      .def_rw("regions", &LoadArgs::regions);

  nb::class_<Model>(m, "Model")
      .def("infos", &Model::infos)
      .def(
          "arrays", [](nb::handle self) { return nb::cast<Model&>(self).arrays(self); },
          "[(name, array, dtype name)] in model order; the arrays keep the model alive")
      .def(
          "array",
          [](nb::handle self, const std::string& name) {
            const qload::scheduler::DeviceTensor& t = nb::cast<Model&>(self).get(name);
            return nb::make_tuple(make_array(t, self), std::string(qload::dtype_name(t.dtype)));
          },
          nb::arg("name"))
      .def("report", &Model::report)
      .def("quantized", &Model::quantized);

  nb::class_<Stream>(m, "Stream").def("next", &Stream::next).def("report", &Stream::report);

  m.def("load", &load, nb::arg("args"), nb::arg("progress").none() = nb::none());
  m.def(
      "stream", [](const LoadArgs& args) { return new Stream(args); }, nb::arg("args"), nb::rv_policy::take_ownership);
  m.def("inspect", &inspect, nb::arg("source"));
  m.def("check_settings", &check_settings, nb::arg("settings"));
  // The one spec table (session/spec_fields.hpp): [(field, cli, c, python)], for the test that
  // the keywords of qload.load and qload.stream are its Python names.
  m.def("spec_fields", [] {
    std::vector<std::tuple<std::string, std::string, std::string, std::string>> out;
    for (const qload::session::SpecField& f : qload::session::kSpecFields)
      out.emplace_back(std::string(f.field), std::string(f.cli), std::string(f.c), std::string(f.python));
    return out;
  });
  m.def("resolve", &resolve, nb::arg("source"), nb::arg("cache_dir") = "");
  m.def("load_into", &load_into, nb::arg("args"), nb::arg("destinations"), nb::arg("rest"),
        nb::arg("progress").none() = nb::none());
  bind_write(m);
}
