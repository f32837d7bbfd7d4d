/* stress-wake.c: hunts lost wake-ups. Threads that are not workers post
 * short bursts to worker contexts (or engine jobs) and wait for each burst
 * to run; a burst that does not finish within a generous deadline is a
 * stall, reported with the engine's stats and the context's state.
 *
 *   stress-wake [ctx|engine] SECONDS [PRODUCERS] [BURST] [JITTER]
 *
 * ctx: one context per producer; engine: weft_engine_post(). JITTER is the
 * most busy-loop turns between two posts of a burst (default 2000). Before
 * weft__mpsc_nonempty() looked at the tail, "ctx 20 2 2 30000" stalled a
 * few times per run (two jobs left in an idle context). Exit status 1 if
 * any stall was seen. Run by hand, not part of the suite.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdio.h>
#include <stdlib.h>

#include "weft-context-private.h"

#define STALL_US (2 * G_USEC_PER_SEC)

typedef struct {
  WeftEngine *engine;
  WeftContext *ctx;
  gboolean engine_mode;
  guint burst, jitter;
  gint64 end_us;
  atomic_int ran;
  guint64 rounds;
  guint stalls;
  guint index;
} Producer;

static void
bump (gpointer data)
{
  atomic_fetch_add (&((Producer *) data)->ran, 1);
}

static void
spin (guint n)
{
  volatile guint sink = 0;
  for (guint i = 0; i < n; i++)
    sink += i;
  (void) sink;
}

#define mpsc_state(q) ((q) == NULL ? "none" : mpsc_state_at (&(q)->head, &(q)->tail, &(q)->stub))

static const char *
mpsc_state_at (WeftNode *_Atomic *head, WeftNode *_Atomic *tail, WeftNode *stub)
{
  gboolean head_stub = atomic_load (head) == stub;
  gboolean tail_stub = atomic_load (tail) == stub;
  if (head_stub && tail_stub)
    return "empty";
  if (head_stub)
    return "HEAD=STUB BUT TAIL!=STUB";
  return "nonempty";
}

static void
dump (Producer *p, int expected)
{
  WeftEngineStats st;
  weft_engine_get_stats (p->engine, &st);
  WeftEngine *e = p->engine;
  fprintf (stderr,
           "STALL producer %u round %" G_GUINT64_FORMAT ": ran %d of %d\n"
           "  engine: sleeping %u/%u wakeups %" G_GUINT64_FORMAT " jobs %" G_GUINT64_FORMAT
           " polls %" G_GUINT64_FORMAT " wake_pending %d runq %s urgent %s\n",
           p->index, p->rounds, atomic_load (&p->ran), expected, st.n_sleeping, st.n_workers,
           st.wakeups, st.jobs_run, st.polls, atomic_load (&e->wake_pending),
           mpsc_state (&e->runq), mpsc_state (&e->urgent));
  if (p->ctx != NULL)
    fprintf (stderr, "  context: state %#x back %s front %s\n", atomic_load (&p->ctx->state),
             mpsc_state_at (&p->ctx->back_head, &p->ctx->back_tail, &p->ctx->back_stub), mpsc_state (atomic_load (&p->ctx->front)));
}

static gpointer
producer_main (gpointer data)
{
  Producer *p = data;
  GRand *rand = g_rand_new_with_seed (p->index * 7919 + 1);
  int expected = 0;

  while (g_get_monotonic_time () < p->end_us)
    {
      for (guint i = 0; i < p->burst; i++)
        {
          if (i > 0 && p->jitter > 0)
            spin (g_rand_int_range (rand, 0, p->jitter));
          if (p->engine_mode)
            weft_engine_post (p->engine, bump, p, NULL);
          else
            weft_context_post (p->ctx, bump, p, NULL);
          expected++;
        }
      gint64 deadline = g_get_monotonic_time () + STALL_US;
      guint spins = 0;
      while (atomic_load (&p->ran) != expected)
        {
          if (++spins < 200)
            weft__cpu_relax ();
          else if (g_get_monotonic_time () < deadline)
            g_usleep (spins < 400 ? 0 : 50);
          else
            {
              dump (p, expected);
              p->stalls++;
              /* One more post must pull the stuck ones along. */
              if (p->engine_mode)
                weft_engine_post (p->engine, bump, p, NULL);
              else
                weft_context_post (p->ctx, bump, p, NULL);
              expected++;
              deadline = g_get_monotonic_time () + STALL_US;
              spins = 0;
              while (atomic_load (&p->ran) != expected && g_get_monotonic_time () < deadline)
                g_usleep (100);
              fprintf (stderr, "  after one more post: ran %d of %d\n", atomic_load (&p->ran),
                       expected);
              if (atomic_load (&p->ran) != expected)
                abort ();
            }
        }
      p->rounds++;
    }
  g_rand_free (rand);
  return NULL;
}

int
main (int argc, char **argv)
{
  gboolean engine_mode = argc > 1 && g_str_equal (argv[1], "engine");
  guint seconds = argc > 2 ? atoi (argv[2]) : 10;
  guint n = argc > 3 ? atoi (argv[3]) : 2;
  guint burst = argc > 4 ? atoi (argv[4]) : 2;
  guint jitter = argc > 5 ? atoi (argv[5]) : 2000;

  WeftEngine *engine = weft_engine_new (2, NULL);
  Producer *ps = g_new0 (Producer, n);
  GThread **threads = g_new (GThread *, n);
  gint64 end = g_get_monotonic_time () + (gint64) seconds * G_USEC_PER_SEC;
  for (guint i = 0; i < n; i++)
    {
      ps[i].engine = engine;
      ps[i].engine_mode = engine_mode;
      ps[i].burst = burst;
      ps[i].jitter = jitter;
      ps[i].end_us = end;
      ps[i].index = i;
      if (!engine_mode)
        {
          ps[i].ctx = weft_context_new (engine);
          weft_context_dispatch (ps[i].ctx);
        }
      threads[i] = g_thread_new ("producer", producer_main, &ps[i]);
    }
  guint64 rounds = 0;
  guint stalls = 0;
  for (guint i = 0; i < n; i++)
    {
      g_thread_join (threads[i]);
      rounds += ps[i].rounds;
      stalls += ps[i].stalls;
      weft_context_unref (ps[i].ctx);
    }
  printf ("%s: %u producers, burst %u, jitter %u: %" G_GUINT64_FORMAT " rounds, %u stalls\n",
          engine_mode ? "engine" : "ctx", n, burst, jitter, rounds, stalls);
  weft_engine_unref (engine);
  g_free (ps);
  g_free (threads);
  return stalls ? 1 : 0;
}
