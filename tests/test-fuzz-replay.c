/* test-fuzz-replay.c: every file of tests/fuzz/corpus/<target>/ and
 * tests/fuzz/regressions/<target>/ through its fuzz target, built without
 * libFuzzer (tests/fuzz/meson.build renames each LLVMFuzzerTestOneInput).
 * A target checks its invariants with abort(), so a file that breaks one
 * fails its test path here, in every build: the ASan and TSan stages
 * replay the corpora and the crash reproducers too.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <glib.h>
#include <stdint.h>
#include <string.h>

typedef int (*FuzzOne) (const uint8_t *data, size_t size);

int weft_fuzz_http_parser (const uint8_t *data, size_t size);
int weft_fuzz_http_router (const uint8_t *data, size_t size);
int weft_fuzz_http_static (const uint8_t *data, size_t size);
int weft_fuzz_http_connection (const uint8_t *data, size_t size);

typedef struct {
  const char *name;
  FuzzOne one;
} Target;

static const Target targets[] = {
  { "http-parser", weft_fuzz_http_parser },
  { "http-router", weft_fuzz_http_router },
  { "http-static", weft_fuzz_http_static },
  { "http-connection", weft_fuzz_http_connection },
};

static int
compare_names (gconstpointer a, gconstpointer b)
{
  return strcmp (*(const char *const *) a, *(const char *const *) b);
}

/* Runs the files of @dir through @t, in name order; returns how many. */
static guint
replay_dir (const Target *t, const char *dir, gboolean required)
{
  char *path = g_build_filename (WEFT_FUZZ_DIR, dir, t->name, NULL);
  GError *error = NULL;
  GDir *d = g_dir_open (path, 0, &error);
  if (d == NULL)
    {
      if (required)
        g_error ("%s: %s", path, error->message);
      g_clear_error (&error);
      g_free (path);
      return 0;
    }
  GPtrArray *names = g_ptr_array_new_with_free_func (g_free);
  const char *name;
  while ((name = g_dir_read_name (d)) != NULL)
    g_ptr_array_add (names, g_strdup (name));
  g_dir_close (d);
  g_ptr_array_sort (names, compare_names);
  for (guint i = 0; i < names->len; i++)
    {
      char *file = g_build_filename (path, names->pdata[i], NULL);
      char *data;
      gsize len;
      g_assert_true (g_file_get_contents (file, &data, &len, NULL));
      g_test_message ("%s", file);
      t->one ((const uint8_t *) data, len);
      g_free (data);
      g_free (file);
    }
  guint n = names->len;
  g_ptr_array_unref (names);
  g_free (path);
  return n;
}

static void
test_replay (gconstpointer data)
{
  const Target *t = data;
  guint n = replay_dir (t, "corpus", TRUE);
  g_assert_cmpuint (n, >, 0); /* an empty corpus would prove nothing */
  n += replay_dir (t, "regressions", FALSE);
  g_test_message ("%s: %u inputs", t->name, n);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (targets); i++)
    {
      char *path = g_strconcat ("/fuzz-replay/", targets[i].name, NULL);
      g_test_add_data_func (path, &targets[i], test_replay);
      g_free (path);
    }
  return g_test_run ();
}
