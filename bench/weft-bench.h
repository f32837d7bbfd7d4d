/* weft-bench.h: small helpers shared by the Weft benchmark programs.
 *
 * Every program prints one line per figure, in the format of the micro
 * harness (/work/shared/bench/micro, tools/summarize.py), so that Weft's rows
 * land in the same tables as the peers' when run through bench/compare:
 *
 *   RESULT|<section>|<implementation>|<figure>|<value>|<unit>|<note>
 *
 * BENCH_QUICK=1 in the environment selects reduced sizes (smoke test).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WB_VERSION "Weft 0.1"

/* ---- clocks ------------------------------------------------------------ */

static inline uint64_t
wb_clock (clockid_t id)
{
  struct timespec ts;
  clock_gettime (id, &ts);
  return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* CLOCK_MONOTONIC, the clock Weft's deadlines use. */
static inline uint64_t wb_now_ns (void) { return wb_clock (CLOCK_MONOTONIC); }
static inline uint64_t wb_process_cpu_ns (void) { return wb_clock (CLOCK_PROCESS_CPUTIME_ID); }
static inline uint64_t wb_thread_cpu_ns (void) { return wb_clock (CLOCK_THREAD_CPUTIME_ID); }

/* Busy-waits about @ns nanoseconds: the gap that lets the other side of a
 * latency test fall asleep before the next request. */
static inline void
wb_spin_ns (uint64_t ns)
{
  uint64_t until = wb_now_ns () + ns;
  while (wb_now_ns () < until)
    __builtin_ia32_pause ();
}

/* sem_wait that survives EINTR. */
static inline void
wb_sem_wait (sem_t *s)
{
  while (sem_wait (s) != 0 && errno == EINTR)
    ;
}

/* ---- sizes ------------------------------------------------------------- */

static inline int
wb_quick (void)
{
  const char *q = getenv ("BENCH_QUICK");
  return q != NULL && q[0] != '\0' && q[0] != '0';
}

static inline long
wb_n (long full, long quick)
{
  return wb_quick () ? quick : full;
}

/* ---- output ------------------------------------------------------------ */

static inline void
wb_report (const char *section, const char *impl, const char *figure, double value,
           const char *unit, const char *note)
{
  printf ("RESULT|%s|%s|%s|%.6g|%s|%s\n", section, impl, figure, value, unit,
          note != NULL ? note : "");
  fflush (stdout);
}

/* ---- percentiles --------------------------------------------------------- */

static int
wb_cmp_i64 (const void *pa, const void *pb)
{
  int64_t a = *(const int64_t *) pa, b = *(const int64_t *) pb;
  return (a > b) - (a < b);
}

/* Nearest-rank percentile of a sorted array, @p in [0, 1]. */
static inline int64_t
wb_pct (const int64_t *sorted, size_t n, double p)
{
  if (n == 0)
    return 0;
  double pos = p * (double) (n - 1);
  size_t i = (size_t) (pos + 0.5);
  return sorted[i < n ? i : n - 1];
}

/* Sorts @v and prints "<prefix> median" and "<prefix> p99" in ns. */
static inline void
wb_report_latency (const char *section, const char *impl, const char *prefix, int64_t *v,
                   size_t n, const char *note)
{
  char fig[256];
  qsort (v, n, sizeof *v, wb_cmp_i64);
  snprintf (fig, sizeof fig, "%s median", prefix);
  wb_report (section, impl, fig, (double) wb_pct (v, n, 0.5), "ns", note);
  snprintf (fig, sizeof fig, "%s p99", prefix);
  wb_report (section, impl, fig, (double) wb_pct (v, n, 0.99), "ns", note);
}

/* ---- random numbers ------------------------------------------------------ */

/* splitmix64: deterministic deadlines, the same in every run. */
static inline uint64_t
wb_rand (uint64_t *state)
{
  uint64_t z = (*state += 0x9E3779B97F4A7C15u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

/* ---- misc ---------------------------------------------------------------- */

#define wb_die(...)                                                                      \
  do                                                                                     \
    {                                                                                    \
      fprintf (stderr, __VA_ARGS__);                                                     \
      fputc ('\n', stderr);                                                              \
      exit (1);                                                                          \
    }                                                                                    \
  while (0)
