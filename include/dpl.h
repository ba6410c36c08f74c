/* dpl.h: the whole C API of dplhost, the one contract between C and Lua.
 *
 * Lua hands this same text to ffi.cdef (the build embeds it with every line that
 * starts with '#' removed), so declarations below follow the rules of the road:
 * opaque handles, enums with explicit values, fixed-width integers, no macros in
 * declarations, no varargs. Every entry point that can fail returns an int status
 * (DPL_OK or a negative dpl_status) and leaves a message in dpl_last_error().
 * Indices in C are 0-based; Lua converts. */
#ifndef DPL_H
#define DPL_H
#include <stddef.h>
#include <stdint.h>

/* ---- status codes (stable values, never reused) ---- */
typedef enum dpl_status {
  DPL_OK = 0,
  DPL_EINVAL = -1,       /* bad argument: shape, dtype, index, option */
  DPL_ENOMEM = -2,       /* allocation failed (host or device) */
  DPL_EIO = -3,          /* file or pipe error */
  DPL_ENOTIMPL = -4,     /* feature not implemented (yet) */
  DPL_EDEVICE = -5,      /* device missing, busy or failing */
  DPL_ETIMEOUT = -6,     /* a wait ran past its limit */
  DPL_ECOMM = -7,        /* collective or peer failure */
  DPL_EINTR = -8         /* interrupted by a signal */
} dpl_status;

/* ---- host: version, errors ---- */
const char *dpl_version(void);
/* Message of the last failing call on this thread ("" when none). */
const char *dpl_last_error(void);
void dpl_clear_error(void);
/* Sets the thread's error message (used by Lua-side helpers and tests); returns status. */
int dpl_set_error_message(int32_t status, const char *msg);
/* 128+N when signal N (SIGINT, SIGTERM, SIGUSR1) is stopping the script, 0 when
 * none; blocking calls return DPL_EINTR then. 0 while SIGTERM/SIGUSR1 are held
 * (dpl.host.hold_signals): they are recorded only. */
int32_t dpl_signal_received(void);
/* 128+N for the first SIGINT/SIGTERM/SIGUSR1 received since the last clear, held
 * or not; 0 when none. */
int32_t dpl_signal_pending(void);
/* Monotonic clock in seconds. */
double dpl_clock(void);
/* Sleeps; returns DPL_EINTR when a SIGINT/SIGTERM/SIGUSR1 stops the script meanwhile. */
int dpl_sleep(double seconds);

/* ---- processes (src/host/dpl_proc.c): what dist.spawn needs ---- */
/* fork(); in the child *pid_out is 0 and the child gets SIGTERM when the parent dies. */
int dpl_proc_fork(int32_t *pid_out);
/* Waits up to timeout_s (< 0: forever) for pid (-1: any child) to end. On success
 * *pid_out is the child and *code_out its exit code, or -N when signal N killed it;
 * DPL_ETIMEOUT when none ended in time; DPL_EINTR when a signal stops the script
 * (SIGINT/SIGTERM/SIGUSR1, not while held). */
int dpl_proc_wait(int32_t pid, double timeout_s, int32_t *pid_out, int32_t *code_out);
int dpl_proc_kill(int32_t pid, int32_t sig);
/* Flushes stdio and ends the process at once (no atexit cleanups). */
void dpl_proc_exit(int32_t code);
int32_t dpl_proc_getpid(void);
int dpl_proc_setenv(const char *name, const char *value);
/* Starts this same host binary with argv (argv[0] first, NULL-terminated) as a
 * child that gets SIGTERM when this process dies; *pid_out is the child. */
int dpl_proc_spawn_self(const char *const *argv, int32_t *pid_out);
/* The setup of a forked DataLoader worker (dpl.data_workers): one compute thread (the
 * pool and BLAS), CUDA refused (dpl_cuda_forbid), SIGINT and SIGUSR1 ignored (the parent
 * handles them and stops its workers), SIGTERM back to the default (the parent's death
 * ends the worker at once). */
int dpl_proc_worker_setup(void);

/* ---- channels (src/host/dpl_chan.c): the DataLoader workers' sockets ---- */
/* A connected pair of local stream sockets, close-on-exec; fds[0] and fds[1]. */
int dpl_chan_pair(int32_t *fds);
int dpl_chan_close(int32_t fd);
/* Sends n bytes (never raises SIGPIPE). DPL_ECOMM when the peer closed its end,
 * DPL_ETIMEOUT after timeout_s (< 0: no limit), DPL_EINTR when a signal stops the script. */
int dpl_chan_send(int32_t fd, const void *buf, int64_t n, double timeout_s);
/* Sends what fits of n bytes now, never waiting: the count sent (0 when the channel is
 * full), or a status < 0 (DPL_ECOMM when the peer closed its end). */
int64_t dpl_chan_send_some(int32_t fd, const void *buf, int64_t n);
/* Receives exactly n bytes into buf: DPL_ECOMM at the end of the stream (the peer is
 * gone; the message says after how many bytes), DPL_ETIMEOUT, DPL_EINTR as dpl_chan_send. */
int dpl_chan_recv(int32_t fd, void *buf, int64_t n, double timeout_s);
/* 1 when fd has bytes to read (or is at its end) within timeout_s, 0 when not,
 * DPL_EINTR when a signal stops the script. */
int dpl_chan_poll(int32_t fd, double timeout_s);

/* ---- data files (src/data/) ---- */
/* IDX element type codes (the third magic byte). */
typedef enum dpl_idx_type {
  DPL_IDX_U8 = 8,
  DPL_IDX_I8 = 9,
  DPL_IDX_I16 = 11,
  DPL_IDX_I32 = 12,
  DPL_IDX_F32 = 13,
  DPL_IDX_F64 = 14
} dpl_idx_type;

typedef struct dpl_idx_header {
  int32_t type_code;   /* dpl_idx_type */
  int32_t ndim;        /* 1..4 */
  int32_t elem_size;   /* bytes per element */
  int32_t _pad;
  int64_t dims[4];
  int64_t count;       /* elements */
} dpl_idx_header;

/* Reads and validates the header of an IDX file (plain or .gz). */
int dpl_idx_read_header(const char *path, dpl_idx_header *out);
/* Reads the whole file into dst (dst_bytes must equal count * elem_size), in
 * host byte order; fails on a truncated file or trailing bytes. */
int dpl_idx_read(const char *path, dpl_idx_header *out, void *dst, int64_t dst_bytes);
/* Size in bytes and modification time (ns since the epoch) of a file: the key of
 * the decompressed-IDX cache of dpl.datasets. */
int dpl_idx_stat(const char *path, int64_t *size, int64_t *mtime_ns);
/* Checks without decompressing that an IDX file holds the data its header h
 * announces: the size of a plain file (errors: truncated, trailing bytes); for a
 * .gz, gzip's ISIZE trailer. Returns 1 (not an error) when a .gz's ISIZE
 * disagrees: truncated, or several gzip members; only decompressing tells. */
int dpl_idx_check_size(const char *path, const dpl_idx_header *h);
/* out[i*row_len + j] = lut[src[(idx[i]-1)*row_len + j]] for i < n, j < row_len:
 * rows of a uint8 array (1-based row numbers, checked against rows) gathered and
 * mapped to float32 through a 256-entry table (uint8 images to [0, 1] per batch). */
int dpl_idx_gather_u8(const uint8_t *src, int64_t rows, int64_t row_len, const int64_t *idx, int64_t n,
                      const float *lut, float *out);

/* ---- devices (src/device/) ---- */
typedef enum dpl_device_type {
  DPL_DEVICE_CPU = 0,
  DPL_DEVICE_CUDA = 1
} dpl_device_type;

typedef struct dpl_device_info {
  int32_t type;              /* dpl_device_type */
  int32_t index;             /* 0-based device id */
  int32_t simulated;         /* 1 for DPL_VIRTUAL_GPUS devices */
  int32_t busy;              /* 1 when allocation is refused (DPL_VIRTUAL_GPUS_BUSY) */
  int32_t cores;             /* CPU: online cores; CUDA: multiprocessors (0 if unknown) */
  int32_t cc_major, cc_minor; /* CUDA compute capability (0 if unknown) */
  uint64_t total_memory;     /* bytes */
  char name[128];
} dpl_device_info;

/* Number of devices of a type; CUDA counts real GPUs, or simulated ones when
 * DPL_VIRTUAL_GPUS is set. Never fails for a known type; the probe is done once. */
int dpl_device_count(int32_t type, int32_t *out_count);
int dpl_device_get_info(int32_t type, int32_t index, dpl_device_info *out);
/* Why no real GPU is usable ("" when one is), e.g. "no CUDA driver (libcuda.so.1 not found)". */
const char *dpl_cuda_unavailable_reason(void);
/* Checks that a small allocation on the device succeeds, as Lightning's
 * pick_single_gpu does with torch.ones(1).to(device), then frees it.
 * DPL_OK: usable. DPL_EDEVICE: refused for good (a busy exclusive-mode GPU;
 * DPL_VIRTUAL_GPUS_BUSY for simulated ones) or no such device. DPL_ENOMEM: a
 * transient failure worth retrying. DPL_ENOTIMPL: a real GPU while the CUDA
 * plugin is not loaded (no CUDA context is ever created by this probe then). */
int dpl_device_probe_alloc(int32_t type, int32_t index);

/* ---- the CUDA plugin (src/device/dpl_device_plugin.c forwards to dpl_cuda.so) ----
 * Real GPUs run tensors through the plugin dpl_cuda.so, which the core loads
 * with dlopen at the first device query when NVML finds a GPU. Without it (or
 * without a GPU) every call below fails with a message saying why. */
typedef struct dpl_cuda_mem_stats {
  int64_t allocated_bytes;      /* bytes held by live tensors */
  int64_t reserved_bytes;       /* bytes taken from cudaMalloc (allocated + cached) */
  int64_t peak_allocated_bytes;
  int64_t peak_reserved_bytes;
  int64_t allocations;          /* allocator requests served */
  int64_t cache_hits;           /* ... of them from the cache, without cudaMalloc */
  int64_t device_mallocs;       /* cudaMalloc calls */
  int64_t device_frees;         /* cudaFree calls (empty_cache, out-of-memory retries) */
} dpl_cuda_mem_stats;
/* Loads the plugin now (normally automatic); touches no GPU. DPL_EDEVICE when
 * it is missing or refuses to load. */
int dpl_cuda_load(void);
/* Path of the loaded plugin, "" when none. */
const char *dpl_cuda_plugin_path(void);
/* 1 once the plugin initialised CUDA in this process (a tensor on a real GPU, a device
 * probe): a forked child could not use CUDA (dist.spawn refuses to fork then). */
int32_t dpl_cuda_initialized(void);
/* From now on this process refuses CUDA: every GPU op and allocation fails with `why`
 * (a forked DataLoader worker, whose parent may hold CUDA state); a NULL or empty why
 * lifts nothing (the refusal is for the process's life). */
void dpl_cuda_forbid(const char *why);
/* Waits for all work queued on cuda:index (index -1: every device used). */
int dpl_cuda_synchronize(int32_t index);
/* Returns the cached free blocks of cuda:index (-1: all) to the driver; *freed: bytes. */
int dpl_cuda_empty_cache(int32_t index, int64_t *freed);
int dpl_cuda_memory_stats(int32_t index, dpl_cuda_mem_stats *out);
/* 1 when the loaded backend runs op id (dpl_tensor_backend.h's enum) on the GPU. */
int32_t dpl_cuda_supports(int32_t op);
/* Name of backend op id ("" past the last). */
const char *dpl_cuda_op_name(int32_t op);

/* ---- tensors (src/tensor/) ----
 * A dpl_tensor is a view (dtype, shape, strides in elements, offset) on a
 * reference-counted, 64-byte-aligned storage tagged with a device. Every function
 * that returns a tensor returns a new handle the caller owns and releases with
 * dpl_tensor_release (Lua: ffi.gc); views share the storage. Dims and indices
 * are 0-based here; the Lua layer converts from its 1-based positions. */
typedef enum dpl_dtype {
  DPL_FLOAT32 = 0,
  DPL_FLOAT64 = 1,
  DPL_FLOAT16 = 2,
  DPL_BFLOAT16 = 3,
  DPL_INT32 = 4,
  DPL_INT64 = 5,
  DPL_UINT8 = 6,
  DPL_BOOL = 7
} dpl_dtype;

enum { DPL_MAX_DIMS = 8, DPL_NUM_DTYPES = 8 };

typedef struct dpl_storage dpl_storage;

/* Read-only metadata, visible to Lua for fast shape access (the layout is
 * checked against the compiler by dpl_tensor_layout). Never write to it. */
typedef struct dpl_tensor {
  int32_t _dtype;        /* dpl_dtype */
  int32_t _ndim;         /* 0..DPL_MAX_DIMS */
  int32_t _devtype;      /* dpl_device_type */
  int32_t _devindex;
  int64_t _numel;
  int64_t _offset;       /* first element, in elements from the storage start */
  int64_t _shape[8];
  int64_t _stride[8];    /* in elements */
  void *_data;           /* address of the first element (host memory) */
  dpl_storage *_storage;
  uint32_t _flags;       /* bit 0: contiguous */
  uint32_t _reserved;
} dpl_tensor;

typedef struct dpl_mem_stats_t {
  int64_t current_bytes;   /* bytes held by live storages on the device */
  int64_t peak_bytes;
  int64_t total_bytes;     /* bytes allocated since start */
  int64_t live_storages;
  int64_t allocations;
} dpl_mem_stats_t;

/* Byte counters of one device (type, index). */
int dpl_mem_stats(int32_t devtype, int32_t devindex, dpl_mem_stats_t *out);
/* Bytes held by live storages on all devices together (cheap, for GC polling). */
int64_t dpl_mem_current_total(void);
/* Large freed blocks are kept for reuse (up to 1 GiB): their bytes, and a way to
 * return them to the system. */
int64_t dpl_mem_cached(void);
int64_t dpl_mem_empty_cache(void);
/* 1 when more tensor bytes than the threshold (default 8 MiB), or more tensor
 * handles than the handle threshold (default: no limit), were created since
 * dpl_gc_done: Lua then runs its GC, which cannot see tensor memory.
 * dpl_gc_flag points at that same flag (0 or 1), for reading it without a call. */
int32_t dpl_gc_wanted(void);
int32_t *dpl_gc_flag(void);
/* Resets the counts (the GC ran); returns the number of handles created since the last call. */
int64_t dpl_gc_done(void);
void dpl_set_gc_threshold(int64_t bytes);
void dpl_set_gc_handle_threshold(int64_t handles);
/* Tensor bytes (what = 0) or handles (what = 1) created since dpl_gc_done. */
int64_t dpl_gc_since(int32_t what);
/* sizeof(dpl_tensor) when what = -1, else offsetof of field number `what` in declaration order. */
int64_t dpl_tensor_layout(int32_t what);
int64_t dpl_dtype_size(int32_t dtype);
const char *dpl_dtype_name(int32_t dtype);

/* Creation and lifetime. */
int dpl_tensor_empty(int32_t dtype, int32_t ndim, const int64_t *shape, int32_t devtype,
                     int32_t devindex, dpl_tensor **out);
void dpl_tensor_release(dpl_tensor *t);
/* Drops t's storage reference now and leaves an empty, "freed" handle behind
 * (still to be released); idempotent. Lua's t:free(). */
int dpl_tensor_free_data(dpl_tensor *t);
int64_t dpl_storage_refcount(const dpl_tensor *t);
/* Storages carry a serial (how many were made before them); dpl_storage_serials() is the
 * next one. A storage whose serial is >= a value read earlier was made since (autograd: a
 * gradient made during this backward). */
int64_t dpl_storage_serials(void);
/* 1 when t's storage was made at or after serial (dpl_storage_serials() read earlier), 0
 * otherwise or for a freed handle; 1 when t holds its storage's only reference. (int
 * results: no boxed 64-bit value per call from Lua.) */
int32_t dpl_storage_newer(const dpl_tensor *t, int64_t serial);
int32_t dpl_storage_unique(const dpl_tensor *t);
int64_t dpl_storage_nbytes(const dpl_tensor *t);

/* Views (share storage; every one returns a new handle). */
int dpl_tensor_alias(const dpl_tensor *t, dpl_tensor **out);
int dpl_tensor_view(const dpl_tensor *t, int32_t ndim, const int64_t *shape, dpl_tensor **out);
/* view when the strides allow it, else a contiguous copy. One -1 entry is inferred (also in view). */
int dpl_tensor_reshape(const dpl_tensor *t, int32_t ndim, const int64_t *shape, dpl_tensor **out);
int dpl_tensor_as_strided(const dpl_tensor *t, int32_t ndim, const int64_t *shape,
                          const int64_t *stride, int64_t offset, dpl_tensor **out);
int dpl_tensor_transpose(const dpl_tensor *t, int32_t d0, int32_t d1, dpl_tensor **out);
int dpl_tensor_permute(const dpl_tensor *t, int32_t ndim, const int32_t *dims, dpl_tensor **out);
int dpl_tensor_narrow(const dpl_tensor *t, int32_t dim, int64_t start, int64_t length, dpl_tensor **out);
int dpl_tensor_select(const dpl_tensor *t, int32_t dim, int64_t index, dpl_tensor **out);
int dpl_tensor_expand(const dpl_tensor *t, int32_t ndim, const int64_t *shape, dpl_tensor **out);
/* dim = -1: every size-1 dim. */
int dpl_tensor_squeeze(const dpl_tensor *t, int32_t dim, dpl_tensor **out);
int dpl_tensor_unsqueeze(const dpl_tensor *t, int32_t dim, dpl_tensor **out);
/* A contiguous tensor: a new handle on the same storage when t already is one. */
int dpl_tensor_contiguous(const dpl_tensor *t, dpl_tensor **out);

/* Copies and fills. copy_ broadcasts src into dst, converts dtypes, may cross devices. */
int dpl_tensor_copy_(dpl_tensor *dst, const dpl_tensor *src);
int dpl_tensor_to(const dpl_tensor *t, int32_t dtype, int32_t devtype, int32_t devindex, dpl_tensor **out);
int dpl_tensor_fill_(dpl_tensor *t, double value);
int dpl_tensor_fill_i64_(dpl_tensor *t, int64_t value);
/* Element at a 0-based linear position of the (logical, row-major) tensor, as double / int64. */
int dpl_tensor_get(const dpl_tensor *t, int64_t pos, double *out);
int dpl_tensor_get_i64(const dpl_tensor *t, int64_t pos, int64_t *out);
/* Writes n doubles into a contiguous t (converting) / reads all of t into a double buffer. */
int dpl_tensor_set_from_f64(dpl_tensor *t, const double *values, int64_t n);
int dpl_tensor_read_f64(const dpl_tensor *t, double *values, int64_t n);
int dpl_tensor_arange(double start, double step, int64_t n, int32_t dtype, int32_t devtype,
                      int32_t devindex, dpl_tensor **out);
int dpl_tensor_linspace(double start, double end, int64_t n, int32_t dtype, int32_t devtype,
                        int32_t devindex, dpl_tensor **out);
int dpl_tensor_eye(int64_t n, int64_t m, int32_t dtype, int32_t devtype, int32_t devindex, dpl_tensor **out);

/* Random numbers: a counter-based generator (Philox 4x32-10). Each call draws
 * numel values at the generator's offset and advances it, so results depend on
 * the seed and the call sequence only, never on the thread count. */
void dpl_manual_seed(uint64_t seed);
void dpl_rng_get_state(uint64_t *seed, uint64_t *offset);
void dpl_rng_set_state(uint64_t seed, uint64_t offset);
int dpl_tensor_uniform_(dpl_tensor *t, double lo, double hi);
int dpl_tensor_normal_(dpl_tensor *t, double mean, double std);
/* integers uniform in [lo, hi) */
int dpl_tensor_randint_(dpl_tensor *t, int64_t lo, int64_t hi);
int dpl_tensor_bernoulli_(dpl_tensor *t, double p);
/* standard Gamma(alpha[i], 1) draws into out (both contiguous host tensors, float32 or float64, the
 * same dtype and size) by Marsaglia and Tsang's method (alpha < 1 boosted by U^(1/alpha)); draw i's
 * k-th try takes Philox counter {offset + i, k} (the generator's offset advances by numel), so the
 * draws depend on the seed only, not on the thread count; results below the dtype's smallest normal
 * are clamped to it */
int dpl_tensor_standard_gamma(const dpl_tensor *alpha, dpl_tensor *out);
/* Poisson(rate[i]) draws into out (as dpl_tensor_standard_gamma: contiguous host float32/float64):
 * below rate 10 the count of uniforms whose product stays above e^-rate, from 10 on Hormann's
 * PTRS; draw i takes Philox counters {offset + i, k}, k = 0, 1, ... (offset advances by numel);
 * rate <= 0 (or NaN) gives 0 */
int dpl_tensor_poisson(const dpl_tensor *rate, dpl_tensor *out);
/* Fused dropout (training mode) for a contiguous float32/float64 tensor in host memory:
 * draws the keep decisions exactly as bernoulli_(1 - p) would at the generator's offset
 * (same counters, same numbers, whatever the thread count; advances it by numel) and writes
 * out = x * (keep ? s : 0) with s = 1 / (1 - p) rounded to x's dtype, which is what
 * x * empty_like(x):bernoulli_(1 - p):div_(1 - p) gives, bit for bit. 0 <= p < 1 (p = 1 and
 * the no-draw p = 0 of F.dropout are the caller's). mask (may be NULL: not kept) gets the keep
 * decisions packed: a 1-d uint8 tensor of ceil(numel / 8) bytes, element i in bit i % 8 of
 * byte i / 8. Backward: grad_x = grad * (keep ? s : 0), grad of x's dtype and numel (any
 * layout, host memory), with the mask and p of the forward. */
int dpl_dropout(const dpl_tensor *x, double p, dpl_tensor **out, dpl_tensor **mask);
int dpl_dropout_backward(const dpl_tensor *grad, const dpl_tensor *mask, double p, dpl_tensor **grad_x);

/* Elementwise. Binary ops broadcast; results follow PyTorch's type promotion. */
typedef enum dpl_binop {
  DPL_OP_ADD = 0, DPL_OP_SUB = 1, DPL_OP_MUL = 2, DPL_OP_DIV = 3, DPL_OP_POW = 4,
  DPL_OP_MAXIMUM = 5, DPL_OP_MINIMUM = 6, DPL_OP_REMAINDER = 7, DPL_OP_ATAN2 = 8, DPL_OP_FMOD = 9,
  /* integer operands only (uint8, int32, int64): gcd and lcm (non-negative; lcm(0, x) = 0; lcm
   * wraps in the dtype), shifts (the left one wraps, the right one is arithmetic; a count < 0 or
   * >= the dtype's width gives 0, or -1 for a right shift of a negative value) */
  DPL_OP_GCD = 10, DPL_OP_LCM = 11, DPL_OP_LSHIFT = 12, DPL_OP_RSHIFT = 13,
  DPL_OP_EQ = 16, DPL_OP_NE = 17, DPL_OP_LT = 18, DPL_OP_LE = 19, DPL_OP_GT = 20, DPL_OP_GE = 21,
  DPL_OP_LOGICAL_AND = 24, DPL_OP_LOGICAL_OR = 25, DPL_OP_LOGICAL_XOR = 26,
  /* integer and bool operands only (a floating one is an error); CPU only */
  DPL_OP_BITWISE_AND = 27, DPL_OP_BITWISE_OR = 28, DPL_OP_BITWISE_XOR = 29
} dpl_binop;
typedef enum dpl_unop {
  DPL_OP_NEG = 0, DPL_OP_ABS = 1, DPL_OP_EXP = 2, DPL_OP_LOG = 3, DPL_OP_SQRT = 4, DPL_OP_RSQRT = 5,
  DPL_OP_TANH = 6, DPL_OP_SIGMOID = 7, DPL_OP_RELU = 8, DPL_OP_GELU = 9, DPL_OP_SIN = 10,
  DPL_OP_COS = 11, DPL_OP_FLOOR = 12, DPL_OP_CEIL = 13, DPL_OP_ROUND = 14, DPL_OP_SIGN = 15,
  DPL_OP_RECIPROCAL = 16, DPL_OP_SQUARE = 17, DPL_OP_LOG1P = 18, DPL_OP_EXPM1 = 19,
  DPL_OP_LOGICAL_NOT = 20, DPL_OP_SILU = 21, DPL_OP_ERF = 22, DPL_OP_TRUNC = 23,
  DPL_OP_LOG2 = 24, DPL_OP_ISNAN = 25,
  /* FRAC takes floating tensors, BITWISE_NOT integer and bool ones; ISINF and ISFINITE give
   * bool. (A CUDA plugin older than these ops answers "<op>: not implemented on cuda".) */
  DPL_OP_LOG10 = 26, DPL_OP_EXP2 = 27, DPL_OP_SINH = 28, DPL_OP_COSH = 29, DPL_OP_TAN = 30,
  DPL_OP_ASIN = 31, DPL_OP_ACOS = 32, DPL_OP_ATAN = 33, DPL_OP_ASINH = 34, DPL_OP_ACOSH = 35,
  DPL_OP_ATANH = 36, DPL_OP_FRAC = 37, DPL_OP_ISINF = 38, DPL_OP_ISFINITE = 39, DPL_OP_BITWISE_NOT = 40
} dpl_unop;
int dpl_binary(int32_t op, const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out);
/* a = a op b (b broadcast to a's shape; the result must fit a's dtype). */
int dpl_binary_(int32_t op, dpl_tensor *a, const dpl_tensor *b);
/* a op s, or s op a when reverse is 1. An integral s counts as an integer scalar. */
int dpl_binary_scalar(int32_t op, const dpl_tensor *a, double s, int32_t reverse, dpl_tensor **out);
int dpl_binary_scalar_(int32_t op, dpl_tensor *a, double s);
/* a += alpha * b (b broadcast), the optimizers' axpy. */
int dpl_axpy_(dpl_tensor *a, double alpha, const dpl_tensor *b);
/* Multi-tensor optimizer steps (the update formulas of lua/dpl/optim, rounded
 * exactly as its per-tensor ops round them): n parameters, each with its
 * gradient and state tensors, all float32 or all float64 (one dtype per call),
 * contiguous, on one device, each state and gradient shaped as its parameter.
 * On the CPU a loop over the tensors; on a GPU a few multi-tensor kernel
 * launches (DPL_BK_OPTIM_MULTI). */
typedef struct dpl_sgd_opts {
  double lr, momentum, dampening, weight_decay;
  int32_t nesterov, maximize;
} dpl_sgd_opts;
/* bufs: the momentum buffers (NULL when momentum is 0); buf_init[i] = 1 sets
 * bufs[i] to the (decayed) gradient, the first step's clone (buf_init NULL: none). */
int dpl_sgd_step_multi(int32_t n, dpl_tensor *const *params, dpl_tensor *const *grads, dpl_tensor *const *bufs,
                       const uint8_t *buf_init, const dpl_sgd_opts *o);
typedef struct dpl_adam_opts {
  double lr, beta1, beta2, eps, weight_decay;
  int32_t decoupled, amsgrad, maximize; /* decoupled: AdamW's weight decay */
} dpl_adam_opts;
/* steps[i]: parameter i's step count after this step (>= 1), for its bias
 * corrections 1 - beta^step; max_exp_avg_sq only with amsgrad (else NULL). */
int dpl_adam_step_multi(int32_t n, dpl_tensor *const *params, dpl_tensor *const *grads, dpl_tensor *const *exp_avg,
                        dpl_tensor *const *exp_avg_sq, dpl_tensor *const *max_exp_avg_sq, const double *steps,
                        const dpl_adam_opts *o);
int dpl_unary(int32_t op, const dpl_tensor *a, dpl_tensor **out);
int dpl_unary_(int32_t op, dpl_tensor *a);
/* Gradient of an activation: grad * f'(x); for TANH and SIGMOID y is f(x), for RELU, GELU, SILU x is used. */
int dpl_activation_backward(int32_t op, const dpl_tensor *grad, const dpl_tensor *x,
                            const dpl_tensor *y, dpl_tensor **out);
/* has_lo / has_hi select which bound applies. out == NULL: in place on a. */
int dpl_clamp(const dpl_tensor *a, double lo, double hi, int32_t has_lo, int32_t has_hi, dpl_tensor **out);
int dpl_clamp_(dpl_tensor *a, double lo, double hi, int32_t has_lo, int32_t has_hi);
int dpl_where(const dpl_tensor *cond, const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out);
int dpl_masked_fill_(dpl_tensor *a, const dpl_tensor *mask, double value);

/* The math group (src/tensor/dpl_tensor_math.c; Lua: dpl.tensor_math). CPU kernels only: a
 * tensor in GPU memory fails with "<op>: not implemented on cuda". Activations of floating
 * tensors (float16/bfloat16 computed in float32), PyTorch's formulas: HARDTANH clamps to
 * [p0, p1] (gradient 0 at and beyond the bounds), SOFTPLUS log1p(exp(p0 * x)) / p0 (x where
 * p0 * x > p1), ELU x or p0 * expm1(x), LEAKY_RELU x or p0 * x, MISH x * tanh(softplus(x)),
 * HARDSWISH x * clamp(x + 3, 0, 6) / 6. dpl_act_backward: grad * f'(x), of x's shape. */
typedef enum dpl_actop {
  DPL_ACT_HARDTANH = 0, DPL_ACT_SOFTPLUS = 1, DPL_ACT_ELU = 2, DPL_ACT_LEAKY_RELU = 3, DPL_ACT_MISH = 4,
  DPL_ACT_HARDSWISH = 5
} dpl_actop;
int dpl_act(int32_t op, const dpl_tensor *x, double p0, double p1, dpl_tensor **out);
int dpl_act_(int32_t op, dpl_tensor *x, double p0, double p1);
int dpl_act_backward(int32_t op, const dpl_tensor *grad, const dpl_tensor *x, double p0, double p1, dpl_tensor **out);
/* NaN -> nan, +inf -> posinf, -inf -> neginf in floating tensors (values past the dtype's range
 * become infinities); other dtypes are copied unchanged. */
int dpl_nan_to_num(const dpl_tensor *a, double nan, double posinf, double neginf, dpl_tensor **out);
int dpl_nan_to_num_(dpl_tensor *a, double nan, double posinf, double neginf);
/* bool: a == b, or |a - b| <= atol + rtol * |b| (finite), or both NaN when equal_nan; a and b of
 * one dtype, broadcast; rtol, atol >= 0. */
int dpl_isclose(const dpl_tensor *a, const dpl_tensor *b, double rtol, double atol, int32_t equal_nan, dpl_tensor **out);
/* start + weight * (end - start) (PyTorch's two-sided formula), floating operands of one dtype,
 * broadcast; weight a tensor, or NULL for the number w. In place: the broadcast shape is self's. */
int dpl_lerp(const dpl_tensor *start, const dpl_tensor *end, const dpl_tensor *weight, double w, dpl_tensor **out);
int dpl_lerp_(dpl_tensor *self, const dpl_tensor *end, const dpl_tensor *weight, double w);
/* self + value * t1 * t2 (div = 0: addcmul) or self + value * t1 / t2 (div = 1: addcdiv), broadcast,
 * PyTorch's result type (not bool; value an integer for integer results; addcdiv refuses two
 * integer divisor operands). In place: the result must fit self's dtype and shape. */
int dpl_addcmul(int32_t div, const dpl_tensor *self, const dpl_tensor *t1, const dpl_tensor *t2, double value,
                dpl_tensor **out);
int dpl_addcmul_(int32_t div, dpl_tensor *self, const dpl_tensor *t1, const dpl_tensor *t2, double value);

/* The recurrent cells' pointwise step (src/tensor/dpl_tensor_rnn.c; Lua: dpl.nn.functional_seq,
 * the time loops of nn.LSTM/GRU/RNN). The caller makes the GEMMs; these fuse the gates. Every
 * tensor is 2-d [B, k * H], contiguous, float32 or float64 (one dtype), in host memory (else
 * "<op>: not implemented on cuda"); results go into the tensors passed (written, not allocated).
 * LSTM, gates i, f, g, o: pre = x W_ih^T + b_ih + h W_hh^T + b_hh [B, 4H]; c = f * c_prev + i * g,
 * h = o * tanh(c); act [B, 4H] (or NULL) keeps i, f, g, o for the backward, which takes dh and dc
 * (the gradients of h and c; dc is overwritten with that of c_prev) and writes dpre [B, 4H].
 * GRU, gates r, z, n: xp = x W_ih^T + b_ih, hh = h W_hh^T + b_hh [B, 3H]; n = tanh(xp_n + r * hh_n),
 * h = (h_prev - n) * z + n; act [B, 4H] (or NULL): r, z, n, hh_n. Backward: dxp, dhh [B, 3H] and
 * dh_prev = dh * z + gy (gy may be NULL), the hidden product's part (dhh W_hh) left to the caller.
 * RNN: h = tanh(pre) or relu(pre) (relu = 1); backward dpre = dh * f'(pre) from h. */
int dpl_lstm_cell_forward(const dpl_tensor *pre, const dpl_tensor *c_prev, dpl_tensor *h, dpl_tensor *c,
                          dpl_tensor *act);
int dpl_lstm_cell_backward(const dpl_tensor *dh, dpl_tensor *dc, const dpl_tensor *act, const dpl_tensor *c,
                           const dpl_tensor *c_prev, dpl_tensor *dpre);
int dpl_gru_cell_forward(const dpl_tensor *xp, const dpl_tensor *hh, const dpl_tensor *h_prev, dpl_tensor *h,
                         dpl_tensor *act);
int dpl_gru_cell_backward(const dpl_tensor *dh, const dpl_tensor *act, const dpl_tensor *h_prev, const dpl_tensor *gy,
                          dpl_tensor *dxp, dpl_tensor *dhh, dpl_tensor *dh_prev);
int dpl_rnn_cell_forward(int32_t relu, const dpl_tensor *pre, dpl_tensor *h);
int dpl_rnn_cell_backward(int32_t relu, const dpl_tensor *dh, const dpl_tensor *h, dpl_tensor *dpre);

/* Reductions over one dim (0-based) or all dims (dim = -1). param: VAR/STD
 * correction (1 = unbiased), NORM p. Indices (ARGMAX, dpl_reduce_index) are 0-based int64. */
typedef enum dpl_redop {
  DPL_RED_SUM = 0, DPL_RED_MEAN = 1, DPL_RED_PROD = 2, DPL_RED_MAX = 3, DPL_RED_MIN = 4,
  DPL_RED_ARGMAX = 5, DPL_RED_ARGMIN = 6, DPL_RED_VAR = 7, DPL_RED_STD = 8,
  DPL_RED_LOGSUMEXP = 9, DPL_RED_NORM = 10, DPL_RED_ANY = 11, DPL_RED_ALL = 12
} dpl_redop;
int dpl_reduce(int32_t op, const dpl_tensor *a, int32_t dim, int32_t keepdim, double param, dpl_tensor **out);
/* MAX or MIN over dim: values and their 0-based int64 indices. */
int dpl_reduce_index(int32_t op, const dpl_tensor *a, int32_t dim, int32_t keepdim,
                     dpl_tensor **values, dpl_tensor **indices);

/* Sorting, selection and counting (src/tensor/dpl_tensor_sort.c, dpl_tensor_count.c).
 * Along dim (0-based; a 0-d tensor takes dim 0); indices are 0-based int64 positions
 * along dim. Order: NaN above +inf (last ascending, first descending), -0.0 equal to
 * 0.0, equal values in the order of their positions (a stable sort); any dtype.
 * sort: values and indices of a's shape; values may be NULL (argsort). */
int dpl_sort(const dpl_tensor *a, int32_t dim, int32_t descending, dpl_tensor **values, dpl_tensor **indices);
/* The k largest (largest = 1) or smallest elements along dim, in that order (0 <= k <= size). */
int dpl_topk(const dpl_tensor *a, int64_t k, int32_t dim, int32_t largest, dpl_tensor **values,
             dpl_tensor **indices);
/* The k-th smallest element along dim, k in 1..size (PyTorch's k: a count, not a position). */
int dpl_kthvalue(const dpl_tensor *a, int64_t k, int32_t dim, int32_t keepdim, dpl_tensor **values,
                 dpl_tensor **indices);
/* The lower median along dim; NaN (the first one) when the slice has a NaN. dim = -1: over
 * all elements, 0-d results (the index into the flattened tensor; NaN when a is empty). */
int dpl_median(const dpl_tensor *a, int32_t dim, int32_t keepdim, dpl_tensor **values, dpl_tensor **indices);
/* The most frequent value along dim (the smallest of several; NaNs never equal), at its last position. */
int dpl_mode(const dpl_tensor *a, int32_t dim, int32_t keepdim, dpl_tensor **values, dpl_tensor **indices);
/* Sorted distinct values of all elements (dim = -1: 1-d out, inverse of a's shape) or distinct
 * slices along dim (sorted lexicographically; inverse [size of dim]); inverse: 0-based
 * positions in out; counts: occurrences. inverse and counts may be NULL (not computed). */
int dpl_unique(const dpl_tensor *a, int32_t dim, dpl_tensor **out, dpl_tensor **inverse, dpl_tensor **counts);
/* Occurrences of each value 0..max of a 1-d integer tensor (at least minlength bins), int64;
 * with weights (1-d, a's length, or NULL): their sums, float32 for float32 weights, else float64. */
int dpl_bincount(const dpl_tensor *a, const dpl_tensor *weights, int64_t minlength, dpl_tensor **out);
/* Histogram of a floating tensor in bins equal bins over [min, max] (min = max: the data's
 * range); elements outside it and NaNs are not counted; a's dtype. */
int dpl_histc(const dpl_tensor *a, int64_t bins, double min, double max, dpl_tensor **out);

/* Linear algebra (src/tensor/dpl_tensor_linalg.c) through the LAPACK of the OpenBLAS library:
 * float32/float64 CPU tensors of shape [..., m, n] (any batch dims); results are new contiguous
 * tensors; info (int32, the batch shape): LAPACK's status of each matrix (0: done; > 0 as
 * LAPACK says: a zero pivot, a minor not positive-definite, no convergence; -1 from svd: the
 * matrix has a non-finite value). DPL_ENOTIMPL when the library lacks the routine.
 * lu: P A = L U of any m x n A, packed (unit L below the diagonal, U on and above), pivots
 * 1-based int32 [..., min(m, n)] (row i was swapped with row pivots[i]). */
int dpl_linalg_lu(const dpl_tensor *a, dpl_tensor **lu, dpl_tensor **pivots, dpl_tensor **info);
/* A X = B for square A [..., n, n] and B [..., n, k] of A's batch shape and dtype */
int dpl_linalg_solve(const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **x, dpl_tensor **info);
/* determinants of square A through LU: det, its sign (0 when singular) and log |det| (-inf) */
int dpl_linalg_det(const dpl_tensor *a, dpl_tensor **det, dpl_tensor **sign, dpl_tensor **logabsdet);
/* the inverse of square A (info > 0: singular, the result is not an inverse) */
int dpl_linalg_inv(const dpl_tensor *a, dpl_tensor **x, dpl_tensor **info);
/* A X = B (trans = 1: A^T X = B) from dpl_linalg_lu's lu and pivots */
int dpl_linalg_lu_solve(const dpl_tensor *lu, const dpl_tensor *pivots, const dpl_tensor *b, int32_t trans,
                        dpl_tensor **x);
/* A = L L^T from A's lower triangle (upper = 1: A = U^T U from the upper one); info > 0:
 * the leading minor of that order is not positive-definite */
int dpl_linalg_cholesky(const dpl_tensor *a, int32_t upper, dpl_tensor **l, dpl_tensor **info);
/* A = Q R; mode 0: Q [..., m, k], R [..., k, n] (k = min(m, n)); 1: Q m x m, R m x n; 2: R
 * only (k x n, q left NULL) */
int dpl_linalg_qr(const dpl_tensor *a, int32_t mode, dpl_tensor **q, dpl_tensor **r);
/* LAPACK's geqrf: R on and above the diagonal of qr [..., m, n], the Householder vectors
 * below it (unit diagonal implied), their scales in tau [..., min(m, n)] */
int dpl_linalg_geqrf(const dpl_tensor *a, dpl_tensor **qr, dpl_tensor **tau);
/* symmetric A = V diag(w) V^T from A's lower (upper = 1: upper) triangle: w ascending
 * [..., n]; v's columns the eigenvectors (v left NULL when vectors = 0) */
int dpl_linalg_eigh(const dpl_tensor *a, int32_t upper, int32_t vectors, dpl_tensor **w, dpl_tensor **v,
                    dpl_tensor **info);
/* A = U diag(S) Vh, S descending [..., k]; full = 1: U m x m, Vh n x n, else m x k and k x n;
 * uv = 0: S only (u, vh left NULL) */
int dpl_linalg_svd(const dpl_tensor *a, int32_t full, int32_t uv, dpl_tensor **u, dpl_tensor **s, dpl_tensor **vh,
                   dpl_tensor **info);
/* A X = B (left = 1; B [..., n, k]) or X A = B (left = 0; B [..., k, n]) with A's upper (upper
 * = 1) or lower triangle, its diagonal taken as ones when unit = 1; no singularity check */
int dpl_linalg_solve_triangular(const dpl_tensor *a, const dpl_tensor *b, int32_t upper, int32_t left, int32_t unit,
                                dpl_tensor **x);

/* Special functions (src/tensor/dpl_tensor_special.c; GPU tensors in the CUDA backend with the
 * same math, src/tensor/dpl_special_math.h): computed in double per element, stored in a's
 * floating dtype (float32 for integer and bool a). POLYGAMMA takes its
 * order n (>= 0); the two-argument ones broadcast a and b: ZETA(x, q) is Hurwitz's zeta,
 * GAMMAINC(a, x) / GAMMAINCC(a, x) the regularized lower / upper incomplete gamma. */
typedef enum dpl_specop {
  DPL_SP_LGAMMA = 0, DPL_SP_DIGAMMA = 1, DPL_SP_POLYGAMMA = 2, DPL_SP_ERFC = 3, DPL_SP_ERFCX = 4,
  DPL_SP_I0 = 5, DPL_SP_I0E = 6, DPL_SP_I1 = 7, DPL_SP_I1E = 8, DPL_SP_NDTR = 9, DPL_SP_NDTRI = 10,
  DPL_SP_LOG_NDTR = 11, DPL_SP_SINC = 12,
  DPL_SP_ZETA = 13, DPL_SP_GAMMAINC = 14, DPL_SP_GAMMAINCC = 15
} dpl_specop;
int dpl_special(int32_t op, const dpl_tensor *a, int64_t n, dpl_tensor **out);
int dpl_special2(int32_t op, const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out);

/* The counting loops of histogram and scatter_reduce (src/tensor/dpl_tensor_bins.c), on contiguous
 * host tensors. dpl_histogram_fill adds 1 (or weight[i]) to hist[b] for each x[i] in
 * [edges[b], edges[b+1]) (the last bin closed; NaN and values outside left out); x and weight
 * float32/float64, edges float64, hist float32/float64 of numel(edges) - 1 bins.
 * dpl_scatter_reduce_fill folds src (index's shape) into out (float32/float64) along dim (0-based)
 * at the 1-based positions of index (int64): red 1 sum, 2 prod, 3 sum for a mean (the caller
 * divides), 4 amax, 5 amin (NaN wins); include_self = 0: a position's first write replaces it;
 * cnt[o] (numel(out) zeros) counts the writes to out's element o (with include_self = 1 and a
 * reduction other than 3, the counts are left as they are where index has out's shape outside
 * dim: nothing reads them then). An index out of range is an error, out and cnt perhaps partly
 * folded already. */
int dpl_histogram_fill(const dpl_tensor *x, const dpl_tensor *weight, const dpl_tensor *edges, dpl_tensor *hist);
int dpl_scatter_reduce_fill(dpl_tensor *out, int32_t dim, const dpl_tensor *index, const dpl_tensor *src,
                            int32_t red, int32_t include_self, int32_t *cnt);
/* The GPU halves of ops whose CPU loops are in Lua (src/tensor/dpl_tensor_rows_dev.c; GPU
 * tensors only, else an error). dpl_search_rows: out[r, j] (int64, contiguous) = how many of
 * the sorted row s[r, :] are below v[r, j] (right: not above); s [rows, M] and v [rows, N]
 * contiguous float64 (rows 1: one row s [M] for every value). dpl_logcumsumexp_rows: the
 * running log-add-exp along the last dim of contiguous float64 x; _grad_rows: its gradient
 * (g, x and the result o). dpl_scatter_reduce_dev: index (contiguous int64, 1-based, out's
 * ndim) and src (contiguous, index's shape, out's dtype) folded into out along dim (0-based)
 * as dpl_scatter_reduce_fill's reductions (1 sum, 2 prod, 3 mean, 4 amax, 5 amin; mean: out
 * contiguous; integers wrap, their mean floors; is_bool: uint8 data as bool, sum or and prod
 * and), in the CPU's order; the index is checked on a host copy (name: the op in messages). */
int dpl_search_rows(const dpl_tensor *s, const dpl_tensor *v, int32_t right, int64_t rows, dpl_tensor *out);
int dpl_logcumsumexp_rows(const dpl_tensor *x, dpl_tensor **out);
int dpl_logcumsumexp_grad_rows(const dpl_tensor *g, const dpl_tensor *x, const dpl_tensor *o, dpl_tensor **out);
int dpl_scatter_reduce_dev(dpl_tensor *out, int32_t dim, const dpl_tensor *index, const dpl_tensor *src, int32_t red,
                           int32_t include_self, int32_t is_bool, const char *name);
/* EmbeddingBag's sum (mean = 0) or mean (1) of the rows weight[ids - 1] (float32/float64 [V, D];
 * ids int64, 1-based) for bags b = 0..B-1 of ids bounds[b]..bounds[b+1]-1 (int64 [B+1], 1-based),
 * each row times per_sample_weights[i] (psw, or NULL) and 0 where ids[i] == pad (pad <= 0: none);
 * the mean divides by the count of ids other than pad (at least 1). out: [B, D], weight's dtype.
 * bounds[0] must be 1; bags run in parallel (each bag's row by one thread: the same bits). */
int dpl_embedding_bag_fill(const dpl_tensor *weight, const dpl_tensor *ids, const dpl_tensor *bounds,
                           const dpl_tensor *psw, int64_t pad, int32_t mean, dpl_tensor *out);

/* Softmax family over dim. log = 1: log_softmax. Backward takes the forward's output. */
int dpl_softmax(const dpl_tensor *a, int32_t dim, int32_t log, dpl_tensor **out);
int dpl_softmax_backward(const dpl_tensor *grad, const dpl_tensor *output, int32_t dim, int32_t log,
                         dpl_tensor **out);

/* Layer normalization over the last normalized_numel elements of each row of x
 * (a suffix of x's dims whose sizes multiply to it): y = (x - mean) * rstd * weight + bias,
 * rstd = 1 / sqrt(biased variance + eps). weight/bias (or NULL): normalized_numel elements,
 * x's dtype and device. Floating x; float16/bfloat16 computed in float32. mean and rstd are
 * saved per row, 1-d [rows], in float64 for float64 x and float32 otherwise. Backward takes
 * them back: grad_x in x's dtype; grad_w / grad_b (each may be NULL: not computed) in
 * weight's dtype, shaped as weight (a 1-d [normalized_numel] without weight). */
int dpl_layer_norm(const dpl_tensor *x, const dpl_tensor *weight, const dpl_tensor *bias, int64_t normalized_numel,
                   double eps, dpl_tensor **y, dpl_tensor **mean, dpl_tensor **rstd);
int dpl_layer_norm_backward(const dpl_tensor *grad_y, const dpl_tensor *x, const dpl_tensor *mean,
                            const dpl_tensor *rstd, const dpl_tensor *weight, dpl_tensor **grad_x,
                            dpl_tensor **grad_w, dpl_tensor **grad_b);

/* Batch normalization with batch statistics of a float32/float64 x [N, C, ...] (N times the rest
 * at least 2): per channel, mean and biased variance over all but dim 1, invstd = 1 / sqrt(var +
 * eps), y = (x - mean) * invstd * weight + bias (weight/bias, or NULL: C elements, x's dtype and
 * device). The statistics have the same bits as the composed ops' (mean of a [C, M] copy, then the
 * mean of the rounded squares of the centred values). running_mean / running_var (both or
 * neither, contiguous) are updated in place: r = r * (1 - momentum) + stat * momentum, the
 * variance unbiased (times M / (M - 1)). mean and invstd ([C], x's dtype) are saved for the
 * backward, which gives PyTorch's closed form: grad_x (x's shape), grad_w (weight's shape; needs a
 * weight) and grad_b ([C]); each output pointer may be NULL (not computed). Not on the GPU. */
int dpl_batch_norm(const dpl_tensor *x, const dpl_tensor *weight, const dpl_tensor *bias, dpl_tensor *running_mean,
                   dpl_tensor *running_var, double momentum, double eps, dpl_tensor **y, dpl_tensor **mean,
                   dpl_tensor **invstd);
int dpl_batch_norm_backward(const dpl_tensor *grad_y, const dpl_tensor *x, const dpl_tensor *mean,
                            const dpl_tensor *invstd, const dpl_tensor *weight, dpl_tensor **grad_x,
                            dpl_tensor **grad_w, dpl_tensor **grad_b);

/* Losses. reduction: 0 none, 1 mean, 2 sum. Targets are int64 class ids, 0-based;
 * entries equal to ignore_index are skipped. grad_out: the loss's gradient (0-d for
 * mean/sum, the per-sample shape for none). */
int dpl_cross_entropy(const dpl_tensor *logits, const dpl_tensor *target, int32_t reduction,
                      int64_t ignore_index, dpl_tensor **out);
int dpl_cross_entropy_backward(const dpl_tensor *grad_out, const dpl_tensor *logits,
                               const dpl_tensor *target, int32_t reduction, int64_t ignore_index,
                               dpl_tensor **grad_logits);
int dpl_nll_loss(const dpl_tensor *logp, const dpl_tensor *target, int32_t reduction,
                 int64_t ignore_index, dpl_tensor **out);
int dpl_nll_loss_backward(const dpl_tensor *grad_out, const dpl_tensor *logp, const dpl_tensor *target,
                          int32_t reduction, int64_t ignore_index, dpl_tensor **grad_logp);
int dpl_mse_loss(const dpl_tensor *a, const dpl_tensor *b, int32_t reduction, dpl_tensor **out);
/* gradient with respect to a (the one for b is its negation) */
int dpl_mse_loss_backward(const dpl_tensor *grad_out, const dpl_tensor *a, const dpl_tensor *b,
                          int32_t reduction, dpl_tensor **grad_a);

/* The CTC loss (src/tensor/dpl_tensor_ctc.c; Lua: nn.functional.ctc_loss), PyTorch 1.13's CPU
 * algorithm; log_probs in GPU memory run the same recursions in the CUDA backend (the other
 * arguments in host memory). log_probs [T, N, C] float32/float64 (any strides); targets int64, 0-based,
 * contiguous: [N, S] (row b holds target_lengths[b] labels) or 1-d (the targets concatenated);
 * input_lengths, target_lengths: contiguous int64 [N] (0 <= input length <= T); blank 0-based.
 * nll: [N] negative log likelihoods (inf where the target cannot be aligned; 0 / inf for an
 * input length of 0); log_alpha [N, T, 2 * max target length + 1], kept for backward, which
 * returns PyTorch's gradient with respect to log_probs ([T, N, C], contiguous) for grad [N]
 * (or 0-d); zero_infinity: sequences whose nll is inf get a zero gradient. */
int dpl_ctc_loss(const dpl_tensor *log_probs, const dpl_tensor *targets, const dpl_tensor *input_lengths,
                 const dpl_tensor *target_lengths, int64_t blank, dpl_tensor **nll, dpl_tensor **log_alpha);
int dpl_ctc_loss_backward(const dpl_tensor *grad, const dpl_tensor *log_probs, const dpl_tensor *targets,
                          const dpl_tensor *input_lengths, const dpl_tensor *target_lengths, const dpl_tensor *nll,
                          const dpl_tensor *log_alpha, int64_t blank, int32_t zero_infinity, dpl_tensor **grad_lp);

/* Linear algebra through OpenBLAS (loaded on first use). matmul follows
 * torch.matmul (1-D operands, broadcast batch dims); transposed operands are
 * handed to BLAS as such, without a copy. */
int dpl_matmul(const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out);
int dpl_mm(const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out);
int dpl_bmm(const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out);
/* beta * c + alpha * (a @ b); c broadcasts to the result. */
int dpl_addmm(const dpl_tensor *c, const dpl_tensor *a, const dpl_tensor *b, double beta, double alpha,
              dpl_tensor **out);
/* OpenBLAS name and core ("OpenBLAS 0.3.21 ... Haswell"), loading it if needed. */
const char *dpl_blas_info(void);
/* The path of the vectorised float32 math kernels (exp, log, tanh, erf, sin, ...):
 * "avx512", "avx2", "scalar" or "off" (libm per element). isa NULL: returns the path in
 * effect; else sets it ("auto": the best this CPU runs; a path the CPU lacks falls back
 * to the best it has) and returns the one now in effect; NULL for an unknown name.
 * Initially from DPL_VMATH. Every path gives the same bits. */
const char *dpl_vmath(const char *isa);
/* Threads used by kernels and OpenBLAS (DPL_NUM_THREADS, else OMP_NUM_THREADS, else cores). */
int dpl_set_num_threads(int32_t n);
int32_t dpl_get_num_threads(void);
/* Times the kernel thread pool found the machine oversubscribed so far (its caller
 * preempted, or waiting for a worker that lost its core) and used fewer threads for a
 * while (docs/tensors.md, "Threads"). */
int64_t dpl_pool_contention(void);

/* Indexing. idx tensors are int64 (or int32), 0-based. */
int dpl_index_select(const dpl_tensor *a, int32_t dim, const dpl_tensor *idx, dpl_tensor **out);
/* a[..., idx[i], ...] += src[..., i, ...] along dim */
int dpl_index_add_(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src);
/* index_select / index_add_ with idx counted from base (0 or 1: Lua's 1-based indices read in
 * place, no shifted copy); -n..-1 count from the end of the dim (PyTorch's rule). All indices
 * are checked before any write; a bad one is an error naming idx - base (0-based), or, for a
 * negative one, the value as given ("... for a dim of size n (expected 1..n, or -n..-1 from the
 * end)"). */
int dpl_index_select_base(const dpl_tensor *a, int32_t dim, const dpl_tensor *idx, int64_t base, dpl_tensor **out);
int dpl_index_add_base(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int64_t base);
int dpl_gather(const dpl_tensor *a, int32_t dim, const dpl_tensor *idx, dpl_tensor **out);
int dpl_scatter_add_(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src);
/* gather / scatter_add_ with idx counted from base (0 or 1: Lua's 1-based indices need no shifted
 * copy). Each index is checked as it is used: an out-of-range one fails the call (scatter_add_: the
 * additions before it stay, as in PyTorch's kernel), the message naming idx - base (0-based). */
int dpl_gather_base(const dpl_tensor *a, int32_t dim, const dpl_tensor *idx, int64_t base, dpl_tensor **out);
int dpl_scatter_add_base(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int64_t base);
int dpl_cat(int32_t n, dpl_tensor *const *tensors, int32_t dim, dpl_tensor **out);
int dpl_stack(int32_t n, dpl_tensor *const *tensors, int32_t dim, dpl_tensor **out);
/* weight [V, D] gathered by idx of any shape: idx.shape + [D]. */
int dpl_embedding(const dpl_tensor *weight, const dpl_tensor *idx, dpl_tensor **out);
/* gradient of embedding: [num_weights, D] zeros scatter-added with grad rows. */
int dpl_embedding_backward(const dpl_tensor *grad, const dpl_tensor *idx, int64_t num_weights,
                           dpl_tensor **out);
/* the same with ids counted from base (0 or 1), read in place (int64 or int32; no negatives) */
int dpl_embedding_base(const dpl_tensor *weight, const dpl_tensor *idx, int64_t base, dpl_tensor **out);
int dpl_embedding_backward_base(const dpl_tensor *grad, const dpl_tensor *idx, int64_t num_weights, int64_t base,
                                dpl_tensor **out);
int dpl_masked_select(const dpl_tensor *a, const dpl_tensor *mask, dpl_tensor **out);
/* 0-based int64 coordinates [nnz, ndim] of the non-zero elements. */
int dpl_nonzero(const dpl_tensor *a, dpl_tensor **out);

/* Index/scatter writes (dpl_tensor_scatter.c; dpl.tensor_index). Indices are int64 or int32,
 * 0-based; sources have self's dtype; self is written through any strides. reduce /
 * accumulate: 0 store (the last of duplicate positions wins), 1 add, 2 multiply (scatter_).
 * Host memory only ("<op>: not implemented on cuda"). */
/* a[..., idx[p], ...] (op)= src[p] for every position p of idx (a's ndim; dim takes idx's
 * value); a 0-d src is one value for every position */
int dpl_scatter_(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int32_t reduce);
/* the slices idx[j] (idx 0-d or 1-d) of a along dim set to value (one element, converted) */
int dpl_index_fill_(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *value);
/* slice idx[j] of a along dim = slice j of src (a's shape with dim's size = idx's length) */
int dpl_index_copy_(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src);
/* scatter_ / index_fill_ / index_copy_ with idx counted from base (0 or 1), read in place (no
 * shifted copy); index_fill_ and index_copy_ also take -n..-1 from the end of the dim, as
 * index_select_base (and its messages) */
int dpl_scatter_base(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int32_t reduce,
                     int64_t base);
int dpl_index_fill_base(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *value, int64_t base);
int dpl_index_copy_base(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int64_t base);
/* advanced indexing over a's first n dims: n index tensors of one shape B; values broadcast
 * to B + a.shape[n:] are stored (accumulate 0) or added (1) at a[idx0[b], ..., idx{n-1}[b]] */
int dpl_index_put_(dpl_tensor *a, int32_t n, dpl_tensor *const *indices, const dpl_tensor *values,
                   int32_t accumulate);
/* the read of the same positions: a new tensor of shape B + a.shape[n:] */
int dpl_index_get(const dpl_tensor *a, int32_t n, dpl_tensor *const *indices, dpl_tensor **out);
/* the positions where mask (bool or uint8, broadcast to a's shape) is true, in row-major
 * order, get src's first elements (src has at least as many) */
int dpl_masked_scatter_(dpl_tensor *a, const dpl_tensor *mask, const dpl_tensor *src);
/* a viewed as 1-d in row-major order: a[idx[i]] = (or +=) src[i]; idx and src of one numel */
int dpl_put_(dpl_tensor *a, const dpl_tensor *idx, const dpl_tensor *src, int32_t accumulate);
/* put_ with flat indices counted from base (0 or 1), read in place; -numel..-1 count from the
 * end ("index v is out of range for self with N elements (expected 1..N, or -N..-1 from the end)") */
int dpl_put_base(dpl_tensor *a, const dpl_tensor *idx, const dpl_tensor *src, int32_t accumulate, int64_t base);
/* the main diagonal of a (2-d, or all dims of one size) set to value; wrap: a tall 2-d
 * matrix's diagonal starts again every w + 1 rows, as PyTorch's */
int dpl_fill_diagonal_(dpl_tensor *a, const dpl_tensor *value, int32_t wrap);
/* Shape group (src/tensor/dpl_tensor_scan.c; Lua: dpl.tensor_shape): scans along a dim,
 * flip, roll, tril/triu. Host memory only ("<op>: not implemented on cuda"). A 0-d
 * input counts as one dim of size 1 (dim 0). Results are new contiguous tensors. */
typedef enum dpl_scanop {
  DPL_SCAN_SUM = 0, DPL_SCAN_PROD = 1, DPL_SCAN_MAX = 2, DPL_SCAN_MIN = 3,
  DPL_SCAN_LOGSUMEXP = 4 /* device rows only: dpl_logcumsumexp_rows */
} dpl_scanop;
/* cumsum (SUM) or cumprod (PROD) along dim, in dtype (-1: int64 for integer and bool
 * inputs, else a's dtype; a is converted first, floating dtypes accumulate in double);
 * reverse = 1 scans from the end (cumsum's gradient). */
int dpl_cumulative(int32_t op, const dpl_tensor *a, int32_t dim, int32_t dtype, int32_t reverse, dpl_tensor **out);
/* cummax (MAX) or cummin (MIN) along dim: values (a's dtype) and 0-based int64 indices;
 * a NaN takes over, ties go to the later index (PyTorch's rule). */
int dpl_cumulative_index(int32_t op, const dpl_tensor *a, int32_t dim, dpl_tensor **values, dpl_tensor **indices);
/* Gradient of result = cumprod(a, dim) for grad (floating; all three of a's shape), zeros
 * in a included (PyTorch's formula); in grad's dtype, computed in float64. */
int dpl_cumprod_backward(const dpl_tensor *grad, const dpl_tensor *a, const dpl_tensor *result, int32_t dim,
                         dpl_tensor **out);
/* a reversed along the n dims listed (distinct). */
int dpl_flip(const dpl_tensor *a, int32_t n, const int32_t *dims, dpl_tensor **out);
/* a rolled by shifts[k] along dims[k] (elements leaving at the end come back first). */
int dpl_roll(const dpl_tensor *a, int32_t n, const int64_t *shifts, const int32_t *dims, dpl_tensor **out);
/* tril (upper = 0) or triu (upper = 1) over the last two dims: row i keeps the columns j
 * with j - i <= diagonal (tril) or j - i >= diagonal (triu), the rest is 0. */
int dpl_tril(const dpl_tensor *a, int64_t diagonal, int32_t upper, dpl_tensor **out);
int dpl_tril_(dpl_tensor *a, int64_t diagonal, int32_t upper);
/* The int64 list 0,..,0, 1,..,1, ...: i repeated repeats[i] times (0-d or 1-d, >= 0). */
int dpl_repeat_interleave_index(const dpl_tensor *repeats, dpl_tensor **out);

/* Convolution and pooling, NCHW. params: stride h, w, padding h, w, dilation h, w. */
int dpl_conv2d(const dpl_tensor *x, const dpl_tensor *w, const dpl_tensor *bias, const int32_t *params,
               int32_t groups, dpl_tensor **out);
/* The host float32 conv2d algorithm: DPL_CONV_AUTO (Winograd F(2x2, 3x3) for 3x3 stride-1
 * undilated kernels with at least 8 input and output channels per group, im2col + GEMM
 * otherwise) or DPL_CONV_IM2COL (always im2col + GEMM). Returns the previous setting;
 * a negative algo only reads it. The environment's DPL_CONV_ALGO=im2col sets it at start. */
enum { DPL_CONV_AUTO = 0, DPL_CONV_IM2COL = 1 };
int32_t dpl_conv2d_algo(int32_t algo);
/* Any of the out-pointers may be NULL to skip that gradient. */
int dpl_conv2d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const dpl_tensor *w,
                        const int32_t *params, int32_t groups, dpl_tensor **grad_x,
                        dpl_tensor **grad_w, dpl_tensor **grad_bias);
/* params (7): kernel h, w, stride h, w, padding h, w, ceil_mode (0: output sizes rounded down,
 * 1: up, PyTorch's ceil_mode). indices: 0-based positions in each H*W plane. */
int dpl_max_pool2d(const dpl_tensor *x, const int32_t *params, dpl_tensor **out, dpl_tensor **indices);
int dpl_max_pool2d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const dpl_tensor *indices,
                            dpl_tensor **grad_x);
int dpl_avg_pool2d(const dpl_tensor *x, const int32_t *params, int32_t count_include_pad, dpl_tensor **out);
int dpl_avg_pool2d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const int32_t *params,
                            int32_t count_include_pad, dpl_tensor **grad_x);

/* 3-d pooling of x [N, C, D, H, W] (src/tensor/dpl_tensor_pool3d.c; Lua: max_pool3d / avg_pool3d of
 * dpl.nn.functional_conv3d). Host memory only ("<op>: not implemented on cuda"); floating inputs
 * (float16/bfloat16 computed in float32). params (13): kernel d, h, w, stride d, h, w, padding d,
 * h, w, dilation d, h, w (1 for the average), ceil_mode. Max: indices are 0-based positions in
 * each D*H*W volume, the first maximum in window order (a NaN wins). Average: divisor != 0
 * overrides the window's count (count_include_pad: 1 counts the padding, 0 does not). */
int dpl_max_pool3d(const dpl_tensor *x, const int32_t *params, dpl_tensor **out, dpl_tensor **indices);
int dpl_max_pool3d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const dpl_tensor *indices,
                            dpl_tensor **grad_x);
int dpl_avg_pool3d(const dpl_tensor *x, const int32_t *params, int32_t count_include_pad, int32_t divisor,
                   dpl_tensor **out);
int dpl_avg_pool3d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const int32_t *params,
                            int32_t count_include_pad, int32_t divisor, dpl_tensor **grad_x);

/* The conv group of nn (src/tensor/dpl_tensor_nnconv.c; Lua: dpl.nn.functional_conv): unfold/fold,
 * padding, interpolation, adaptive pooling, 1-d max pooling. Host memory only ("<op>: not
 * implemented on cuda"). Floating inputs (float16/bfloat16 computed in float32), except
 * dpl_pad and nearest interpolation, which move elements of any dtype. Results are new
 * contiguous tensors in the input's dtype.
 * im2col (F.unfold): x [N, C, H, W] -> [N, C*kh*kw, L] (row c*kh*kw + i*kw + j, L = OH*OW blocks);
 * col2im (F.fold): [N, C*kh*kw, L] summed back into [N, C, H, W]. params (8): kernel h, w,
 * dilation h, w, padding h, w, stride h, w. */
int dpl_im2col(const dpl_tensor *x, const int32_t *params, dpl_tensor **out);
int dpl_col2im(const dpl_tensor *cols, int64_t H, int64_t W, const int32_t *params, dpl_tensor **out);
/* The last n dims (1..3) of x padded: pads[2k], pads[2k+1] before and after padded dim k (in
 * dim order; negative crops). mode: 0 constant (value), 1 reflect, 2 replicate, 3 circular.
 * The backward takes the padded gradient and the same pads (the input sizes follow). */
int dpl_pad(const dpl_tensor *x, int32_t n, const int64_t *pads, int32_t mode, double value, dpl_tensor **out);
int dpl_pad_backward(const dpl_tensor *grad, int32_t n, const int64_t *pads, int32_t mode, dpl_tensor **out);
/* x [N, C, W] (nsp 1) or [N, C, H, W] (nsp 2) resized to size[0..nsp-1]. mode: 0 nearest, 1
 * nearest-exact, 2 linear (bilinear for 2 dims). scales[k] > 0: the scale factor given for
 * spatial dim k (PyTorch maps coordinates with 1/scale), else in/out; align_corners for linear.
 * The backward takes the output's gradient and the input's spatial sizes. */
int dpl_interpolate(const dpl_tensor *x, int32_t nsp, const int64_t *size, const double *scales, int32_t mode,
                    int32_t align_corners, dpl_tensor **out);
int dpl_interpolate_backward(const dpl_tensor *grad, int32_t nsp, const int64_t *in_size, const double *scales,
                             int32_t mode, int32_t align_corners, dpl_tensor **out);
/* Adaptive pooling of x [N, C, H, W] to [N, C, oh, ow], PyTorch's windows [floor(i*H/oh),
 * ceil((i+1)*H/oh)); max: indices are 0-based positions in each H*W plane (backward:
 * dpl_max_pool2d_backward). Any device (GPU tensors in the CUDA backend). */
int dpl_adaptive_avg_pool2d(const dpl_tensor *x, int64_t oh, int64_t ow, dpl_tensor **out);
int dpl_adaptive_avg_pool2d_backward(const dpl_tensor *grad, int64_t H, int64_t W, dpl_tensor **out);
int dpl_adaptive_max_pool2d(const dpl_tensor *x, int64_t oh, int64_t ow, dpl_tensor **out, dpl_tensor **indices);
/* x [N, C, L]; params (5): kernel, stride, padding, dilation, ceil_mode. indices: 0-based
 * positions in L (backward: dpl_max_pool2d_backward on [N, C, 1, *] views). */
int dpl_max_pool1d(const dpl_tensor *x, const int32_t *params, dpl_tensor **out, dpl_tensor **indices);

/* safetensors files: read through mmap (tensors share the mapping), written
 * atomically (temp file, fsync, rename). */
typedef struct dpl_st_file dpl_st_file;
int dpl_st_open(const char *path, dpl_st_file **out);
void dpl_st_close(dpl_st_file *f);
int32_t dpl_st_count(const dpl_st_file *f);
const char *dpl_st_name(const dpl_st_file *f, int32_t i);
int dpl_st_get(const dpl_st_file *f, int32_t i, dpl_tensor **out);
int32_t dpl_st_metadata_count(const dpl_st_file *f);
const char *dpl_st_metadata_key(const dpl_st_file *f, int32_t i);
const char *dpl_st_metadata_value(const dpl_st_file *f, int32_t i);
int dpl_st_write(const char *path, int32_t n, const char *const *names, dpl_tensor *const *tensors,
                 int32_t nmeta, const char *const *keys, const char *const *values);

/* ---- collectives (src/comm/) ----
 * A dpl_comm is one process group. Backends: SHM (processes on one host, one
 * shared-memory segment per group) and MPI (Open MPI's libmpi, loaded with
 * dlopen on first use). Buffers are raw host memory: count elements of a
 * dpl_dtype. Ranks are 0-based group ranks. Every call is collective: all ranks
 * of the group make the same calls in the same order; a mismatch (kind, dtype,
 * count, op, root, sequence number) fails on every rank with DPL_ECOMM. Waits
 * end with DPL_ETIMEOUT after the group's timeout, DPL_ECOMM when a peer died,
 * left or failed, DPL_EINTR on SIGINT/SIGTERM. After a failure the group is
 * unusable and every call repeats the first error. */
typedef struct dpl_comm dpl_comm;
typedef enum dpl_comm_backend { DPL_COMM_SHM = 0, DPL_COMM_MPI = 1 } dpl_comm_backend;
typedef enum dpl_comm_op {
  DPL_COMM_SUM = 0, DPL_COMM_AVG = 1, DPL_COMM_MAX = 2, DPL_COMM_MIN = 3, DPL_COMM_PROD = 4
} dpl_comm_op;

/* job: [A-Za-z0-9_-]+ naming the segment (/dev/shm/dpl-<job>-g0); rank in
 * [0, world_size). timeout_s <= 0: DPL_COMM_TIMEOUT, else 1800 s. */
int dpl_comm_init_shm(const char *job, int32_t rank, int32_t world_size, double timeout_s, dpl_comm **out);
/* MPI_COMM_WORLD of libmpi (MPI_Init_thread on first use). */
int dpl_comm_init_mpi(double timeout_s, dpl_comm **out);
/* "" when libmpi can be loaded, else why not (loads it on first call). */
const char *dpl_comm_mpi_unavailable_reason(void);
/* 1 when this process initialised MPI and has not finalized it (MPI lives until exit,
 * also after destroy_process_group): such a process must not fork. Never loads libmpi. */
int32_t dpl_comm_mpi_initialized(void);
/* Subgroup of the ranks listed (parent ranks, increasing, no repeats). Every rank of
 * the parent calls it with the same list; *out is NULL on ranks not in the list. */
int dpl_comm_new_group(dpl_comm *parent, int32_t n, const int32_t *ranks, dpl_comm **out);
/* Leaves the group and frees the handle (not collective; peers still waiting on
 * this rank get DPL_ECOMM). NULL is ignored. */
void dpl_comm_destroy(dpl_comm *c);
/* Marks the group failed with reason: every rank's current and next call fails. */
int dpl_comm_abort(dpl_comm *c, const char *reason);
int32_t dpl_comm_rank(const dpl_comm *c);
int32_t dpl_comm_size(const dpl_comm *c);
int32_t dpl_comm_backend_of(const dpl_comm *c);
/* Collectives issued so far on this group. */
int64_t dpl_comm_seq(const dpl_comm *c);
int dpl_comm_set_timeout(dpl_comm *c, double seconds);
/* The group's timeout in seconds (0 for NULL). */
double dpl_comm_timeout(const dpl_comm *c);
/* on = 1 (DPL_COMM_CHECK): ranks compare every call's descriptor before data moves. The shm
 * backend always does (within the call's first synchronisation); mpi adds an MPI_Allgather. */
int dpl_comm_set_check(dpl_comm *c, int32_t on);

int dpl_comm_barrier(dpl_comm *c);
/* In place; AVG needs a floating dtype; BOOL: SUM/MAX = or, PROD/MIN = and. */
int dpl_comm_all_reduce(dpl_comm *c, void *buf, int64_t count, int32_t dtype, int32_t op);
/* all_reduce of several buffers of one dtype as one call over their concatenation
 * (a DDP gradient bucket reduced in place, without a flat copy); counts in elements. */
int dpl_comm_all_reduce_multi(dpl_comm *c, void *const *bufs, const int64_t *counts, int32_t nbufs, int32_t dtype,
                              int32_t op);
/* In place on root; other ranks' buffers are left as they were. */
int dpl_comm_reduce(dpl_comm *c, void *buf, int64_t count, int32_t dtype, int32_t op, int32_t root);
int dpl_comm_broadcast(dpl_comm *c, void *buf, int64_t count, int32_t dtype, int32_t root);
/* recv holds size*count elements, rank k's block at k*count. */
int dpl_comm_all_gather(dpl_comm *c, const void *send, void *recv, int64_t count, int32_t dtype);
/* recv (size*count elements) is used on root only (may be NULL elsewhere). */
int dpl_comm_gather(dpl_comm *c, const void *send, void *recv, int64_t count, int32_t dtype, int32_t root);
/* send (size*count elements) is read on root only; every rank receives count elements. */
int dpl_comm_scatter(dpl_comm *c, const void *send, void *recv, int64_t count, int32_t dtype, int32_t root);
/* send holds size*count elements; rank k receives block k reduced over ranks. */
int dpl_comm_reduce_scatter(dpl_comm *c, const void *send, void *recv, int64_t count, int32_t dtype, int32_t op);
/* Rendezvous store (torch's TCPStore): rank 0 hosts it (is_server = 1; port 0 picks
 * a free port, see dpl_store_port), every rank connects (host NULL: 127.0.0.1).
 * get waits until the key exists (timeout_s <= 0: the store's timeout); the value
 * stays valid until the next call on this handle. add keeps a decimal counter. */
typedef struct dpl_store dpl_store;
int dpl_store_create(const char *host, int32_t port, int32_t is_server, double timeout_s, dpl_store **out);
int32_t dpl_store_port(const dpl_store *s);
void dpl_store_destroy(dpl_store *s);
int dpl_store_set(dpl_store *s, const char *key, const void *val, int64_t len);
int dpl_store_get(dpl_store *s, const char *key, double timeout_s, const uint8_t **val, int64_t *len);
int dpl_store_add(dpl_store *s, const char *key, int64_t delta, int64_t *out);
int dpl_store_delete(dpl_store *s, const char *key, int32_t *existed);
/* For launchers, after every rank of a job exited: removes the job's shm segment
 * names left in /dev/shm (only possible when a rank died during the rendezvous). */
int dpl_comm_shm_cleanup(const char *job, int32_t *removed);
/* NCCL (through the CUDA plugin, which loads libnccl.so.2 on first use): one
 * communicator per process group for tensors in GPU memory, bootstrapped by
 * the group's host backend carrying rank 0's unique id. Tensors are contiguous,
 * on the communicator's device; work is queued on that device's compute stream. */
typedef struct dpl_nccl dpl_nccl;
/* "" when NCCL can be used (plugin, libnccl, a GPU), else why not. */
const char *dpl_nccl_unavailable_reason(void);
/* The 128-byte ncclUniqueId of a new communicator (rank 0 makes it). */
int dpl_nccl_unique_id(uint8_t *id, int32_t len);
/* Collective over the ranks: every rank passes rank 0's id and its GPU. */
int dpl_nccl_init(const uint8_t *id, int32_t len, int32_t nranks, int32_t rank, int32_t device, dpl_nccl **out);
void dpl_nccl_destroy(dpl_nccl *c);
/* In place; op is a dpl_comm_op: AVG needs a floating dtype; bool: SUM/MAX = or, PROD/MIN = and. */
int dpl_nccl_all_reduce(dpl_nccl *c, dpl_tensor *t, int32_t op);
int dpl_nccl_reduce(dpl_nccl *c, dpl_tensor *t, int32_t op, int32_t root);
int dpl_nccl_broadcast(dpl_nccl *c, dpl_tensor *t, int32_t root);
/* recv holds nranks * send's elements, rank k's block at k * numel. */
int dpl_nccl_all_gather(dpl_nccl *c, const dpl_tensor *send, dpl_tensor *recv);
/* ncclGetVersion's code of the loaded libnccl (2.10.3 -> 21003); 0 when not loaded. */
int32_t dpl_nccl_version(void);
/* send holds nranks blocks of recv's size; recv gets op over the ranks of block `rank`. */
int dpl_nccl_reduce_scatter(dpl_nccl *c, const dpl_tensor *send, dpl_tensor *recv, int32_t op);
/* Blocks of send's size; recv (nranks blocks) only on root, NULL elsewhere. ncclSend/ncclRecv. */
int dpl_nccl_gather(dpl_nccl *c, const dpl_tensor *send, dpl_tensor *recv, int32_t root);
/* send (nranks blocks of recv's size) only on root, NULL elsewhere. ncclSend/ncclRecv. */
int dpl_nccl_scatter(dpl_nccl *c, const dpl_tensor *send, dpl_tensor *recv, int32_t root);
/* send and recv: nranks equal blocks; rank j's block k lands in rank k's block j. */
int dpl_nccl_all_to_all(dpl_nccl *c, const dpl_tensor *send, dpl_tensor *recv);
/* A subgroup's communicator (ncclCommSplit, NCCL 2.18+; DPL_ENOTIMPL when the loaded
 * libnccl lacks it): collective over every rank of parent; color < 0 for a rank
 * outside the subgroup (*out = NULL); new_rank/new_size: the rank and size in it. */
int dpl_nccl_split(dpl_nccl *parent, int32_t color, int32_t key, int32_t new_rank, int32_t new_size, dpl_nccl **out);
/* Local helper: dst = dst op src elementwise (AVG acts as SUM), same rules as the collectives. */
int dpl_comm_reduce_local(void *dst, const void *src, int64_t count, int32_t dtype, int32_t op);

#endif
