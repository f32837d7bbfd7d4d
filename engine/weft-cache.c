/* weft-cache.c: fixed-size objects without malloc on the hot path: posted
 * jobs, and timeout sources; and spares per thread of the HTTP layer's
 * per-request blocks (weft__spare_take()).
 *
 * Each thread keeps an array of free objects per size class (jobs without
 * a notify, jobs with one, timeouts). A thread that frees more
 * than it allocates (a worker running jobs) hands magazines of MAG objects
 * to the class's depot; a thread that allocates more than it frees (a
 * producer) takes them back. The depot lock is taken once per MAG
 * allocations, so an allocation is an array pop. Objects are never given
 * back to malloc: a class holds at most its peak number of live objects,
 * plus the part of its last region not handed out yet (address space only
 * until touched). New objects are carved from regions that double in size
 * up to REGION_MAX: a malloc per MAG objects grew the arena by one
 * mprotect() each (0.8 us on our VMs, 3 ns of a timeout's insert).
 * Under AddressSanitizer the cache is bypassed so a use after free is
 * caught; under Valgrind too (checked at load, unless
 * WEFT_CACHE_UNDER_VALGRIND=1), so memcheck sees each object's own life: a leaked job is a leak, and the slabs, reached only
 * through pointers into their middle, are not "possibly lost".
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-context-private.h"

#ifdef WEFT_HAVE_VALGRIND
#include <valgrind/valgrind.h>
#endif

#include "weft-sanitizers.h"
#ifdef WEFT_ASAN
#define WEFT_CACHE_DISABLED 1
#endif

_Thread_local WEFT_TLS_IE gpointer weft__spare_requests[WEFT_SPARE_REQUESTS];
_Thread_local WEFT_TLS_IE guint weft__spare_requests_n;
_Thread_local WEFT_TLS_IE gpointer weft__spare_chunk;
_Thread_local WEFT_TLS_IE WeftCache *weft__tls_caches[WEFT_CACHE_N];
_Thread_local WEFT_TLS_IE gboolean weft__spares_on;

static const gsize class_size[WEFT_CACHE_N] = {
  [WEFT_CACHE_JOB] = sizeof (WeftJob),
  [WEFT_CACHE_JOB_NOTIFY] = sizeof (WeftJobNotify),
  [WEFT_CACHE_TIMEOUT] = sizeof (WeftTimeoutSource),
};

#ifndef WEFT_CACHE_DISABLED

#define MAG WEFT_CACHE_MAG
/* Magazines of new objects per region, at most. */
#define REGION_MAX_MAGS 64

typedef WeftCache Cache;

typedef struct _Mag Mag;
struct _Mag {
  Mag *next;             /* depot link */
  gpointer objs[MAG];    /* full: MAG objects; on the empty list: none */
};

typedef struct {
  WeftMutex lock;
  Mag *full;        /* HOLDS: lock */
  Mag *empty;       /* HOLDS: lock; shells to reuse */
  char *region;     /* HOLDS: lock; objects never handed out */
  guint region_mags;      /* HOLDS: lock; magazines left in region */
  guint next_region_mags; /* HOLDS: lock; size of the next region */
  Mag *partial;     /* HOLDS: lock; (nullable) leftovers of exited threads */
  guint partial_n;  /* HOLDS: lock; objects in partial, fewer than MAG */
} Depot;

static Depot depots[WEFT_CACHE_N] = {
  [WEFT_CACHE_JOB] = { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, NULL, 0, 1 },
  [WEFT_CACHE_JOB_NOTIFY] = { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, NULL, 0, 1 },
  [WEFT_CACHE_TIMEOUT] = { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, NULL, 0, 1 },
};

#ifdef WEFT_HAVE_VALGRIND
static gboolean bypass; /* set before any allocation, never changed */

/* WEFT_CACHE_UNDER_VALGRIND=1 keeps the caches and spares on under
 * Valgrind: for counting instructions with callgrind
 * (bench/http-instructions) as the code runs outside it. */
__attribute__ ((constructor)) static void
check_valgrind (void)
{
  bypass = RUNNING_ON_VALGRIND != 0 && g_strcmp0 (g_getenv ("WEFT_CACHE_UNDER_VALGRIND"), "1") != 0;
}
#else
#define bypass FALSE
#endif

static void cache_release (gpointer data);
static GPrivate cache_keys[WEFT_CACHE_N] = {
  G_PRIVATE_INIT (cache_release),
  G_PRIVATE_INIT (cache_release),
  G_PRIVATE_INIT (cache_release),
};
#define tls_caches weft__tls_caches

static Cache *
cache_get (WeftCacheKind kind)
{
  Cache *c = tls_caches[kind];
  if (G_LIKELY (c != NULL))
    return c;
  /* Whole lines of its own: the caches of other threads are written as
   * often as this one (measured: a worker's array end sharing a line with
   * a producer's count tripled the producer's time per post). */
  c = weft__aligned_alloc (1, (sizeof (Cache) + 63) & ~(gsize) 63, 64, TRUE);
  c->kind = kind;
  tls_caches[kind] = c;
  g_private_set (&cache_keys[kind], c); /* gives the objects back at thread exit */
  return c;
}

/* Moves the MAG objects at the bottom of @c's array (the ones freed
 * longest ago, the coldest in this CPU's cache) into the depot. */
static void
depot_put (Cache *c)
{
  Depot *d = &depots[c->kind];
  Mag *m = NULL;

  weft__mutex_lock (&d->lock);
  if (G_UNLIKELY (d->empty == NULL))
    {
      /* Outside the lock: other threads' refills would wait on malloc. */
      weft__mutex_unlock (&d->lock);
      m = g_new (Mag, 1);
      weft__mutex_lock (&d->lock);
    }
  else
    {
      m = d->empty;
      d->empty = m->next;
    }
  /* One hold of the lock per magazine: the copy is 2 KiB. */
  memcpy (m->objs, c->objs, sizeof m->objs);
  m->next = d->full;
  d->full = m;
  weft__mutex_unlock (&d->lock);

  c->n -= MAG;
  memmove (c->objs, c->objs + MAG, c->n * sizeof c->objs[0]);
}

/* Hints the lines of the objects the next allocations take: the ones
 * weft__cache_alloc() would have asked for earlier. */
static void
hint_top (Cache *c)
{
  for (guint i = 1; i <= WEFT_CACHE_AHEAD && i <= c->n; i++)
    __builtin_prefetch (c->objs[c->n - i], 1);
}

/* Fills @c's empty array with MAG objects: a full magazine from the depot,
 * or new objects from the class's region. */
static void
cache_refill (Cache *c)
{
  Depot *d = &depots[c->kind];
  gsize size = class_size[c->kind];
  char *fresh = NULL;
  guint fresh_mags = 0;

  for (;;)
    {
      weft__mutex_lock (&d->lock);
      Mag *m = d->full;
      if (m != NULL)
        {
          d->full = m->next;
          memcpy (c->objs, m->objs, sizeof m->objs);
          c->n = MAG;
          m->next = d->empty;
          d->empty = m;
          weft__mutex_unlock (&d->lock);
          break;
        }
      if (d->region_mags == 0 && fresh != NULL)
        {
          d->region = fresh;
          d->region_mags = fresh_mags;
          /* (Never smaller than planned: a thread late with its region
           * does not restart the doubling.) */
          d->next_region_mags = MIN (MAX (d->next_region_mags, 2 * fresh_mags), REGION_MAX_MAGS);
          fresh = NULL;
        }
      if (d->region_mags > 0)
        {
          char *slab = d->region;
          d->region += MAG * size;
          d->region_mags--;
          weft__mutex_unlock (&d->lock);
          /* In the order the allocations take them, from the slab's
           * start. Each is written once here: the slab's pages fault in
           * and its lines arrive in one sequential pass, not one by one
           * amid the users' work (bench-timers, 1M fresh timeouts,
           * medians against the linked-list cache in the same minutes:
           * 129 vs 101 ns an insert without this pass, 120 vs 128 with). */
          for (guint i = 0; i < MAG; i++)
            {
              char *obj = slab + (MAG - 1 - i) * size;
              *(gpointer *) obj = NULL;
              c->objs[i] = obj;
            }
          c->n = MAG;
          break;
        }
      guint want = d->next_region_mags;
      weft__mutex_unlock (&d->lock);
      /* Allocated outside the lock, so that other threads' magazine moves
       * do not wait for the arena. Line-aligned, so that objects of a
       * line's size (timeout sources) each fill exactly one cache line. If
       * another thread installed a region meanwhile, this one is
       * installed only if that one is used up by the time the lock is
       * taken again, else freed. */
      if (fresh == NULL)
        {
          fresh = weft__aligned_alloc (want, MAG * size, 64, FALSE);
          fresh_mags = want;
        }
    }
  if (fresh != NULL)
    g_aligned_free (fresh);
  hint_top (c);
}

/* Moves the fewer than MAG objects left in @c into the depot's partial
 * magazine, which joins the full ones once it holds MAG. Topping them up
 * with new objects instead made every exiting thread grow the depot for
 * good (an engine created and dropped in a loop leaked a magazine a
 * worker). */
static void
depot_put_rest (Cache *c)
{
  Depot *d = &depots[c->kind];
  Mag *spare = g_new (Mag, 1); /* outside the lock, as in depot_put() */

  weft__mutex_lock (&d->lock);
  if (d->partial == NULL)
    {
      d->partial = g_steal_pointer (&spare);
      d->partial_n = 0;
    }
  for (guint i = 0; i < c->n; i++)
    {
      d->partial->objs[d->partial_n++] = c->objs[i];
      if (d->partial_n == MAG)
        {
          /* At most once: both held fewer than MAG, and a partial that
           * was just made cannot fill up. */
          d->partial->next = d->full;
          d->full = d->partial;
          d->partial = g_steal_pointer (&spare);
          d->partial_n = 0;
        }
    }
  weft__mutex_unlock (&d->lock);
  g_free (spare);
  c->n = 0;
}

static void
cache_release (gpointer data)
{
  Cache *c = data;
  while (c->n >= MAG)
    depot_put (c);
  if (c->n > 0)
    depot_put_rest (c);
  if (tls_caches[c->kind] == c)
    tls_caches[c->kind] = NULL;
  g_aligned_free (c);
}

/* The first allocation of a class on a thread, or an empty array. */
gpointer
weft__cache_alloc_slow (WeftCacheKind kind)
{
  if (G_UNLIKELY (bypass))
    return g_malloc (class_size[kind]);
  Cache *c = cache_get (kind);
  if (c->n == 0)
    cache_refill (c);
  return c->objs[--c->n];
}

void
weft__cache_free (WeftCacheKind kind, gpointer object)
{
  if (G_UNLIKELY (bypass))
    {
      g_free (object);
      return;
    }
  Cache *c = cache_get (kind);
  /* Take the object's line for writing here, on the freeing CPU, as a
   * linked free list did. Left shared with the CPU that posted it, the
   * producer's next write to it upgraded the line while its queue's
   * runner kept pace job by job: measured, 45-90 ns per post into one
   * context against 20-25 with this store. */
  *(gpointer volatile *) object = NULL;
  c->objs[c->n++] = object;
  if (G_UNLIKELY (c->n == 2 * MAG))
    depot_put (c);
}

static void
spares_release (gpointer unused)
{
  while (weft__spare_requests_n > 0)
    g_free (weft__spare_requests[--weft__spare_requests_n]);
  g_clear_pointer (&weft__spare_chunk, g_free);
  /* A later thread-exit notify that keeps one registers again (and this
   * runs in the next round). */
  weft__spares_on = FALSE;
}

static GPrivate spares_key = G_PRIVATE_INIT (spares_release);

gboolean
weft__spares_register (void)
{
  if (G_UNLIKELY (bypass))
    return FALSE;
  weft__spares_on = TRUE;
  g_private_set (&spares_key, GINT_TO_POINTER (1)); /* any non-NULL: the notify runs */
  return TRUE;
}

#else /* WEFT_CACHE_DISABLED */

gboolean
weft__spares_register (void)
{
  return FALSE; /* a kept object would hide a use after free from ASan */
}

gpointer
weft__cache_alloc_slow (WeftCacheKind kind)
{
  return g_malloc (class_size[kind]);
}

void
weft__cache_free (WeftCacheKind kind, gpointer object)
{
  g_free (object);
}

#endif

/* A slot is a WeftJobNotify in the caller's memory. */
G_STATIC_ASSERT (sizeof (WeftJobSlot) == sizeof (WeftJobNotify));
G_STATIC_ASSERT (G_ALIGNOF (WeftJobSlot) >= G_ALIGNOF (WeftJobNotify));

void
weft__job_free (WeftJob *job)
{
  if (job->node.flags & WEFT_JOB_SLOT)
    {
      /* The caller's memory: hand it back. Release, so that a post seeing
       * the slot free also sees every read of it made here before. */
      __atomic_store_n (&job->node.flags, 0, __ATOMIC_RELEASE);
      return;
    }
  weft__cache_free (job->node.flags & WEFT_JOB_NOTIFY ? WEFT_CACHE_JOB_NOTIFY : WEFT_CACHE_JOB,
                    job);
}

void
weft__job_finish (WeftJob *job, gboolean run)
{
  WeftJobFunc func = job->func;
  gpointer data = job->user_data;
  GDestroyNotify notify =
      job->node.flags & WEFT_JOB_NOTIFY ? ((WeftJobNotify *) job)->notify : NULL;

  weft__job_free (job);
  if (run)
    func (data);
  if (notify != NULL)
    notify (data);
}
