/* weft-fdtable.c: epoll keys for fd sources.
 *
 * epoll hands back whatever 64 bits were registered, possibly after the
 * source was removed on another thread. So the key is not a pointer but
 * (generation << 32 | slot): a slot is cleared on removal and its generation
 * bumped, and a late event with an old generation is dropped. Lookups take a
 * per-slot spin lock for the few instructions that take a reference, so two
 * workers never contend unless they touch the same source.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-context-private.h"

#define CHUNK_BITS 10
#define CHUNK (1u << CHUNK_BITS)
#define MAX_CHUNKS 4096     /* 4M fd sources per engine */

typedef struct {
  atomic_int lock;
  guint32 gen;              /* HOLDS: lock */
  /* HOLDS: lock to write; NULL when free. Atomic (relaxed: a plain access
   * on x86) only so that weft__fdtable_lookup_batch() may peek without it. */
  WeftFdSource *_Atomic source;
} Slot;

struct _WeftFdTable {
  WeftMutex lock;              /* allocation of slots and chunks */
  Slot *_Atomic chunks[MAX_CHUNKS];
  guint n_chunks;           /* HOLDS: lock */
  GArray *free_slots;       /* HOLDS: lock; guint32 */
};

static inline void
slot_lock (Slot *s)
{
  while (atomic_exchange_explicit (&s->lock, 1, memory_order_acquire))
    while (atomic_load_explicit (&s->lock, memory_order_relaxed))
      ;
}

static inline void
slot_unlock (Slot *s)
{
  atomic_store_explicit (&s->lock, 0, memory_order_release);
}

static inline Slot *
slot_at (WeftFdTable *t, guint32 index)
{
  Slot *chunk = atomic_load_explicit (&t->chunks[index >> CHUNK_BITS], memory_order_acquire);
  return chunk ? &chunk[index & (CHUNK - 1)] : NULL;
}

WeftFdTable *
weft__fdtable_new (void)
{
  WeftFdTable *t = g_new0 (WeftFdTable, 1);
  weft__mutex_init (&t->lock);
  t->free_slots = g_array_new (FALSE, FALSE, sizeof (guint32));
  return t;
}

void
weft__fdtable_free (WeftFdTable *t)
{
  for (guint i = 0; i < t->n_chunks; i++)
    g_free (atomic_load (&t->chunks[i]));
  g_array_unref (t->free_slots);
  weft__mutex_clear (&t->lock);
  g_free (t);
}

guint64
weft__fdtable_insert (WeftFdTable *t, WeftFdSource *source)
{
  guint32 index;

  weft__mutex_lock (&t->lock);
  if (t->free_slots->len > 0)
    {
      index = g_array_index (t->free_slots, guint32, t->free_slots->len - 1);
      g_array_set_size (t->free_slots, t->free_slots->len - 1);
    }
  else
    {
      if (t->n_chunks == MAX_CHUNKS)
        {
          weft__mutex_unlock (&t->lock);
          return 0;
        }
      Slot *chunk = g_new0 (Slot, CHUNK);
      atomic_store_explicit (&t->chunks[t->n_chunks], chunk, memory_order_release);
      index = t->n_chunks++ << CHUNK_BITS;
      /* Hand out low indices first; push the rest in reverse. */
      for (guint32 i = CHUNK - 1; i > 0; i--)
        {
          guint32 k = index + i;
          g_array_append_val (t->free_slots, k);
        }
    }
  weft__mutex_unlock (&t->lock);

  Slot *s = slot_at (t, index);
  slot_lock (s);
  if (++s->gen == 0)
    s->gen = 1;
  atomic_store_explicit (&s->source, source, memory_order_relaxed);
  guint64 key = ((guint64) s->gen << 32) | index;
  slot_unlock (s);
  return key;
}

void
weft__fdtable_clear (WeftFdTable *t, guint64 key)
{
  guint32 index = (guint32) key;
  Slot *s = slot_at (t, index);

  slot_lock (s);
  g_assert (s->gen == (guint32) (key >> 32));
  atomic_store_explicit (&s->source, NULL, memory_order_relaxed);
  s->gen++;
  slot_unlock (s);

  weft__mutex_lock (&t->lock);
  g_array_append_val (t->free_slots, index);
  weft__mutex_unlock (&t->lock);
}

/* The slot an epoll key names, or NULL for the engine's own keys (no
 * generation) and for indices never allocated. */
static inline Slot *
slot_of_key (WeftFdTable *t, guint64 key)
{
  guint32 index = (guint32) key;
  if ((key >> 32) == 0 || (index >> CHUNK_BITS) >= MAX_CHUNKS)
    return NULL;
  return slot_at (t, index);
}

/* The slot's source with a new reference, if @key's generation is still
 * the slot's. */
static inline WeftFdSource *
slot_ref (Slot *s, guint64 key)
{
  WeftFdSource *src = NULL;
  slot_lock (s);
  if (s->gen == (guint32) (key >> 32))
    {
      src = atomic_load_explicit (&s->source, memory_order_relaxed);
      if (src != NULL)
        weft__source_ref (&src->base);
    }
  slot_unlock (s);
  return src;
}

/* A batch of readiness for many connections finds their memory out of
 * cache, and each lookup, reference and push would wait for its own
 * misses in turn (the atomics serialise them). So in rounds: hint every
 * slot of the batch, then every source they name, then look each up
 * (hinting its context and lock stripe for the push). Hints only: a
 * stale or freed source is never read. Each slot is found once, in the
 * first round, and kept for the lookup. */
void
weft__fdtable_lookup_batch (WeftFdTable *t, WeftEngine *engine, const WeftPollEvent *ev, int n,
                            WeftFdSource **src)
{
  Slot *slots[WEFT_POLL_BATCH];

  g_assert (n <= (int) G_N_ELEMENTS (slots));
  if (n == 1)
    {
      Slot *s = slot_of_key (t, ev[0].key);
      src[0] = s != NULL ? slot_ref (s, ev[0].key) : NULL;
      return;
    }
  for (int i = 0; i < n; i++)
    {
      slots[i] = slot_of_key (t, ev[i].key);
      if (slots[i] != NULL)
        __builtin_prefetch (slots[i], 1);
    }
  for (int i = 0; i < n; i++)
    if (slots[i] != NULL)
      {
        WeftFdSource *peek = atomic_load_explicit (&slots[i]->source, memory_order_relaxed);
        if (peek != NULL)
          __builtin_prefetch (peek, 1);
      }
  for (int i = 0; i < n; i++)
    {
      src[i] = slots[i] != NULL ? slot_ref (slots[i], ev[i].key) : NULL;
      if (src[i] != NULL)
        weft__fd_source_prefetch (src[i], engine);
    }
}
