/* weft-join.c: fork-join points. A counter of tasks and a continuation that
 * runs after the last one ends: on the finishing thread (eager) or posted
 * to a context (lazy).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-context-private.h"

struct _WeftJoin {
  gint ref_count;          /* (atomic) */
  gint pending;            /* (atomic) tasks not yet done */
  WeftContext *context;    /* (owned) (nullable): lazy target */
  WeftJobFunc func;
  gpointer user_data;
  GDestroyNotify notify;
  atomic_int fired;
};

/**
 * WeftJoin:
 *
 * A fork-join point: counts pending tasks and runs a continuation after the
 * last one ends, either on the thread that ended it or posted to a
 * #WeftContext. Reference-counted and thread-safe.
 */
G_DEFINE_BOXED_TYPE (WeftJoin, weft_join, weft_join_ref, weft_join_unref)

/**
 * weft_join_new:
 * @n_tasks: how many tasks the join waits for; more can be added with
 *   weft_join_add() while some are pending
 * @context: (nullable): where to post the continuation (lazy), or %NULL to
 *   run it on the thread that ends the last task (eager)
 * @continuation: (scope notified) (closure user_data) (destroy notify):
 *   what to run after the last task; it may drop the last reference to
 *   the join
 * @user_data: data for @continuation
 * @notify: (nullable): called with @user_data after @continuation ran, or
 *   when the join is freed without completing
 *
 * Creates a join point. The continuation runs exactly once, when the count
 * of pending tasks drops to zero through weft_join_done(); a lazy one also
 * during weft_engine_shutdown(), from whatever thread the last task ends
 * on, but not once @context is destroyed (then only @notify runs).
 *
 * Returns: (transfer full): a new join point
 */
WeftJoin *
weft_join_new (guint n_tasks, WeftContext *context, WeftJobFunc continuation,
               gpointer user_data, GDestroyNotify notify)
{
  g_return_val_if_fail (continuation != NULL, NULL);
  g_return_val_if_fail (n_tasks <= G_MAXINT, NULL);

  WeftJoin *self = g_new0 (WeftJoin, 1);
  self->ref_count = 1;
  self->pending = (gint) n_tasks;
  self->context = context ? weft_context_ref (context) : NULL;
  self->func = continuation;
  self->user_data = user_data;
  self->notify = notify;
  return self;
}

/**
 * weft_join_ref:
 * @self: a join point
 *
 * Takes a reference on @self; drop it with weft_join_unref(). Safe from
 * any thread.
 *
 * Returns: (transfer full): @self
 */
WeftJoin *
weft_join_ref (WeftJoin *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_atomic_int_inc (&self->ref_count);
  return self;
}

/**
 * weft_join_unref:
 * @self: (nullable) (transfer full): a join point
 *
 * Drops a reference. Freeing a join whose continuation never ran calls its
 * notify without running it.
 */
void
weft_join_unref (WeftJoin *self)
{
  if (self == NULL || !g_atomic_int_dec_and_test (&self->ref_count))
    return;
  if (!atomic_load (&self->fired) && self->notify != NULL)
    self->notify (self->user_data);
  if (self->context != NULL)
    weft_context_unref (self->context);
  g_free (self);
}

/**
 * weft_join_add:
 * @self: a join point with tasks still pending
 * @n_tasks: tasks to add
 *
 * Adds tasks. Only valid while at least one task is pending (a task may
 * add the tasks it forks before it ends itself).
 */
void
weft_join_add (WeftJoin *self, guint n_tasks)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (!atomic_load (&self->fired));
  g_return_if_fail (n_tasks <= G_MAXINT);
  g_atomic_int_add (&self->pending, (gint) n_tasks);
}

/**
 * weft_join_done:
 * @self: a join point
 *
 * Ends one task. The call that ends the last one runs the continuation
 * (eager) or posts it to the join's context (lazy). Safe from any thread.
 */
void
weft_join_done (WeftJoin *self)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (g_atomic_int_get (&self->pending) > 0);
  if (!g_atomic_int_dec_and_test (&self->pending))
    return;

  /* Everything is read from @self before the store: a thread that sees
   * weft_join_is_complete() and drops the last reference may free @self
   * (and drop its context) at once, the caller of this function needing no
   * reference of its own. The continuation may run on another worker at
   * once too: the post goes through a reference of our own. */
  WeftJobFunc func = self->func;
  gpointer user_data = self->user_data;
  GDestroyNotify notify = self->notify;
  WeftContext *ctx = self->context != NULL ? weft_context_ref (self->context) : NULL;
  atomic_store (&self->fired, 1);
  if (ctx != NULL)
    {
      /* The rest of accepted work: a soft stop does not refuse it when the
       * last task ends on a thread of the application. */
      weft__context_post_continuation (ctx, func, user_data, notify);
      weft_context_unref (ctx);
    }
  else
    {
      /* The continuation may drop the last reference to @self. */
      func (user_data);
      if (notify != NULL)
        notify (user_data);
    }
}

/**
 * weft_join_is_complete:
 * @self: a join point
 *
 * Tells whether the last pending task has ended. The continuation may not
 * have finished yet: a lazy join only posted it, and an eager one may
 * still be running it on another thread. Safe from any thread.
 *
 * Returns: %TRUE once the last task ended (the continuation ran or is
 *   posted)
 */
gboolean
weft_join_is_complete (WeftJoin *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return atomic_load (&self->fired) != 0;
}

/* The task's queue node is inside it: one allocation per task. */
typedef struct {
  WeftJobSlot slot;
  WeftJoin *join;          /* (owned) */
  WeftJobFunc func;
  gpointer user_data;
  GDestroyNotify notify;
} Task;

static void
task_run (gpointer data)
{
  Task *t = data;
  t->func (t->user_data);
}

static void
task_free (gpointer data)
{
  Task *t = data;
  if (t->notify != NULL)
    t->notify (t->user_data);
  weft_join_done (t->join);
  weft_join_unref (t->join);
  g_free (t);
}

static Task *
task_new (WeftJoin *self, WeftJobFunc func, gpointer user_data, GDestroyNotify notify)
{
  Task *t = g_new0 (Task, 1);
  weft_join_add (self, 1);
  t->join = weft_join_ref (self);
  t->func = func;
  t->user_data = user_data;
  t->notify = notify;
  return t;
}

/**
 * weft_join_post:
 * @self: a join point with tasks pending
 * @engine: where to run the task, in parallel
 * @func: (scope notified) (closure user_data) (destroy notify): the task
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data after @func
 *
 * Adds a task, posts it with weft_engine_post(), and ends it (as
 * weft_join_done()) after @func and @notify have run. If the engine
 * refuses the post, the task ends at once without running.
 *
 * Returns: %TRUE if the task was posted
 */
gboolean
weft_join_post (WeftJoin *self, WeftEngine *engine, WeftJobFunc func, gpointer user_data,
                GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (engine != NULL, FALSE);
  g_return_val_if_fail (func != NULL, FALSE);
  Task *t = task_new (self, func, user_data, notify);
  return weft_engine_post_slot (engine, &t->slot, task_run, t, task_free);
}

/**
 * weft_join_post_to_context:
 * @self: a join point with tasks pending
 * @context: where to run the task, serialised with its other callbacks
 * @func: (scope notified) (closure user_data) (destroy notify): the task
 * @user_data: data for @func
 * @notify: (nullable): called with @user_data after @func
 *
 * Like weft_join_post(), on a context.
 *
 * Returns: %TRUE if the task was posted
 */
gboolean
weft_join_post_to_context (WeftJoin *self, WeftContext *context, WeftJobFunc func,
                           gpointer user_data, GDestroyNotify notify)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (context != NULL, FALSE);
  g_return_val_if_fail (func != NULL, FALSE);
  Task *t = task_new (self, func, user_data, notify);
  return weft_context_post_slot (context, &t->slot, task_run, t, task_free);
}
