/* bench-idle: CPU used by an engine with nothing due.
 *
 * An engine of 2 workers carries 1,000 dispatched contexts, each watching
 * the read end of a pipe nobody writes to, with a 1-hour timeout and an
 * idle handler. For 10 s (1 s with BENCH_QUICK=1) nothing is due. We report
 * the process CPU time over that window as a percentage of one CPU, and
 * the epoll_wait calls and wake-ups the engine made: an idle source must
 * never keep the engine awake, so both should stay at 0.
 */
#include <stdatomic.h>
#include <unistd.h>
#include <weft.h>

#include "weft-bench.h"

#define SECTION "4-wakeup"
#define N_CONTEXTS 1000

static gboolean
never_fd (gint fd, GIOCondition cond, gpointer data)
{
  wb_die ("an fd nobody writes to became ready");
  return G_SOURCE_REMOVE;
}

static gboolean
never_timeout (gpointer data)
{
  wb_die ("a 1-hour timeout fired");
  return G_SOURCE_REMOVE;
}

static atomic_int idles_run;

static gboolean
idle_once (gpointer data)
{
  atomic_fetch_add (&idles_run, 1);
  return G_SOURCE_CONTINUE; /* continues, yet must not spin */
}

int
main (void)
{
  GError *error = NULL;
  WeftEngine *engine = weft_engine_new (2, &error);
  if (engine == NULL)
    wb_die ("%s", error->message);

  WeftContext *ctx[N_CONTEXTS];
  int fds[N_CONTEXTS][2];
  for (int i = 0; i < N_CONTEXTS; i++)
    {
      if (pipe (fds[i]) < 0)
        wb_die ("pipe");
      ctx[i] = weft_context_new (engine);
      if (!weft_context_add_fd (ctx[i], fds[i][0], G_IO_IN, never_fd, NULL, NULL, &error))
        wb_die ("%s", error->message);
      weft_context_add_timeout (ctx[i], 3600 * 1000, never_timeout, NULL, NULL);
      weft_context_add_idle (ctx[i], idle_once, NULL, NULL);
      weft_context_dispatch (ctx[i]);
    }

  /* Let the first idle pass of every context run, then measure. */
  for (int tries = 0; atomic_load (&idles_run) < N_CONTEXTS && tries < 5000; tries++)
    g_usleep (1000);
  g_usleep (100 * 1000);

  double seconds = wb_quick () ? 1.0 : 10.0;
  WeftEngineStats s0, s1;
  int idles0 = atomic_load (&idles_run);
  weft_engine_get_stats (engine, &s0);
  uint64_t c0 = wb_process_cpu_ns (), t0 = wb_now_ns ();
  g_usleep ((gulong) (seconds * G_USEC_PER_SEC));
  uint64_t c1 = wb_process_cpu_ns (), t1 = wb_now_ns ();
  weft_engine_get_stats (engine, &s1);
  int idles1 = atomic_load (&idles_run);

  char note[256];
  snprintf (note, sizeof note,
            "%d contexts, each with an unwritten pipe, a 1 h timeout and a continuing idle; "
            "engine of 2 workers; %.0f s window; process CPU / wall time",
            N_CONTEXTS, seconds);
  const char *impl = WB_VERSION " (engine, 2 workers, nothing due)";
  wb_report (SECTION, impl, "idle engine: CPU", 100.0 * (double) (c1 - c0) / (double) (t1 - t0),
             "%", note);
  wb_report (SECTION, impl, "idle engine: epoll_wait calls", (double) (s1.polls - s0.polls),
             "calls", "over the whole window");
  wb_report (SECTION, impl, "idle engine: wake-ups", (double) (s1.wakeups - s0.wakeups),
             "writes", "over the whole window");
  wb_report (SECTION, impl, "idle engine: idle callbacks", (double) (idles1 - idles0), "calls",
             "continuing idles must not run while nothing else happens");

  for (int i = 0; i < N_CONTEXTS; i++)
    {
      weft_context_unref (ctx[i]);
      close (fds[i][0]);
      close (fds[i][1]);
    }
  weft_engine_unref (engine);
  return 0;
}
