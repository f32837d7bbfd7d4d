/* test-job-slot.c: posting jobs whose queue node is the caller's
 * (WeftJobSlot: weft_context_post_slot(), weft_engine_post_slot()).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-test-util.h"

#define EXPECT_CRITICAL() \
  g_test_expect_message ("Weft", G_LOG_LEVEL_CRITICAL, "*assertion*failed*")

/* ---- /job-slot/context-order ------------------------------------------- */

typedef struct {
  guint n;
  guint *seen;          /* plain: written by the context's callbacks only */
  guint next;           /* likewise */
  atomic_int inside;
  atomic_int overlap;
  atomic_int done;
} Order;

typedef struct {
  WeftJobSlot slot;
  Order *o;
  guint value;
} OrderJob;

static void
order_job (gpointer data)
{
  OrderJob *j = data;
  Order *o = j->o;
  if (atomic_fetch_add (&o->inside, 1) != 0)
    atomic_fetch_add (&o->overlap, 1);
  o->seen[o->next++] = j->value;
  atomic_fetch_sub (&o->inside, 1);
  atomic_fetch_add (&o->done, 1);
}

static void
test_context_order (void)
{
  g_test_summary ("Slot posts and allocating posts from one thread share one queue: they "
                  "run one at a time, in post order");

  WeftEngine *engine = wt_engine_new (2);
  WeftContext *ctx = weft_context_new (engine);
  const guint n = 2000;
  Order o = { .n = n, .seen = g_new0 (guint, n) };
  OrderJob *jobs = g_new0 (OrderJob, n);

  weft_context_dispatch (ctx);
  for (guint i = 0; i < n; i++)
    {
      jobs[i].o = &o;
      jobs[i].value = i;
      /* Two slots, then one allocated node, so both kinds follow each
       * other in both directions. */
      if (i % 3 != 2)
        g_assert_true (weft_context_post_slot (ctx, &jobs[i].slot, order_job, &jobs[i], NULL));
      else
        g_assert_true (weft_context_post (ctx, order_job, &jobs[i], NULL));
    }
  WT_WAIT_UNTIL (atomic_load (&o.done) == (gint) n);
  g_assert_cmpint (atomic_load (&o.done), ==, n);
  g_assert_cmpint (atomic_load (&o.overlap), ==, 0);
  g_assert_cmpuint (o.next, ==, n);
  for (guint i = 0; i < n; i++)
    g_assert_cmpuint (o.seen[i], ==, i);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
  g_free (jobs);
  g_free (o.seen);
}

/* ---- /job-slot/busy-refused -------------------------------------------- */

static void
test_busy_refused (void)
{
  g_test_summary ("A slot whose job has not started is busy: posting it again is refused "
                  "with a critical and its notify is not called; once the job ran the slot "
                  "can be posted again");

  WeftEngine *engine = wt_engine_new (1);
  WeftContext *ctx = weft_context_new (engine);
  WeftContext *other = weft_context_new (engine);
  WeftJobSlot slot = { 0 };
  WtCount c = { 0 };

  /* Not dispatched yet: the job stays queued. */
  g_assert_true (weft_context_post_slot (ctx, &slot, wt_count_job, &c, wt_count_notify));

  EXPECT_CRITICAL ();
  g_assert_false (weft_context_post_slot (ctx, &slot, wt_count_job, &c, wt_count_notify));
  g_test_assert_expected_messages ();
  EXPECT_CRITICAL ();
  g_assert_false (weft_context_post_slot (other, &slot, wt_count_job, &c, wt_count_notify));
  g_test_assert_expected_messages ();
  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_post_slot (engine, &slot, wt_count_job, &c, wt_count_notify));
  g_test_assert_expected_messages ();
  g_assert_cmpint (wt_load (&c.notified), ==, 0);

  weft_context_dispatch (ctx);
  WT_WAIT_UNTIL (wt_load (&c.notified) == 1);
  g_assert_cmpint (wt_load (&c.ran), ==, 1);
  g_assert_cmpint (wt_load (&c.notified), ==, 1);

  /* Free again: on another context this time. */
  weft_context_dispatch (other);
  g_assert_true (weft_context_post_slot (other, &slot, wt_count_job, &c, wt_count_notify));
  WT_WAIT_UNTIL (wt_load (&c.notified) == 2);
  g_assert_cmpint (wt_load (&c.ran), ==, 2);
  g_assert_cmpint (wt_load (&c.notified), ==, 2);
  g_assert_cmpint (wt_load (&c.notify_while_inside), ==, 0);

  weft_context_unref (other);
  weft_context_unref (ctx);
  weft_engine_unref (engine);
}

/* ---- /job-slot/repost-from-job ----------------------------------------- */

typedef struct {
  WeftJobSlot slot;
  WeftContext *ctx;
  atomic_int runs;
  atomic_int refused;
  gint limit;
} Relay;

static void
relay_job (gpointer data)
{
  Relay *r = data;
  /* The slot is free as soon as this function starts. */
  if (atomic_fetch_add (&r->runs, 1) + 1 < r->limit &&
      !weft_context_post_slot (r->ctx, &r->slot, relay_job, r, NULL))
    atomic_fetch_add (&r->refused, 1);
}

static void
test_repost_from_job (void)
{
  g_test_summary ("A job may post its own slot again from its function: a slot is free "
                  "once its job starts");

  WeftEngine *engine = wt_engine_new (2);
  Relay r = { .ctx = weft_context_new (engine), .limit = 5000 };

  weft_context_dispatch (r.ctx);
  g_assert_true (weft_context_post_slot (r.ctx, &r.slot, relay_job, &r, NULL));
  WT_WAIT_UNTIL (wt_load (&r.runs) == r.limit);
  g_assert_cmpint (wt_load (&r.runs), ==, r.limit);
  g_assert_cmpint (wt_load (&r.refused), ==, 0);
  wt_quiet_window_ms (20);
  g_assert_cmpint (wt_load (&r.runs), ==, r.limit);

  weft_context_unref (r.ctx);
  weft_engine_unref (engine);
}

/* ---- /job-slot/dropped-on-destroy, /job-slot/refused-when-closed ------- */

static void
test_dropped_on_destroy (void)
{
  g_test_summary ("A slot queued on a context that is destroyed gets its notify exactly "
                  "once and its function never; the slot is then free");

  WeftEngine *engine = wt_engine_new (2);
  WeftContext *ctx = weft_context_new (engine);
  WeftContext *other = weft_context_new (engine);
  WtGate gate;
  WeftJobSlot slots[8] = { { 0 } };
  WtCount c = { 0 };

  wt_gate_init (&gate);
  weft_context_dispatch (ctx);
  weft_context_dispatch (other);
  g_assert_true (weft_context_post (ctx, wt_gate_job, &gate, NULL));
  WT_WAIT_UNTIL (wt_load (&gate.entered) == 1);
  g_assert_cmpint (wt_load (&gate.entered), ==, 1);
  for (guint i = 0; i < G_N_ELEMENTS (slots); i++)
    g_assert_true (weft_context_post_slot (ctx, &slots[i], wt_count_job, &c, wt_count_notify));

  weft_context_destroy (ctx);
  wt_gate_open (&gate);
  WT_WAIT_UNTIL (wt_load (&c.notified) == (gint) G_N_ELEMENTS (slots));
  g_assert_cmpint (wt_load (&c.notified), ==, G_N_ELEMENTS (slots));
  g_assert_cmpint (wt_load (&c.ran), ==, 0);

  /* Refused by a closed context: notify now, the slot stays free. */
  g_assert_false (weft_context_post_slot (ctx, &slots[0], wt_count_job, &c, wt_count_notify));
  g_assert_cmpint (wt_load (&c.notified), ==, G_N_ELEMENTS (slots) + 1);

  /* Every slot is free again. */
  for (guint i = 0; i < G_N_ELEMENTS (slots); i++)
    g_assert_true (weft_context_post_slot (other, &slots[i], wt_count_job, &c, NULL));
  WT_WAIT_UNTIL (wt_load (&c.ran) == (gint) G_N_ELEMENTS (slots));
  g_assert_cmpint (wt_load (&c.ran), ==, G_N_ELEMENTS (slots));
  wt_quiet_window_ms (20);
  g_assert_cmpint (wt_load (&c.notified), ==, G_N_ELEMENTS (slots) + 1);

  weft_context_unref (other);
  weft_context_unref (ctx);
  weft_engine_unref (engine);
  wt_gate_clear (&gate);
}

static void
test_dropped_undispatched (void)
{
  g_test_summary ("Unref'ing a context that was never dispatched drops its queued slots: "
                  "each notify once, no function, the slots free");

  WeftEngine *engine = wt_engine_new (1);
  WeftContext *ctx = weft_context_new (engine);
  WeftJobSlot slots[4] = { { 0 } };
  WtCount c = { 0 };

  for (guint i = 0; i < G_N_ELEMENTS (slots); i++)
    g_assert_true (weft_context_post_slot (ctx, &slots[i], wt_count_job, &c, wt_count_notify));
  weft_context_unref (ctx);
  g_assert_cmpint (wt_load (&c.notified), ==, G_N_ELEMENTS (slots));
  g_assert_cmpint (wt_load (&c.ran), ==, 0);
  for (guint i = 0; i < G_N_ELEMENTS (slots); i++)
    g_assert_true (weft_engine_post_slot (engine, &slots[i], wt_count_job, &c, NULL));
  WT_WAIT_UNTIL (wt_load (&c.ran) == (gint) G_N_ELEMENTS (slots));
  g_assert_cmpint (wt_load (&c.ran), ==, G_N_ELEMENTS (slots));

  weft_engine_unref (engine);
}

/* ---- /job-slot/bounded-counts ------------------------------------------ */

static void
test_bounded_counts (void)
{
  g_test_summary ("With a queue bound, a slot job is counted (try_post sees it) but never "
                  "refused");

  WeftEngine *engine = wt_engine_new (1);
  WeftContext *ctx = weft_context_new (engine);
  WeftJobSlot slots[3] = { { 0 } };
  WtCount c = { 0 };
  GError *error = NULL;

  weft_context_set_max_queued (ctx, 2);
  for (guint i = 0; i < G_N_ELEMENTS (slots); i++)
    g_assert_true (weft_context_post_slot (ctx, &slots[i], wt_count_job, &c, NULL));
  g_assert_false (weft_context_try_post (ctx, wt_count_job, &c, NULL, &error));
  g_assert_error (error, WEFT_ERROR, WEFT_ERROR_QUEUE_FULL);
  g_clear_error (&error);

  weft_context_dispatch (ctx);
  WT_WAIT_UNTIL (wt_load (&c.ran) == (gint) G_N_ELEMENTS (slots));
  g_assert_cmpint (wt_load (&c.ran), ==, G_N_ELEMENTS (slots));
  /* Their counts are given back when they run. */
  g_assert_true (weft_context_try_post (ctx, wt_count_job, &c, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (weft_context_try_post (ctx, wt_count_job, &c, NULL, &error));
  g_assert_no_error (error);
  WT_WAIT_UNTIL (wt_load (&c.ran) == (gint) G_N_ELEMENTS (slots) + 2);
  g_assert_cmpint (wt_load (&c.ran), ==, G_N_ELEMENTS (slots) + 2);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
}

/* ---- /job-slot/engine ------------------------------------------------- */

typedef struct {
  WeftJobSlot slot;
  WeftEngine *engine;
  atomic_int runs;
  atomic_int refused;
  gint limit;
} EngineRelay;

static void
engine_relay_job (gpointer data)
{
  EngineRelay *r = data;
  if (atomic_fetch_add (&r->runs, 1) + 1 < r->limit &&
      !weft_engine_post_slot (r->engine, &r->slot, engine_relay_job, r, NULL))
    atomic_fetch_add (&r->refused, 1);
}

static void
test_engine (void)
{
  g_test_summary ("weft_engine_post_slot runs the job once per post, and the job may post "
                  "its slot again");

  WeftEngine *engine = wt_engine_new (2);
  EngineRelay r = { .engine = engine, .limit = 2000 };

  g_assert_true (weft_engine_post_slot (engine, &r.slot, engine_relay_job, &r, NULL));
  WT_WAIT_UNTIL (wt_load (&r.runs) == r.limit);
  g_assert_cmpint (wt_load (&r.runs), ==, r.limit);
  g_assert_cmpint (wt_load (&r.refused), ==, 0);
  wt_quiet_window_ms (20);
  g_assert_cmpint (wt_load (&r.runs), ==, r.limit);

  weft_engine_unref (engine);
}

/* ---- /job-slot/threads-reuse ------------------------------------------ */

/* Producer threads each own slots and post them over and over to shared
 * contexts, each again once its previous job has counted itself started
 * (the job's last store, after its reads of the slot's data). Every job
 * checks that it sees the sequence number its producer wrote before the
 * post and that its context runs one callback at a time. The producer
 * never posts while the job still reads, so the hand-back's own ordering
 * is not what this checks (there is no public look at a slot's state to
 * wait on). */

#define REUSE_THREADS 4
#define REUSE_SLOTS 16
#define REUSE_CONTEXTS 6

typedef struct {
  atomic_int inside;
  atomic_int overlap;
} ReuseCtx;

typedef struct {
  WeftJobSlot slot;
  ReuseCtx *rc;
  guint seq;            /* written by the producer before each post */
  guint expect;         /* read and bumped by the job only */
  atomic_uint started;  /* jobs that started */
  atomic_int wrong;
} ReuseJob;

static ReuseCtx reuse_ctx[REUSE_CONTEXTS];
static WeftContext *reuse_contexts[REUSE_CONTEXTS];
static guint reuse_rounds;

static void
reuse_job (gpointer data)
{
  ReuseJob *j = data;
  ReuseCtx *rc = j->rc;
  if (atomic_fetch_add (&rc->inside, 1) != 0)
    atomic_fetch_add (&rc->overlap, 1);
  if (j->seq != j->expect)
    atomic_fetch_add (&j->wrong, 1);
  j->expect++;
  atomic_fetch_sub (&rc->inside, 1);
  atomic_fetch_add (&j->started, 1);
}

static gpointer
reuse_producer (gpointer data)
{
  ReuseJob *jobs = data;
  for (guint round = 0; round < reuse_rounds; round++)
    for (guint i = 0; i < REUSE_SLOTS; i++)
      {
        ReuseJob *j = &jobs[i];
        /* Free once its previous job started. */
        while (atomic_load (&j->started) != round)
          g_thread_yield ();
        guint k = (round + i) % REUSE_CONTEXTS;
        j->rc = &reuse_ctx[k];
        j->seq = round;
        if (!weft_context_post_slot (reuse_contexts[k], &j->slot, reuse_job, j, NULL))
          g_error ("weft_context_post_slot refused a free slot");
      }
  return NULL;
}

static void
test_threads_reuse (void)
{
  g_test_summary ("Threads re-posting their slots to shared contexts as soon as each job "
                  "starts: every job runs once, sees what its producer wrote, contexts "
                  "never overlap");

  WeftEngine *engine = wt_engine_new (2);
  ReuseJob *jobs = g_new0 (ReuseJob, REUSE_THREADS * REUSE_SLOTS);
  GThread *threads[REUSE_THREADS];

  reuse_rounds = g_test_slow () ? 5000 : 500;
  for (guint k = 0; k < REUSE_CONTEXTS; k++)
    {
      atomic_init (&reuse_ctx[k].inside, 0);
      atomic_init (&reuse_ctx[k].overlap, 0);
      reuse_contexts[k] = weft_context_new (engine);
      weft_context_dispatch (reuse_contexts[k]);
    }
  for (guint t = 0; t < REUSE_THREADS; t++)
    threads[t] = g_thread_new ("producer", reuse_producer, &jobs[t * REUSE_SLOTS]);
  for (guint t = 0; t < REUSE_THREADS; t++)
    g_thread_join (threads[t]);

  for (guint i = 0; i < REUSE_THREADS * REUSE_SLOTS; i++)
    {
      WT_WAIT_UNTIL (atomic_load (&jobs[i].started) == reuse_rounds);
      g_assert_cmpuint (atomic_load (&jobs[i].started), ==, reuse_rounds);
      g_assert_cmpint (atomic_load (&jobs[i].wrong), ==, 0);
    }
  for (guint k = 0; k < REUSE_CONTEXTS; k++)
    {
      g_assert_cmpint (atomic_load (&reuse_ctx[k].overlap), ==, 0);
      weft_context_unref (reuse_contexts[k]);
    }
  weft_engine_unref (engine);
  g_free (jobs);
}

/* ---- /job-slot/misuse -------------------------------------------------- */

static void
nop_job (gpointer data)
{
}

static void
test_misuse (void)
{
  g_test_summary ("NULL arguments to the slot posts are programming errors: g_critical and "
                  "FALSE");

  WeftEngine *engine = wt_engine_new (1);
  WeftContext *ctx = weft_context_new (engine);
  WeftJobSlot slot = { 0 };

  EXPECT_CRITICAL ();
  g_assert_false (weft_context_post_slot (NULL, &slot, nop_job, NULL, NULL));
  g_test_assert_expected_messages ();
  EXPECT_CRITICAL ();
  g_assert_false (weft_context_post_slot (ctx, NULL, nop_job, NULL, NULL));
  g_test_assert_expected_messages ();
  EXPECT_CRITICAL ();
  g_assert_false (weft_context_post_slot (ctx, &slot, NULL, NULL, NULL));
  g_test_assert_expected_messages ();
  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_post_slot (NULL, &slot, nop_job, NULL, NULL));
  g_test_assert_expected_messages ();
  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_post_slot (engine, NULL, nop_job, NULL, NULL));
  g_test_assert_expected_messages ();
  EXPECT_CRITICAL ();
  g_assert_false (weft_engine_post_slot (engine, &slot, NULL, NULL, NULL));
  g_test_assert_expected_messages ();

  /* None of these made the slot busy. */
  WtCount c = { 0 };
  weft_context_dispatch (ctx);
  g_assert_true (weft_context_post_slot (ctx, &slot, wt_count_job, &c, wt_count_notify));
  WT_WAIT_UNTIL (wt_load (&c.notified) == 1);
  g_assert_cmpint (wt_load (&c.ran), ==, 1);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/job-slot/context-order", test_context_order);
  g_test_add_func ("/job-slot/busy-refused", test_busy_refused);
  g_test_add_func ("/job-slot/repost-from-job", test_repost_from_job);
  g_test_add_func ("/job-slot/dropped-on-destroy", test_dropped_on_destroy);
  g_test_add_func ("/job-slot/dropped-undispatched", test_dropped_undispatched);
  g_test_add_func ("/job-slot/bounded-counts", test_bounded_counts);
  g_test_add_func ("/job-slot/engine", test_engine);
  g_test_add_func ("/job-slot/threads-reuse", test_threads_reuse);
  g_test_add_func ("/job-slot/misuse", test_misuse);

  return g_test_run ();
}
