// The GPU tests compare cudaMemGetInfo before and after a load to show that every device byte
// went back. CUDA 11.7+ loads modules lazily, at a kernel's first launch, and keeps the memory
// they take: a test's first kernel would look like a leak. Eager loading puts that cost into
// context creation, before any "before" figure is taken. It must be set before CUDA
// initialises, so here, at static initialisation (no CUDA call runs before main).
#include <cstdlib>

namespace {
const bool eager_module_loading = [] {
  ::setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
  return true;
}();
}  // namespace
