/* Embedding qload from C: load a checkpoint (or run a recipe), take every tensor as DLPack,
 * and print its name, dtype, shape and a 64-bit FNV-1a of its bytes (what a server would
 * copy into its own parameters instead).
 *
 *   cc main.c $(pkg-config --cflags --libs qload)    or    find_package(qload) -> qload::qload
 *   ./embed_c CHECKPOINT_OR_RECIPE [staging_bytes]
 */
#include <stdio.h>
#include <stdlib.h>

#include <qload/qload.h>

static uint64_t fnv1a(const unsigned char* p, size_t n) {
  uint64_t h = 14695981039346656037ull;
  size_t i;
  for (i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static int fail(const char* what) {
  fprintf(stderr, "embed_c: %s: %s\n", what, qload_last_error());
  return 1;
}

int main(int argc, char** argv) {
  qload_options* options = NULL;
  qload_session* session = NULL;
  qload_model* model = NULL;
  size_t count = 0, i;
  if (argc < 2) {
    fprintf(stderr, "usage: embed_c CHECKPOINT_OR_RECIPE [staging_bytes]\n");
    return 2;
  }
  if (qload_options_create(&options) != QLOAD_OK) return fail("options");
  if (argc > 2 && qload_options_set(options, "staging_bytes", argv[2]) != QLOAD_OK) return fail("staging_bytes");
  if (qload_open(argv[1], options, &session) != QLOAD_OK) return fail("open");
  qload_options_free(options);
  if (qload_load(session, &model) != QLOAD_OK) return fail("load");
  qload_session_free(session); /* the model outlives its session */
  if (qload_model_tensor_count(model, &count) != QLOAD_OK) return fail("count");
  for (i = 0; i < count; ++i) {
    qload_tensor_info info;
    struct DLManagedTensorVersioned* t = NULL;
    size_t bytes;
    int32_t d;
    if (qload_model_tensor_info(model, i, &info) != QLOAD_OK) return fail("info");
    if (qload_model_tensor_dlpack(model, i, &t) != QLOAD_OK) return fail("dlpack");
    if (t->dl_tensor.device.device_type != kDLCPU) {
      fprintf(stderr, "embed_c: %s is on %s; this example reads host memory only\n", info.name, info.device);
      return 1;
    }
    bytes = (t->dl_tensor.dtype.bits * (size_t)t->dl_tensor.dtype.lanes + 7) / 8;
    for (d = 0; d < t->dl_tensor.ndim; ++d) bytes *= (size_t)t->dl_tensor.shape[d];
    printf("%s %s %016llx\n", info.name, info.dtype,
           (unsigned long long)fnv1a((const unsigned char*)t->dl_tensor.data + t->dl_tensor.byte_offset, bytes));
    t->deleter(t); /* a framework's from_dlpack would keep it instead */
  }
  qload_model_free(model);
  return 0;
}
