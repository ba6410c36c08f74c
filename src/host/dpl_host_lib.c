/* dpl_host_lib.c: the preloaded Lua module `dpl.host`: what only the host can
 * give Lua because it needs the lua_State — atexit cleanups (also run by
 * os.exit and after SIGINT/SIGTERM/SIGUSR1), signal handling around running
 * chunks (interrupt, hold, pending signal),
 * the embedded C header text for ffi.cdef, and the REPL's line reader (libedit
 * loaded with dlopen when a terminal asks for it, plain stdio otherwise, with
 * Tab completion through a Lua function when libedit has readline's hooks),
 * and os.execute, whose command dying of SIGINT interrupts the script. */
#define _GNU_SOURCE
#include "dpl.h"
#include "dpl_internal.h"
#include "dpl_launch.h"
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <lua.h>
#include <lauxlib.h>

extern char **environ;

/* ---------------------------------------------------------------- signals */

/* SIGINT, SIGTERM and SIGUSR1 stop the running chunk: the handler records the
 * signal and sets a hook that raises "interrupted" at the next Lua instruction,
 * with a grace timer for code the hook cannot reach. The handler only ever acts
 * on the thread that runs Lua: a signal that lands on another thread (a tensor
 * worker, an MPI progress thread) is passed on to it with pthread_kill, so it
 * stays pending there while that thread blocks it (the Trainer polls it at a
 * batch boundary). While the signals are held (hold_signals), SIGTERM and
 * SIGUSR1 are only recorded, for Lua to read with pending_signal(). Before the
 * Lua state is closed, the previous dispositions come back (dpl_signals_uninstall):
 * the handler never touches a freed state. */

static const int handled_sigs[] = {SIGINT, SIGTERM, SIGUSR1};
#define N_HANDLED ((int)(sizeof handled_sigs / sizeof handled_sigs[0]))

#if ATOMIC_POINTER_LOCK_FREE != 2
#error "the signal handler needs a lock-free atomic pointer"
#endif
static _Atomic(lua_State *) sigL;          /* the running state; NULL once it is closing */
static pthread_t lua_thread;                /* the thread that runs Lua (main) */
static struct sigaction saved_actions[N_HANDLED];
static int installed;
static volatile sig_atomic_t sig_first;    /* first signal since the last clear, 0: none */
static volatile sig_atomic_t sig_last;     /* newest signal */
static volatile sig_atomic_t sig_count;    /* signals received since the last clear */
static volatile sig_atomic_t sig_armed;    /* the signal that armed the interrupt, 0: none */
static volatile sig_atomic_t sig_held;     /* SIGTERM/SIGUSR1 are recorded only */
static volatile sig_atomic_t in_readline;  /* the REPL is waiting for a line */
static volatile sig_atomic_t readline_interrupted;
static volatile sig_atomic_t interactive;  /* the REPL runs: never exit on the grace timer */
static const char atexit_key[] = "dpl.host.atexit";

static const char *signal_label(int sig)
{
  switch (sig) {
  case SIGINT: return "SIGINT";
  case SIGTERM: return "SIGTERM";
  case SIGUSR1: return "SIGUSR1";
  default: return "signal";
  }
}

static void interrupt_hook(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  alarm(0);
  int sig = sig_armed;
  if (sig == SIGINT || sig == 0) lua_pushstring(L, "interrupted");
  else lua_pushfstring(L, "interrupted (%s)", signal_label(sig));
  lua_error(L);
}

static void on_grace_expired(int sig)
{
  (void)sig;
  static const char msg[] = "dplhost: the script did not stop within 5 s of the signal; exiting\n";
  static const char imsg[] = "\ndplhost: the running chunk cannot be interrupted (a loop LuaJIT compiled to "
                             "machine code, or a long C call); press Ctrl-C again to quit\n";
  ssize_t r;
  if (interactive) { r = write(STDERR_FILENO, imsg, sizeof imsg - 1); (void)r; return; }
  r = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)r;
  _exit(128 + (sig_armed ? sig_armed : SIGTERM));
}

/* Stops the running chunk (handler context, or normal context with the signals blocked).
 * The hook fires at the next Lua instruction, call or return: the chunk raises
 * "interrupted". Code in a compiled loop or a long C call does not see it, so a
 * watchdog ends the process if nothing happened after a grace period. */
static void arm_interrupt(int sig)
{
  lua_State *L = atomic_load(&sigL);
  if (!L) _exit(128 + sig); /* the state is being closed: nothing left to stop */
  sig_armed = sig;
  lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
  signal(SIGALRM, on_grace_expired);
  alarm(5);
}

static void on_signal(int sig)
{
  int saved_errno = errno;
  if (!pthread_equal(pthread_self(), lua_thread)) {
    /* not the Lua thread: hand it over (pending there while it blocks the signal) */
    pthread_kill(lua_thread, sig);
    errno = saved_errno;
    return;
  }
  if (in_readline) { readline_interrupted = 1; errno = saved_errno; return; }
  sig_count++;
  sig_last = sig;
  if (!sig_first) sig_first = sig;
  if (sig_held && sig != SIGINT) { errno = saved_errno; return; }
  if (sig_armed) _exit(128 + sig); /* second signal: no more waiting */
  arm_interrupt(sig);
  errno = saved_errno;
}

/* Blocks the handled signals on this thread (*old: the mask before), around
 * state changes that the handler must not see half done. */
static void block_handled(sigset_t *old)
{
  sigset_t set;
  sigemptyset(&set);
  for (int i = 0; i < N_HANDLED; i++) sigaddset(&set, handled_sigs[i]);
  pthread_sigmask(SIG_BLOCK, &set, old);
}

void dpl_signals_install(lua_State *L)
{
  if (!installed) lua_thread = pthread_self(); /* before the handler can read it */
  atomic_store(&sigL, L);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < N_HANDLED; i++) sigaddset(&sa.sa_mask, handled_sigs[i]);
  for (int i = 0; i < N_HANDLED; i++)
    sigaction(handled_sigs[i], &sa, installed ? NULL : &saved_actions[i]);
  installed = 1;
}

void dpl_signals_uninstall(void)
{
  if (!installed) return;
  sigset_t old;
  block_handled(&old);
  atomic_store(&sigL, NULL);
  for (int i = 0; i < N_HANDLED; i++) sigaction(handled_sigs[i], &saved_actions[i], NULL);
  installed = 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL); /* one that came meanwhile acts as before dplhost */
}

void dpl_signals_clear(void)
{
  sigset_t old;
  block_handled(&old);
  alarm(0);
  lua_State *L = atomic_load(&sigL);
  if (L) lua_sethook(L, NULL, 0, 0);
  sig_first = 0;
  sig_last = 0;
  sig_count = 0;
  sig_armed = 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void dpl_signals_after_fork(void)
{
  sig_held = 0;
  dpl_signals_clear();
}

int32_t dpl_signal_received(void) { return sig_armed ? 128 + sig_armed : 0; }

int32_t dpl_signal_pending(void) { return sig_first ? 128 + sig_first : 0; }

/* ---------------------------------------------------------------- error text */

static int call_tostring_meta(lua_State *L)
{
  if (!luaL_callmeta(L, 1, "__tostring")) lua_pushnil(L);
  return 1;
}

const char *dpl_host_error_text(lua_State *L, int idx)
{
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
  int t = lua_type(L, idx);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    lua_pushvalue(L, idx);
    return lua_tostring(L, -1);
  }
  const char *tname = luaL_typename(L, idx);
  lua_pushcfunction(L, call_tostring_meta);
  lua_pushvalue(L, idx);
  if (lua_pcall(L, 1, 1, 0) == 0) {
    int rt = lua_type(L, -1);
    if (rt == LUA_TSTRING || rt == LUA_TNUMBER) return lua_tostring(L, -1);
    lua_pop(L, 1);
    if (rt == LUA_TNIL) return lua_pushfstring(L, "(error object is a %s value)", tname);
    return lua_pushfstring(L, "(error object is a %s value; its __tostring returned a %s)", tname,
                           lua_typename(L, rt));
  }
  const char *why = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1);
  const char *text = lua_pushfstring(L, "(error object is a %s value; its __tostring failed: %s)", tname, why);
  lua_remove(L, -2);
  return text;
}

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

/* The list is a stack: each cleanup is taken off before it runs, so one that
 * exits (os.exit runs the rest) or fails never reruns, and one registered by a
 * running cleanup runs next (newest first, as always). */
void dpl_host_run_atexit(lua_State *L)
{
  dpl_signals_clear();
  for (;;) {
    lua_getfield(L, LUA_REGISTRYINDEX, atexit_key);
    if (!lua_istable(L, -1)) { lua_pop(L, 1); return; }
    int n = (int)lua_objlen(L, -1);
    if (n == 0) { lua_pop(L, 1); return; }
    lua_rawgeti(L, -1, n);
    lua_pushnil(L);
    lua_rawseti(L, -3, n);
    lua_remove(L, -2);
    if (lua_pcall(L, 0, 0, 0) != 0) {
      fprintf(stderr, "dplhost: error in atexit handler: %s\n", dpl_host_error_text(L, -1));
      lua_pop(L, 2);
    }
  }
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

/* os.execute replacement. libc's system() ignores SIGINT in the caller while the
 * command runs, so a Ctrl-C (which the terminal sends to the whole foreground
 * job, and the launcher to each rank's process group) stopped only the command
 * and a script looping over os.execute went on; and a SIGINT that came while
 * system() was starting the command (ignored, the command not yet there) was lost.
 * Here the command runs as system() runs it (/bin/sh -c, SIGINT and SIGQUIT at their
 * defaults and the caller's signal mask in the child), but the caller blocks
 * SIGINT/SIGQUIT/SIGCHLD instead of ignoring them: a SIGINT that comes meanwhile
 * stays pending and stops the script, as a shell would, once the command is done;
 * a command that died of SIGINT counts as one too. Results are the original's
 * (Lua 5.1's wait status, or 5.2's true|nil, "exit"|"signal", code).
 *
 * The original is never called, not even os.execute() (is there a shell) or to
 * learn which form it returns: it is system(), and setting SIGINT to SIG_IGN
 * discards a pending SIGINT, blocked or not. Asking it on the first os.execute
 * lost the SIGINT of a Ctrl-C (or of the launcher) that came in that moment,
 * right after a script started: the script went on until the grace period's
 * SIGKILL, without its cleanups. */
static int execute_52; /* the original returns 5.2-style results (dpl_host_open sets it) */

/* Runs `sh -c cmd` as described above; *status: its wait status, -1 with *err
 * (an errno value) when it could not be started or waited for. */
static void dpl_run_shell(const char *cmd, int *status, int *err)
{
  sigset_t block, old, pend, dflt;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGQUIT);
  sigaddset(&block, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGINT);
  sigaddset(&dflt, SIGQUIT);
  sigaddset(&dflt, SIGXFSZ); /* ignored by the host (dpl_main.c), the default in the command */
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &old);
  posix_spawnattr_setsigdefault(&attr, &dflt);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  char *argv[] = {"sh", "-c", (char *)cmd, NULL};
  pid_t pid;
  *status = -1;
  *err = posix_spawn(&pid, "/bin/sh", NULL, &attr, argv, environ);
  posix_spawnattr_destroy(&attr);
  if (*err == 0) {
    while (waitpid(pid, status, 0) < 0) {
      if (errno != EINTR) { *err = errno; *status = -1; break; }
    }
  }
  int died_of_int = *status != -1 && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGINT;
  sigpending(&pend);
  int int_pending = sigismember(&pend, SIGINT) == 1;
  pthread_sigmask(SIG_SETMASK, &old, NULL); /* a pending SIGINT is delivered now */
  if (died_of_int && !int_pending) raise(SIGINT);
}

static int host_os_execute(lua_State *L)
{
  int status, err;
  if (lua_isnoneornil(L, 1)) { /* is there a shell: the original's answer, without system(NULL) */
    if (execute_52) { lua_pushboolean(L, 1); return 1; } /* LuaJIT's 5.2 form says true, always */
    dpl_run_shell("exit 0", &status, &err);
    lua_pushinteger(L, status == 0); /* system(NULL): nonzero when a shell ran */
    return 1;
  }
  const char *cmd = luaL_checkstring(L, 1);
  dpl_run_shell(cmd, &status, &err);
  if (!execute_52) { lua_pushinteger(L, status); return 1; }
  if (status == -1) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s", strerror(err ? err : errno));
    lua_pushinteger(L, err ? err : errno);
    return 3;
  }
  const char *what = "exit";
  int code = 0;
  if (WIFEXITED(status)) code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) { code = WTERMSIG(status); what = "signal"; }
  if (what[0] == 'e' && code == 0) lua_pushboolean(L, 1);
  else lua_pushnil(L);
  lua_pushstring(L, what);
  lua_pushinteger(L, code);
  return 3;
}

/* Clears a pending interrupt (the REPL calls it after reporting one). */
static int host_clear_interrupt(lua_State *L)
{
  (void)L;
  dpl_signals_clear();
  return 0;
}

/* pending_signal() -> signo, count, last | nil, 0: the first SIGINT/SIGTERM/SIGUSR1
 * received since the last clear_interrupt (held or not), how many came, the newest. */
static int host_pending_signal(lua_State *L)
{
  sigset_t old;
  block_handled(&old);
  int first = sig_first, count = sig_count, last = sig_last;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!first) { lua_pushnil(L); lua_pushinteger(L, 0); return 2; }
  lua_pushinteger(L, first);
  lua_pushinteger(L, count);
  lua_pushinteger(L, last);
  return 3;
}

/* record_signal(signo): records a SIGINT/SIGTERM/SIGUSR1 that the caller took itself (the
 * Trainer consumes its blocked SIGTERM/SIGUSR1 with sigtimedwait) as if the handler had
 * seen it while held: pending_signal() reports it and the script's exit status becomes
 * 128+N when it ends or raises, but nothing is interrupted. */
static int host_record_signal(lua_State *L)
{
  int sig = (int)luaL_checkinteger(L, 1);
  if (sig != SIGINT && sig != SIGTERM && sig != SIGUSR1) return luaL_argerror(L, 1, "SIGINT, SIGTERM or SIGUSR1 expected");
  sigset_t old;
  block_handled(&old);
  sig_count++;
  sig_last = sig;
  if (!sig_first) sig_first = sig;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return 0;
}

/* launcher_failed_rank() -> the rank whose failure made the launcher stop this one (it
 * sends SIGTERM after saying so), or nil (no such failure, or not under the launcher) */
static int host_launcher_failed_rank(lua_State *L)
{
  int r = dpl_launch_failed_rank();
  if (r < 0) lua_pushnil(L);
  else lua_pushinteger(L, r);
  return 1;
}

/* hold_signals(flag) -> previous flag: while held, SIGTERM/SIGUSR1 are only
 * recorded (no interrupt; dpl_signal_received stays 0, so blocking calls go on);
 * releasing with one pending stops the running chunk as if it arrived then. */
static int host_hold_signals(lua_State *L)
{
  luaL_checkany(L, 1);
  int hold = lua_toboolean(L, 1);
  sigset_t old;
  block_handled(&old);
  int was = sig_held;
  sig_held = hold;
  int arm = !hold && was && sig_first && !sig_armed;
  if (arm) arm_interrupt(sig_first);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  lua_pushboolean(L, was);
  return 1;
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
typedef char **(*attempted_fn)(const char *, int, int);
typedef char *(*entry_fn)(const char *, int);

/* readline's completion hooks, as libedit exports them (variables: dlsym gives their
 * addresses); any of them may be missing, completion then is off or plainer */
static struct {
  int tried;
  void *lib;
  readline_fn readline;
  add_history_fn add_history;
  history_file_fn read_history, write_history;
  stifle_fn stifle_history;
  attempted_fn *attempted_completion_function;
  entry_fn *completion_entry_function;
  int *attempted_completion_over;
  int *completion_append_character;
  const char **basic_word_break_characters;
  char **completer_word_break_characters;
  char **line_buffer;
} edit;

static const char completer_key[] = "dpl.host.completer";
static lua_State *complete_L;    /* the state whose readline() is waiting (completion calls into it) */
static char word_breaks[128] = " \t\n\"\\'`@$><=;|&{(";
static char **entry_matches;     /* the generator's list (entry-function fallback) */
static size_t entry_next;

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
  edit.attempted_completion_function = (attempted_fn *)dlsym(edit.lib, "rl_attempted_completion_function");
  edit.completion_entry_function = (entry_fn *)dlsym(edit.lib, "rl_completion_entry_function");
  edit.attempted_completion_over = (int *)dlsym(edit.lib, "rl_attempted_completion_over");
  edit.completion_append_character = (int *)dlsym(edit.lib, "rl_completion_append_character");
  edit.basic_word_break_characters = (const char **)dlsym(edit.lib, "rl_basic_word_break_characters");
  edit.completer_word_break_characters = (char **)dlsym(edit.lib, "rl_completer_word_break_characters");
  edit.line_buffer = (char **)dlsym(edit.lib, "rl_line_buffer");
}

/* ---------------------------------------------------------------- completion */

/* The candidates for `text` from the Lua completer (registry[completer_key](text, line,
 * start, end) -> list of strings), as a NULL-terminated malloc'd array with the count in
 * *n; NULL when there are none, no completer, or it failed (its error is dropped: a
 * completion never breaks the prompt). */
static char **lua_candidates(const char *text, int start, int end, size_t *n)
{
  *n = 0;
  lua_State *L = complete_L;
  if (!L || !lua_checkstack(L, 8)) return NULL;
  int top = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, completer_key);
  if (!lua_isfunction(L, -1)) { lua_settop(L, top); return NULL; }
  lua_pushstring(L, text);
  lua_pushstring(L, edit.line_buffer && *edit.line_buffer ? *edit.line_buffer : "");
  lua_pushinteger(L, start);
  lua_pushinteger(L, end);
  if (lua_pcall(L, 4, 1, 0) != 0 || !lua_istable(L, -1)) { lua_settop(L, top); return NULL; }
  size_t len = lua_objlen(L, -1), k = 0;
  char **list = len ? calloc(len + 1, sizeof *list) : NULL;
  for (size_t i = 1; list && i <= len; i++) {
    lua_rawgeti(L, -1, (int)i);
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    if (s && (list[k] = strdup(s)) != NULL) k++;
    lua_pop(L, 1);
  }
  lua_settop(L, top);
  if (list && k == 0) { free(list); list = NULL; }
  *n = k;
  return list;
}

/* rl_attempted_completion_function: readline's array (matches[0] the longest common
 * prefix, which replaces the word; then the candidates; NULL at the end). Completion
 * stays ours when nothing matches (no fall back to file names), and inserts nothing after
 * a single match (the completer adds "(" to functions itself). */
static char **complete_attempted(const char *text, int start, int end)
{
  if (edit.attempted_completion_over) *edit.attempted_completion_over = 1;
  if (edit.completion_append_character) *edit.completion_append_character = 0;
  size_t n;
  char **list = lua_candidates(text, start, end, &n);
  if (!list) return NULL;
  char **m = calloc(n + 2, sizeof *m);
  size_t lcp = strlen(list[0]);
  for (size_t i = 1; i < n; i++) {
    size_t j = 0;
    while (j < lcp && list[i][j] == list[0][j]) j++;
    lcp = j;
  }
  char *prefix = m ? malloc(lcp + 1) : NULL;
  if (!prefix) {
    for (size_t i = 0; i < n; i++) free(list[i]);
    free(list);
    free(m);
    return NULL;
  }
  memcpy(prefix, list[0], lcp);
  prefix[lcp] = '\0';
  m[0] = prefix;
  if (n == 1) free(list[0]); /* one match: matches[0] alone */
  else for (size_t i = 0; i < n; i++) m[i + 1] = list[i];
  free(list);
  return m;
}

/* rl_completion_entry_function (when libedit lacks the attempted hook): the generator,
 * called with state 0 first, then 1, 2, ... until it returns NULL; each result is the
 * caller's to free. */
static char *complete_entry(const char *text, int state)
{
  if (state == 0) {
    if (entry_matches) {
      for (size_t i = entry_next; entry_matches[i]; i++) free(entry_matches[i]);
      free(entry_matches);
    }
    if (edit.completion_append_character) *edit.completion_append_character = 0;
    size_t n;
    entry_matches = lua_candidates(text, 0, 0, &n);
    entry_next = 0;
  }
  if (!entry_matches) return NULL;
  char *s = entry_matches[entry_next];
  if (s) entry_next++;
  else { free(entry_matches); entry_matches = NULL; }
  return s;
}

/* Points libedit's hooks at the completer (installed: a function in the registry). */
static void install_completion(int installed)
{
  if (edit.attempted_completion_function)
    *edit.attempted_completion_function = installed ? complete_attempted : NULL;
  else if (edit.completion_entry_function)
    *edit.completion_entry_function = installed ? complete_entry : NULL;
  if (installed && edit.basic_word_break_characters) *edit.basic_word_break_characters = word_breaks;
  if (installed && edit.completer_word_break_characters) *edit.completer_word_break_characters = word_breaks;
}

/* set_completer(fn | nil [, word_breaks]) -> true when line editing can complete: Tab calls
 * fn(word, line, start, end) for the list of replacements of the word before the cursor
 * (the word ends at a character of word_breaks). */
static int host_set_completer(lua_State *L)
{
  int on = !lua_isnoneornil(L, 1);
  if (on) luaL_checktype(L, 1, LUA_TFUNCTION);
  size_t len = 0;
  const char *breaks = luaL_optlstring(L, 2, NULL, &len);
  if (breaks) {
    if (len >= sizeof word_breaks) return luaL_argerror(L, 2, "too many word-break characters");
    memcpy(word_breaks, breaks, len + 1);
  }
  lua_pushvalue(L, 1);
  if (!on) { lua_pop(L, 1); lua_pushnil(L); }
  lua_setfield(L, LUA_REGISTRYINDEX, completer_key);
  load_libedit();
  install_completion(on);
  lua_pushboolean(L, on && edit.readline &&
                     (edit.attempted_completion_function || edit.completion_entry_function));
  return 1;
}

/* readline(prompt) -> line | nil (end of input), interrupted (boolean) */
static int host_readline(lua_State *L)
{
  const char *prompt = luaL_optstring(L, 1, "");
  load_libedit();
  readline_interrupted = 0;
  in_readline = 1;
  if (edit.readline) {
    lua_State *prev = complete_L;
    complete_L = L;
    char *line = edit.readline(prompt);
    complete_L = prev;
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
    {"pending_signal", host_pending_signal},
    {"hold_signals", host_hold_signals},
    {"record_signal", host_record_signal},
    {"launcher_failed_rank", host_launcher_failed_rank},
    {"readline", host_readline},
    {"add_history", host_add_history},
    {"read_history", host_read_history},
    {"write_history", host_write_history},
    {"line_editing", host_line_editing},
    {"set_completer", host_set_completer},
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

/* A package searcher appended after every other: for Torch7's package names (require 'torch',
 * 'nn', 'optim', ...) a loader that raises an error naming the dplhost way (lua/dpl/torch7_require.lua)
 * instead of "module 'torch' not found" and its list of paths; other names: nothing (nil). */
static int torch7_searcher(lua_State *L)
{
  static const char *const names[] = {"torch", "nn", "optim", "cutorch", "cunn", "cudnn", "nngraph",
                                      "paths", "xlua", "image", "gnuplot", "trepl", "threads", "dpnn",
                                      "rnn", "tds", "hdf5", "sys", NULL};
  const char *name = luaL_checkstring(L, 1);
  for (int i = 0; names[i]; i++) {
    if (strcmp(name, names[i]) == 0) {
      lua_getglobal(L, "require");
      lua_pushstring(L, "dpl.torch7_require");
      lua_call(L, 1, 1);
      lua_getfield(L, -1, "loader");
      lua_pushstring(L, name);
      lua_call(L, 1, 1);
      return 1;
    }
  }
  return 0;
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
  lua_pop(L, 1);
  /* package.loaders[#package.loaders + 1]: Torch7's package names */
  lua_getfield(L, -1, "loaders");
  if (lua_istable(L, -1)) {
    lua_pushcfunction(L, torch7_searcher);
    lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
  }
  lua_pop(L, 2);
  /* os.exit runs the atexit cleanups first */
  lua_getglobal(L, "os");
  lua_getfield(L, -1, "exit");
  lua_pushcclosure(L, host_os_exit, 1);
  lua_setfield(L, -2, "exit");
  /* os.execute: a command killed by SIGINT interrupts the script. Which results the
   * original returns is a build option of LuaJIT (LUAJIT_ENABLE_LUA52COMPAT), which
   * also makes # honour __len on tables (both are in its list of 5.2 features):
   * probed here, in Lua, instead of calling the original (system(), see above). */
  lua_pushcfunction(L, host_os_execute);
  lua_setfield(L, -2, "execute");
  lua_pop(L, 1);
  execute_52 = 0;
  if (luaL_loadstring(L, "return #setmetatable({}, { __len = function() return 1 end }) == 1") == 0 &&
      lua_pcall(L, 0, 1, 0) == 0)
    execute_52 = lua_toboolean(L, -1);
  lua_pop(L, 1); /* the result or the error */
}
