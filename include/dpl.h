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
/* 128+signal number of the first SIGINT/SIGTERM received, 0 when none. */
int32_t dpl_signal_received(void);
/* Monotonic clock in seconds. */
double dpl_clock(void);
/* Sleeps; returns DPL_EINTR when a SIGINT/SIGTERM arrived meanwhile. */
int dpl_sleep(double seconds);

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

#endif
