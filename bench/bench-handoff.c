/* bench-handoff.c: section 2-handoff, handing a job to another thread.
 *
 * The scenarios and figure strings follow the micro harness (s2_harness.h
 * there), so Weft's rows sit beside GThreadPool, g_main_context_invoke,
 * uv_async_send and event_active:
 *
 * throughput   The main thread (the producer, a third thread on 2 CPUs)
 *              submits 1M preallocated jobs back to back. Each job adds its
 *              payload to a checksum and bumps an atomic count; the clock
 *              stops when the producer is back from the semaphore the last
 *              job posted.  Also the time of the submit loop alone.
 *   (a) weft_engine_post into an engine of 2 workers: "1 producer -> pool of 2"
 *   (b) weft_context_post into one context of that engine:
 *       "foreign thread -> loop thread"
 *   (d) wake-up writes counted by weft_engine_get_stats during those runs:
 *       "busy workers: wakeup syscalls per 1k jobs".
 *
 * latency      5000 samples (after 50 warm-up ones). The producer spins
 *              50 us so the workers fall asleep in epoll_wait, stamps t0,
 *              submits one job and blocks on a semaphore; the job stamps t1
 *              and posts the semaphore.  one-way = t1 - t0; round trip =
 *              until the producer is back from sem_wait.
 *   (c) "idle worker woken" for weft_engine_post, "idle loop woken" for
 *       weft_context_post.
 *
 * bare eventfd The physical floor, measured in the same process and run:
 *              a thread asleep in epoll_wait on an eventfd, woken by a
 *              write() after the same 50 us gap; one-way = write -> return
 *              of epoll_wait.  Same figure string as section 4 of the micro
 *              harness ("sleeping loop, unpinned: wake latency"), reported
 *              here under 2-handoff so it sits next to Weft's rows.
 *              The bare receiver acknowledges through an atomic the waker
 *              spins on, as in the micro harness; Weft's job posts a
 *              semaphore the producer sleeps on. The waker's vCPU halting
 *              in that sleep makes the next wake slower on this VM, so the
 *              bare wake is also measured with the semaphore reply of
 *              Weft's test ("sleeping loop, unpinned, semaphore reply"):
 *              the like-for-like floor.
 *              The four latency tests run interleaved in 5 blocks so that
 *              a noisy moment hits all of them alike; the ratio rows give
 *              Weft's one-way median as % of each bare one of the same run.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <weft.h>

#include "weft-bench.h"

#define SECTION "2-handoff"
#define N_WORKERS 2
#define GAP_NS 50000u
#define N_BLOCKS 5
#define WARMUP 10   /* per block */

typedef struct {
  guint64 payload;
} TputJob;

/* A job with its queue node inside, as the micro harness's peers have
 * theirs (job_t): for the _post_slot rows. */
typedef struct {
  WeftJobSlot slot;
  guint64 payload;
} SlotJob;

typedef void (*SubmitFunc) (WeftJobFunc func, gpointer data);

/* Read by the producer on every submit; the counters the consumers bump
 * below get lines of their own, so the producer's reads do not miss on the
 * harness's own traffic (see bench-serial.c: that cost depended on link
 * layout). */
#define LINE __attribute__ ((aligned (64)))
static WeftEngine *engine LINE;
static WeftContext *context;

static void
submit_engine (WeftJobFunc func, gpointer data)
{
  if (!weft_engine_post (engine, func, data, NULL))
    wb_die ("weft_engine_post failed");
}

static void
submit_context (WeftJobFunc func, gpointer data)
{
  if (!weft_context_post (context, func, data, NULL))
    wb_die ("weft_context_post failed");
}

static void
submit_engine_slot (WeftJobFunc func, gpointer data)
{
  if (!weft_engine_post_slot (engine, &((SlotJob *) data)->slot, func, data, NULL))
    wb_die ("weft_engine_post_slot failed");
}

static void
submit_context_slot (WeftJobFunc func, gpointer data)
{
  if (!weft_context_post_slot (context, &((SlotJob *) data)->slot, func, data, NULL))
    wb_die ("weft_context_post_slot failed");
}

/* ---- throughput ------------------------------------------------------------ */

static atomic_ulong tput_sum LINE;
static atomic_long tput_count LINE;
static long tput_n LINE;
static sem_t tput_done;

static inline void
tput_count_job (guint64 payload)
{
  atomic_fetch_add_explicit (&tput_sum, payload, memory_order_relaxed);
  if (atomic_fetch_add_explicit (&tput_count, 1, memory_order_acq_rel) + 1 == tput_n)
    sem_post (&tput_done);
}

static void
tput_job (gpointer data)
{
  tput_count_job (((const TputJob *) data)->payload);
}

static void
tput_slot_job (gpointer data)
{
  tput_count_job (((const SlotJob *) data)->payload);
}

/* @slots: the jobs are SlotJobs posted with a _post_slot submit. */
static void
run_tput (const char *impl, const char *fig, SubmitFunc submit, gboolean slots,
          const char *note)
{
  char f[256], n2[256];
  size_t size = slots ? sizeof (SlotJob) : sizeof (TputJob);
  size_t at = slots ? G_STRUCT_OFFSET (SlotJob, payload) : G_STRUCT_OFFSET (TputJob, payload);
  WeftJobFunc job_func = slots ? tput_slot_job : tput_job;
  char *jobs = calloc ((size_t) tput_n, size);
  if (jobs == NULL)
    wb_die ("out of memory");
  for (long i = 0; i < tput_n; i++)
    *(guint64 *) (jobs + (size_t) i * size + at) = (guint64) i + 1;
  atomic_store (&tput_sum, 0);
  atomic_store (&tput_count, 0);

  WeftEngineStats s0, s1;
  weft_engine_get_stats (engine, &s0);
  uint64_t t0 = wb_now_ns ();
  for (long i = 0; i < tput_n; i++)
    submit (job_func, jobs + (size_t) i * size);
  uint64_t t_sub = wb_now_ns ();
  wb_sem_wait (&tput_done);
  uint64_t t1 = wb_now_ns ();
  weft_engine_get_stats (engine, &s1);

  if (atomic_load (&tput_sum) != (guint64) tput_n * (guint64) (tput_n + 1) / 2)
    wb_die ("%s: checksum mismatch", impl);

  snprintf (f, sizeof f, "%s: throughput", fig);
  wb_report (SECTION, impl, f, (double) tput_n / ((double) (t1 - t0) / 1e3), "Mjobs/s", note);
  snprintf (f, sizeof f, "%s: producer time per submit", fig);
  wb_report (SECTION, impl, f, (double) (t_sub - t0) / (double) tput_n, "ns",
             "submit loop only (the consumer side runs at the same time)");
  snprintf (n2, sizeof n2,
            "during the %s throughput run: %" G_GUINT64_FORMAT " wake writes, %" G_GUINT64_FORMAT
            " epoll_wait calls for %ld jobs",
            fig, s1.wakeups - s0.wakeups, s1.polls - s0.polls, tput_n);
  wb_report (SECTION, impl, "busy workers: wakeup syscalls per 1k jobs",
             1000.0 * (double) (s1.wakeups - s0.wakeups) / (double) tput_n, "wakeups", n2);
  free (jobs);
}

/* ---- latency through Weft ---------------------------------------------------- */

typedef struct {
  const char *impl;
  const char *fig;
  SubmitFunc submit;
  int64_t *oneway, *rtt, *call;
  long n;             /* samples taken so far */
} LatTest;

static sem_t lat_reply;
static uint64_t lat_t0;
static int64_t *lat_slot;

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
      t->submit (lat_job, NULL);
      uint64_t t_call = wb_now_ns ();
      wb_sem_wait (&lat_reply);
      uint64_t t2 = wb_now_ns ();
      if (keep)
        {
          t->rtt[t->n] = (int64_t) (t2 - lat_t0);
          t->call[t->n] = (int64_t) (t_call - lat_t0);
          t->n++;
        }
    }
}

/* ---- bare eventfd + epoll_wait ------------------------------------------------ */

static int bare_efd, bare_ep;
static atomic_long bare_ack;
static atomic_int bare_stop;
static _Atomic uint64_t bare_t0;
static int64_t *_Atomic bare_slot;
static atomic_int bare_sem_reply; /* reply through bare_reply, not bare_ack */
static sem_t bare_reply;

static gpointer
bare_receiver (gpointer data)
{
  struct epoll_event ev[4];
  for (long i = 1;; i++)
    {
      while (epoll_wait (bare_ep, ev, 4, -1) < 1)
        ;
      uint64_t t1 = wb_now_ns ();
      uint64_t v;
      if (read (bare_efd, &v, sizeof v) != sizeof v)
        abort ();
      if (atomic_load (&bare_stop))
        return NULL;
      *atomic_load (&bare_slot) = (int64_t) (t1 - atomic_load (&bare_t0));
      if (atomic_load (&bare_sem_reply))
        sem_post (&bare_reply);
      else
        atomic_store_explicit (&bare_ack, i, memory_order_release);
    }
}

/* @sem_reply: the waker sleeps on a semaphore the receiver posts, as
 * lat_block() does, instead of spinning on the acknowledgement. */
static void
bare_block (int64_t *lat, int64_t *call, long *n, long k, gboolean sem_reply)
{
  int64_t scratch;
  static long sent;
  atomic_store (&bare_sem_reply, sem_reply);
  for (long i = -WARMUP; i < k; i++)
    {
      gboolean keep = i >= 0;
      atomic_store (&bare_slot, keep ? &lat[*n] : &scratch);
      wb_spin_ns (GAP_NS);
      uint64_t t0 = wb_now_ns ();
      atomic_store (&bare_t0, t0);
      uint64_t one = 1;
      if (write (bare_efd, &one, sizeof one) != sizeof one)
        abort ();
      uint64_t t_call = wb_now_ns ();
      sent++;
      if (sem_reply)
        wb_sem_wait (&bare_reply);
      else
        while (atomic_load_explicit (&bare_ack, memory_order_acquire) != sent)
          __builtin_ia32_pause ();
      if (keep)
        {
          call[*n] = (int64_t) (t_call - t0);
          (*n)++;
        }
    }
}

/* ---- main ---------------------------------------------------------------------- */

static int64_t
median_of (const int64_t *v, long n)
{
  int64_t *c = malloc ((size_t) n * sizeof *c);
  memcpy (c, v, (size_t) n * sizeof *c);
  qsort (c, (size_t) n, sizeof *c, wb_cmp_i64);
  int64_t m = wb_pct (c, (size_t) n, 0.5);
  free (c);
  return m;
}

static void
lat_alloc (LatTest *t, long k)
{
  t->oneway = calloc ((size_t) k, sizeof (int64_t));
  t->rtt = calloc ((size_t) k, sizeof (int64_t));
  t->call = calloc ((size_t) k, sizeof (int64_t));
  t->n = 0;
}

static void
lat_free (LatTest *t)
{
  free (t->oneway);
  free (t->rtt);
  free (t->call);
}

static void
lat_report (LatTest *t, const char *note, int64_t bare_median, int64_t same_median)
{
  char f[256], n2[256];
  int64_t m = median_of (t->oneway, t->n);
  snprintf (f, sizeof f, "%s: one-way latency", t->fig);
  wb_report_latency (SECTION, t->impl, f, t->oneway, (size_t) t->n, note);
  snprintf (f, sizeof f, "%s: round trip", t->fig);
  wb_report_latency (SECTION, t->impl, f, t->rtt, (size_t) t->n, note);
  snprintf (f, sizeof f, "%s: submit call", t->fig);
  wb_report_latency (SECTION, t->impl, f, t->call, (size_t) t->n,
                     "time spent in the post call when the workers sleep (includes the wake write)");
  snprintf (f, sizeof f, "%s: one-way median vs bare eventfd wake", t->fig);
  snprintf (n2, sizeof n2,
            "100 x Weft one-way median (%" G_GINT64_FORMAT " ns) / eventfd + epoll_wait wake "
            "median (%" G_GINT64_FORMAT " ns), same process, interleaved blocks",
            m, bare_median);
  wb_report (SECTION, t->impl, f, 100.0 * (double) m / (double) bare_median, "%", n2);
  snprintf (f, sizeof f, "%s: one-way median vs bare eventfd wake, same reply", t->fig);
  snprintf (n2, sizeof n2,
            "100 x Weft one-way median (%" G_GINT64_FORMAT " ns) / eventfd + epoll_wait wake "
            "median with the waker asleep on a semaphore the receiver posts (%" G_GINT64_FORMAT
            " ns), as in Weft's test",
            m, same_median);
  wb_report (SECTION, t->impl, f, 100.0 * (double) m / (double) same_median, "%", n2);
}

int
main (void)
{
  GError *error = NULL;
  char impl_e[128], impl_c[128], impl_es[128], impl_cs[128], note[256];

  alarm (85);
  tput_n = wb_n (1000000, 50000);
  long k = wb_n (5000, 300);
  sem_init (&tput_done, 0, 0);
  sem_init (&lat_reply, 0, 0);
  sem_init (&bare_reply, 0, 0);

  engine = weft_engine_new (N_WORKERS, &error);
  if (engine == NULL)
    wb_die ("weft_engine_new: %s", error->message);
  context = weft_context_new (engine);
  weft_context_dispatch (context);
  g_usleep (20000);

  snprintf (impl_e, sizeof impl_e, "%s weft_engine_post (%d workers)", WB_VERSION, N_WORKERS);
  snprintf (impl_c, sizeof impl_c, "%s weft_context_post (engine of %d workers)", WB_VERSION,
            N_WORKERS);

  snprintf (impl_es, sizeof impl_es, "%s weft_engine_post_slot (%d workers)", WB_VERSION,
            N_WORKERS);
  snprintf (impl_cs, sizeof impl_cs, "%s weft_context_post_slot (engine of %d workers)",
            WB_VERSION, N_WORKERS);

  /* (a), (d) */
  run_tput (impl_e, "1 producer -> pool of 2", submit_engine, FALSE,
            "engine of 2 workers; producer thread is a 3rd thread on 2 CPUs");
  g_usleep (20000);
  /* (b), (d) */
  run_tput (impl_c, "foreign thread -> loop thread", submit_context, FALSE,
            "one context; its callbacks run on either of the 2 workers, one at a time");
  g_usleep (20000);
  /* (a), (b) with the node inside the job, as the peers' jobs have it */
  run_tput (impl_es, "1 producer -> pool of 2", submit_engine_slot, TRUE,
            "engine of 2 workers; producer thread is a 3rd thread on 2 CPUs; "
            "each job has its queue node inside (WeftJobSlot), as the harness's job_t");
  g_usleep (20000);
  run_tput (impl_cs, "foreign thread -> loop thread", submit_context_slot, TRUE,
            "one context; its callbacks run on either of the 2 workers, one at a time; "
            "each job has its queue node inside (WeftJobSlot), as the harness's job_t");
  g_usleep (20000);

  /* (c) and the bare eventfd floor, interleaved */
  bare_efd = eventfd (0, EFD_CLOEXEC);
  bare_ep = epoll_create1 (EPOLL_CLOEXEC);
  struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };
  if (bare_efd < 0 || bare_ep < 0 || epoll_ctl (bare_ep, EPOLL_CTL_ADD, bare_efd, &ev) < 0)
    wb_die ("eventfd/epoll: %s", strerror (errno));
  GThread *rx = g_thread_new ("bare-rx", bare_receiver, NULL);

  LatTest le = { .impl = impl_e, .fig = "idle worker woken", .submit = submit_engine };
  LatTest lc = { .impl = impl_c, .fig = "idle loop woken", .submit = submit_context };
  lat_alloc (&le, k);
  lat_alloc (&lc, k);
  int64_t *bare_lat = calloc ((size_t) k, sizeof (int64_t));
  int64_t *bare_call = calloc ((size_t) k, sizeof (int64_t));
  int64_t *same_lat = calloc ((size_t) k, sizeof (int64_t));
  int64_t *same_call = calloc ((size_t) k, sizeof (int64_t));
  long bare_n = 0, same_n = 0;

  for (int b = 0; b < N_BLOCKS; b++)
    {
      long kb = k / N_BLOCKS + (b < k % N_BLOCKS ? 1 : 0);
      lat_block (&le, kb);
      lat_block (&lc, kb);
      bare_block (bare_lat, bare_call, &bare_n, kb, FALSE);
      bare_block (same_lat, same_call, &same_n, kb, TRUE);
    }

  atomic_store (&bare_stop, 1);
  uint64_t one = 1;
  if (write (bare_efd, &one, sizeof one) != sizeof one)
    abort ();
  g_thread_join (rx);

  int64_t bare_median = median_of (bare_lat, bare_n);
  int64_t same_median = median_of (same_lat, same_n);
  lat_report (&le, "engine of 2 workers, both asleep in epoll_wait; 50 us gap", bare_median,
              same_median);
  lat_report (&lc, "context on an engine of 2 workers, both asleep in epoll_wait; 50 us gap",
              bare_median, same_median);
  snprintf (note, sizeof note,
            "measured inside bench-handoff, interleaved with Weft's latency blocks: thread "
            "asleep in epoll_wait, woken by write() after a 50 us gap");
  wb_report_latency (SECTION, "eventfd + epoll_wait", "sleeping loop, unpinned: wake latency",
                     bare_lat, (size_t) bare_n, note);
  wb_report_latency (SECTION, "eventfd + epoll_wait", "sleeping loop, unpinned: waker's syscall",
                     bare_call, (size_t) bare_n, "time spent in write() by the waker");
  snprintf (note, sizeof note,
            "as above, but the receiver posts a semaphore the waker sleeps on (the reply of "
            "Weft's latency test) instead of an atomic the waker spins on");
  wb_report_latency (SECTION, "eventfd + epoll_wait",
                     "sleeping loop, unpinned, semaphore reply: wake latency", same_lat,
                     (size_t) same_n, note);
  wb_report_latency (SECTION, "eventfd + epoll_wait",
                     "sleeping loop, unpinned, semaphore reply: waker's syscall", same_call,
                     (size_t) same_n, "time spent in write() by the waker");

  weft_context_unref (context);
  weft_engine_unref (engine);
  close (bare_ep);
  close (bare_efd);
  lat_free (&le);
  lat_free (&lc);
  free (bare_lat);
  free (bare_call);
  free (same_lat);
  free (same_call);
  return 0;
}
