/* fuzz-tree.h: the directory tree the static-file fuzz targets serve,
 * made once per process in a temporary directory and removed at exit:
 *
 *   <base>/outside.txt              a file outside the root
 *   <base>/root/                    the root
 *     index.html, a.txt, .hidden, "a b.txt", "%2e%2e" (a literal name)
 *     sub/index.html, sub/b.css, sub/deeper/c.js
 *     empty/                        a directory without index.html
 *     fifo                          a FIFO (must not block an open)
 *     link-out -> ../outside.txt    symlinks leading out of the root
 *     link-out-dir -> ..
 *     link-etc -> /etc
 *     link-abs -> <base>/outside.txt
 *     link-in -> sub/b.css          symlinks staying inside
 *     link-in-dir -> sub
 *     loop -> loop                  a symlink to itself
 *
 * File contents never contain "HTTP/": the connection target relies on
 * that to find where answers begin.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include <glib/gstdio.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  char *base;
  char *root;
  char *root_real; /* realpath of root: what an fd beneath it reads back as */
} FuzzTree;

static FuzzTree fuzz_tree;

static int
fuzz_tree_rm (const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
  return remove (path);
}

static void
fuzz_tree_remove (void)
{
  if (fuzz_tree.base != NULL)
    nftw (fuzz_tree.base, fuzz_tree_rm, 16, FTW_DEPTH | FTW_PHYS);
}

static void
fuzz_tree_file (const char *rel, const char *text)
{
  char *p = g_build_filename (fuzz_tree.root, rel, NULL);
  if (!g_file_set_contents (p, text, -1, NULL))
    abort ();
  g_free (p);
}

static void
fuzz_tree_link (const char *target, const char *rel)
{
  char *p = g_build_filename (fuzz_tree.root, rel, NULL);
  if (symlink (target, p) != 0)
    abort ();
  g_free (p);
}

static const FuzzTree *
fuzz_tree_get (void)
{
  if (fuzz_tree.base != NULL)
    return &fuzz_tree;
  fuzz_tree.base = g_dir_make_tmp ("weft-fuzz-tree-XXXXXX", NULL);
  if (fuzz_tree.base == NULL)
    abort ();
  atexit (fuzz_tree_remove);
  fuzz_tree.root = g_build_filename (fuzz_tree.base, "root", NULL);
  char *outside = g_build_filename (fuzz_tree.base, "outside.txt", NULL);
  const char *dirs[] = { "", "sub", "sub/deeper", "empty" };
  for (guint i = 0; i < G_N_ELEMENTS (dirs); i++)
    {
      char *p = g_build_filename (fuzz_tree.root, dirs[i], NULL);
      if (g_mkdir (p, 0755) != 0)
        abort ();
      g_free (p);
    }
  if (!g_file_set_contents (outside, "secret outside the root\n", -1, NULL))
    abort ();
  fuzz_tree_file ("index.html", "<p>root index</p>\n");
  fuzz_tree_file ("a.txt", "0123456789abcdefghijklmnopqrstuvwxyz\n");
  fuzz_tree_file (".hidden", "dot file\n");
  fuzz_tree_file ("a b.txt", "space in the name\n");
  fuzz_tree_file ("%2e%2e", "a literal percent name\n");
  fuzz_tree_file ("sub/index.html", "<p>sub index</p>\n");
  fuzz_tree_file ("sub/b.css", "p { color: red }\n");
  fuzz_tree_file ("sub/deeper/c.js", "let c = 1;\n");
  char *fifo = g_build_filename (fuzz_tree.root, "fifo", NULL);
  if (mkfifo (fifo, 0644) != 0)
    abort ();
  g_free (fifo);
  fuzz_tree_link ("../outside.txt", "link-out");
  fuzz_tree_link ("..", "link-out-dir");
  fuzz_tree_link ("/etc", "link-etc");
  fuzz_tree_link (outside, "link-abs");
  fuzz_tree_link ("sub/b.css", "link-in");
  fuzz_tree_link ("sub", "link-in-dir");
  fuzz_tree_link ("loop", "loop");
  g_free (outside);
  fuzz_tree.root_real = realpath (fuzz_tree.root, NULL);
  if (fuzz_tree.root_real == NULL)
    abort ();
  return &fuzz_tree;
}
