/* weft-cache.c: fixed-size objects without malloc on the hot path: posted
 * jobs, and timeout sources; and one spare per thread of the HTTP layer's
 * per-request blocks (weft__spare_take()).
 *
 * Each thread keeps a free list per size class (jobs without a notify,
 * jobs with one, timeouts). A thread that frees more
 * than it allocates (a worker running jobs) hands magazines of MAG objects
 * to the class's depot; a thread that allocates more than it frees (a
 * producer) takes them back. The depot lock is taken once per MAG
 * allocations, so an allocation is a pointer pop. Objects are never given
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

_Thread_local WEFT_TLS_IE gpointer weft__spares[WEFT_SPARE_N];
_Thread_local WEFT_TLS_IE WeftCache *weft__tls_caches[WEFT_CACHE_N];
_Thread_local WEFT_TLS_IE gboolean weft__spares_on;

static const gsize class_size[WEFT_CACHE_N] = {
  [WEFT_CACHE_JOB] = sizeof (WeftJob),
  [WEFT_CACHE_JOB_NOTIFY] = sizeof (WeftJobNotify),
  [WEFT_CACHE_TIMEOUT] = sizeof (WeftTimeoutSource),
};

#ifndef WEFT_CACHE_DISABLED

#define MAG 256
/* Magazines of new objects per region, at most. */
#define REGION_MAX_MAGS 64

typedef WeftCacheFree Free;
typedef WeftCache Cache;

typedef struct _Mag Mag;
struct _Mag {
  Mag *next;        /* depot link */
  Free *first;      /* MAG objects */
};


typedef struct {
  WeftMutex lock;
  Mag *full;        /* HOLDS: lock */
  Mag *empty;       /* HOLDS: lock; shells to reuse */
  char *region;     /* HOLDS: lock; objects never handed out */
  guint region_mags;      /* HOLDS: lock; magazines left in region */
  guint next_region_mags; /* HOLDS: lock; size of the next region */
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
  c = g_new0 (Cache, 1);
  c->kind = kind;
  tls_caches[kind] = c;
  g_private_set (&cache_keys[kind], c); /* gives the objects back at thread exit */
  return c;
}

/* Moves MAG objects from the head of @c's list into the depot. */
static void
depot_put (Cache *c)
{
  Depot *d = &depots[c->kind];
  Free *first = c->free, *last = first;
  for (guint i = 1; i < MAG; i++)
    last = last->next;
  c->free = last->next;
  c->n_free -= MAG;
  last->next = NULL;

  weft__mutex_lock (&d->lock);
  Mag *m = d->empty;
  if (m != NULL)
    d->empty = m->next;
  else
    m = g_new (Mag, 1);
  m->first = first;
  m->next = d->full;
  d->full = m;
  weft__mutex_unlock (&d->lock);
}

static void
cache_refill (Cache *c)
{
  Depot *d = &depots[c->kind];
  weft__mutex_lock (&d->lock);
  Mag *m = d->full;
  if (m != NULL)
    {
      d->full = m->next;
      c->free = m->first;
      c->n_free = MAG;
      m->next = d->empty;
      d->empty = m;
      weft__mutex_unlock (&d->lock);
      return;
    }
  gsize size = class_size[c->kind];
  if (d->region_mags == 0)
    {
      /* Line-aligned, so that objects of a line's size (timeout sources)
       * each fill exactly one cache line. */
      d->region_mags = d->next_region_mags;
      d->region = g_aligned_alloc (d->region_mags, MAG * size, 64);
      d->next_region_mags = MIN (2 * d->region_mags, REGION_MAX_MAGS);
    }
  char *slab = d->region;
  d->region += MAG * size;
  d->region_mags--;
  weft__mutex_unlock (&d->lock);

  for (guint i = 0; i < MAG; i++)
    ((Free *) (slab + i * size))->next = i + 1 < MAG ? (Free *) (slab + (i + 1) * size) : NULL;
  c->free = (Free *) slab;
  c->n_free = MAG;
}

static void
cache_release (gpointer data)
{
  Cache *c = data;
  while (c->n_free >= MAG)
    depot_put (c);
  /* A depot magazine always holds MAG objects: top the rest up. */
  if (c->n_free > 0)
    {
      gsize size = class_size[c->kind];
      while (c->n_free < MAG)
        {
          Free *f = g_malloc (size);
          f->next = c->free;
          c->free = f;
          c->n_free++;
        }
      depot_put (c);
    }
  if (tls_caches[c->kind] == c)
    tls_caches[c->kind] = NULL;
  g_free (c);
}

/* The first allocation of a class on a thread, or an empty free list. */
gpointer
weft__cache_alloc_slow (WeftCacheKind kind)
{
  if (G_UNLIKELY (bypass))
    return g_malloc (class_size[kind]);
  Cache *c = cache_get (kind);
  if (c->free == NULL)
    cache_refill (c);
  Free *f = c->free;
  c->free = f->next;
  c->n_free--;
  return f;
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
  Free *f = object;
  f->next = c->free;
  c->free = f;
  if (G_UNLIKELY (++c->n_free >= 2 * MAG))
    depot_put (c);
}

static void
spares_release (gpointer unused)
{
  for (guint k = 0; k < WEFT_SPARE_N; k++)
    {
      g_free (weft__spares[k]);
      weft__spares[k] = NULL;
    }
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
