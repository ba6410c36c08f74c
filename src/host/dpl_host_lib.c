/* dpl_host_lib.c: the preloaded Lua module `dpl.host`: what only the host can
 * give Lua because it needs the lua_State — atexit cleanups (also run by
 * os.exit and after SIGINT/SIGTERM), signal handling around running chunks
 * (never touching the state once it is being closed),
 * the embedded C header text for ffi.cdef, and the REPL's line reader (libedit
 * loaded with dlopen when a terminal asks for it, plain stdio otherwise). */
#define _GNU_SOURCE
#include "dpl.h"
#include "dpl_internal.h"
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <lua.h>
#include <lauxlib.h>

/* ---------------------------------------------------------------- signals */

#if ATOMIC_POINTER_LOCK_FREE != 2
#error "the signal handler needs a lock-free atomic pointer"
#endif
/* The running state; NULL once it is being closed. Before lua_close the previous
 * dispositions come back (dpl_signals_uninstall): the handler never touches a
 * freed state, e.g. when MPI_Finalize waits in a C exit handler and mpirun sends
 * SIGTERM. */
static _Atomic(lua_State *) sigL;
static struct sigaction saved_actions[2]; /* SIGINT, SIGTERM as dplhost found them */
static int installed;
static volatile sig_atomic_t sig_first;    /* signal number of the first SIGINT/SIGTERM */
static volatile sig_atomic_t sig_count;
static volatile sig_atomic_t in_readline;  /* the REPL is waiting for a line */
static volatile sig_atomic_t readline_interrupted;
static volatile sig_atomic_t interactive;  /* the REPL runs: never exit on the grace timer */
static const char atexit_key[] = "dpl.host.atexit";

static void interrupt_hook(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  alarm(0);
  lua_pushstring(L, sig_first == SIGTERM ? "interrupted (SIGTERM)" : "interrupted");
  lua_error(L);
}

static void on_grace_expired(int sig)
{
  (void)sig;
  static const char msg[] = "dplhost: the script did not stop within 5 s of the signal; exiting\n";
  static const char imsg[] = "\ndplhost: the running chunk cannot be interrupted (a compiled loop or a long C "
                             "call); press Ctrl-C again to quit\n";
  ssize_t r;
  if (interactive) { r = write(STDERR_FILENO, imsg, sizeof imsg - 1); (void)r; return; }
  r = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)r;
  _exit(128 + (sig_first ? sig_first : SIGTERM));
}

static void on_signal(int sig)
{
  if (in_readline) { readline_interrupted = 1; return; }
  sig_count++;
  if (sig_count > 1) _exit(128 + sig); /* second signal: no more waiting */
  sig_first = sig;
  /* The hook fires at the next Lua instruction, call or return: the running chunk
   * raises "interrupted". Code in a compiled loop or a long C call does not see it,
   * so a watchdog ends the process if nothing happened after a grace period. */
  lua_State *L = atomic_load(&sigL);
  if (!L) _exit(128 + sig); /* the state is being closed: nothing left to stop */
  lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
  signal(SIGALRM, on_grace_expired);
  alarm(5);
}

void dpl_signals_install(lua_State *L)
{
  atomic_store(&sigL, L);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, installed ? NULL : &saved_actions[0]);
  sigaction(SIGTERM, &sa, installed ? NULL : &saved_actions[1]);
  installed = 1;
}

void dpl_signals_uninstall(void)
{
  if (!installed) return;
  atomic_store(&sigL, NULL);
  sigaction(SIGINT, &saved_actions[0], NULL);
  sigaction(SIGTERM, &saved_actions[1], NULL);
  installed = 0;
}

void dpl_signals_clear(void)
{
  alarm(0);
  lua_State *L = atomic_load(&sigL);
  if (L) lua_sethook(L, NULL, 0, 0);
  sig_first = 0;
  sig_count = 0;
}

int32_t dpl_signal_received(void) { return sig_first ? 128 + sig_first : 0; }

/* ---------------------------------------------------------------- atexit */

static int host_atexit(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_getfield(L, LUA_REGISTRYINDEX, atexit_key);
  int n = (int)lua_objlen(L, -1);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, n + 1);
  return 0;
}

void dpl_host_run_atexit(lua_State *L)
{
  /* Take the list out first, so a cleanup that exits or fails never reruns. */
  lua_getfield(L, LUA_REGISTRYINDEX, atexit_key);
  if (!lua_istable(L, -1)) { lua_pop(L, 1); return; }
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, atexit_key);
  dpl_signals_clear();
  for (int i = (int)lua_objlen(L, -1); i >= 1; i--) {
    lua_rawgeti(L, -1, i);
    if (lua_pcall(L, 0, 0, 0) != 0) {
      fprintf(stderr, "dplhost: error in atexit handler: %s\n",
              lua_tostring(L, -1) ? lua_tostring(L, -1) : "(non-string error)");
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

/* Drops every registered cleanup (a forked worker must not run its parent's). */
static int host_clear_atexit(lua_State *L)
{
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, atexit_key);
  return 0;
}

/* os.exit replacement: runs the atexit cleanups, then the original os.exit. */
static int host_os_exit(lua_State *L)
{
  dpl_host_run_atexit(L);
  fflush(stdout);
  dpl_signals_uninstall(); /* os.exit(code, true) closes the state */
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_pcall(L, lua_gettop(L) - 1, 0, 0); /* returns only on a bad argument */
  dpl_signals_install(L);
  return lua_error(L);
}

/* Clears a pending interrupt (the REPL calls it after reporting one). */
static int host_clear_interrupt(lua_State *L)
{
  (void)L;
  dpl_signals_clear();
  return 0;
}

/* set_interactive(flag): the REPL is in charge; a stuck chunk waits for a second Ctrl-C. */
static int host_set_interactive(lua_State *L)
{
  interactive = lua_toboolean(L, 1);
  return 0;
}

/* ---------------------------------------------------------------- line reader */

typedef char *(*readline_fn)(const char *);
typedef int (*add_history_fn)(const char *);
typedef int (*history_file_fn)(const char *);
typedef void (*stifle_fn)(int);

static struct {
  int tried;
  void *lib;
  readline_fn readline;
  add_history_fn add_history;
  history_file_fn read_history, write_history;
  stifle_fn stifle_history;
} edit;

static void load_libedit(void)
{
  if (edit.tried) return;
  edit.tried = 1;
  if (!isatty(STDIN_FILENO) || getenv("DPL_NO_LINEEDIT")) return;
  edit.lib = dlopen("libedit.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!edit.lib) return;
  edit.readline = (readline_fn)dlsym(edit.lib, "readline");
  edit.add_history = (add_history_fn)dlsym(edit.lib, "add_history");
  edit.read_history = (history_file_fn)dlsym(edit.lib, "read_history");
  edit.write_history = (history_file_fn)dlsym(edit.lib, "write_history");
  edit.stifle_history = (stifle_fn)dlsym(edit.lib, "stifle_history");
  if (!edit.readline) { dlclose(edit.lib); memset(&edit, 0, sizeof edit); edit.tried = 1; return; }
  if (edit.stifle_history) edit.stifle_history(1000);
}

/* readline(prompt) -> line | nil (end of input), interrupted (boolean) */
static int host_readline(lua_State *L)
{
  const char *prompt = luaL_optstring(L, 1, "");
  load_libedit();
  readline_interrupted = 0;
  in_readline = 1;
  if (edit.readline) {
    char *line = edit.readline(prompt);
    in_readline = 0;
    if (line) { lua_pushstring(L, line); free(line); }
    else lua_pushnil(L);
  } else {
    if (isatty(STDIN_FILENO)) { fputs(prompt, stdout); fflush(stdout); }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    int c, got = 0;
    while ((c = getchar()) != EOF && c != '\n') { luaL_addchar(&b, (char)c); got = 1; }
    in_readline = 0;
    if (c == EOF && !got) { clearerr(stdin); lua_pushnil(L); }
    else luaL_pushresult(&b);
  }
  lua_pushboolean(L, readline_interrupted);
  readline_interrupted = 0;
  return 2;
}

static int host_add_history(lua_State *L)
{
  const char *line = luaL_checkstring(L, 1);
  if (edit.add_history) edit.add_history(line);
  return 0;
}

static int host_history_file(lua_State *L, int write)
{
  const char *path = luaL_checkstring(L, 1);
  history_file_fn fn = write ? edit.write_history : edit.read_history;
  lua_pushboolean(L, fn && fn(path) == 0);
  return 1;
}
static int host_read_history(lua_State *L) { return host_history_file(L, 0); }
static int host_write_history(lua_State *L) { return host_history_file(L, 1); }

static int host_line_editing(lua_State *L)
{
  load_libedit();
  lua_pushboolean(L, edit.readline != NULL);
  return 1;
}

static int host_isatty(lua_State *L)
{
  lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
  return 1;
}

/* ---------------------------------------------------------------- tensors */

/* The tensor handles' finalizer (ffi.gc): a plain lua_CFunction, which LuaJIT's GC
 * calls directly instead of through the FFI's generic call path, as it would a C
 * function pointer (most of a small tensor's release cost). The cdata holds the
 * handle as a `dpl_tensor &` or a `dpl_tensor *`, both stored as the pointer. */
#define DPL_LUA_TCDATA 10 /* LuaJIT's lua_type() of a cdata (not in its lua.h) */
static int host_tensor_release(lua_State *L)
{
  if (lua_type(L, 1) != DPL_LUA_TCDATA) return luaL_argerror(L, 1, "tensor handle (cdata) expected");
  dpl_tensor *const *p = lua_topointer(L, 1);
  if (p) dpl_tensor_release(*p);
  return 0;
}

/* ---------------------------------------------------------------- module */

static int host_open_module(lua_State *L)
{
  static const luaL_Reg fns[] = {
    {"atexit", host_atexit},
    {"clear_atexit", host_clear_atexit},
    {"clear_interrupt", host_clear_interrupt},
    {"set_interactive", host_set_interactive},
    {"readline", host_readline},
    {"add_history", host_add_history},
    {"read_history", host_read_history},
    {"write_history", host_write_history},
    {"line_editing", host_line_editing},
    {"isatty", host_isatty},
    {"tensor_release", host_tensor_release},
    {NULL, NULL}
  };
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  lua_pushstring(L, dpl_header_text);
  lua_setfield(L, -2, "header");
  lua_pushstring(L, dpl_version());
  lua_setfield(L, -2, "version");
  return 1;
}

void dpl_host_open(lua_State *L)
{
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, atexit_key);
  /* package.preload['dpl.host'] */
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, host_open_module);
  lua_setfield(L, -2, "dpl.host");
  lua_pop(L, 2);
  /* os.exit runs the atexit cleanups first */
  lua_getglobal(L, "os");
  lua_getfield(L, -1, "exit");
  lua_pushcclosure(L, host_os_exit, 1);
  lua_setfield(L, -2, "exit");
  lua_pop(L, 1);
}
