/* test-internal.c: the engine's internal data structures against simple
 * models: the source id map, the timer heap, the MPSC queue, the job cache.
 * Linked against the static copy of the library (weft_internal_dep).
 */
/* Before the headers: weft__mpsc_pop() inlined here calls it (see
 * test_mpsc_nonempty_while_stub_repushed). */
struct _WeftNode;
static void stub_race_hook (struct _WeftNode *_Atomic *head);
static struct _WeftNode *stub_race_node; /* exchanged in by the next stub re-push */
static struct _WeftNode *stub_race_prev;
#define WEFT__MPSC_BEFORE_STUB_PUSH(head) stub_race_hook (head)

#include <errno.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "weft-context-private.h"
#include "weft-test-util.h"

/* ---- id map ------------------------------------------------------------ */

static void
test_idmap_model (void)
{
  g_test_summary ("The id map agrees with a GHashTable over random inserts, lookups "
                  "and removals, including ids that wrap the table and collide");

  WeftIdMap map;
  GHashTable *model = g_hash_table_new (g_direct_hash, g_direct_equal);
  GRand *rand = g_rand_new_with_seed (42);
  guint next_id = 1;

  weft__idmap_init (&map);
  for (guint step = 0; step < 200000; step++)
    {
      guint op = g_rand_int_range (rand, 0, 10);
      if (op < 5)
        {
          /* Mostly sequential ids, sometimes a jump so keys collide. */
          guint key = g_rand_int_range (rand, 0, 20) == 0 ? (guint) g_rand_int_range (rand, 1, 1 << 20)
                                                           : next_id++;
          if (g_hash_table_contains (model, GUINT_TO_POINTER (key)))
            continue;
          weft__idmap_insert (&map, key, GUINT_TO_POINTER (key ^ 0x5a5a));
          g_hash_table_insert (model, GUINT_TO_POINTER (key), GUINT_TO_POINTER (key ^ 0x5a5a));
        }
      else if (op < 8)
        {
          guint key = g_rand_int_range (rand, 1, next_id + 1);
          gpointer want = g_hash_table_lookup (model, GUINT_TO_POINTER (key));
          gpointer got = weft__idmap_remove (&map, key);
          g_assert_true (got == want);
          g_hash_table_remove (model, GUINT_TO_POINTER (key));
        }
      else
        {
          guint key = g_rand_int_range (rand, 1, next_id + 1);
          g_assert_true (weft__idmap_lookup (&map, key) ==
                         g_hash_table_lookup (model, GUINT_TO_POINTER (key)));
        }
      g_assert_cmpuint (weft__idmap_size (&map), ==, g_hash_table_size (model));
    }

  GPtrArray *all = g_ptr_array_new ();
  weft__idmap_steal_all (&map, all);
  g_assert_cmpuint (all->len, ==, g_hash_table_size (model));
  g_assert_cmpuint (weft__idmap_size (&map), ==, 0);
  g_ptr_array_unref (all);
  weft__idmap_clear (&map);
  g_hash_table_unref (model);
  g_rand_free (rand);
}

/* GLib's allocators, wrapped at link time (tests/meson.build: --wrap) so
 * that a test can count what the library allocates on its own thread. */
void *__real_g_malloc (gsize n);
void *__real_g_malloc0 (gsize n);
void *__real_g_malloc_n (gsize n, gsize size);
void *__real_g_realloc (void *mem, gsize n);

static _Thread_local gboolean alloc_counting;
static _Thread_local guint alloc_fresh;      /* malloc-like calls */
static _Thread_local guint alloc_realloc;
static _Thread_local void *alloc_realloc_arg; /* the block the last realloc grew */

void *
__wrap_g_malloc (gsize n)
{
  alloc_fresh += alloc_counting;
  return __real_g_malloc (n);
}

void *
__wrap_g_malloc0 (gsize n)
{
  alloc_fresh += alloc_counting;
  return __real_g_malloc0 (n);
}

void *
__wrap_g_malloc_n (gsize n, gsize size)
{
  alloc_fresh += alloc_counting;
  return __real_g_malloc_n (n, size);
}

void *
__wrap_g_realloc (void *mem, gsize n)
{
  if (alloc_counting)
    {
      alloc_realloc++;
      alloc_realloc_arg = mem;
    }
  return __real_g_realloc (mem, n);
}

/* What the growths of one test run went through. */
typedef struct {
  guint growths, with_away, without_away;
  guint moved_up, left; /* entries at home before a growth */
} Growths;

/* Inserts @key, counting allocations; if the table grew, checks that it
 * grew in place: one realloc of the block it was in, fresh memory only for
 * the entries away from home (set aside), none for a new table. */
static void
insert_counted (WeftIdMap *map, guint key, Growths *g)
{
  guint cap_before = map->mask != 0 ? map->mask + 1 : 0; /* mask 0: no table yet */
  gpointer block_before = cap_before != 0 ? (gpointer) map->values : NULL;
  guint up = 0, left = 0, away = 0;
  /* The keys follow the values in the table's block. */
  const guint *keys = cap_before != 0 ? (const guint *) (map->values + cap_before) : NULL;
  for (guint i = 0; i < cap_before; i++)
    if (keys[i] != 0)
      {
        if ((keys[i] & map->mask) != i)
          away++;
        else if (keys[i] & cap_before)
          up++;
        else
          left++;
      }

  alloc_counting = TRUE;
  alloc_fresh = alloc_realloc = 0;
  alloc_realloc_arg = NULL;
  weft__idmap_insert (map, key, GUINT_TO_POINTER (key));
  alloc_counting = FALSE;

  guint cap = map->mask + 1;
  if (cap_before == 0)
    return; /* the first table (or none yet) */
  if (cap == cap_before)
    {
      g_assert_cmpuint (alloc_realloc, ==, 0);
      g_assert_cmpuint (alloc_fresh, ==, 0);
      return;
    }
  g_assert_cmpuint (cap, ==, 2 * cap_before);
  g_assert_cmpuint (alloc_realloc, ==, 1);
  g_assert_true (alloc_realloc_arg == block_before);
  g_assert_cmpuint (alloc_fresh, ==, away > 0 ? 2 : 0); /* the set-aside keys and values */
  g->growths++;
  if (away > 0)
    g->with_away++;
  else
    g->without_away++;
  g->moved_up += up;
  g->left += left;
}

static void
test_idmap_grow_in_place (void)
{
  g_test_summary ("Growing the id map reallocates its one block (no fresh table, no "
                  "rehash), with entries at home (moved up or left) and away from home "
                  "(ids a multiple of the capacity apart, set aside and placed again), "
                  "and every entry stays findable");

  WeftIdMap map;
  GRand *rand = g_rand_new_with_seed (99);
  guint keys[3000];
  guint n = 0;
  Growths g = { 0 };

  /* Sequential ids: every entry at home, no memory but the realloc. */
  weft__idmap_init (&map);
  for (guint k = 1; k <= 1000; k++)
    insert_counted (&map, k, &g);
  for (guint k = 1; k <= 1000; k++)
    g_assert_true (weft__idmap_lookup (&map, k) == GUINT_TO_POINTER (k));
  g_assert_cmpuint (g.without_away, ==, 9); /* 4 -> 2048 slots */
  g_assert_cmpuint (g.with_away, ==, 0);
  weft__idmap_clear (&map);

  memset (&g, 0, sizeof g);
  weft__idmap_init (&map);
  while (n < G_N_ELEMENTS (keys))
    {
      guint key;
      switch (g_rand_int_range (rand, 0, 3))
        {
        case 0: /* sequential */
          key = n + 1;
          break;
        case 1: /* collides with an earlier one in every table up to 1024 slots */
          key = (n > 0 ? keys[g_rand_int_range (rand, 0, n)] : 1) + 1024 * g_rand_int_range (rand, 1, 64);
          break;
        default:
          key = (guint) g_rand_int_range (rand, 1, 1 << 24);
        }
      if (weft__idmap_lookup (&map, key) != NULL)
        continue;
      guint grown = g.growths;
      insert_counted (&map, key, &g);
      keys[n++] = key;
      if (g.growths != grown || n % 97 == 0)
        for (guint i = 0; i < n; i++)
          g_assert_true (weft__idmap_lookup (&map, keys[i]) == GUINT_TO_POINTER (keys[i]));
    }
  /* The run went through what the summary names: 4 -> 8192 slots. */
  g_assert_cmpuint (g.growths, ==, 11);
  g_assert_cmpuint (g.with_away, >, 0);
  g_assert_cmpuint (g.moved_up, >, 0);
  g_assert_cmpuint (g.left, >, 0);

  g_assert_cmpuint (weft__idmap_size (&map), ==, n);
  for (guint i = 0; i < n; i += 2)
    g_assert_true (weft__idmap_remove (&map, keys[i]) == GUINT_TO_POINTER (keys[i]));
  for (guint i = 1; i < n; i += 2)
    g_assert_true (weft__idmap_lookup (&map, keys[i]) == GUINT_TO_POINTER (keys[i]));
  weft__idmap_clear (&map);
  g_rand_free (rand);
}

static void
test_idmap_grow_big (void)
{
  g_test_summary ("Growing the id map in place up to 512k slots (a block realloc moves "
                  "with mremap) keeps every entry findable, sequential ids and ids a "
                  "multiple of 65536 apart alike, and removal and steal_all see them all");

  WeftIdMap map;
  GRand *rand = g_rand_new_with_seed (7);
  guint n_keys = 150000, n = 0;
  guint *keys = g_new (guint, n_keys);
  GHashTable *seen = g_hash_table_new (g_direct_hash, g_direct_equal);

  weft__idmap_init (&map);
  while (n < n_keys)
    {
      guint key;
      if (g_rand_int_range (rand, 0, 8) != 0)
        key = n + 1;
      else /* collides with an earlier one in the tables of 64k to 512k slots */
        key = (n > 0 ? keys[g_rand_int_range (rand, 0, n)] : 1) +
              65536 * g_rand_int_range (rand, 1, 8);
      if (g_hash_table_contains (seen, GUINT_TO_POINTER (key)))
        continue;
      guint cap_before = map.mask + 1;
      weft__idmap_insert (&map, key, GUINT_TO_POINTER (key));
      g_hash_table_add (seen, GUINT_TO_POINTER (key));
      keys[n++] = key;
      if (map.mask + 1 != cap_before)
        for (guint i = 0; i < n; i++)
          g_assert_true (weft__idmap_lookup (&map, keys[i]) == GUINT_TO_POINTER (keys[i]));
    }
  g_assert_cmpuint (map.mask + 1, >=, 262144);
  for (guint i = 0; i < n; i++)
    g_assert_true (weft__idmap_lookup (&map, keys[i]) == GUINT_TO_POINTER (keys[i]));
  for (guint i = 0; i < n; i += 2)
    g_assert_true (weft__idmap_remove (&map, keys[i]) == GUINT_TO_POINTER (keys[i]));
  for (guint i = 0; i < n; i++)
    g_assert_true (weft__idmap_lookup (&map, keys[i]) ==
                   (i % 2 ? GUINT_TO_POINTER (keys[i]) : NULL));
  GPtrArray *all = g_ptr_array_new ();
  weft__idmap_steal_all (&map, all);
  g_assert_cmpuint (all->len, ==, n / 2);
  g_assert_cmpuint (weft__idmap_size (&map), ==, 0);
  g_ptr_array_unref (all);
  weft__idmap_clear (&map);
  g_hash_table_unref (seen);
  g_free (keys);
  g_rand_free (rand);
}

static void
test_idmap_remove_in_order (void)
{
  g_test_summary ("Removing 100k sequential ids in insertion order leaves every other "
                  "id findable (the backward shift keeps runs intact)");

  WeftIdMap map;
  weft__idmap_init (&map);
  for (guint k = 1; k <= 100000; k++)
    weft__idmap_insert (&map, k, GUINT_TO_POINTER (k));
  for (guint k = 1; k <= 100000; k++)
    {
      g_assert_true (weft__idmap_remove (&map, k) == GUINT_TO_POINTER (k));
      if (k % 9973 == 0 && k < 100000)
        g_assert_true (weft__idmap_lookup (&map, k + 1) == GUINT_TO_POINTER (k + 1));
    }
  g_assert_cmpuint (weft__idmap_size (&map), ==, 0);
  weft__idmap_clear (&map);
}

/* ---- heap -------------------------------------------------------------- */

typedef struct {
  gint64 deadline;
  WeftHeapLink link;
  guint serial;
} Item;

static void
test_heap_order_and_cancel (void)
{
  g_test_summary ("The heap pops in (deadline, insertion) order after random inserts and "
                  "cancels, and every item's stored index names its slot");

  GRand *rand = g_rand_new_with_seed (7);
  WeftHeap heap;
  guint n = 20000;
  Item *items = g_new0 (Item, n);
  gboolean *cancelled = g_new0 (gboolean, n);

  weft__heap_init_link (&heap, Item, link);
  for (guint i = 0; i < n; i++)
    {
      items[i].deadline = g_rand_int_range (rand, 0, 1000); /* many ties */
      items[i].serial = i;
      weft__heap_insert (&heap, items[i].deadline, &items[i]);
    }
  for (guint i = 0; i < n; i += 3)
    {
      weft__heap_remove (&heap, items[i].link.index);
      g_assert_cmpuint (items[i].link.index, ==, WEFT_HEAP_NONE);
      cancelled[i] = TRUE;
    }
  for (guint i = 0; i < heap.len; i++)
    g_assert_cmpuint (((Item *) heap.v[i].item)->link.index, ==, i);
  /* After all the growing, the root's children (and so every group of
   * siblings) still start a cache line, with malloc's 16-byte alignment. */
  if (((guintptr) heap.block & 15) == 0)
    g_assert_cmpuint ((guintptr) (heap.v + 1) & 63, ==, 0);

  gint64 last_deadline = -1;
  gint last_serial = -1;
  guint popped = 0;
  WeftHeapEntry *top;
  while ((top = weft__heap_peek (&heap)) != NULL)
    {
      Item *it = top->item;
      g_assert_false (cancelled[it->serial]);
      g_assert_cmpint (it->deadline, >=, last_deadline);
      if (it->deadline == last_deadline)
        g_assert_cmpint ((gint) it->serial, >, last_serial);
      last_deadline = it->deadline;
      last_serial = (gint) it->serial;
      weft__heap_remove (&heap, 0);
      popped++;
    }
  g_assert_cmpuint (popped, ==, n - (n + 2) / 3);
  weft__heap_clear (&heap);
  g_free (items);
  g_free (cancelled);
  g_rand_free (rand);
}

/* ---- MPSC queue -------------------------------------------------------- */

typedef struct {
  WeftNode node;
  guint producer;
  guint seq;
} QNode;

#define PRODUCERS 4
#define PER_PRODUCER 50000

static WeftMpsc queue;

static gpointer
producer_main (gpointer data)
{
  guint p = GPOINTER_TO_UINT (data);
  QNode *nodes = g_new0 (QNode, PER_PRODUCER);
  for (guint i = 0; i < PER_PRODUCER; i++)
    {
      nodes[i].producer = p;
      nodes[i].seq = i;
      weft__mpsc_push (&queue, &nodes[i].node);
    }
  return nodes;
}

static void
test_mpsc_fifo_per_producer (void)
{
  g_test_summary ("With 4 producers pushing concurrently, the consumer gets every node "
                  "once, each producer's nodes in push order, and the queue ends empty");

  GThread *threads[PRODUCERS];
  guint next[PRODUCERS] = { 0 };
  guint total = 0;

  weft__mpsc_init (&queue);
  for (guint p = 0; p < PRODUCERS; p++)
    threads[p] = g_thread_new ("producer", producer_main, GUINT_TO_POINTER (p));

  gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  while (total < PRODUCERS * PER_PRODUCER)
    {
      WeftNode *n = weft__mpsc_pop (&queue);
      if (n == NULL)
        {
          g_assert_cmpint (g_get_monotonic_time (), <, deadline);
          continue;
        }
      QNode *q = (QNode *) n;
      g_assert_cmpuint (q->seq, ==, next[q->producer]);
      next[q->producer]++;
      total++;
    }
  for (guint p = 0; p < PRODUCERS; p++)
    g_free (g_thread_join (threads[p]));
  g_assert_null (weft__mpsc_pop (&queue));
  g_assert_false (weft__mpsc_nonempty (&queue));
}

/* The consumer pops the last node while a producer is between its exchange
 * and its link: the pop re-pushes the stub behind the producer's node, so
 * the head is the stub again although two nodes wait. A context that took
 * "head is the stub" for empty released itself with both jobs queued and
 * nobody to run them. The producer's exchange is made from the pop's seam
 * (WEFT__MPSC_BEFORE_STUB_PUSH), its link held back until the consumer has
 * looked: the interleaving happens every time, not by chance. */
static void
stub_race_hook (struct _WeftNode *_Atomic *head)
{
  if (stub_race_node == NULL)
    return;
  atomic_store_explicit (&stub_race_node->next, NULL, memory_order_relaxed);
  stub_race_prev = atomic_exchange (head, stub_race_node);
  stub_race_node = NULL;
}

static void
test_mpsc_nonempty_while_stub_repushed (void)
{
  g_test_summary ("A push that has made its exchange but not its link keeps the queue "
                  "nonempty even when the consumer, popping the node before it, has "
                  "re-pushed the stub in between (the head is the stub again)");

  WeftMpsc q;
  WeftNode a = { 0 }, c = { 0 };

  weft__mpsc_init (&q);
  weft__mpsc_push (&q, &a);
  stub_race_node = &c;
  /* a is the last node: the pop re-pushes the stub, after c's exchange. */
  g_assert_null (weft__mpsc_pop (&q));
  g_assert_null (stub_race_node);
  g_assert_true (stub_race_prev == &a);
  g_assert_true (atomic_load (&q.head) == &q.stub);
  g_assert_true (weft__mpsc_nonempty (&q));
  g_assert_null (weft__mpsc_pop (&q));
  g_assert_true (weft__mpsc_nonempty (&q));

  /* The producer's link: both come out, in order, and the queue is empty. */
  atomic_store_explicit (&stub_race_prev->next, &c, memory_order_release);
  g_assert_true (weft__mpsc_pop (&q) == &a);
  g_assert_true (weft__mpsc_nonempty (&q));
  g_assert_true (weft__mpsc_pop (&q) == &c);
  g_assert_null (weft__mpsc_pop (&q));
  g_assert_false (weft__mpsc_nonempty (&q));
}

/* weft__mpsc_quiet() answers from the consumer's side alone: a node linked
 * behind the tail, or a tail not yet popped, is work; a push that has only
 * exchanged the head is not seen (the runner's exact look before it
 * releases, weft__mpsc_nonempty(), sees it). */
static void
test_mpsc_quiet (void)
{
  g_test_summary ("The consumer's head-free look: quiet when empty, not quiet once a "
                  "push has linked or a node waits at the tail, and blind to a push "
                  "that has exchanged the head but not linked, which nonempty sees");

  WeftMpscTight q;
  WeftNode a = { 0 }, c = { 0 }, d = { 0 };

  weft__mpsc_init (&q);
  g_assert_true (weft__mpsc_quiet (&q));
  g_assert_false (weft__mpsc_nonempty (&q));

  weft__mpsc_push (&q, &a);
  g_assert_false (weft__mpsc_quiet (&q));
  /* a is the last node and c's exchange lands before the stub's: a waits
   * at the tail for c's link. */
  stub_race_node = &c;
  g_assert_null (weft__mpsc_pop (&q));
  g_assert_false (weft__mpsc_quiet (&q));
  atomic_store_explicit (&stub_race_prev->next, &c, memory_order_release);
  g_assert_true (weft__mpsc_pop (&q) == &a);
  g_assert_true (weft__mpsc_pop (&q) == &c);
  g_assert_null (weft__mpsc_pop (&q));
  g_assert_true (weft__mpsc_quiet (&q));
  g_assert_false (weft__mpsc_nonempty (&q));

  /* d's exchange without its link: behind the stub nothing is linked yet. */
  atomic_store_explicit (&d.next, NULL, memory_order_relaxed);
  WeftNode *prev = atomic_exchange (&q.head, &d);
  g_assert_true (prev == &q.stub);
  g_assert_true (weft__mpsc_quiet (&q));
  g_assert_true (weft__mpsc_nonempty (&q));
  atomic_store_explicit (&prev->next, &d, memory_order_release);
  g_assert_false (weft__mpsc_quiet (&q));
  g_assert_true (weft__mpsc_pop (&q) == &d);
  g_assert_null (weft__mpsc_pop (&q));
  g_assert_true (weft__mpsc_quiet (&q));
  g_assert_false (weft__mpsc_nonempty (&q));
}

/* ---- job cache --------------------------------------------------------- */

static gpointer
free_jobs (gpointer data)
{
  GPtrArray *jobs = data;
  for (guint i = 0; i < jobs->len; i++)
    weft__job_free (jobs->pdata[i]);
  return NULL;
}

static void
test_jobcache_cross_thread (void)
{
  g_test_summary ("Job nodes allocated on one thread and freed on another come back "
                  "distinct and usable; no node is handed out twice");

  for (guint round = 0; round < 5; round++)
    {
      GPtrArray *jobs = g_ptr_array_new ();
      GHashTable *seen = g_hash_table_new (g_direct_hash, g_direct_equal);
      for (guint i = 0; i < 3000; i++)
        {
          /* Every other one with a notify: the two job caches. */
          WeftJob *j = weft__job_new (NULL, NULL, i % 2 ? (GDestroyNotify) g_free : NULL, 0);
          g_assert_false (g_hash_table_contains (seen, j));
          g_hash_table_add (seen, j);
          j->user_data = GUINT_TO_POINTER (i);
          g_ptr_array_add (jobs, j);
        }
      for (guint i = 0; i < jobs->len; i++)
        {
          WeftJob *j = jobs->pdata[i];
          g_assert_cmpuint (GPOINTER_TO_UINT (j->user_data), ==, i);
          g_assert_cmpuint (!!(j->node.flags & WEFT_JOB_NOTIFY), ==, i % 2);
        }
      g_thread_join (g_thread_new ("freer", free_jobs, jobs));
      g_ptr_array_unref (jobs);
      g_hash_table_unref (seen);
    }
}

/* Allocates and frees enough job nodes to need a new cache region, on a
 * thread with no cache yet, checking errno after every call. */
static gpointer
alloc_keeping_errno (gpointer data)
{
  guint n = GPOINTER_TO_UINT (data);
  WeftJob **jobs = g_new (WeftJob *, n);
  guint clobbered = 0;

  for (guint i = 0; i < n; i++)
    {
      errno = 4242;
      jobs[i] = weft__job_new (NULL, NULL, NULL, 0);
      if (errno != 4242)
        clobbered++;
    }
  for (guint i = 0; i < n; i++)
    {
      errno = 4243;
      weft__job_free (jobs[i]);
      if (errno != 4243)
        clobbered++;
    }
  g_free (jobs);
  return GUINT_TO_POINTER (clobbered);
}

static void
test_jobcache_keeps_errno (void)
{
  g_test_summary ("Allocating and freeing job nodes leaves errno alone, also when the "
                  "thread's first allocation makes its cache and when a new region is "
                  "carved (GLib's aligned allocation stores 0 in errno)");

  /* The thread's first allocation makes its cache (an aligned
   * allocation). 160 magazines: more than a region's 64 beyond what the
   * earlier tests of this file leave in the depot (a few), so new regions
   * are carved too. */
  guint n = 160 * 256;
  gpointer clobbered = g_thread_join (g_thread_new ("errno", alloc_keeping_errno,
                                                    GUINT_TO_POINTER (n)));
  g_assert_cmpuint (GPOINTER_TO_UINT (clobbered), ==, 0);
}

/* ---- /internal/foreach-tail-churn -------------------------------------- */

#define TAIL_STABLE 20000
#define TAIL_CHURN_LIVE 64
#define TAIL_CHURN_TAG G_GUINT64_CONSTANT (0xC0000000)
#define TAIL_VICTIM_TAG G_GUINT64_CONSTANT (0xF0000000)
/* Two victims before each stable context: the batch (256, 1 modulo 3)
 * ends on a victim two times out of three, whatever the list's head. */
#define TAIL_VICTIMS (2 * TAIL_STABLE)

typedef struct {
  WeftEngine *engine;
  atomic_bool stop;
  atomic_uint made;
} TailChurn;

static WeftContext *
tail_context (WeftEngine *engine, guint64 id)
{
  WeftContext *ctx = weft__context_new_with_tail (engine, sizeof (guint64));
  *(guint64 *) weft__context_tail (ctx) = id;
  weft__context_mark_tail_conn (ctx);
  return ctx;
}

static void
tail_context_free (WeftContext *ctx)
{
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
}

/* Makes and frees marked contexts all the time, so that the walk's
 * batches contend with them for the lock. */
static gpointer
tail_churn_thread (gpointer data)
{
  TailChurn *tc = data;
  WeftContext *ring[TAIL_CHURN_LIVE] = { NULL };
  guint i = 0;
  while (!atomic_load (&tc->stop))
    {
      if (ring[i] != NULL)
        tail_context_free (ring[i]);
      ring[i] = tail_context (tc->engine, TAIL_CHURN_TAG | i);
      i = (i + 1) % TAIL_CHURN_LIVE;
      atomic_fetch_add (&tc->made, 1);
    }
  for (i = 0; i < TAIL_CHURN_LIVE; i++)
    if (ring[i] != NULL)
      tail_context_free (ring[i]);
  return NULL;
}

/* Among the stable contexts, victims: the hook frees the one the walk is
 * to go on from. */
static WeftContext **tail_victims;
static guint *tail_victim_seen; /* -1u: not freed yet; -2u: in an earlier walk */
static guint tail_victims_freed;

static void
free_victim_at_cursor (gpointer next_tail)
{
  guint64 id = *(guint64 *) next_tail;
  if ((id & TAIL_VICTIM_TAG) != TAIL_VICTIM_TAG)
    return;
  guint i = (guint) (id & ~TAIL_VICTIM_TAG);
  g_assert_cmpuint (i, <, TAIL_VICTIMS);
  g_assert_nonnull (tail_victims[i]);
  tail_context_free (tail_victims[i]);
  tail_victims[i] = NULL;
  tail_victim_seen[i] = 0;
  tail_victims_freed++;
}

static void
count_tail (gpointer tail, gpointer data)
{
  guint *seen = data;
  guint64 id = *(guint64 *) tail; /* a freed tail: ASan and valgrind see it */
  if ((id & TAIL_VICTIM_TAG) == TAIL_VICTIM_TAG)
    {
      guint i = (guint) (id & ~TAIL_VICTIM_TAG);
      if (tail_victim_seen[i] == -2u)
        g_error ("victim %u visited a walk after it was freed", i);
      if (tail_victim_seen[i] != -1u)
        tail_victim_seen[i]++;
    }
  else if ((id & TAIL_CHURN_TAG) == TAIL_CHURN_TAG)
    g_assert_cmpuint (id & ~TAIL_CHURN_TAG, <, TAIL_CHURN_LIVE);
  else
    {
      g_assert_cmpuint (id, <, TAIL_STABLE);
      seen[id]++;
    }
}

static void
test_foreach_tail_churn (void)
{
  g_test_summary ("weft__engine_foreach_tail() drops the lock between batches: contexts "
                  "made and freed meanwhile, the one it goes on from included, neither "
                  "break the walk nor make it visit a context twice or skip one that "
                  "stays in the list");

  WeftEngine *engine = weft_engine_new (2, NULL);
  WeftContext **stable = g_new (WeftContext *, TAIL_STABLE);
  tail_victims = g_new (WeftContext *, TAIL_VICTIMS);
  tail_victim_seen = g_new (guint, TAIL_VICTIMS);
  for (guint i = 0; i < TAIL_VICTIMS; i++)
    {
      tail_victims[i] = tail_context (engine, TAIL_VICTIM_TAG | i);
      tail_victim_seen[i] = -1u;
      if (i % 2 == 1)
        stable[i / 2] = tail_context (engine, i / 2);
    }
  TailChurn tc = { .engine = engine };
  GThread *th = g_thread_new ("churn", tail_churn_thread, &tc);
  guint *seen = g_new (guint, TAIL_STABLE);
  guint walks = 0;
  weft__foreach_tail_unlocked_hook = free_victim_at_cursor;
  /* At least 20 walks, and until the churn has gone round a few times
   * during them (it may start late on a loaded machine). */
  while (walks < 20 || (atomic_load (&tc.made) < 4 * TAIL_CHURN_LIVE && walks < 100000))
    {
      memset (seen, 0, TAIL_STABLE * sizeof *seen);
      weft__engine_foreach_tail (engine, count_tail, seen);
      for (guint i = 0; i < TAIL_STABLE; i++)
        if (seen[i] != 1)
          g_error ("walk %u saw context %u %u times", walks, i, seen[i]);
      for (guint i = 0; i < TAIL_VICTIMS; i++)
        {
          /* Freed as the walk was about to go on from it: still visited
           * then, once (it stays linked until the walk lets it go). */
          if (tail_victim_seen[i] < -2u && tail_victim_seen[i] != 1)
            g_error ("walk %u saw victim %u %u times", walks, i, tail_victim_seen[i]);
          tail_victim_seen[i] = tail_victims[i] != NULL ? -1u : -2u;
        }
      walks++;
    }
  weft__foreach_tail_unlocked_hook = NULL;
  atomic_store (&tc.stop, TRUE);
  g_thread_join (th);
  g_test_message ("%u walks, %u victims freed at the cursor, %u contexts made meanwhile",
                  walks, tail_victims_freed, atomic_load (&tc.made));
  g_assert_cmpuint (tail_victims_freed, >=, walks);
  for (guint i = 0; i < TAIL_STABLE; i++)
    tail_context_free (stable[i]);
  for (guint i = 0; i < TAIL_VICTIMS; i++)
    if (tail_victims[i] != NULL)
      tail_context_free (tail_victims[i]);
  g_free (stable);
  g_free (tail_victims);
  g_free (tail_victim_seen);
  g_free (seen);
  weft_engine_unref (engine);
}

/* ---- a removed source's notify, with its readiness queued -------------- */

typedef struct {
  atomic_int started;   /* the blocking job runs */
  atomic_int gate;      /* the blocking job waits for it */
  atomic_int calls;     /* the source's callback */
  atomic_int notified;
} QueuedNotify;

static void
queued_block_job (gpointer data)
{
  QueuedNotify *q = data;
  atomic_store (&q->started, 1);
  while (!atomic_load (&q->gate))
    g_usleep (500);
}

static void
queued_notify (gpointer data)
{
  QueuedNotify *q = data;
  atomic_fetch_add (&q->notified, 1);
}

static gboolean
queued_fd_cb (gint fd, GIOCondition condition, gpointer data)
{
  QueuedNotify *q = data;
  atomic_fetch_add (&q->calls, 1);
  return G_SOURCE_CONTINUE;
}

static gboolean
queued_signal_cb (gint signum, gpointer data)
{
  QueuedNotify *q = data;
  atomic_fetch_add (&q->calls, 1);
  return G_SOURCE_CONTINUE;
}

/* Variants: fd or signal source; removed by weft_context_remove() or by
 * weft_context_destroy(). */
typedef struct {
  gboolean signal;
  gboolean destroy;
} QueuedVariant;

static void
test_notify_with_node_queued (gconstpointer data)
{
  const QueuedVariant *v = data;
  g_test_summary ("A source whose readiness waits in its context's inbox (behind a running "
                  "job) and is removed from another thread: by weft_context_remove(), its "
                  "destroy notify has run when that returns (its callback is not running); by "
                  "weft_context_destroy(), it runs once the running job returns, not beside "
                  "it; either way once, and its callback never runs");
  if (v->signal && !g_test_subprocess ())
    {
      /* Blocking the signal in the test thread lasts for the process. */
      g_test_trap_subprocess (NULL, 20 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      return;
    }
  if (v->signal)
    {
      sigset_t set;
      sigemptyset (&set);
      sigaddset (&set, SIGUSR2);
      g_assert_cmpint (pthread_sigmask (SIG_BLOCK, &set, NULL), ==, 0);
    }

  QueuedNotify q = { 0 };
  GError *error = NULL;
  WeftEngine *engine = weft_engine_new (2, &error);
  g_assert_no_error (error);
  WeftContext *ctx = weft_context_new (engine);
  int efd = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
  g_assert_cmpint (efd, >=, 0);
  guint id = v->signal
                 ? weft_context_add_signal (ctx, SIGUSR2, queued_signal_cb, &q, queued_notify, &error)
                 : weft_context_add_fd (ctx, efd, G_IO_IN, queued_fd_cb, &q, queued_notify, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (id, >, 0);
  weft_context_dispatch (ctx);

  /* The job runs and blocks its context; the readiness then queues behind
   * it (the job's node is off the inbox while it runs, so the inbox holds
   * the source's node only). */
  weft_context_post (ctx, queued_block_job, &q, NULL);
  while (!atomic_load (&q.started))
    g_usleep (500);
  g_assert_false (weft__context_back_nonempty (ctx));
  if (v->signal)
    g_assert_cmpint (kill (getpid (), SIGUSR2), ==, 0);
  else
    {
      guint64 one = 1;
      g_assert_cmpint (write (efd, &one, sizeof one), ==, sizeof one);
    }
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (!weft__context_back_nonempty (ctx))
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_usleep (500);
    }

  if (v->destroy)
    {
      /* A callback of the context runs (the job): the sources' notifies
       * wait for it to return, never run beside it. */
      weft_context_destroy (ctx);
      g_assert_cmpint (atomic_load (&q.notified), ==, 0);
      atomic_store (&q.gate, 1);
      WT_WAIT_UNTIL (atomic_load (&q.notified) == 1);
    }
  else
    g_assert_true (weft_context_remove (ctx, id));
  g_assert_cmpint (atomic_load (&q.notified), ==, 1);
  g_assert_cmpint (atomic_load (&q.calls), ==, 0);

  atomic_store (&q.gate, 1);
  weft_context_unref (ctx);
  weft_engine_unref (engine); /* joins the workers: the queued node is done */
  g_assert_cmpint (atomic_load (&q.notified), ==, 1);
  g_assert_cmpint (atomic_load (&q.calls), ==, 0);
  close (efd);
}

/* ---- the contexts' lock ------------------------------------------------ */

typedef struct {
  WeftLock lock;
  guint64 counter; /* plain: only changed under the lock */
  guint rounds;
} LockRace;

static gpointer
lock_race_thread (gpointer data)
{
  LockRace *r = data;
  for (guint i = 0; i < r->rounds; i++)
    {
      weft__lock_acquire (&r->lock);
      /* A read, a pause and a write: two holders at once lose updates. */
      guint64 v = r->counter;
      if (i % 64 == 0)
        weft__cpu_relax ();
      r->counter = v + 1;
      weft__lock_release (&r->lock);
    }
  return NULL;
}

static void
test_lock_exclusion (void)
{
  g_test_summary ("WeftLock admits one holder at a time: 4 threads on 2 CPUs do a "
                  "read-pause-write under it and lose no update; free again after");

  LockRace r = { .rounds = 200000 };
  weft__lock_init (&r.lock);
  GThread *t[4];
  for (guint i = 0; i < G_N_ELEMENTS (t); i++)
    t[i] = g_thread_new ("lock-race", lock_race_thread, &r);
  for (guint i = 0; i < G_N_ELEMENTS (t); i++)
    g_thread_join (t[i]);
  g_assert_cmpuint (r.counter, ==, (guint64) G_N_ELEMENTS (t) * r.rounds);
  g_assert_cmpuint (atomic_load (&r.lock.v), ==, 0);
}

typedef struct {
  WeftLock *lock;
  atomic_int state; /* 0 started, 1 holds the lock */
} LockSleeper;

static gpointer
lock_sleeper_thread (gpointer data)
{
  LockSleeper *s = data;
  weft__lock_acquire (s->lock);
  atomic_store (&s->state, 1);
  weft__lock_release (s->lock);
  return NULL;
}

static void
test_lock_sleeper_woken (void)
{
  g_test_summary ("A thread that finds WeftLock held past its spinning sleeps (counted in "
                  "the lock's sleepers) and is woken by the release: it gets the lock "
                  "once, after the holder let go, and the release issued a wake");

  WeftLock lock;
  weft__lock_init (&lock);
  weft__lock_acquire (&lock);
  LockSleeper s = { &lock, 0 };
  GThread *t = g_thread_new ("lock-sleeper", lock_sleeper_thread, &s);
  /* Held for 200 ms: far past the spinning, so the waiter sleeps. */
  WT_WAIT_UNTIL (atomic_load (&lock.sleepers) == 1);
  g_usleep (200 * 1000);
  g_assert_cmpint (atomic_load (&s.state), ==, 0);
  g_assert_cmpuint (atomic_load (&lock.sleepers), ==, 1);
  g_assert_cmpuint (atomic_load (&lock.v), ==, 1);
  guint wakes = atomic_load (&weft__lock_wakes);
  weft__lock_release (&lock);
  /* (Counted before the futex call, so a sleeper it woke cannot have
   * finished before the count moved.) */
  g_assert_cmpuint (atomic_load (&weft__lock_wakes), >, wakes);
  g_thread_join (t);
  g_assert_cmpint (atomic_load (&s.state), ==, 1);
  g_assert_cmpuint (atomic_load (&lock.v), ==, 0);
  g_assert_cmpuint (atomic_load (&lock.sleepers), ==, 0);
}

/* ---- edge-triggered fd sources: the dispatch's lock-free end ----------- */

typedef struct {
  WtCount c;              /* ran: callbacks; notify: wt_count_notify() */
  WtGate gate;            /* the first callback waits here */
  atomic_uint seen;       /* GIOCondition bits delivered */
  WeftEngine *engine;
  WeftContext *ctx;
  int sv[2];              /* sv[0] watched, sv[1] written */
  guint id;
} EdgeWatch;

static gboolean
edge_cb (gint fd, GIOCondition cond, gpointer data)
{
  EdgeWatch *w = data;
  atomic_fetch_add (&w->c.inside, 1);
  if (atomic_fetch_add (&w->c.ran, 1) == 0)
    wt_gate_wait (&w->gate);
  atomic_fetch_or (&w->seen, (guint) cond);
  if (cond & G_IO_IN)
    {
      char buf[64];
      while (read (fd, buf, sizeof buf) > 0)
        ;
    }
  atomic_fetch_sub (&w->c.inside, 1);
  return G_SOURCE_CONTINUE;
}

/* An edge-triggered source on a socket, on a 2-worker engine, with its
 * first callback (for one byte written) held in the gate on return. */
static void
edge_watch_start (EdgeWatch *w)
{
  GError *error = NULL;

  w->engine = wt_engine_new (2);
  w->ctx = weft_context_new (w->engine);
  wt_gate_init (&w->gate);
  wt_socketpair (w->sv);
  w->id = weft__context_add_fd (w->ctx, w->sv[0], G_IO_IN | WEFT__IO_EDGE, edge_cb, w,
                                wt_count_notify, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (w->id, >, 0);
  weft_context_dispatch (w->ctx);

  wt_write_byte (w->sv[1]);
  WT_WAIT_UNTIL (atomic_load (&w->gate.entered) == 1);
  g_assert_cmpint (atomic_load (&w->gate.entered), ==, 1);
}

static void
edge_watch_finish (EdgeWatch *w)
{
  weft_context_unref (w->ctx);
  weft_engine_unref (w->engine);
  wt_close (w->sv[0]);
  wt_close (w->sv[1]);
  wt_gate_clear (&w->gate);
}

static void
test_edge_interest_while_running (void)
{
  g_test_summary ("An edge-triggered fd source whose interest another thread changes while "
                  "its callback runs gets the new interest once the callback returns: the "
                  "setter sees it running and leaves the re-arm to the dispatch's end");

  EdgeWatch w = { 0 };
  edge_watch_start (&w);
  /* From this thread, while the callback runs: the socket is writable, so
   * asking for G_IO_OUT must bring a callback once the epoll interest
   * follows. */
  g_assert_true (weft__context_set_fd_interest (w.ctx, w.id, G_IO_IN | G_IO_OUT, NULL));
  g_assert_cmpuint (atomic_load (&w.seen) & G_IO_OUT, ==, 0);
  wt_gate_open (&w.gate);

  WT_WAIT_UNTIL (atomic_load (&w.seen) & G_IO_OUT);
  g_assert_cmpuint (atomic_load (&w.seen) & G_IO_OUT, ==, G_IO_OUT);
  g_assert_cmpint (atomic_load (&w.c.ran), >=, 2);

  weft_context_remove (w.ctx, w.id);
  WT_WAIT_UNTIL (atomic_load (&w.c.notified) == 1);
  g_assert_cmpint (atomic_load (&w.c.notified), ==, 1);
  edge_watch_finish (&w);
}

static void
test_edge_remove_while_running (void)
{
  g_test_summary ("Removing an edge-triggered fd source from another thread while its "
                  "callback runs: the remove returns at once, the notify runs exactly once "
                  "and only after the callback returned, and no callback follows");

  EdgeWatch w = { 0 };
  edge_watch_start (&w);
  g_assert_true (weft_context_remove (w.ctx, w.id));
  g_assert_false (weft_context_remove (w.ctx, w.id));
  /* Still inside: the notify waits for the callback. */
  g_assert_cmpint (atomic_load (&w.c.notified), ==, 0);
  wt_gate_open (&w.gate);

  WT_WAIT_UNTIL (atomic_load (&w.c.notified) == 1);
  g_assert_cmpint (atomic_load (&w.c.notified), ==, 1);
  g_assert_cmpint (atomic_load (&w.c.notify_while_inside), ==, 0);
  /* Removed: more data brings no callback. */
  wt_write_byte (w.sv[1]);
  wt_quiet_window_ms (50);
  g_assert_cmpint (atomic_load (&w.c.ran), ==, 1);
  g_assert_cmpint (atomic_load (&w.c.notified), ==, 1);
  edge_watch_finish (&w);
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/internal/idmap-model", test_idmap_model);
  g_test_add_func ("/internal/idmap-remove-in-order", test_idmap_remove_in_order);
  g_test_add_func ("/internal/idmap-grow-in-place", test_idmap_grow_in_place);
  g_test_add_func ("/internal/idmap-grow-big", test_idmap_grow_big);
  g_test_add_func ("/internal/heap-order-and-cancel", test_heap_order_and_cancel);
  g_test_add_func ("/internal/mpsc-fifo-per-producer", test_mpsc_fifo_per_producer);
  g_test_add_func ("/internal/mpsc-nonempty-while-stub-repushed",
                   test_mpsc_nonempty_while_stub_repushed);
  g_test_add_func ("/internal/mpsc-quiet", test_mpsc_quiet);
  g_test_add_func ("/internal/jobcache-cross-thread", test_jobcache_cross_thread);
  g_test_add_func ("/internal/jobcache-keeps-errno", test_jobcache_keeps_errno);
  g_test_add_func ("/internal/foreach-tail-churn", test_foreach_tail_churn);
  g_test_add_func ("/internal/lock-exclusion", test_lock_exclusion);
  g_test_add_func ("/internal/lock-sleeper-woken", test_lock_sleeper_woken);
  g_test_add_func ("/internal/edge-interest-while-running", test_edge_interest_while_running);
  g_test_add_func ("/internal/edge-remove-while-running", test_edge_remove_while_running);
  static const QueuedVariant fd_remove = { FALSE, FALSE }, fd_destroy = { FALSE, TRUE },
                             sig_remove = { TRUE, FALSE }, sig_destroy = { TRUE, TRUE };
  g_test_add_data_func ("/internal/notify-with-node-queued/fd-remove", &fd_remove,
                        test_notify_with_node_queued);
  g_test_add_data_func ("/internal/notify-with-node-queued/fd-destroy", &fd_destroy,
                        test_notify_with_node_queued);
  g_test_add_data_func ("/internal/notify-with-node-queued/signal-remove", &sig_remove,
                        test_notify_with_node_queued);
  g_test_add_data_func ("/internal/notify-with-node-queued/signal-destroy", &sig_destroy,
                        test_notify_with_node_queued);
  return g_test_run ();
}
