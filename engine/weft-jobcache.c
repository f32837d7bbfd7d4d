/* weft-jobcache.c: job nodes without malloc on the hot path.
 *
 * Each thread keeps a free list of job nodes. A thread that frees more than
 * it allocates (a worker) hands full magazines of MAG nodes to a global
 * depot; a thread that allocates more than it frees (a producer) takes them
 * back. The depot lock is taken once per MAG posts, so a post costs a
 * pointer pop. Under AddressSanitizer the cache is bypassed so that a use
 * after free of a job is caught.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-engine-private.h"

#if defined(__SANITIZE_ADDRESS__)
#define WEFT_JOBCACHE_DISABLED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_JOBCACHE_DISABLED 1
#endif
#endif

#ifndef WEFT_JOBCACHE_DISABLED

#define MAG 256

typedef struct _Mag Mag;
struct _Mag {
  Mag *next;        /* depot link */
  WeftJob *first;   /* MAG nodes linked through node.next */
};

typedef struct {
  WeftJob *free;    /* linked through node.next (plain use, this thread only) */
  guint n_free;
} Cache;

static WeftMutex depot_lock = PTHREAD_MUTEX_INITIALIZER;
static Mag *depot_full;    /* HOLDS: depot_lock */
static Mag *depot_empty;   /* HOLDS: depot_lock; Mag shells to reuse */

static void cache_release (gpointer data);
static GPrivate cache_key = G_PRIVATE_INIT (cache_release);
static _Thread_local WEFT_TLS_IE Cache *tls_cache;

static inline WeftJob *
job_next (WeftJob *j)
{
  return (WeftJob *) atomic_load_explicit (&j->node.next, memory_order_relaxed);
}

static inline void
job_set_next (WeftJob *j, WeftJob *n)
{
  atomic_store_explicit (&j->node.next, &n->node, memory_order_relaxed);
}

static Cache *
cache_get (void)
{
  Cache *c = tls_cache;
  if (G_LIKELY (c != NULL))
    return c;
  c = g_new0 (Cache, 1);
  tls_cache = c;
  g_private_set (&cache_key, c); /* returns the nodes when the thread exits */
  return c;
}

/* Moves MAG nodes from the head of @c's list into the depot. */
static void
depot_put (Cache *c)
{
  WeftJob *first = c->free, *last = first;
  for (guint i = 1; i < MAG; i++)
    last = job_next (last);
  c->free = job_next (last);
  c->n_free -= MAG;
  job_set_next (last, NULL);

  weft__mutex_lock (&depot_lock);
  Mag *m = depot_empty;
  if (m != NULL)
    depot_empty = m->next;
  else
    m = g_new (Mag, 1);
  m->first = first;
  m->next = depot_full;
  depot_full = m;
  weft__mutex_unlock (&depot_lock);
}

static void
cache_refill (Cache *c)
{
  weft__mutex_lock (&depot_lock);
  Mag *m = depot_full;
  if (m != NULL)
    {
      depot_full = m->next;
      c->free = m->first;
      c->n_free = MAG;
      m->next = depot_empty;
      depot_empty = m;
    }
  weft__mutex_unlock (&depot_lock);
  if (m != NULL)
    return;

  /* Nodes are never returned to malloc: the cache holds at most the peak
   * number of jobs queued at once. */
  WeftJob *slab = g_new (WeftJob, MAG);
  for (guint i = 0; i < MAG - 1; i++)
    job_set_next (&slab[i], &slab[i + 1]);
  job_set_next (&slab[MAG - 1], NULL);
  c->free = slab;
  c->n_free = MAG;
}

static void
cache_release (gpointer data)
{
  Cache *c = data;
  while (c->n_free >= MAG)
    depot_put (c);
  /* The remainder (< MAG) goes to the depot as a short magazine would break
   * the MAG-count invariant; keep it simple and park it on the full list
   * padded by fresh nodes. */
  if (c->n_free > 0)
    {
      while (c->n_free < MAG)
        {
          WeftJob *j = g_new (WeftJob, 1);
          job_set_next (j, c->free);
          c->free = j;
          c->n_free++;
        }
      depot_put (c);
    }
  if (tls_cache == c)
    tls_cache = NULL;
  g_free (c);
}

WeftJob *
weft__job_alloc (void)
{
  Cache *c = cache_get ();
  if (G_UNLIKELY (c->free == NULL))
    cache_refill (c);
  WeftJob *j = c->free;
  c->free = job_next (j);
  c->n_free--;
  /* Recycled nodes were last touched by a consumer on another CPU: ask for
   * the next one's line now, for writing, so the next post does not wait. */
  if (c->free != NULL)
    __builtin_prefetch (c->free, 1);
  j->node.kind = WEFT_NODE_JOB;
  j->node.flags = 0;
  return j;
}

void
weft__job_free (WeftJob *job)
{
  Cache *c = cache_get ();
  job_set_next (job, c->free);
  c->free = job;
  if (G_UNLIKELY (++c->n_free >= 2 * MAG))
    depot_put (c);
}

#else /* WEFT_JOBCACHE_DISABLED */

WeftJob *
weft__job_alloc (void)
{
  WeftJob *j = g_new (WeftJob, 1);
  j->node.kind = WEFT_NODE_JOB;
  j->node.flags = 0;
  return j;
}

void
weft__job_free (WeftJob *job)
{
  g_free (job);
}

#endif

void
weft__job_finish (WeftJob *job, gboolean run)
{
  WeftJobFunc func = job->func;
  gpointer data = job->user_data;
  GDestroyNotify notify = job->notify;

  weft__job_free (job);
  if (run)
    func (data);
  if (notify != NULL)
    notify (data);
}
