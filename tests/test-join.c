/* test-join.c: join points: eager and lazy continuations, posted tasks.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-test-util.h"

#include <sched.h>
#ifdef WEFT_HAVE_VALGRIND
#include <valgrind/valgrind.h>
#endif

typedef struct {
  WeftEngine *engine;
  WeftContext *ctx;           /* lazy: the context the continuation must run on */
  WeftJoin *join;
  gint n;
  atomic_int tasks_done;      /* incremented before weft_join_done() */
  atomic_int tasks_returned;  /* incremented after it */
  atomic_int cont_runs;
  atomic_int cont_saw_tasks;  /* tasks_done as seen by the continuation */
  atomic_int cont_on_worker;
  atomic_int cont_current_ok;
  _Atomic (GThread *) cont_thread;
  atomic_int notified;
  atomic_int notified_before_cont;
  /* Results written by plain tasks, read by the continuation. */
  guint64 results[100];
  atomic_int results_ok;
} J;

static void
j_continuation (gpointer data)
{
  J *j = data;
  atomic_store (&j->cont_saw_tasks, atomic_load (&j->tasks_done));
  atomic_store (&j->cont_on_worker,
                j->engine != NULL && weft_engine_is_worker_thread (j->engine) ? 1 : 0);
  atomic_store (&j->cont_current_ok, weft_context_get_current () == j->ctx ? 1 : 0);
  atomic_store (&j->cont_thread, g_thread_self ());
  gint ok = 1;
  for (guint i = 0; i < G_N_ELEMENTS (j->results); i++)
    if (j->results[i] != (guint64) i * i)
      ok = 0;
  atomic_store (&j->results_ok, ok);
  atomic_fetch_add (&j->cont_runs, 1);
}

static void
j_notify (gpointer data)
{
  J *j = data;
  if (atomic_load (&j->cont_runs) == 0)
    atomic_fetch_add (&j->notified_before_cont, 1);
  atomic_fetch_add (&j->notified, 1);
}

static void
j_task (gpointer data)
{
  J *j = data;
  atomic_fetch_add (&j->tasks_done, 1);
  weft_join_done (j->join);
  atomic_fetch_add (&j->tasks_returned, 1);
}

/* ---- /join/continuation-drops-last-ref -------------------------------- */

static void
drop_join_continuation (gpointer data)
{
  J *j = data;
  atomic_fetch_add (&j->cont_runs, 1);
  weft_join_unref (j->join); /* the last reference: the join is freed here */
}

/* A continuation may drop the last reference to its join, eager or lazy:
 * weft_join_done() must not read the join after running it (AddressSanitizer
 * and Valgrind in CI see such a read). */
static void
test_continuation_drops_last_ref (void)
{
  g_test_summary ("An eager and a lazy continuation that unref their join (the last "
                  "reference) run once, then their notify once, and nothing reads the "
                  "freed join");
  /* Eager: on the thread that ends the last task, here. */
  J *j = g_new0 (J, 1);
  j->join = weft_join_new (1, NULL, drop_join_continuation, j, j_notify);
  weft_join_done (j->join);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);
  g_assert_cmpint (atomic_load (&j->notified), ==, 1);
  g_assert_cmpint (atomic_load (&j->notified_before_cont), ==, 0);
  g_free (j);

  /* Lazy: posted to a context. */
  j = g_new0 (J, 1);
  j->engine = wt_engine_new (2);
  j->ctx = weft_context_new (j->engine);
  weft_context_dispatch (j->ctx);
  j->join = weft_join_new (1, j->ctx, drop_join_continuation, j, j_notify);
  weft_join_done (j->join);
  WT_WAIT_UNTIL (atomic_load (&j->notified) == 1);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);
  g_assert_cmpint (atomic_load (&j->notified), ==, 1);
  g_assert_cmpint (atomic_load (&j->notified_before_cont), ==, 0);
  weft_context_destroy (j->ctx);
  weft_context_unref (j->ctx);
  weft_engine_unref (j->engine);
  g_free (j);
}

/* ---- /join/lazy-continuation-frees-context ----------------------------- */

/* One round: a lazy join whose only reference the continuation holds, on a
 * context whose only reference is the join's. */
typedef struct {
  WeftJoin *join;          /* the continuation drops it */
  WeftContext *ctx;        /* not a reference: compared only, while it lives */
  gint n;
  atomic_int returned;     /* tasks back from weft_join_done(), relaxed */
  atomic_int left;         /* tasks done with this structure */
  atomic_int cont_runs;
  atomic_int cont_on_ctx;
  atomic_int notified;
  atomic_int notified_before_cont;
} LazyRace;

/* Ends one task from an engine job, holding no reference to the join (the
 * continuation may free it once the last weft_join_done() posted it). */
static void
lazy_race_task (gpointer data)
{
  LazyRace *r = data;
  weft_join_done (r->join);
  /* Relaxed: the holding job below waits for this without synchronising
   * with the post, so nothing the post did after its push is ordered
   * before the continuation's free of the context (ThreadSanitizer then
   * sees such a read race the free; for real it is a use after free when
   * this thread is preempted inside the post). */
  atomic_fetch_add_explicit (&r->returned, 1, memory_order_relaxed);
  atomic_fetch_add (&r->left, 1); /* for the test thread, which frees @r */
}

/* Keeps the context busy (scheduled) until every task has returned from
 * weft_join_done(): the last one's post found it held by this job, and its
 * continuation runs right after. */
static void
lazy_race_hold (gpointer data)
{
  LazyRace *r = data;
  while (atomic_load_explicit (&r->returned, memory_order_relaxed) < r->n)
    sched_yield ();
}

/* Drops the join, and with it the last reference to this context: the
 * context is closed here and freed once this job is over. */
static void
lazy_race_continuation (gpointer data)
{
  LazyRace *r = data;
  atomic_store (&r->cont_on_ctx, weft_context_get_current () == r->ctx);
  atomic_fetch_add (&r->cont_runs, 1);
  weft_join_unref (r->join);
}

static void
lazy_race_notify (gpointer data)
{
  LazyRace *r = data;
  if (atomic_load (&r->cont_runs) == 0)
    atomic_fetch_add (&r->notified_before_cont, 1);
  atomic_fetch_add (&r->notified, 1);
}

/* A lazy continuation that drops the join, and with it the last reference
 * to its own context, while the thread that ended the last task is still
 * in weft_join_done(): the post must not touch the context through the
 * join's reference once its job is queued. Before 6bdedeb it posted through
 * that reference, and read the context's state word after the push, unordered
 * with the free: ThreadSanitizer reports it in every run (the holding job
 * makes each round take that path); AddressSanitizer and Valgrind see it
 * only if the posting thread is preempted between the two, which rounds
 * with 1 to 4 tasks ending on different workers make possible, not likely. */
static void
test_lazy_continuation_frees_context (void)
{
  g_test_summary ("A lazy continuation that drops the last reference to its join and to "
                  "its context, racing the thread that ended the last task, runs once on "
                  "that context, then its notify, and nothing reads the freed context");
  guint rounds = 2000;
#ifdef WEFT_HAVE_VALGRIND
  if (RUNNING_ON_VALGRIND)
    rounds = 200;
#endif
  WeftEngine *engine = wt_engine_new (4);
  for (guint i = 0; i < rounds; i++)
    {
      LazyRace *r = g_new0 (LazyRace, 1);
      r->n = 1 + (gint) (i % 4);
      r->ctx = weft_context_new (engine);
      weft_context_dispatch (r->ctx);
      r->join = weft_join_new ((guint) r->n, r->ctx, lazy_race_continuation, r, lazy_race_notify);
      g_assert_true (weft_context_post (r->ctx, lazy_race_hold, r, NULL));
      weft_context_unref (r->ctx); /* the join's reference is the last */
      for (gint t = 0; t < r->n; t++)
        g_assert_true (weft_engine_post (engine, lazy_race_task, r, NULL));

      gint64 deadline = g_get_monotonic_time () + WT_DEADLINE_US;
      while ((atomic_load (&r->notified) == 0 || atomic_load (&r->left) < r->n) &&
             g_get_monotonic_time () < deadline)
        sched_yield ();
      g_assert_cmpint (atomic_load (&r->left), ==, r->n);
      g_assert_cmpint (atomic_load (&r->cont_runs), ==, 1);
      g_assert_cmpint (atomic_load (&r->cont_on_ctx), ==, 1);
      g_assert_cmpint (atomic_load (&r->notified), ==, 1);
      g_assert_cmpint (atomic_load (&r->notified_before_cont), ==, 0);
      g_free (r);
    }
  weft_engine_unref (engine);
}

/* ---- /join/eager ------------------------------------------------------- */

static void
test_eager (void)
{
  g_test_summary ("Without a context the continuation runs exactly once, after all tasks "
                  "ended, on the thread that ended the last one");

  WeftEngine *engine = wt_engine_new (2);
  const gint n = 8;

  /* The test thread ends the last task. */
  J *j = g_new0 (J, 1);
  j->engine = engine;
  j->n = n;
  j->join = weft_join_new (n, NULL, j_continuation, j, j_notify);
  g_assert_nonnull (j->join);
  for (gint i = 0; i < n - 1; i++)
    g_assert_true (weft_engine_post (engine, j_task, j, NULL));
  WT_WAIT_UNTIL (atomic_load (&j->tasks_returned) == n - 1);
  g_assert_cmpint (atomic_load (&j->tasks_returned), ==, n - 1);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 0);
  g_assert_false (weft_join_is_complete (j->join));

  atomic_fetch_add (&j->tasks_done, 1);
  weft_join_done (j->join);
  /* Ran synchronously, right here. */
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);
  g_assert_true (atomic_load (&j->cont_thread) == g_thread_self ());
  g_assert_cmpint (atomic_load (&j->cont_saw_tasks), ==, n);
  g_assert_cmpint (atomic_load (&j->cont_on_worker), ==, 0);
  g_assert_true (weft_join_is_complete (j->join));
  weft_join_unref (j->join);
  WT_WAIT_UNTIL (atomic_load (&j->notified) == 1);
  g_assert_cmpint (atomic_load (&j->notified), ==, 1);
  g_assert_cmpint (atomic_load (&j->notified_before_cont), ==, 0);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);
  g_free (j);

  /* Workers end every task: the continuation runs on one of them. */
  for (gint round = 0; round < 20; round++)
    {
      j = g_new0 (J, 1);
      j->engine = engine;
      j->n = n;
      j->join = weft_join_new (n, NULL, j_continuation, j, j_notify);
      for (gint i = 0; i < n; i++)
        g_assert_true (weft_engine_post (engine, j_task, j, NULL));
      WT_WAIT_UNTIL (atomic_load (&j->tasks_returned) == n);
      g_assert_cmpint (atomic_load (&j->tasks_returned), ==, n);
      g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);
      g_assert_cmpint (atomic_load (&j->cont_saw_tasks), ==, n);
      g_assert_cmpint (atomic_load (&j->cont_on_worker), ==, 1);
      g_assert_true (weft_join_is_complete (j->join));
      weft_join_unref (j->join);
      WT_WAIT_UNTIL (atomic_load (&j->notified) == 1);
      g_assert_cmpint (atomic_load (&j->notified), ==, 1);
      g_assert_cmpint (atomic_load (&j->notified_before_cont), ==, 0);
      g_free (j);
    }

  weft_engine_unref (engine);
}

/* ---- /join/lazy-during-shutdown ------------------------------------------ */

static void
jshut_continuation (gpointer data)
{
  atomic_fetch_add ((atomic_int *) data, 1);
}

static void
jshut_notify (gpointer data)
{
  atomic_fetch_add ((atomic_int *) data + 1, 1);
}

static void
test_lazy_during_shutdown (void)
{
  g_test_summary ("A lazy join whose last task ends on an application thread during "
                  "weft_engine_shutdown() still runs its continuation, once, before the "
                  "shutdown returns: it continues accepted work (the post was refused, so "
                  "only the notify ran, against the promise that it runs exactly once)");

  WeftEngine *engine = wt_engine_new (2);
  WeftContext *ctx = weft_context_new (engine);
  weft_context_dispatch (ctx);
  atomic_int counts[2] = { 0, 0 }; /* continuation runs, notifies */
  WeftJoin *join = weft_join_new (1, ctx, jshut_continuation, counts, jshut_notify);

  WtSoftStop stop;
  wt_soft_stop_begin (&stop, engine, 200);
  weft_join_done (join);
  g_assert_true (wt_soft_stop_end (&stop));
  g_assert_cmpint (atomic_load (&counts[0]), ==, 1);
  g_assert_cmpint (atomic_load (&counts[1]), ==, 1);
  weft_join_unref (join);
  weft_context_unref (ctx);
  weft_engine_unref (engine);
  g_assert_cmpint (atomic_load (&counts[0]), ==, 1);
}

/* ---- /join/lazy -------------------------------------------------------- */

static void
test_lazy (void)
{
  g_test_summary ("With a context the continuation is posted to it: it runs once, inside "
                  "that context, not synchronously on the thread that ended the last task, "
                  "and not before the context is dispatched");

  WeftEngine *engine = wt_engine_new (2);
  WeftContext *ctx = weft_context_new (engine);
  const gint n = 3;
  J *j = g_new0 (J, 1);

  j->engine = engine;
  j->ctx = ctx;
  j->n = n;
  j->join = weft_join_new (n, ctx, j_continuation, j, j_notify);
  for (gint i = 0; i < n - 1; i++)
    g_assert_true (weft_engine_post (engine, j_task, j, NULL));
  WT_WAIT_UNTIL (atomic_load (&j->tasks_returned) == n - 1);
  g_assert_cmpint (atomic_load (&j->tasks_returned), ==, n - 1);
  atomic_fetch_add (&j->tasks_done, 1);
  weft_join_done (j->join);
  g_assert_true (weft_join_is_complete (j->join));

  /* The context is not dispatched yet: the continuation waits in it. */
  wt_quiet_window_ms (30);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 0);

  weft_context_dispatch (ctx);
  WT_WAIT_UNTIL (atomic_load (&j->cont_runs) == 1);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);
  g_assert_cmpint (atomic_load (&j->cont_current_ok), ==, 1);
  g_assert_cmpint (atomic_load (&j->cont_on_worker), ==, 1);
  g_assert_true (atomic_load (&j->cont_thread) != g_thread_self ());
  g_assert_cmpint (atomic_load (&j->cont_saw_tasks), ==, n);

  weft_join_unref (j->join);
  WT_WAIT_UNTIL (atomic_load (&j->notified) == 1);
  g_assert_cmpint (atomic_load (&j->notified), ==, 1);
  g_assert_cmpint (atomic_load (&j->notified_before_cont), ==, 0);
  wt_quiet_window_ms (20);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
  g_free (j);
}

/* ---- /join/post -------------------------------------------------------- */

typedef struct {
  J *j;
  guint index;
} Task;

static atomic_int task_notified;
static atomic_int task_bad_current;

static void
square_task (gpointer data)
{
  Task *t = data;
  if (t->j->ctx != NULL && weft_context_get_current () != t->j->ctx)
    atomic_fetch_add (&task_bad_current, 1);
  t->j->results[t->index] = (guint64) t->index * t->index;   /* plain write */
  atomic_fetch_add (&t->j->tasks_done, 1);
}

static void
task_notify (gpointer data)
{
  atomic_fetch_add (&task_notified, 1);
  g_free (data);
}

static void
run_post_test (gboolean to_context)
{
  WeftEngine *engine = wt_engine_new (4);
  WeftContext *ctx = to_context ? weft_context_new (engine) : NULL;
  J *j = g_new0 (J, 1);

  atomic_store (&task_notified, 0);
  atomic_store (&task_bad_current, 0);
  if (ctx != NULL)
    weft_context_dispatch (ctx);
  j->engine = engine;
  j->ctx = NULL;    /* eager continuation: it checks get_current () == NULL */
  /* One guard task held by the test, so the count cannot reach zero while
   * tasks are still being posted. */
  j->join = weft_join_new (1, NULL, j_continuation, j, j_notify);
  for (guint i = 0; i < 100; i++)
    {
      Task *t = g_new (Task, 1);
      *t = (Task) { j, i };
      gboolean ok;
      if (to_context)
        ok = weft_join_post_to_context (j->join, ctx, square_task, t, task_notify);
      else
        ok = weft_join_post (j->join, engine, square_task, t, task_notify);
      g_assert_true (ok);
    }
  g_assert_false (weft_join_is_complete (j->join));
  weft_join_done (j->join);

  WT_WAIT_UNTIL (atomic_load (&j->cont_runs) == 1 && atomic_load (&task_notified) == 100);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);
  g_assert_cmpint (atomic_load (&j->cont_saw_tasks), ==, 100);
  g_assert_cmpint (atomic_load (&j->results_ok), ==, 1);
  g_assert_cmpint (atomic_load (&task_notified), ==, 100);
  g_assert_cmpint (atomic_load (&task_bad_current), ==, 0);
  g_assert_true (weft_join_is_complete (j->join));

  weft_join_unref (j->join);
  WT_WAIT_UNTIL (atomic_load (&j->notified) == 1);
  g_assert_cmpint (atomic_load (&j->notified), ==, 1);
  g_assert_cmpint (atomic_load (&j->notified_before_cont), ==, 0);

  if (ctx != NULL)
    weft_context_unref (ctx);
  weft_engine_unref (engine);
  g_free (j);
}

static void
test_post (void)
{
  g_test_summary ("weft_join_post() of 100 tasks to the engine: the continuation runs once, "
                  "after all of them, and sees every result they wrote");
  run_post_test (FALSE);
}

static void
test_post_to_context (void)
{
  g_test_summary ("weft_join_post_to_context() of 100 tasks: they run on the context, and "
                  "the continuation sees every result");
  run_post_test (TRUE);
}

/* ---- /join/post-fails -------------------------------------------------- */

static void
test_post_fails (void)
{
  g_test_summary ("A weft_join_post_to_context() that fails (destroyed context) returns "
                  "FALSE, calls the task's notify, and still ends its task");

  WeftEngine *engine = wt_engine_new (2);
  WeftContext *ctx = weft_context_new (engine);
  J *j = g_new0 (J, 1);
  WtCount c = { 0 };

  weft_context_destroy (ctx);
  j->engine = engine;
  j->join = weft_join_new (1, NULL, j_continuation, j, j_notify);
  g_assert_false (weft_join_post_to_context (j->join, ctx, wt_count_job, &c, wt_count_notify));
  g_assert_cmpint (atomic_load (&c.notified), ==, 1);
  g_assert_cmpint (atomic_load (&c.ran), ==, 0);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 0);
  g_assert_false (weft_join_is_complete (j->join));

  weft_join_done (j->join);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);
  g_assert_true (weft_join_is_complete (j->join));
  weft_join_unref (j->join);
  g_assert_cmpint (atomic_load (&j->notified), ==, 1);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
  g_free (j);
}

/* ---- /join/add --------------------------------------------------------- */

static void
test_add (void)
{
  g_test_summary ("weft_join_add() before completion raises the count: the continuation "
                  "waits for the added tasks too");

  J *j = g_new0 (J, 1);
  j->join = weft_join_new (1, NULL, j_continuation, j, j_notify);
  weft_join_add (j->join, 2);

  for (gint i = 0; i < 2; i++)
    {
      atomic_fetch_add (&j->tasks_done, 1);
      weft_join_done (j->join);
      g_assert_false (weft_join_is_complete (j->join));
      g_assert_cmpint (atomic_load (&j->cont_runs), ==, 0);
    }
  weft_join_add (j->join, 1);
  atomic_fetch_add (&j->tasks_done, 1);
  weft_join_done (j->join);
  g_assert_false (weft_join_is_complete (j->join));
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 0);

  atomic_fetch_add (&j->tasks_done, 1);
  weft_join_done (j->join);
  g_assert_true (weft_join_is_complete (j->join));
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);
  g_assert_cmpint (atomic_load (&j->cont_saw_tasks), ==, 4);

  WeftJoin *extra = weft_join_ref (j->join);
  weft_join_unref (j->join);
  g_assert_cmpint (atomic_load (&j->cont_runs), ==, 1);
  weft_join_unref (extra);
  g_assert_cmpint (atomic_load (&j->notified), ==, 1);
  g_assert_cmpint (atomic_load (&j->notified_before_cont), ==, 0);
  g_free (j);
}

/* The last task ends on a thread without a reference of its own, while the
 * owner waits with weft_join_is_complete() and then drops the only one: the
 * join (and a lazy join's hold on its context) may go at once, so
 * weft_join_done() must read nothing of it after marking it complete.
 * Before the fix it read the context, the continuation and its data after
 * the mark: AddressSanitizer (lazy) and ThreadSanitizer (both) report a
 * use-after-free within a few hundred rounds. */
typedef struct {
  WeftJoin *join;
  atomic_int go;
} UnheldDone;

static void *
unheld_done_thread (void *data)
{
  UnheldDone *u = data;
  while (!atomic_load (&u->go))
    sched_yield ();
  weft_join_done (u->join); /* the owner's reference, not ours */
  return NULL;
}

static void
count_run (gpointer data)
{
  atomic_fetch_add ((atomic_int *) data, 1);
}

static void
freed_on_complete (gboolean lazy)
{
  WeftEngine *engine = wt_engine_new (2);
  WeftContext *ctx = weft_context_new (engine);
  weft_context_dispatch (ctx);
  atomic_int runs = 0;
  const int rounds = 1000;
  for (int i = 0; i < rounds; i++)
    {
      UnheldDone u = { weft_join_new (1, lazy ? ctx : NULL, count_run, &runs, NULL), 0 };
      pthread_t t;
      g_assert_cmpint (pthread_create (&t, NULL, unheld_done_thread, &u), ==, 0);
      atomic_store (&u.go, 1);
      while (!weft_join_is_complete (u.join))
        sched_yield (); /* (not a bare spin: Valgrind runs one thread at a time) */
      weft_join_unref (u.join);
      pthread_join (t, NULL);
    }
  gint64 end = g_get_monotonic_time () + WT_DEADLINE_US;
  while (atomic_load (&runs) < rounds && g_get_monotonic_time () < end)
    g_usleep (1000);
  g_assert_cmpint (atomic_load (&runs), ==, rounds);
  weft_context_unref (ctx);
  weft_engine_unref (engine);
}

static void
test_eager_freed_on_complete (void)
{
  freed_on_complete (FALSE);
}

static void
test_lazy_freed_on_complete (void)
{
  freed_on_complete (TRUE);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/join/eager", test_eager);
  g_test_add_func ("/join/lazy", test_lazy);
  g_test_add_func ("/join/lazy-during-shutdown", test_lazy_during_shutdown);
  g_test_add_func ("/join/post", test_post);
  g_test_add_func ("/join/post-to-context", test_post_to_context);
  g_test_add_func ("/join/post-fails", test_post_fails);
  g_test_add_func ("/join/add", test_add);
  g_test_add_func ("/join/continuation-drops-last-ref", test_continuation_drops_last_ref);
  g_test_add_func ("/join/lazy-continuation-frees-context",
                   test_lazy_continuation_frees_context);
  g_test_add_func ("/join/eager-freed-on-complete", test_eager_freed_on_complete);
  g_test_add_func ("/join/lazy-freed-on-complete", test_lazy_freed_on_complete);

  return g_test_run ();
}
