/* weft-fd.c: fd sources. One-shot epoll registration, re-armed after the
 * callback returns, so one readiness is delivered once and a callback is
 * never re-entered for its own fd. Internal owners that drain their socket
 * may ask for edge-triggered registration instead (WEFT__IO_EDGE): a
 * readiness that arrives while the callback runs then queues the source
 * again (the context still runs one callback at a time), and no re-arm
 * syscall follows each callback.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <sys/epoll.h> /* EPOLLET: fd source interest is kept in EPOLL* bits */

#include "weft-context-private.h"

/* Epoll reports what happened, never how it was asked (its flag bits). */
G_STATIC_ASSERT (WEFT_FD_QUEUED == EPOLLONESHOT);

/* Called by the worker that got the readiness, with a reference from the
 * fd table lookup that now belongs to the queued node. One locked
 * instruction both adds the readiness and says whether the node already
 * waits in the inbox. */
void
weft__fd_source_ready (WeftFdSource *src, guint32 events, WeftContext **local)
{
  if (atomic_fetch_or (&src->revents, events | WEFT_FD_QUEUED) & WEFT_FD_QUEUED)
    {
      /* Already waiting in the inbox (modify_fd re-armed it early). */
      weft__source_unref (&src->base);
      return;
    }
  weft__context_push_ref (src->base.ctx, &src->node, FALSE, local);
}

/* Cache hints, after the fd table lookup (the reference makes the source
 * readable): the context the readiness goes to and its lock stripe, and
 * for a source in its context's tail the allocation around it, which the
 * callback touches next: a connection lies before its source and the
 * connection's data (an HttpConn, 88 bytes) after it. Past the end of the
 * allocation a hint is harmless. */
void
weft__fd_source_prefetch (WeftFdSource *src, WeftEngine *engine)
{
  const char *from = (const char *) src->base.ctx;
  const char *to = src->base.embedded ? (const char *) (src + 1) + 128
                                      : from + sizeof (WeftContext);
  /* Four lines a step: a connection spans about eight, and a step per
   * line cost as many instructions again as its hints. */
  const char *p = from;
  for (; to - p > 3 * 64; p += 4 * 64)
    {
      __builtin_prefetch (p, 1);
      __builtin_prefetch (p + 64, 1);
      __builtin_prefetch (p + 2 * 64, 1);
      __builtin_prefetch (p + 3 * 64, 1);
    }
  for (; p < to; p += 64)
    __builtin_prefetch (p, 1);
  __builtin_prefetch (to - 1, 1);
  __builtin_prefetch (weft__engine_ctx_lock (engine, src->base.ctx), 1);
}

gboolean
weft__fd_source_detach_unlocked (WeftFdSource *src)
{
  if (src->key != 0)
    {
      WeftEngine *engine = src->base.ctx->engine;
      /* Remove from epoll first, then retire the key: an event already in
       * a worker's hands then fails its generation check. */
      weft__poll_remove (engine->pfd, src->fd);
      weft__fdtable_clear (engine->fdtable, src->key);
      src->key = 0;
    }
  return TRUE; /* drop the registration reference */
}

static gboolean
fd_call (WeftSource *base, guint32 events)
{
  WeftFdSource *src = (WeftFdSource *) base;
  GIOCondition cond = weft__poll_condition_from_events (events);
  /* Only internal edge-triggered owners understand the RDHUP bit: an
   * edge for the peer's shutdown may have come with the data edge. */
  if (!src->base.edge)
    cond &= ~WEFT__IO_RDHUP;
  return ((WeftFdFunc) base->func) (src->fd, cond, base->user_data);
}

/* Re-arm under the lock: a concurrent remove cannot have let the fd be
 * closed and its number reused yet. */
/* Tells epoll the current interest; HOLDS: ctx->lock. An edge-triggered
 * source needs it only when the interest changed. */
static int
arm_unlocked (WeftFdSource *src)
{
  guint32 events = atomic_load_explicit (&src->events, memory_order_relaxed);
  if (src->base.edge && atomic_load_explicit (&src->armed, memory_order_relaxed) == events)
    return 0;
  atomic_store_explicit (&src->armed, events, memory_order_relaxed);
  gboolean edge = src->base.edge;
  return weft__poll_modify (src->base.ctx->engine->pfd, src->fd, events | (edge ? EPOLLET : 0),
                            src->key, !edge);
}

static void
fd_rearm_unlocked (WeftSource *base)
{
  WeftFdSource *src = (WeftFdSource *) base;
  int r = arm_unlocked (src);
  if (r < 0)
    g_warning ("fd %d: re-arming failed (%s); was it closed before its source was removed?",
               src->fd, g_strerror (-r));
}

/* Whether the callback's end must re-arm: always for one-shot; for an
 * edge-triggered source only when the interest changed (after most of
 * their callbacks it did not, and neither lock nor syscall follows). Read
 * without the lock, sequentially consistent: see set_fd_interest(). */
static gboolean
fd_rearm_due (WeftSource *base)
{
  WeftFdSource *src = (WeftFdSource *) base;
  return !src->base.edge || atomic_load (&src->armed) != atomic_load (&src->events);
}

void
weft__fd_source_dispatch (WeftFdSource *src, gboolean drop)
{
  /* The node leaves the inbox with what it collected: a readiness from
   * now on queues it again. */
  guint32 events = atomic_exchange (&src->revents, 0) & ~WEFT_FD_QUEUED;
  g_assert (events != 0);
  weft__source_dispatch_queued (&src->base, drop, fd_call, events, fd_rearm_due,
                                fd_rearm_unlocked, FALSE);
}

/* Never queued, so revents is not this readiness's: a readiness that comes
 * while the callback runs queues the node as usual and is delivered after
 * it. */
void
weft__fd_source_dispatch_direct (WeftFdSource *src, guint32 events, gboolean drop)
{
  g_assert (events != 0);
  weft__source_dispatch_queued (&src->base, drop, fd_call, events, fd_rearm_due,
                                fd_rearm_unlocked, TRUE);
}

static void
set_poll_error (GError **error, int fd, int err)
{
  WeftError code = WEFT_ERROR_FAILED;
  if (err == EEXIST)
    code = WEFT_ERROR_EXISTS;
  else if (err == EPERM || err == EBADF || err == EINVAL)
    code = WEFT_ERROR_INVALID;
  g_set_error (error, WEFT_ERROR, code, "cannot watch fd %d: %s", fd, g_strerror (err));
}

/**
 * weft_context_add_fd:
 * @self: a context
 * @fd: a file descriptor that epoll can watch (socket, pipe, eventfd, ...)
 * @events: what to wait for: %G_IO_IN, %G_IO_OUT, %G_IO_PRI (errors and
 *   hang-ups are always reported)
 * @func: (scope notified) (closure user_data) (destroy notify): called on
 *   @self when @fd is ready
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data once the source is gone
 * @error: return location for a #GError
 *
 * Watches @fd. Readiness is one-shot: after @func returns
 * %G_SOURCE_CONTINUE the fd is re-armed, so @func is never re-entered and a
 * readiness is never delivered twice. Safe from any thread. Weft never
 * closes @fd: remove the source (or destroy the context) before closing it.
 *
 * Returns: the source id (> 0), or 0 with @error set: %WEFT_ERROR_EXISTS
 *   if @fd is already watched by this engine, %WEFT_ERROR_INVALID if it
 *   cannot be polled (a regular file) or is not open, %WEFT_ERROR_CLOSED
 *   if @self is destroyed. On failure @notify has been called.
 */
guint
weft_context_add_fd (WeftContext *self, gint fd, GIOCondition events, WeftFdFunc func,
                     gpointer user_data, GDestroyNotify notify, GError **error)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (fd >= 0, 0);
  g_return_val_if_fail ((events & (G_IO_IN | G_IO_OUT | G_IO_PRI)) != 0, 0);
  g_return_val_if_fail (func != NULL, 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);
  return weft__context_add_fd (self, fd, events, func, user_data, notify, error);
}

/* weft_context_add_fd() without the checks: @events may be 0 or hold
 * WEFT__IO_RDHUP (see weft__context_set_fd_interest()) and WEFT__IO_EDGE. */
guint
weft__context_add_fd (WeftContext *self, gint fd, GIOCondition events, WeftFdFunc func,
                      gpointer user_data, GDestroyNotify notify, GError **error)
{
  return weft__context_add_fd_in (self, NULL, fd, events, func, user_data, notify, error);
}

guint
weft__context_add_fd_in (WeftContext *self, WeftFdSource *storage, gint fd, GIOCondition events,
                         WeftFdFunc func, gpointer user_data, GDestroyNotify notify,
                         GError **error)
{
  WeftFdSource *src = storage != NULL ? storage : g_new0 (WeftFdSource, 1);
  src->base.embedded = storage != NULL;
  atomic_store_explicit (&src->base.rstate, 0, memory_order_relaxed);
  src->base.kind = WEFT_SOURCE_FD;
  src->base.func = (gpointer) func;
  src->base.user_data = user_data;
  src->base.notify = notify;
  src->node.kind = WEFT_NODE_FD;
  src->base.refs = 1; /* the registration */
  src->fd = fd;
  src->base.edge = (events & WEFT__IO_EDGE) != 0;
  guint32 interest = weft__poll_events_from_condition (events & ~WEFT__IO_EDGE);
  atomic_store_explicit (&src->events, interest, memory_order_relaxed);
  atomic_store_explicit (&src->armed, interest, memory_order_relaxed);

  weft__lock_acquire (weft__context_lock (self));
  guint id = weft__context_add_source_unlocked (self, &src->base);
  if (id == 0)
    {
      weft__lock_release (weft__context_lock (self));
      g_set_error_literal (error, WEFT_ERROR, WEFT_ERROR_CLOSED, "the context is destroyed");
      if (notify != NULL)
        notify (user_data);
      if (storage == NULL)
        g_free (src);
      return 0;
    }
  WeftEngine *engine = self->engine;
  src->key = weft__fdtable_insert (engine->fdtable, src);
  int r = src->key ? weft__poll_add (engine->pfd, fd, interest | (src->base.edge ? EPOLLET : 0),
                                     src->key, !src->base.edge)
                   : -EMFILE;
  if (r < 0)
    {
      if (src->key != 0)
        weft__fdtable_clear (engine->fdtable, src->key);
      src->key = 0;
      weft__context_drop_idmap_unlocked (self, &src->base);
      weft__lock_release (weft__context_lock (self));
      set_poll_error (error, fd, -r);
      weft__source_unref (&src->base);
      return 0;
    }
  weft__lock_release (weft__context_lock (self));
  return id;
}

/**
 * weft_context_modify_fd:
 * @self: a context
 * @id: an fd source id from weft_context_add_fd()
 * @events: the new interest (%G_IO_IN, %G_IO_OUT, %G_IO_PRI)
 * @error: return location for a #GError
 *
 * Changes what an fd source waits for, for example adding %G_IO_OUT while
 * output is queued. Takes effect at once, or when the running callback
 * returns if called from it.
 *
 * Returns: %TRUE on success; %FALSE with %WEFT_ERROR_INVALID if @id is not
 *   an fd source of @self.
 */
gboolean
weft_context_modify_fd (WeftContext *self, guint id, GIOCondition events, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail ((events & (G_IO_IN | G_IO_OUT | G_IO_PRI)) != 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return weft__context_set_fd_interest (self, id, events, error);
}

/* weft_context_modify_fd() without the checks, and @events may be 0: the fd
 * stays registered but only errors and hang-ups are reported (a connection
 * that neither reads nor has output queued). */
gboolean
weft__context_set_fd_interest (WeftContext *self, guint id, GIOCondition events, GError **error)
{
  int r = 0;
  weft__lock_acquire (weft__context_lock (self));
  WeftSource *base = weft__idmap_lookup (&self->ids, id);
  if (base == NULL || base->kind != WEFT_SOURCE_FD)
    {
      weft__lock_release (weft__context_lock (self));
      g_set_error (error, WEFT_ERROR, WEFT_ERROR_INVALID, "no fd source with id %u", id);
      return FALSE;
    }
  WeftFdSource *src = (WeftFdSource *) base;
  int fd = src->fd;
  /* Store, then look: a dispatch clears RUNNING, then looks at the
   * interest (fd_rearm_due()). One of the two sees the other; if both do,
   * the second arm finds nothing to change. */
  atomic_store (&src->events, weft__poll_events_from_condition (events));
  if (!(atomic_load (&base->rstate) & WEFT_SOURCE_RUNNING))
    r = arm_unlocked (src);
  weft__lock_release (weft__context_lock (self));
  if (r < 0)
    {
      set_poll_error (error, fd, -r);
      return FALSE;
    }
  return TRUE;
}
