#include <dlfcn.h>
#include <nccl.h>

#include "qload/runtime/nccl.hpp"

namespace qload {

NcclInfo probe_nccl() {
  NcclInfo info;
  info.compiled = true;
  info.header_version = NCCL_VERSION_CODE;
  void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    info.unavailable_reason = why ? why : "libnccl.so.2 not found";
    return info;
  }
  using GetVersion = ncclResult_t (*)(int*);
  auto get_version = reinterpret_cast<GetVersion>(::dlsym(lib, "ncclGetVersion"));
  if (get_version == nullptr || get_version(&info.library_version) != ncclSuccess)
    info.unavailable_reason = "libnccl.so.2 has no working ncclGetVersion";
  ::dlclose(lib);
  return info;
}

}  // namespace qload
