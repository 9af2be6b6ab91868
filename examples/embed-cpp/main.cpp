// Embedding qload from C++ through its stable C ABI: RAII owners for the handles, tensors
// taken as DLPack into a map a server would copy into its parameters, printed as name, dtype
// and a 64-bit FNV-1a of the bytes (the same lines as examples/embed-c).
//
//   c++ -std=c++17 main.cpp $(pkg-config --cflags --libs qload)   or   find_package(qload)
//   ./embed_cpp CHECKPOINT_OR_RECIPE [staging_bytes]
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include <qload/qload.h>

namespace {

struct Free {
  void operator()(qload_options* o) const { qload_options_free(o); }
  void operator()(qload_session* s) const { qload_session_free(s); }
  void operator()(qload_model* m) const { qload_model_free(m); }
  void operator()(DLManagedTensorVersioned* t) const {
    if (t->deleter != nullptr) t->deleter(t);
  }
};
template <typename T>
using Owned = std::unique_ptr<T, Free>;

void check(qload_status status, const char* what) {
  if (status != QLOAD_OK) throw std::runtime_error(std::string(what) + ": " + qload_last_error());
}

std::uint64_t fnv1a(const unsigned char* p, std::size_t n) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: embed_cpp CHECKPOINT_OR_RECIPE [staging_bytes]\n");
    return 2;
  }
  qload_options* raw_options = nullptr;
  check(qload_options_create(&raw_options), "options");
  Owned<qload_options> options(raw_options);
  if (argc > 2) check(qload_options_set(options.get(), "staging_bytes", argv[2]), "staging_bytes");
  qload_session* raw_session = nullptr;
  check(qload_open(argv[1], options.get(), &raw_session), "open");
  Owned<qload_session> session(raw_session);
  qload_model* raw_model = nullptr;
  check(qload_load(session.get(), &raw_model), "load");
  Owned<qload_model> model(raw_model);

  std::map<std::string, std::pair<std::string, Owned<DLManagedTensorVersioned>>> tensors;
  std::size_t count = 0;
  check(qload_model_tensor_count(model.get(), &count), "count");
  for (std::size_t i = 0; i < count; ++i) {
    qload_tensor_info info{};
    check(qload_model_tensor_info(model.get(), i, &info), "info");
    DLManagedTensorVersioned* t = nullptr;
    check(qload_model_tensor_dlpack(model.get(), i, &t), "dlpack");
    tensors.emplace(info.name, std::make_pair(std::string(info.dtype), Owned<DLManagedTensorVersioned>(t)));
  }
  model.reset();  // the DLPack tensors keep the loaded memory alive
  session.reset();
  for (const auto& [name, entry] : tensors) {
    const DLTensor& t = entry.second->dl_tensor;
    if (t.device.device_type != kDLCPU) throw std::runtime_error(name + " is not in host memory");
    std::size_t bytes = (t.dtype.bits * std::size_t{t.dtype.lanes} + 7) / 8;
    for (std::int32_t d = 0; d < t.ndim; ++d) bytes *= static_cast<std::size_t>(t.shape[d]);
    const auto* data = static_cast<const unsigned char*>(t.data) + t.byte_offset;
    std::printf("%s %s %016llx\n", name.c_str(), entry.first.c_str(),
                static_cast<unsigned long long>(fnv1a(data, bytes)));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "embed_cpp: %s\n", e.what());
  return 1;
}
