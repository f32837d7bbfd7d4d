/* weft-idmap.c: source id -> source, for weft_context_remove().
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-context-private.h"

/* Most contexts hold one or two sources (a connection's fd and a timeout):
 * the first lives in the map itself (mask 0: no table), and the table
 * starts small, since idle connections are counted in bytes. */
#define MIN_CAP 4

void
weft__idmap_init (WeftIdMap *map)
{
  map->one_value = NULL;
  map->mask = 0;
  map->one_key = 0;
}

/* The table's keys follow its values in the same block. */
static inline guint *
keys_of (WeftIdMap *map)
{
  return (guint *) (map->values + map->mask + 1);
}

guint
weft__idmap_size (WeftIdMap *map)
{
  return map->mask != 0 ? map->len : map->one_key != 0;
}

void
weft__idmap_clear (WeftIdMap *map)
{
  if (map->mask != 0)
    g_free (map->values); /* one block with the keys */
  weft__idmap_init (map);
}

/* How far the entry in slot @i sits from its home slot. */
static inline guint
dist (WeftIdMap *map, const guint *keys, guint i)
{
  return (i - (keys[i] & map->mask)) & map->mask;
}

/* Robin Hood insertion: an entry takes the slot of any entry closer to its
 * own home, so runs stay sorted by home slot and lookups and deletions can
 * stop early. With ids handed out in sequence every entry is at home and
 * this is a single store. */
static void
place (WeftIdMap *map, guint key, gpointer value)
{
  guint *keys = keys_of (map);
  guint i = key & map->mask, d = 0;
  for (;; i = (i + 1) & map->mask, d++)
    {
      if (keys[i] == 0)
        {
          keys[i] = key;
          map->values[i] = value;
          return;
        }
      guint ed = dist (map, keys, i);
      if (ed < d)
        {
          guint k = keys[i];
          gpointer v = map->values[i];
          keys[i] = key;
          map->values[i] = value;
          key = k;
          value = v;
          d = ed;
        }
    }
}

/* Makes the first table (MIN_CAP) and moves the inline entry into it. */
static void
alloc_first (WeftIdMap *map)
{
  guint one_key = map->one_key; /* (read before the table overwrites them) */
  gpointer one_value = map->one_value;

  /* Values then keys in one block: one allocation per map. */
  map->values = g_malloc (MIN_CAP * (sizeof (gpointer) + sizeof (guint)));
  map->mask = MIN_CAP - 1;
  memset (keys_of (map), 0, MIN_CAP * sizeof (guint));
  map->len = 0;
  if (one_key != 0)
    {
      place (map, one_key, one_value);
      map->len = 1;
    }
}

/* Doubles the table in place. realloc extends a large block without
 * copying it (mremap), and with the identity hash an entry at its home
 * slot i has its new home at i or i + old_cap: moving it there keeps it at
 * home, so the table needs no rehash into fresh memory, which at a million
 * sources cost more than the inserts themselves. Entries away from home
 * (ids a multiple of the capacity apart) are rare: they are set aside and
 * placed again once everything else is at home. */
static void
grow (WeftIdMap *map)
{
  guint old_cap = map->mask + 1, old_mask = map->mask, cap = 2 * old_cap;

  gpointer *values = g_realloc (map->values, cap * (sizeof (gpointer) + sizeof (guint)));
  guint *keys = (guint *) (values + cap);
  memmove (keys, values + old_cap, old_cap * sizeof (guint));
  memset (keys + old_cap, 0, old_cap * sizeof (guint));
  map->values = values;
  map->mask = cap - 1;

  guint n_away = 0;
  for (guint i = 0; i < old_cap; i++)
    if (keys[i] != 0 && ((i - (keys[i] & old_mask)) & old_mask) != 0)
      n_away++;
  guint *away_keys = n_away ? g_new (guint, n_away) : NULL;
  gpointer *away_values = n_away ? g_new (gpointer, n_away) : NULL;

  guint k = 0;
  for (guint i = 0; i < old_cap; i++)
    {
      guint key = keys[i];
      if (key == 0)
        continue;
      if (((i - (key & old_mask)) & old_mask) != 0)
        {
          away_keys[k] = key;
          away_values[k++] = values[i];
          keys[i] = 0;
        }
      else if (key & old_cap)
        {
          keys[i + old_cap] = key;
          values[i + old_cap] = values[i];
          keys[i] = 0;
        }
    }
  /* Every entry left is at its home: a valid table to insert into. */
  for (guint j = 0; j < n_away; j++)
    place (map, away_keys[j], away_values[j]);
  g_free (away_keys);
  g_free (away_values);
}

void
weft__idmap_insert (WeftIdMap *map, guint key, gpointer value)
{
  if (map->mask == 0 && map->one_key == 0)
    {
      map->one_key = key;
      map->one_value = value;
      return;
    }
  /* Keep the load under 1/2 so probe runs stay short. */
  if (G_UNLIKELY (map->mask == 0))
    alloc_first (map);
  else if (G_UNLIKELY (2 * (map->len + 1) > map->mask + 1))
    grow (map);
  place (map, key, value);
  map->len++;
}

static gint
find (WeftIdMap *map, guint key)
{
  if (map->mask == 0 || key == 0)
    return -1;
  const guint *keys = keys_of (map);
  for (guint i = key & map->mask, d = 0;; i = (i + 1) & map->mask, d++)
    {
      if (keys[i] == key)
        return (gint) i;
      /* An empty slot, or an entry nearer its home than @key would be,
       * means @key is not in the run. */
      if (keys[i] == 0 || dist (map, keys, i) < d)
        return -1;
    }
}

gpointer
weft__idmap_lookup (WeftIdMap *map, guint key)
{
  if (map->mask == 0)
    return key != 0 && map->one_key == key ? map->one_value : NULL;
  gint i = find (map, key);
  return i < 0 ? NULL : map->values[i];
}

gpointer
weft__idmap_remove (WeftIdMap *map, guint key)
{
  if (map->mask == 0)
    {
      if (key == 0 || map->one_key != key)
        return NULL;
      gpointer one = map->one_value;
      weft__idmap_init (map);
      return one;
    }
  gint at = find (map, key);
  if (at < 0)
    return NULL;
  gpointer value = map->values[at];

  /* Backward shift: pull the following displaced entries one slot nearer
   * their home; stop at an empty slot or an entry already at home. */
  guint *keys = keys_of (map);
  guint hole = (guint) at;
  for (guint j = (hole + 1) & map->mask; keys[j] != 0 && dist (map, keys, j) > 0;
       j = (j + 1) & map->mask)
    {
      keys[hole] = keys[j];
      map->values[hole] = map->values[j];
      hole = j;
    }
  keys[hole] = 0;
  map->len--;
  return value;
}

void
weft__idmap_steal_all (WeftIdMap *map, GPtrArray *out)
{
  if (map->mask == 0 && map->one_key != 0)
    g_ptr_array_add (out, map->one_value);
  for (guint i = 0; map->mask != 0 && i <= map->mask; i++)
    if (keys_of (map)[i] != 0)
      g_ptr_array_add (out, map->values[i]);
  weft__idmap_clear (map);
}
