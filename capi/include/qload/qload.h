/* qload's C ABI: load a checkpoint (or run a recipe) and take its tensors as DLPack.
 *
 * Plain C99 over the session layer, for servers written in C, C++, Rust, or Python through
 * ctypes/cffi. Rules (docs/embedding.md):
 *   - Every function returns a qload_status; QLOAD_OK is 0. On failure,
 *     qload_last_error() holds the full message (file, tensor, byte offset) for this thread
 *     until its next qload call.
 *   - Handles are opaque. NULL handles and NULL out-pointers are refused with
 *     QLOAD_ERR_INVALID_ARGUMENT, never a crash.
 *   - Ownership: what qload_*_create / qload_open / qload_load give you, you free with the
 *     matching qload_*_free. A DLPack tensor from qload_model_tensor_dlpack keeps the loaded
 *     memory alive after qload_model_free and qload_session_free, until its deleter runs.
 *   - Strings and shapes from qload_model_tensor_info live as long as the model handle.
 *   - Thread-safety: distinct handles may be used from distinct threads; one handle from
 *     one thread at a time. Deleters may run on any thread.
 *   - Stability: only qload_* symbols are exported. Within one QLOAD_ABI_VERSION, functions
 *     are only added and structs only grow at their end (struct_size says which fields a
 *     caller knows).
 */
#ifndef QLOAD_QLOAD_H_
#define QLOAD_QLOAD_H_

#include <stddef.h>
#include <stdint.h>

#include "dlpack/dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QLOAD_ABI_VERSION 1

#if defined(__GNUC__)
#define QLOAD_API __attribute__((visibility("default")))
#else
#define QLOAD_API
#endif

typedef enum qload_status {
  QLOAD_OK = 0,
  QLOAD_ERR_INVALID_ARGUMENT = 1, /* a NULL handle, a bad option or setting, a bad index */
  QLOAD_ERR_NOT_FOUND = 2,        /* a file or tensor that does not exist */
  QLOAD_ERR_PERMISSION = 3,
  QLOAD_ERR_IO = 4,
  QLOAD_ERR_CORRUPT = 5,  /* a malformed or truncated file */
  QLOAD_ERR_CHECKSUM = 6, /* bytes differ from their lock or digest */
  QLOAD_ERR_UNSUPPORTED = 7,
  QLOAD_ERR_OUT_OF_MEMORY = 8,
  QLOAD_ERR_OVERFLOW = 9,
  QLOAD_ERR_CANCELLED = 10,
  QLOAD_ERR_DEVICE = 11, /* GPU or driver failure */
  QLOAD_ERR_INTERNAL = 12
} qload_status;

/* What to load and how. Create it with qload_options_create (which sets struct_size and every
 * field to "unset"), set the public fields (strings are copied by qload_open, so they need
 * only live until then) and any setting of the settings table (docs/settings.md) with
 * qload_options_set. NULL or 0 means: the recipe's choice, else qload's default. */
typedef struct qload_options {
  uint32_t struct_size;       /* sizeof(qload_options) as the caller was compiled: checked */
  const char* devices;        /* "cpu", "cuda:0", "cuda:0,cuda:1", "cpu:1" */
  const char* placement;      /* "round-robin" or "by-layer" */
  const char* dtype;          /* "bf16", "f16" or "f32": convert floating tensors on load */
  const char* dequantize;     /* "bf16", "f16" or "f32": decode quantized weights */
  const char* quantize;       /* "fp8", "fp8:block", "int8", ...: quantize linear weights */
  const char* lock;           /* a lockfile the load must match */
  int32_t repack;             /* nonzero: GPTQ v1 / AWQ / act-order weights to GPTQ v2 */
  uint32_t tensor_parallel;   /* ranks of a tensor-parallel layout (docs/parallel.md) */
  uint32_t pipeline_parallel; /* pipeline stages */
  uint32_t data_parallel;     /* data-parallel replicas */
  void* internal;             /* qload's: the settings given to qload_options_set */
  /* Added within ABI version 1 (a caller's struct_size without it leaves it unset): */
  const char* recipe; /* a recipe (.lua) applied to the checkpoint `source` (its own source unused) */
  /* Added within ABI version 1, read only when struct_size covers world_token: the processes of
     the load, for a server that already has its own process group. world_size 0: the torchrun
     variables of the environment (WORLD_SIZE, RANK, ...), else a single process. */
  uint32_t world_size;
  uint32_t rank;
  uint32_t local_world_size; /* processes on this node; 0: world_size */
  uint32_t local_rank;       /* with local_world_size 0: rank */
  const char* master_addr;   /* where rank 0 listens for the rendezvous (it binds this address) */
  uint32_t master_port;      /* 0: 29500 */
  const char* world_token;   /* the secret every rank proves (>= 16 bytes); NULL on one node: made */
  /* Added within ABI version 1, read only when struct_size covers nccl_comm_count: the server's
     own NCCL communicators (ncclComm_t), one per device of `devices` in order (NULL for a cpu
     device), over the world's ranks as the world numbers them: used instead of new ones when
     GPU memory moves between processes (shared reads), so no second NCCL world is built. They
     must outlive qload_open; qload never destroys them, but aborts them if a broadcast on them
     fails or hangs (a collective left running would write into memory the failed load frees). */
  void* const* nccl_comms;
  size_t nccl_comm_count;
  /* Added within ABI version 1, read only when struct_size covers it: nonzero makes the world's
     processes share reads (each tensor read by one process holding it and sent to the others;
     docs/parallel.md), as `qload load --share-reads` and Python's share_reads=True do. */
  int32_t share_reads;
} qload_options;

typedef struct qload_session qload_session;
typedef struct qload_model qload_model;

typedef struct qload_tensor_info {
  const char* name;
  const char* dtype; /* the safetensors spelling: "BF16", "F32", "F8_E4M3", "I32", ... */
  int32_t ndim;
  const int64_t* shape;
  const char* device; /* "cpu", "cpu:1", "cuda:0" */
  uint64_t nbytes;
  int32_t read_only; /* nonzero for mmap'd tensors: the pages are mapped read-only */
} qload_tensor_info;

/* A weight kept quantized: its scheme and the tensors holding its parts. */
typedef struct qload_quantized_info {
  const char* name;   /* "<prefix>.weight" (not itself a tensor) */
  const char* scheme; /* "gptq", "awq", "fp8", "compressed-tensors", ... */
  uint32_t bits;
  uint64_t group_size; /* columns per group; 0 when the scheme has no groups */
  uint64_t rows;       /* N (of all its experts when stacked) */
  uint64_t cols;       /* K */
  const char* device;
  size_t part_count;
  const char* const* part_roles; /* "qweight", "scales", "qzeros", "g_idx", ... */
  const size_t* part_tensors;    /* index of each part for qload_model_tensor_* */
  uint64_t experts;              /* stacked MoE experts [E, N, K] (rows = E x N); 0: a 2-D weight */
} qload_quantized_info;

QLOAD_API const char* qload_version(void); /* "0.1.0" */
QLOAD_API int qload_abi_version(void);     /* QLOAD_ABI_VERSION of the library */
/* The last error on this thread ("" if none). Valid until this thread's next qload call. */
QLOAD_API const char* qload_last_error(void);

QLOAD_API qload_status qload_options_create(qload_options** out);
/* Any setting of the table by name ("staging_bytes", "512MB"), at the highest precedence
 * (above recipes and QLOAD_* variables). An unknown name or a bad value is refused here. */
QLOAD_API qload_status qload_options_set(qload_options* options, const char* name, const char* value);
/* Loads only part of tensor `tensor`: elements [begin, end) of dimension `dim` (0, or 1 of a 2-D
 * tensor: the rows or columns a server's own tensor-parallel code keeps), and reads only their
 * bytes; begin == end gives an empty tensor and reads nothing. Setting it again for a tensor
 * replaces the region. Checked when loading: a tensor the checkpoint does not have is
 * QLOAD_ERR_NOT_FOUND, a region out of bounds or of another dimension QLOAD_ERR_INVALID_ARGUMENT;
 * with several devices, a layout, or anything decoded or quantized, QLOAD_ERR_UNSUPPORTED. A
 * tensor read in part has no digest (with a lock, it is read whole and checked, then cut). */
QLOAD_API qload_status qload_options_set_region(qload_options* options, const char* tensor, uint32_t dim,
                                                uint64_t begin, uint64_t end);
QLOAD_API void qload_options_free(qload_options* options);

/* Opens `source` (a checkpoint directory, .safetensors file, index json, a .lua recipe, or a
 * Hugging Face model id "org/name[@revision]" that is not a path, read from its snapshot in the
 * local Hugging Face cache: HF_HUB_CACHE, HF_HOME, ... as huggingface_hub finds it, offline):
 * the recipe is evaluated and the options and settings checked here; nothing is read.
 * `options` may be NULL. An id the cache lacks fails in qload_load, QLOAD_ERR_NOT_FOUND naming
 * the path looked for. */
QLOAD_API qload_status qload_open(const char* source, const qload_options* options, qload_session** out);
/* Plans, checks the lock (if any) and loads: a complete model, or an error with everything
 * released. Under WORLD_SIZE > 1 this process is one rank of a multi-process load
 * (docs/parallel.md). A session loads once. */
QLOAD_API qload_status qload_load(qload_session* session, qload_model** out);

/* Streaming: called once for every tensor of the model as soon as its bytes are in place on
 * its device (and checked against their digest, when one is expected), while the rest still
 * loads, so a server can copy each into its own parameters early. Calls come one at a time,
 * in completion order, on a loader thread. `index` is the tensor's index in the model
 * qload_load_stream gives back; `info` and `tensor` (a borrowed view: no deleter, do not keep
 * it; NULL for the packed F4 / F6 dtypes) are valid until the callback returns, and the bytes
 * they point to until qload_load_stream returns (with a model given back, as long as it
 * lives). Return 0 to go on, nonzero to stop: the load then ends with QLOAD_ERR_CANCELLED and
 * everything released. A load can still fail after some tensors were handed over (a file
 * changed under it, a rank failed): the caller must then drop them. The callback must not
 * call back into qload with this session. */
typedef int (*qload_tensor_callback)(void* user_data, size_t index, const qload_tensor_info* info,
                                     const DLTensor* tensor);
/* qload_load with a callback per tensor. `out` may be NULL: the model is freed once the last
 * tensor was handed over (the caller copied what it needed). */
QLOAD_API qload_status qload_load_stream(qload_session* session, qload_tensor_callback callback, void* user_data,
                                         qload_model** out);

/* One destination of qload_load_into: memory the caller owns for one tensor, or a region of it. */
typedef struct qload_destination {
  /* A stored tensor's name, or one decoding makes (with the "dequantize" option, the
     dequantized "<prefix>.weight"). */
  const char* tensor;
  /* The caller's memory: data + byte_offset, on kDLCPU or kDLCUDAHost (host memory) or kDLCUDA
     (device_id: a GPU; its memory), with the tensor's (or region's) dtype and shape, row-major:
     strides NULL or compact, except that dimension 0's stride may be larger (some columns of a
     larger tensor, such as a projection's part of a fused parameter: its rows are written, the
     bytes between them never). The dtype is the stored one, or F16 / BF16 / F32 for a floating
     tensor (a quantized weight's kept scales too), converted on load. */
  DLTensor target;
  /* -1: the whole tensor. 0 (any tensor) or 1 (2-D): only indices [region_begin, region_end) of
     that dimension, e.g. a tensor-parallel rank's rows or columns. */
  int32_t region_dim;
  uint64_t region_begin;
  uint64_t region_end;
  /* With region_dim -1 and row_range_count > 0: whole rows of the stored tensor in this order,
     ranges [row_ranges[2i], row_ranges[2i + 1]) of dimension 0 placed one after another (a row
     permutation, such as the one FMS applies to RoPE projections). */
  const uint64_t* row_ranges;
  size_t row_range_count;
} qload_destination;

/* Loads straight into memory the caller owns, as a server that allocated its parameters
 * itself needs: each destination's tensor is read into it (io_uring straight into host
 * memory; pinned staging, then host-to-device copies straight into GPU memory), converted or
 * dequantized into it; no other memory is allocated for it, and nothing outside the
 * destinations is written. Every destination is checked before the first byte is read (a name
 * the checkpoint lacks, the wrong dtype, shape or size, a misaligned target or one whose rows
 * are not contiguous, two destinations sharing a byte): an error then names the tensor and
 * nothing is written. `rest` NULL: tensors without a destination are not read. Otherwise *rest
 * is the model of every tensor loaded, those with a destination included (pointing at the
 * caller's memory, which the model neither owns nor frees; its DLPack tensor has the target's
 * strides). The destinations' memory must stay valid, and not
 * be touched by the caller, until this returns. On failure a destination may hold part of its
 * tensor; qload_last_error() ends with the destinations completely written before it failed.
 * The session loads once, as with qload_load. */
QLOAD_API qload_status qload_load_into(qload_session* session, const qload_destination* destinations, size_t count,
                                       qload_model** rest);
QLOAD_API void qload_session_free(qload_session* session);

/* Pulled streaming, for a server that takes tensors when it is ready for them rather than in a
 * callback: the session's load runs on a loader thread, and qload_stream_next hands over each
 * tensor once its bytes are in place (and checked against their digest, when one is
 * expected), in completion order; at most a few wait, so a slow consumer slows the load
 * instead of piling up memory. A tensor on a GPU is a kDLCUDA tensor in qload's own device
 * memory, which it keeps alive (one loaded into the caller's own memory fails the load,
 * QLOAD_ERR_UNSUPPORTED: the caller has it already). The session loads once, as with qload_load. */
typedef struct qload_stream qload_stream;
QLOAD_API qload_status qload_stream_open(qload_session* session, qload_stream** out);
/* The next tensor: *info describes it (valid until the next call on this stream or its free),
 * *tensor is a DLPack tensor the caller owns (its deleter frees the bytes; NULL for the packed
 * F4 / F6 dtypes, which DLPack cannot name). After the last tensor: QLOAD_OK with info->name and
 * *tensor NULL, or the load's error (after every tensor it handed over before failing). Blocks
 * until one of those. `tensor` may be NULL to take only the description. */
QLOAD_API qload_status qload_stream_next(qload_stream* stream, qload_tensor_info* info,
                                         struct DLManagedTensorVersioned** tensor);
/* The load's report (as qload_model_report_json's) once the stream has ended without an error;
 * valid until qload_stream_free. QLOAD_ERR_INVALID_ARGUMENT before. */
QLOAD_API qload_status qload_stream_report_json(qload_stream* stream, const char** out);
/* Cancels a load still running (everything it holds is released) and waits for its thread;
 * tensors already handed over stay valid. NULL is ignored. */
QLOAD_API void qload_stream_free(qload_stream* stream);

QLOAD_API qload_status qload_model_tensor_count(const qload_model* model, size_t* out);
QLOAD_API qload_status qload_model_tensor_info(const qload_model* model, size_t index, qload_tensor_info* out);
/* Tensor `index` as a DLPack 1.x tensor (kDLCPU or kDLCUDA; data aligned down to 256 bytes
 * with the rest in byte_offset; DLPACK_FLAG_BITMASK_READ_ONLY for mmap'd tensors). The caller
 * owns it and calls its deleter (a framework's from_dlpack does). QLOAD_ERR_UNSUPPORTED for
 * dtypes DLPack cannot name (the packed F4 and F6). */
QLOAD_API qload_status qload_model_tensor_dlpack(const qload_model* model, size_t index,
                                                 struct DLManagedTensorVersioned** out);
QLOAD_API qload_status qload_model_quantized_count(const qload_model* model, size_t* out);
QLOAD_API qload_status qload_model_quantized_info(const qload_model* model, size_t index, qload_quantized_info* out);
QLOAD_API void qload_model_free(qload_model* model);

/* The model's load report: the JSON document (schema "qload.load/2", docs/cli.md) that
 * `qload load --json` prints (less the CLI's own `device` and `peak_rss_bytes`) and Python's
 * Model.report holds. NUL-terminated UTF-8, owned by the model: valid until qload_model_free. */
QLOAD_API qload_status qload_model_report_json(const qload_model* model, const char** out);
/* What `source` (as qload_open takes it, a recipe excepted) holds, from its headers alone: the
 * JSON document (schema "qload.inspect/2", docs/cli.md) that `qload inspect --json` prints and
 * Python's qload.inspect returns. *out is NUL-terminated UTF-8; free it with qload_string_free. */
QLOAD_API qload_status qload_inspect_json(const char* source, char** out);
/* Frees a string qload gave the caller to own (qload_inspect_json's); NULL is ignored. */
QLOAD_API void qload_string_free(char* text);

#ifdef __cplusplus
}
#endif

#endif /* QLOAD_QLOAD_H_ */
