/* bench-coro.c: coroutine figures for sections 1-switch and 1-create of
 * ../shared/bench/micro, same protocol.
 *
 *   raw switch      weft__coro_switch ping-pong, one thread (2 switches per
 *                   round): the machine switch alone
 *   raw create      stack from the cache + first frame + switch in + switch
 *                   out + stack back: what a coroutine costs below the API
 *   yield           weft_coro_yield in a context: post of the resume job,
 *                   back to the worker, the job runs, switch in
 *   spawn           weft_coro_spawn + run to the end + free, driven by a
 *                   coroutine in the same context that joins nothing
 *   spawn here      weft__coro_spawn_here from a job of the context: the
 *                   body starts at once, no job (the HTTP server's path)
 *
 * Usage: bench-coro [ROUNDS]; BENCH_QUICK=1 for small sizes.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-bench.h"
#include "weft-coro-private.h"
#include "weft-engine.h"

#include <stdatomic.h>

#define IMPL "Weft 0.1"

static WeftCoroRegs main_regs, co_regs;

static void
pingpong_entry (void *arg)
{
  for (;;)
    weft__coro_switch (&co_regs, &main_regs);
}

static void
once_entry (void *arg)
{
  weft__coro_switch (&co_regs, &main_regs); /* never resumed */
}

static void
raw_switch (long n)
{
  WeftCoroStack *s = weft__coro_stack_get (WEFT_CORO_DEFAULT_STACK);
  weft__coro_regs_init (&co_regs, s->lo, s->size, pingpong_entry, NULL);
  weft__coro_switch (&main_regs, &co_regs); /* warm */
  uint64_t t0 = wb_now_ns ();
  for (long i = 0; i < n; i++)
    weft__coro_switch (&main_regs, &co_regs);
  uint64_t t1 = wb_now_ns ();
  wb_report ("1-switch", IMPL, "weft__coro_switch, callee-saved + MXCSR/x87 CW, pop+jmp",
             (double) (t1 - t0) / (2.0 * (double) n), "ns/switch",
             "ping-pong main<->coroutine; 2 switches per round; the switch under the API");
  weft__coro_stack_put (s);
}

static void
raw_create (long n)
{
  uint64_t t0 = wb_now_ns ();
  for (long i = 0; i < n; i++)
    {
      WeftCoroStack *s = weft__coro_stack_get (WEFT_CORO_DEFAULT_STACK);
      weft__coro_regs_init (&co_regs, s->lo, s->size, once_entry, NULL);
      weft__coro_switch (&main_regs, &co_regs);
      weft__coro_stack_put (s);
    }
  uint64_t t1 = wb_now_ns ();
  wb_report ("1-create", IMPL, "create+run+destroy: stack cache (guarded stacks), no API",
             (double) (t1 - t0) / (double) n, "ns/coroutine",
             "64 KiB stack + guard page; cache get, first frame, 2 switches, cache put");
}

/* ---- through the API, in a context --------------------------------------- */

typedef struct {
  long n;
  atomic_int done;
  uint64_t ns;
} Job;

static gpointer
yielder (gpointer data)
{
  Job *j = data;
  weft_coro_yield ();
  uint64_t t0 = wb_now_ns ();
  for (long i = 0; i < j->n; i++)
    weft_coro_yield ();
  j->ns = wb_now_ns () - t0;
  atomic_store (&j->done, 1);
  return NULL;
}

static gpointer
empty (gpointer data)
{
  return NULL;
}

static gpointer
spawner (gpointer data)
{
  Job *j = data;
  WeftContext *ctx = weft_coro_get_context (weft_coro_self ());
  uint64_t t0 = wb_now_ns ();
  for (long i = 0; i < j->n; i++)
    {
      WeftCoro *c = weft_coro_spawn (ctx, empty, NULL, NULL, 0);
      weft_coro_unref (c);
      if (i % 64 == 63)
        weft_coro_yield (); /* let them run (and end) in batches */
    }
  weft_coro_yield ();
  j->ns = wb_now_ns () - t0;
  atomic_store (&j->done, 1);
  return NULL;
}

/* From a job of the context: each coroutine runs to its end inside the
 * call, as the HTTP server's coroutine handlers do. */
static void
here_job (gpointer data)
{
  Job *j = data;
  WeftContext *ctx = weft_context_get_current ();
  uint64_t t0 = wb_now_ns ();
  for (long i = 0; i < j->n; i++)
    weft__coro_spawn_here (ctx, empty, NULL, NULL, 0);
  j->ns = wb_now_ns () - t0;
  atomic_store (&j->done, 1);
}

static void
api_here (WeftEngine *engine, WeftJobFunc job, Job *j)
{
  WeftContext *ctx = weft_context_new (engine);
  weft_context_dispatch (ctx);
  weft_context_post (ctx, job, j, NULL);
  while (!atomic_load (&j->done))
    g_usleep (1000);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
}

static void
api (WeftEngine *engine, WeftCoroFunc f, Job *j)
{
  WeftContext *ctx = weft_context_new (engine);
  weft_context_dispatch (ctx);
  WeftCoro *c = weft_coro_spawn (ctx, f, j, NULL, 0);
  while (!atomic_load (&j->done))
    g_usleep (1000);
  while (!weft_coro_is_done (c))
    g_usleep (1000);
  weft_coro_unref (c);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
}

int
main (int argc, char **argv)
{
  int rounds = argc > 1 ? atoi (argv[1]) : 1;
  long n_switch = wb_n (20000000, 100000);
  long n_create = wb_n (5000000, 50000);
  long n_api = wb_n (2000000, 20000);
  GError *error = NULL;
  WeftEngine *engine = weft_engine_new (1, &error);
  g_assert_no_error (error);
  for (int r = 0; r < rounds; r++)
    {
      raw_switch (n_switch);
      raw_create (n_create);
      Job y = { n_api };
      api (engine, yielder, &y);
      wb_report ("1-switch", IMPL, "weft_coro_yield in a context (round trip)",
                 (double) y.ns / (double) y.n, "ns/yield",
                 "post of the resume job + back to the worker + job + 2 switches; 1 worker");
      Job sp = { n_api };
      api (engine, spawner, &sp);
      wb_report ("1-create", IMPL, "weft_coro_spawn+run+end in a context, cached stack",
                 (double) sp.ns / (double) sp.n, "ns/coroutine",
                 "spawned from a coroutine of the same context; 64 KiB stack; 1 worker");
      Job h = { n_api };
      api_here (engine, here_job, &h);
      wb_report ("1-create", IMPL, "weft__coro_spawn_here+run+end from a job, cached stack",
                 (double) h.ns / (double) h.n, "ns/coroutine",
                 "internal: the body starts inside the call (HTTP coroutine handlers); "
                 "64 KiB stack; 1 worker");
    }
  weft_engine_unref (engine);
  return 0;
}
