/* weft-source.c: what every kind of source shares: ids, removal, the
 * destroy notify.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-context-private.h"

guint
weft__context_add_source_unlocked (WeftContext *self, WeftSource *source)
{
  if (atomic_load (&self->state) & WEFT_CTX_CLOSED)
    return 0;
  /* Ids count up, skip 0, and after a wrap skip ids still in use. */
  if (G_UNLIKELY (++self->last_id == 0))
    {
      self->ids_wrapped = TRUE;
      self->last_id = 1;
    }
  if (G_UNLIKELY (self->ids_wrapped))
    while (weft__idmap_lookup (&self->ids, self->last_id) != NULL)
      if (++self->last_id == 0)
        self->last_id = 1;
  source->id = self->last_id;
  source->ctx = self;
  weft__idmap_insert (&self->ids, source->id, source);
  /* Fd and signal sources are reached from other threads (the fd table,
   * the signal table) without the context's lock, so they keep the context
   * alive. Timeouts and idles are only reached under the lock, and closing
   * the context frees them first. */
  if (source->kind == WEFT_SOURCE_FD || source->kind == WEFT_SOURCE_SIGNAL)
    weft__context_internal_ref (self);
  return source->id;
}

void
weft__context_drop_idmap_unlocked (WeftContext *self, WeftSource *source)
{
  weft__idmap_remove (&self->ids, source->id);
  weft__source_mark_removed (source);
}

void
weft__source_call_notify (WeftSource *source)
{
  if (source->notify != NULL)
    source->notify (source->user_data);
}

void
weft__source_ref (WeftSource *source)
{
  g_atomic_int_inc (&source->refs);
}

void
weft__source_unref (WeftSource *source)
{
  if (!g_atomic_int_dec_and_test (&source->refs))
    return;
  WeftContext *ctx = source->ctx;
  gboolean embedded = source->embedded;
  weft__source_call_notify (source);
  if (!embedded)
    g_free (source);
  /* Taken in weft__context_add_source_unlocked; an embedded source's
   * memory may go with it. */
  weft__context_internal_unref (ctx);
}

void
weft__source_dispatch_end_locked (WeftSource *src, gboolean keep,
                                  void (*rearm_unlocked) (WeftSource *))
{
  WeftContext *ctx = src->ctx;
  WeftLock *lock = weft__context_lock (ctx);
  gboolean finalize = FALSE;

  weft__lock_acquire (lock);
  /* (Removal sets REMOVED under this lock: nothing changes the word now.) */
  weft__source_flag_locked (src, WEFT_SOURCE_RUNNING, FALSE);
  if (!weft__source_is_removed (src) && !keep)
    weft__context_drop_idmap_unlocked (ctx, src);
  if (weft__source_is_removed (src))
    finalize = weft__source_detach_unlocked (src);
  else if (rearm_unlocked != NULL)
    rearm_unlocked (src);
  weft__lock_release (lock);
  if (finalize)
    weft__source_finalize (src);
}

gboolean
weft__source_detach_unlocked (WeftSource *source)
{
  switch (source->kind)
    {
    case WEFT_SOURCE_FD:
      return weft__fd_source_detach_unlocked ((WeftFdSource *) source);
    case WEFT_SOURCE_TIMEOUT:
      return weft__timeout_detach_unlocked ((WeftTimeoutSource *) source);
    case WEFT_SOURCE_IDLE:
      return weft__idle_detach_unlocked ((WeftIdleSource *) source);
    case WEFT_SOURCE_SIGNAL:
      return weft__signal_source_detach_unlocked ((WeftSignalSource *) source);
    }
  g_assert_not_reached ();
}

void
weft__source_unwatch_running_unlocked (WeftSource *source)
{
  /* The caller may close the fd as soon as the remove returns, and the
   * number may be reused and watched by another source before the
   * callback returns: an EPOLL_CTL_DEL by number then would drop that
   * one's registration. (Detaching twice is harmless: the key is 0.) */
  if (source->kind == WEFT_SOURCE_FD)
    weft__fd_source_detach_unlocked ((WeftFdSource *) source);
}

void
weft__source_finalize (WeftSource *source)
{
  switch (source->kind)
    {
    case WEFT_SOURCE_FD:
    case WEFT_SOURCE_SIGNAL:
      /* Removed, detached and not running: its callback cannot start
       * again (a readiness node still in the inbox sees removed and is
       * dropped), so the notify runs now, as weft_context_remove()
       * promises, while the memory waits for the last reference (that
       * node, an fd table lookup in flight). The unref that frees it
       * happens after this store, through the atomic count. */
      weft__source_call_notify (source);
      source->notify = NULL;
      weft__source_unref (source);
      return;
    case WEFT_SOURCE_TIMEOUT:
      weft__source_call_notify (source);
      weft__cache_free (WEFT_CACHE_TIMEOUT, source);
      return;
    case WEFT_SOURCE_IDLE:
      weft__source_call_notify (source);
      g_free (source);
      return;
    }
}

/**
 * weft_context_remove:
 * @self: a context
 * @id: a source id from one of the weft_context_add_*() functions
 *
 * Removes a source. Safe from any thread, and from any callback of @self,
 * including the callback of the source being removed. Once this returns,
 * the source's callback will not start again. A call a worker had already
 * begun goes on (from another thread, that may be a call about to enter
 * the callback: the worker marks the source running just before), and
 * this does not wait for it. Its destroy notify runs exactly once: here,
 * or on the worker when that call returns; free what the callback uses
 * there.
 *
 * Returns: %TRUE if @id named a source of @self, %FALSE if it was already
 *   removed (or never existed)
 */
gboolean
weft_context_remove (WeftContext *self, guint id)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (id > 0, FALSE);

  gboolean finalize = FALSE;
  WeftLock *lock = weft__context_lock (self);
  weft__lock_acquire (lock);
  WeftSource *src = weft__idmap_remove (&self->ids, id);
  if (src != NULL)
    {
      if (!weft__source_mark_removed (src))
        finalize = weft__source_detach_unlocked (src);
      else
        weft__source_unwatch_running_unlocked (src);
    }
  weft__lock_release (lock);
  if (finalize)
    weft__source_finalize (src);
  return src != NULL;
}
