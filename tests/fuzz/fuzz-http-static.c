/* fuzz-http-static.c: libFuzzer target for the static-file path resolver
 * (http/weft-http-static.c: weft__http_static_relative_path and
 * weft__http_static_open_beneath). Built by tests/fuzz/run; replayed by
 * tests/test-fuzz-replay.c.
 *
 * The input, up to its first NUL, is a request path. It is resolved as
 * the directory handler resolves it and checked against a model written
 * here (decode once, refuse a bad escape, NUL or backslash, drop empty and
 * "." segments, refuse ".."); a result never starts with '/', never has an
 * empty, "." or ".." segment, a backslash or a trailing slash. It is then
 * opened under the root of fuzz-tree.h (symlinks out of the root, to
 * /etc, absolute, inside, a loop, a FIFO), and so is its index.html if it
 * is a directory, and so is the raw input itself (the kernel's
 * RESOLVE_BENEATH alone, without the decoding's checks): whatever opens
 * must read back through /proc/self/fd as the root or beneath it.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft-http-private.h"
#include "fuzz-tree.h"

static int root_fd = -1;

/* What the resolver should answer, from its documentation. */
static char *
model_relative (const char *path)
{
  GString *dec = g_string_new (NULL);
  for (gsize i = 0; path[i] != '\0'; i++)
    {
      char c = path[i];
      if (c == '%')
        {
          if (!g_ascii_isxdigit (path[i + 1]) || !g_ascii_isxdigit (path[i + 2]))
            goto bad;
          c = (char) (g_ascii_xdigit_value (path[i + 1]) * 16 + g_ascii_xdigit_value (path[i + 2]));
          i += 2;
        }
      if (c == '\0' || c == '\\')
        goto bad;
      g_string_append_c (dec, c);
    }
  GPtrArray *keep = g_ptr_array_new ();
  char **segs = g_strsplit (dec->str, "/", -1);
  gboolean dotdot = FALSE;
  for (char **s = segs; *s != NULL; s++)
    {
      if (strcmp (*s, "..") == 0)
        dotdot = TRUE;
      else if (**s != '\0' && strcmp (*s, ".") != 0)
        g_ptr_array_add (keep, *s);
    }
  g_ptr_array_add (keep, NULL);
  char *rel = dotdot ? NULL : g_strjoinv ("/", (char **) keep->pdata);
  g_ptr_array_unref (keep);
  g_strfreev (segs);
  g_string_free (dec, TRUE);
  return rel;
bad:
  g_string_free (dec, TRUE);
  return NULL;
}

static void
check_rel (const char *rel)
{
  if (rel[0] == '/' || strchr (rel, '\\') != NULL)
    abort ();
  if (rel[0] == '\0')
    return; /* the root itself */
  char **segs = g_strsplit (rel, "/", -1);
  for (char **s = segs; *s != NULL; s++)
    if (**s == '\0' || strcmp (*s, ".") == 0 || strcmp (*s, "..") == 0)
      abort (); /* also catches a leading, trailing or doubled '/' */
  g_strfreev (segs);
}

/* Opens @rel beneath the root; anything that opens must be the root or
 * under it. Returns whether it is a directory. */
static gboolean
open_and_check (const char *rel)
{
  const FuzzTree *t = fuzz_tree_get ();
  int fd = weft__http_static_open_beneath (root_fd, rel);
  if (fd < 0)
    return FALSE;
  char proc[64], where[4096];
  g_snprintf (proc, sizeof proc, "/proc/self/fd/%d", fd);
  ssize_t n = readlink (proc, where, sizeof where - 1);
  if (n < 0)
    abort ();
  where[n] = '\0';
  gsize rl = strlen (t->root_real);
  if (strncmp (where, t->root_real, rl) != 0 || (where[rl] != '\0' && where[rl] != '/'))
    {
      fprintf (stderr, "fuzz-http-static: \"%s\" opened %s, outside %s\n", rel, where,
               t->root_real);
      abort ();
    }
  struct stat st;
  if (fstat (fd, &st) != 0)
    abort ();
  close (fd);
  return S_ISDIR (st.st_mode);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  const FuzzTree *t = fuzz_tree_get ();
  if (root_fd < 0)
    {
      root_fd = open (t->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (root_fd < 0)
        abort ();
    }
  char *path = g_strndup ((const char *) data, size);
  char *rel = weft__http_static_relative_path (path);
  char *want = model_relative (path);
  if ((rel == NULL) != (want == NULL) || (rel != NULL && strcmp (rel, want) != 0))
    {
      fprintf (stderr, "fuzz-http-static: \"%s\" resolved to \"%s\", the model says \"%s\"\n",
               path, rel ? rel : "(refused)", want ? want : "(refused)");
      abort ();
    }
  if (rel != NULL)
    {
      check_rel (rel);
      /* As the handler does: the root is ".", a directory's index.html. */
      if (open_and_check (rel[0] != '\0' ? rel : "."))
        {
          char *index = g_strconcat (rel[0] != '\0' ? rel : ".", "/index.html", NULL);
          open_and_check (index);
          g_free (index);
        }
    }
  /* The raw input, unchecked by the decoding: the kernel must still hold. */
  if (path[0] != '\0')
    open_and_check (path);
  g_free (want);
  g_free (rel);
  g_free (path);
  return 0;
}
