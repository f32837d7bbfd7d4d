/* weft-signal.c: signal subscriptions of a context.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <signal.h>

#include "weft-context-private.h"

/* HOLDS: engine->signal_lock, so an unsubscribe cannot race it. */
void
weft__signal_source_raise (WeftSignalSource *src, WeftContext **local)
{
  if (atomic_exchange (&src->base.queued, 1))
    return; /* coalesced with the delivery already queued */
  weft__source_ref (&src->base);
  weft__context_push_ref (src->base.ctx, &src->node, FALSE, local);
}

gboolean
weft__signal_source_detach_unlocked (WeftSignalSource *src)
{
  weft__signals_unsubscribe (src->base.ctx->engine, src);
  return TRUE;
}

static gboolean
signal_call (WeftSource *base, guint32 unused)
{
  return ((WeftSignalFunc) base->func) (((WeftSignalSource *) base)->signum, base->user_data);
}

void
weft__signal_source_dispatch (WeftSignalSource *src, gboolean drop)
{
  atomic_store (&src->base.queued, 0);
  weft__source_dispatch_queued (&src->base, drop, signal_call, 0, NULL, NULL, FALSE);
}

/**
 * weft_context_add_signal:
 * @self: a context
 * @signum: the signal, for example `SIGTERM` or `SIGHUP`
 * @func: (scope notified) (closure user_data) (destroy notify): called on
 *   @self after @signum arrived (several arrivals between two calls are
 *   reported once)
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data once the source is gone
 * @error: return location for a #GError
 *
 * Delivers a signal as a callback, through the engine's signalfd. The
 * signal is blocked in the calling thread (the engine's workers block
 * every asynchronous signal); block it in your other threads too, or
 * subscribe before creating them, or the kernel may deliver it to one of
 * them instead. Processes forked from a thread that blocks it inherit the
 * block. Several contexts of one engine may subscribe to the same signal:
 * each gets a callback. One engine at a time watches a signal (an arrival
 * is pending once, and one read takes it): a context of another engine
 * gets %WEFT_ERROR_EXISTS until the last subscription of the first is
 * gone. The signal stays blocked after the source is removed; arrivals
 * while nobody watches it stay pending, and the next subscriber gets them.
 *
 * Only a signal sent to the process arrives: kill (getpid (), @signum),
 * or kill() from another process. One sent to a single thread (raise(),
 * pthread_kill(), tgkill()) is read only if that thread happens to read
 * the signalfd: raise() from an application thread is never delivered,
 * and from a callback only sometimes.
 *
 * Returns: the source id (> 0), or 0 with @error set:
 *   %WEFT_ERROR_INVALID for a signal that cannot be caught or is
 *   synchronous (`SIGKILL`, `SIGSTOP`, `SIGSEGV`, ...) or reserved by the C
 *   library (32 up to `SIGRTMIN`), %WEFT_ERROR_EXISTS if @self or a context
 *   of another engine already watches @signum, %WEFT_ERROR_CLOSED if @self is
 *   destroyed. On failure @notify has been called.
 */
guint
weft_context_add_signal (WeftContext *self, gint signum, WeftSignalFunc func,
                         gpointer user_data, GDestroyNotify notify, GError **error)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (func != NULL, 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);

  if (signum <= 0 || signum >= 65 || signum == SIGKILL || signum == SIGSTOP ||
      signum == SIGSEGV || signum == SIGBUS || signum == SIGFPE || signum == SIGILL ||
      signum == SIGTRAP || signum == SIGABRT ||
      /* 32 up to SIGRTMIN are the C library's own (thread cancellation,
       * setuid broadcast): pthread_sigmask() silently leaves them
       * unblocked, so one sent to the process never reaches the signalfd
       * and may take its default action (32 terminates). */
      (signum >= 32 && signum < SIGRTMIN))
    {
      g_set_error (error, WEFT_ERROR, WEFT_ERROR_INVALID, "signal %d cannot be watched", signum);
      if (notify != NULL)
        notify (user_data);
      return 0;
    }

  WeftSignalSource *src = g_new0 (WeftSignalSource, 1);
  src->base.kind = WEFT_SOURCE_SIGNAL;
  src->base.func = (gpointer) func;
  src->base.user_data = user_data;
  src->base.notify = notify;
  src->node.kind = WEFT_NODE_SIGNAL;
  src->base.refs = 1;
  src->signum = signum;

  weft__lock_acquire (weft__context_lock (self));
  guint id = weft__context_add_source_unlocked (self, &src->base);
  if (id == 0)
    {
      weft__lock_release (weft__context_lock (self));
      g_set_error_literal (error, WEFT_ERROR, WEFT_ERROR_CLOSED, "the context is destroyed");
      if (notify != NULL)
        notify (user_data);
      g_free (src);
      return 0;
    }
  if (!weft__signals_subscribe (self->engine, src, error))
    {
      weft__context_drop_idmap_unlocked (self, &src->base);
      weft__lock_release (weft__context_lock (self));
      weft__source_unref (&src->base);
      return 0;
    }
  weft__lock_release (weft__context_lock (self));
  return id;
}
