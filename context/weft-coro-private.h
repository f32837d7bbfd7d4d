/* weft-coro-private.h: coroutine internals shared by weft-coro.c (life,
 * suspension, I/O) and weft-coro-sync.c (mutex, condition, channel).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "weft-context.h"
#include "weft-coro.h"
#include "weft-coro-switch.h"
#include "weft-sanitizers.h"

#include <pthread.h>
#include <stdatomic.h>

/* Why a suspended coroutine was resumed. */
enum {
  WEFT_CORO_WAKE_EVENT = 1,    /* what it waited for happened */
  WEFT_CORO_WAKE_TIMEOUT = 2,
  WEFT_CORO_WAKE_INTERRUPT = 3,
};

/* A coroutine waiting in a mutex's, condition's or channel's queue; lives
 * on the waiter's stack, linked under the object's lock. */
typedef struct _WeftCoroWaiter WeftCoroWaiter;
struct _WeftCoroWaiter {
  WeftCoro *coro;
  WeftCoroWaiter *prev, *next;
  gboolean queued;     /* HOLDS: the object's lock */
  /* (nullable) A waker chose this waiter (handed it the mutex, a signal,
   * an item or room) and its coroutine was then abandoned with its
   * context before it could take that: hands it on to the next waiter.
   * Called under the object's lock with @obj. */
  void (*pass_on) (gpointer obj, WeftCoroWaiter *w);
  gpointer obj;
};

typedef struct {
  WeftCoroWaiter *head, *tail;
} WeftCoroWaitQueue;

void weft__coro_queue_push (WeftCoroWaitQueue *q, WeftCoroWaiter *w);
void weft__coro_queue_remove (WeftCoroWaitQueue *q, WeftCoroWaiter *w);
/* Pops waiters until one is woken (a waiter already woken by its timeout
 * or an interrupt is skipped); FALSE if none was. HOLDS: the lock. If
 * @chosen is not NULL, each candidate's coroutine is stored there before
 * its wake (NULL when none is left): a wake whose resume is refused at
 * once abandons the coroutine inside it, and its pass-on must already see
 * it chosen (a mutex's owner). After a wake that took, the waiter (on the
 * woken coroutine's stack) may be gone: it is not touched again. */
gboolean weft__coro_queue_wake_one (WeftCoroWaitQueue *q, WeftCoro **chosen);

/* The running coroutine (never cached across a switch), or NULL. */
WeftCoro *weft__coro_current (void);
/* Marks @c as about to wait: from now on a wake counts. Returns FALSE
 * (and consumes it) if an interrupt is pending. */
gboolean weft__coro_prepare_wait (WeftCoro *c);
/* Suspends @c, prepared, until a wake, @timeout_ms (< 0: none) or an
 * interrupt; returns the WEFT_CORO_WAKE_ reason. */
gint weft__coro_wait (WeftCoro *c, gint timeout_ms);
/* 0 for WEFT_CORO_WAKE_EVENT, -ETIMEDOUT, or -EINTR for an interrupt. */
gint weft__coro_reason_to_errno (gint reason);
/* Wakes @c if it is waiting (any thread); FALSE if it was not. */
gboolean weft__coro_wake (WeftCoro *c, gint reason);

/* Records the queue @c waits in (under its lock), so that abandoning @c
 * can take its node out; NULLs when the wait is over. */
void weft__coro_set_wait_queue (WeftCoro *c, pthread_mutex_t *lock, WeftCoroWaitQueue *q,
                                WeftCoroWaiter *w);
/* Wait-queue locks are recursive: abandoning a coroutine may happen under
 * a waker that holds the lock. */
void weft__coro_init_lock (pthread_mutex_t *lock);

/* Stacks: mmap'ed, a guard page below, cached. */
typedef struct _WeftCoroStack WeftCoroStack;
struct _WeftCoroStack {
  void *lo;          /* usable: [lo, lo + size) */
  gsize size;
  void *map;         /* with the guard page */
  gsize map_size;
  guint vg_id;       /* Valgrind's stack id */
  WeftCoroStack *next;
};

WeftCoroStack *weft__coro_stack_get (gsize size);
void weft__coro_stack_put (WeftCoroStack *stack);

/* WeftCoro objects: cached per thread like stacks (uninitialised memory of
 * @size bytes; the size is always the same). */
gpointer weft__coro_object_get (gsize size);
void weft__coro_object_put (gpointer object);

/* Like weft_coro_spawn(), but from a callback of @ctx (outside any
 * coroutine) the body starts at once, on this worker, and runs until it
 * first waits or ends, before this returns; elsewhere it is posted
 * as weft_coro_spawn() does. For owners that know the caller's stack may
 * be entered (the HTTP server's coroutine handlers): a public spawn never
 * runs the body inline. No reference is returned (the coroutine may be
 * gone already): TRUE if it started or was posted; FALSE if no stack
 * could be mapped or @ctx is closed (@notify has run then). Started here,
 * it holds @ctx's memory (an internal reference) once it may outlive the
 * callback, not @ctx open: the caller owns the context's life. */
gboolean weft__coro_spawn_here (WeftContext *ctx, WeftCoroFunc func, gpointer user_data,
                                GDestroyNotify notify, gsize stack_size);

/* From the running coroutine @c, between two pieces of work of its own
 * (the HTTP server's requests): TRUE if it may take on more in the
 * callback that started it, as a coroutine started anew would; then its
 * coroutine-locals are dropped and a pending interrupt forgotten. FALSE
 * if it was resumed by a job since (it is no longer inside that callback)
 * or someone else holds a reference to it (a joiner would wait past the
 * end of what it ran). */
gboolean weft__coro_renew (WeftCoro *c);
/* Replaces the data the coroutine's notify gets once it ends (or is
 * abandoned): for a body that moves on to other work. */
void weft__coro_set_data (WeftCoro *c, gpointer user_data);

/* What is left of @timeout_ms (-1: no limit) counted from @start_us (a
 * g_get_monotonic_time() reading): a waiter woken in vain (another took
 * the room, the item or the bytes first) waits again only for the rest,
 * not for a whole new timeout. */
static inline gint
weft__coro_left_ms (gint timeout_ms, gint64 start_us)
{
  if (timeout_ms < 0)
    return -1;
  gint64 left = start_us + (gint64) timeout_ms * 1000 - g_get_monotonic_time ();
  return left <= 0 ? 0 : (gint) MIN ((left + 999) / 1000, (gint64) G_MAXINT);
}
