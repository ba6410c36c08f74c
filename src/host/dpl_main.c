/* dpl_main.c: the dplhost command line. Parses options the way `luajit` does
 * (-e, -l, -i, -, --), adds the host's own (--help, --version, --devices,
 * --busted, --nproc), sets up the Lua state (library paths relative to the
 * binary, the preloaded dpl.host module, signal handling) and runs the script,
 * the REPL or the test runner. Exit status: 0, the script's os.exit code, 1 on
 * an uncaught error, 2 on bad usage, 128+N after signal N. */
#define _GNU_SOURCE
#include "dpl.h"
#include "dpl_internal.h"
#include "dpl_launch.h"
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include <luajit.h>

static const char usage_text[] =
  "usage: dplhost [options] [script [args...]]\n"
  "Runs a LuaJIT script with the dplhost runtime; with no script, starts the REPL\n"
  "(or runs stdin when it is not a terminal).\n"
  "\n"
  "Options:\n"
  "  -e chunk        Execute string 'chunk'.\n"
  "  -l name         Require library 'name' into the global 'name'; -l g=name: into 'g'.\n"
  "  -i              Enter the REPL after running 'script' or the -e chunks.\n"
  "  -v, --version   Show version information.\n"
  "  -h, --help      Show this help.\n"
  "  --devices       List the devices found (CPU, CUDA GPUs or why none, simulated GPUs).\n"
  "  --busted [...]  Run the busted test runner inside the host (busted's own options follow).\n"
  "  --nproc N       Launch N ranks of the script on this node; each gets RANK, LOCAL_RANK,\n"
  "                  WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT,\n"
  "                  DPL_JOB_ID; output lines are prefixed '[rank k]'; the first failing rank\n"
  "                  stops the others and sets the exit status.\n"
  "  --nnodes M      Nodes in the job (default 1); with --node-rank R (0-based).\n"
  "  --master-addr A, --master-port P   Rendezvous address (default 127.0.0.1, a free port).\n"
  "                  (torchrun's spellings work too: --nproc-per-node, --nproc_per_node,\n"
  "                  --node_rank, --master_addr, --master_port.)\n"
  "  --log-all-ranks INFO output from every rank, not only rank 0.\n"
  "  --max-restarts K  When a rank fails, stop the others and start all N ranks again,\n"
  "                  up to K times (default 0; one node); the ranks get DPL_RESTART_COUNT\n"
  "                  (and TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS). Resume with\n"
  "                  fit(..., {ckpt_path='last'}) and ModelCheckpoint{save_last=true}.\n"
  "  --              Stop handling options.\n"
  "  -               Execute stdin and stop handling options.\n"
  "\n"
  "Environment (docs/ has the details):\n"
  " host\n"
  "  DPL_PATH               Directories (':'-separated) holding the dpl Lua library; default:\n"
  "                         <bindir>/lua, then <bindir>/../share/dplhost/lua.\n"
  "  LUA_PATH, LUA_CPATH    Extra Lua module paths (';;' expands to the default).\n"
  "  DPL_HISTORY            REPL history file (default ~/.dplhost_history; empty: none).\n"
  "  DPL_NO_LINEEDIT        Set: the REPL reads plain lines (no libedit).\n"
  "  DPL_LINE_BUFFERED      Line-buffer stdout (the launcher sets it for its ranks).\n"
  " threads and memory\n"
  "  DPL_NUM_THREADS        Kernel threads (1-256; default OMP_NUM_THREADS, else the cores;\n"
  "                         the launcher gives each rank cores/N unless one of them is set).\n"
  "  OMP_NUM_THREADS        Kernel and OpenBLAS threads when DPL_NUM_THREADS is not set.\n"
  "  DPL_SPIN_US            How long idle kernel threads spin before sleeping (default 200).\n"
  "  DPL_GC_BYTES           Tensor bytes between full Lua collections.\n"
  "  DPL_GC_HANDLES         Tensor handles between full Lua collections (default 8192).\n"
  "  DPL_GC_SOFT_LIMIT      Bytes of growth at which dpl.maybe_collect() collects (512 MiB).\n"
  "  DPL_WARM_BYTES         Large blocks freed more recently than this are written cache-warm.\n"
  "  DPL_SGEMM, DPL_GEMM_PAR_MIN, DPL_CONV_CHUNK_KB\n"
  "                         GEMM choice (blas: OpenBLAS only), parallel GEMM threshold, conv chunk.\n"
  "  DPL_SGEMM_SMALLM       0: float32 products of 1-3 rows go to OpenBLAS too (comparisons).\n"
  "  DPL_SGEMM_OWN_MIN      Multiply-adds from which float32 matmul/mm/bmm/addmm use dplhost's\n"
  "                         AVX-512 GEMM (default 32768; 2^20 on AMD Zen 4, see docs/tensors.md).\n"
  "  DPL_CONV_ALGO, DPL_WINOGRAD_CHUNK_KB\n"
  "                         conv2d: im2col turns off float32 Winograd F(2x2,3x3); its chunk (KiB).\n"
  "  DPL_VMATH              float32 exp/log/tanh/erf/... kernels: avx512, avx2, scalar, off (libm)\n"
  "                         or auto (default: the best this CPU runs; every path, the same bits).\n"
  " data, logging\n"
  "  DPL_DATA_CACHE         Dataset cache directory (0: none; default $XDG_CACHE_HOME/dplhost or\n"
  "                         ~/.cache/dplhost).\n"
  "  DPL_LOG_ALL_RANKS      1: INFO output from every rank, not only rank 0 (--log-all-ranks).\n"
  " distributed\n"
  "  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT\n"
  "                         The rank environment (set by --nproc, torchrun-style).\n"
  "  DPL_JOB_ID             Names the job's shared memory (set by --nproc).\n"
  "  DPL_LAUNCH_STATE_FD    Where a rank reads that the launcher stops it for another rank's\n"
  "                         failure (set by --nproc).\n"
  "  DPL_RESTART_COUNT      Which restart of the ranks this is: 0, 1, ... (set by --nproc).\n"
  "  DPL_LAUNCH_WARN_HOLD   Seconds the launcher holds a rank's WARNING line to print it once for\n"
  "                         every rank that sends the same (default 0.5; 0: no collapsing).\n"
  "  DPL_DIST_BACKEND       Default backend of dist.init_process_group (shm, mpi, nccl).\n"
  "  DPL_COMM_TIMEOUT       Collective and store timeout in seconds (default 1800).\n"
  "  DPL_COMM_CHECK         0: skip the check that every rank calls the same collective\n"
  "                         (mpi: one MPI_Allgather of the call's descriptor; on by default).\n"
  "  DPL_COMM_SHM_SLOT, DPL_COMM_SPIN_US, DPL_COMM_YIELD_US   shm backend tuning.\n"
  "  DPL_COMM_SLOT_NT       shm all_reduce stores into the slots: 0 plain, 1 streaming (default:\n"
  "                         whichever rank 0 measured cheaper). DPL_COMM_BACK=0: the own reduced\n"
  "                         part is copied out of the slot instead of written back (comparisons).\n"
  "  DPL_CHAN_BUF           Socket buffer bytes between a DataLoader and its workers (4 MiB).\n"
  "  DPL_LIBMPI, DPL_LIBNCCL  Which libmpi / libnccl to load.\n"
  " devices\n"
  "  CUDA_VISIBLE_DEVICES   Which real GPUs are visible, and their order.\n"
  "  DPL_CUDA_PLUGIN        Path of the CUDA plugin (off: none; default dpl_cuda.so beside dplhost).\n"
  "  DPL_CUDA_SYNC_CHECKS   1 (or CUDA_LAUNCH_BLOCKING=1): GPU index checks raise at their op.\n"
  "  DPL_CUDA_POISON        1: fill new GPU allocations with 0xff bytes (NaN): unwritten outputs show.\n"
  "  DPL_LIBCUSOLVER        Which libcusolver dpl.linalg loads for GPU tensors (default libcusolver.so.12).\n"
  "  DPL_VIRTUAL_GPUS       Simulate N GPUs cuda:0..N-1 backed by host memory.\n"
  "  DPL_VIRTUAL_GPUS_BUSY  Comma-separated simulated GPU ids whose allocations fail (busy).\n";

static lua_State *globalL;
static int nil_error_is_quiet; /* busted ends with error(nil) after printing its own report */

/* True when some frame from `level` up runs Lua code (not only C functions). */
static int has_lua_frame(lua_State *L, int level)
{
  lua_Debug ar;
  for (; lua_getstack(L, level, &ar); level++) {
    if (lua_getinfo(L, "S", &ar) && strcmp(ar.what, "C") != 0) return 1;
  }
  return 0;
}

/* Message handler: traceback for runtime errors; nil passes under busted (its quiet
 * exit), elsewhere it is described (error() with no message would otherwise end the
 * script with status 1 and nothing said). An error object prints through its
 * __tostring (one that fails is described). A traceback of C frames only (`-l` of a
 * module that is not found: "[C]: at 0x...") is left out. */
static int traceback_handler(lua_State *L)
{
  if (lua_isnoneornil(L, 1)) {
    if (nil_error_is_quiet) return 1;
    luaL_traceback(L, L, "(error object is a nil value)", 1);
    return 1;
  }
  const char *msg = dpl_host_error_text(L, 1);
  /* a method called as obj.method(...): its self is missing (nil) or is the first argument */
  if (strstr(msg, "local 'self' (a ") != NULL ||
      (strstr(msg, "local 't' (a nil value)") != NULL && strstr(msg, "/dpl/tensor") != NULL)) /* a tensor method's self */
    msg = lua_pushfstring(L, "%s\n  (hint: a method called with '.' instead of ':'? write obj:method(...))", msg);
  /* a property called as a method (logger:log_dir(), Lightning's properties are fields here) */
  const char *m = strstr(msg, "attempt to call method '");
  if (m && (strstr(m, "' (a string value)") || strstr(m, "' (a number value)") || strstr(m, "' (a boolean value)"))) {
    const char *name = m + strlen("attempt to call method '");
    const char *q = strchr(name, '\'');
    if (q && q - name < 64) {
      char prop[64];
      memcpy(prop, name, (size_t)(q - name));
      prop[q - name] = '\0';
      if (strcmp(prop, "training") == 0 && strstr(m, "(a boolean value)")) /* Torch7's m:training() */
        msg = lua_pushfstring(L, "%s\n  (hint: m.training is the mode flag (a boolean); Torch7's m:training() is "
                                 "m:train() here, m:evaluate() is m:eval(); docs/torch7.md)", msg);
      else
        msg = lua_pushfstring(L, "%s\n  (hint: '%s' is a property (a value), not a method: write obj.%s, without ':' and '()')",
                              msg, prop, prop);
    }
  }
  /* a message that carries its traceback already (a string error caught, given its
   * traceback and raised again; a worker's error brought back by dist.spawn) gets no
   * second one; an error object that recorded where it was raised (errors.attach_traceback:
   * the Trainer re-raises after its teardown) shows that stack, not the re-raise's */
  if (strstr(msg, "\nstack traceback:\n") != NULL) {
    lua_pushstring(L, msg);
    return 1;
  }
  if (lua_istable(L, 1)) {
    lua_pushliteral(L, "traceback");
    lua_rawget(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *tb = lua_tostring(L, -1);
      lua_pushfstring(L, "%s\n%s", msg, tb);
      return 1;
    }
    lua_pop(L, 1);
  }
  if (has_lua_frame(L, 1)) luaL_traceback(L, L, msg, 1);
  else lua_pushstring(L, msg);
  return 1;
}

/* Reports a failed load or call: "dplhost: <message>" on stderr. In a rank the launcher
 * is stopping because another rank failed, one short line instead (the message's first
 * line, no traceback): the failed rank's error is the one to read. */
static int report(lua_State *L, int status)
{
  if (status != 0) {
    if (!lua_isnil(L, -1)) {
      const char *msg = lua_tostring(L, -1);
      if (!msg) msg = "(error object is not a string)";
      int failed = dpl_launch_failed_rank();
      if (failed >= 0) {
        size_t n = strcspn(msg, "\n");
        if (strncmp(msg, "interrupted", 11) == 0 || strstr(msg, "stopped by the launcher") != NULL)
          fprintf(stderr, "dplhost: stopped: rank %d failed\n", failed);
        else
          fprintf(stderr, "dplhost: stopped: rank %d failed (here: %.*s%s)\n", failed, (int)(n > 160 ? 160 : n), msg,
                  n > 160 ? "..." : "");
      } else {
        fprintf(stderr, "dplhost: %s\n", msg);
      }
      fflush(stderr);
    }
    lua_pop(L, 1);
  }
  return status;
}

static int docall(lua_State *L, int narg, int nres)
{
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, traceback_handler);
  lua_insert(L, base);
  dpl_signals_install(L);
  int status = lua_pcall(L, narg, nres, base);
  lua_remove(L, base);
  return status;
}

static int dochunk(lua_State *L, int status)
{
  if (status == 0) status = docall(L, 0, 0);
  return report(L, status);
}

static int dostring(lua_State *L, const char *s, const char *name)
{
  return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* -l name: global `name` = require(name); -l g=mod (Lua 5.4's form): global `g` =
 * require(mod), so that a dotted module (`-l sp=dpl.special`) gets a usable name. */
static int dolibrary(lua_State *L, const char *name)
{
  const char *eq = strchr(name, '=');
  const char *mod = eq ? eq + 1 : name;
  lua_getglobal(L, "require");
  lua_pushstring(L, mod);
  int status = docall(L, 1, 1);
  if (status == 0) {
    if (eq) lua_pushlstring(L, name, (size_t)(eq - name));
    else lua_pushstring(L, name);
    lua_insert(L, -2);
    lua_setglobal(L, lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  return report(L, status);
}

/* Loads a file (NULL: stdin) with a clear message when it cannot be read. */
static int loadfile(lua_State *L, const char *fname)
{
  if (fname) {
    FILE *f = fopen(fname, "r");
    if (!f) {
      lua_pushfstring(L, "cannot open %s: %s", fname, strerror(errno));
      return LUA_ERRFILE;
    }
    fclose(f);
  }
  return luaL_loadfile(L, fname);
}

static int doscript(lua_State *L, char **argv, int script_idx)
{
  const char *fname = argv[script_idx];
  if (strcmp(fname, "-") == 0 && strcmp(argv[script_idx - 1], "--") != 0) fname = NULL;
  int status = loadfile(L, fname);
  if (status == 0) {
    int narg = 0;
    lua_getglobal(L, "arg");
    if (lua_istable(L, -1)) {
      for (int i = 1;; i++) {
        lua_rawgeti(L, -1, i);
        if (lua_isnil(L, -1)) { lua_pop(L, 1); break; }
        lua_insert(L, -2);
        narg++;
      }
    }
    lua_pop(L, 1);
    /* the chunk sits below its arguments */
    status = docall(L, narg, 0);
  }
  return report(L, status);
}

static int dorepl(lua_State *L)
{
  lua_getglobal(L, "require");
  lua_pushstring(L, "dpl.repl");
  int status = docall(L, 1, 1);
  if (status == 0) {
    lua_getfield(L, -1, "run");
    lua_remove(L, -2);
    status = docall(L, 0, 0);
  }
  return report(L, status);
}

static int file_exists(const char *path)
{
  return access(path, R_OK) == 0;
}

/* Prepends the dpl library directory to package.path: DPL_PATH, else the
 * build tree (<bindir>/lua), else an installed tree (<bindir>/../share/dplhost/lua). */
static void set_paths(lua_State *L)
{
  char exe[PATH_MAX], probe[PATH_MAX + 64], dirs[4 * PATH_MAX];
  dirs[0] = 0;
  const char *env = getenv("DPL_PATH");
  if (env && *env) {
    snprintf(dirs, sizeof dirs, "%s", env);
  } else {
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
      exe[n] = 0;
      char *slash = strrchr(exe, '/');
      if (slash) *slash = 0;
      snprintf(probe, sizeof probe, "%s/lua/dpl/init.lua", exe);
      if (file_exists(probe)) snprintf(dirs, sizeof dirs, "%s/lua", exe);
      else snprintf(dirs, sizeof dirs, "%s/../share/dplhost/lua", exe);
    }
  }
  if (!dirs[0]) return;
  lua_getglobal(L, "package");
  int n = 0;
  char *save = NULL;
  for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", d, d);
    n++;
  }
  lua_getfield(L, -1 - n, "path");
  lua_concat(L, n + 1);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
}

/* The global `arg` as luajit sets it: the script at 0, its arguments from 1,
 * the interpreter and the options before it at negative indices; with no script
 * (argf == argc) arg[0] is nil and everything is negative. */
static void create_arg_table(lua_State *L, char **argv, int argc, int argf)
{
  lua_createtable(L, argc - argf, argf);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - argf);
  }
  lua_setglobal(L, "arg");
}

static int usage_error(const char *fmt, const char *what)
{
  fprintf(stderr, "dplhost: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, "\n(try 'dplhost --help')\n");
  return 2;
}

/* Parses an integer option value in [lo, hi]; -1 (after a message) when bad. */
static int int_option(const char *name, const char *v, long lo, long hi)
{
  char *end = NULL;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (!*v || *end || errno || n < lo || n > hi) {
    fprintf(stderr, "dplhost: %s expects an integer from %ld to %ld, got '%s'\n(try 'dplhost --help')\n",
            name, lo, hi, v);
    return -1;
  }
  return (int)n;
}

/* Launcher options: "--name value" or "--name=value". Returns 1 when a[i] is one
 * (i advanced past its value), 0 when not, -1 on a bad or missing value. */
static int launcher_option(int argc, char **argv, int *i, dpl_launch_opts *o)
{
  /* (torchrun's spellings too: --nproc-per-node / --nproc_per_node, --node_rank, ...) */
  static const char *names[] = {"--nproc", "--nnodes", "--node-rank", "--master-addr", "--master-port",
                                "--max-restarts", "--nproc-per-node", "--nproc_per_node", "--node_rank",
                                "--master_addr", "--master_port", "--max_restarts"};
  static const int canon[] = {0, 1, 2, 3, 4, 5, 0, 0, 2, 3, 4, 5};
  const char *a = argv[*i];
  if (strcmp(a, "--log-all-ranks") == 0) { o->log_all_ranks = 1; return 1; }
  for (int n = 0; n < (int)(sizeof names / sizeof *names); n++) {
    size_t len = strlen(names[n]);
    const char *v;
    if (strcmp(a, names[n]) == 0) {
      if (*i + 1 >= argc) { usage_error("option '%s' needs an argument", names[n]); return -1; }
      v = argv[++*i];
    } else if (strncmp(a, names[n], len) == 0 && a[len] == '=') {
      v = a + len + 1;
    } else {
      continue;
    }
    int k = canon[n];
    switch (k) {
    case 0: o->nproc = int_option(names[n], v, 1, 4096); return o->nproc < 0 ? -1 : 1;
    case 1: o->nnodes = int_option(names[n], v, 1, 100000); return o->nnodes < 0 ? -1 : 1;
    case 2: o->node_rank = int_option(names[n], v, 0, 99999); return o->node_rank < 0 ? -1 : 1;
    case 3:
      if (!*v) {
        usage_error("%s", "--master-addr expects a host name or address, got ''");
        return -1;
      }
      o->master_addr = v;
      return 1;
    case 5: o->max_restarts = int_option(names[n], v, 0, 1000000); return o->max_restarts < 0 ? -1 : 1;
    default: o->master_port = int_option(names[n], v, 1, 65535); return o->master_port < 0 ? -1 : 1;
    }
  }
  return 0;
}

static void print_version(void)
{
  printf("dplhost %s (%s, %s)\n", dpl_version(), LUAJIT_VERSION, "GC64 LuaJIT embedded");
  fflush(stdout);
}

static int is_version_option(const char *a)
{
  return strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0;
}

/* Runs the launcher: each rank's command line is argv[0], the host options but
 * the launcher's own (and -v: the launcher printed the version), the script and
 * its args. */
static int launch(const dpl_launch_opts *lo, int argc, char **argv, int script, const char *launcher_first,
                  int version)
{
  if (lo->nproc < 1) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(launcher_first, "="), launcher_first);
    fprintf(stderr, "dplhost: %s needs --nproc N (the launcher)\n(try 'dplhost --help')\n", name);
    return 2;
  }
  if (!script) return usage_error("%s", "--nproc needs a script to run");
  if (strcmp(argv[script], "-") == 0 && strcmp(argv[script - 1], "--") != 0)
    return usage_error("%s", "--nproc cannot run a script from stdin ('-'): the ranks read /dev/null; "
                             "give a script file");
  if (lo->node_rank >= lo->nnodes)
    return usage_error("%s", "--node-rank must be below --nnodes (node ranks are 0-based)");
  if (lo->max_restarts > 0 && lo->nnodes > 1)
    return usage_error("%s", "--max-restarts with --nnodes > 1 is not implemented (restarting needs the "
                             "nodes to agree on each attempt); restart the whole job from its scheduler");
  if (version) print_version();
  char **cargv = calloc((size_t)argc + 1, sizeof *cargv);
  if (!cargv) { fprintf(stderr, "dplhost: out of memory\n"); return 1; }
  int k = 0;
  cargv[k++] = argv[0];
  for (int j = 1; j < script; j++) {
    dpl_launch_opts scratch = *lo;
    int jj = j;
    if (strcmp(argv[j], "-e") == 0 || strcmp(argv[j], "-l") == 0) { /* and its value, whatever it is */
      cargv[k++] = argv[j++];
      cargv[k++] = argv[j];
      continue;
    }
    if (is_version_option(argv[j])) continue;
    if (launcher_option(argc, argv, &jj, &scratch) > 0) { j = jj; continue; }
    cargv[k++] = argv[j];
  }
  for (int j = script; j < argc; j++) cargv[k++] = argv[j];
  cargv[k] = NULL;
  int rc = dpl_launch(lo, cargv);
  free(cargv);
  return rc;
}

int main(int argc, char **argv)
{
  int script = 0, interactive = 0, has_e = 0, busted = 0, version = 0;
  const char *launcher_first = NULL; /* the first launcher option given */
  dpl_launch_opts lo = {0, 1, 0, NULL, 0, 0, 5.0, 0};
  /* A write past the file size limit (ulimit -f) fails with EFBIG, as in Python, instead of
   * SIGXFSZ killing the process: the writer raises naming the file and removes its temp file
   * (a checkpoint's .tmp.<pid> was left behind). os.execute's commands get the default back. */
  signal(SIGXFSZ, SIG_IGN);
  /* First pass: validate options; the actions run in order once the state exists. */
  int i;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    int lr = launcher_option(argc, argv, &i, &lo);
    if (lr < 0) return 2;
    if (lr > 0) { if (!launcher_first) launcher_first = a; continue; }
    if (a[0] != '-') { script = i; break; }
    if (strcmp(a, "-") == 0) { script = i; break; }
    if (strcmp(a, "--") == 0) { if (i + 1 < argc) script = i + 1; break; }
    if (strcmp(a, "-e") == 0 || strcmp(a, "-l") == 0) {
      if (i + 1 >= argc) return usage_error("option '%s' needs an argument", a);
      if (a[1] == 'e') has_e = 1;
      i++;
    } else if (strncmp(a, "-e", 2) == 0 || strncmp(a, "-l", 2) == 0) {
      if (a[1] == 'e') has_e = 1;
    } else if (strcmp(a, "-i") == 0) {
      interactive = 1;
    } else if (is_version_option(a)) {
      version = 1; /* as luajit: printed before anything runs, then the rest goes on */
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(usage_text, stdout);
      return 0;
    } else if (strcmp(a, "--devices") == 0) {
      if (argc != 2) return usage_error("%s", "--devices takes no other arguments");
      return dpl_print_devices();
    } else if (strcmp(a, "--busted") == 0) {
      busted = i;
      break;
    } else {
      return usage_error("unknown option '%s'", a);
    }
  }

  if (launcher_first) return launch(&lo, argc, argv, script, launcher_first, version);
  if (version) {
    print_version();
    if (!script && !has_e && !interactive && !busted) return 0; /* luajit -v: no REPL, no stdin */
  }
  if (getenv("DPL_LINE_BUFFERED")) setvbuf(stdout, NULL, _IOLBF, 0);

  lua_State *L = luaL_newstate();
  if (!L) { fprintf(stderr, "dplhost: cannot create the Lua state (out of memory)\n"); return 1; }
  globalL = L;
  luaL_openlibs(L);
  set_paths(L);
  dpl_host_open(L);

  int status = 0;
  if (busted) {
    lua_createtable(L, argc - busted, 1);
    lua_pushstring(L, "busted");
    lua_rawseti(L, -2, 0);
    for (int k = busted + 1; k < argc; k++) {
      lua_pushstring(L, argv[k]);
      lua_rawseti(L, -2, k - busted);
    }
    lua_setglobal(L, "arg");
    nil_error_is_quiet = 1;
    status = dostring(L, "require('busted.runner')({ standalone = false })", "=busted");
    goto done;
  }

  create_arg_table(L, argv, argc, script ? script : argc);
  /* Second pass: run -e and -l in the order given. */
  for (i = 1; i < argc && (!script || i < script) && status == 0; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) break;
    if (a[0] == '-' && (a[1] == 'e' || a[1] == 'l')) {
      const char *v = a[2] ? a + 2 : argv[++i];
      status = a[1] == 'e' ? dostring(L, v, "=(command line)") : dolibrary(L, v);
    }
  }
  if (status == 0) {
    if (script) status = doscript(L, argv, script);
    else if (!has_e && !interactive) {
      if (isatty(STDIN_FILENO)) status = dorepl(L);
      else status = dochunk(L, loadfile(L, NULL));
    }
  }
  /* -i: the REPL after the script, also after one that raised (as python -i: its globals
   * are there to look at; the exit status stays 1), not after one that could not be loaded
   * or was stopped by a signal */
  if (interactive && (status == 0 || (status == LUA_ERRRUN && !dpl_signal_pending()))) {
    int rs = dorepl(L);
    if (status == 0) status = rs;
  }

done:;
  int sig = dpl_signal_pending();
  dpl_host_run_atexit(L);
  if (!sig) sig = dpl_signal_pending(); /* one that came during the cleanups */
  fflush(stdout);
  /* the handler must never see the closed state: a signal from here on (C exit
   * handlers such as MPI_Finalize still run) acts as it would without dplhost */
  dpl_signals_uninstall();
  lua_close(L);
  if (sig) return sig;
  return status == 0 ? 0 : 1;
}
