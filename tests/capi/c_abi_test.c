/* The C ABI from a C99 program: every misuse answered with a status and a message, options
 * and settings, a load read back through DLPack after the model and session are freed
 * (each tensor's XXH3-64 printed for the driving script to compare with the checkpoint's),
 * a streamed load (the digests printed from inside the callback, "stream NAME XXH3") and one
 * stopped by its callback, a pulled one ("pulled NAME XXH3", qload_stream_next), regions, loads into the caller's own
 * memory (qload_load_into), kept-quantized weights described, a Hugging Face model id read from the local cache, and
 * the session's JSON documents (the load report and the inspection, written to the files QLOAD_TEST_REPORT_OUT and
 * QLOAD_TEST_INSPECT_OUT name, which the script compares with the CLI's).
 *
 * Usage: c_abi_test PLAIN_CHECKPOINT [QUANTIZED_CHECKPOINT] */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL /* header-only, as the library itself uses it */
#include <xxhash.h>

#include "qload/qload.h"

static int failures = 0;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

static int error_says(const char* text) {
  return strstr(qload_last_error(), text) != NULL;
}

static void misuse(void) {
  qload_options* options = NULL;
  qload_session* session = NULL;
  qload_model* model = NULL;
  size_t n = 0;
  qload_tensor_info info;
  struct DLManagedTensorVersioned* dl = NULL;

  CHECK(qload_options_create(NULL) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(error_says("NULL"));
  CHECK(qload_open(NULL, NULL, &session) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_open("x", NULL, NULL) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_load(NULL, &model) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_model_tensor_count(NULL, &n) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_model_tensor_info(NULL, 0, &info) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_model_tensor_dlpack(NULL, 0, &dl) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_model_quantized_count(NULL, &n) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_options_set(NULL, "staging_bytes", "1G") == QLOAD_ERR_INVALID_ARGUMENT);
  qload_options_free(NULL);
  qload_session_free(NULL);
  qload_model_free(NULL);

  CHECK(qload_options_create(&options) == QLOAD_OK);
  CHECK(options->struct_size == sizeof(qload_options));
  CHECK(qload_options_set(options, "staging_byte", "1G") == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(error_says("did you mean staging_bytes?"));
  CHECK(qload_options_set(options, "rendezvous_timeout", "soon") == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(error_says("qload_options_set rendezvous_timeout=soon: 'soon' is not a duration"));
  CHECK(qload_options_set(options, "staging_bytes", NULL) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_open("/nonexistent/qload-model", options, &session) == QLOAD_OK); /* nothing read yet */
  CHECK(qload_load(session, &model) == QLOAD_ERR_NOT_FOUND);
  CHECK(error_says("/nonexistent/qload-model"));
  CHECK(model == NULL);
  CHECK(qload_load(session, &model) == QLOAD_ERR_INVALID_ARGUMENT); /* a session loads once */
  qload_session_free(session);
  qload_options_free(options);
}

static void options_size(const char* checkpoint) {
  qload_options* options = NULL;
  qload_session* session = NULL;
  CHECK(qload_options_create(&options) == QLOAD_OK);
  options->struct_size = 8; /* an older, smaller struct than any ABI version had */
  CHECK(qload_open(checkpoint, options, &session) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(error_says("struct_size is 8"));
  CHECK(session == NULL);
  {
    /* A newer caller's struct, with fields this library does not know. */
    unsigned char bigger[sizeof(qload_options) + 16];
    qload_options* newer = (qload_options*)(void*)bigger;
    memset(bigger, 0, sizeof bigger);
    memcpy(bigger, options, sizeof(qload_options));
    newer->struct_size = (uint32_t)sizeof bigger;
    CHECK(qload_open(checkpoint, newer, &session) == QLOAD_OK); /* unknown fields all zero: fine */
    qload_session_free(session);
    session = NULL;
    bigger[sizeof(qload_options) + 3] = 1;
    CHECK(qload_open(checkpoint, newer, &session) == QLOAD_ERR_UNSUPPORTED);
    CHECK(error_says("fields beyond them are set"));
  }
  /* A caller of the first ABI version 1 struct (it ends before `recipe`): fields beyond its
   * struct_size are never read, whatever lies there. */
  options->struct_size = (uint32_t)offsetof(qload_options, recipe);
  options->recipe = "/nonexistent/recipe.lua";
  CHECK(qload_open(checkpoint, options, &session) == QLOAD_OK);
  qload_session_free(session);
  session = NULL;
  options->struct_size = sizeof(qload_options); /* now it is read: the recipe is opened */
  CHECK(qload_open(checkpoint, options, &session) == QLOAD_ERR_NOT_FOUND);
  CHECK(error_says("/nonexistent/recipe.lua"));
  CHECK(session == NULL);
  options->recipe = NULL;
  /* share_reads, read only when struct_size covers it, needs a world of several processes: the
   * error names the field as C spells it. */
  options->share_reads = 1;
  options->struct_size = (uint32_t)offsetof(qload_options, share_reads);
  CHECK(qload_open(checkpoint, options, &session) == QLOAD_OK);
  qload_session_free(session);
  session = NULL;
  options->struct_size = sizeof(qload_options);
  CHECK(qload_open(checkpoint, options, &session) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(error_says("qload_options.share_reads needs a multi-process load"));
  CHECK(session == NULL);
  options->share_reads = 0;
  /* A server's own world, held to the environment's rules. */
  options->world_size = 2;
  options->rank = 2;
  options->master_addr = "127.0.0.1";
  CHECK(qload_open(checkpoint, options, &session) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(error_says("world: rank 2 of 2"));
  options->rank = 1;
  options->world_token = "short";
  CHECK(qload_open(checkpoint, options, &session) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(error_says("the token is 5 bytes; at least 16"));
  /* A server's own NCCL communicators: one per device of this process, in a world. */
  {
    void* comms[2] = {NULL, NULL};
    options->world_token = "a server's own secret, 32 bytes!";
    options->data_parallel = 2;
    options->nccl_comms = comms;
    options->nccl_comm_count = 2;
    CHECK(qload_open(checkpoint, options, &session) == QLOAD_ERR_INVALID_ARGUMENT);
    CHECK(error_says("2 NCCL communicators handed in for 1 devices (cpu)"));
    options->world_size = 0;
    CHECK(qload_open(checkpoint, options, &session) == QLOAD_ERR_INVALID_ARGUMENT);
    CHECK(error_says("NCCL communicators were handed in for a single-process load"));
    options->nccl_comms = NULL;
    CHECK(qload_open(checkpoint, options, &session) == QLOAD_ERR_INVALID_ARGUMENT);
    CHECK(error_says("nccl_comms is NULL with nccl_comm_count 2"));
    options->nccl_comm_count = 0;
    options->data_parallel = 0;
    CHECK(session == NULL);
  }
  options->world_size = 0; /* back to the environment's world: one process here */
  options->world_token = NULL;
  options->devices = "cuda:99";
  CHECK(qload_open(checkpoint, options, &session) == QLOAD_OK);
  qload_session_free(session);
  qload_options_free(options);
}

/* Loads `checkpoint`, exports every tensor, frees the model and session, then prints
 * "name xxh3" for each from the DLPack tensors alone. */
static void load_and_export(const char* checkpoint) {
  qload_options* options = NULL;
  qload_session* session = NULL;
  qload_model* model = NULL;
  size_t count = 0, i = 0;
  struct DLManagedTensorVersioned** tensors = NULL;
  char** names = NULL;

  CHECK(qload_options_create(&options) == QLOAD_OK);
  CHECK(qload_options_set(options, "staging_bytes", "4MiB") == QLOAD_OK);
  CHECK(qload_options_set(options, "slot_bytes", "1MiB") == QLOAD_OK);
  CHECK(qload_options_set(options, "io_engine", "pread") == QLOAD_OK);
  if (qload_open(checkpoint, options, &session) != QLOAD_OK || qload_load(session, &model) != QLOAD_OK) {
    fprintf(stderr, "FAIL: load %s: %s\n", checkpoint, qload_last_error());
    exit(1);
  }
  qload_options_free(options);
  CHECK(qload_model_tensor_count(model, &count) == QLOAD_OK);
  CHECK(count > 0);
  tensors = calloc(count, sizeof *tensors);
  names = calloc(count, sizeof *names);
  for (i = 0; i < count; ++i) {
    qload_tensor_info info;
    int64_t elements = 1;
    int32_t d = 0;
    CHECK(qload_model_tensor_info(model, i, &info) == QLOAD_OK);
    CHECK(strcmp(info.device, "cpu") == 0);
    CHECK(info.read_only == 0);
    names[i] = malloc(strlen(info.name) + 1);
    strcpy(names[i], info.name);
    CHECK(qload_model_tensor_dlpack(model, i, &tensors[i]) == QLOAD_OK);
    CHECK(tensors[i]->version.major == DLPACK_MAJOR_VERSION);
    CHECK(tensors[i]->dl_tensor.device.device_type == kDLCPU);
    CHECK(tensors[i]->dl_tensor.ndim == info.ndim);
    CHECK(((uintptr_t)tensors[i]->dl_tensor.data & 255u) == 0);
    CHECK(tensors[i]->dl_tensor.strides == NULL);
    CHECK((tensors[i]->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0);
    for (d = 0; d < info.ndim; ++d) {
      CHECK(tensors[i]->dl_tensor.shape[d] == info.shape[d]);
      elements *= info.shape[d];
    }
    CHECK((uint64_t)elements * ((tensors[i]->dl_tensor.dtype.bits + 7u) / 8u) == info.nbytes);
    if (strcmp(info.dtype, "BF16") == 0) CHECK(tensors[i]->dl_tensor.dtype.code == kDLBfloat);
  }
  CHECK(qload_model_tensor_info(model, count, NULL) == QLOAD_ERR_INVALID_ARGUMENT);
  {
    qload_tensor_info info;
    CHECK(qload_model_tensor_info(model, count, &info) == QLOAD_ERR_INVALID_ARGUMENT);
    CHECK(error_says("index"));
  }
  /* The exported tensors own the memory now. */
  qload_model_free(model);
  qload_session_free(session);
  for (i = 0; i < count; ++i) {
    const DLTensor* t = &tensors[i]->dl_tensor;
    size_t bytes = (t->dtype.bits + 7u) / 8u;
    int32_t d = 0;
    for (d = 0; d < t->ndim; ++d) bytes *= (size_t)t->shape[d];
    printf("%s %016llx\n", names[i], (unsigned long long)XXH3_64bits((const char*)t->data + t->byte_offset, bytes));
    tensors[i]->deleter(tensors[i]);
    free(names[i]);
  }
  free(tensors);
  free(names);
}

/* What the streaming callback saw. */
struct streamed {
  size_t calls;
  size_t stop_after; /* 0: never stop */
  size_t seen[4096]; /* calls per index */
  int bad_view;
};

static int on_tensor(void* user_data, size_t index, const qload_tensor_info* info, const DLTensor* tensor) {
  struct streamed* s = user_data;
  size_t bytes = 0;
  int32_t d = 0;
  ++s->calls;
  if (index < 4096) ++s->seen[index];
  if (tensor == NULL || tensor->ndim != info->ndim || tensor->device.device_type != kDLCPU) {
    s->bad_view = 1;
    return 1;
  }
  bytes = (tensor->dtype.bits + 7u) / 8u;
  for (d = 0; d < tensor->ndim; ++d) bytes *= (size_t)tensor->shape[d];
  if (bytes != info->nbytes) s->bad_view = 1;
  /* Complete now: these bytes are compared with the checkpoint's by the driving script. */
  if (s->stop_after == 0)
    printf("stream %s %016llx\n", info->name,
           (unsigned long long)XXH3_64bits((const char*)tensor->data + tensor->byte_offset, bytes));
  return s->stop_after != 0 && s->calls >= s->stop_after;
}

/* Streams `checkpoint` without keeping the model (each tensor's digest printed from inside
 * the callback), then once more stopping after two tensors. */
static void stream(const char* checkpoint) {
  static struct streamed all, stopped;
  qload_session* session = NULL;
  qload_model* model = (qload_model*)&all; /* must come back NULL */
  size_t i = 0;
  CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
  CHECK(qload_load_stream(session, NULL, NULL, NULL) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_load_stream(NULL, on_tensor, &all, NULL) == QLOAD_ERR_INVALID_ARGUMENT);
  if (qload_load_stream(session, on_tensor, &all, NULL) != QLOAD_OK) {
    fprintf(stderr, "FAIL: stream %s: %s\n", checkpoint, qload_last_error());
    exit(1);
  }
  qload_session_free(session);
  CHECK(all.calls > 2 && all.calls < 4096);
  CHECK(!all.bad_view);
  for (i = 0; i < all.calls && i < 4096; ++i) CHECK(all.seen[i] == 1);

  stopped.stop_after = 2;
  CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
  CHECK(qload_load_stream(session, on_tensor, &stopped, &model) == QLOAD_ERR_CANCELLED);
  CHECK(error_says("tensor callback returned 1"));
  CHECK(stopped.calls == 2); /* not called again once it said stop */
  CHECK(model == NULL);
  qload_session_free(session);
}

/* Pulls `checkpoint` tensor by tensor (qload_stream_next), each one's digest printed as
 * "pulled NAME XXH3" for the driving script; then the misuses, a stream dropped part way, and a
 * load that fails part way (the checkpoint changed after its lock): its error comes after the
 * tensors it handed over. */
static void pulled(const char* checkpoint) {
  qload_session* session = NULL;
  qload_stream* stream = NULL;
  qload_tensor_info info;
  struct DLManagedTensorVersioned* tensor = NULL;
  const char* report = NULL;
  size_t count = 0, whole = 0;
  qload_status status = QLOAD_OK;
  CHECK(qload_stream_open(NULL, &stream) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
  CHECK(qload_stream_open(session, NULL) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_stream_open(session, &stream) == QLOAD_OK);
  CHECK(qload_stream_open(session, &stream) == QLOAD_ERR_INVALID_ARGUMENT); /* it loads once */
  qload_session_free(session);
  CHECK(qload_stream_next(NULL, &info, &tensor) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_stream_next(stream, NULL, &tensor) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_stream_report_json(stream, &report) == QLOAD_ERR_INVALID_ARGUMENT); /* not ended yet */
  for (;;) {
    CHECK(qload_stream_next(stream, &info, &tensor) == QLOAD_OK);
    if (info.name == NULL) break;
    CHECK(tensor != NULL && tensor->dl_tensor.device.device_type == kDLCPU);
    if (tensor != NULL) {
      printf("pulled %s %016llx\n", info.name,
             (unsigned long long)XXH3_64bits((const char*)tensor->dl_tensor.data + tensor->dl_tensor.byte_offset,
                                             (size_t)info.nbytes));
      tensor->deleter(tensor);
    }
    if (++count > 4096) break;
  }
  CHECK(count > 2 && tensor == NULL);
  whole = count;
  CHECK(qload_stream_next(stream, &info, &tensor) == QLOAD_OK && info.name == NULL); /* still the end */
  CHECK(qload_stream_report_json(stream, &report) == QLOAD_OK);
  CHECK(report != NULL && strstr(report, "\"schema\":\"qload.load/2\"") != NULL);
  qload_stream_free(stream);
  qload_stream_free(NULL);

  /* Dropped after one tensor: the load is cancelled, and the tensor taken stays valid. */
  CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
  CHECK(qload_stream_open(session, &stream) == QLOAD_OK);
  qload_session_free(session);
  CHECK(qload_stream_next(stream, &info, &tensor) == QLOAD_OK && info.name != NULL && tensor != NULL);
  qload_stream_free(stream);
  if (tensor != NULL) {
    CHECK(XXH3_64bits((const char*)tensor->dl_tensor.data + tensor->dl_tensor.byte_offset, (size_t)info.nbytes) ||
          1); /* readable after the free (AddressSanitizer would say otherwise) */
    tensor->deleter(tensor);
  }

  if (getenv("QLOAD_TEST_LOCK") != NULL && getenv("QLOAD_TEST_CHANGED") != NULL) {
    qload_options* options = NULL;
    CHECK(qload_options_create(&options) == QLOAD_OK);
    options->lock = getenv("QLOAD_TEST_LOCK");
    CHECK(qload_open(getenv("QLOAD_TEST_CHANGED"), options, &session) == QLOAD_OK);
    qload_options_free(options);
    CHECK(qload_stream_open(session, &stream) == QLOAD_OK);
    qload_session_free(session);
    count = 0;
    while ((status = qload_stream_next(stream, &info, &tensor)) == QLOAD_OK && info.name != NULL) {
      if (tensor != NULL) tensor->deleter(tensor);
      ++count;
    }
    CHECK(status == QLOAD_ERR_CHECKSUM);
    CHECK(count < whole); /* those that completed before the failure (maybe none), never all */
    CHECK(qload_stream_report_json(stream, &report) == QLOAD_ERR_INVALID_ARGUMENT);
    qload_stream_free(stream);
  }
}

static void quantized(const char* checkpoint) {
  qload_session* session = NULL;
  qload_model* model = NULL;
  size_t count = 0, tensors = 0, i = 0, p = 0;
  CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
  if (qload_load(session, &model) != QLOAD_OK) {
    fprintf(stderr, "FAIL: load %s: %s\n", checkpoint, qload_last_error());
    exit(1);
  }
  CHECK(qload_model_quantized_count(model, &count) == QLOAD_OK);
  CHECK(qload_model_tensor_count(model, &tensors) == QLOAD_OK);
  CHECK(count > 0);
  for (i = 0; i < count; ++i) {
    qload_quantized_info q;
    CHECK(qload_model_quantized_info(model, i, &q) == QLOAD_OK);
    CHECK(q.part_count >= 2);
    CHECK(q.experts == 0); /* the synthesized checkpoint's weights are 2-D */
    for (p = 0; p < q.part_count; ++p) {
      qload_tensor_info part;
      CHECK(q.part_tensors[p] < tensors);
      CHECK(qload_model_tensor_info(model, q.part_tensors[p], &part) == QLOAD_OK);
      /* A part is the tensor named "<prefix>.<role>". */
      CHECK(strncmp(part.name, q.name, strlen(q.name) - strlen("weight")) == 0);
      CHECK(strstr(part.name, q.part_roles[p]) != NULL);
    }
    if (i == 0)
      fprintf(stderr, "quantized: %s %s %u bits, group %llu, %zu parts\n", q.name, q.scheme, q.bits,
              (unsigned long long)q.group_size, q.part_count);
  }
  qload_model_free(model);
  qload_session_free(session);
}

/* Index of tensor `name` in `model` (a failed check when it has none), its info in `info`. */
static size_t find_tensor(const qload_model* model, const char* name, qload_tensor_info* info) {
  size_t count = 0, i = 0;
  CHECK(qload_model_tensor_count(model, &count) == QLOAD_OK);
  for (i = 0; i < count; ++i) {
    CHECK(qload_model_tensor_info(model, i, info) == QLOAD_OK);
    if (strcmp(info->name, name) == 0) return i;
  }
  fprintf(stderr, "FAIL: no tensor %s\n", name);
  exit(1);
}

static qload_model* load_with_regions(const char* checkpoint, int regions) {
  qload_options* options = NULL;
  qload_session* session = NULL;
  qload_model* model = NULL;
  CHECK(qload_options_create(&options) == QLOAD_OK);
  CHECK(qload_options_set(options, "io_engine", "pread") == QLOAD_OK);
  if (regions) {
    CHECK(qload_options_set_region(options, "model.layers.0.self_attn.q_proj.weight", 0, 99, 12) ==
          QLOAD_ERR_INVALID_ARGUMENT);
    CHECK(error_says("begin 99 is after end 12"));
    CHECK(qload_options_set_region(options, "model.layers.0.self_attn.q_proj.weight", 0, 0, 8) == QLOAD_OK);
    /* set again: replaces */
    CHECK(qload_options_set_region(options, "model.layers.0.self_attn.q_proj.weight", 0, 32, 96) == QLOAD_OK);
    CHECK(qload_options_set_region(options, "model.layers.0.self_attn.o_proj.weight", 1, 16, 48) == QLOAD_OK);
    CHECK(qload_options_set_region(options, "model.layers.1.mlp.down_proj.weight", 1, 7, 7) == QLOAD_OK);
  }
  if (qload_open(checkpoint, options, &session) != QLOAD_OK || qload_load(session, &model) != QLOAD_OK) {
    fprintf(stderr, "FAIL: load %s: %s\n", checkpoint, qload_last_error());
    exit(1);
  }
  qload_options_free(options);
  qload_session_free(session);
  return model;
}

/* Regions: the rows and columns asked for hold the whole load's elements; an empty region is
 * an empty tensor; a region of a tensor the checkpoint lacks is refused naming it. */
static void regions(const char* checkpoint) {
  qload_model* whole = load_with_regions(checkpoint, 0);
  qload_model* part = load_with_regions(checkpoint, 1);
  qload_tensor_info w, p;
  const char* q = "model.layers.0.self_attn.q_proj.weight";
  const char* o = "model.layers.0.self_attn.o_proj.weight";
  struct DLManagedTensorVersioned *wt = NULL, *pt = NULL;
  size_t row = 0, r = 0, elem = 0;
  find_tensor(whole, q, &w);
  find_tensor(part, q, &p);
  CHECK(p.ndim == 2 && p.shape[0] == 64 && p.shape[1] == w.shape[1]);
  CHECK(qload_model_tensor_dlpack(whole, find_tensor(whole, q, &w), &wt) == QLOAD_OK);
  CHECK(qload_model_tensor_dlpack(part, find_tensor(part, q, &p), &pt) == QLOAD_OK);
  elem = wt->dl_tensor.dtype.bits / 8u;
  row = (size_t)w.shape[1] * elem;
  CHECK(memcmp((const char*)pt->dl_tensor.data + pt->dl_tensor.byte_offset,
               (const char*)wt->dl_tensor.data + wt->dl_tensor.byte_offset + 32 * row, 64 * row) == 0);
  wt->deleter(wt);
  pt->deleter(pt);
  CHECK(qload_model_tensor_dlpack(whole, find_tensor(whole, o, &w), &wt) == QLOAD_OK);
  CHECK(qload_model_tensor_dlpack(part, find_tensor(part, o, &p), &pt) == QLOAD_OK);
  CHECK(p.shape[0] == w.shape[0] && p.shape[1] == 32);
  row = (size_t)w.shape[1] * elem;
  for (r = 0; r < (size_t)w.shape[0]; ++r)
    CHECK(memcmp((const char*)pt->dl_tensor.data + pt->dl_tensor.byte_offset + r * 32 * elem,
                 (const char*)wt->dl_tensor.data + wt->dl_tensor.byte_offset + r * row + 16 * elem, 32 * elem) == 0);
  wt->deleter(wt);
  pt->deleter(pt);
  find_tensor(part, "model.layers.1.mlp.down_proj.weight", &p);
  CHECK(p.ndim == 2 && p.shape[1] == 0 && p.nbytes == 0);
  qload_model_free(whole);
  qload_model_free(part);
  {
    qload_options* options = NULL;
    qload_session* session = NULL;
    qload_model* model = NULL;
    CHECK(qload_options_create(&options) == QLOAD_OK);
    CHECK(qload_options_set_region(NULL, q, 0, 0, 1) == QLOAD_ERR_INVALID_ARGUMENT);
    CHECK(qload_options_set_region(options, NULL, 0, 0, 1) == QLOAD_ERR_INVALID_ARGUMENT);
    CHECK(qload_options_set_region(options, "model.no_such.weight", 0, 0, 1) == QLOAD_OK);
    CHECK(qload_open(checkpoint, options, &session) == QLOAD_OK);
    CHECK(qload_load(session, &model) == QLOAD_ERR_NOT_FOUND);
    CHECK(error_says("model.no_such.weight"));
    CHECK(model == NULL);
    qload_session_free(session);
    qload_options_free(options);
  }
}

/* A destination for tensor `name` of `info`'s dtype and shape, into `memory`. */
static qload_destination destination_for(const char* name, const qload_tensor_info* info, DLDataType dtype,
                                         void* memory) {
  qload_destination d;
  memset(&d, 0, sizeof d);
  d.tensor = name;
  d.target.data = memory;
  d.target.device.device_type = kDLCPU;
  d.target.ndim = info->ndim;
  d.target.dtype = dtype;
  d.target.shape = (int64_t*)info->shape;
  d.region_dim = -1;
  return d;
}

/* qload_load_into: every tensor straight into the caller's own allocations (guard bytes around
 * each untouched), equal to a plain load's bytes; a region and the rest; bad destinations
 * refused before anything is written, naming the tensor. */
static void load_into(const char* checkpoint) {
  enum { kGuard = 64 };
  qload_model* whole = load_with_regions(checkpoint, 0);
  size_t count = 0, i = 0, j = 0;
  qload_destination* destinations = NULL;
  unsigned char** memory = NULL;
  qload_tensor_info* infos = NULL;
  qload_session* session = NULL;
  qload_model* rest = NULL;
  DLDataType bf16 = {kDLBfloat, 16, 1}, i32 = {kDLInt, 32, 1};
  CHECK(qload_model_tensor_count(whole, &count) == QLOAD_OK);
  destinations = calloc(count, sizeof *destinations);
  memory = calloc(count, sizeof *memory);
  infos = calloc(count, sizeof *infos);
  for (i = 0; i < count; ++i) {
    struct DLManagedTensorVersioned* t = NULL;
    CHECK(qload_model_tensor_info(whole, i, &infos[i]) == QLOAD_OK);
    CHECK(qload_model_tensor_dlpack(whole, i, &t) == QLOAD_OK);
    memory[i] = malloc(infos[i].nbytes + 2 * kGuard);
    memset(memory[i], 0xAB, infos[i].nbytes + 2 * kGuard);
    destinations[i] = destination_for(infos[i].name, &infos[i], t->dl_tensor.dtype, memory[i] + kGuard);
    t->deleter(t);
  }
  CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
  CHECK(qload_load_into(session, destinations, count, NULL) == QLOAD_OK);
  CHECK(qload_load_into(session, destinations, count, NULL) == QLOAD_ERR_INVALID_ARGUMENT); /* loads once */
  qload_session_free(session);
  for (i = 0; i < count; ++i) {
    struct DLManagedTensorVersioned* t = NULL;
    CHECK(qload_model_tensor_dlpack(whole, i, &t) == QLOAD_OK);
    CHECK(memcmp(memory[i] + kGuard, (const char*)t->dl_tensor.data + t->dl_tensor.byte_offset, infos[i].nbytes) == 0);
    for (j = 0; j < kGuard; ++j) CHECK(memory[i][j] == 0xAB && memory[i][kGuard + infos[i].nbytes + j] == 0xAB);
    t->deleter(t);
  }
  /* One destination with a region (rows 32..96 of q_proj); the rest in qload's own memory. */
  {
    const char* q = "model.layers.0.self_attn.q_proj.weight";
    qload_tensor_info qi, got;
    const size_t qi_index = find_tensor(whole, q, &qi);
    int64_t rows[2];
    size_t row_bytes = 0;
    qload_destination d;
    unsigned char* part = NULL;
    struct DLManagedTensorVersioned* t = NULL;
    rows[0] = 64;
    rows[1] = qi.shape[1];
    row_bytes = (size_t)qi.shape[1] * 2;
    part = malloc(64 * row_bytes);
    d = destination_for(q, &qi, bf16, part);
    d.target.shape = rows;
    d.region_dim = 0;
    d.region_begin = 32;
    d.region_end = 96;
    CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
    CHECK(qload_load_into(session, &d, 1, &rest) == QLOAD_OK);
    qload_session_free(session);
    CHECK(qload_model_tensor_dlpack(whole, qi_index, &t) == QLOAD_OK);
    CHECK(memcmp(part, (const char*)t->dl_tensor.data + t->dl_tensor.byte_offset + 32 * row_bytes, 64 * row_bytes) ==
          0);
    t->deleter(t);
    CHECK(rest != NULL);
    CHECK(qload_model_tensor_count(rest, &i) == QLOAD_OK && i == count);
    /* Row ranges: rows 1, then 0 of q_proj. */
    {
      const uint64_t ranges[4] = {1, 2, 0, 1};
      int64_t two[2];
      unsigned char* swapped = malloc(2 * row_bytes);
      const unsigned char* stored = NULL;
      two[0] = 2;
      two[1] = qi.shape[1];
      d = destination_for(q, &qi, bf16, swapped);
      d.target.shape = two;
      d.row_ranges = ranges;
      d.row_range_count = 2;
      CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
      CHECK(qload_load_into(session, &d, 1, NULL) == QLOAD_OK);
      qload_session_free(session);
      CHECK(qload_model_tensor_dlpack(whole, qi_index, &t) == QLOAD_OK);
      stored = (const unsigned char*)t->dl_tensor.data + t->dl_tensor.byte_offset;
      CHECK(memcmp(swapped, stored + row_bytes, row_bytes) == 0 && memcmp(swapped + row_bytes, stored, row_bytes) == 0);
      t->deleter(t);
      free(swapped);
    }
    find_tensor(rest, q, &got);
    CHECK(got.shape[0] == 64);
    qload_model_free(rest);
    free(part);
    /* Columns 8..24 of q_proj into columns 4..20 of a wider caller tensor (dimension 0's stride
     * larger than compact, as a projection's part of a fused parameter): each row's 16 columns
     * land there, the columns around them keep their bytes, and the rest's DLPack tensor for it
     * carries the target's strides. */
    {
      const int64_t width = 24, rows_q = qi.shape[0];
      int64_t shape[2], strides[2];
      unsigned char* wide = malloc((size_t)(rows_q * width * 2));
      const unsigned char* stored = NULL;
      qload_tensor_info info;
      size_t index = 0;
      int64_t r = 0;
      memset(wide, 0xAB, (size_t)(rows_q * width * 2));
      shape[0] = rows_q;
      shape[1] = 16;
      strides[0] = width;
      strides[1] = 1;
      d = destination_for(q, &qi, bf16, wide + 4 * 2);
      d.target.shape = shape;
      d.target.strides = strides;
      d.region_dim = 1;
      d.region_begin = 8;
      d.region_end = 24;
      CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
      CHECK(qload_load_into(session, &d, 1, &rest) == QLOAD_OK);
      qload_session_free(session);
      CHECK(qload_model_tensor_dlpack(whole, qi_index, &t) == QLOAD_OK);
      stored = (const unsigned char*)t->dl_tensor.data + t->dl_tensor.byte_offset;
      for (r = 0; r < rows_q; ++r) {
        const unsigned char* row = wide + r * width * 2;
        CHECK(memcmp(row + 4 * 2, stored + (r * qi.shape[1] + 8) * 2, 16 * 2) == 0);
        for (j = 0; j < 4 * 2; ++j) CHECK(row[j] == 0xAB && row[(4 + 16) * 2 + j] == 0xAB);
      }
      t->deleter(t);
      index = find_tensor(rest, q, &info);
      CHECK(qload_model_tensor_dlpack(rest, index, &t) == QLOAD_OK);
      CHECK(t->dl_tensor.strides != NULL && t->dl_tensor.strides[0] == width && t->dl_tensor.strides[1] == 1);
      CHECK((const unsigned char*)t->dl_tensor.data + t->dl_tensor.byte_offset == wide + 4 * 2);
      t->deleter(t);
      qload_model_free(rest);
      /* A stride that would make rows overlap is refused, naming the tensor. */
      strides[0] = 15;
      CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
      CHECK(qload_load_into(session, &d, 1, NULL) == QLOAD_ERR_UNSUPPORTED);
      CHECK(error_says(q) && error_says("overlap"));
      qload_session_free(session);
      free(wide);
    }
  }
  /* Refused before anything is read: the wrong dtype, shape, a strided target, an unknown name. */
  {
    int64_t strides[2];
    memset(memory[0] + kGuard, 0x5A, infos[0].nbytes);
    destinations[0].target.dtype = i32;
    CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
    CHECK(qload_load_into(session, destinations, count, NULL) == QLOAD_ERR_INVALID_ARGUMENT);
    CHECK(error_says(infos[0].name));
    qload_session_free(session);
    for (j = 0; j < infos[0].nbytes; ++j) CHECK(memory[0][kGuard + j] == 0x5A); /* nothing written */
    destinations[0].target.dtype = bf16;
    destinations[0].target.shape = (int64_t*)infos[1].shape;
    destinations[0].target.ndim = infos[1].ndim;
    CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
    CHECK(qload_load_into(session, destinations, 1, NULL) == QLOAD_ERR_INVALID_ARGUMENT);
    CHECK(error_says("shape"));
    qload_session_free(session);
    destinations[0].target.shape = (int64_t*)infos[0].shape;
    destinations[0].target.ndim = infos[0].ndim;
    if (infos[0].ndim == 2) {
      strides[0] = 1;
      strides[1] = infos[0].shape[0];
      destinations[0].target.strides = strides;
      CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
      CHECK(qload_load_into(session, destinations, 1, NULL) == QLOAD_ERR_UNSUPPORTED);
      CHECK(error_says("contiguous"));
      qload_session_free(session);
      destinations[0].target.strides = NULL;
    }
    destinations[0].tensor = "model.no_such.weight";
    CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
    CHECK(qload_load_into(session, destinations, 1, NULL) == QLOAD_ERR_NOT_FOUND);
    CHECK(error_says("model.no_such.weight"));
    qload_session_free(session);
    CHECK(qload_load_into(NULL, destinations, 1, NULL) == QLOAD_ERR_INVALID_ARGUMENT);
    CHECK(qload_open(checkpoint, NULL, &session) == QLOAD_OK);
    CHECK(qload_load_into(session, NULL, 1, NULL) == QLOAD_ERR_INVALID_ARGUMENT);
    qload_session_free(session);
  }
  /* A load that fails part way (a checkpoint changed after its lock: the last tensor's digest
   * differs) says how many destinations it had completely written, and names them. */
  if (getenv("QLOAD_TEST_LOCK") != NULL && getenv("QLOAD_TEST_CHANGED") != NULL) {
    qload_options* options = NULL;
    destinations[0] = destination_for(infos[0].name, &infos[0], bf16, memory[0] + kGuard); /* as before the refusals */
    CHECK(qload_options_create(&options) == QLOAD_OK);
    options->lock = getenv("QLOAD_TEST_LOCK");
    CHECK(qload_open(getenv("QLOAD_TEST_CHANGED"), options, &session) == QLOAD_OK);
    qload_options_free(options);
    CHECK(qload_load_into(session, destinations, count, NULL) == QLOAD_ERR_CHECKSUM);
    CHECK(error_says("destinations completely written before the failure: "));
    { /* how many depends on what had finished when the last tensor failed; never all of them */
      char all[64];
      snprintf(all, sizeof all, ": %lu of %lu", (unsigned long)count, (unsigned long)count);
      CHECK(error_says(" of ") && !error_says(all));
    }
    qload_session_free(session);
  } else {
    fprintf(stderr, "FAIL: QLOAD_TEST_LOCK and QLOAD_TEST_CHANGED are not set (c_abi.sh sets them)\n");
    ++failures;
  }
  for (i = 0; i < count; ++i) free(memory[i]);
  free(memory);
  free(destinations);
  free(infos);
  qload_model_free(whole);
}

static qload_model* load_source(const char* source) {
  qload_session* session = NULL;
  qload_model* model = NULL;
  if (qload_open(source, NULL, &session) != QLOAD_OK || qload_load(session, &model) != QLOAD_OK) {
    fprintf(stderr, "FAIL: load %s: %s\n", source, qload_last_error());
    ++failures;
    model = NULL;
  }
  qload_session_free(session);
  return model;
}

/* A Hugging Face model id (QLOAD_TEST_HUB_ID) is read from the cache the driving script laid
 * out in HF_HUB_CACHE from the plain checkpoint: the same tensors, byte for byte; an id the
 * cache lacks is QLOAD_ERR_NOT_FOUND naming the folder looked for. */
static void hub_id(const char* checkpoint) {
  const char* id = getenv("QLOAD_TEST_HUB_ID");
  qload_model* by_id = NULL;
  qload_model* by_path = NULL;
  qload_session* session = NULL;
  qload_model* none = NULL;
  size_t count = 0, want = 0, i = 0;
  if (id == NULL) return;
  by_id = load_source(id);
  by_path = load_source(checkpoint);
  if (by_id == NULL || by_path == NULL) return;
  CHECK(qload_model_tensor_count(by_id, &count) == QLOAD_OK);
  CHECK(qload_model_tensor_count(by_path, &want) == QLOAD_OK);
  CHECK(count == want && count > 0);
  for (i = 0; i < count && i < want; ++i) {
    qload_tensor_info a, b;
    struct DLManagedTensorVersioned* x = NULL;
    struct DLManagedTensorVersioned* y = NULL;
    CHECK(qload_model_tensor_info(by_id, i, &a) == QLOAD_OK);
    CHECK(qload_model_tensor_info(by_path, i, &b) == QLOAD_OK);
    CHECK(strcmp(a.name, b.name) == 0 && a.nbytes == b.nbytes);
    CHECK(qload_model_tensor_dlpack(by_id, i, &x) == QLOAD_OK);
    CHECK(qload_model_tensor_dlpack(by_path, i, &y) == QLOAD_OK);
    if (x != NULL && y != NULL && a.nbytes == b.nbytes)
      CHECK(memcmp(x->dl_tensor.data, y->dl_tensor.data, (size_t)a.nbytes) == 0);
    if (x != NULL) x->deleter(x);
    if (y != NULL) y->deleter(y);
  }
  qload_model_free(by_id);
  qload_model_free(by_path);
  CHECK(qload_open("org/absent-model", NULL, &session) == QLOAD_OK);
  CHECK(qload_load(session, &none) == QLOAD_ERR_NOT_FOUND);
  CHECK(error_says("models--org--absent-model"));
  qload_session_free(session);
}

/* Writes `text` to the file the variable `out` names (nothing when it is unset). */
static void write_to(const char* out, const char* text) {
  const char* path = getenv(out);
  FILE* f = NULL;
  if (path == NULL) return;
  f = fopen(path, "w");
  CHECK(f != NULL);
  if (f == NULL) return;
  CHECK(fputs(text, f) >= 0);
  fclose(f);
}

/* The load report of `plain` and the inspection of `inspected`, as the session's JSON documents. */
static void documents(const char* plain, const char* inspected) {
  qload_model* model = load_source(plain);
  const char* report = NULL;
  char* inspection = NULL;
  CHECK(qload_model_report_json(NULL, &report) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_inspect_json(NULL, &inspection) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_inspect_json(plain, NULL) == QLOAD_ERR_INVALID_ARGUMENT);
  CHECK(qload_inspect_json("/nonexistent/checkpoint", &inspection) == QLOAD_ERR_NOT_FOUND);
  CHECK(inspection == NULL);
  qload_string_free(NULL);
  if (model != NULL) {
    CHECK(qload_model_report_json(model, &report) == QLOAD_OK);
    CHECK(report != NULL && strstr(report, "\"schema\":\"qload.load/2\"") != NULL);
    if (report != NULL) write_to("QLOAD_TEST_REPORT_OUT", report);
    qload_model_free(model);
  }
  CHECK(qload_inspect_json(inspected, &inspection) == QLOAD_OK);
  CHECK(inspection != NULL && strstr(inspection, "\"schema\":\"qload.inspect/2\"") != NULL);
  if (inspection != NULL) write_to("QLOAD_TEST_INSPECT_OUT", inspection);
  qload_string_free(inspection);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: c_abi_test PLAIN_CHECKPOINT [QUANTIZED_CHECKPOINT]\n");
    return 2;
  }
  CHECK(qload_abi_version() == QLOAD_ABI_VERSION);
  CHECK(strlen(qload_version()) > 0);
  misuse();
  options_size(argv[1]);
  load_and_export(argv[1]);
  stream(argv[1]);
  pulled(argv[1]);
  regions(argv[1]);
  load_into(argv[1]);
  hub_id(argv[1]);
  if (argc > 2) quantized(argv[2]);
  documents(argv[1], argc > 2 ? argv[2] : argv[1]);
  if (failures > 0) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}
