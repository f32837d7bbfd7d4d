/* bench-serial.c: section 2-serial, serial queues run by a pool of two.
 *
 * 10,000 contexts on an engine of 2 workers. One producer thread (the main
 * thread, a third thread on a 2-CPU machine) posts 100 jobs to each context
 * with weft_context_post(), round-robin: job k of every context, then job
 * k + 1 of every context, ... The clock runs from the first post to the run
 * of the last job.
 *
 * Every job checks the two guarantees the scenario is about:
 *   concurrency: a per-context atomic "running" counter must be 0 on entry;
 *   order: the job's sequence number must be the context's next expected one.
 * Both counts must be 0.
 *
 * The engine's wakeup counter (weft_engine_get_stats) is read before and
 * after: wake-up writes per 1000 jobs shows whether a busy engine makes wake
 * syscalls.
 *
 * Then the first pass again on an engine of 1 worker (impl "... (engine of
 * 1 worker)"): the producer is a third thread on a 2-CPU machine, and
 * that row shows what the second worker adds there.
 *
 * Last, the jobs' own work with no engine at all (impl "own: the jobs' work
 * alone, no engine (2 threads)", run_body_alone()): the throughput ceiling
 * the job body itself sets on this machine, in the same run.
 *
 * Same section and figure strings as the GLib GThreadPool serial-queue
 * anchor in the micro harness (src/s2_glib.c there).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdatomic.h>

#include <weft.h>

#include "weft-bench.h"

#define SECTION "2-serial"
/* The per-queue bookkeeping pass's note, in both its rows. */
#define LOCAL_NOTE "; job bookkeeping per queue (1 shared atomic per queue, not 2 per job)"
#define N_WORKERS 2
#define PER_QUEUE 100

typedef struct {
  WeftContext *ctx;
  atomic_int running;
  guint32 next_seq;   /* only touched by the context's callbacks */
  guint64 sum;        /* per-queue bookkeeping pass: only the context's callbacks */
  char pad_[64 - sizeof (gpointer) - sizeof (atomic_int) - sizeof (guint32) - sizeof (guint64)];
} Queue;

typedef struct {
  guint32 queue;
  guint32 seq;
} Job;

/* A job with its queue node inside, as the micro harness's serial queues
 * have theirs (job_t): the weft_context_post_slot() pass. */
typedef struct {
  WeftJobSlot slot;
  Job job;
} SlotJob;

/* The counters every job bumps each get a cache line, apart from the
 * read-mostly globals every job reads: where the linker happened to put them
 * together, the harness's own false sharing cost more than the engine
 * (measured: 7 vs 11 Mjobs/s between a shared-library and a static build,
 * with run_job at 35% vs 12% of the samples). */
#define LINE __attribute__ ((aligned (64)))
static Queue *queues LINE;
static long n_queues_total;
static long n_total;
static atomic_long n_done LINE;
static atomic_ulong checksum LINE;
static atomic_long queues_done LINE;
static atomic_long conc_violations LINE;
static atomic_long order_violations LINE;
static uint64_t t_last LINE;
static sem_t all_done;

static void
run_job (gpointer data)
{
  const Job *job = data;
  Queue *q = &queues[job->queue];

  if (atomic_fetch_add_explicit (&q->running, 1, memory_order_acq_rel) != 0)
    atomic_fetch_add_explicit (&conc_violations, 1, memory_order_relaxed);
  if (job->seq != q->next_seq)
    atomic_fetch_add_explicit (&order_violations, 1, memory_order_relaxed);
  q->next_seq = job->seq + 1;
  atomic_fetch_add_explicit (&checksum, job->seq, memory_order_relaxed);
  atomic_fetch_sub_explicit (&q->running, 1, memory_order_acq_rel);

  if (atomic_fetch_add_explicit (&n_done, 1, memory_order_acq_rel) + 1 == n_total)
    {
      t_last = wb_now_ns ();
      sem_post (&all_done);
    }
}

/* The same checks with bookkeeping kept per queue: the sum and the
 * completion count live in the context's own Queue, and one shared atomic
 * is touched per queue (when its last job runs) instead of two per job. The
 * guarantees checked are the same; what changes is how much of the measured
 * time is the harness's own cross-CPU counter traffic. */
static void
run_job_local (gpointer data)
{
  const Job *job = data;
  Queue *q = &queues[job->queue];

  if (atomic_fetch_add_explicit (&q->running, 1, memory_order_acq_rel) != 0)
    atomic_fetch_add_explicit (&conc_violations, 1, memory_order_relaxed);
  if (job->seq != q->next_seq)
    atomic_fetch_add_explicit (&order_violations, 1, memory_order_relaxed);
  q->next_seq = job->seq + 1;
  q->sum += job->seq;
  atomic_fetch_sub_explicit (&q->running, 1, memory_order_acq_rel);

  if (job->seq == PER_QUEUE - 1 &&
      atomic_fetch_add_explicit (&queues_done, 1, memory_order_acq_rel) + 1 == n_queues_total)
    {
      t_last = wb_now_ns ();
      sem_post (&all_done);
    }
}

/* Clears what the jobs of a pass count. */
static void
reset_pass (long n_queues)
{
  for (long q = 0; q < n_queues; q++)
    {
      queues[q].next_seq = 0;
      queues[q].sum = 0;
    }
  atomic_store (&n_done, 0);
  atomic_store (&queues_done, 0);
  atomic_store (&checksum, 0);
  atomic_store (&conc_violations, 0);
  atomic_store (&order_violations, 0);
}

/* Runs @n_passes of the passes below on a new engine of @n_workers, with
 * a new context per queue; returns the violations counted. */
static long
run_engine (guint n_workers, int n_passes, long n_queues, Job *jobs, SlotJob *slot_jobs)
{
  GError *error = NULL;
  char impl[128], note[512];

  WeftEngine *engine = weft_engine_new (n_workers, &error);
  if (engine == NULL)
    wb_die ("weft_engine_new: %s", error->message);

  for (long q = 0; q < n_queues; q++)
    {
      queues[q].ctx = weft_context_new (engine);
      weft_context_dispatch (queues[q].ctx);
      for (long k = 0; k < PER_QUEUE; k++)
        {
          jobs[q * PER_QUEUE + k].queue = (guint32) q;
          jobs[q * PER_QUEUE + k].seq = (guint32) k;
          slot_jobs[q * PER_QUEUE + k].job = jobs[q * PER_QUEUE + k];
        }
    }
  n_queues_total = n_queues;
  long bad = 0;
  /* Pass 0: weft_context_post; 1: the same with per-queue bookkeeping;
   * 2: as 0, with the jobs' nodes inside them (weft_context_post_slot). */
  for (int pass = 0; pass < n_passes; pass++)
    {
      gboolean local = pass == 1;
      gboolean slots = pass == 2;
      const char *api = slots ? "weft_context_post_slot" : "weft_context_post";
      reset_pass (n_queues);

      /* Let the workers settle into the poller, as an idle server would be. */
      g_usleep (20000);

      WeftEngineStats s0, s1;
      weft_engine_get_stats (engine, &s0);

      WeftJobFunc func = local ? run_job_local : run_job;
      uint64_t t0 = wb_now_ns ();
      if (slots)
        for (long k = 0; k < PER_QUEUE; k++)
          for (long q = 0; q < n_queues; q++)
            {
              SlotJob *sj = &slot_jobs[q * PER_QUEUE + k];
              if (!weft_context_post_slot (queues[q].ctx, &sj->slot, func, &sj->job, NULL))
                wb_die ("weft_context_post_slot failed");
            }
      else
        for (long k = 0; k < PER_QUEUE; k++)
          for (long q = 0; q < n_queues; q++)
            if (!weft_context_post (queues[q].ctx, func, &jobs[q * PER_QUEUE + k], NULL))
              wb_die ("weft_context_post failed");
      uint64_t t_posted = wb_now_ns ();
      wb_sem_wait (&all_done);

      weft_engine_get_stats (engine, &s1);

      /* The last job may signal before the other worker finished its own
       * last one: wait for every context to be done before reading sums. */
      if (local)
        for (long q = 0; q < n_queues; q++)
          {
            while (atomic_load (&queues[q].running) != 0)
              ;
            atomic_fetch_add (&checksum, queues[q].sum);
          }
      guint64 expect_sum = (guint64) n_queues * (PER_QUEUE * (PER_QUEUE - 1) / 2);
      if (!local && atomic_load (&checksum) != expect_sum)
        wb_die ("checksum mismatch: %lu != %" G_GUINT64_FORMAT,
                (unsigned long) atomic_load (&checksum), expect_sum);

      long conc = atomic_load (&conc_violations), order = atomic_load (&order_violations);
      bad += conc + order;
      double jobs_run = (double) (s1.jobs_run - s0.jobs_run);
      double wakeups = (double) (s1.wakeups - s0.wakeups);
      double polls = (double) (s1.polls - s0.polls);
      const char *fig_tput = local ? "1M jobs, per-queue bookkeeping: throughput"
                                   : "1M jobs: throughput";

      snprintf (impl, sizeof impl, "%s %s (engine of %u worker%s)", WB_VERSION, api, n_workers,
                n_workers == 1 ? "" : "s");
      snprintf (note, sizeof note,
                "%ld contexts x %d jobs, round-robin %s by 1 producer thread "
                "(a 3rd thread on 2 CPUs), %u worker%s; violations: concurrency %ld, order %ld; "
                "enqueue phase %.1f ms; clock: first post -> last job ran%s",
                n_queues, PER_QUEUE, api, n_workers, n_workers == 1 ? "" : "s", conc, order,
                (double) (t_posted - t0) / 1e6,
                local   ? LOCAL_NOTE
                : slots ? "; each job has its queue node inside (WeftJobSlot), as the harness's "
                          "job_t"
                        : "");
      wb_report (SECTION, impl, fig_tput, (double) n_total / ((double) (t_last - t0) / 1e3),
                 "Mjobs/s", note);
      if (local)
        continue;
      wb_report (SECTION, impl, "1M jobs: violations (concurrency+order)",
                 (double) (conc + order), "count", "must be 0");
      snprintf (note, sizeof note,
                "weft_engine_get_stats wakeups during the run: %.0f for %.0f callbacks run; "
                "only a post that finds a worker asleep writes the wake eventfd",
                wakeups, jobs_run);
      wb_report (SECTION, impl, "1M jobs: wakeup syscalls per 1k jobs",
                 1000.0 * wakeups / (double) n_total, "wakeups", note);
      snprintf (note, sizeof note, "epoll_wait calls (blocking or not) during the run: %.0f",
                polls);
      wb_report (SECTION, impl, "1M jobs: polls per 1k jobs", 1000.0 * polls / (double) n_total,
                 "polls", note);
    }

  for (long q = 0; q < n_queues; q++)
    weft_context_unref (queues[q].ctx);
  weft_engine_unref (engine);
  return bad;
}

/* ---- the job body alone ------------------------------------------------------ */

typedef struct {
  Job *jobs;
  long n_queues;
  long first;          /* this thread's queues: first, first + N_WORKERS, ... */
  WeftJobFunc func;
} BodyPart;

static gpointer
body_thread (gpointer data)
{
  const BodyPart *part = data;
  for (long k = 0; k < PER_QUEUE; k++)
    for (long q = part->first; q < part->n_queues; q += N_WORKERS)
      part->func (&part->jobs[q * PER_QUEUE + k]);
  return NULL;
}

/* The jobs' own work with no engine and no producer: N_WORKERS threads
 * call the two job functions directly, each on its own half of the queues
 * (so no queue ever runs on two threads), in the order the producer posts
 * them. What is left is the job body's cross-CPU traffic: the pass with
 * shared counters bumps two atomics that every job on both CPUs shares.
 * The row is the ceiling those jobs set for any serial-queue engine on this
 * machine in the same run (the harness's GLib serial queues bump the same
 * kind of shared counters per job, s2_glib.c). */
static void
run_body_alone (long n_queues, Job *jobs)
{
  char impl[128], note[512];

  for (int pass = 0; pass < 2; pass++)
    {
      gboolean local = pass == 1;
      reset_pass (n_queues);

      BodyPart parts[N_WORKERS];
      GThread *threads[N_WORKERS];
      uint64_t t0 = wb_now_ns ();
      for (int i = 0; i < N_WORKERS; i++)
        {
          parts[i] = (BodyPart) { jobs, n_queues, i, local ? run_job_local : run_job };
          threads[i] = g_thread_new ("body", body_thread, &parts[i]);
        }
      for (int i = 0; i < N_WORKERS; i++)
        g_thread_join (threads[i]);
      uint64_t t1 = wb_now_ns ();
      /* (The completion semaphore was posted by the last job: take it.) */
      wb_sem_wait (&all_done);

      long bad = atomic_load (&conc_violations) + atomic_load (&order_violations);
      if (bad != 0)
        wb_die ("job body alone: %ld violations", bad);
      snprintf (impl, sizeof impl, "own: the jobs' work alone, no engine (%d threads)", N_WORKERS);
      snprintf (note, sizeof note,
                "%ld queues x %d jobs; %d threads each call the job function directly on its "
                "own half of the queues, in post order: no posting, no queue, no producer; "
                "clock: thread start -> last join%s",
                n_queues, PER_QUEUE, N_WORKERS,
                local ? LOCAL_NOTE
                      : "; 2 shared atomics per job, like the harness's serial queues");
      wb_report (SECTION, impl,
                 local ? "1M jobs, per-queue bookkeeping: throughput" : "1M jobs: throughput",
                 (double) (n_queues * PER_QUEUE) / ((double) (t1 - t0) / 1e3), "Mjobs/s", note);
    }
}

int
main (void)
{
  long n_queues = wb_n (10000, 1000);

  alarm (80);
  n_total = n_queues * PER_QUEUE;
  sem_init (&all_done, 0, 0);

  queues = calloc ((size_t) n_queues, sizeof *queues);
  Job *jobs = calloc ((size_t) n_total, sizeof *jobs);
  SlotJob *slot_jobs = calloc ((size_t) n_total, sizeof *slot_jobs);
  if (queues == NULL || jobs == NULL || slot_jobs == NULL)
    wb_die ("out of memory");
  n_queues_total = n_queues;

  long bad = run_engine (N_WORKERS, 3, n_queues, jobs, slot_jobs);
  /* The scenario's engine is 2 workers; the producer is a third thread
   * on 2 CPUs. The same first pass on 1 worker shows what the second
   * worker adds there (results.md, stop 25: mostly CPU time it takes
   * from the producer). */
  bad += run_engine (1, 1, n_queues, jobs, slot_jobs);
  /* Last: the ceiling the jobs themselves set (run_body_alone()). */
  run_body_alone (n_queues, jobs);

  if (bad != 0)
    fprintf (stderr, "serial violations: %ld\n", bad);
  free (jobs);
  free (slot_jobs);
  free (queues);
  return bad != 0 ? 1 : 0;
}
