/* dpl_internal.h: declarations shared between the host's C files, not part of
 * the Lua-visible API in include/dpl.h. */
#ifndef DPL_INTERNAL_H
#define DPL_INTERNAL_H
#include "dpl.h"

#ifndef DPL_VERSION_STRING
#define DPL_VERSION_STRING "0.1.0"
#endif

/* printf-style error setter; returns status so callers can `return dpl_errorf(...)`. */
int dpl_errorf(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Embedded text of include/dpl.h without preprocessor lines (generated at build time). */
extern const char dpl_header_text[];

struct lua_State;
/* Registers the preloaded `dpl.host` module (atexit, readline, header text…). */
void dpl_host_open(struct lua_State *L);
/* Signal handling around running Lua code (SIGINT, SIGTERM, SIGUSR1): install
 * (also records the Lua thread), uninstall before lua_close (the previous
 * dispositions come back), clear the pending signal, and reset a forked child
 * (no hold, nothing pending). */
void dpl_signals_install(struct lua_State *L);
void dpl_signals_uninstall(void);
void dpl_signals_clear(void);
void dpl_signals_after_fork(void);
/* Runs the functions registered with dpl.host.atexit (last registered first,
 * including those registered meanwhile by a running one). */
void dpl_host_run_atexit(struct lua_State *L);
/* Pushes the text of the error object at idx and returns it: strings and numbers
 * as they are, other values through __tostring (called in protected mode), else
 * "(error object is a T value)"; a __tostring that fails or returns no string is
 * described instead of raising. */
const char *dpl_host_error_text(struct lua_State *L, int idx);
/* The reason CUDA is refused in this process (dpl_cuda_forbid), NULL when it is not. */
const char *dpl_cuda_forbidden(void);
/* Prints the device table of `dplhost --devices`. */
int dpl_print_devices(void);
#endif
