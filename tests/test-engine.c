/* test-engine.c: the engine: workers, parallel jobs, stopping, stats.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-test-util.h"

/* ---- shared job bookkeeping -------------------------------------------- */

/* A set of jobs, each with its own slot, plus totals. */
typedef struct {
  guint n;
  WtCount *slots;
  atomic_int total_ran;
  atomic_int total_notified;
  atomic_int notified_before_run;   /* a notify found its job running */
} JobSet;

typedef struct {
  JobSet *set;
  guint index;
} JobRef;

static JobSet *
job_set_new (guint n)
{
  JobSet *set = g_new0 (JobSet, 1);
  set->n = n;
  set->slots = g_new0 (WtCount, n);
  return set;
}

static void
job_set_free (JobSet *set)
{
  g_free (set->slots);
  g_free (set);
}

static void
jobset_run (gpointer data)
{
  JobRef *r = data;
  wt_count_job (&r->set->slots[r->index]);
  atomic_fetch_add (&r->set->total_ran, 1);
}

static void
jobset_notify (gpointer data)
{
  JobRef *r = data;
  WtCount *c = &r->set->slots[r->index];
  if (atomic_load (&c->inside) != 0)
    atomic_fetch_add (&r->set->notified_before_run, 1);
  atomic_fetch_add (&c->notified, 1);
  atomic_fetch_add (&r->set->total_notified, 1);
  g_free (r);
}

static gboolean
jobset_post (WeftEngine *engine, JobSet *set, guint index, gboolean front)
{
  JobRef *r = g_new (JobRef, 1);
  r->set = set;
  r->index = index;
  if (front)
    return weft_engine_post_front (engine, jobset_run, r, jobset_notify);
  return weft_engine_post (engine, jobset_run, r, jobset_notify);
}

/* Every job of @set was notified exactly once; returns how many ran. */
static guint
job_set_check_once (JobSet *set)
{
  guint ran = 0;
  for (guint i = 0; i < set->n; i++)
    {
      g_assert_cmpint (atomic_load (&set->slots[i].notified), ==, 1);
      g_assert_cmpint (atomic_load (&set->slots[i].ran), <=, 1);
      ran += (guint) atomic_load (&set->slots[i].ran);
    }
  g_assert_cmpint (atomic_load (&set->notified_before_run), ==, 0);
  return ran;
}

/* ---- /engine/new-and-stop ---------------------------------------------- */

typedef struct {
  WeftEngine *engine;
  atomic_int is_worker;
  atomic_int done;
} WorkerCheck;

static void
worker_check_job (gpointer data)
{
  WorkerCheck *w = data;
  atomic_store (&w->is_worker, weft_engine_is_worker_thread (w->engine) ? 1 : 0);
  atomic_store (&w->done, 1);
}

static void
test_new_and_stop (void)
{
  g_test_summary ("weft_engine_new() returns a running engine with the requested workers; "
                  "weft_engine_stop() stops it and its worker threads");

  WeftEngine *engine = wt_engine_new (2);
  g_assert_true (weft_engine_is_running (engine));
  g_assert_cmpuint (weft_engine_get_n_workers (engine), ==, 2);
  WT_WAIT_UNTIL (wt_stats (engine).n_workers == 2);
  g_assert_cmpuint (wt_stats (engine).n_workers, ==, 2);
  g_assert_false (weft_engine_is_worker_thread (engine));

  WorkerCheck w = { .engine = engine };
  g_assert_true (weft_engine_post (engine, worker_check_job, &w, NULL));
  WT_WAIT_UNTIL (atomic_load (&w.done) == 1);
  g_assert_cmpint (atomic_load (&w.done), ==, 1);
  g_assert_cmpint (atomic_load (&w.is_worker), ==, 1);

  weft_engine_stop (engine);
  g_assert_false (weft_engine_is_running (engine));
  g_assert_cmpuint (wt_stats (engine).n_workers, ==, 0);
  g_assert_false (weft_engine_is_worker_thread (engine));

  weft_engine_unref (engine);
}

/* ---- /engine/n-workers-default ---------------------------------------- */

static void
test_n_workers_default (void)
{
  g_test_summary ("weft_engine_new (0) starts one worker per CPU");

  WeftEngine *engine = wt_engine_new (0);
  guint n = g_get_num_processors ();
  g_assert_cmpuint (weft_engine_get_n_workers (engine), ==, n);
  WT_WAIT_UNTIL (wt_stats (engine).n_workers == n);
  g_assert_cmpuint (wt_stats (engine).n_workers, ==, n);
  weft_engine_unref (engine);
}

/* ---- /engine/post-runs-all --------------------------------------------- */

static void
test_post_runs_all (void)
{
  g_test_summary ("Jobs posted with weft_engine_post() all run, run in parallel on several "
                  "workers, and each notify runs exactly once, after its job");

  WeftEngine *engine = wt_engine_new (4);

  /* Parallel: two jobs can be inside at the same time. */
  WtGate gate;
  wt_gate_init (&gate);
  g_assert_true (weft_engine_post (engine, wt_gate_job, &gate, NULL));
  g_assert_true (weft_engine_post (engine, wt_gate_job, &gate, NULL));
  WT_WAIT_UNTIL (atomic_load (&gate.entered) == 2);
  g_assert_cmpint (atomic_load (&gate.entered), ==, 2);
  wt_gate_open (&gate);
  WT_WAIT_UNTIL (atomic_load (&gate.left) == 2);
  g_assert_cmpint (atomic_load (&gate.left), ==, 2);

  const guint n = 20000;
  JobSet *set = job_set_new (n);
  for (guint i = 0; i < n; i++)
    g_assert_true (jobset_post (engine, set, i, FALSE));
  WT_WAIT_UNTIL (atomic_load (&set->total_notified) == (gint) n);
  g_assert_cmpint (atomic_load (&set->total_notified), ==, n);
  g_assert_cmpint (atomic_load (&set->total_ran), ==, n);
  g_assert_cmpuint (job_set_check_once (set), ==, n);

  weft_engine_unref (engine);
  wt_gate_clear (&gate);
  job_set_free (set);
}

/* ---- /engine/post-front ------------------------------------------------ */

typedef struct {
  atomic_int next;
  int order[64];      /* written by the single worker, read after `done` */
  atomic_int done;
} Order;

typedef struct {
  Order *o;
  int tag;
} OrderJob;

static void
order_job (gpointer data)
{
  OrderJob *j = data;
  int i = atomic_fetch_add (&j->o->next, 1);
  j->o->order[i] = j->tag;
  atomic_fetch_add (&j->o->done, 1);
}

static void
test_post_front (void)
{
  g_test_summary ("A job posted with weft_engine_post_front() runs before the jobs already "
                  "queued with weft_engine_post()");

  WeftEngine *engine = wt_engine_new (1);
  WtGate gate;
  wt_gate_init (&gate);
  Order o = { 0 };
  OrderJob jobs[12];

  g_assert_true (weft_engine_post (engine, wt_gate_job, &gate, NULL));
  WT_WAIT_UNTIL (atomic_load (&gate.entered) == 1);
  g_assert_cmpint (atomic_load (&gate.entered), ==, 1);

  for (int i = 0; i < 10; i++)
    {
      jobs[i] = (OrderJob) { &o, i };
      g_assert_true (weft_engine_post (engine, order_job, &jobs[i], NULL));
    }
  jobs[10] = (OrderJob) { &o, 100 };
  jobs[11] = (OrderJob) { &o, 101 };
  g_assert_true (weft_engine_post_front (engine, order_job, &jobs[10], NULL));
  g_assert_true (weft_engine_post_front (engine, order_job, &jobs[11], NULL));

  wt_gate_open (&gate);
  WT_WAIT_UNTIL (atomic_load (&o.done) == 12);
  g_assert_cmpint (atomic_load (&o.done), ==, 12);

  /* Both front jobs first, then the normal ones in post order (one worker). */
  g_assert_cmpint (MIN (o.order[0], o.order[1]), ==, 100);
  g_assert_cmpint (MAX (o.order[0], o.order[1]), ==, 101);
  for (int i = 0; i < 10; i++)
    g_assert_cmpint (o.order[2 + i], ==, i);

  weft_engine_unref (engine);
  wt_gate_clear (&gate);
}

/* ---- /engine/stop-drops-queued ----------------------------------------- */

typedef struct {
  WeftEngine *engine;
  JobSet *set;
  atomic_int entered;
  atomic_int stopper_started;
  atomic_int saw_stop;          /* the sleeping worker left the poller */
  atomic_int posted_ok;
  atomic_int left;
  atomic_int stop_returned;
} Stopper;

static gpointer
stopper_thread (gpointer data)
{
  Stopper *s = data;
  atomic_store (&s->stopper_started, 1);
  weft_engine_stop (s->engine);
  atomic_store (&s->stop_returned, 1);
  return NULL;
}

/* Runs on worker A while worker B sleeps. Once the stop has begun, B
 * leaves the poller for good (nothing else can wake it: no job is queued,
 * no fd or timer exists), which is seen as n_sleeping dropping to 0. Then
 * this job queues jobs that must never start, and returns. */
static void
stop_blocker_job (gpointer data)
{
  Stopper *s = data;
  atomic_store (&s->entered, 1);
  gint64 deadline = g_get_monotonic_time () + WT_DEADLINE_US;
  while (!atomic_load (&s->stopper_started) && g_get_monotonic_time () < deadline)
    g_usleep (1000);
  while (wt_stats (s->engine).n_sleeping != 0 && g_get_monotonic_time () < deadline)
    g_usleep (1000);
  atomic_store (&s->saw_stop, wt_stats (s->engine).n_sleeping == 0 ? 1 : 0);

  for (guint i = 0; i < s->set->n; i++)
    if (jobset_post (s->engine, s->set, i, i % 10 == 0))
      atomic_fetch_add (&s->posted_ok, 1);
  atomic_store (&s->left, 1);
}

static void
test_stop_drops_queued (void)
{
  g_test_summary ("weft_engine_stop() lets the running job finish, drops the queued jobs "
                  "without running them, and calls each notify exactly once before it "
                  "returns; dropped jobs do not run after a restart either");

  WeftEngine *engine = wt_engine_new (2);
  const guint n = 100;
  Stopper s = { .engine = engine, .set = job_set_new (n) };
  WtCount after = { 0 };

  g_assert_true (weft_engine_post (engine, stop_blocker_job, &s, NULL));
  WT_WAIT_UNTIL (atomic_load (&s.entered) == 1 && wt_stats (engine).n_sleeping == 1);
  g_assert_cmpint (atomic_load (&s.entered), ==, 1);
  g_assert_cmpuint (wt_stats (engine).n_sleeping, ==, 1);

  GThread *t = g_thread_new ("stopper", stopper_thread, &s);
  g_thread_join (t);
  g_assert_cmpint (atomic_load (&s.stop_returned), ==, 1);
  g_assert_cmpint (atomic_load (&s.left), ==, 1);
  g_assert_cmpint (atomic_load (&s.saw_stop), ==, 1);
  g_assert_false (weft_engine_is_running (engine));

  /* Whether a post during the hard stop is queued (then dropped) or refused,
   * its notify ran exactly once by the time stop returned, its job never. */
  g_test_message ("%d of %u posts made during the stop were accepted",
                  atomic_load (&s.posted_ok), n);
  g_assert_cmpint (atomic_load (&s.set->total_notified), ==, n);
  g_assert_cmpuint (job_set_check_once (s.set), ==, 0);

  /* Restart: the dropped jobs stay dropped, new ones run. */
  GError *error = NULL;
  g_assert_true (weft_engine_start (engine, &error));
  g_assert_no_error (error);
  g_assert_true (weft_engine_post (engine, wt_count_job, &after, wt_count_notify));
  WT_WAIT_UNTIL (atomic_load (&after.notified) == 1);
  g_assert_cmpint (atomic_load (&after.ran), ==, 1);
  g_assert_cmpint (atomic_load (&after.notified), ==, 1);
  wt_quiet_window_ms (20);
  g_assert_cmpint (atomic_load (&s.set->total_ran), ==, 0);
  g_assert_cmpuint (job_set_check_once (s.set), ==, 0);

  weft_engine_unref (engine);
  job_set_free (s.set);
}

/* ---- /engine/shutdown-drains ------------------------------------------- */

typedef struct {
  WeftEngine *engine;
  atomic_int chain_done;      /* links of the chain that ran */
  atomic_int children_ran;
  atomic_int children_posted;
  atomic_int post_failed;
  atomic_int notified;
} Drain;

#define CHAIN_LEN 10

static void drain_notify (gpointer data) { atomic_fetch_add (&((Drain *) data)->notified, 1); }

static void
drain_child (gpointer data)
{
  atomic_fetch_add (&((Drain *) data)->children_ran, 1);
}

/* Each link sleeps a little, then posts the next link from inside the
 * worker: the chain outlives the start of the shutdown. */
static void
drain_chain (gpointer data)
{
  Drain *d = data;
  g_usleep (10 * 1000);
  int k = atomic_fetch_add (&d->chain_done, 1) + 1;
  if (k < CHAIN_LEN && !weft_engine_post (d->engine, drain_chain, d, drain_notify))
    atomic_fetch_add (&d->post_failed, 1);
}

static void
drain_parent (gpointer data)
{
  Drain *d = data;
  if (weft_engine_post (d->engine, drain_child, d, drain_notify))
    atomic_fetch_add (&d->children_posted, 1);
  else
    atomic_fetch_add (&d->post_failed, 1);
}

static void
test_shutdown_drains (void)
{
  g_test_summary ("weft_engine_shutdown() runs every queued job, including jobs posted from "
                  "inside jobs while it waits, then returns TRUE and leaves the engine stopped");

  WeftEngine *engine = wt_engine_new (2);
  Drain d = { .engine = engine };

  g_assert_true (weft_engine_post (engine, drain_chain, &d, drain_notify));
  for (int i = 0; i < 100; i++)
    g_assert_true (weft_engine_post (engine, drain_parent, &d, drain_notify));

  g_assert_true (weft_engine_shutdown (engine, 30 * G_USEC_PER_SEC));
  g_assert_false (weft_engine_is_running (engine));

  g_assert_cmpint (atomic_load (&d.post_failed), ==, 0);
  g_assert_cmpint (atomic_load (&d.chain_done), ==, CHAIN_LEN);
  g_assert_cmpint (atomic_load (&d.children_posted), ==, 100);
  g_assert_cmpint (atomic_load (&d.children_ran), ==, 100);
  /* 100 parents + 100 children + the chain. */
  g_assert_cmpint (atomic_load (&d.notified), ==, 200 + CHAIN_LEN);

  weft_engine_unref (engine);
}

/* ---- /engine/shutdown-deadline ----------------------------------------- */

typedef struct {
  WtGate *gate;
  gint64 release_at;
} Releaser;

static gpointer
releaser_thread (gpointer data)
{
  Releaser *r = data;
  /* The job has to outlive the shutdown deadline: that is the behaviour
   * under test, so this wait is on the clock by definition. */
  while (g_get_monotonic_time () < r->release_at)
    g_usleep (1000);
  wt_gate_open (r->gate);
  return NULL;
}

static void
test_shutdown_deadline (void)
{
  g_test_summary ("weft_engine_shutdown() returns FALSE when a job is still running at the "
                  "deadline, and ends with a hard stop that drops the queued jobs");

  WeftEngine *engine = wt_engine_new (1);
  WtGate gate;
  wt_gate_init (&gate);

  g_assert_true (weft_engine_post (engine, wt_gate_job, &gate, NULL));
  WT_WAIT_UNTIL (atomic_load (&gate.entered) == 1);
  g_assert_cmpint (atomic_load (&gate.entered), ==, 1);

  WtCount queued = { 0 };
  g_assert_true (weft_engine_post (engine, wt_count_job, &queued, wt_count_notify));

  const gint64 timeout_us = 100 * 1000;
  Releaser r = { &gate, g_get_monotonic_time () + timeout_us + 400 * 1000 };
  GThread *t = g_thread_new ("releaser", releaser_thread, &r);

  g_assert_false (weft_engine_shutdown (engine, timeout_us));
  g_assert_false (weft_engine_is_running (engine));
  g_thread_join (t);

  g_assert_cmpint (atomic_load (&gate.left), ==, 1);
  g_assert_cmpint (atomic_load (&queued.ran), ==, 0);
  g_assert_cmpint (atomic_load (&queued.notified), ==, 1);

  weft_engine_unref (engine);
  wt_gate_clear (&gate);
}

/* ---- /engine/shutdown-refuses-foreign-posts ---------------------------- */

typedef struct {
  WeftEngine *engine;
  gboolean result;
  atomic_int returned;
} Shutdowner;

static gpointer
shutdowner_thread (gpointer data)
{
  Shutdowner *s = data;
  s->result = weft_engine_shutdown (s->engine, 30 * G_USEC_PER_SEC);
  atomic_store (&s->returned, 1);
  return NULL;
}

typedef struct {
  WeftEngine *engine;
  WtGate gate;
  WtCount inner;            /* posted from inside a worker during the shutdown */
  atomic_int inner_post_ok;
} Refuse;

static void
refuse_blocker (gpointer data)
{
  Refuse *r = data;
  wt_gate_wait (&r->gate);
  /* A worker of this engine may still post during the shutdown. */
  if (weft_engine_post (r->engine, wt_count_job, &r->inner, wt_count_notify))
    atomic_store (&r->inner_post_ok, 1);
}

static void
test_shutdown_refuses_foreign_posts (void)
{
  g_test_summary ("During weft_engine_shutdown(), weft_engine_post() and weft_context_post() "
                  "from a thread that is not a worker return FALSE and call the notify at "
                  "once, while workers may still post");

  WeftEngine *engine = wt_engine_new (1);
  WeftContext *ctx = weft_context_new (engine);
  weft_context_dispatch (ctx);
  Refuse r = { .engine = engine };
  wt_gate_init (&r.gate);

  g_assert_true (weft_engine_post (engine, refuse_blocker, &r, NULL));
  WT_WAIT_UNTIL (atomic_load (&r.gate.entered) == 1);
  g_assert_cmpint (atomic_load (&r.gate.entered), ==, 1);

  Shutdowner s = { .engine = engine };
  GThread *t = g_thread_new ("shutdown", shutdowner_thread, &s);

  /* Posts accepted before the shutdown began still run (it drains them);
   * keep posting until one is refused. */
  GPtrArray *accepted = g_ptr_array_new_with_free_func (g_free);
  WtCount *refused = NULL;
  gint64 deadline = g_get_monotonic_time () + WT_DEADLINE_US;
  while (refused == NULL && g_get_monotonic_time () < deadline)
    {
      WtCount *probe = g_new0 (WtCount, 1);
      if (weft_engine_post (engine, wt_count_job, probe, wt_count_notify))
        {
          g_ptr_array_add (accepted, probe);
          g_usleep (1000);
          continue;
        }
      refused = probe;
      /* The notify ran before the post returned; the job never runs. */
      g_assert_cmpint (atomic_load (&probe->notified), ==, 1);
      g_assert_cmpint (atomic_load (&probe->ran), ==, 0);
    }
  g_assert_nonnull (refused);

  WtCount cpost = { 0 };
  g_assert_false (weft_context_post (ctx, wt_count_job, &cpost, wt_count_notify));
  g_assert_cmpint (atomic_load (&cpost.notified), ==, 1);
  g_assert_cmpint (atomic_load (&cpost.ran), ==, 0);

  wt_gate_open (&r.gate);
  g_thread_join (t);
  g_assert_cmpint (atomic_load (&s.returned), ==, 1);
  g_assert_true (s.result);
  g_assert_cmpint (atomic_load (&r.inner_post_ok), ==, 1);
  g_assert_cmpint (atomic_load (&r.inner.ran), ==, 1);
  g_assert_cmpint (atomic_load (&r.inner.notified), ==, 1);
  g_assert_cmpint (atomic_load (&refused->ran), ==, 0);
  g_assert_cmpint (atomic_load (&refused->notified), ==, 1);
  for (guint i = 0; i < accepted->len; i++)
    {
      WtCount *c = g_ptr_array_index (accepted, i);
      g_assert_cmpint (atomic_load (&c->ran), ==, 1);
      g_assert_cmpint (atomic_load (&c->notified), ==, 1);
    }
  g_ptr_array_unref (accepted);
  g_free (refused);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
  wt_gate_clear (&r.gate);
}

/* ---- /engine/restart --------------------------------------------------- */

static void
test_restart (void)
{
  g_test_summary ("An engine stopped with weft_engine_stop() can be started again with "
                  "weft_engine_start(); posts then run");

  WeftEngine *engine = wt_engine_new (2);
  WtCount a = { 0 }, b = { 0 };
  GError *error = NULL;

  g_assert_true (weft_engine_post (engine, wt_count_job, &a, wt_count_notify));
  WT_WAIT_UNTIL (atomic_load (&a.notified) == 1);
  g_assert_cmpint (atomic_load (&a.ran), ==, 1);

  for (int round = 0; round < 3; round++)
    {
      weft_engine_stop (engine);
      g_assert_false (weft_engine_is_running (engine));
      g_assert_true (weft_engine_start (engine, &error));
      g_assert_no_error (error);
      g_assert_true (weft_engine_is_running (engine));
      WT_WAIT_UNTIL (wt_stats (engine).n_workers == 2);
      g_assert_cmpuint (wt_stats (engine).n_workers, ==, 2);

      g_assert_true (weft_engine_post (engine, wt_count_job, &b, wt_count_notify));
      WT_WAIT_UNTIL (atomic_load (&b.notified) == round + 1);
      g_assert_cmpint (atomic_load (&b.ran), ==, round + 1);
      g_assert_cmpint (atomic_load (&b.notified), ==, round + 1);
    }

  weft_engine_unref (engine);
}

/* ---- /engine/stop-keeps-contexts --------------------------------------- */

static gboolean
count_timeout (gpointer data)
{
  wt_count_job (data);
  return G_SOURCE_REMOVE;
}

static void
test_stop_keeps_contexts (void)
{
  g_test_summary ("After weft_engine_stop() a context keeps its queued jobs and timeouts; "
                  "nothing of it runs until weft_engine_start(), then it carries on");

  WeftEngine *engine = wt_engine_new (2);
  WeftContext *ctx = weft_context_new (engine);
  weft_context_dispatch (ctx);
  WtCount job = { 0 }, timeout = { 0 };
  GError *error = NULL;

  weft_engine_stop (engine);
  g_assert_true (weft_context_post (ctx, wt_count_job, &job, wt_count_notify));
  g_assert_cmpuint (weft_context_add_timeout (ctx, 1, count_timeout, &timeout, wt_count_notify),
                    >, 0);
  wt_quiet_window_ms (50);
  g_assert_cmpint (atomic_load (&job.ran), ==, 0);
  g_assert_cmpint (atomic_load (&job.notified), ==, 0);
  g_assert_cmpint (atomic_load (&timeout.ran), ==, 0);

  g_assert_true (weft_engine_start (engine, &error));
  g_assert_no_error (error);
  WT_WAIT_UNTIL (atomic_load (&job.notified) == 1 && atomic_load (&timeout.notified) == 1);
  g_assert_cmpint (atomic_load (&job.ran), ==, 1);
  g_assert_cmpint (atomic_load (&job.notified), ==, 1);
  g_assert_cmpint (atomic_load (&timeout.ran), ==, 1);
  g_assert_cmpint (atomic_load (&timeout.notified), ==, 1);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
}

/* ---- /engine/stats ----------------------------------------------------- */

static void
nop_job (gpointer data)
{
  atomic_fetch_add ((atomic_int *) data, 1);
}

static void
test_stats (void)
{
  g_test_summary ("weft_engine_get_stats() counts workers, live contexts and callbacks run");

  WeftEngine *engine = wt_engine_new (2);
  WT_WAIT_UNTIL (wt_stats (engine).n_workers == 2);
  WeftEngineStats s0 = wt_stats (engine);
  g_assert_cmpuint (s0.n_workers, ==, 2);
  g_assert_cmpuint (s0.n_sleeping, <=, 2);
  g_assert_cmpuint (s0.n_contexts, ==, 0);

  /* Engine jobs. */
  atomic_int ran = 0;
  for (int i = 0; i < 100; i++)
    g_assert_true (weft_engine_post (engine, nop_job, &ran, NULL));
  WT_WAIT_UNTIL (wt_stats (engine).jobs_run - s0.jobs_run >= 100);
  g_assert_cmpint (atomic_load (&ran), ==, 100);
  g_assert_cmpuint (wt_stats (engine).jobs_run - s0.jobs_run, ==, 100);

  /* Contexts come and go. */
  WeftContext *c1 = weft_context_new (engine);
  g_assert_cmpuint (wt_stats (engine).n_contexts, ==, 1);
  WeftContext *c2 = weft_context_new (engine);
  g_assert_cmpuint (wt_stats (engine).n_contexts, ==, 2);
  weft_context_dispatch (c1);
  weft_context_dispatch (c2);

  /* Context jobs and a timeout count as run jobs; the timeout in
   * timers_fired. */
  WeftEngineStats s1 = wt_stats (engine);
  for (int i = 0; i < 50; i++)
    g_assert_true (weft_context_post (c1, nop_job, &ran, NULL));
  WtCount t = { 0 };
  g_assert_cmpuint (weft_context_add_timeout (c2, 1, count_timeout, &t, wt_count_notify), >, 0);
  WT_WAIT_UNTIL (atomic_load (&ran) == 150 && atomic_load (&t.notified) == 1
                 && wt_stats (engine).jobs_run - s1.jobs_run >= 51
                 && wt_stats (engine).timers_fired - s1.timers_fired >= 1);
  WeftEngineStats s2 = wt_stats (engine);
  g_assert_cmpint (atomic_load (&ran), ==, 150);
  g_assert_cmpuint (s2.jobs_run - s1.jobs_run, ==, 51);
  g_assert_cmpuint (s2.timers_fired - s1.timers_fired, ==, 1);

  weft_context_unref (c1);
  WT_WAIT_UNTIL (wt_stats (engine).n_contexts == 1);
  g_assert_cmpuint (wt_stats (engine).n_contexts, ==, 1);
  weft_context_unref (c2);
  WT_WAIT_UNTIL (wt_stats (engine).n_contexts == 0);
  g_assert_cmpuint (wt_stats (engine).n_contexts, ==, 0);

  /* The boxed copy. */
  WeftEngineStats *copy = weft_engine_stats_copy (&s2);
  g_assert_cmpuint (copy->jobs_run, ==, s2.jobs_run);
  g_assert_cmpuint (copy->n_workers, ==, s2.n_workers);
  weft_engine_stats_free (copy);
  g_assert_true (G_TYPE_IS_BOXED (WEFT_TYPE_ENGINE_STATS));

  weft_engine_unref (engine);
}

/* ---- /engine/idle-no-wakeups ------------------------------------------- */

static void
test_idle_no_wakeups (void)
{
  g_test_summary ("An engine with nothing to do sleeps: its workers do not poll in a loop "
                  "and nobody writes wake-ups");

  WeftEngine *engine = wt_engine_new (2);
  /* Some activity first, so the test also covers going back to sleep. */
  atomic_int ran = 0;
  for (int i = 0; i < 1000; i++)
    g_assert_true (weft_engine_post (engine, nop_job, &ran, NULL));
  WT_WAIT_UNTIL (atomic_load (&ran) == 1000);
  g_assert_cmpint (atomic_load (&ran), ==, 1000);
  wt_wait_engine_idle (engine);

  WeftEngineStats before = wt_stats (engine);
  wt_quiet_window_ms (300);
  WeftEngineStats after = wt_stats (engine);
  g_assert_cmpuint (after.polls - before.polls, <=, 4);
  g_assert_cmpuint (after.wakeups - before.wakeups, ==, 0);
  g_assert_cmpuint (after.jobs_run - before.jobs_run, ==, 0);

  weft_engine_unref (engine);
}

/* ---- /engine/wake-passed-on ------------------------------------------- */

static atomic_long slow_fd_calls;

static gboolean
slow_fd_cb (gint fd, GIOCondition condition, gpointer data)
{
  char buf[16];
  (void) condition;
  (void) data;
  while (read (fd, buf, sizeof buf) > 0)
    ;
  atomic_fetch_add (&slow_fd_calls, 1);
  g_usleep (300 * 1000); /* a long callback */
  return G_SOURCE_CONTINUE;
}

static void
stamp_job (gpointer data)
{
  atomic_store ((_Atomic gint64 *) data, g_get_monotonic_time ());
}

/* Both workers sleep. A post writes the wake eventfd and an fd becomes
 * readable at once; the worker that harvests both events runs the fd's
 * context itself (a 300 ms callback). It must pass the wake on first, so
 * the posted job runs on the other worker at once instead of waiting for
 * the callback to return. */
static void
test_wake_passed_on (void)
{
  WeftEngine *engine = wt_engine_new (2);
  WeftContext *ctx = weft_context_new (engine);
  int fds[2];
  wt_pipe (fds);
  g_assert_cmpuint (weft_context_add_fd (ctx, fds[0], G_IO_IN, slow_fd_cb, NULL, NULL, NULL), !=, 0);
  weft_context_dispatch (ctx);

  for (guint i = 0; i < 6; i++)
    {
      _Atomic gint64 ran_at = 0;
      long calls = atomic_load (&slow_fd_calls);
      wt_wait_engine_idle (engine);
      gint64 t0 = g_get_monotonic_time ();
      g_assert_true (weft_engine_post (engine, stamp_job, (gpointer) &ran_at, NULL));
      wt_write_byte (fds[1]);
      WT_WAIT_UNTIL (atomic_load (&ran_at) != 0);
      g_assert_cmpint (atomic_load (&ran_at), !=, 0);
      /* Well under the callback's 300 ms, with room for a slow sanitizer
       * build; the bug made it at least 300 ms. */
      g_assert_cmpint (atomic_load (&ran_at) - t0, <, 150 * 1000);
      WT_WAIT_UNTIL (atomic_load (&slow_fd_calls) == calls + 1);
      g_assert_cmpint (atomic_load (&slow_fd_calls), ==, calls + 1);
    }
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
  weft_engine_unref (engine);
  wt_close (fds[0]);
  wt_close (fds[1]);
}

/* ---- /engine/wakeups-batched ------------------------------------------- */

static void
test_wakeups_batched (void)
{
  g_test_summary ("Posting to an engine whose workers are busy makes no wake-up writes; "
                  "100k posts cost far fewer wake-ups than jobs");

  const guint n_workers = 2;
  const gint n = 100000;
  WeftEngine *engine = wt_engine_new (n_workers);
  WtGate gate;
  wt_gate_init (&gate);
  atomic_int ran = 0;

  wt_wait_engine_idle (engine);
  WeftEngineStats s0 = wt_stats (engine);

  /* Keep every worker busy. */
  for (guint i = 0; i < n_workers; i++)
    g_assert_true (weft_engine_post (engine, wt_gate_job, &gate, NULL));
  WT_WAIT_UNTIL (atomic_load (&gate.entered) == (gint) n_workers);
  g_assert_cmpint (atomic_load (&gate.entered), ==, n_workers);
  g_assert_cmpuint (wt_stats (engine).n_sleeping, ==, 0);

  WeftEngineStats s1 = wt_stats (engine);
  for (gint i = 0; i < n; i++)
    g_assert_true (weft_engine_post (engine, nop_job, &ran, NULL));
  WeftEngineStats s2 = wt_stats (engine);
  /* Nobody sleeps, so nobody needs waking. */
  g_assert_cmpuint (s2.wakeups - s1.wakeups, ==, 0);

  wt_gate_open (&gate);
  WT_WAIT_UNTIL (atomic_load (&ran) == n);
  g_assert_cmpint (atomic_load (&ran), ==, n);
  wt_wait_engine_idle (engine);

  WeftEngineStats s3 = wt_stats (engine);
  g_assert_cmpuint (s3.wakeups - s0.wakeups, <, (guint64) n / 100);

  weft_engine_unref (engine);
  wt_gate_clear (&gate);
}

/* ---- /engine/fd-batch -------------------------------------------------- */

#define FD_BATCH_N 200

typedef struct {
  int fds[2];
  atomic_int ran;
  atomic_int notified;
  WeftContext *ctx;
  guint id;
} FdBatchItem;

static gboolean
fd_batch_cb (gint fd, GIOCondition cond, gpointer data)
{
  FdBatchItem *it = data;
  char c;
  g_assert_cmpint (read (fd, &c, 1), ==, 1);
  atomic_fetch_add (&it->ran, 1);
  return G_SOURCE_CONTINUE;
}

static void
fd_batch_notify (gpointer data)
{
  FdBatchItem *it = data;
  atomic_fetch_add (&it->notified, 1);
}

static void
test_fd_batch (void)
{
  g_test_summary ("Readiness on many contexts at once (epoll batches of up to 64, looked up "
                  "and pushed in rounds) reaches every live source exactly once, and none "
                  "of the sources removed before the poll");

  WeftEngine *engine = wt_engine_new (1);
  FdBatchItem *items = g_new0 (FdBatchItem, FD_BATCH_N);
  for (guint i = 0; i < FD_BATCH_N; i++)
    {
      FdBatchItem *it = &items[i];
      wt_pipe (it->fds);
      it->ctx = weft_context_new (engine);
      it->id = weft_context_add_fd (it->ctx, it->fds[0], G_IO_IN, fd_batch_cb, it,
                                    fd_batch_notify, NULL);
      g_assert_cmpuint (it->id, !=, 0);
      weft_context_dispatch (it->ctx);
    }
  wt_wait_engine_idle (engine);
  WeftEngineStats s0 = wt_stats (engine);

  /* Hold the only worker, make every pipe readable, drop every fourth
   * source: the worker's next polls find them all ready at once. */
  WtGate gate;
  wt_gate_init (&gate);
  g_assert_true (weft_engine_post (engine, wt_gate_job, &gate, NULL));
  WT_WAIT_UNTIL (atomic_load (&gate.entered) == 1);
  g_assert_cmpint (atomic_load (&gate.entered), ==, 1);
  for (guint i = 0; i < FD_BATCH_N; i++)
    wt_write_byte (items[i].fds[1]);
  for (guint i = 0; i < FD_BATCH_N; i += 4)
    g_assert_true (weft_context_remove (items[i].ctx, items[i].id));
  wt_gate_open (&gate);

  gint live = FD_BATCH_N - (FD_BATCH_N + 3) / 4;
  WT_WAIT_UNTIL (wt_stats (engine).fd_events - s0.fd_events >= (guint64) live);
  wt_wait_engine_idle (engine);
  WeftEngineStats s1 = wt_stats (engine);
  g_assert_cmpuint (s1.fd_events - s0.fd_events, ==, (guint64) live);
  for (guint i = 0; i < FD_BATCH_N; i++)
    {
      gboolean removed = i % 4 == 0;
      g_assert_cmpint (atomic_load (&items[i].ran), ==, removed ? 0 : 1);
      g_assert_cmpint (atomic_load (&items[i].notified), ==, removed ? 1 : 0);
    }
  /* Batched: far fewer polls than readiness events. */
  g_assert_cmpuint (s1.polls - s0.polls, <, (guint64) live / 2);

  for (guint i = 0; i < FD_BATCH_N; i++)
    {
      weft_context_destroy (items[i].ctx);
      weft_context_unref (items[i].ctx);
      g_assert_cmpint (atomic_load (&items[i].notified), ==, 1);
      wt_close (items[i].fds[0]);
      wt_close (items[i].fds[1]);
    }
  weft_engine_unref (engine);
  wt_gate_clear (&gate);
  g_free (items);
}

/* ---- /engine/misuse ---------------------------------------------------- */

#define EXPECT_CRITICAL() \
  g_test_expect_message ("Weft", G_LOG_LEVEL_CRITICAL, "*assertion*failed*")

static void
test_misuse (void)
{
  g_test_summary ("NULL arguments to the engine API are programming errors: g_critical and "
                  "a neutral return value");

  WeftEngine *engine = wt_engine_new (1);
  WeftEngineStats s;
  atomic_int ran = 0;

  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_post (NULL, nop_job, &ran, NULL));
  g_test_assert_expected_messages ();

  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_post (engine, NULL, &ran, NULL));
  g_test_assert_expected_messages ();

  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_post_front (NULL, nop_job, &ran, NULL));
  g_test_assert_expected_messages ();

  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_post_front (engine, NULL, &ran, NULL));
  g_test_assert_expected_messages ();

  EXPECT_CRITICAL ();
  g_assert_null (weft_engine_ref (NULL));
  g_test_assert_expected_messages ();

  EXPECT_CRITICAL ();
  weft_engine_get_stats (NULL, &s);
  g_test_assert_expected_messages ();

  EXPECT_CRITICAL ();
  weft_engine_get_stats (engine, NULL);
  g_test_assert_expected_messages ();

  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_is_running (NULL));
  g_test_assert_expected_messages ();

  EXPECT_CRITICAL ();
  weft_engine_stop (NULL);
  g_test_assert_expected_messages ();

  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_shutdown (NULL, 0));
  g_test_assert_expected_messages ();

  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_start (NULL, NULL));
  g_test_assert_expected_messages ();

  g_assert_cmpint (atomic_load (&ran), ==, 0);
  weft_engine_unref (engine);
}

/* ---- /engine/stop-from-worker-is-critical ------------------------------ */

typedef struct {
  WeftEngine *engine;
  atomic_int done;
  gboolean shutdown_result;
} InsideStop;

static void
inside_stop_job (gpointer data)
{
  InsideStop *s = data;
  weft_engine_stop (s->engine);
  s->shutdown_result = weft_engine_shutdown (s->engine, 0);
  atomic_store (&s->done, 1);
}

static void
test_stop_from_worker_is_critical (void)
{
  g_test_summary ("weft_engine_stop() and weft_engine_shutdown() called from a worker of the "
                  "same engine emit a g_critical and return without deadlocking; the engine "
                  "keeps running");

  if (g_test_subprocess ())
    {
      WeftEngine *engine = wt_engine_new (2);
      InsideStop s = { .engine = engine };

      g_test_expect_message ("Weft", G_LOG_LEVEL_CRITICAL, "*");
      g_test_expect_message ("Weft", G_LOG_LEVEL_CRITICAL, "*");
      g_assert_true (weft_engine_post (engine, inside_stop_job, &s, NULL));
      WT_WAIT_UNTIL (atomic_load (&s.done) == 1);
      g_assert_cmpint (atomic_load (&s.done), ==, 1);
      g_test_assert_expected_messages ();
      g_assert_false (s.shutdown_result);

      /* Still running: a later post runs. */
      g_assert_true (weft_engine_is_running (engine));
      atomic_int ran = 0;
      g_assert_true (weft_engine_post (engine, nop_job, &ran, NULL));
      WT_WAIT_UNTIL (atomic_load (&ran) == 1);
      g_assert_cmpint (atomic_load (&ran), ==, 1);

      weft_engine_unref (engine);
      return;
    }

  g_test_trap_subprocess (NULL, 30 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed ();
}

/* ---- /engine/concurrent-stop -------------------------------------------- */

static gpointer
stop_thread (gpointer data)
{
  weft_engine_stop (data);
  return NULL;
}

static void
test_concurrent_stop (void)
{
  g_test_summary ("Several threads stopping and restarting one engine at once each return "
                  "with the engine stopped or running, never joining a worker twice");

  WeftEngine *engine = wt_engine_new (2);
  for (int round = 0; round < 20; round++)
    {
      GThread *t[4];
      for (int i = 0; i < 4; i++)
        t[i] = g_thread_new ("stopper", stop_thread, engine);
      for (int i = 0; i < 4; i++)
        g_thread_join (t[i]);
      g_assert_false (weft_engine_is_running (engine));
      GError *error = NULL;
      g_assert_true (weft_engine_start (engine, &error));
      g_assert_no_error (error);
      g_assert_true (weft_engine_is_running (engine));
    }
  weft_engine_unref (engine);
}

/* ---- /engine/shutdown-while-stopping ------------------------------------ */

typedef struct {
  WeftEngine *engine;
  WtGate *start;        /* both threads call at once when it opens */
  gboolean shut;        /* weft_engine_shutdown(), else weft_engine_stop() */
  gboolean result;      /* the shutdown's answer */
  atomic_int returned;
} StopCall;

static gpointer
stop_call_thread (gpointer data)
{
  StopCall *c = data;
  wt_gate_wait (c->start);
  if (c->shut)
    c->result = weft_engine_shutdown (c->engine, -1); /* no deadline: a hang stays one */
  else
    weft_engine_stop (c->engine);
  atomic_store (&c->returned, 1);
  return NULL;
}

static void
test_shutdown_while_stopping (void)
{
  g_test_summary ("A weft_engine_shutdown() racing a weft_engine_stop() or another shutdown "
                  "of an idle engine returns as soon as the engine has stopped, with TRUE: "
                  "it waited for the queues to drain, which the stopping workers never "
                  "report once they exit, until its deadline (or for ever)");

  for (int round = 0; round < 100; round++)
    {
      WeftEngine *engine = wt_engine_new (2);
      WtGate start;
      wt_gate_init (&start);
      /* Rounds alternate: stop against shutdown, shutdown against shutdown. */
      StopCall calls[2] = {
        { engine, &start, round % 2 == 1, FALSE },
        { engine, &start, TRUE, FALSE },
      };
      wt_wait_engine_idle (engine);
      GThread *t[2];
      for (int i = 0; i < 2; i++)
        t[i] = g_thread_new ("stopper", stop_call_thread, &calls[i]);
      WT_WAIT_UNTIL (atomic_load (&start.entered) == 2);
      wt_gate_open (&start);
      /* Both return (a hung one fails here, not in a join). */
      WT_WAIT_UNTIL (atomic_load (&calls[0].returned) && atomic_load (&calls[1].returned));
      for (int i = 0; i < 2; i++)
        if (!atomic_load (&calls[i].returned))
          g_error ("round %d: a %s racing a %s never returned", round,
                   calls[i].shut ? "shutdown" : "stop", calls[1 - i].shut ? "shutdown" : "stop");
      for (int i = 0; i < 2; i++)
        g_thread_join (t[i]);
      for (int i = 0; i < 2; i++)
        {
          if (calls[i].shut)
            g_assert_true (calls[i].result);
        }
      g_assert_false (weft_engine_is_running (engine));
      wt_gate_clear (&start);
      weft_engine_unref (engine);
    }
}

/* ---- /engine/timer-slack ------------------------------------------------ */

#define SLACK_TIMERS 10

typedef struct {
  gint64 due[SLACK_TIMERS];      /* monotonic us, set before the add */
  gint64 fired[SLACK_TIMERS];    /* written by the context, read after the wait */
  atomic_int n_fired;
  atomic_int early;
} SlackProbe;

typedef struct {
  SlackProbe *probe;
  int index;
} SlackTimer;

static gboolean
slack_timeout (gpointer data)
{
  SlackTimer *t = data;
  gint64 now = g_get_monotonic_time ();
  t->probe->fired[t->index] = now;
  if (now < t->probe->due[t->index])
    atomic_fetch_add (&t->probe->early, 1);
  atomic_fetch_add (&t->probe->n_fired, 1);
  return G_SOURCE_REMOVE;
}

static void
test_timer_slack (void)
{
  g_test_summary ("With a timer slack, timeouts due within the slack of the earliest are "
                  "served by one wake-up, in deadline order, and none fires before its "
                  "deadline; the slack reads back as set");

  WeftEngine *engine = wt_engine_new (1);
  g_assert_cmpuint (weft_engine_get_timer_slack (engine), ==, 1000);
  weft_engine_set_timer_slack (engine, 200 * 1000);
  g_assert_cmpuint (weft_engine_get_timer_slack (engine), ==, 200 * 1000);

  WeftContext *ctx = weft_context_new (engine);
  SlackProbe probe = { 0 };
  SlackTimer timers[SLACK_TIMERS];
  weft_context_dispatch (ctx);

  /* Ten timeouts 5 ms apart, all within the 200 ms slack of the first. */
  WeftEngineStats s0 = wt_stats (engine);
  for (int i = 0; i < SLACK_TIMERS; i++)
    {
      timers[i].probe = &probe;
      timers[i].index = i;
      probe.due[i] = g_get_monotonic_time () + (10 + 5 * i) * 1000;
      g_assert_cmpuint (weft_context_add_timeout (ctx, 10 + 5 * i, slack_timeout, &timers[i],
                                                  NULL), >, 0);
    }
  WT_WAIT_UNTIL (atomic_load (&probe.n_fired) == SLACK_TIMERS);
  WeftEngineStats s1 = wt_stats (engine);

  g_assert_cmpint (atomic_load (&probe.early), ==, 0);
  for (int i = 1; i < SLACK_TIMERS; i++)
    g_assert_cmpint (probe.fired[i], >=, probe.fired[i - 1]);
  /* All ten fired after the first one's deadline plus the slack... */
  g_assert_cmpint (probe.fired[0], >=, probe.due[0] + 200 * 1000 - 1000);
  /* ...from one timerfd wake-up, not ten: the worker polled at most a few
   * times (the wake-up itself, and the post that added them may add one). */
  g_assert_cmpuint (s1.timers_fired - s0.timers_fired, ==, SLACK_TIMERS);
  g_assert_cmpuint (s1.polls - s0.polls, <=, 3);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
}

/* ---- /engine/timer-slack-coalesce, /engine/timer-slack-precise ---------- */

#define COALESCE_TIMERS 300

typedef struct {
  gint64 lo[COALESCE_TIMERS];   /* us; the deadline is not before this */
  gint64 hi[COALESCE_TIMERS];   /* us; nor after this */
  gint64 fired_at[COALESCE_TIMERS];
  gint order[COALESCE_TIMERS];  /* indexes in firing order */
  atomic_int n_fired;           /* only the context writes it */
  atomic_int early;
  GRand *rand;                  /* for the add job */
  WeftContext *ctx;
} CoalesceProbe;

static CoalesceProbe *coalesce_probe;

static gboolean coalesce_timeout (gpointer data);

static void
coalesce_add_job (gpointer data)
{
  CoalesceProbe *p = data;
  /* Timeouts added by one callback count from one clock reading, taken by
   * its first add: each deadline lies between this reading plus the delay
   * and a reading after its own add plus the delay. */
  gint64 start = g_get_monotonic_time ();
  for (gint i = 0; i < COALESCE_TIMERS; i++)
    {
      guint64 delay = (guint64) g_rand_int_range (p->rand, 2000, 32000);
      p->lo[i] = start + (gint64) delay;
      g_assert_cmpuint (weft_context_add_timeout_us (p->ctx, delay, coalesce_timeout,
                                                     GINT_TO_POINTER (i), NULL), >, 0);
      p->hi[i] = g_get_monotonic_time () + (gint64) delay;
    }
}

static gboolean
coalesce_timeout (gpointer data)
{
  gint i = GPOINTER_TO_INT (data);
  CoalesceProbe *p = coalesce_probe;
  gint64 now = g_get_monotonic_time ();
  if (now < p->lo[i])
    atomic_fetch_add (&p->early, 1);
  p->fired_at[i] = now;
  gint k = atomic_load (&p->n_fired);
  p->order[k] = i;
  atomic_store (&p->n_fired, k + 1);
  return G_SOURCE_REMOVE;
}

/* COALESCE_TIMERS timeouts at random microsecond instants in [2 ms, 32 ms)
 * on one context with @slack_us; returns the polls the engine made. */
static guint64
run_coalesce (guint64 slack_us, gboolean set_slack)
{
  WeftEngine *engine = wt_engine_new (1);
  if (set_slack)
    weft_engine_set_timer_slack (engine, slack_us);
  g_assert_cmpuint (weft_engine_get_timer_slack (engine), ==, slack_us);
  WeftContext *ctx = weft_context_new (engine);
  CoalesceProbe *p = g_new0 (CoalesceProbe, 1);
  GRand *rand = g_rand_new_with_seed (2024);
  coalesce_probe = p;
  weft_context_dispatch (ctx);

  WeftEngineStats s0 = wt_stats (engine);
  /* Added from a job on the context, as bench-timers does: the worker is
   * busy until all are in, so a slow add phase (sanitizers, load) cannot
   * add wake-ups of its own to the count. */
  p->rand = rand;
  p->ctx = ctx;
  g_assert_true (weft_context_post (ctx, coalesce_add_job, p, NULL));
  WT_WAIT_UNTIL (atomic_load (&p->n_fired) == COALESCE_TIMERS);
  WeftEngineStats s1 = wt_stats (engine);
  g_assert_cmpint (atomic_load (&p->n_fired), ==, COALESCE_TIMERS);

  /* None fired before its deadline... */
  g_assert_cmpint (atomic_load (&p->early), ==, 0);
  /* ...and none right after one whose deadline was certainly later (each
   * deadline lies in [lo, hi], so only certain inversions count). */
  for (gint k = 1; k < COALESCE_TIMERS; k++)
    g_assert_cmpint (p->hi[p->order[k]], >=, p->lo[p->order[k - 1]]);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
  g_rand_free (rand);
  g_free (p);
  coalesce_probe = NULL;
  return s1.polls - s0.polls;
}

static void
test_timer_slack_coalesce (void)
{
  g_test_summary ("With the default slack of 1 ms, 300 timeouts spread over 30 ms never fire "
                  "early, fire in deadline order, and share wake-ups: each wake-up is at least "
                  "the slack after the previous one's earliest deadline, so at most about 31 "
                  "wake-ups, not 300");

  guint64 polls = run_coalesce (1000, FALSE);
  g_test_message ("%" G_GUINT64_FORMAT " polls for %d timeouts", polls, COALESCE_TIMERS);
  /* 31 slack windows in [2 ms, 32 ms); the margin is for spurious wake-ups,
   * which the bound does not need but a loaded machine may add. */
  g_assert_cmpuint (polls, <=, 60);
}

static void
test_timer_slack_precise (void)
{
  g_test_summary ("With slack 0, 300 timeouts spread over 30 ms never fire early and fire in "
                  "deadline order");

  guint64 polls = run_coalesce (0, TRUE);
  g_test_message ("%" G_GUINT64_FORMAT " polls for %d timeouts", polls, COALESCE_TIMERS);
}

/* ---- /engine/timer-rearm-after-fire ------------------------------------ */

typedef struct {
  gint tags[8];
  atomic_int n;          /* only the context writes */
} RearmProbe;

static RearmProbe rearm_probe;

static gboolean
rearm_timeout (gpointer data)
{
  gint k = atomic_load (&rearm_probe.n);
  rearm_probe.tags[k] = GPOINTER_TO_INT (data);
  atomic_store (&rearm_probe.n, k + 1);
  return G_SOURCE_REMOVE;
}

static void
test_timer_rearm_after_fire (void)
{
  g_test_summary ("After the timerfd fired and nothing was left to arm it for, later "
                  "timeouts still fire: one added alone, an earlier one added after a later "
                  "one (fires first), and one added after the earliest was removed");

  WeftEngine *engine = wt_engine_new (1);
  WeftContext *ctx = weft_context_new (engine);
  memset (&rearm_probe, 0, sizeof rearm_probe);
  weft_context_dispatch (ctx);

  g_assert_cmpuint (weft_context_add_timeout (ctx, 1, rearm_timeout, GINT_TO_POINTER (1), NULL),
                    >, 0);
  WT_WAIT_UNTIL (atomic_load (&rearm_probe.n) == 1);
  g_assert_cmpint (atomic_load (&rearm_probe.n), ==, 1);

  g_assert_cmpuint (weft_context_add_timeout (ctx, 2, rearm_timeout, GINT_TO_POINTER (2), NULL),
                    >, 0);
  WT_WAIT_UNTIL (atomic_load (&rearm_probe.n) == 2);
  g_assert_cmpint (atomic_load (&rearm_probe.n), ==, 2);

  g_assert_cmpuint (weft_context_add_timeout (ctx, 50, rearm_timeout, GINT_TO_POINTER (3), NULL),
                    >, 0);
  g_assert_cmpuint (weft_context_add_timeout (ctx, 1, rearm_timeout, GINT_TO_POINTER (4), NULL),
                    >, 0);
  WT_WAIT_UNTIL (atomic_load (&rearm_probe.n) == 4);
  g_assert_cmpint (atomic_load (&rearm_probe.n), ==, 4);

  guint gone = weft_context_add_timeout (ctx, 1, rearm_timeout, GINT_TO_POINTER (5), NULL);
  g_assert_cmpuint (gone, >, 0);
  g_assert_true (weft_context_remove (ctx, gone));
  g_assert_cmpuint (weft_context_add_timeout (ctx, 3, rearm_timeout, GINT_TO_POINTER (6), NULL),
                    >, 0);
  WT_WAIT_UNTIL (atomic_load (&rearm_probe.n) == 5);
  g_assert_cmpint (atomic_load (&rearm_probe.n), ==, 5);

  gint want[] = { 1, 2, 4, 3, 6 };
  for (guint i = 0; i < G_N_ELEMENTS (want); i++)
    g_assert_cmpint (rearm_probe.tags[i], ==, want[i]);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/engine/new-and-stop", test_new_and_stop);
  g_test_add_func ("/engine/n-workers-default", test_n_workers_default);
  g_test_add_func ("/engine/post-runs-all", test_post_runs_all);
  g_test_add_func ("/engine/post-front", test_post_front);
  g_test_add_func ("/engine/stop-drops-queued", test_stop_drops_queued);
  g_test_add_func ("/engine/shutdown-drains", test_shutdown_drains);
  g_test_add_func ("/engine/shutdown-deadline", test_shutdown_deadline);
  g_test_add_func ("/engine/shutdown-refuses-foreign-posts", test_shutdown_refuses_foreign_posts);
  g_test_add_func ("/engine/restart", test_restart);
  g_test_add_func ("/engine/stop-keeps-contexts", test_stop_keeps_contexts);
  g_test_add_func ("/engine/stats", test_stats);
  g_test_add_func ("/engine/idle-no-wakeups", test_idle_no_wakeups);
  g_test_add_func ("/engine/wakeups-batched", test_wakeups_batched);
  g_test_add_func ("/engine/wake-passed-on", test_wake_passed_on);
  g_test_add_func ("/engine/concurrent-stop", test_concurrent_stop);
  g_test_add_func ("/engine/shutdown-while-stopping", test_shutdown_while_stopping);
  g_test_add_func ("/engine/timer-slack", test_timer_slack);
  g_test_add_func ("/engine/timer-slack-coalesce", test_timer_slack_coalesce);
  g_test_add_func ("/engine/timer-slack-precise", test_timer_slack_precise);
  g_test_add_func ("/engine/timer-rearm-after-fire", test_timer_rearm_after_fire);
  g_test_add_func ("/engine/fd-batch", test_fd_batch);
  g_test_add_func ("/engine/misuse", test_misuse);
  g_test_add_func ("/engine/stop-from-worker-is-critical", test_stop_from_worker_is_critical);

  return g_test_run ();
}
