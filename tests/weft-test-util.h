/* weft-test-util.h: helpers shared by the Weft test programs.
 *
 * Synchronisation between the test thread and callbacks uses C11 atomics and
 * pthread mutexes/condition variables, never GMutex/GCond: GLib's locks are
 * futex based and invisible to ThreadSanitizer, which would then report
 * false races in the tests.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <weft.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* How long a test waits for something that must happen. Generous, because
 * sanitizer builds on loaded machines are slow; a passing run never waits
 * this long. */
#define WT_DEADLINE_US (10 * G_USEC_PER_SEC)

/* Polls @cond every millisecond until it holds or WT_DEADLINE_US passed.
 * Does not assert: follow it with a g_assert_cmp* on the same values, so a
 * failure prints them. */
#define WT_WAIT_UNTIL(cond)                                                   \
  G_STMT_START                                                                \
  {                                                                           \
    gint64 wt_deadline_ = g_get_monotonic_time () + WT_DEADLINE_US;           \
    while (!(cond) && g_get_monotonic_time () < wt_deadline_)                 \
      g_usleep (1000);                                                        \
  }                                                                           \
  G_STMT_END

/* A window in which nothing is supposed to happen. Never used to wait for
 * something that should happen. */
static inline void
wt_quiet_window_ms (guint ms)
{
  g_usleep ((gulong) ms * 1000);
}

static inline gint
wt_load (atomic_int *p)
{
  return atomic_load (p);
}

/* ---- counting callbacks ---------------------------------------------- */

/* One job or source: how often its function ran and its notify was called.
 * The notify also records whether the function was inside when it ran. */
typedef struct {
  atomic_int ran;
  atomic_int notified;
  atomic_int inside;            /* the function is executing right now */
  atomic_int notify_while_inside;
} WtCount;

static inline void
wt_count_job (gpointer data)
{
  WtCount *c = data;
  atomic_fetch_add (&c->inside, 1);
  atomic_fetch_add (&c->ran, 1);
  atomic_fetch_sub (&c->inside, 1);
}

static inline void
wt_count_notify (gpointer data)
{
  WtCount *c = data;
  if (atomic_load (&c->inside) != 0)
    atomic_fetch_add (&c->notify_while_inside, 1);
  atomic_fetch_add (&c->notified, 1);
}

static inline gboolean
wt_count_source_remove (gpointer data)
{
  wt_count_job (data);
  return G_SOURCE_REMOVE;
}

static inline gboolean
wt_count_source_continue (gpointer data)
{
  wt_count_job (data);
  return G_SOURCE_CONTINUE;
}

/* ---- whether an engine watches an fd ------------------------------------ */

static inline gboolean
wt_never_ready (gint fd, GIOCondition condition, gpointer data)
{
  return G_SOURCE_CONTINUE;
}

/* Whether @ctx's engine still has @fd in its epoll set: adding it fails
 * with WEFT_ERROR_EXISTS then. (Otherwise it is added and removed.) */
static inline gboolean
wt_fd_watched (WeftContext *ctx, int fd)
{
  GError *error = NULL;
  guint id = weft_context_add_fd (ctx, fd, G_IO_IN, wt_never_ready, NULL, NULL, &error);
  if (id != 0)
    weft_context_remove (ctx, id);
  gboolean exists = g_error_matches (error, WEFT_ERROR, WEFT_ERROR_EXISTS);
  g_clear_error (&error);
  return exists;
}

/* ---- a soft stop held open ---------------------------------------------- */

/* weft_engine_shutdown() on a thread of its own, kept from draining by a
 * long job on a context of its own: between wt_soft_stop_begin() and the
 * end of that job the engine refuses posts from foreign threads. */
typedef struct {
  WeftEngine *engine;
  WeftContext *busy;
  guint busy_ms;
  atomic_int busy_started;
  atomic_int ok;           /* the shutdown's answer, once it returned */
  GThread *thread;
} WtSoftStop;

static inline void
wt_soft_stop_busy_job (gpointer data)
{
  WtSoftStop *s = data;
  atomic_store (&s->busy_started, 1);
  g_usleep ((gulong) s->busy_ms * 1000);
}

static inline gpointer
wt_soft_stop_thread (gpointer data)
{
  WtSoftStop *s = data;
  atomic_store (&s->ok, weft_engine_shutdown (s->engine, 10 * G_USEC_PER_SEC));
  return NULL;
}

static inline void
wt_noop_job (gpointer data)
{
}

/* Returns once @engine's shutdown refuses foreign posts, with a job of
 * @busy_ms holding it open. */
static inline void
wt_soft_stop_begin (WtSoftStop *s, WeftEngine *engine, guint busy_ms)
{
  memset (s, 0, sizeof *s);
  s->engine = engine;
  s->busy_ms = busy_ms;
  s->busy = weft_context_new (engine);
  weft_context_dispatch (s->busy);
  g_assert_true (weft_context_post (s->busy, wt_soft_stop_busy_job, s, NULL));
  WT_WAIT_UNTIL (atomic_load (&s->busy_started));
  s->thread = g_thread_new ("soft-stop", wt_soft_stop_thread, s);
  WT_WAIT_UNTIL (!weft_engine_post (engine, wt_noop_job, NULL, NULL));
}

/* Waits for the shutdown to return, and gives its answer. */
static inline gboolean
wt_soft_stop_end (WtSoftStop *s)
{
  g_thread_join (s->thread);
  weft_context_unref (s->busy);
  return atomic_load (&s->ok);
}

/* ---- a gate a job can block on ----------------------------------------- */

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  gboolean open;        /* HOLDS: lock */
  atomic_int entered;   /* callers that reached wt_gate_wait() */
  atomic_int left;      /* callers that returned from it */
} WtGate;

static inline void
wt_gate_init (WtGate *g)
{
  pthread_mutex_init (&g->lock, NULL);
  pthread_cond_init (&g->cond, NULL);
  g->open = FALSE;
  atomic_init (&g->entered, 0);
  atomic_init (&g->left, 0);
}

static inline void
wt_gate_clear (WtGate *g)
{
  pthread_cond_destroy (&g->cond);
  pthread_mutex_destroy (&g->lock);
}

/* Blocks until the gate opens. A safety limit keeps a broken test from
 * hanging forever; the test then fails on its own assertions. */
static inline void
wt_gate_wait (WtGate *g)
{
  gint64 deadline = g_get_monotonic_time () + 6 * WT_DEADLINE_US;
  atomic_fetch_add (&g->entered, 1);
  pthread_mutex_lock (&g->lock);
  while (!g->open && g_get_monotonic_time () < deadline)
    {
      struct timespec ts;
      clock_gettime (CLOCK_REALTIME, &ts);
      ts.tv_nsec += 10 * 1000 * 1000;
      if (ts.tv_nsec >= 1000000000)
        {
          ts.tv_sec++;
          ts.tv_nsec -= 1000000000;
        }
      pthread_cond_timedwait (&g->cond, &g->lock, &ts);
    }
  pthread_mutex_unlock (&g->lock);
  atomic_fetch_add (&g->left, 1);
}

static inline void
wt_gate_open (WtGate *g)
{
  pthread_mutex_lock (&g->lock);
  g->open = TRUE;
  pthread_cond_broadcast (&g->cond);
  pthread_mutex_unlock (&g->lock);
}

static inline void
wt_gate_job (gpointer data)
{
  wt_gate_wait (data);
}

/* ---- engines ----------------------------------------------------------- */

static inline WeftEngine *
wt_engine_new (guint n_workers)
{
  GError *error = NULL;
  WeftEngine *engine = weft_engine_new (n_workers, &error);
  g_assert_no_error (error);
  g_assert_nonnull (engine);
  return engine;
}

static inline WeftEngineStats
wt_stats (WeftEngine *engine)
{
  WeftEngineStats s;
  memset (&s, 0, sizeof s);
  weft_engine_get_stats (engine, &s);
  return s;
}

/* Waits until every worker sleeps in the poller: the engine is idle. */
static inline void
wt_wait_engine_idle (WeftEngine *engine)
{
  guint n = weft_engine_get_n_workers (engine);
  WT_WAIT_UNTIL (wt_stats (engine).n_sleeping == n);
  g_assert_cmpuint (wt_stats (engine).n_sleeping, ==, n);
}

/* Waits until every worker sleeps and no poll returned for 20 ms, and
 * returns the stats then. Every worker counted asleep is not enough for a
 * "nothing polls" window: a wake written just before the last worker went
 * to sleep is still on its way (a cross-CPU wake takes tens of µs, more
 * under a sanitizer) and makes one poll return after it. */
static inline gboolean
wt_engine_settled_step (WeftEngine *engine, WeftEngineStats *prev)
{
  g_usleep (20000);
  WeftEngineStats s = wt_stats (engine);
  guint n = weft_engine_get_n_workers (engine);
  gboolean settled = s.n_sleeping == n && prev->n_sleeping == n && s.polls == prev->polls;
  *prev = s;
  return settled;
}

static inline WeftEngineStats
wt_wait_engine_settled (WeftEngine *engine)
{
  WeftEngineStats s = wt_stats (engine);
  gboolean settled = FALSE;
  WT_WAIT_UNTIL ((settled = wt_engine_settled_step (engine, &s)));
  g_assert_true (settled);
  return s;
}

/* ---- fds --------------------------------------------------------------- */

static inline void
wt_pipe (int fds[2])
{
  int r = pipe2 (fds, O_CLOEXEC | O_NONBLOCK);
  g_assert_cmpint (r, ==, 0);
}

/* A connected pair of Unix stream sockets, non-blocking. */
static inline void
wt_socketpair (int sv[2])
{
  int r = socketpair (AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv);
  g_assert_cmpint (r, ==, 0);
}

static inline void
wt_write_byte (int fd)
{
  ssize_t n;
  do
    n = write (fd, "x", 1);
  while (n < 0 && errno == EINTR);
  g_assert_cmpint (n, ==, 1);
}

static inline gboolean
wt_fd_is_open (int fd)
{
  return fcntl (fd, F_GETFD) != -1;
}

static inline void
wt_close (int fd)
{
  g_assert_cmpint (close (fd), ==, 0);
}

/* ---- misc -------------------------------------------------------------- */

/* Removes the trees at @paths (NULL-terminated), as `rm -rf` does: the
 * tests' temporary directories, whatever modes a test left inside. */
static inline void
wt_remove_trees (const char *const *paths)
{
  GPtrArray *argv = g_ptr_array_new ();
  g_ptr_array_add (argv, (gpointer) "rm");
  g_ptr_array_add (argv, (gpointer) "-rf");
  for (; *paths != NULL; paths++)
    g_ptr_array_add (argv, (gpointer) *paths);
  g_ptr_array_add (argv, NULL);
  g_spawn_sync (NULL, (gchar **) argv->pdata, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL,
                NULL, NULL);
  g_ptr_array_free (argv, TRUE);
}

#define wt_remove_tree(...) wt_remove_trees ((const char *const[]) { __VA_ARGS__, NULL })

/* xorshift64*: a per-thread generator (GLib's g_test_rand_* is not
 * thread safe). */
static inline guint64
wt_rand_next (guint64 *state)
{
  guint64 x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * G_GUINT64_CONSTANT (2685821657736338717);
}

static inline guint
wt_rand_below (guint64 *state, guint n)
{
  return (guint) ((wt_rand_next (state) >> 33) % n);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define WT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define WT_SANITIZED 1
#endif
#endif
#ifndef WT_SANITIZED
#define WT_SANITIZED 0
#endif
