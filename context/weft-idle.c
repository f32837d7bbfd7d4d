/* weft-idle.c: idle handlers. They run when a run of the context has
 * emptied its queue, and a handler that continues runs again only after
 * the context has run something else: an idle never spins a worker and
 * never keeps the engine awake.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-context-private.h"

gboolean
weft__idle_detach_unlocked (WeftIdleSource *idle)
{
  WeftContextSched *sched = atomic_load_explicit (&idle->base.ctx->sched, memory_order_relaxed);
  if (idle->prev != NULL)
    idle->prev->next = idle->next;
  else
    sched->idles = idle->next;
  if (idle->next != NULL)
    idle->next->prev = idle->prev;
  else
    sched->idles_tail = idle->prev;
  idle->prev = idle->next = NULL;
  return TRUE;
}

gboolean
weft__idles_dispatch (WeftContext *ctx)
{
  GSList *dead = NULL;
  gboolean ran = FALSE;

  /* No idle handler was ever added: nothing to look at (and no lock). A
   * handler added by another thread pushes a node after making sched, and
   * this runs after the pop of a node. */
  WeftContextSched *sched = atomic_load_explicit (&ctx->sched, memory_order_acquire);
  if (sched == NULL)
    return FALSE;
  WeftLock *lock = weft__context_lock (ctx);
  weft__lock_acquire (lock);
  /* Handlers added during this pass are appended and run in it too. */
  for (WeftIdleSource *idle = sched->idles; idle != NULL;)
    {
      weft__source_flag_locked (&idle->base, WEFT_SOURCE_RUNNING, TRUE);
      ran = TRUE;
      weft__lock_release (lock);

      weft__worker_count_job ();
      weft__cb_time_set (WEFT_CB_TIME_UNSET); /* each handler is a callback of its own */
      gboolean keep = ((GSourceFunc) idle->base.func) (idle->base.user_data);

      weft__lock_acquire (lock);
      weft__source_flag_locked (&idle->base, WEFT_SOURCE_RUNNING, FALSE);
      WeftIdleSource *next = idle->next; /* read under the lock, after the call */
      if (!weft__source_is_removed (&idle->base) && !keep)
        weft__context_drop_idmap_unlocked (ctx, &idle->base);
      if (weft__source_is_removed (&idle->base))
        {
          /* Freed after the pass: dropping the lock here could let @next
           * be removed and freed under us. */
          weft__idle_detach_unlocked (idle);
          dead = g_slist_prepend (dead, idle);
        }
      idle = next;
    }
  weft__lock_release (lock);
  for (GSList *l = dead; l != NULL; l = l->next)
    weft__source_finalize (l->data);
  g_slist_free (dead);
  return ran;
}

/**
 * weft_context_add_idle:
 * @self: a context
 * @func: (scope notified) (closure user_data) (destroy notify): called on
 *   @self when its queue is empty; return %G_SOURCE_CONTINUE to be called
 *   again after the context next runs something else
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data once the source is gone
 *
 * Adds an idle handler. Unlike a GLib idle it never makes the context busy:
 * it runs once each time the context's queue runs dry. Safe from any
 * thread.
 *
 * Returns: the source id (> 0), or 0 if @self is destroyed (then @notify
 *   has been called)
 */
guint
weft_context_add_idle (WeftContext *self, GSourceFunc func, gpointer user_data,
                       GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (func != NULL, 0);

  WeftIdleSource *idle = g_new0 (WeftIdleSource, 1);
  idle->base.kind = WEFT_SOURCE_IDLE;
  idle->base.func = (gpointer) func;
  idle->base.user_data = user_data;
  idle->base.notify = notify;

  WeftLock *lock = weft__context_lock (self);
  weft__lock_acquire (lock);
  guint id = weft__context_add_source_unlocked (self, &idle->base);
  if (id == 0)
    {
      weft__lock_release (lock);
      if (notify != NULL)
        notify (user_data);
      g_free (idle);
      return 0;
    }
  WeftContextSched *sched = weft__context_sched_unlocked (self);
  idle->prev = sched->idles_tail;
  if (sched->idles_tail != NULL)
    sched->idles_tail->next = idle;
  else
    sched->idles = idle;
  sched->idles_tail = idle;
  weft__lock_release (lock);

  /* Make the context run once so the new handler gets its first turn. */
  if (!atomic_exchange (&sched->idle_queued, 1))
    weft__context_push (self, &sched->idle_node, FALSE, NULL);
  return id;
}
