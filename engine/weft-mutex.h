/* weft-mutex.h: the library's locks are plain pthread mutexes, not WeftMutex:
 * GLib's GMutex is futex-based inside an uninstrumented libglib, so
 * ThreadSanitizer cannot see its happens-before edges, and the TSan run of
 * the suite would drown in false reports.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <pthread.h>
#include <time.h>
#include <glib.h>

typedef pthread_mutex_t WeftMutex;
typedef pthread_cond_t WeftCond;

static inline void
weft__mutex_init (WeftMutex *m)
{
  pthread_mutex_init (m, NULL);
}

static inline void
weft__mutex_clear (WeftMutex *m)
{
  pthread_mutex_destroy (m);
}

static inline void
weft__mutex_lock (WeftMutex *m)
{
  pthread_mutex_lock (m);
}

static inline void
weft__mutex_unlock (WeftMutex *m)
{
  pthread_mutex_unlock (m);
}

static inline void
weft__cond_init (WeftCond *c)
{
  pthread_condattr_t attr;
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (c, &attr);
  pthread_condattr_destroy (&attr);
}

static inline void
weft__cond_clear (WeftCond *c)
{
  pthread_cond_destroy (c);
}

static inline void
weft__cond_broadcast (WeftCond *c)
{
  pthread_cond_broadcast (c);
}

/* @end_us: g_get_monotonic_time() deadline (CLOCK_MONOTONIC, microseconds). */
static inline void
weft__cond_wait_until (WeftCond *c, WeftMutex *m, gint64 end_us)
{
  struct timespec ts = { end_us / G_USEC_PER_SEC, (end_us % G_USEC_PER_SEC) * 1000 };
  pthread_cond_timedwait (c, m, &ts);
}
