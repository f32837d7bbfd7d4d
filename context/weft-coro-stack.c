/* weft-coro-stack.c: coroutine stacks. Each is an mmap'ed region with a
 * PROT_NONE guard page below it, so an overflow faults instead of
 * overwriting a neighbour. Freed stacks are cached: up to 16 per thread
 * without a lock, then up to 256 in a shared list under a mutex; beyond
 * that they are unmapped. Only whole-page sizes are used.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-coro-private.h"
#include "weft-engine-private.h"

#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef WEFT_HAVE_VALGRIND
#include <valgrind/valgrind.h>
#endif
#ifdef WEFT_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define LOCAL_MAX 16
#define SHARED_MAX 256

typedef struct {
  WeftCoroStack *items[LOCAL_MAX];
  guint n;
  gpointer objects[LOCAL_MAX]; /* WeftCoro structs */
  guint n_objects;
} LocalCache;

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static WeftCoroStack *shared;   /* HOLDS: shared_lock */
static guint n_shared;          /* HOLDS: shared_lock */

/* Cached; the first callers may race to fill it (two workers making their
 * first stacks), each storing the same value: relaxed atomics make that
 * benign for TSan too. */
static gsize
page_size (void)
{
  static _Atomic gsize ps;
  gsize v = atomic_load_explicit (&ps, memory_order_relaxed);
  if (v == 0)
    {
      v = (gsize) sysconf (_SC_PAGESIZE);
      atomic_store_explicit (&ps, v, memory_order_relaxed);
    }
  return v;
}

static void
unmap (WeftCoroStack *s)
{
#ifdef WEFT_HAVE_VALGRIND
  VALGRIND_STACK_DEREGISTER (s->vg_id);
#endif
  munmap (s->map, s->map_size);
  g_free (s);
}

static void
shared_put (WeftCoroStack *s)
{
  pthread_mutex_lock (&shared_lock);
  if (n_shared < SHARED_MAX)
    {
      s->next = shared;
      shared = s;
      n_shared++;
      s = NULL;
    }
  pthread_mutex_unlock (&shared_lock);
  if (s != NULL)
    unmap (s);
}

static _Thread_local WEFT_TLS_IE LocalCache *tls_local;

static void
local_free (gpointer data)
{
  LocalCache *lc = data;
  tls_local = NULL; /* (a destructor that runs later may cache again) */
  for (guint i = 0; i < lc->n; i++)
    shared_put (lc->items[i]);
  for (guint i = 0; i < lc->n_objects; i++)
    g_free (lc->objects[i]);
  g_free (lc);
}

static GPrivate local_key = G_PRIVATE_INIT (local_free);

/* Never inlined, with an empty asm: a thread-local address must not be
 * reused across a coroutine switch (docs/coroutines.md). */
__attribute__ ((noinline)) static LocalCache *
local (void)
{
  __asm__ volatile ("" ::: "memory");
  LocalCache *lc = tls_local;
  if (G_LIKELY (lc != NULL))
    return lc;
  lc = g_new0 (LocalCache, 1);
  g_private_set (&local_key, lc); /* frees it at thread exit */
  tls_local = lc;
  return lc;
}

/* Not under the sanitizers: a reused object would hide a use after free. */
#if !defined(WEFT_ASAN) && !defined(WEFT_TSAN)
#define OBJECT_CACHE 1
#endif

gpointer
weft__coro_object_get (gsize size)
{
#ifdef OBJECT_CACHE
  LocalCache *lc = local ();
  if (lc->n_objects > 0)
    return lc->objects[--lc->n_objects];
#endif
  return g_malloc (size);
}

void
weft__coro_object_put (gpointer object)
{
#ifdef OBJECT_CACHE
  LocalCache *lc = local ();
  if (lc->n_objects < LOCAL_MAX)
    {
      lc->objects[lc->n_objects++] = object;
      return;
    }
#endif
  g_free (object);
}

WeftCoroStack *
weft__coro_stack_get (gsize size)
{
  gsize ps = page_size ();
  size = (size + ps - 1) & ~(ps - 1);
  LocalCache *lc = local ();
  for (guint i = lc->n; i > 0; i--)
    if (lc->items[i - 1]->size == size)
      {
        WeftCoroStack *s = lc->items[i - 1];
        lc->items[i - 1] = lc->items[--lc->n];
        return s;
      }
  pthread_mutex_lock (&shared_lock);
  for (WeftCoroStack **p = &shared; *p != NULL; p = &(*p)->next)
    if ((*p)->size == size)
      {
        WeftCoroStack *s = *p;
        *p = s->next;
        n_shared--;
        pthread_mutex_unlock (&shared_lock);
        return s;
      }
  pthread_mutex_unlock (&shared_lock);

  gsize map_size = size + ps;
  void *map = mmap (NULL, map_size, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (map == MAP_FAILED)
    return NULL;
  if (mprotect (map, ps, PROT_NONE) != 0) /* the guard page, below */
    {
      munmap (map, map_size);
      return NULL;
    }
  WeftCoroStack *s = g_new0 (WeftCoroStack, 1);
  s->map = map;
  s->map_size = map_size;
  s->lo = (char *) map + ps;
  s->size = size;
#ifdef WEFT_HAVE_VALGRIND
  s->vg_id = VALGRIND_STACK_REGISTER (s->lo, (char *) s->lo + size);
#endif
  return s;
}

void
weft__coro_stack_put (WeftCoroStack *s)
{
#ifdef WEFT_ASAN
  /* The frames that ended on it leave ASan's scope marks: a new coroutine
   * starts on clean memory. */
  __asan_unpoison_memory_region (s->lo, s->size);
#endif
  LocalCache *lc = local ();
  if (lc->n < LOCAL_MAX)
    {
      lc->items[lc->n++] = s;
      return;
    }
  shared_put (s);
}
