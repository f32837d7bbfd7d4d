/* bench-timers.c: section 3-timers, a context's timeouts.
 *
 * Same plan and figure strings as the libevent / libuv / GLib timer anchors
 * of the micro harness (s3_*.c there). The engine has 1 worker, the peers'
 * loops are single-threaded; the main thread only sets up and waits.
 *
 * insert, cancel   1M weft_context_add_timeout_us() with deadlines uniform
 *                  in [1 s, 61 s) (us resolution), added from inside a job
 *                  running on the context (as libevent's are added from a
 *                  loop callback; all count from the job's one clock
 *                  reading, as libevent's count from its cached time), then
 *                  weft_context_remove() of each in insertion order, in the
 *                  same job.
 * fire, all due    1M (and 100k) timeouts due in [1 us, 50 ms), added to a
 *                  context that is not dispatched yet, so none can run while
 *                  they become due. Sleep 80 ms, then weft_context_dispatch()
 *                  and time until the last one has fired: the engine's
 *                  timerfd has already fired, so this is the context's pass
 *                  over its heap (pop + callback + source free).
 * out of order     during the 1M pass: share of timeouts fired right after one
 *                  with a later deadline. Weft reads the clock inside the add,
 *                  so each deadline is bracketed by readings before and after
 *                  the call; only certain inversions count (an add that was
 *                  slow, e.g. preempted, cannot produce a false one).
 * spread over 1 s  100k timeouts due at random us instants in
 *                  [100 ms, 1.1 s): process CPU time (CLOCK_PROCESS_CPUTIME_ID:
 *                  the worker plus the main thread, which sleeps on a
 *                  semaphore) / timers, and lateness = fire time - deadline.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdatomic.h>

#include <weft.h>

#include "weft-bench.h"

#define SECTION "3-timers"

static char impl[128];
static WeftEngine *engine;
static long n_big, n_small, n_spread;
static guint32 *delay_us;
static uint64_t *due_ns;   /* deadline estimate: clock before the add + delay */
static uint64_t *due_hi;   /* upper bound: clock after the add + delay */
static guint *ids;
static sem_t done;

/* ---- insert + cancel --------------------------------------------------------- */

static uint64_t ic_insert_ns, ic_cancel_ns;
static long ic_failed, ic_cancelled;

#define CANCEL_BUDGET_NS (10 * (uint64_t) 1000000000u)

static gboolean
noop_timeout (gpointer data)
{
  return G_SOURCE_REMOVE;
}

static void
insert_cancel_job (gpointer data)
{
  WeftContext *ctx = data;
  long n = n_big;

  uint64_t t0 = wb_now_ns ();
  for (long i = 0; i < n; i++)
    ids[i] = weft_context_add_timeout_us (ctx, delay_us[i], noop_timeout, NULL, NULL);
  uint64_t t1 = wb_now_ns ();
  /* Cancel in insertion order, under a time budget so that a remove whose
   * cost grows with the number of live sources cannot hang the run: past the
   * budget the loop stops and the rest goes with the context. The clock is
   * read every 1024 removes only. */
  long i = 0;
  uint64_t limit = t1 + CANCEL_BUDGET_NS, t2 = t1;
  while (i < n)
    {
      long end = MIN (n, i + 1024);
      for (; i < end; i++)
        if (!weft_context_remove (ctx, ids[i]))
          ic_failed++;
      t2 = wb_now_ns ();
      if (t2 > limit)
        break;
    }

  ic_insert_ns = t1 - t0;
  ic_cancel_ns = t2 - t1;
  ic_cancelled = i;
  for (long j = 0; j < n; j++)
    if (ids[j] == 0)
      ic_failed++;
  sem_post (&done);
}

static void
insert_cancel (void)
{
  char note[256];
  uint64_t seed = 12345;
  for (long i = 0; i < n_big; i++)
    delay_us[i] = 1000000u + (guint32) (wb_rand (&seed) % 60000000u);

  WeftContext *ctx = weft_context_new (engine);
  weft_context_dispatch (ctx);
  if (!weft_context_post (ctx, insert_cancel_job, ctx, NULL))
    wb_die ("weft_context_post failed");
  wb_sem_wait (&done);
  weft_context_unref (ctx);
  if (ic_failed)
    wb_die ("insert/cancel: %ld adds or removes failed", ic_failed);

  snprintf (note, sizeof note,
            "weft_context_add_timeout_us; N=%ld, deadlines uniform in [1 s, 61 s), us "
            "resolution; added from a job on the context (one clock reading per callback, as "
            "libevent and libuv count from a cached loop time)",
            n_big);
  wb_report (SECTION, impl, "insert", (double) ic_insert_ns / (double) n_big, "ns/timer", note);
  if (ic_cancelled == n_big)
    snprintf (note, sizeof note,
              "weft_context_remove by id, insertion order, from the same job; includes "
              "freeing the source");
  else
    {
      snprintf (note, sizeof note,
                "INCOMPLETE: only %ld of %ld removed within the %.0f s budget, value is the "
                "average over those (the first ones, with the most live sources); "
                "weft_context_remove by id, insertion order",
                ic_cancelled, n_big, (double) CANCEL_BUDGET_NS / 1e9);
      fprintf (stderr, "cancel: only %ld of %ld timeouts removed in %.0f s\n", ic_cancelled,
               n_big, (double) CANCEL_BUDGET_NS / 1e9);
    }
  wb_report (SECTION, impl, "cancel", (double) ic_cancel_ns / (double) ic_cancelled, "ns/timer",
             note);
}

/* ---- fire, all due ----------------------------------------------------------- */

static long drain_n, fired, inversions;
static uint64_t last_due_lo, t_last_fired;

static gboolean
drain_timeout (gpointer data)
{
  long i = (long) (intptr_t) data;
  /* Weft's deadline of timeout i lies in [due_ns[i], due_hi[i]]: count only
   * the certain inversions. */
  if (due_hi[i] < last_due_lo)
    inversions++;
  last_due_lo = due_ns[i];
  if (++fired == drain_n)
    {
      t_last_fired = wb_now_ns ();
      sem_post (&done);
    }
  return G_SOURCE_REMOVE;
}

static void
drain (long n, const char *fig)
{
  char note[256];
  uint64_t seed = 777;
  WeftContext *ctx = weft_context_new (engine);

  drain_n = n;
  fired = inversions = 0;
  last_due_lo = 0;
  uint64_t ta = wb_now_ns ();
  for (long i = 0; i < n; i++)
    {
      delay_us[i] = 1 + (guint32) (wb_rand (&seed) % 49999u);
      due_ns[i] = wb_now_ns () + (uint64_t) delay_us[i] * 1000u;
      if (weft_context_add_timeout_us (ctx, delay_us[i], drain_timeout, (gpointer) (intptr_t) i,
                                       NULL) == 0)
        wb_die ("weft_context_add_timeout_us failed");
      due_hi[i] = wb_now_ns () + (uint64_t) delay_us[i] * 1000u;
    }
  uint64_t tb = wb_now_ns ();
  g_usleep (80000);

  uint64_t t0 = wb_now_ns ();
  weft_context_dispatch (ctx);
  wb_sem_wait (&done);
  weft_context_unref (ctx);

  snprintf (note, sizeof note,
            "N=%ld, deadlines in [1 us, 50 ms), added before dispatch (add phase %.0f ms), all "
            "due before weft_context_dispatch; dispatch -> last callback",
            n, (double) (tb - ta) / 1e6);
  wb_report (SECTION, impl, fig, (double) (t_last_fired - t0) / (double) n, "ns/timer", note);
  if (n == n_big)
    wb_report (SECTION, impl, "fired out of deadline order", 100.0 * (double) inversions / (double) n,
               "%",
               "drain test, N=1M: share of timers fired right after one with a later deadline "
               "(certain cases only: deadlines bracketed by clock readings before and after "
               "each add)");
}

/* ---- spread over 1 s ------------------------------------------------------- */

static int64_t *late;

static gboolean
spread_timeout (gpointer data)
{
  long i = (long) (intptr_t) data;
  late[fired] = (int64_t) (wb_now_ns () - due_ns[i]);
  if (++fired == n_spread)
    sem_post (&done);
  return G_SOURCE_REMOVE;
}

/* @label: NULL for the engine's default slack (the plain figure strings), or
 * a suffix naming the slack, as libevent's rows name its clock. */
static void
spread (guint64 slack_us, const char *label)
{
  char note[320], fig[160];
  uint64_t seed = 4242;
  WeftContext *ctx = weft_context_new (engine);
  WeftEngineStats s0, s1;

  fired = 0;
  for (long i = 0; i < n_spread; i++)
    {
      delay_us[i] = 100000u + (guint32) (wb_rand (&seed) % 1000000u);
      due_ns[i] = wb_now_ns () + (uint64_t) delay_us[i] * 1000u;
      if (weft_context_add_timeout_us (ctx, delay_us[i], spread_timeout, (gpointer) (intptr_t) i,
                                       NULL) == 0)
        wb_die ("weft_context_add_timeout_us failed");
    }
  guint64 old_slack = weft_engine_get_timer_slack (engine);
  weft_engine_set_timer_slack (engine, slack_us);
  weft_engine_get_stats (engine, &s0);
  uint64_t c0 = wb_process_cpu_ns ();
  weft_context_dispatch (ctx);
  wb_sem_wait (&done);
  uint64_t c1 = wb_process_cpu_ns ();
  weft_engine_get_stats (engine, &s1);
  weft_context_unref (ctx);

  weft_engine_set_timer_slack (engine, old_slack);

  snprintf (note, sizeof note,
            "%ld timeouts due at random us instants in [100 ms, 1.1 s); timer slack %"
            G_GUINT64_FORMAT " us; process CPU (worker + sleeping main thread) / timers; %"
            G_GUINT64_FORMAT " epoll_wait calls",
            n_spread, slack_us, s1.polls - s0.polls);
  snprintf (fig, sizeof fig, "fire, spread over 1 s%s%s: CPU per timer", label ? ", " : "",
            label ? label : "");
  wb_report (SECTION, impl, fig, (double) (c1 - c0) / (double) n_spread, "ns/timer", note);
  snprintf (fig, sizeof fig, "fire, spread over 1 s%s%s: lateness", label ? ", " : "",
            label ? label : "");
  wb_report_latency (SECTION, impl, fig, late, (size_t) n_spread,
                     "fire time - deadline (deadline from a clock reading just before the add; "
                     "timerfd, ns resolution; a timeout may fire up to the slack late)");
}

int
main (void)
{
  GError *error = NULL;

  alarm (85);
  n_big = wb_n (1000000, 100000);
  n_small = wb_n (100000, 10000);
  n_spread = wb_n (100000, 10000);
  sem_init (&done, 0, 0);
  delay_us = calloc ((size_t) n_big, sizeof *delay_us);
  due_ns = calloc ((size_t) n_big, sizeof *due_ns);
  due_hi = calloc ((size_t) n_big, sizeof *due_hi);
  ids = calloc ((size_t) n_big, sizeof *ids);
  late = calloc ((size_t) n_spread, sizeof *late);
  if (delay_us == NULL || due_ns == NULL || due_hi == NULL || ids == NULL || late == NULL)
    wb_die ("out of memory");

  snprintf (impl, sizeof impl, "%s (context timeouts, 1 worker)", WB_VERSION);
  engine = weft_engine_new (1, &error);
  if (engine == NULL)
    wb_die ("weft_engine_new: %s", error->message);

  insert_cancel ();
  drain (n_big, "fire, all due (one loop pass)");
  drain (n_small, "fire, all due (one loop pass), N=100k");
  spread (weft_engine_get_timer_slack (engine), NULL);
  spread (0, "timer slack 0 (precise)");
  spread (1000, "timer slack 1 ms");
  /* The default before it became 1 ms (the kernel's timer slack). */
  spread (50, "timer slack 50 us");

  weft_engine_unref (engine);
  return 0;
}
