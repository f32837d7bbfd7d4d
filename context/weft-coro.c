/* weft-coro.c: stackful coroutines inside contexts.
 *
 * A coroutine runs only from a job of its context (resume_job): the job
 * switches from the worker's stack to the coroutine's, and the coroutine
 * switches back when it waits or ends, so the job returns and the context
 * goes on. Its code is therefore serialised with the context's other
 * callbacks, and it may resume on any worker.
 *
 * Waiting: the coroutine marks itself WAITING (weft__coro_prepare_wait),
 * registers what should wake it (a timeout, an fd, a place in a queue),
 * and switches out. A waker moves it from WAITING to WOKEN with one
 * compare-and-swap, so exactly one of several racing wakers (the event,
 * the timeout, an interrupt) wins, and posts the resume job. Every wait
 * registers a source of the context (a timeout, far away for an untimed
 * wait), so destroying the context reaches every suspended coroutine: it
 * is then freed without being resumed (its stack is not unwound).
 *
 * Thread-local state across a switch: a coroutine may leave a switch on
 * another thread than it entered it, so nothing that depends on the
 * thread may be kept in a register or a local across one. The compiler
 * may reuse a thread-local address (or glibc's errno address, which
 * __errno_location is declared const for) within a function: here every
 * thread-local access goes through a small non-inlined function with an
 * empty asm statement, so it is computed afresh, and errno is saved when
 * a coroutine switches out and restored on the thread it resumes on.
 * Application code has the same hazard with errno: see docs/coroutines.md
 * and weft_coro_errno_location().
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-coro-private.h"
#include "weft-context-private.h" /* weft__context_internal_ref */
#include "weft-engine-private.h" /* WEFT_TLS_IE */
#include "weft-sys.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef WEFT_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef WEFT_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#define FAR_AWAY_MS G_MAXINT /* an untimed wait's guard timeout */

enum {
  ST_NEW,
  ST_RUNNING,
  ST_WAITING,
  ST_WOKEN,
  ST_DONE,
};

typedef struct {
  gconstpointer key;
  gpointer value;
  GDestroyNotify destroy;
} Local;

/* How a coroutine holds its context (see hold_context()). */
enum { HOLD_NONE, HOLD_PUBLIC, HOLD_INTERNAL };

/* A resume job's data. At most one resume job is outstanding, and the
 * next can be posted only once the coroutine runs again, i.e. from inside
 * the previous job (whose notify then still has to run): two slots, used
 * in turn, are enough. */
typedef struct {
  WeftCoro *c; /* ref, taken when posted */
  gboolean ran;
} Resume;

struct _WeftCoro {
  gint ref_count;
  WeftContext *ctx;          /* held as ctx_hold says */
  guint ctx_hold;            /* HOLD_: taken when it may outlive the callback it
                              * runs in: posted, suspended, or referenced at its end */
  WeftCoroFunc func;
  gpointer data;
  GDestroyNotify notify;
  gpointer retval;
  gboolean finished;         /* the function returned (not abandoned) */
  atomic_bool ended;         /* finish() is done with it */
  atomic_bool joined;        /* a joiner came: finish() must take the lock */

  atomic_int state;
  atomic_int wake_reason;
  atomic_bool interrupt;     /* pending */
  /* The current wait's timeout source. Atomic: the timeout's callback
   * clears it on a worker while an abandonment on another thread may read
   * it (finish()). */
  atomic_uint timer;
  guint fd_wait;             /* weft_coro_wait_fd()'s fd source, while it waits */
  GIOCondition fd_revents;   /* what that source saw ready */
  gboolean orphan;           /* waiting in a closed context: abandon it */
  atomic_bool out;           /* switched out, not being resumed: claimable */
  atomic_bool doom;          /* its context is gone: abandon once out */
  gboolean inline_run;       /* this run was entered by spawn_here from a
                              * callback of the context, not by a job */
  pthread_mutex_t *wait_lock;   /* the queue it waits in, if any: */
  WeftCoroWaitQueue *wait_q;    /* abandoning it takes it out */
  WeftCoroWaiter *waiter;

  Resume resumes[2];         /* the resume jobs' data, in turn */
  atomic_uint resume_seq;

  WeftCoroRegs regs;         /* the coroutine's side while it is out */
  WeftCoroRegs *caller;      /* the resuming job's side while it runs */
  WeftCoroStack *stack;
  int saved_errno;
  GArray *locals;            /* Local */

  pthread_mutex_t lock;      /* joiners */
  WeftCoroWaitQueue joiners; /* HOLDS: lock */

#ifdef WEFT_ASAN
  void *asan_fake;
  const void *caller_lo;
  gsize caller_size;
#endif
#ifdef WEFT_TSAN
  void *tsan_fiber;
  void *tsan_caller;
#endif
};

G_DEFINE_BOXED_TYPE (WeftCoro, weft_coro, weft_coro_ref, weft_coro_unref)

/* ---- thread-local state, never cached across a switch ----------------- */

/* Initial-exec: without it a shared library pays a __tls_get_addr call
 * per access, several per switch. */
static _Thread_local WEFT_TLS_IE WeftCoro *tls_current;

__attribute__ ((noinline)) WeftCoro *
weft__coro_current (void)
{
  __asm__ volatile ("" ::: "memory");
  return tls_current;
}

__attribute__ ((noinline)) static void
set_current (WeftCoro *c)
{
  __asm__ volatile ("" ::: "memory");
  tls_current = c;
}

__attribute__ ((noinline)) static void
save_errno (WeftCoro *c)
{
  __asm__ volatile ("" ::: "memory");
  c->saved_errno = errno;
}

__attribute__ ((noinline)) static void
restore_errno (WeftCoro *c)
{
  __asm__ volatile ("" ::: "memory");
  errno = c->saved_errno;
}

/**
 * weft_coro_errno_location:
 *
 * The address of the calling thread's errno, looked up on every call.
 * glibc declares its own lookup constant, so a compiler may keep the
 * address across a call that suspends a coroutine, which then reads or
 * writes the errno of the thread it left. Coroutine code that uses errno
 * across suspending calls should define errno as
 * `(*weft_coro_errno_location ())` (see docs/coroutines.md).
 *
 * Returns: the calling thread's errno
 */
__attribute__ ((noinline)) gint *
weft_coro_errno_location (void)
{
  __asm__ volatile ("" ::: "memory");
  return &errno;
}

/* ---- life --------------------------------------------------------------- */

static void resume_job (gpointer data);
static void resume_notify (gpointer data);

static void
coro_free (WeftCoro *c)
{
  g_assert (c->stack == NULL);
  if (c->ctx_hold == HOLD_PUBLIC)
    weft_context_unref (c->ctx);
  else if (c->ctx_hold == HOLD_INTERNAL)
    weft__context_internal_unref (c->ctx);
  pthread_mutex_destroy (&c->lock);
  weft__coro_object_put (c);
}

/* Leaves the coroutine for the job that resumed it. On the way back the
 * coroutine may be on another thread. */
static void
switch_out (WeftCoro *c, gboolean final)
{
  if (!final)
    save_errno (c);
#ifdef WEFT_ASAN
  __sanitizer_start_switch_fiber (final ? NULL : &c->asan_fake, c->caller_lo, c->caller_size);
#endif
#ifdef WEFT_TSAN
  __tsan_switch_to_fiber (c->tsan_caller, 0);
#endif
  weft__coro_switch (&c->regs, c->caller);
  /* Resumed, maybe on another worker. */
#ifdef WEFT_ASAN
  __sanitizer_finish_switch_fiber (c->asan_fake, &c->caller_lo, &c->caller_size);
#endif
  restore_errno (c);
}

/* A coroutine started inside a callback of its context (spawn_here) runs
 * without a reference to it while it stays inside that callback: the
 * callback keeps the context. It takes one once it may outlive it: an
 * internal one, as the engine's own holders do, since by then the last
 * public one may be gone (another thread may drop it during the callback)
 * and there would be none to add to. It keeps the memory, not the context
 * open: whoever started it owns the context's life. */
static void
hold_context (WeftCoro *c)
{
  if (c->ctx_hold == HOLD_NONE)
    {
      weft__context_internal_ref (c->ctx);
      c->ctx_hold = HOLD_INTERNAL;
    }
}

static void
coro_main (void *arg)
{
  WeftCoro *c = arg;
#ifdef WEFT_ASAN
  __sanitizer_finish_switch_fiber (NULL, &c->caller_lo, &c->caller_size);
#endif
  c->retval = c->func (c->data);
  c->finished = TRUE;
  /* Release: what it did is visible to whoever sees it done. (Wakers only
   * compare-and-swap from WAITING, which this is not.) */
  atomic_store_explicit (&c->state, ST_DONE, memory_order_release);
  switch_out (c, TRUE);
  g_assert_not_reached ();
}

static void
drop_locals (WeftCoro *c)
{
  /* (A destructor that runs in the coroutine may set a new one.) */
  GArray *locals;
  while ((locals = c->locals) != NULL)
    {
      c->locals = NULL;
      for (guint i = 0; i < locals->len; i++)
        {
          Local *l = &g_array_index (locals, Local, i);
          if (l->destroy != NULL)
            l->destroy (l->value);
        }
      g_array_unref (locals);
    }
}

/* After the end (or when the context is gone before it): everything the
 * coroutine held is released, once, off its stack. */
static void
finish (WeftCoro *c)
{
  /* A coroutine that ended by itself has no timer left: a plain load
   * then, and the exchange only when an abandonment may race the
   * timeout's callback (once per coroutine end, HTTP --coro's hot path). */
  guint timer = atomic_load_explicit (&c->timer, memory_order_relaxed);
  if (timer != 0 && (timer = atomic_exchange_explicit (&c->timer, 0, memory_order_relaxed)) != 0)
    weft_context_remove (c->ctx, timer);
  /* An abandoned wait_fd: its fd leaves epoll before the notify, which may
   * close it (and its number may be reused at once). Either this remove
   * does it, or a close of the context did, under the lock this remove
   * takes. */
  if (c->fd_wait != 0)
    {
      weft_context_remove (c->ctx, c->fd_wait);
      c->fd_wait = 0;
    }
  drop_locals (c);
  if (c->notify != NULL)
    c->notify (c->data);
  weft__coro_stack_put (c->stack);
  c->stack = NULL;
#ifdef WEFT_TSAN
  __tsan_destroy_fiber (c->tsan_fiber);
  c->tsan_fiber = NULL;
#endif
  /* The life reference is the only one: nobody can join it (a joiner
   * holds a reference) or see it again, so it goes without the atomics
   * below (an acquire load: what other holders did before they dropped
   * theirs happened before). */
  if (g_atomic_int_get (&c->ref_count) == 1)
    {
      coro_free (c);
      return;
    }
  hold_context (c); /* for weft_coro_get_context() of the other holders */
  /* Joiners wake now (each sees the result or the abandonment). A joiner
   * sets joined before it checks ended under the lock, and both are
   * sequentially consistent: either it sees ended, or we see joined and
   * wake it under the lock. Most coroutines are never joined: no lock. */
  atomic_store (&c->ended, TRUE);
  if (atomic_load (&c->joined))
    {
      pthread_mutex_lock (&c->lock);
      while (weft__coro_queue_wake_one (&c->joiners, NULL))
        ;
      pthread_mutex_unlock (&c->lock);
    }
  weft_coro_unref (c); /* the life reference */
}

/* The context is gone while @c was suspended: free it without resuming.
 * Only the claimer of c->out calls this. */
static void
abandon (WeftCoro *c)
{
  if (c->wait_lock != NULL)
    {
      /* Its waiter node is on the stack about to be freed. (The lock is
       * recursive: a waker holding it may be what led here.) */
      pthread_mutex_lock (c->wait_lock);
      if (c->waiter->queued)
        weft__coro_queue_remove (c->wait_q, c->waiter);
      else if (c->waiter->pass_on != NULL &&
               atomic_load (&c->wake_reason) == WEFT_CORO_WAKE_EVENT)
        /* A waker took it out of the queue and woke it for something it
         * will never take now (a mutex it would own, a signal, an item):
         * that goes to the next waiter, else it would be lost with it. */
        c->waiter->pass_on (c->waiter->obj, c->waiter);
      pthread_mutex_unlock (c->wait_lock);
      c->wait_lock = NULL;
    }
  atomic_store (&c->state, ST_DONE);
  finish (c);
}

/* Abandons @c as soon as it is switched out (now, if it is). */
static void
request_abandon (WeftCoro *c)
{
  atomic_store (&c->doom, TRUE);
  _Bool expected = 1;
  if (atomic_compare_exchange_strong (&c->out, &expected, FALSE))
    abandon (c);
}

void
weft__coro_set_wait_queue (WeftCoro *c, pthread_mutex_t *lock, WeftCoroWaitQueue *q,
                           WeftCoroWaiter *w)
{
  c->wait_lock = lock;
  c->wait_q = q;
  c->waiter = w;
}

void
weft__coro_init_lock (pthread_mutex_t *lock)
{
#ifdef PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP
  /* glibc's static initializer: no attribute calls per coroutine. */
  static const pthread_mutex_t recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
  *lock = recursive;
#else
  pthread_mutexattr_t a;
  pthread_mutexattr_init (&a);
  pthread_mutexattr_settype (&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init (lock, &a);
  pthread_mutexattr_destroy (&a);
#endif
}

static void
run (WeftCoro *c)
{
  WeftCoroRegs caller;
  WeftCoro *outer = weft__coro_current (); /* a coroutine's job inside another's? never */
  c->caller = &caller;
  set_current (c);
#ifdef WEFT_TSAN
  c->tsan_caller = __tsan_get_current_fiber ();
  __tsan_switch_to_fiber (c->tsan_fiber, 0);
#endif
#ifdef WEFT_ASAN
  void *fake = NULL;
  __sanitizer_start_switch_fiber (&fake, c->stack->lo, c->stack->size);
#endif
  weft__coro_switch (&caller, &c->regs);
#ifdef WEFT_ASAN
  __sanitizer_finish_switch_fiber (fake, NULL, NULL);
#endif
  set_current (outer);
  int st = atomic_load (&c->state);
  if (st == ST_DONE)
    {
      finish (c);
      return;
    }
  /* Suspended: it outlives this callback, and needs its context. */
  hold_context (c);
  if (c->orphan)
    {
      int expected = ST_WAITING;
      if (atomic_compare_exchange_strong (&c->state, &expected, ST_WOKEN))
        atomic_store (&c->doom, TRUE);
    }
  /* Out: from now on an abandonment may claim it (and one that was asked
   * for while it ran happens here). */
  atomic_store (&c->out, TRUE);
  if (atomic_load (&c->doom))
    request_abandon (c);
}


static void
resume_job (gpointer data)
{
  Resume *r = data;
  WeftCoro *c = r->c;
  r->ran = TRUE;
  int st = atomic_load (&c->state);
  if (st == ST_DONE)
    return;
  g_assert (st == ST_NEW || st == ST_WOKEN);
  _Bool expected = 1;
  if (!atomic_compare_exchange_strong (&c->out, &expected, FALSE))
    return; /* being abandoned */
  atomic_store (&c->state, ST_RUNNING);
  c->inline_run = FALSE;
  run (c);
}

/* A resume job that is dropped (its context closed, or its engine gone,
 * or for a first run a soft stop refusing it) never ran: the coroutine can
 * never continue, and is abandoned. */
static void
resume_notify (gpointer data)
{
  Resume *r = data;
  WeftCoro *c = r->c;
  if (!r->ran && atomic_load (&c->state) != ST_DONE)
    request_abandon (c);
  weft_coro_unref (c);
}

/* Posts the job that runs @c first, or resumes it (if the post fails,
 * its notify has abandoned @c). A resume continues work the context
 * accepted: a soft stop does not refuse it (see
 * weft__context_post_continuation()); a first run is new work. */
static gboolean
post_resume (WeftCoro *c)
{
  /* Posters never overlap (see Resume): no read-modify-write needed. */
  guint seq = atomic_load_explicit (&c->resume_seq, memory_order_relaxed);
  atomic_store_explicit (&c->resume_seq, seq + 1, memory_order_relaxed);
  Resume *r = &c->resumes[seq & 1];
  r->c = weft_coro_ref (c);
  r->ran = FALSE;
  if (atomic_load_explicit (&c->state, memory_order_relaxed) == ST_NEW)
    return weft_context_post (c->ctx, resume_job, r, resume_notify);
  return weft__context_post_continuation (c->ctx, resume_job, r, resume_notify);
}

/* A new coroutine, not started (state NEW, out), or NULL (@notify run). */
static WeftCoro *
coro_new (WeftContext *ctx, WeftCoroFunc func, gpointer user_data, GDestroyNotify notify,
          gsize stack_size)
{
  WeftCoroStack *stack = weft__coro_stack_get (stack_size != 0 ? stack_size
                                                               : WEFT_CORO_DEFAULT_STACK);
  if (stack == NULL)
    {
      g_warning ("weft_coro_spawn: cannot map a %" G_GSIZE_FORMAT "-byte stack",
                 stack_size != 0 ? stack_size : (gsize) WEFT_CORO_DEFAULT_STACK);
      if (notify != NULL)
        notify (user_data);
      return NULL;
    }
  WeftCoro *c = weft__coro_object_get (sizeof (WeftCoro));
  memset (c, 0, sizeof *c);
  c->ref_count = 2; /* the caller's, and the life reference */
  c->ctx = ctx; /* no reference yet: see hold_context() */
  c->func = func;
  c->data = user_data;
  c->notify = notify;
  c->stack = stack;
  weft__coro_init_lock (&c->lock);
  atomic_init (&c->state, ST_NEW);
  atomic_init (&c->out, TRUE);
  weft__coro_regs_init (&c->regs, stack->lo, stack->size, coro_main, c);
#ifdef WEFT_TSAN
  c->tsan_fiber = __tsan_create_fiber (0);
#endif
  return c;
}

/**
 * weft_coro_spawn:
 * @ctx: the context the coroutine runs in
 * @func: (scope notified) (closure user_data) (destroy notify): the body
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data once the coroutine has ended (or
 *   was abandoned with its context)
 * @stack_size: the stack's size in bytes, or 0 for
 *   %WEFT_CORO_DEFAULT_STACK; a guard page below it faults on overflow
 *
 * Starts a coroutine in @ctx, from any thread. It runs as a job of @ctx,
 * never inside this call. The coroutine may suspend in the weft_coro_*
 * calls; until it ends, it keeps a reference to itself and to @ctx. If
 * @ctx is destroyed while the coroutine is suspended, the coroutine is
 * freed without resuming (objects referenced only from its stack leak).
 *
 * Returns: (transfer full) (nullable): the coroutine, for
 *   weft_coro_join() and weft_coro_interrupt() (unref it when done); %NULL
 *   if no stack could be mapped (a warning is logged) or @ctx is
 *   destroyed: @notify has been called then
 */
WeftCoro *
weft_coro_spawn (WeftContext *ctx, WeftCoroFunc func, gpointer user_data, GDestroyNotify notify,
                 gsize stack_size)
{
  g_return_val_if_fail (ctx != NULL, NULL);
  g_return_val_if_fail (func != NULL, NULL);
  WeftCoro *c = coro_new (ctx, func, user_data, notify, stack_size);
  if (c == NULL)
    return NULL;
  /* Public: until it ends it keeps @ctx open, as documented. */
  weft_context_ref (ctx);
  c->ctx_hold = HOLD_PUBLIC;
  if (!post_resume (c))
    {
      /* Closed: abandoned already (@notify has run). */
      weft_coro_unref (c);
      return NULL;
    }
  return c;
}

gboolean
weft__coro_spawn_here (WeftContext *ctx, WeftCoroFunc func, gpointer user_data,
                       GDestroyNotify notify, gsize stack_size)
{
  if (weft_context_get_current () != ctx || weft__coro_current () != NULL)
    {
      WeftCoro *c = weft_coro_spawn (ctx, func, user_data, notify, stack_size);
      weft_coro_unref (c);
      return c != NULL;
    }
  WeftCoro *c = coro_new (ctx, func, user_data, notify, stack_size);
  if (c == NULL)
    return FALSE;
  /* What resume_job does, without the job: we are in a callback of ctx,
   * so the body is serialised with the context's other callbacks. No
   * reference for the caller: the life reference alone, so a coroutine
   * that ends inside frees itself without an atomic (see finish()). */
  c->ref_count = 1;
  /* Nobody else knows of it yet: no ordering needed. */
  atomic_store_explicit (&c->out, FALSE, memory_order_relaxed);
  atomic_store_explicit (&c->state, ST_RUNNING, memory_order_relaxed);
  c->inline_run = TRUE;
  run (c);
  return TRUE;
}

gboolean
weft__coro_renew (WeftCoro *c)
{
  /* Resumed by a job: outside the callback that started it. Referenced by
   * someone else: a joiner would wait past the end of what it ran. */
  if (!c->inline_run || g_atomic_int_get (&c->ref_count) != 1)
    return FALSE;
  /* What it ran leaves nothing for the next: its coroutine-locals go, and
   * an interrupt it sent itself is forgotten. */
  drop_locals (c);
  atomic_store_explicit (&c->interrupt, FALSE, memory_order_relaxed);
  return TRUE;
}

void
weft__coro_set_data (WeftCoro *c, gpointer user_data)
{
  c->data = user_data;
}

/**
 * weft_coro_ref:
 * @self: a coroutine
 *
 * Takes a reference on @self, for example to join it later; drop it with
 * weft_coro_unref(). Safe from any thread.
 *
 * Returns: (transfer full): @self
 */
WeftCoro *
weft_coro_ref (WeftCoro *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_atomic_int_inc (&self->ref_count);
  return self;
}

/**
 * weft_coro_unref:
 * @self: (transfer full) (nullable): a coroutine
 *
 * Drops a reference. A running or suspended coroutine keeps itself alive
 * until it ends.
 */
void
weft_coro_unref (WeftCoro *self)
{
  if (self == NULL)
    return;
  if (g_atomic_int_dec_and_test (&self->ref_count))
    coro_free (self);
}

/**
 * weft_coro_self:
 *
 * Finds the coroutine the calling code runs in. No reference is added;
 * a coroutine keeps itself alive while it runs.
 *
 * Returns: (transfer none) (nullable): the coroutine running this code, or
 *   %NULL outside coroutines
 */
WeftCoro *
weft_coro_self (void)
{
  return weft__coro_current ();
}

/**
 * weft_coro_get_context:
 * @self: a coroutine
 *
 * Gets the context given to weft_coro_spawn(). The coroutine holds a
 * reference on it for as long as @self exists; none is added for the
 * caller. Safe from any thread.
 *
 * Returns: (transfer none): the context it runs in
 */
WeftContext *
weft_coro_get_context (WeftCoro *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->ctx;
}

/**
 * weft_coro_is_done:
 * @self: a coroutine
 *
 * Tells, without waiting, whether @self has finished; use
 * weft_coro_join() to wait for it and get its result. Safe from any
 * thread.
 *
 * Returns: %TRUE once it has ended (or was abandoned with its context)
 */
gboolean
weft_coro_is_done (WeftCoro *self)
{
  g_return_val_if_fail (self != NULL, TRUE);
  return atomic_load (&self->state) == ST_DONE;
}

/* ---- waiting ------------------------------------------------------------ */

gboolean
weft__coro_wake (WeftCoro *c, gint reason)
{
  int expected = ST_WAITING;
  if (!atomic_compare_exchange_strong (&c->state, &expected, ST_WOKEN))
    return FALSE;
  atomic_store (&c->wake_reason, reason);
  post_resume (c);
  return TRUE;
}

gboolean
weft__coro_prepare_wait (WeftCoro *c)
{
  if (atomic_exchange (&c->interrupt, FALSE))
    return FALSE;
  atomic_store (&c->wake_reason, 0);
  atomic_store (&c->state, ST_WAITING);
  return TRUE;
}

static gboolean
timeout_cb (gpointer data)
{
  WeftCoro *c = data;
  atomic_store_explicit (&c->timer, 0, memory_order_relaxed);
  weft__coro_wake (c, WEFT_CORO_WAKE_TIMEOUT);
  return G_SOURCE_REMOVE;
}

/* Every wait's timeout source ends here: if it is the context closing,
 * the waiting coroutine is abandoned. */
static void
timeout_notify (gpointer data)
{
  WeftCoro *c = data;
  if (weft_context_is_destroyed (c->ctx))
    {
      int expected = ST_WAITING;
      if (atomic_compare_exchange_strong (&c->state, &expected, ST_WOKEN))
        request_abandon (c);
    }
  weft_coro_unref (c);
}

gint
weft__coro_wait (WeftCoro *c, gint timeout_ms)
{
  /* A pending interrupt makes the wait end at once (it may have arrived
   * between prepare and now: then its wake already won). */
  if (atomic_exchange (&c->interrupt, FALSE))
    weft__coro_wake (c, WEFT_CORO_WAKE_INTERRUPT);
  /* The timeout, or for an untimed wait a far one whose notify tells of
   * the context's end; none if a wake is already on its way (its resume
   * job tells of that). */
  if (atomic_load (&c->state) == ST_WAITING)
    /* A timed wait counts from this call, not from the callback's first
     * timeout add (weft_context_add_timeout()): coroutines started inside
     * one long callback (pipelined HTTP handlers) each wait their full
     * time. */
    atomic_store_explicit (
      &c->timer,
      timeout_ms >= 0 ? weft__context_add_timeout_from_now (c->ctx, (guint) timeout_ms, timeout_cb,
                                                            weft_coro_ref (c), timeout_notify)
                      : weft_context_add_timeout (c->ctx, FAR_AWAY_MS, timeout_cb,
                                                  weft_coro_ref (c), timeout_notify),
      memory_order_relaxed);
  if (atomic_load_explicit (&c->timer, memory_order_relaxed) == 0 &&
      atomic_load (&c->state) == ST_WAITING && weft_context_is_destroyed (c->ctx))
    c->orphan = TRUE; /* nothing could bring it back: run() abandons it */
  switch_out (c, FALSE);
  /* (Running on the context: its timeout callback cannot clear this
   * meanwhile, so no exchange.) */
  guint timer = atomic_load_explicit (&c->timer, memory_order_relaxed);
  if (timer != 0)
    {
      weft_context_remove (c->ctx, timer);
      atomic_store_explicit (&c->timer, 0, memory_order_relaxed);
    }
  gint reason = atomic_load (&c->wake_reason);
  if (reason == WEFT_CORO_WAKE_INTERRUPT)
    atomic_store (&c->interrupt, FALSE);
  return reason;
}

/**
 * weft_coro_interrupt:
 * @self: a coroutine
 *
 * From any thread: the coroutine's current wait (or its next one, if it is
 * running) ends with -EINTR. Used for graceful shutdown.
 */
void
weft_coro_interrupt (WeftCoro *self)
{
  g_return_if_fail (self != NULL);
  atomic_store (&self->interrupt, TRUE);
  if (weft__coro_wake (self, WEFT_CORO_WAKE_INTERRUPT))
    return;
}

static WeftCoro *
require_current (const char *func)
{
  WeftCoro *c = weft__coro_current ();
  if (c == NULL)
    g_critical ("%s: not called from a coroutine", func);
  return c;
}

gint
weft__coro_reason_to_errno (gint reason)
{
  switch (reason)
    {
    case WEFT_CORO_WAKE_EVENT:
      return 0;
    case WEFT_CORO_WAKE_TIMEOUT:
      return -ETIMEDOUT;
    default:
      return -EINTR;
    }
}

/**
 * weft_coro_yield:
 *
 * Lets the context run what is queued, then continues (on any worker).
 *
 * Returns: 0, or -EINTR if interrupted
 */
gint
weft_coro_yield (void)
{
  WeftCoro *c = require_current (G_STRFUNC);
  g_return_val_if_fail (c != NULL, -EINVAL);
  if (!weft__coro_prepare_wait (c))
    return -EINTR;
  weft__coro_wake (c, WEFT_CORO_WAKE_EVENT); /* queued behind what is there */
  return weft__coro_reason_to_errno (weft__coro_wait (c, -1));
}

/**
 * weft_coro_sleep:
 * @ms: milliseconds
 *
 * Suspends the coroutine for @ms milliseconds: it resumes no sooner than
 * @ms after this call (unlike a timeout added from a callback, see
 * weft_context_add_timeout(), a coroutine's timed wait reads the clock).
 *
 * Returns: 0, or -EINTR if interrupted before
 */
gint
weft_coro_sleep (guint ms)
{
  WeftCoro *c = require_current (G_STRFUNC);
  g_return_val_if_fail (c != NULL, -EINVAL);
  if (!weft__coro_prepare_wait (c))
    return -EINTR;
  gint r = weft__coro_wait (c, (gint) MIN (ms, (guint) G_MAXINT));
  return r == WEFT_CORO_WAKE_TIMEOUT ? 0 : -EINTR;
}

/* The fd source holds a reference on the coroutine, not a pointer into
 * its stack: an abandoned coroutine's stack is freed by whichever thread
 * abandons it, while this callback may be running on a worker. */
static gboolean
fd_cb (gint fd, GIOCondition condition, gpointer data)
{
  WeftCoro *c = data;
  c->fd_revents = condition; /* read after the resume the wake posts */
  weft__coro_wake (c, WEFT_CORO_WAKE_EVENT);
  return G_SOURCE_REMOVE;
}

static void
fd_wait_notify (gpointer data)
{
  weft_coro_unref (data);
}

/**
 * weft_coro_wait_fd:
 * @fd: a file descriptor (not owned)
 * @events: what to wait for (%G_IO_IN, %G_IO_OUT)
 * @timeout_ms: milliseconds, or -1 for no limit
 * @revents: (out) (optional): what was ready
 *
 * Suspends the coroutine until @fd is ready for @events.
 *
 * Returns: 0, -ETIMEDOUT, -EINTR, or another negative errno if @fd cannot
 *   be watched
 */
gint
weft_coro_wait_fd (gint fd, GIOCondition events, gint timeout_ms, GIOCondition *revents)
{
  WeftCoro *c = require_current (G_STRFUNC);
  g_return_val_if_fail (c != NULL, -EINVAL);
  g_return_val_if_fail (fd >= 0, -EBADF);
  if (revents != NULL)
    *revents = 0;
  if (!weft__coro_prepare_wait (c))
    return -EINTR;
  GError *error = NULL;
  c->fd_revents = 0;
  c->fd_wait = weft_context_add_fd (c->ctx, fd, events, fd_cb, weft_coro_ref (c), fd_wait_notify,
                                    &error);
  if (c->fd_wait == 0)
    {
      atomic_store (&c->state, ST_RUNNING);
      g_clear_error (&error);
      return -EBADF; /* epoll refused it: closed, or not pollable */
    }
  gint reason = weft__coro_wait (c, timeout_ms);
  /* (Removed already if it fired: then this is a no-op.) The caller may
   * close @fd once we return. */
  weft_context_remove (c->ctx, c->fd_wait);
  c->fd_wait = 0;
  if (revents != NULL)
    *revents = c->fd_revents;
  return weft__coro_reason_to_errno (reason);
}

/**
 * weft_coro_read:
 * @fd: a non-blocking file descriptor
 * @buf: (out caller-allocates) (array length=len): where to read to
 * @len: at most this many bytes
 * @timeout_ms: milliseconds to wait in all if nothing is there, or -1
 *
 * Reads what is there, waiting (suspended) only if nothing is. A wake
 * whose bytes someone else took first does not restart the timeout.
 *
 * Returns: bytes read (0 at end of file), or a negative errno (-ETIMEDOUT,
 *   -EINTR, or the read's)
 */
gssize
weft_coro_read (gint fd, guint8 *buf, gsize len, gint timeout_ms)
{
  g_return_val_if_fail (buf != NULL || len == 0, -EINVAL);
  gint64 start = timeout_ms > 0 ? g_get_monotonic_time () : 0;
  for (;;)
    {
      ssize_t n = weft__sys_read (fd, buf, len);
      if (n >= 0)
        return n;
      int e = *weft_coro_errno_location ();
      if (e == EINTR)
        continue;
      if (e != EAGAIN && e != EWOULDBLOCK)
        return -e;
      gint r = weft_coro_wait_fd (fd, G_IO_IN, weft__coro_left_ms (timeout_ms, start), NULL);
      if (r < 0)
        return r;
    }
}

/**
 * weft_coro_write_all:
 * @fd: a non-blocking file descriptor
 * @buf: (array length=len): the bytes
 * @len: how many
 * @timeout_ms: milliseconds each wait for room may take, or -1
 *
 * Writes all of @buf, waiting (suspended) while the peer takes nothing.
 * A socket is written with MSG_NOSIGNAL (no SIGPIPE).
 *
 * Returns: @len, or a negative errno (-ETIMEDOUT, -EINTR, -EPIPE, ...)
 */
gssize
weft_coro_write_all (gint fd, const guint8 *buf, gsize len, gint timeout_ms)
{
  g_return_val_if_fail (buf != NULL || len == 0, -EINVAL);
  gsize done = 0;
  gboolean sock = TRUE;
  while (done < len)
    {
      ssize_t n = sock ? weft__sys_send (fd, buf + done, len - done, MSG_NOSIGNAL)
                       : weft__sys_write (fd, buf + done, len - done);
      if (n >= 0)
        {
          done += (gsize) n;
          continue;
        }
      int e = *weft_coro_errno_location ();
      if (e == ENOTSOCK && sock)
        {
          sock = FALSE;
          continue;
        }
      if (e == EINTR)
        continue;
      if (e != EAGAIN && e != EWOULDBLOCK)
        return -e;
      gint r = weft_coro_wait_fd (fd, G_IO_OUT, timeout_ms, NULL);
      if (r < 0)
        return r;
    }
  return (gssize) len;
}

/**
 * weft_coro_accept:
 * @fd: a non-blocking listening socket
 * @timeout_ms: milliseconds in all, or -1
 *
 * Accepts a connection, waiting (suspended) for one.
 *
 * Returns: the new socket (non-blocking, close-on-exec; the caller owns
 *   it), or a negative errno
 */
gint
weft_coro_accept (gint fd, gint timeout_ms)
{
  gint64 start = timeout_ms > 0 ? g_get_monotonic_time () : 0;
  for (;;)
    {
      int s = accept4 (fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (s >= 0)
        return s;
      int e = *weft_coro_errno_location ();
      if (e == EINTR || e == ECONNABORTED)
        continue;
      if (e != EAGAIN && e != EWOULDBLOCK)
        return -e;
      gint r = weft_coro_wait_fd (fd, G_IO_IN, weft__coro_left_ms (timeout_ms, start), NULL);
      if (r < 0)
        return r;
    }
}

/**
 * weft_coro_connect:
 * @fd: a non-blocking socket
 * @addr: (type gpointer): a struct sockaddr
 * @addr_len: its length
 * @timeout_ms: milliseconds, or -1
 *
 * Connects, waiting (suspended) for the connection to complete.
 *
 * Returns: 0, or a negative errno (-ETIMEDOUT, -EINTR, -ECONNREFUSED, ...)
 */
gint
weft_coro_connect (gint fd, gconstpointer addr, gsize addr_len, gint timeout_ms)
{
  g_return_val_if_fail (addr != NULL, -EINVAL);
  if (connect (fd, addr, (socklen_t) addr_len) == 0)
    return 0;
  int e = *weft_coro_errno_location ();
  if (e != EINPROGRESS && e != EINTR)
    return -e;
  gint r = weft_coro_wait_fd (fd, G_IO_OUT, timeout_ms, NULL);
  if (r < 0)
    return r;
  int err = 0;
  socklen_t l = sizeof err;
  if (getsockopt (fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0)
    return -*weft_coro_errno_location ();
  return -err;
}

/* ---- join --------------------------------------------------------------- */

/**
 * weft_coro_join:
 * @self: a coroutine (not the calling one)
 * @retval: (out) (optional) (transfer full): its result
 * @timeout_ms: milliseconds, or -1
 *
 * From a coroutine: waits (suspended) until @self has ended.
 *
 * Returns: 0 with *@retval set; -ECANCELED if it was abandoned with its
 *   context (no result); -ETIMEDOUT; -EINTR; -EDEADLK if @self is the
 *   calling coroutine
 */
gint
weft_coro_join (WeftCoro *self, gpointer *retval, gint timeout_ms)
{
  g_return_val_if_fail (self != NULL, -EINVAL);
  WeftCoro *c = require_current (G_STRFUNC);
  g_return_val_if_fail (c != NULL, -EINVAL);
  if (retval != NULL)
    *retval = NULL;
  if (c == self)
    return -EDEADLK;
  atomic_store (&self->joined, TRUE);
  for (;;)
    {
      pthread_mutex_lock (&self->lock);
      if (atomic_load (&self->ended))
        {
          pthread_mutex_unlock (&self->lock);
          break;
        }
      if (!weft__coro_prepare_wait (c))
        {
          pthread_mutex_unlock (&self->lock);
          return -EINTR;
        }
      WeftCoroWaiter w = { .coro = c };
      weft__coro_queue_push (&self->joiners, &w);
      weft__coro_set_wait_queue (c, &self->lock, &self->joiners, &w);
      pthread_mutex_unlock (&self->lock);
      gint reason = weft__coro_wait (c, timeout_ms);
      pthread_mutex_lock (&self->lock);
      if (w.queued)
        weft__coro_queue_remove (&self->joiners, &w);
      weft__coro_set_wait_queue (c, NULL, NULL, NULL);
      pthread_mutex_unlock (&self->lock);
      if (reason != WEFT_CORO_WAKE_EVENT)
        return weft__coro_reason_to_errno (reason);
    }
  if (!self->finished)
    return -ECANCELED;
  if (retval != NULL)
    *retval = self->retval;
  return 0;
}

/* ---- coroutine-local data ----------------------------------------------- */

/**
 * weft_coro_set_local:
 * @key: a key (any address)
 * @value: (nullable): the value
 * @destroy: (nullable): frees @value when replaced or when the coroutine
 *   ends
 *
 * Sets the running coroutine's value for @key.
 */
void
weft_coro_set_local (gconstpointer key, gpointer value, GDestroyNotify destroy)
{
  WeftCoro *c = require_current (G_STRFUNC);
  g_return_if_fail (c != NULL);
  if (c->locals == NULL)
    c->locals = g_array_new (FALSE, FALSE, sizeof (Local));
  for (guint i = 0; i < c->locals->len; i++)
    {
      Local *l = &g_array_index (c->locals, Local, i);
      if (l->key == key)
        {
          Local old = *l;
          l->value = value;
          l->destroy = destroy;
          if (old.destroy != NULL)
            old.destroy (old.value);
          return;
        }
    }
  Local l = { key, value, destroy };
  g_array_append_val (c->locals, l);
}

/**
 * weft_coro_get_local:
 * @key: a key
 *
 * Looks up the value weft_coro_set_local() stored for @key in the calling
 * coroutine. Only from a coroutine; elsewhere it logs a critical warning
 * and returns %NULL. The value stays owned by the coroutine.
 *
 * Returns: (transfer none) (nullable): the running coroutine's value for
 *   @key
 */
gpointer
weft_coro_get_local (gconstpointer key)
{
  WeftCoro *c = require_current (G_STRFUNC);
  g_return_val_if_fail (c != NULL, NULL);
  if (c->locals != NULL)
    for (guint i = 0; i < c->locals->len; i++)
      if (g_array_index (c->locals, Local, i).key == key)
        return g_array_index (c->locals, Local, i).value;
  return NULL;
}

/* ---- wait queues -------------------------------------------------------- */

void
weft__coro_queue_push (WeftCoroWaitQueue *q, WeftCoroWaiter *w)
{
  w->next = NULL;
  w->prev = q->tail;
  if (q->tail != NULL)
    q->tail->next = w;
  else
    q->head = w;
  q->tail = w;
  w->queued = TRUE;
}

void
weft__coro_queue_remove (WeftCoroWaitQueue *q, WeftCoroWaiter *w)
{
  if (w->prev != NULL)
    w->prev->next = w->next;
  else
    q->head = w->next;
  if (w->next != NULL)
    w->next->prev = w->prev;
  else
    q->tail = w->prev;
  w->prev = w->next = NULL;
  w->queued = FALSE;
}

gboolean
weft__coro_queue_wake_one (WeftCoroWaitQueue *q, WeftCoro **chosen)
{
  WeftCoroWaiter *w;
  while ((w = q->head) != NULL)
    {
      WeftCoro *c = w->coro;
      weft__coro_queue_remove (q, w);
      if (chosen != NULL)
        *chosen = c;
      if (weft__coro_wake (c, WEFT_CORO_WAKE_EVENT))
        return TRUE;
    }
  if (chosen != NULL)
    *chosen = NULL;
  return FALSE;
}
