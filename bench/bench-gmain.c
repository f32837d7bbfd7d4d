/* bench-gmain.c: section 2-handoff, handing a job to a thread that runs a
 * GMainLoop: weft_main_context_post against g_main_context_invoke, in the
 * same run and with the same driver.
 *
 * A loop thread runs g_main_loop_run on a private GMainContext. The main
 * thread is the producer.
 *
 * throughput   The producer submits 1M preallocated jobs back to back; each
 *              job adds its payload to a checksum and bumps a count; the
 *              clock stops when the producer is back from the semaphore the
 *              last job posted. Also the time of the submit loop alone
 *              ("producer time per submit"). Figure strings as the micro
 *              harness's "foreign thread -> loop thread".
 *
 * latency      The producer spins 50 us so the loop thread is asleep in
 *              poll(), stamps t0, submits one job and blocks on a
 *              semaphore; the job stamps t1 and posts it. one-way = t1 - t0,
 *              round trip = until the producer is back from sem_wait.
 *              Figure strings "idle loop woken: ...". The two
 *              implementations alternate in 5 blocks so that a noisy moment
 *              hits both alike.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdatomic.h>

#include <weft.h>

#include "weft-bench.h"

#define SECTION "2-handoff"
#define FIG_TPUT "foreign thread -> loop thread"
#define FIG_LAT "idle loop woken"
#define GAP_NS 50000u
#define N_BLOCKS 5
#define WARMUP 10 /* per block */

typedef void (*SubmitFunc) (void (*func) (gpointer), gpointer data);

static GMainContext *mc;
static GMainLoop *loop;
static char impl_glib[128];

static void
submit_weft (void (*func) (gpointer), gpointer data)
{
  if (!weft_main_context_post (mc, func, data, NULL))
    wb_die ("weft_main_context_post failed");
}

/* g_main_context_invoke wants a GSourceFunc. */
typedef struct {
  void (*func) (gpointer);
  gpointer data;
} Invoke;

static gboolean
invoke_trampoline (gpointer data)
{
  Invoke *inv = data;
  inv->func (inv->data);
  return G_SOURCE_REMOVE;
}

static void
submit_glib (void (*func) (gpointer), gpointer data)
{
  /* The trampoline record lives in the job (see TputJob / lat_inv). */
  Invoke *inv = data;
  inv->func = func;
  g_main_context_invoke (mc, invoke_trampoline, inv);
}

/* ---- throughput ------------------------------------------------------------ */

typedef struct {
  Invoke inv;        /* used by the GLib path only; inv.data points back here */
  guint64 payload;
} TputJob;

static atomic_ulong tput_sum;
static atomic_long tput_count;
static long tput_n;
static sem_t tput_done;

static void
tput_job (gpointer data)
{
  const TputJob *job = data;
  atomic_fetch_add_explicit (&tput_sum, job->payload, memory_order_relaxed);
  if (atomic_fetch_add_explicit (&tput_count, 1, memory_order_acq_rel) + 1 == tput_n)
    sem_post (&tput_done);
}

static void
run_tput (const char *impl, SubmitFunc submit, gboolean glib, const char *note)
{
  gboolean report = note != NULL; /* NULL: a warm-up run */
  char f[256];
  TputJob *jobs = calloc ((size_t) tput_n, sizeof *jobs);
  if (jobs == NULL)
    wb_die ("out of memory");
  for (long i = 0; i < tput_n; i++)
    {
      jobs[i].payload = (guint64) i + 1;
      jobs[i].inv.data = &jobs[i];
    }
  atomic_store (&tput_sum, 0);
  atomic_store (&tput_count, 0);

  uint64_t t0 = wb_now_ns ();
  for (long i = 0; i < tput_n; i++)
    submit (tput_job, glib ? (gpointer) &jobs[i].inv : (gpointer) &jobs[i]);
  uint64_t t_sub = wb_now_ns ();
  wb_sem_wait (&tput_done);
  uint64_t t1 = wb_now_ns ();

  if (atomic_load (&tput_sum) != (guint64) tput_n * (guint64) (tput_n + 1) / 2)
    wb_die ("%s: checksum mismatch", impl);
  if (!report)
    {
      free (jobs);
      return;
    }
  snprintf (f, sizeof f, "%s: throughput", FIG_TPUT);
  wb_report (SECTION, impl, f, (double) tput_n / ((double) (t1 - t0) / 1e3), "Mjobs/s", note);
  snprintf (f, sizeof f, "%s: producer time per submit", FIG_TPUT);
  wb_report (SECTION, impl, f, (double) (t_sub - t0) / (double) tput_n, "ns",
             "submit loop only (the loop thread runs at the same time)");
  free (jobs);
}

/* ---- latency ------------------------------------------------------------------ */

typedef struct {
  const char *impl;
  SubmitFunc submit;
  gboolean glib;
  int64_t *oneway, *rtt;
  long n;
} LatTest;

static sem_t lat_reply;
static uint64_t lat_t0;
static int64_t *lat_slot;
static Invoke lat_inv;

static void
lat_job (gpointer data)
{
  uint64_t t1 = wb_now_ns ();
  *lat_slot = (int64_t) (t1 - lat_t0);
  sem_post (&lat_reply);
}

static void
lat_block (LatTest *t, long k)
{
  int64_t scratch;
  for (long i = -WARMUP; i < k; i++)
    {
      gboolean keep = i >= 0;
      lat_slot = keep ? &t->oneway[t->n] : &scratch;
      wb_spin_ns (GAP_NS);
      lat_t0 = wb_now_ns ();
      t->submit (lat_job, t->glib ? (gpointer) &lat_inv : NULL);
      wb_sem_wait (&lat_reply);
      uint64_t t2 = wb_now_ns ();
      if (keep)
        t->rtt[t->n++] = (int64_t) (t2 - lat_t0);
    }
}

static void
lat_report (LatTest *t, const char *note)
{
  char f[256];
  snprintf (f, sizeof f, "%s: one-way latency", FIG_LAT);
  wb_report_latency (SECTION, t->impl, f, t->oneway, (size_t) t->n, note);
  snprintf (f, sizeof f, "%s: round trip", FIG_LAT);
  wb_report_latency (SECTION, t->impl, f, t->rtt, (size_t) t->n, note);
}

/* ---- the loop thread -------------------------------------------------------------- */

static gpointer
loop_thread (gpointer data)
{
  g_main_context_push_thread_default (mc);
  g_main_loop_run (loop);
  g_main_context_pop_thread_default (mc);
  return NULL;
}

static gboolean
quit_loop (gpointer data)
{
  g_main_loop_quit (loop);
  return G_SOURCE_REMOVE;
}

int
main (void)
{
  snprintf (impl_glib, sizeof impl_glib, "GLib %u.%u g_main_context_invoke (bench-gmain)",
            glib_major_version, glib_minor_version);
  const char *impl_weft = "weft_main_context_post";
  tput_n = wb_n (1000000, 50000);
  long lat_k = wb_n (5000, 300);
  sem_init (&tput_done, 0, 0);
  sem_init (&lat_reply, 0, 0);
  lat_inv.data = NULL;

  mc = g_main_context_new ();
  loop = g_main_loop_new (mc, FALSE);
  GThread *thread = g_thread_new ("loop", loop_thread, NULL);

  /* Warm both paths (the first post attaches Weft's source). */
  run_tput (impl_weft, submit_weft, FALSE, NULL);
  run_tput (impl_glib, submit_glib, TRUE, NULL);

  run_tput (impl_weft, submit_weft, FALSE,
            "lock-free push; eventfd write only when the loop may sleep");
  run_tput (impl_glib, submit_glib, TRUE, "idle source per job, context lock, wakeup");

  LatTest tests[2] = {
    { impl_weft, submit_weft, FALSE, NULL, NULL, 0 },
    { impl_glib, submit_glib, TRUE, NULL, NULL, 0 },
  };
  for (int i = 0; i < 2; i++)
    {
      tests[i].oneway = calloc ((size_t) lat_k, sizeof (int64_t));
      tests[i].rtt = calloc ((size_t) lat_k, sizeof (int64_t));
    }
  long per_block = lat_k / N_BLOCKS;
  for (int b = 0; b < N_BLOCKS; b++)
    for (int i = 0; i < 2; i++)
      lat_block (&tests[i], b == N_BLOCKS - 1 ? lat_k - tests[i].n : per_block);
  lat_report (&tests[0], "loop thread blocked in poll(); woken through the queue's eventfd");
  lat_report (&tests[1], "loop thread blocked in poll(); woken through the context's eventfd");

  g_main_context_invoke (mc, quit_loop, NULL);
  g_thread_join (thread);
  for (int i = 0; i < 2; i++)
    {
      free (tests[i].oneway);
      free (tests[i].rtt);
    }
  g_main_loop_unref (loop);
  g_main_context_unref (mc);
  return 0;
}
