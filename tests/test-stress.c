/* test-stress.c: many producers, many contexts, sources coming and going and
 * contexts replaced under load.
 *
 * WEFT_STRESS_JOBS sets the number of jobs (default 1,000,000). Producers
 * are paced by the mutators (one mutation per JOBS_PER_MUTATION jobs), so
 * the run takes about 1 s on two cores, under 5 s with TSan or ASan; the
 * default therefore stays the same in sanitizer builds (WT_SANITIZED in
 * weft-test-util.h is there should that change).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-test-util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#define N_PRODUCERS 8
#define N_MUTATORS 2
#define N_CONTEXTS 1000
#define MAX_BACKLOG 100000   /* producers pause while this many jobs are queued */
/* Producers are much faster than mutators; they pause so that there is a
 * mutation (add, remove, replace) for every this many jobs and the two
 * really interleave. */
#define JOBS_PER_MUTATION 100

#define DEFAULT_JOBS 1000000

/* Per context instance. Reference counted: the slot, every job and every
 * source hold one. */
typedef struct {
  atomic_int refs;
  atomic_int inside;                 /* callbacks of this context running now */
  /* Lane 0: weft_context_post(), lane 1: weft_context_post_front(). Each
   * lane keeps its order; front jobs may overtake normal ones. */
  gint64 last_seq[2][N_PRODUCERS];   /* plain: this context's callbacks only */
  gint64 next_seq[2][N_PRODUCERS];   /* plain: producer p only touches [.][p] */
} CtxState;

typedef struct {
  pthread_mutex_t lock;
  WeftContext *ctx;                  /* HOLDS: lock */
  CtxState *state;                   /* HOLDS: lock */
} Slot;

#define JOB_MAGIC 0x5eed5eedu

typedef struct {
  guint magic;
  guint producer;
  guint lane;
  CtxState *state;
  gint64 seq;
  atomic_int ran;
} Job;

static struct {
  WeftEngine *engine;
  Slot slots[N_CONTEXTS];
  atomic_bool producers_done;
  _Atomic guint64 mutations;

  _Atomic guint64 posted;            /* post calls made (accepted or not) */
  _Atomic guint64 post_refused;
  _Atomic guint64 ran;
  _Atomic guint64 notified;
  _Atomic guint64 dropped;           /* notified without having run */

  _Atomic guint64 sources_added;
  _Atomic guint64 add_refused;
  _Atomic guint64 sources_notified;
  _Atomic guint64 source_calls;
  _Atomic guint64 removes;
  _Atomic guint64 replaced;

  atomic_int overlap;
  atomic_int order_errors;
  atomic_int bad_magic;
} S;

static CtxState *
state_new (void)
{
  CtxState *st = g_new0 (CtxState, 1);
  atomic_init (&st->refs, 1);
  for (guint p = 0; p < N_PRODUCERS; p++)
    st->last_seq[0][p] = st->last_seq[1][p] = -1;
  return st;
}

static CtxState *
state_ref (CtxState *st)
{
  atomic_fetch_add (&st->refs, 1);
  return st;
}

static void
state_unref (CtxState *st)
{
  if (atomic_fetch_sub (&st->refs, 1) == 1)
    g_free (st);
}

/* A callback of @st's context starts; a second one at once counts in
 * @overlap (each test asserts its own). */
static void
enter_counting (CtxState *st, atomic_int *overlap)
{
  if (atomic_fetch_add (&st->inside, 1) != 0)
    atomic_fetch_add (overlap, 1);
}

static void
enter (CtxState *st)
{
  enter_counting (st, &S.overlap);
}

static void
leave (CtxState *st)
{
  atomic_fetch_sub (&st->inside, 1);
}

/* ---- jobs -------------------------------------------------------------- */

static void
job_run (gpointer data)
{
  Job *j = data;
  if (j->magic != JOB_MAGIC)
    {
      atomic_fetch_add (&S.bad_magic, 1);
      return;
    }
  CtxState *st = j->state;
  enter (st);
  if (st->last_seq[j->lane][j->producer] + 1 != j->seq)
    atomic_fetch_add (&S.order_errors, 1);
  st->last_seq[j->lane][j->producer] = j->seq;
  atomic_store (&j->ran, 1);
  leave (st);
  atomic_fetch_add (&S.ran, 1);
}

static void
job_notify (gpointer data)
{
  Job *j = data;
  if (j->magic != JOB_MAGIC)
    {
      atomic_fetch_add (&S.bad_magic, 1);
      return;
    }
  j->magic = 0;
  if (!atomic_load (&j->ran))
    atomic_fetch_add (&S.dropped, 1);
  state_unref (j->state);
  g_free (j);
  atomic_fetch_add (&S.notified, 1);
}

/* ---- sources ----------------------------------------------------------- */

/* A timeout or idle. */
typedef struct {
  CtxState *state;
  atomic_int notified;
} Src;

static gboolean
source_cb (gpointer data)
{
  Src *src = data;
  enter (src->state);
  atomic_fetch_add (&S.source_calls, 1);
  leave (src->state);
  return G_SOURCE_CONTINUE;
}

static gboolean
oneshot_cb (gpointer data)
{
  source_cb (data);
  return G_SOURCE_REMOVE;
}

static void
source_notify (gpointer data)
{
  Src *src = data;
  if (atomic_fetch_add (&src->notified, 1) != 0)
    {
      atomic_fetch_add (&S.bad_magic, 1);   /* notified twice */
      return;
    }
  state_unref (src->state);
  g_free (src);
  atomic_fetch_add (&S.sources_notified, 1);
}

/* ---- slots ------------------------------------------------------------- */

/* Returns the slot's context with a reference, and its state with one. */
static WeftContext *
slot_get (guint i, CtxState **state)
{
  Slot *s = &S.slots[i];
  pthread_mutex_lock (&s->lock);
  WeftContext *ctx = weft_context_ref (s->ctx);
  *state = state_ref (s->state);
  pthread_mutex_unlock (&s->lock);
  return ctx;
}

static void
slot_fill (guint i)
{
  Slot *s = &S.slots[i];
  s->ctx = weft_context_new (S.engine);
  s->state = state_new ();
  weft_context_dispatch (s->ctx);
}

/* Replaces the slot's context by a new one; the old one is destroyed
 * explicitly or just unreferenced (producers may still hold it). */
static void
slot_replace (guint i, gboolean destroy)
{
  Slot *s = &S.slots[i];
  WeftContext *fresh = weft_context_new (S.engine);
  CtxState *fresh_state = state_new ();
  weft_context_dispatch (fresh);

  pthread_mutex_lock (&s->lock);
  WeftContext *old = s->ctx;
  CtxState *old_state = s->state;
  s->ctx = fresh;
  s->state = fresh_state;
  pthread_mutex_unlock (&s->lock);

  if (destroy)
    weft_context_destroy (old);
  weft_context_unref (old);
  state_unref (old_state);
  atomic_fetch_add (&S.replaced, 1);
}

/* ---- threads ----------------------------------------------------------- */

typedef struct {
  guint index;
  guint64 n_jobs;
} Producer;

static gpointer
producer_thread (gpointer data)
{
  Producer *p = data;
  guint64 rng = 0x9e3779b97f4a7c15ull * (p->index + 1);

  for (guint64 k = 0; k < p->n_jobs; k++)
    {
      if ((k & 63) == 0)
        {
          while (atomic_load (&S.posted) - atomic_load (&S.notified) > MAX_BACKLOG)
            g_usleep (100);
          while (atomic_load (&S.posted) > (atomic_load (&S.mutations) + 1) * JOBS_PER_MUTATION)
            g_usleep (20);
        }

      CtxState *st;
      WeftContext *ctx = slot_get (wt_rand_below (&rng, N_CONTEXTS), &st);
      Job *j = g_new (Job, 1);
      j->magic = JOB_MAGIC;
      j->producer = p->index;
      j->lane = (k % 16 == 0) ? 1 : 0;
      j->state = st;                                /* the job owns this reference */
      j->seq = st->next_seq[j->lane][p->index]++;   /* only this thread touches it */
      atomic_init (&j->ran, 0);

      atomic_fetch_add (&S.posted, 1);
      gboolean ok = j->lane
                      ? weft_context_post_front (ctx, job_run, j, job_notify)
                      : weft_context_post (ctx, job_run, j, job_notify);
      if (!ok)
        atomic_fetch_add (&S.post_refused, 1);
      weft_context_unref (ctx);
    }
  return NULL;
}

typedef struct {
  WeftContext *ctx;
  guint id;
} Added;

static gpointer
mutator_thread (gpointer data)
{
  guint index = GPOINTER_TO_UINT (data);
  guint64 rng = 0xdeadbeefcafef00dull ^ (index + 1);
  GArray *added = g_array_new (FALSE, FALSE, sizeof (Added));

  while (!atomic_load (&S.producers_done))
    {
      guint op = wt_rand_below (&rng, 100);
      guint i = wt_rand_below (&rng, N_CONTEXTS);
      atomic_fetch_add (&S.mutations, 1);

      if (op < 40)
        {
          Src *src = g_new0 (Src, 1);
          WeftContext *ctx = slot_get (i, &src->state);
          guint id;
          atomic_fetch_add (&S.sources_added, 1);
          if (op < 15)
            id = weft_context_add_timeout_us (ctx, 1000 + wt_rand_below (&rng, 4000), source_cb,
                                              src, source_notify);
          else if (op < 25)
            id = weft_context_add_timeout_us (ctx, wt_rand_below (&rng, 2000), oneshot_cb, src,
                                              source_notify);
          else
            id = weft_context_add_idle (ctx, source_cb, src, source_notify);
          if (id == 0)
            {
              /* The context was destroyed by a replacement after we took
               * it. A refused add has called the notify (documented), so
               * @src is freed already: the end's count of notifies against
               * adds checks that it ran, once. */
              atomic_fetch_add (&S.add_refused, 1);
              weft_context_unref (ctx);
              continue;
            }
          Added a = { ctx, id };   /* keeps the context reference */
          g_array_append_val (added, a);
        }
      else if (op < 85)
        {
          if (added->len == 0)
            continue;
          guint k = wt_rand_below (&rng, added->len);
          Added a = g_array_index (added, Added, k);
          g_array_remove_index_fast (added, k);
          weft_context_remove (a.ctx, a.id);   /* FALSE if it already ended */
          atomic_fetch_add (&S.removes, 1);
          weft_context_unref (a.ctx);
        }
      else
        {
          slot_replace (i, op < 92);
        }
      if (added->len > 64)
        {
          Added a = g_array_index (added, Added, 0);
          g_array_remove_index_fast (added, 0);
          weft_context_remove (a.ctx, a.id);
          weft_context_unref (a.ctx);
        }
      g_usleep (50);   /* pace: the producers wait for mutations anyway */
    }

  /* Leave half of the sources for context destruction to drop. */
  for (guint k = 0; k < added->len; k++)
    {
      Added a = g_array_index (added, Added, k);
      if (k % 2 == 0)
        weft_context_remove (a.ctx, a.id);
      weft_context_unref (a.ctx);
    }
  g_array_unref (added);
  return NULL;
}

static guint64
stress_jobs (void)
{
  const char *env = g_getenv ("WEFT_STRESS_JOBS");
  if (env != NULL && *env != '\0')
    {
      guint64 n = g_ascii_strtoull (env, NULL, 10);
      if (n > 0)
        return n;
    }
  return DEFAULT_JOBS;
}

static void
test_post_remove_unref (void)
{
  g_test_summary ("8 threads post jobs into 1000 contexts while 2 threads add and remove "
                  "timeouts and idles and replace contexts: per-context per-producer order "
                  "holds, callbacks of a context never overlap, and every job and source "
                  "is notified exactly once (run + dropped == posted)");

  guint64 n_jobs = stress_jobs ();
  guint n_workers = MAX (2, g_get_num_processors ());
  g_test_message ("%" G_GUINT64_FORMAT " jobs, %u workers", n_jobs, n_workers);

  memset (&S, 0, sizeof S);
  S.engine = wt_engine_new (n_workers);
  for (guint i = 0; i < N_CONTEXTS; i++)
    {
      pthread_mutex_init (&S.slots[i].lock, NULL);
      slot_fill (i);
    }

  Producer producers[N_PRODUCERS];
  GThread *pt[N_PRODUCERS], *mt[N_MUTATORS];
  for (guint m = 0; m < N_MUTATORS; m++)
    mt[m] = g_thread_new ("mutator", mutator_thread, GUINT_TO_POINTER (m));
  for (guint p = 0; p < N_PRODUCERS; p++)
    {
      producers[p].index = p;
      producers[p].n_jobs = n_jobs / N_PRODUCERS + (p < n_jobs % N_PRODUCERS ? 1 : 0);
      pt[p] = g_thread_new ("producer", producer_thread, &producers[p]);
    }
  for (guint p = 0; p < N_PRODUCERS; p++)
    g_thread_join (pt[p]);
  atomic_store (&S.producers_done, TRUE);
  for (guint m = 0; m < N_MUTATORS; m++)
    g_thread_join (mt[m]);

  g_assert_cmpuint (atomic_load (&S.posted), ==, n_jobs);

  /* Let the queues drain, with the contexts alive. */
  gint64 deadline = g_get_monotonic_time () + 120 * G_USEC_PER_SEC;
  while (atomic_load (&S.notified) < atomic_load (&S.posted) && g_get_monotonic_time () < deadline)
    g_usleep (1000);
  g_assert_cmpuint (atomic_load (&S.notified), ==, atomic_load (&S.posted));

  /* Drop every context: their remaining sources get notified. */
  for (guint i = 0; i < N_CONTEXTS; i++)
    {
      weft_context_unref (S.slots[i].ctx);
      state_unref (S.slots[i].state);
      pthread_mutex_destroy (&S.slots[i].lock);
    }
  WT_WAIT_UNTIL (atomic_load (&S.sources_notified) == atomic_load (&S.sources_added)
                 && wt_stats (S.engine).n_contexts == 0);

  g_test_message ("posted %" G_GUINT64_FORMAT ", ran %" G_GUINT64_FORMAT ", dropped %"
                  G_GUINT64_FORMAT ", refused %" G_GUINT64_FORMAT "; sources added %"
                  G_GUINT64_FORMAT " (refused %" G_GUINT64_FORMAT "), calls %" G_GUINT64_FORMAT
                  ", removes %" G_GUINT64_FORMAT
                  "; contexts replaced %" G_GUINT64_FORMAT ", mutations %" G_GUINT64_FORMAT,
                  atomic_load (&S.posted), atomic_load (&S.ran), atomic_load (&S.dropped),
                  atomic_load (&S.post_refused), atomic_load (&S.sources_added),
                  atomic_load (&S.add_refused), atomic_load (&S.source_calls),
                  atomic_load (&S.removes),
                  atomic_load (&S.replaced), atomic_load (&S.mutations));

  g_assert_cmpint (atomic_load (&S.bad_magic), ==, 0);
  g_assert_cmpint (atomic_load (&S.overlap), ==, 0);
  g_assert_cmpint (atomic_load (&S.order_errors), ==, 0);
  g_assert_cmpuint (atomic_load (&S.notified), ==, atomic_load (&S.posted));
  g_assert_cmpuint (atomic_load (&S.ran) + atomic_load (&S.dropped), ==, atomic_load (&S.posted));
  g_assert_cmpuint (atomic_load (&S.sources_notified), ==, atomic_load (&S.sources_added));
  g_assert_cmpuint (wt_stats (S.engine).n_contexts, ==, 0);
  g_assert_cmpuint (atomic_load (&S.replaced), >, 0);

  weft_engine_unref (S.engine);
  S.engine = NULL;
}

/* ---- fd readiness under removal and destruction ------------------------ */

/* Readiness of a context with no queued work runs on the worker that polled
 * it, without the inbox (all of them with one worker, the first of a batch
 * with more): these run the fd sources of many contexts under writes while
 * other threads remove sources, destroy and replace contexts and post jobs
 * into them. */

#define FD_CONTEXTS 64
#define FD_WRITERS 3
#define FD_MUTATORS 2
#define FD_PER_CONTEXT 3

/* A watched pipe. References: its source (dropped by the notify) and each
 * writer while it writes; the last one closes both ends, so a write never
 * reaches a number reused by another pipe. */
typedef struct {
  atomic_int refs;
  int rd, wr;
  CtxState *state;              /* the context's: overlap with its jobs */
  atomic_int notified;
  atomic_int removed_done;      /* set once weft_context_remove() returned */
  atomic_int late;              /* callbacks that came in after that */
  atomic_int drop_next;         /* the callback returns G_SOURCE_REMOVE */
} FdPipe;

typedef struct {
  pthread_mutex_t lock;
  WeftContext *ctx;             /* HOLDS: lock */
  CtxState *state;              /* HOLDS: lock */
  FdPipe *pipe[FD_PER_CONTEXT]; /* HOLDS: lock; with a reference */
  guint id[FD_PER_CONTEXT];     /* HOLDS: lock; 0: none */
} FdSlot;

static struct {
  WeftEngine *engine;
  FdSlot slots[FD_CONTEXTS];
  atomic_bool done;
  _Atomic guint64 added, notified, calls, bytes_read, removes, replaced, jobs_posted, jobs_done;
  atomic_int overlap, after_remove, twice;
} F;

/* enter() for this test: the overlaps go to F. */
static void
fd_enter (CtxState *st)
{
  enter_counting (st, &F.overlap);
}

static FdPipe *
fdpipe_ref (FdPipe *p)
{
  atomic_fetch_add (&p->refs, 1);
  return p;
}

static void
fdpipe_unref (FdPipe *p)
{
  if (atomic_fetch_sub (&p->refs, 1) != 1)
    return;
  close (p->rd);
  close (p->wr);
  state_unref (p->state);
  g_free (p);
}

static gboolean
fdpipe_cb (gint fd, GIOCondition cond, gpointer data)
{
  FdPipe *p = data;
  /* weft_context_remove() from another thread: once it returned, no
   * callback starts. One that had started (the library's dispatch began)
   * may still come in here after the remover's flag; a second one may not. */
  if (atomic_load (&p->removed_done) && atomic_fetch_add (&p->late, 1) >= 1)
    atomic_fetch_add (&F.after_remove, 1);
  fd_enter (p->state);
  char buf[256];
  ssize_t n;
  while ((n = read (fd, buf, sizeof buf)) > 0)
    atomic_fetch_add (&F.bytes_read, (guint64) n);
  atomic_fetch_add (&F.calls, 1);
  leave (p->state);
  return atomic_load (&p->drop_next) ? G_SOURCE_REMOVE : G_SOURCE_CONTINUE;
}

static void
fdpipe_notify (gpointer data)
{
  FdPipe *p = data;
  if (atomic_fetch_add (&p->notified, 1) != 0)
    atomic_fetch_add (&F.twice, 1);
  atomic_fetch_add (&F.notified, 1);
  fdpipe_unref (p);
}

/* Adds a watched pipe to slot @i's context; HOLDS: the slot's lock. */
static void
fdslot_add_unlocked (FdSlot *s, guint k, guint64 *rng)
{
  FdPipe *p = g_new0 (FdPipe, 1);
  int fds[2];
  g_assert_no_errno (pipe2 (fds, O_NONBLOCK | O_CLOEXEC));
  p->rd = fds[0];
  p->wr = fds[1];
  atomic_init (&p->refs, 2); /* the source's and the slot's */
  p->state = state_ref (s->state);
  atomic_init (&p->drop_next, wt_rand_below (rng, 8) == 0);
  GError *error = NULL;
  atomic_fetch_add (&F.added, 1);
  guint id = weft_context_add_fd (s->ctx, p->rd, G_IO_IN, fdpipe_cb, p, fdpipe_notify, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (id, >, 0);
  s->pipe[k] = p;
  s->id[k] = id;
}

static void
fdslot_fill_unlocked (FdSlot *s, guint64 *rng)
{
  s->ctx = weft_context_new (F.engine);
  s->state = state_new ();
  for (guint k = 0; k < FD_PER_CONTEXT; k++)
    fdslot_add_unlocked (s, k, rng);
  weft_context_dispatch (s->ctx);
}

static gpointer
fd_writer_thread (gpointer data)
{
  guint64 rng = 0x51ed27cbu ^ GPOINTER_TO_UINT (data);
  while (!atomic_load (&F.done))
    {
      FdSlot *s = &F.slots[wt_rand_below (&rng, FD_CONTEXTS)];
      guint k = wt_rand_below (&rng, FD_PER_CONTEXT);
      pthread_mutex_lock (&s->lock);
      FdPipe *p = s->pipe[k] != NULL ? fdpipe_ref (s->pipe[k]) : NULL;
      pthread_mutex_unlock (&s->lock);
      if (p == NULL)
        continue;
      /* (EAGAIN on a full pipe is fine: its reader is behind.) */
      if (write (p->wr, "x", 1) < 0)
        g_assert_cmpint (errno, ==, EAGAIN);
      fdpipe_unref (p);
    }
  return NULL;
}

static void
fd_job (gpointer data)
{
  CtxState *st = data;
  fd_enter (st);
  atomic_fetch_add (&F.jobs_done, 1);
  leave (st);
}

static void
fd_job_notify (gpointer data)
{
  state_unref (data);
}

static gpointer
fd_mutator_thread (gpointer data)
{
  guint64 rng = 0xfeedf00du ^ GPOINTER_TO_UINT (data);
  while (!atomic_load (&F.done))
    {
      FdSlot *s = &F.slots[wt_rand_below (&rng, FD_CONTEXTS)];
      guint op = wt_rand_below (&rng, 100);
      guint k = wt_rand_below (&rng, FD_PER_CONTEXT);
      pthread_mutex_lock (&s->lock);
      if (op < 50)
        {
          /* A job beside the readiness: never at the same time. */
          atomic_fetch_add (&F.jobs_posted, 1);
          weft_context_post (s->ctx, fd_job, state_ref (s->state), fd_job_notify);
        }
      else if (op < 85)
        {
          /* Remove one source from this (a foreign) thread and watch a
           * fresh pipe instead. FALSE: its callback removed it. */
          FdPipe *p = s->pipe[k];
          weft_context_remove (s->ctx, s->id[k]);
          atomic_store (&p->removed_done, 1);
          atomic_fetch_add (&F.removes, 1);
          fdpipe_unref (p);
          fdslot_add_unlocked (s, k, &rng);
        }
      else
        {
          /* Destroy (or just drop) the context with its sources, queued
           * readiness and jobs, and put a new one in its place. */
          WeftContext *old = s->ctx;
          CtxState *old_state = s->state;
          if (op < 93)
            weft_context_destroy (old);
          weft_context_unref (old);
          for (guint j = 0; j < FD_PER_CONTEXT; j++)
            fdpipe_unref (s->pipe[j]);
          state_unref (old_state);
          fdslot_fill_unlocked (s, &rng);
          atomic_fetch_add (&F.replaced, 1);
        }
      pthread_mutex_unlock (&s->lock);
      g_usleep (20);
    }
  return NULL;
}

static void
test_fd_remove_destroy (gconstpointer data)
{
  guint n_workers = GPOINTER_TO_UINT (data);
  g_test_summary ("Pipes written by 3 threads are read by fd sources of 64 contexts on an "
                  "engine of 1 or 2 workers, while 2 threads post jobs into the contexts, "
                  "remove sources and destroy contexts: a context's callbacks never "
                  "overlap, no callback starts after weft_context_remove() returned, and "
                  "every source is notified exactly once");

  memset (&F, 0, sizeof F);
  F.engine = wt_engine_new (n_workers);
  guint64 rng = 42;
  for (guint i = 0; i < FD_CONTEXTS; i++)
    {
      pthread_mutex_init (&F.slots[i].lock, NULL);
      fdslot_fill_unlocked (&F.slots[i], &rng);
    }
  GThread *wt[FD_WRITERS], *mt[FD_MUTATORS];
  for (guint i = 0; i < FD_WRITERS; i++)
    wt[i] = g_thread_new ("writer", fd_writer_thread, GUINT_TO_POINTER (i));
  for (guint i = 0; i < FD_MUTATORS; i++)
    mt[i] = g_thread_new ("mutator", fd_mutator_thread, GUINT_TO_POINTER (i));
  /* Until enough has happened (the sanitizers are slower), within a bound. */
  gint64 until = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  while ((atomic_load (&F.calls) < 20000 || atomic_load (&F.replaced) < 200) &&
         g_get_monotonic_time () < until)
    g_usleep (10000);
  atomic_store (&F.done, TRUE);
  for (guint i = 0; i < FD_WRITERS; i++)
    g_thread_join (wt[i]);
  for (guint i = 0; i < FD_MUTATORS; i++)
    g_thread_join (mt[i]);

  for (guint i = 0; i < FD_CONTEXTS; i++)
    {
      FdSlot *s = &F.slots[i];
      weft_context_unref (s->ctx);
      for (guint k = 0; k < FD_PER_CONTEXT; k++)
        fdpipe_unref (s->pipe[k]);
      state_unref (s->state);
      pthread_mutex_destroy (&s->lock);
    }
  WT_WAIT_UNTIL (atomic_load (&F.notified) == atomic_load (&F.added) &&
                 wt_stats (F.engine).n_contexts == 0);
  g_test_message ("%u workers: %" G_GUINT64_FORMAT " callbacks, %" G_GUINT64_FORMAT
                  " bytes, %" G_GUINT64_FORMAT " sources, %" G_GUINT64_FORMAT " removes, %"
                  G_GUINT64_FORMAT " contexts replaced, %" G_GUINT64_FORMAT " of %"
                  G_GUINT64_FORMAT " jobs ran",
                  n_workers, atomic_load (&F.calls), atomic_load (&F.bytes_read),
                  atomic_load (&F.added), atomic_load (&F.removes), atomic_load (&F.replaced),
                  atomic_load (&F.jobs_done), atomic_load (&F.jobs_posted));
  g_assert_cmpuint (atomic_load (&F.calls), >=, 20000);
  g_assert_cmpuint (atomic_load (&F.replaced), >=, 200);
  g_assert_cmpint (atomic_load (&F.overlap), ==, 0);
  g_assert_cmpint (atomic_load (&F.after_remove), ==, 0);
  g_assert_cmpint (atomic_load (&F.twice), ==, 0);
  g_assert_cmpuint (atomic_load (&F.notified), ==, atomic_load (&F.added));
  weft_engine_unref (F.engine);
  F.engine = NULL;
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/stress/post-remove-unref", test_post_remove_unref);
  g_test_add_data_func ("/stress/fd-remove-destroy/1-worker", GUINT_TO_POINTER (1),
                        test_fd_remove_destroy);
  g_test_add_data_func ("/stress/fd-remove-destroy/2-workers", GUINT_TO_POINTER (2),
                        test_fd_remove_destroy);
  return g_test_run ();
}
