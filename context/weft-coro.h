/* weft-coro.h: stackful coroutines inside contexts.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include "weft-types.h"

G_BEGIN_DECLS

#define WEFT_TYPE_CORO (weft_coro_get_type ())

/**
 * WeftCoro:
 *
 * A coroutine: a function with a stack of its own that runs inside a
 * #WeftContext, serialised with the context's other callbacks, and that
 * may suspend (sleep, wait for an fd, a condition, a mutex, a channel, or
 * another coroutine) without blocking the worker. It may resume on a
 * different worker than it suspended on.
 */
typedef struct _WeftCoro WeftCoro;

/**
 * WeftCoroCond:
 *
 * A condition variable for coroutines (weft_coro_cond_wait()).
 */
typedef struct _WeftCoroCond WeftCoroCond;

/**
 * WeftCoroMutex:
 *
 * A mutex for coroutines: waiting for it suspends only the coroutine, and
 * ownership passes to the waiters in arrival order.
 */
typedef struct _WeftCoroMutex WeftCoroMutex;

/**
 * WeftCoroChannel:
 *
 * A bounded first-in first-out queue of pointers between coroutines (of
 * any contexts): the producer–consumer queue.
 */
typedef struct _WeftCoroChannel WeftCoroChannel;

/**
 * WeftCoroFunc:
 * @user_data: the data given to weft_coro_spawn()
 *
 * A coroutine's body. It runs on the coroutine's own stack.
 *
 * Returns: (nullable) (transfer full): the coroutine's result, handed to
 *   weft_coro_join()
 */
typedef gpointer (*WeftCoroFunc) (gpointer user_data);

/**
 * WEFT_CORO_DEFAULT_STACK:
 *
 * The stack size weft_coro_spawn() uses for 0: 64 KiB, plus a guard page.
 */
#define WEFT_CORO_DEFAULT_STACK (64 * 1024)

WEFT_AVAILABLE_IN_ALL
GType weft_coro_get_type (void) G_GNUC_CONST;

WEFT_AVAILABLE_IN_ALL
WeftCoro *weft_coro_spawn (WeftContext *ctx, WeftCoroFunc func, gpointer user_data,
                           GDestroyNotify notify, gsize stack_size);
WEFT_AVAILABLE_IN_ALL
WeftCoro *weft_coro_ref (WeftCoro *self);
WEFT_AVAILABLE_IN_ALL
void weft_coro_unref (WeftCoro *self);
WEFT_AVAILABLE_IN_ALL
WeftCoro *weft_coro_self (void);
WEFT_AVAILABLE_IN_ALL
WeftContext *weft_coro_get_context (WeftCoro *self);
WEFT_AVAILABLE_IN_ALL
gboolean weft_coro_is_done (WeftCoro *self);
WEFT_AVAILABLE_IN_ALL
void weft_coro_interrupt (WeftCoro *self);
WEFT_AVAILABLE_IN_ALL
gint weft_coro_join (WeftCoro *self, gpointer *retval, gint timeout_ms);

WEFT_AVAILABLE_IN_ALL
gint weft_coro_yield (void);
WEFT_AVAILABLE_IN_ALL
gint weft_coro_sleep (guint ms);
WEFT_AVAILABLE_IN_ALL
gint weft_coro_wait_fd (gint fd, GIOCondition events, gint timeout_ms, GIOCondition *revents);
WEFT_AVAILABLE_IN_ALL
gssize weft_coro_read (gint fd, guint8 *buf, gsize len, gint timeout_ms);
WEFT_AVAILABLE_IN_ALL
gssize weft_coro_write_all (gint fd, const guint8 *buf, gsize len, gint timeout_ms);
WEFT_AVAILABLE_IN_ALL
gint weft_coro_accept (gint fd, gint timeout_ms);
WEFT_AVAILABLE_IN_ALL
gint weft_coro_connect (gint fd, gconstpointer addr, gsize addr_len, gint timeout_ms);

WEFT_AVAILABLE_IN_ALL
gint *weft_coro_errno_location (void);

WEFT_AVAILABLE_IN_ALL
void weft_coro_set_local (gconstpointer key, gpointer value, GDestroyNotify destroy);
WEFT_AVAILABLE_IN_ALL
gpointer weft_coro_get_local (gconstpointer key);

WEFT_AVAILABLE_IN_ALL
WeftCoroMutex *weft_coro_mutex_new (void);
WEFT_AVAILABLE_IN_ALL
GType weft_coro_mutex_get_type (void) G_GNUC_CONST;
WEFT_AVAILABLE_IN_ALL
WeftCoroMutex *weft_coro_mutex_ref (WeftCoroMutex *mutex);
WEFT_AVAILABLE_IN_ALL
void weft_coro_mutex_unref (WeftCoroMutex *mutex);
WEFT_AVAILABLE_IN_ALL
gint weft_coro_mutex_lock (WeftCoroMutex *mutex);
WEFT_AVAILABLE_IN_ALL
gboolean weft_coro_mutex_trylock (WeftCoroMutex *mutex);
WEFT_AVAILABLE_IN_ALL
void weft_coro_mutex_unlock (WeftCoroMutex *mutex);

WEFT_AVAILABLE_IN_ALL
WeftCoroCond *weft_coro_cond_new (void);
WEFT_AVAILABLE_IN_ALL
GType weft_coro_cond_get_type (void) G_GNUC_CONST;
WEFT_AVAILABLE_IN_ALL
WeftCoroCond *weft_coro_cond_ref (WeftCoroCond *cond);
WEFT_AVAILABLE_IN_ALL
void weft_coro_cond_unref (WeftCoroCond *cond);
WEFT_AVAILABLE_IN_ALL
gint weft_coro_cond_wait (WeftCoroCond *cond, WeftCoroMutex *mutex, gint timeout_ms);
WEFT_AVAILABLE_IN_ALL
void weft_coro_cond_signal (WeftCoroCond *cond);
WEFT_AVAILABLE_IN_ALL
void weft_coro_cond_broadcast (WeftCoroCond *cond);

WEFT_AVAILABLE_IN_ALL
WeftCoroChannel *weft_coro_channel_new (guint capacity, GDestroyNotify item_free);
WEFT_AVAILABLE_IN_ALL
GType weft_coro_channel_get_type (void) G_GNUC_CONST;
WEFT_AVAILABLE_IN_ALL
WeftCoroChannel *weft_coro_channel_ref (WeftCoroChannel *channel);
WEFT_AVAILABLE_IN_ALL
void weft_coro_channel_unref (WeftCoroChannel *channel);
WEFT_AVAILABLE_IN_ALL
gint weft_coro_channel_send (WeftCoroChannel *channel, gpointer item, gint timeout_ms);
WEFT_AVAILABLE_IN_ALL
gint weft_coro_channel_receive (WeftCoroChannel *channel, gpointer *item, gint timeout_ms);
WEFT_AVAILABLE_IN_ALL
void weft_coro_channel_close (WeftCoroChannel *channel);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftCoro, weft_coro_unref)

G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftCoroMutex, weft_coro_mutex_unref)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftCoroCond, weft_coro_cond_unref)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftCoroChannel, weft_coro_channel_unref)

G_END_DECLS
