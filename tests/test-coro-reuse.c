/* test-coro-reuse.c: the internal coroutine path of the HTTP server's
 * coroutine handlers (context/weft-coro-private.h): a body started inside
 * a callback of its context (weft__coro_spawn_here) that takes on more
 * work there (weft__coro_renew), what renewing refuses and forgets, and
 * the notify's data moving with the work (weft__coro_set_data).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-test-util.h"
#include "weft-coro-private.h"

typedef struct {
  WeftEngine *engine;
  WeftContext *ctx;
} Env;

static void
env_init (Env *e)
{
  e->engine = wt_engine_new (2);
  e->ctx = weft_context_new (e->engine);
  weft_context_dispatch (e->ctx);
}

static void
env_clear (Env *e)
{
  weft_context_destroy (e->ctx);
  weft_context_unref (e->ctx);
  weft_engine_unref (e->engine);
}

/* Runs @func on @ctx as a job and waits until it has returned. */
typedef struct {
  void (*func) (gpointer data);
  gpointer data;
  atomic_int done;
} OnCtx;

static void
on_ctx_job (gpointer data)
{
  OnCtx *o = data;
  o->func (o->data);
  atomic_store (&o->done, 1);
}

static void
run_on (WeftContext *ctx, void (*func) (gpointer data), gpointer data)
{
  OnCtx o = { func, data, 0 };
  g_assert_true (weft_context_post (ctx, on_ctx_job, &o, NULL));
  WT_WAIT_UNTIL (atomic_load (&o.done) == 1);
  g_assert_cmpint (atomic_load (&o.done), ==, 1);
}

/* What a job starts with weft__coro_spawn_here() in its context; *inside
 * (if not NULL) is TRUE around the call, for the body to tell whether it
 * runs within it. */
typedef struct {
  WeftCoroFunc body;
  gpointer data;
  GDestroyNotify notify;
  gboolean *inside;
} Here;

static void
spawn_here_job (gpointer data)
{
  Here *h = data;
  if (h->inside != NULL)
    *h->inside = TRUE;
  g_assert_true (weft__coro_spawn_here (weft_context_get_current (), h->body, h->data,
                                        h->notify, 0));
  if (h->inside != NULL)
    *h->inside = FALSE;
}

/* Runs @body from a job on @ctx with spawn_here; returns once the job has. */
static void
spawn_here_on (WeftContext *ctx, WeftCoroFunc body, gpointer data, GDestroyNotify notify,
               gboolean *inside)
{
  Here h = { body, data, notify, inside };
  run_on (ctx, spawn_here_job, &h);
}

/* ---- several pieces of work in one coroutine ---------------------------- */

typedef struct {
  gboolean in_owner;   /* set by the owner around the spawn */
  guint n_done;
  gboolean inside[8];  /* each piece ran inside the owner's call */
  gboolean renewed[8];
  atomic_int ended;
} Worker;

static gpointer
worker_body (gpointer data)
{
  Worker *w = data;
  WeftCoro *self = weft_coro_self ();
  for (;;)
    {
      w->inside[w->n_done] = w->in_owner;
      w->renewed[w->n_done] = weft__coro_renew (self);
      w->n_done++;
      if (w->n_done == 5)
        break;
    }
  return NULL;
}

static void
worker_ended (gpointer data)
{
  Worker *w = data;
  atomic_store (&w->ended, 1);
}

/* A coroutine started by spawn_here, which never waits, may renew itself
 * for each piece of work, all inside the call that started it. */
static void
test_renew_inside_owner (void)
{
  Env e;
  env_init (&e);
  static Worker w;
  spawn_here_on (e.ctx, worker_body, &w, worker_ended, &w.in_owner);
  g_assert_cmpint (atomic_load (&w.ended), ==, 1);
  g_assert_cmpuint (w.n_done, ==, 5);
  for (guint i = 0; i < 5; i++)
    {
      g_assert_true (w.inside[i]);
      g_assert_true (w.renewed[i]);
    }
  env_clear (&e);
}

/* ---- a public spawn never runs inline; spawn_here does ------------------ */

typedef struct {
  gboolean running; /* set by the owner around the spawn */
  gboolean ran_inside;
  atomic_int ran;
} Inline;

static gpointer
inline_body (gpointer data)
{
  Inline *in = data;
  in->ran_inside = in->running;
  atomic_store (&in->ran, 1);
  return NULL;
}

static void
spawn_public_job (gpointer data)
{
  Inline *in = data;
  in->running = TRUE;
  WeftCoro *c = weft_coro_spawn (weft_context_get_current (), inline_body, in, NULL, 0);
  in->running = FALSE;
  weft_coro_unref (c);
}

static void
test_spawn_here_inline (void)
{
  Env e;
  env_init (&e);
  static Inline here, pub, other;
  spawn_here_on (e.ctx, inline_body, &here, NULL, &here.running);
  g_assert_cmpint (atomic_load (&here.ran), ==, 1);
  g_assert_true (here.ran_inside);
  run_on (e.ctx, spawn_public_job, &pub);
  WT_WAIT_UNTIL (atomic_load (&pub.ran) == 1);
  g_assert_cmpint (atomic_load (&pub.ran), ==, 1);
  g_assert_false (pub.ran_inside);
  /* Outside a callback of the context, spawn_here posts like spawn. */
  g_assert_true (weft__coro_spawn_here (e.ctx, inline_body, &other, NULL, 0));
  WT_WAIT_UNTIL (atomic_load (&other.ran) == 1);
  g_assert_cmpint (atomic_load (&other.ran), ==, 1);
  env_clear (&e);
}

/* ---- what renewing refuses ---------------------------------------------- */

typedef struct {
  gboolean refused_with_ref;
  gboolean refused_after_wait;
  gboolean refused_when_posted;
  atomic_int done;
} Refuse;

static gpointer
refuse_body (gpointer data)
{
  Refuse *r = data;
  WeftCoro *self = weft_coro_self ();
  /* Someone else holds a reference (a joiner could come): no renewal. */
  WeftCoro *ref = weft_coro_ref (self);
  r->refused_with_ref = !weft__coro_renew (self);
  weft_coro_unref (ref);
  /* Continued by a job after a wait: outside the callback that started it. */
  g_assert_cmpint (weft_coro_yield (), ==, 0);
  r->refused_after_wait = !weft__coro_renew (self);
  atomic_store (&r->done, 1);
  return NULL;
}

static gpointer
posted_body (gpointer data)
{
  Refuse *r = data;
  r->refused_when_posted = !weft__coro_renew (weft_coro_self ());
  atomic_store (&r->done, 1);
  return NULL;
}

static void
test_renew_refused (void)
{
  Env e;
  env_init (&e);
  static Refuse r, p;
  spawn_here_on (e.ctx, refuse_body, &r, NULL, NULL);
  WT_WAIT_UNTIL (atomic_load (&r.done) == 1);
  g_assert_cmpint (atomic_load (&r.done), ==, 1);
  g_assert_true (r.refused_with_ref);
  g_assert_true (r.refused_after_wait);
  /* Started by a job (a public spawn), never inside a callback. */
  WeftCoro *c = weft_coro_spawn (e.ctx, posted_body, &p, NULL, 0);
  weft_coro_unref (c);
  WT_WAIT_UNTIL (atomic_load (&p.done) == 1);
  g_assert_cmpint (atomic_load (&p.done), ==, 1);
  g_assert_true (p.refused_when_posted);
  env_clear (&e);
}

/* ---- what renewing forgets ---------------------------------------------- */

static atomic_int locals_freed;

static void
count_local (gpointer data)
{
  atomic_fetch_add (&locals_freed, 1);
}

static int local_key;

typedef struct {
  gboolean renewed;
  gint freed_at_renew;
  gboolean local_gone;
  gint sleep_result;
  atomic_int done;
} Forget;

static gpointer
forget_body (gpointer data)
{
  Forget *f = data;
  WeftCoro *self = weft_coro_self ();
  weft_coro_set_local (&local_key, f, count_local);
  weft_coro_interrupt (self); /* would end its next wait at once */
  f->renewed = weft__coro_renew (self);
  f->freed_at_renew = atomic_load (&locals_freed);
  /* The next piece of work starts clean. */
  f->local_gone = weft_coro_get_local (&local_key) == NULL;
  f->sleep_result = weft_coro_sleep (1);
  atomic_store (&f->done, 1);
  return NULL;
}

static void
test_renew_forgets_locals_and_interrupt (void)
{
  Env e;
  env_init (&e);
  static Forget f;
  atomic_store (&locals_freed, 0);
  spawn_here_on (e.ctx, forget_body, &f, NULL, NULL);
  WT_WAIT_UNTIL (atomic_load (&f.done) == 1);
  g_assert_cmpint (atomic_load (&f.done), ==, 1);
  g_assert_true (f.renewed);
  g_assert_cmpint (f.freed_at_renew, ==, 1);
  g_assert_true (f.local_gone);
  g_assert_cmpint (f.sleep_result, ==, 0);
  g_assert_cmpint (atomic_load (&locals_freed), ==, 1);
  env_clear (&e);
}

/* ---- a context destroyed under a reused coroutine ----------------------- */

static atomic_int notified_first, notified_second;

static void
notify_first (gpointer data)
{
  atomic_fetch_add (&notified_first, 1);
}

static void
notify_second (gpointer data)
{
  atomic_fetch_add (&notified_second, 1);
}

typedef struct {
  atomic_int sleeping;
  atomic_int woke;
} Doomed;

static gpointer
doomed_body (gpointer data)
{
  Doomed *d = data;
  WeftCoro *self = weft_coro_self ();
  if (!weft__coro_renew (self))
    return NULL;
  /* The second piece of work: what the notify gets now is its data. */
  weft__coro_set_data (self, &notified_second);
  atomic_store (&d->sleeping, 1);
  weft_coro_sleep (60 * 1000);
  atomic_store (&d->woke, 1);
  return NULL;
}

static void
doomed_notify (gpointer data)
{
  if (data == &notified_second)
    notify_second (data);
  else
    notify_first (data);
}

/* The context goes while a renewed coroutine is suspended: it is freed
 * once, its notify getting the data of the work it was on. */
static void
test_destroy_with_reused_suspended (void)
{
  Env e;
  env_init (&e);
  static Doomed d;
  atomic_store (&notified_first, 0);
  atomic_store (&notified_second, 0);
  WeftContext *doomed = weft_context_new (e.engine);
  weft_context_dispatch (doomed);
  spawn_here_on (doomed, doomed_body, &d, doomed_notify, NULL);
  g_assert_cmpint (atomic_load (&d.sleeping), ==, 1);
  weft_context_destroy (doomed);
  WT_WAIT_UNTIL (atomic_load (&notified_second) == 1);
  g_assert_cmpint (atomic_load (&notified_second), ==, 1);
  g_assert_cmpint (atomic_load (&notified_first), ==, 0);
  g_assert_cmpint (atomic_load (&d.woke), ==, 0);
  weft_context_unref (doomed);
  env_clear (&e);
}

/* ---- the last public reference dropped during the owner's callback ----- */

typedef struct {
  atomic_int in_job;
  atomic_int unrefed;   /* the test thread dropped the last public reference */
  atomic_int resumed;
  atomic_int notified;
} Late;

static gpointer
late_body (gpointer data)
{
  Late *l = data;
  weft_coro_sleep (60 * 1000); /* the context is closed: it never comes back */
  atomic_store (&l->resumed, 1);
  return NULL;
}

static void
late_notify (gpointer data)
{
  Late *l = data;
  atomic_fetch_add (&l->notified, 1);
}

static void
late_job (gpointer data)
{
  Late *l = data;
  atomic_store (&l->in_job, 1);
  WT_WAIT_UNTIL (atomic_load (&l->unrefed)); /* the test thread unrefs once it sees in_job */
  /* The callback alone keeps the context now (an internal hold). */
  g_assert_true (weft_context_is_destroyed (weft_context_get_current ()));
  weft__coro_spawn_here (weft_context_get_current (), late_body, l, late_notify, 0);
}

/* Another thread drops the context's last public reference while the
 * callback that spawns here runs: the body waits, so the coroutine must
 * hold its context past the callback; it cannot take a public reference
 * then (there is none left to add to: a critical, and none held), so it
 * holds the memory as the engine's internal paths do, and is abandoned
 * with the closed context: notified once, never resumed. */
static void
test_spawn_here_last_ref_gone (void)
{
  Env e;
  env_init (&e);
  static Late l;
  WeftContext *ctx = weft_context_new (e.engine);
  weft_context_dispatch (ctx);
  g_assert_true (weft_context_post (ctx, late_job, &l, NULL));
  WT_WAIT_UNTIL (atomic_load (&l.in_job) == 1);
  g_assert_cmpint (atomic_load (&l.in_job), ==, 1);
  weft_context_unref (ctx); /* the last public reference */
  atomic_store (&l.unrefed, 1);
  WT_WAIT_UNTIL (atomic_load (&l.notified) == 1);
  g_assert_cmpint (atomic_load (&l.notified), ==, 1);
  g_assert_cmpint (atomic_load (&l.resumed), ==, 0);
  env_clear (&e);
  g_assert_cmpint (atomic_load (&l.notified), ==, 1);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/coro-reuse/spawn-here-inline", test_spawn_here_inline);
  g_test_add_func ("/coro-reuse/renew-inside-owner", test_renew_inside_owner);
  g_test_add_func ("/coro-reuse/renew-refused", test_renew_refused);
  g_test_add_func ("/coro-reuse/renew-forgets-locals-and-interrupt",
                   test_renew_forgets_locals_and_interrupt);
  g_test_add_func ("/coro-reuse/destroy-with-reused-suspended",
                   test_destroy_with_reused_suspended);
  g_test_add_func ("/coro-reuse/spawn-here-last-ref-gone", test_spawn_here_last_ref_gone);
  return g_test_run ();
}
