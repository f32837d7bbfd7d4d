/* weft-coro-sync.c: mutex, condition variable and bounded channel for
 * coroutines. Coroutines of different contexts run on different workers at
 * once, so each object has a pthread mutex around its state and its wait
 * queues; a waiter enqueues itself and marks itself waiting under that
 * lock, so a wake cannot be lost between checking and suspending. Wakers
 * skip waiters that a timeout or an interrupt has already woken.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-coro-private.h"

#include <errno.h>

struct _WeftCoroMutex {
  gint ref_count;
  pthread_mutex_t lock;
  WeftCoro *owner;          /* HOLDS: lock */
  WeftCoroWaitQueue q;      /* HOLDS: lock */
};

struct _WeftCoroCond {
  gint ref_count;
  pthread_mutex_t lock;
  WeftCoroWaitQueue q;      /* HOLDS: lock */
};

struct _WeftCoroChannel {
  gint ref_count;
  pthread_mutex_t lock;
  gpointer *items;          /* ring; HOLDS: lock */
  guint capacity;
  guint head, n;            /* HOLDS: lock */
  gboolean closed;          /* HOLDS: lock */
  WeftCoroWaitQueue senders, receivers; /* HOLDS: lock */
  GDestroyNotify item_free;
};

G_DEFINE_BOXED_TYPE (WeftCoroMutex, weft_coro_mutex, weft_coro_mutex_ref, weft_coro_mutex_unref)
G_DEFINE_BOXED_TYPE (WeftCoroCond, weft_coro_cond, weft_coro_cond_ref, weft_coro_cond_unref)
G_DEFINE_BOXED_TYPE (WeftCoroChannel, weft_coro_channel, weft_coro_channel_ref,
                     weft_coro_channel_unref)

static WeftCoro *
current (const char *func)
{
  WeftCoro *c = weft__coro_current ();
  if (c == NULL)
    g_critical ("%s: not called from a coroutine", func);
  return c;
}

/* Waits in @q (whose object lock @lock is held; it is released) until
 * woken; returns the reason. @pass_on (with @obj) hands on what a waker
 * gave @w if its coroutine is abandoned before it takes it. */
static gint
wait_in (pthread_mutex_t *lock, WeftCoroWaitQueue *q, WeftCoro *c, gint timeout_ms,
         WeftCoroWaiter *w, void (*pass_on) (gpointer, WeftCoroWaiter *), gpointer obj)
{
  w->coro = c;
  w->pass_on = pass_on;
  w->obj = obj;
  weft__coro_queue_push (q, w);
  weft__coro_set_wait_queue (c, lock, q, w);
  pthread_mutex_unlock (lock);
  gint reason = weft__coro_wait (c, timeout_ms);
  pthread_mutex_lock (lock);
  if (w->queued)
    weft__coro_queue_remove (q, w);
  weft__coro_set_wait_queue (c, NULL, NULL, NULL);
  pthread_mutex_unlock (lock);
  return reason;
}

/* ---- mutex -------------------------------------------------------------- */

/* The waiter the mutex was handed to is abandoned: it never held it. */
static void
mutex_pass_on (gpointer obj, WeftCoroWaiter *w)
{
  WeftCoroMutex *mutex = obj;
  if (mutex->owner == w->coro)
    weft__coro_queue_wake_one (&mutex->q, &mutex->owner);
}

/**
 * weft_coro_mutex_new:
 *
 * Creates a mutex for coroutines of any contexts; lock it with
 * weft_coro_mutex_lock() from a coroutine. Release it with
 * weft_coro_mutex_unref().
 *
 * Returns: (transfer full): a new, unlocked mutex
 */
WeftCoroMutex *
weft_coro_mutex_new (void)
{
  WeftCoroMutex *m = g_new0 (WeftCoroMutex, 1);
  m->ref_count = 1;
  weft__coro_init_lock (&m->lock);
  return m;
}

/**
 * weft_coro_mutex_ref:
 * @mutex: a mutex
 *
 * Takes a reference on @mutex; drop it with weft_coro_mutex_unref(). Safe
 * from any thread.
 *
 * Returns: (transfer full): @mutex
 */
WeftCoroMutex *
weft_coro_mutex_ref (WeftCoroMutex *mutex)
{
  g_return_val_if_fail (mutex != NULL, NULL);
  g_atomic_int_inc (&mutex->ref_count);
  return mutex;
}

/**
 * weft_coro_mutex_unref:
 * @mutex: (transfer full) (nullable): a mutex
 *
 * Drops a reference; the last one frees @mutex, which nobody may wait
 * on then.
 */
void
weft_coro_mutex_unref (WeftCoroMutex *mutex)
{
  if (mutex == NULL)
    return;
  if (!g_atomic_int_dec_and_test (&mutex->ref_count))
    return;
  g_return_if_fail (mutex->owner == NULL && mutex->q.head == NULL);
  pthread_mutex_destroy (&mutex->lock);
  g_free (mutex);
}

/**
 * weft_coro_mutex_lock:
 * @mutex: a mutex
 *
 * From a coroutine: takes @mutex, suspending while another coroutine holds
 * it. Waiters get it in the order they came (the unlocker hands it over).
 *
 * Returns: 0 once held; -EINTR if interrupted (not held); -EDEADLK if the
 *   calling coroutine holds it already
 */
gint
weft_coro_mutex_lock (WeftCoroMutex *mutex)
{
  g_return_val_if_fail (mutex != NULL, -EINVAL);
  WeftCoro *c = current (G_STRFUNC);
  g_return_val_if_fail (c != NULL, -EINVAL);
  pthread_mutex_lock (&mutex->lock);
  if (mutex->owner == NULL)
    {
      mutex->owner = c;
      pthread_mutex_unlock (&mutex->lock);
      return 0;
    }
  if (mutex->owner == c)
    {
      pthread_mutex_unlock (&mutex->lock);
      return -EDEADLK;
    }
  if (!weft__coro_prepare_wait (c))
    {
      pthread_mutex_unlock (&mutex->lock);
      return -EINTR;
    }
  WeftCoroWaiter w = { 0 };
  gint reason = wait_in (&mutex->lock, &mutex->q, c, -1, &w, mutex_pass_on, mutex);
  /* Woken by the hand-over: it is ours. Else (interrupted) it never was. */
  return reason == WEFT_CORO_WAKE_EVENT ? 0 : -EINTR;
}

/**
 * weft_coro_mutex_trylock:
 * @mutex: a mutex
 *
 * From a coroutine: takes @mutex if nobody holds it, without suspending.
 * It is not recursive: if the calling coroutine already holds @mutex,
 * this returns %FALSE. Outside a coroutine it logs a critical warning and
 * returns %FALSE.
 *
 * Returns: %TRUE if the calling coroutine now holds @mutex
 */
gboolean
weft_coro_mutex_trylock (WeftCoroMutex *mutex)
{
  g_return_val_if_fail (mutex != NULL, FALSE);
  WeftCoro *c = current (G_STRFUNC);
  g_return_val_if_fail (c != NULL, FALSE);
  pthread_mutex_lock (&mutex->lock);
  gboolean ok = mutex->owner == NULL;
  if (ok)
    mutex->owner = c;
  pthread_mutex_unlock (&mutex->lock);
  return ok;
}

/**
 * weft_coro_mutex_unlock:
 * @mutex: a mutex the calling coroutine holds
 *
 * Releases @mutex, handing it to the first waiter, if any.
 */
void
weft_coro_mutex_unlock (WeftCoroMutex *mutex)
{
  g_return_if_fail (mutex != NULL);
  WeftCoro *c = current (G_STRFUNC);
  pthread_mutex_lock (&mutex->lock);
  if (mutex->owner != c || c == NULL)
    {
      pthread_mutex_unlock (&mutex->lock);
      g_critical ("weft_coro_mutex_unlock: the calling coroutine does not hold the mutex");
      return;
    }
  /* To the first waiter still waiting, or to nobody; the owner is set
   * before each wake (see weft__coro_queue_wake_one's @chosen). */
  weft__coro_queue_wake_one (&mutex->q, &mutex->owner);
  pthread_mutex_unlock (&mutex->lock);
}

/* Takes @mutex back after a condition wait, whatever interrupts come; an
 * interrupt seen meanwhile is kept pending for the next wait. */
static void
relock (WeftCoroMutex *mutex, WeftCoro *c)
{
  gboolean interrupted = FALSE;
  while (weft_coro_mutex_lock (mutex) == -EINTR)
    interrupted = TRUE;
  if (interrupted)
    weft_coro_interrupt (c);
}

/* ---- condition ---------------------------------------------------------- */

/**
 * weft_coro_cond_new:
 *
 * Creates a condition variable for coroutines; wait on it with
 * weft_coro_cond_wait() and wake waiters with weft_coro_cond_signal() or
 * weft_coro_cond_broadcast(). Release it with weft_coro_cond_unref().
 *
 * Returns: (transfer full): a new condition variable
 */
WeftCoroCond *
weft_coro_cond_new (void)
{
  WeftCoroCond *cond = g_new0 (WeftCoroCond, 1);
  cond->ref_count = 1;
  weft__coro_init_lock (&cond->lock);
  return cond;
}

/**
 * weft_coro_cond_ref:
 * @cond: a cond
 *
 * Takes a reference on @cond; drop it with weft_coro_cond_unref(). Safe
 * from any thread.
 *
 * Returns: (transfer full): @cond
 */
WeftCoroCond *
weft_coro_cond_ref (WeftCoroCond *cond)
{
  g_return_val_if_fail (cond != NULL, NULL);
  g_atomic_int_inc (&cond->ref_count);
  return cond;
}

/**
 * weft_coro_cond_unref:
 * @cond: (transfer full) (nullable): a cond
 *
 * Drops a reference; the last one frees @cond, which nobody may wait
 * on then.
 */
void
weft_coro_cond_unref (WeftCoroCond *cond)
{
  if (cond == NULL)
    return;
  if (!g_atomic_int_dec_and_test (&cond->ref_count))
    return;
  g_return_if_fail (cond->q.head == NULL);
  pthread_mutex_destroy (&cond->lock);
  g_free (cond);
}

/* The waiter a signal chose is abandoned: the signal goes to the next one
 * (after a broadcast that one may have come later: a spurious wake, which
 * waiters recheck their predicate for anyway). */
static void
cond_pass_on (gpointer obj, WeftCoroWaiter *w)
{
  WeftCoroCond *cond = obj;
  weft__coro_queue_wake_one (&cond->q, NULL);
}

/**
 * weft_coro_cond_wait:
 * @cond: a condition
 * @mutex: (nullable): a mutex the calling coroutine holds, released while
 *   waiting and held again on return (whatever the result); %NULL when
 *   every coroutine using @cond runs in one context (they never run at
 *   once, so checking and waiting cannot be split by a signal)
 * @timeout_ms: milliseconds, or -1
 *
 * From a coroutine: waits (suspended) for weft_coro_cond_signal() or
 * weft_coro_cond_broadcast().
 *
 * Returns: 0 when signalled, -ETIMEDOUT, or -EINTR
 */
gint
weft_coro_cond_wait (WeftCoroCond *cond, WeftCoroMutex *mutex, gint timeout_ms)
{
  g_return_val_if_fail (cond != NULL, -EINVAL);
  WeftCoro *c = current (G_STRFUNC);
  g_return_val_if_fail (c != NULL, -EINVAL);
  pthread_mutex_lock (&cond->lock);
  if (!weft__coro_prepare_wait (c))
    {
      pthread_mutex_unlock (&cond->lock);
      return -EINTR;
    }
  WeftCoroWaiter w = { 0 };
  w.coro = c;
  w.pass_on = cond_pass_on;
  w.obj = cond;
  weft__coro_queue_push (&cond->q, &w);
  weft__coro_set_wait_queue (c, &cond->lock, &cond->q, &w);
  pthread_mutex_unlock (&cond->lock);
  /* Queued before the mutex goes: a signal after it cannot be missed. */
  if (mutex != NULL)
    weft_coro_mutex_unlock (mutex);
  gint reason = weft__coro_wait (c, timeout_ms);
  pthread_mutex_lock (&cond->lock);
  if (w.queued)
    weft__coro_queue_remove (&cond->q, &w);
  weft__coro_set_wait_queue (c, NULL, NULL, NULL);
  pthread_mutex_unlock (&cond->lock);
  if (mutex != NULL)
    relock (mutex, c);
  return weft__coro_reason_to_errno (reason);
}

/**
 * weft_coro_cond_signal:
 * @cond: a condition
 *
 * Wakes one waiting coroutine (the longest waiting), from any thread or
 * coroutine.
 */
void
weft_coro_cond_signal (WeftCoroCond *cond)
{
  g_return_if_fail (cond != NULL);
  pthread_mutex_lock (&cond->lock);
  weft__coro_queue_wake_one (&cond->q, NULL);
  pthread_mutex_unlock (&cond->lock);
}

/**
 * weft_coro_cond_broadcast:
 * @cond: a condition
 *
 * Wakes every waiting coroutine, from any thread or coroutine.
 */
void
weft_coro_cond_broadcast (WeftCoroCond *cond)
{
  g_return_if_fail (cond != NULL);
  pthread_mutex_lock (&cond->lock);
  while (weft__coro_queue_wake_one (&cond->q, NULL))
    ;
  pthread_mutex_unlock (&cond->lock);
}

/* ---- channel ------------------------------------------------------------ */

/**
 * weft_coro_channel_new:
 * @capacity: items it holds before senders wait (at least 1)
 * @item_free: (nullable): frees items left in it when it is freed
 *
 * Creates an empty channel: coroutines of any contexts pass items through
 * it with weft_coro_channel_send() and weft_coro_channel_receive(), first
 * in first out. Release it with weft_coro_channel_unref().
 *
 * Returns: (transfer full): a new channel
 */
WeftCoroChannel *
weft_coro_channel_new (guint capacity, GDestroyNotify item_free)
{
  g_return_val_if_fail (capacity >= 1, NULL);
  WeftCoroChannel *ch = g_new0 (WeftCoroChannel, 1);
  ch->ref_count = 1;
  weft__coro_init_lock (&ch->lock);
  ch->items = g_new0 (gpointer, capacity);
  ch->capacity = capacity;
  ch->item_free = item_free;
  return ch;
}

/**
 * weft_coro_channel_ref:
 * @channel: a channel
 *
 * Takes a reference on @channel; drop it with weft_coro_channel_unref().
 * Safe from any thread.
 *
 * Returns: (transfer full): @channel
 */
WeftCoroChannel *
weft_coro_channel_ref (WeftCoroChannel *channel)
{
  g_return_val_if_fail (channel != NULL, NULL);
  g_atomic_int_inc (&channel->ref_count);
  return channel;
}

/**
 * weft_coro_channel_unref:
 * @channel: (transfer full) (nullable): a channel
 *
 * Drops a reference; the last one frees @channel, which nobody may wait
 * on then.
 */
void
weft_coro_channel_unref (WeftCoroChannel *channel)
{
  if (channel == NULL)
    return;
  if (!g_atomic_int_dec_and_test (&channel->ref_count))
    return;
  g_return_if_fail (channel->senders.head == NULL && channel->receivers.head == NULL);
  for (guint i = 0; i < channel->n; i++)
    if (channel->item_free != NULL)
      channel->item_free (channel->items[(channel->head + i) % channel->capacity]);
  g_free (channel->items);
  pthread_mutex_destroy (&channel->lock);
  g_free (channel);
}

/* A sender or receiver woken for room or an item (or the close) is
 * abandoned: the next one in its queue gets the wake it would have used,
 * if there is still something for it (waiters loop, so one woken in vain
 * waits again). */
static void
senders_pass_on (gpointer obj, WeftCoroWaiter *w)
{
  WeftCoroChannel *channel = obj;
  if (channel->closed || channel->n < channel->capacity)
    weft__coro_queue_wake_one (&channel->senders, NULL);
}

static void
receivers_pass_on (gpointer obj, WeftCoroWaiter *w)
{
  WeftCoroChannel *channel = obj;
  if (channel->closed || channel->n > 0)
    weft__coro_queue_wake_one (&channel->receivers, NULL);
}

/**
 * weft_coro_channel_send:
 * @channel: a channel
 * @item: (transfer full) (nullable): the item
 * @timeout_ms: milliseconds to wait for room in all, or -1
 *
 * From a coroutine: adds @item, waiting (suspended) while the channel is
 * full. On failure the caller keeps @item.
 *
 * Returns: 0; -EPIPE if the channel is closed; -ETIMEDOUT; -EINTR
 */
gint
weft_coro_channel_send (WeftCoroChannel *channel, gpointer item, gint timeout_ms)
{
  g_return_val_if_fail (channel != NULL, -EINVAL);
  WeftCoro *c = current (G_STRFUNC);
  g_return_val_if_fail (c != NULL, -EINVAL);
  gint64 start = timeout_ms > 0 ? g_get_monotonic_time () : 0;
  for (;;)
    {
      pthread_mutex_lock (&channel->lock);
      if (channel->closed)
        {
          pthread_mutex_unlock (&channel->lock);
          return -EPIPE;
        }
      if (channel->n < channel->capacity)
        {
          channel->items[(channel->head + channel->n) % channel->capacity] = item;
          channel->n++;
          weft__coro_queue_wake_one (&channel->receivers, NULL);
          pthread_mutex_unlock (&channel->lock);
          return 0;
        }
      if (!weft__coro_prepare_wait (c))
        {
          pthread_mutex_unlock (&channel->lock);
          return -EINTR;
        }
      WeftCoroWaiter w = { 0 };
      gint reason = wait_in (&channel->lock, &channel->senders, c, weft__coro_left_ms (timeout_ms, start),
                             &w, senders_pass_on, channel);
      if (reason != WEFT_CORO_WAKE_EVENT)
        return weft__coro_reason_to_errno (reason);
    }
}

/**
 * weft_coro_channel_receive:
 * @channel: a channel
 * @item: (out) (transfer full) (optional): the item
 * @timeout_ms: milliseconds to wait for one in all, or -1
 *
 * From a coroutine: takes the oldest item, waiting (suspended) while the
 * channel is empty.
 *
 * Returns: 0; -EPIPE once the channel is closed and empty; -ETIMEDOUT;
 *   -EINTR
 */
gint
weft_coro_channel_receive (WeftCoroChannel *channel, gpointer *item, gint timeout_ms)
{
  g_return_val_if_fail (channel != NULL, -EINVAL);
  WeftCoro *c = current (G_STRFUNC);
  g_return_val_if_fail (c != NULL, -EINVAL);
  if (item != NULL)
    *item = NULL;
  gint64 start = timeout_ms > 0 ? g_get_monotonic_time () : 0;
  for (;;)
    {
      pthread_mutex_lock (&channel->lock);
      if (channel->n > 0)
        {
          gpointer it = channel->items[channel->head];
          channel->head = (channel->head + 1) % channel->capacity;
          channel->n--;
          weft__coro_queue_wake_one (&channel->senders, NULL);
          pthread_mutex_unlock (&channel->lock);
          if (item != NULL)
            *item = it;
          else if (channel->item_free != NULL)
            channel->item_free (it);
          return 0;
        }
      if (channel->closed)
        {
          pthread_mutex_unlock (&channel->lock);
          return -EPIPE;
        }
      if (!weft__coro_prepare_wait (c))
        {
          pthread_mutex_unlock (&channel->lock);
          return -EINTR;
        }
      WeftCoroWaiter w = { 0 };
      gint reason = wait_in (&channel->lock, &channel->receivers, c, weft__coro_left_ms (timeout_ms, start),
                             &w, receivers_pass_on, channel);
      if (reason != WEFT_CORO_WAKE_EVENT)
        return weft__coro_reason_to_errno (reason);
    }
}

/**
 * weft_coro_channel_close:
 * @channel: a channel
 *
 * From anywhere: senders get -EPIPE from now on, receivers once the items
 * left are taken; every waiter wakes.
 */
void
weft_coro_channel_close (WeftCoroChannel *channel)
{
  g_return_if_fail (channel != NULL);
  pthread_mutex_lock (&channel->lock);
  channel->closed = TRUE;
  while (weft__coro_queue_wake_one (&channel->senders, NULL))
    ;
  while (weft__coro_queue_wake_one (&channel->receivers, NULL))
    ;
  pthread_mutex_unlock (&channel->lock);
}
