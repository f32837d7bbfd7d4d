/* bench-pingpong.c: section 4-wakeup, one byte bounced between two loops.
 *
 * Two pipes, a->b and b->a. Side B waits for a byte on a->b and answers with
 * one on b->a; side A waits on b->a and sends the next byte on a->b. The main
 * thread sends the first byte and waits until A has seen the last answer.
 * Figure: round trips per second (after 500 warm-up round trips).
 *
 * Implementations, all "two independent loops":
 *   Weft:     two contexts on one engine, each with a weft_context_add_fd
 *             read callback; 2 workers (the main row) and 1 worker.
 *   libevent: two event_bases, each run by event_base_dispatch in its own
 *             thread, one persistent EV_READ event each (the closest match of
 *             two contexts on two workers); and, as a reference, one
 *             event_base holding both events in one thread.
 *   GLib:     two GMainContexts, each run by a GMainLoop in its own thread,
 *             with a g_unix_fd_source_new (G_IO_IN) source each; and one
 *             GMainContext holding both in one thread.
 * The one-thread variants never need a cross-thread wake: the byte written by
 * one callback is seen by the same thread's next poll.
 *
 * Section 4-wakeup of the micro harness (its summarize.py only prints its
 * known sections); the figure string is new:
 * "fd ping-pong between two contexts: round trips/s".
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <fcntl.h>
#include <stdatomic.h>

#include <glib-unix.h>
#include <weft.h>

#ifdef HAVE_LIBEVENT
#include <event2/event.h>
#include <event2/thread.h>
#endif

#include "weft-bench.h"

#define SECTION "4-wakeup"
#define FIGURE "fd ping-pong between two contexts: round trips/s"
#define WARMUP_RT 500

static int ab[2], ba[2];   /* [0] read end, [1] write end */
static atomic_long rt_target;
static atomic_long rt_count;
static uint64_t t_end;
static sem_t rt_done;

static void
make_pipes (void)
{
  if (pipe2 (ab, O_NONBLOCK | O_CLOEXEC) < 0 || pipe2 (ba, O_NONBLOCK | O_CLOEXEC) < 0)
    wb_die ("pipe2: %s", strerror (errno));
}

static void
close_pipes (void)
{
  close (ab[0]);
  close (ab[1]);
  close (ba[0]);
  close (ba[1]);
}

static void
send_byte (int fd)
{
  char c = 'x';
  while (write (fd, &c, 1) != 1)
    if (errno != EINTR)
      wb_die ("write: %s", strerror (errno));
}

static int
drain_fd (int fd)
{
  char buf[64];
  ssize_t r = read (fd, buf, sizeof buf);
  if (r < 0 && errno != EAGAIN && errno != EINTR)
    wb_die ("read: %s", strerror (errno));
  return r > 0 ? (int) r : 0;
}

/* Side B: answer every byte. */
static void
side_b (void)
{
  int n = drain_fd (ab[0]);
  for (int i = 0; i < n; i++)
    send_byte (ba[1]);
}

/* Side A: count the answer, send the next byte unless the target is met. */
static void
side_a (void)
{
  int n = drain_fd (ba[0]);
  for (int i = 0; i < n; i++)
    {
      if (++rt_count == rt_target)
        {
          t_end = wb_now_ns ();
          sem_post (&rt_done);
        }
      else
        send_byte (ab[1]);
    }
}

/* Runs warm-up then @n measured round trips; the loops must be running. */
static double
measure (long n)
{
  rt_count = 0;
  rt_target = WARMUP_RT;
  send_byte (ab[1]);
  wb_sem_wait (&rt_done);

  rt_count = 0;
  rt_target = n;
  uint64_t t0 = wb_now_ns ();
  send_byte (ab[1]);
  wb_sem_wait (&rt_done);
  return (double) n / ((double) (t_end - t0) / 1e9);
}

/* ---- Weft --------------------------------------------------------------------- */

static gboolean
weft_on_a (gint fd, GIOCondition cond, gpointer data)
{
  side_a ();
  return G_SOURCE_CONTINUE;
}

static gboolean
weft_on_b (gint fd, GIOCondition cond, gpointer data)
{
  side_b ();
  return G_SOURCE_CONTINUE;
}

static void
run_weft (guint n_workers, long n)
{
  GError *error = NULL;
  char impl[128], note[256];

  make_pipes ();
  WeftEngine *engine = weft_engine_new (n_workers, &error);
  if (engine == NULL)
    wb_die ("weft_engine_new: %s", error->message);
  WeftContext *ca = weft_context_new (engine), *cb = weft_context_new (engine);
  guint ida = weft_context_add_fd (ca, ba[0], G_IO_IN, weft_on_a, NULL, NULL, &error);
  if (ida == 0)
    wb_die ("weft_context_add_fd: %s", error->message);
  guint idb = weft_context_add_fd (cb, ab[0], G_IO_IN, weft_on_b, NULL, NULL, &error);
  if (idb == 0)
    wb_die ("weft_context_add_fd: %s", error->message);
  weft_context_dispatch (ca);
  weft_context_dispatch (cb);

  WeftEngineStats s0, s1;
  weft_engine_get_stats (engine, &s0);
  double rate = measure (n);
  weft_engine_get_stats (engine, &s1);

  /* The stats span the warm-up too. */
  double rts = (double) (n + WARMUP_RT);
  snprintf (impl, sizeof impl, "%s (2 contexts, %u worker%s)", WB_VERSION, n_workers,
            n_workers == 1 ? "" : "s");
  snprintf (note, sizeof note,
            "2 contexts, weft_context_add_fd (G_IO_IN) each, engine of %u worker%s; per round "
            "trip: %.2f wake writes, %.2f epoll_wait calls, %.2f fd events",
            n_workers, n_workers == 1 ? "" : "s", (double) (s1.wakeups - s0.wakeups) / rts,
            (double) (s1.polls - s0.polls) / rts, (double) (s1.fd_events - s0.fd_events) / rts);
  wb_report (SECTION, impl, FIGURE, rate, "round trips/s", note);

  weft_context_remove (ca, ida);
  weft_context_remove (cb, idb);
  weft_context_unref (ca);
  weft_context_unref (cb);
  weft_engine_unref (engine);
  close_pipes ();
}

/* ---- libevent ------------------------------------------------------------------ */

#ifdef HAVE_LIBEVENT
static void
ev_on_a (evutil_socket_t fd, short what, void *arg)
{
  side_a ();
}

static void
ev_on_b (evutil_socket_t fd, short what, void *arg)
{
  side_b ();
}

static gpointer
ev_thread (gpointer data)
{
  event_base_dispatch (data);
  return NULL;
}

static void
run_libevent (gboolean two_threads, long n)
{
  char impl[128], ver[32];
  const char *v = event_get_version ();
  int major = 0, minor = 0;
  sscanf (v, "%d.%d", &major, &minor);
  snprintf (ver, sizeof ver, "%d.%d", major, minor);

  make_pipes ();
  struct event_base *b1 = event_base_new ();
  struct event_base *b2 = two_threads ? event_base_new () : b1;
  struct event *ea = event_new (b1, ba[0], EV_READ | EV_PERSIST, ev_on_a, NULL);
  struct event *eb = event_new (b2, ab[0], EV_READ | EV_PERSIST, ev_on_b, NULL);
  event_add (ea, NULL);
  event_add (eb, NULL);
  GThread *t1 = g_thread_new ("ev-a", ev_thread, b1);
  GThread *t2 = two_threads ? g_thread_new ("ev-b", ev_thread, b2) : NULL;

  double rate = measure (n);

  event_base_loopbreak (b1);
  if (two_threads)
    event_base_loopbreak (b2);
  g_thread_join (t1);
  if (t2 != NULL)
    g_thread_join (t2);
  event_free (ea);
  event_free (eb);
  event_base_free (b1);
  if (two_threads)
    event_base_free (b2);
  close_pipes ();

  if (two_threads)
    {
      snprintf (impl, sizeof impl, "libevent %s (2 event_bases, 1 thread each)", ver);
      wb_report (SECTION, impl, FIGURE, rate, "round trips/s",
                 "two event_bases, each run by event_base_dispatch in its own thread, one "
                 "EV_READ + EV_PERSIST event each (the counterpart of 2 contexts on 2 workers)");
    }
  else
    {
      snprintf (impl, sizeof impl, "libevent %s (1 event_base, both pipes, 1 thread)", ver);
      wb_report (SECTION, impl, FIGURE, rate, "round trips/s",
                 "reference: both events on one event_base in one thread; no cross-thread wake");
    }
}
#endif

/* ---- GLib ------------------------------------------------------------------------ */

static gboolean
glib_on_a (gint fd, GIOCondition cond, gpointer data)
{
  side_a ();
  return G_SOURCE_CONTINUE;
}

static gboolean
glib_on_b (gint fd, GIOCondition cond, gpointer data)
{
  side_b ();
  return G_SOURCE_CONTINUE;
}

static gpointer
glib_thread (gpointer data)
{
  GMainLoop *loop = data;
  GMainContext *ctx = g_main_loop_get_context (loop);
  g_main_context_push_thread_default (ctx);
  g_main_loop_run (loop);
  g_main_context_pop_thread_default (ctx);
  return NULL;
}

static GSource *
glib_watch (GMainContext *ctx, int fd, GUnixFDSourceFunc func)
{
  GSource *s = g_unix_fd_source_new (fd, G_IO_IN);
  g_source_set_callback (s, (GSourceFunc) (void (*) (void)) func, NULL, NULL);
  g_source_attach (s, ctx);
  return s;
}

static void
run_glib (gboolean two_threads, long n)
{
  char impl[128];

  make_pipes ();
  GMainContext *c1 = g_main_context_new ();
  GMainContext *c2 = two_threads ? g_main_context_new () : g_main_context_ref (c1);
  GSource *sa = glib_watch (c1, ba[0], glib_on_a);
  GSource *sb = glib_watch (c2, ab[0], glib_on_b);
  GMainLoop *l1 = g_main_loop_new (c1, FALSE);
  GMainLoop *l2 = two_threads ? g_main_loop_new (c2, FALSE) : NULL;
  GThread *t1 = g_thread_new ("glib-a", glib_thread, l1);
  GThread *t2 = two_threads ? g_thread_new ("glib-b", glib_thread, l2) : NULL;
  while (!g_main_loop_is_running (l1) || (l2 != NULL && !g_main_loop_is_running (l2)))
    g_usleep (1000);

  double rate = measure (n);

  g_main_loop_quit (l1);
  if (l2 != NULL)
    g_main_loop_quit (l2);
  g_thread_join (t1);
  if (t2 != NULL)
    g_thread_join (t2);
  g_source_destroy (sa);
  g_source_destroy (sb);
  g_source_unref (sa);
  g_source_unref (sb);
  g_main_loop_unref (l1);
  if (l2 != NULL)
    g_main_loop_unref (l2);
  g_main_context_unref (c1);
  g_main_context_unref (c2);
  close_pipes ();

  if (two_threads)
    {
      snprintf (impl, sizeof impl, "GLib %u.%u (2 GMainContexts, 1 thread each)",
                glib_major_version, glib_minor_version);
      wb_report (SECTION, impl, FIGURE, rate, "round trips/s",
                 "two GMainContexts, each run by a GMainLoop in its own thread, one "
                 "g_unix_fd_source_new (G_IO_IN) source each");
    }
  else
    {
      snprintf (impl, sizeof impl, "GLib %u.%u (1 GMainContext, both pipes, 1 thread)",
                glib_major_version, glib_minor_version);
      wb_report (SECTION, impl, FIGURE, rate, "round trips/s",
                 "reference: both fd sources on one GMainContext in one thread; no "
                 "cross-thread wake");
    }
}

int
main (void)
{
  alarm (85);
  long n = wb_n (20000, 2000);
  sem_init (&rt_done, 0, 0);

#ifdef HAVE_LIBEVENT
  if (evthread_use_pthreads () != 0)
    wb_die ("evthread_use_pthreads failed");
#endif

  run_weft (2, n);
  run_weft (1, n);
#ifdef HAVE_LIBEVENT
  run_libevent (TRUE, n);
  run_libevent (FALSE, n);
#else
  fprintf (stderr, "libevent not found at configure time: its rows are skipped\n");
#endif
  run_glib (TRUE, n);
  run_glib (FALSE, n);
  return 0;
}
