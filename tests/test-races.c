/* test-races.c: two threads doing conflicting things to one engine or
 * context at the same moment, many times over. Each path targets one
 * interleaving that once went wrong; the sanitizer builds turn a lost
 * reference or a double consumer into a report, the plain build into a
 * count that does not add up.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-test-util.h"

#include <sys/eventfd.h>

/* Two threads released together, so the racing calls overlap. */
typedef struct {
  pthread_barrier_t barrier;
  WeftEngine *engine;
  WeftContext *ctx;
  WtCount count;
  atomic_int posted;     /* posts attempted (each owes exactly one notify) */
  atomic_int stop;
  atomic_int zero_conditions;
  atomic_int fd_calls;
  guint id;
  guint round;
} Race;

static void
race_init (Race *r)
{
  memset (r, 0, sizeof *r);
  g_assert_cmpint (pthread_barrier_init (&r->barrier, NULL, 2), ==, 0);
}

static void
race_clear (Race *r)
{
  pthread_barrier_destroy (&r->barrier);
}

/* Spins for a few hundred nanoseconds at most, a different amount each
 * round: the barrier releases both threads within microseconds of each
 * other, and the jitter slides one call across the other's window. */
static void
race_jitter (guint round)
{
  volatile guint sink = 0;
  for (guint i = 0; i < (round * 7919u) % 512u; i++)
    sink += i;
  (void) sink;
}

static pthread_t
race_spawn (void *(*func) (void *), Race *r)
{
  pthread_t t;
  g_assert_cmpint (pthread_create (&t, NULL, func, r), ==, 0);
  return t;
}

static void
race_join (pthread_t t)
{
  g_assert_cmpint (pthread_join (t, NULL), ==, 0);
}

/* ---- dispatch against destroy ------------------------------------------ */

static void *
dispatch_thread (void *data)
{
  Race *r = data;
  pthread_barrier_wait (&r->barrier);
  race_jitter (r->round);
  weft_context_dispatch (r->ctx);
  return NULL;
}

/* weft_context_dispatch() and weft_context_destroy() on a fresh context
 * with a queued job: exactly one of them consumes the queue, the job's
 * notify runs once, and dispatch never complains that the context is
 * already active (the destroy path marks it active to drain it). */
static void
test_dispatch_vs_destroy (void)
{
  WeftEngine *engine = wt_engine_new (2);
  for (guint i = 0; i < 5000; i++)
    {
      Race r;
      race_init (&r);
      r.round = i;
      r.ctx = weft_context_new (engine);
      g_assert_true (weft_context_post (r.ctx, wt_count_job, &r.count, wt_count_notify));
      pthread_t t = race_spawn (dispatch_thread, &r);
      pthread_barrier_wait (&r.barrier);
      race_jitter (i / 512);
      weft_context_destroy (r.ctx);
      race_join (t);
      WT_WAIT_UNTIL (atomic_load (&r.count.notified) == 1);
      g_assert_cmpint (atomic_load (&r.count.notified), ==, 1);
      g_assert_cmpint (atomic_load (&r.count.ran), <=, 1);
      weft_context_unref (r.ctx);
      race_clear (&r);
    }
  WT_WAIT_UNTIL (wt_stats (engine).n_contexts == 0);
  g_assert_cmpuint (wt_stats (engine).n_contexts, ==, 0);
  weft_engine_unref (engine);
}

/* ---- add_timeout against destroy --------------------------------------- */

static void *
add_timeouts_thread (void *data)
{
  Race *r = data;
  pthread_barrier_wait (&r->barrier);
  /* An hour: only the destroy can end these. The refused one is notified
   * too, so it counts. */
  do
    atomic_fetch_add (&r->posted, 1);
  while (weft_context_add_timeout (r->ctx, 3600 * 1000, wt_count_source_continue, &r->count,
                                   wt_count_notify) != 0);
  return NULL;
}

/* A timeout added while the context is being destroyed must not leave the
 * context referenced from the engine's timer heap: once the last user
 * reference goes, the context is freed at once, not when the engine dies
 * or the hour passes. Every timeout, added or refused, is notified exactly
 * once. */
static void
test_add_timeout_vs_destroy (void)
{
  WeftEngine *engine = wt_engine_new (2);
  for (guint i = 0; i < 1500; i++)
    {
      Race r;
      race_init (&r);
      r.ctx = weft_context_new (engine);
      weft_context_dispatch (r.ctx);
      pthread_t t = race_spawn (add_timeouts_thread, &r);
      pthread_barrier_wait (&r.barrier);
      g_usleep (i % 50);
      weft_context_destroy (r.ctx);
      race_join (t);
      weft_context_unref (r.ctx);
      WT_WAIT_UNTIL (wt_stats (engine).n_contexts == 0);
      g_assert_cmpuint (wt_stats (engine).n_contexts, ==, 0);
      g_assert_cmpint (atomic_load (&r.count.notified), ==, atomic_load (&r.posted));
      g_assert_cmpint (atomic_load (&r.count.ran), ==, 0);
      race_clear (&r);
    }
  weft_engine_unref (engine);
}

/* ---- posts against the last engine unref -------------------------------- */

static void *
post_until_refused_thread (void *data)
{
  Race *r = data;
  pthread_barrier_wait (&r->barrier);
  for (;;)
    {
      atomic_fetch_add (&r->posted, 1);
      if (!weft_context_post (r->ctx, wt_count_job, &r->count, wt_count_notify))
        break;
    }
  return NULL;
}

/* A post that passed the engine's "still alive" check just before the last
 * weft_engine_unref() must not strand its job on a run queue nobody will
 * pop: every post's notify runs exactly once, before the poster returns
 * or during the unref. */
static void
test_post_vs_last_engine_unref (void)
{
  for (guint i = 0; i < 300; i++)
    {
      Race r;
      race_init (&r);
      r.engine = wt_engine_new (2);
      r.ctx = weft_context_new (r.engine);
      weft_context_dispatch (r.ctx);
      pthread_t t = race_spawn (post_until_refused_thread, &r);
      pthread_barrier_wait (&r.barrier);
      g_usleep (i % 100);
      weft_engine_unref (r.engine);
      race_join (t);
      g_assert_cmpint (atomic_load (&r.count.notified), ==, atomic_load (&r.posted));
      g_assert_cmpint (atomic_load (&r.count.notify_while_inside), ==, 0);
      weft_context_unref (r.ctx);
      race_clear (&r);
    }
}

/* ---- modify_fd against readiness --------------------------------------- */

static gboolean
on_readable (gint fd, GIOCondition condition, gpointer data)
{
  Race *r = data;
  (void) fd;
  atomic_fetch_add (&r->fd_calls, 1);
  if (condition == 0)
    atomic_fetch_add (&r->zero_conditions, 1);
  return G_SOURCE_CONTINUE;
}

static void *
modify_thread (void *data)
{
  Race *r = data;
  pthread_barrier_wait (&r->barrier);
  while (!atomic_load (&r->stop))
    {
      GError *error = NULL;
      weft_context_modify_fd (r->ctx, r->id, G_IO_IN, &error);
      g_assert_no_error (error);
    }
  return NULL;
}

/* weft_context_modify_fd() re-arms the fd at once, so a readiness can come
 * in while the previous one is being delivered. The two merge; a callback
 * never sees an empty condition. The fd stays readable throughout. */
static void
test_modify_fd_vs_readiness (void)
{
  Race r;
  int fds[2];
  race_init (&r);
  r.engine = wt_engine_new (2);
  r.ctx = weft_context_new (r.engine);
  wt_pipe (fds);
  wt_write_byte (fds[1]);
  r.id = weft_context_add_fd (r.ctx, fds[0], G_IO_IN, on_readable, &r, NULL, NULL);
  g_assert_cmpuint (r.id, !=, 0);
  weft_context_dispatch (r.ctx);
  pthread_t t = race_spawn (modify_thread, &r);
  pthread_barrier_wait (&r.barrier);
  gint64 end = g_get_monotonic_time () + 500 * 1000;
  while (g_get_monotonic_time () < end && atomic_load (&r.zero_conditions) == 0)
    g_usleep (1000);
  atomic_store (&r.stop, 1);
  race_join (t);
  weft_context_destroy (r.ctx);
  g_assert_cmpint (atomic_load (&r.fd_calls), >, 0);
  g_assert_cmpint (atomic_load (&r.zero_conditions), ==, 0);
  weft_context_unref (r.ctx);
  weft_engine_unref (r.engine);
  wt_close (fds[0]);
  wt_close (fds[1]);
  race_clear (&r);
}

/* ---- /races/coro-abandon-vs-destroy ------------------------------------- */

#define ABANDON_COROS 50
#define ABANDON_ROUNDS 20

typedef struct {
  WeftContext *other;     /* where a notify tries to watch its fd */
  atomic_int waiting;
  atomic_int notified;
  atomic_int still_watched;
} Abandon;

typedef struct {
  Abandon *a;
  int fd;
} AbandonWait;

static gpointer
abandon_body (gpointer data)
{
  AbandonWait *w = data;
  atomic_fetch_add (&w->a->waiting, 1);
  weft_coro_wait_fd (w->fd, G_IO_IN, 5, NULL);
  return NULL;
}

/* Where the owner of an abandoned coroutine's fd closes it: the engine
 * must not watch it any more (else the number, reused, loses its new
 * watcher to the late EPOLL_CTL_DEL). */
static void
abandon_notify (gpointer data)
{
  AbandonWait *w = data;
  if (wt_fd_watched (w->a->other, w->fd))
    atomic_fetch_add (&w->a->still_watched, 1);
  wt_close (w->fd);
  atomic_fetch_add (&w->a->notified, 1);
  g_free (w);
}

static void
test_coro_abandon_vs_destroy (void)
{
  g_test_summary ("Coroutines in weft_coro_wait_fd() whose context is destroyed while their "
                  "5 ms timeouts fire: each notify runs once its fd has left the engine, "
                  "whether the wait ended, or the coroutine was abandoned by the destroy or "
                  "by its own timeout's refused resume");
  WeftEngine *engine = wt_engine_new (2);
  Abandon a = { 0 };
  a.other = weft_context_new (engine);
  weft_context_dispatch (a.other);
  for (int round = 0; round < ABANDON_ROUNDS; round++)
    {
      WeftContext *ctx = weft_context_new (engine);
      weft_context_dispatch (ctx);
      atomic_store (&a.waiting, 0);
      for (int i = 0; i < ABANDON_COROS; i++)
        {
          AbandonWait *w = g_new (AbandonWait, 1);
          w->a = &a;
          w->fd = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
          g_assert_cmpint (w->fd, >=, 0);
          weft_coro_unref (weft_coro_spawn (ctx, abandon_body, w, abandon_notify, 0));
        }
      WT_WAIT_UNTIL (atomic_load (&a.waiting) == ABANDON_COROS);
      /* From before the timeouts to after them, a different offset each
       * round. */
      g_usleep (3000 + (round * 211) % 4000);
      weft_context_destroy (ctx);
      weft_context_unref (ctx);
    }
  WT_WAIT_UNTIL (atomic_load (&a.notified) == ABANDON_ROUNDS * ABANDON_COROS);
  g_assert_cmpint (atomic_load (&a.notified), ==, ABANDON_ROUNDS * ABANDON_COROS);
  g_assert_cmpint (atomic_load (&a.still_watched), ==, 0);
  weft_context_destroy (a.other);
  weft_context_unref (a.other);
  weft_engine_unref (engine);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/races/dispatch-vs-destroy", test_dispatch_vs_destroy);
  g_test_add_func ("/races/add-timeout-vs-destroy", test_add_timeout_vs_destroy);
  g_test_add_func ("/races/post-vs-last-engine-unref", test_post_vs_last_engine_unref);
  g_test_add_func ("/races/modify-fd-vs-readiness", test_modify_fd_vs_readiness);
  g_test_add_func ("/races/coro-abandon-vs-destroy", test_coro_abandon_vs_destroy);
  return g_test_run ();
}
