/* test-http-static.c: weft_http_server_add_directory() under hostile
 * clients: what the wire-level probes (tests/http-conformance.py, which
 * runs against bench-server) and the path tests of test-http-server.c do
 * not reach.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-net-util.h"
#include "weft-http-private.h" /* weft__http_static_force_fallback */

#include <fcntl.h>
#include <sys/socket.h>
#include <utime.h>

#include <glib/gstdio.h>

typedef struct {
  WeftEngine *engine;
  WeftHttpServer *server;
  guint16 port;
  gchar *root;
} Srv;

/* Writes file @rel with @contents under the server's root. */
static void
write_in (Srv *s, const char *rel, const char *contents)
{
  gchar *p = g_build_filename (s->root, rel, NULL);
  g_assert_true (g_file_set_contents (p, contents, -1, NULL));
  g_free (p);
}

/* A server for a fresh directory holding the files of @names and
 * @contents (NULL-terminated), mounted at @prefix. */
static void srv_serve (Srv *s, const char *prefix);

static void
srv_start_at (Srv *s, const char *prefix, const char *const *names, const char *const *contents)
{
  s->root = g_dir_make_tmp ("weft-static3-XXXXXX", NULL);
  g_assert_nonnull (s->root);
  for (guint i = 0; names[i] != NULL; i++)
    write_in (s, names[i], contents[i]);
  srv_serve (s, prefix);
}

static guint srv_keepalive_ms; /* 0: the default */

/* Serves s->root (made by the caller) at @prefix. */
static void
srv_serve (Srv *s, const char *prefix)
{
  GError *error = NULL;
  s->engine = wt_engine_new (2);
  s->server = weft_http_server_new (s->engine);
  if (srv_keepalive_ms != 0)
    weft_http_server_set_limit (s->server, WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS, srv_keepalive_ms);
  g_assert_true (weft_http_server_add_directory (s->server, prefix, s->root, &error));
  g_assert_no_error (error);
  WeftListener *l = weft_http_server_get_listener (s->server);
  g_assert_true (weft_listener_add_tcp (l, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  s->port = weft_listener_get_port (l, 0);
  g_assert_true (weft_http_server_start (s->server, &error));
  g_assert_no_error (error);
}

static void
srv_start (Srv *s, const char *const *names, const char *const *contents)
{
  srv_start_at (s, "/", names, contents);
}

static void
srv_stop (Srv *s)
{
  weft_http_server_unref (s->server);
  weft_engine_unref (s->engine);
  wt_remove_tree (s->root);
  g_free (s->root);
}

/* Sends @req on a fresh connection and reads until the server closes. */
static gchar *
exchange_to_close (guint16 port, const char *req)
{
  int fd = wt_connect_tcp (port);
  wt_send_str (fd, req);
  GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
  close (fd);
  g_byte_array_append (got, (const guint8 *) "", 1);
  return (gchar *) g_byte_array_free (got, FALSE);
}

static guint
count_open_fds (void)
{
  GDir *d = g_dir_open ("/proc/self/fd", 0, NULL);
  g_assert_nonnull (d);
  guint n = 0;
  while (g_dir_read_name (d) != NULL)
    n++;
  g_dir_close (d);
  return n;
}

/* A client that pipelines requests for a one-byte file and reads none of
 * the answers. They wait in the connection's write queue, each with the
 * file's descriptor: the byte mark alone (1 MiB) let some 4,000 of them
 * wait on one connection, enough to run a server with the usual limit of
 * 1,024 descriptors out of them. The file parts queued now block the
 * connection as bytes do. */
static void
test_unread_answers_hold_few_fds (void)
{
  static const char *const names[] = { "one.txt", NULL };
  static const char *const contents[] = { "x", NULL };
  Srv s;
  srv_start (&s, names, contents);
  guint before = count_open_fds ();

  int fd = wt_connect_tcp (s.port);
  g_assert_cmpint (fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) | O_NONBLOCK), ==, 0);
  GString *reqs = g_string_new (NULL);
  for (guint i = 0; i < 256; i++)
    g_string_append (reqs, "GET /one.txt HTTP/1.1\r\nHost: a\r\n\r\n");
  /* Send until the server takes no more: its socket buffer is full, so it
   * stopped reading. (Bounded: 20 s at most.) */
  gint64 start = g_get_monotonic_time (), last_sent = start;
  gsize off = 0;
  guint64 total = 0;
  while (g_get_monotonic_time () - last_sent < 500 * 1000 &&
         g_get_monotonic_time () - start < 20 * G_USEC_PER_SEC)
    {
      gssize n = send (fd, reqs->str + off, reqs->len - off, MSG_NOSIGNAL);
      if (n > 0)
        {
          total += (guint64) n;
          off = (off + (gsize) n) % reqs->len;
          last_sent = g_get_monotonic_time ();
        }
      else
        {
          g_assert_true (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
          g_usleep (10 * 1000);
        }
    }
  guint during = count_open_fds ();
  g_test_message ("sent %" G_GUINT64_FORMAT " bytes; descriptors %u before, %u during",
                  total, before, during);
  close (fd);
  /* The client's socket, the server's, and at most 17 files queued (the
   * 17th blocks the writer), with two to spare. Answers held for one
   * flush after a read's requests once kept up to the pipeline limit of
   * files more (33 to 42 over "before"). */
  g_assert_cmpuint (during, <=, before + 2 + 17 + 2);
  g_string_free (reqs, TRUE);
  srv_stop (&s);
}

static gchar *
get (guint16 port, const char *path, const char *extra)
{
  gchar *req = g_strdup_printf ("GET %s HTTP/1.1\r\nHost: a\r\nConnection: close\r\n%s\r\n",
                                path, extra != NULL ? extra : "");
  gchar *got = exchange_to_close (port, req);
  g_free (req);
  return got;
}

/* The value of header @name (with its ": ") in the answer @got. */
static gchar *
header_of (const char *got, const char *name)
{
  const char *h = strstr (got, name);
  g_assert_nonnull (h);
  h += strlen (name);
  return g_strndup (h, (gsize) (strstr (h, "\r\n") - h));
}

static void
expect_answer (gchar *got, const char *status_line, const char *body)
{
  const char *end = strstr (got, "\r\n\r\n");
  if (!g_str_has_prefix (got, status_line) || end == NULL || strcmp (end + 4, body) != 0)
    g_error ("expected %s with body %s, got:\n%s", status_line, body, got);
  g_free (got);
}

/* RFC 9110 §13.1.5: a Range under If-Range is served only while the
 * validator still matches (the entity tag strongly, or the Last-Modified
 * date exactly); otherwise the whole file, 200. The range was served
 * whatever If-Range said: a client resuming a download of a file changed
 * since got a piece of the new file to append to the old one. */
static void
test_if_range (void)
{
  static const char *const names[] = { "a.txt", NULL };
  static const char *const contents[] = { "0123456789", NULL };
  Srv s;
  srv_start (&s, names, contents);
  /* Modified long ago: its date is a strong validator. */
  gchar *path = g_build_filename (s.root, "a.txt", NULL);
  struct utimbuf past = { 1600000000, 1600000000 };
  g_assert_cmpint (g_utime (path, &past), ==, 0);
  g_free (path);

  gchar *got = get (s.port, "/a.txt", NULL);
  gchar *etag = header_of (got, "\r\nETag: ");
  gchar *modified = header_of (got, "\r\nLast-Modified: ");
  g_free (got);

  gchar *extra = g_strdup_printf ("Range: bytes=2-4\r\nIf-Range: %s\r\n", etag);
  expect_answer (get (s.port, "/a.txt", extra), "HTTP/1.1 206 ", "234");
  g_free (extra);
  extra = g_strdup_printf ("Range: bytes=2-4\r\nIf-Range: %s\r\n", modified);
  expect_answer (get (s.port, "/a.txt", extra), "HTTP/1.1 206 ", "234");
  g_free (extra);
  /* A validator of another version of the file: the whole file. */
  expect_answer (get (s.port, "/a.txt", "Range: bytes=2-4\r\nIf-Range: \"1-2-3\"\r\n"),
                 "HTTP/1.1 200 ", "0123456789");
  extra = g_strdup_printf ("Range: bytes=2-4\r\nIf-Range: W/%s\r\n", etag);
  expect_answer (get (s.port, "/a.txt", extra), "HTTP/1.1 200 ", "0123456789");
  g_free (extra);
  expect_answer (get (s.port, "/a.txt",
                      "Range: bytes=2-4\r\nIf-Range: Sun, 06 Nov 1994 08:49:37 GMT\r\n"),
                 "HTTP/1.1 200 ", "0123456789");
  expect_answer (get (s.port, "/a.txt", "Range: bytes=2-4\r\nIf-Range: garbage\r\n"),
                 "HTTP/1.1 200 ", "0123456789");
  /* Nor does a stale If-Range turn an unsatisfiable range into a 416. */
  expect_answer (get (s.port, "/a.txt", "Range: bytes=99-\r\nIf-Range: \"1-2-3\"\r\n"),
                 "HTTP/1.1 200 ", "0123456789");
  /* Without a Range, If-Range means nothing. */
  expect_answer (get (s.port, "/a.txt", "If-Range: \"1-2-3\"\r\n"), "HTTP/1.1 200 ",
                 "0123456789");
  g_free (modified);
  g_free (etag);
  srv_stop (&s);
}

/* A directory named without its trailing slash is redirected to the
 * name with it; for the root itself, spelled "/." or "/%2e", that is "/".
 * It was "//": a network-path reference with no host, which no client
 * can follow and which the redirect code means never to send. */
static void
test_root_redirect (void)
{
  static const char *const names[] = { "index.html", NULL };
  static const char *const contents[] = { "home", NULL };
  Srv s;
  srv_start (&s, names, contents);
  const char *const paths[] = { "/.", "/%2e", "/./.", "/%2E" };
  for (guint i = 0; i < G_N_ELEMENTS (paths); i++)
    {
      gchar *got = get (s.port, paths[i], NULL);
      if (!g_str_has_prefix (got, "HTTP/1.1 301 ") || strstr (got, "\r\nLocation: /\r\n") == NULL)
        g_error ("%s:\n%s", paths[i], got);
      g_free (got);
    }
  expect_answer (get (s.port, "/", NULL), "HTTP/1.1 200 ", "home");
  srv_stop (&s);
}

/* Sets @name's times to 1600000000 (Sun, 13 Sep 2020 12:26:40 GMT). */
static void
set_old_mtime (Srv *s, const char *name)
{
  gchar *path = g_build_filename (s->root, name, NULL);
  struct utimbuf past = { 1600000000, 1600000000 };
  g_assert_cmpint (g_utime (path, &past), ==, 0);
  g_free (path);
}

static gchar *
etag_of (Srv *s, const char *path)
{
  gchar *got = get (s->port, path, NULL);
  gchar *etag = header_of (got, "\r\nETag: ");
  g_free (got);
  return etag;
}

static void
expect_status (gchar *got, const char *status_line, const char *what)
{
  if (!g_str_has_prefix (got, status_line))
    g_error ("%s: expected %s, got:\n%s", what, status_line, got);
  g_free (got);
}

/* RFC 9110 §13.1-13.2: If-Match (strong comparison) and
 * If-Unmodified-Since refuse with 412, before If-None-Match (weak) and
 * If-Modified-Since answer 304; lists of entity tags may be split over
 * several lines and are matched tag by tag, not as text. If-Match and
 * If-Unmodified-Since were ignored, If-None-Match matched as a substring
 * of its first line only. */
static void
test_preconditions (void)
{
  static const char *const names[] = { "a.txt", NULL };
  static const char *const contents[] = { "0123456789", NULL };
  Srv s;
  srv_start (&s, names, contents);
  set_old_mtime (&s, "a.txt");
  gchar *etag = etag_of (&s, "/a.txt");
  const char *after = "Mon, 14 Sep 2020 00:00:00 GMT";  /* after the mtime */
  const char *before = "Sat, 12 Sep 2020 00:00:00 GMT"; /* before it */
  struct {
    const char *fmt; /* {E}: the ETag, {A}: a date after, {B}: a date before */
    const char *status;
  } rows[] = {
    { "If-Match: {E}\r\n", "HTTP/1.1 200 " },
    { "If-Match: *\r\n", "HTTP/1.1 200 " },
    { "If-Match: \"zzz\", {E}\r\n", "HTTP/1.1 200 " },
    { "If-Match: \"zzz\"\r\n", "HTTP/1.1 412 Precondition Failed\r\n" },
    { "If-Match: W/{E}\r\n", "HTTP/1.1 412 Precondition Failed\r\n" },   /* a weak tag never matches strongly */
    { "If-Match: x{E}\r\n", "HTTP/1.1 412 Precondition Failed\r\n" },    /* malformed: matches nothing */
    { "If-Unmodified-Since: {A}\r\n", "HTTP/1.1 200 " },
    { "If-Unmodified-Since: {B}\r\n", "HTTP/1.1 412 Precondition Failed\r\n" },
    { "If-Unmodified-Since: yesterday\r\n", "HTTP/1.1 200 " }, /* not a date: ignored */
    { "If-Match: {E}\r\nIf-Unmodified-Since: {B}\r\n", "HTTP/1.1 200 " }, /* If-Match wins */
    { "If-Match: \"zzz\"\r\nIf-None-Match: {E}\r\n", "HTTP/1.1 412 Precondition Failed\r\n" },  /* 412 first */
    { "If-None-Match: {E}\r\n", "HTTP/1.1 304 " },
    { "If-None-Match: W/{E}\r\n", "HTTP/1.1 304 " }, /* weak comparison */
    { "If-None-Match: *\r\n", "HTTP/1.1 304 " },
    { "If-None-Match: \"a\"\r\nIf-None-Match: {E}\r\n", "HTTP/1.1 304 " }, /* one list */
    { "If-None-Match: \"a\", {E}\r\n", "HTTP/1.1 304 " },
    { "If-None-Match: x{E}y\r\n", "HTTP/1.1 200 " }, /* no substring match */
    { "If-None-Match: \"a\"\r\n", "HTTP/1.1 200 " },
    { "If-None-Match: \"a\"\r\nIf-Modified-Since: {A}\r\n", "HTTP/1.1 200 " }, /* INM wins */
    { "If-Modified-Since: {A}\r\n", "HTTP/1.1 304 " },
    { "If-Modified-Since: {B}\r\n", "HTTP/1.1 200 " },
    { "If-Unmodified-Since: {A}\r\nIf-None-Match: {E}\r\n", "HTTP/1.1 304 " },
  };
  for (guint i = 0; i < G_N_ELEMENTS (rows); i++)
    {
      GString *extra = g_string_new (rows[i].fmt);
      g_string_replace (extra, "{E}", etag, 0);
      g_string_replace (extra, "{A}", after, 0);
      g_string_replace (extra, "{B}", before, 0);
      expect_status (get (s.port, "/a.txt", extra->str), rows[i].status, extra->str);
      g_string_free (extra, TRUE);
    }
  g_free (etag);
  srv_stop (&s);
}

/* RFC 9110 §5.6.7: a recipient accepts all three forms of HTTP-date
 * (IMF-fixdate, RFC 850 with its two-digit year, asctime), and §13.1.3
 * ignores an invalid one: sscanf and timegm made "99 Jan 2099 99:99:99"
 * a date, and knew only the first form. */
static void
test_http_dates (void)
{
  static const char *const names[] = { "a.txt", NULL };
  static const char *const contents[] = { "0123456789", NULL };
  Srv s;
  srv_start (&s, names, contents);
  set_old_mtime (&s, "a.txt");
  struct {
    const char *date;
    const char *status; /* as If-Modified-Since: 304 if read as the mtime */
  } rows[] = {
    { "Sun, 13 Sep 2020 12:26:40 GMT", "HTTP/1.1 304 " },
    { "Sunday, 13-Sep-20 12:26:40 GMT", "HTTP/1.1 304 " },
    { "Sun Sep 13 12:26:40 2020", "HTTP/1.1 304 " },
    { "Sun Sep  3 12:26:40 2020", "HTTP/1.1 200 " }, /* asctime's " 3": ten days before */
    { "Sun, 13 Sep 2020 12:26:39 GMT", "HTTP/1.1 200 " },
    { "Sun, 99 Jan 2099 99:99:99 GMT", "HTTP/1.1 200 " },
    { "Sun, 31 Feb 2099 00:00:00 GMT", "HTTP/1.1 200 " },
    { "Sun, 13 sep 2099 00:00:00 GMT", "HTTP/1.1 200 " },
    { "Sun, 13 Sep 2099 00:00:00 UTC", "HTTP/1.1 200 " },
    { "Sun, 13 Sep 2099 00:00:00 GMT junk", "HTTP/1.1 200 " },
    { "Sun,  13 Sep 2099 00:00:00 GMT", "HTTP/1.1 200 " },
    { "Sunday, 13-Sep-2099 00:00:00 GMT", "HTTP/1.1 200 " },
    { "2099-09-13T00:00:00Z", "HTTP/1.1 200 " },
  };
  for (guint i = 0; i < G_N_ELEMENTS (rows); i++)
    {
      gchar *extra = g_strdup_printf ("If-Modified-Since: %s\r\n", rows[i].date);
      expect_status (get (s.port, "/a.txt", extra), rows[i].status, extra);
      g_free (extra);
    }
  srv_stop (&s);
}

/* A file asked for as a directory (a trailing slash, or a last "."
 * segment, escaped or not) is not found, as open() says ENOTDIR: it was
 * served, so one file had several URLs and its relative links resolved
 * elsewhere. */
static void
test_file_as_directory (void)
{
  static const char *const names[] = { "a.txt", NULL };
  static const char *const contents[] = { "0123456789", NULL };
  Srv s;
  srv_start (&s, names, contents);
  const char *const paths[] = { "/a.txt/", "/a.txt/.", "/a.txt/%2e", "/a.txt//", "/a.txt/./",
                                "/a.txt%2f", "/a.txt%2F", "/a.txt%2f.", "/a.txt%2f%2e" };
  for (guint i = 0; i < G_N_ELEMENTS (paths); i++)
    expect_status (get (s.port, paths[i], NULL), "HTTP/1.1 404 ", paths[i]);
  expect_answer (get (s.port, "/a.txt", NULL), "HTTP/1.1 200 ", "0123456789");
  expect_answer (get (s.port, "/./a.txt", NULL), "HTTP/1.1 200 ", "0123456789");
  srv_stop (&s);
}

/* Range edges: on an empty file a suffix range is satisfiable yet has no
 * part to send (§14.1.1), so the whole (empty) file, 200; any other
 * range is 416. A HEAD ignores Range (§14.2: defined for GET only) and
 * gets the whole answer's head. */
static void
test_range_edges (void)
{
  static const char *const names[] = { "empty.txt", "a.txt", NULL };
  static const char *const contents[] = { "", "0123456789", NULL };
  Srv s;
  srv_start (&s, names, contents);
  expect_answer (get (s.port, "/empty.txt", "Range: bytes=-1\r\n"), "HTTP/1.1 200 ", "");
  gchar *got = get (s.port, "/empty.txt", "Range: bytes=0-\r\n");
  if (!g_str_has_prefix (got, "HTTP/1.1 416 ") || strstr (got, "\r\nContent-Range: bytes */0\r\n") == NULL)
    g_error ("empty file, bytes=0-:\n%s", got);
  g_free (got);
  got = exchange_to_close (s.port, "HEAD /a.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
                                   "Range: bytes=2-4\r\n\r\n");
  if (!g_str_has_prefix (got, "HTTP/1.1 200 ") || strstr (got, "\r\nContent-Length: 10\r\n") == NULL ||
      strstr (got, "Content-Range") != NULL || !g_str_has_suffix (got, "\r\n\r\n"))
    g_error ("HEAD with Range:\n%s", got);
  g_free (got);
  expect_answer (get (s.port, "/a.txt", "Range: bytes=2-4\r\n"), "HTTP/1.1 206 ", "234");
  srv_stop (&s);
}

/* Run as root, the kernel lets the server read anything: it serves only
 * what any user could read (the file o+r, each directory below the root
 * on its way o+x), so a private file in the tree is not published by
 * running as root (it was). As another user the kernel decides: the
 * owner's 0600 file is served, a mode 000 one is not (403 either way). */
static void
test_private_files (void)
{
  static const char *const names[] = { "public.txt", "private.txt", "none.txt", NULL };
  static const char *const contents[] = { "pub", "priv", "none", NULL };
  Srv s;
  srv_start (&s, names, contents);
  gchar *p;
  g_assert_cmpint (g_chmod (p = g_build_filename (s.root, "private.txt", NULL), 0600), ==, 0);
  g_free (p);
  g_assert_cmpint (g_chmod (p = g_build_filename (s.root, "none.txt", NULL), 0), ==, 0);
  g_free (p);
  g_assert_cmpint (g_mkdir (p = g_build_filename (s.root, "closed", NULL), 0700), ==, 0);
  g_free (p);
  g_assert_true (g_file_set_contents (p = g_build_filename (s.root, "closed", "f.txt", NULL),
                                      "in closed", -1, NULL));
  g_free (p);
  g_assert_cmpint (g_mkdir (p = g_build_filename (s.root, "search", NULL), 0711), ==, 0);
  g_free (p);
  g_assert_true (g_file_set_contents (p = g_build_filename (s.root, "search", "f.txt", NULL),
                                      "in search", -1, NULL));
  g_free (p);
  /* A symlink past the closed directory, from an open one. */
  g_assert_cmpint (symlink ("../closed/f.txt", p = g_build_filename (s.root, "search", "link.txt", NULL)),
                   ==, 0);
  g_free (p);

  gboolean root = geteuid () == 0;
  expect_answer (get (s.port, "/public.txt", NULL), "HTTP/1.1 200 ", "pub");
  expect_status (get (s.port, "/none.txt", NULL), "HTTP/1.1 403 ", "mode 000");
  expect_answer (get (s.port, "/search/f.txt", NULL), "HTTP/1.1 200 ", "in search");
  if (root)
    {
      expect_status (get (s.port, "/private.txt", NULL), "HTTP/1.1 403 ", "0600, as root");
      expect_status (get (s.port, "/closed/f.txt", NULL), "HTTP/1.1 403 ", "in 0700, as root");
      /* Not followed at all as root: the walk checks the directories it
       * opens, and a symlink could lead past one. */
      expect_status (get (s.port, "/search/link.txt", NULL), "HTTP/1.1 404 ", "symlink, as root");
    }
  else
    {
      expect_answer (get (s.port, "/private.txt", NULL), "HTTP/1.1 200 ", "priv");
      expect_answer (get (s.port, "/closed/f.txt", NULL), "HTTP/1.1 200 ", "in closed");
      expect_answer (get (s.port, "/search/link.txt", NULL), "HTTP/1.1 200 ", "in closed");
    }
  srv_stop (&s);
}

/* ---- directories named without their slash ----------------------------- */

/* Makes directory @rel (mode @mode) under the server's root. */
static void
mkdir_in (Srv *s, const char *rel, int mode)
{
  gchar *p = g_build_filename (s->root, rel, NULL);
  g_assert_cmpint (g_mkdir (p, mode), ==, 0);
  g_assert_cmpint (g_chmod (p, mode), ==, 0); /* past the umask */
  g_free (p);
}

/* A 301 to exactly @location, with a small body (or none). */
static void
expect_redirect (gchar *got, const char *location, const char *what)
{
  gchar *want = g_strdup_printf ("\r\nLocation: %s\r\n", location);
  const char *end = strstr (got, "\r\n\r\n");
  if (!g_str_has_prefix (got, "HTTP/1.1 301 ") || end == NULL || strstr (got, want) == NULL ||
      strstr (end + 4, "HTTP/") != NULL || strlen (end + 4) > 64)
    g_error ("%s: expected 301 to %s, got:\n%s", what, location, got);
  g_free (want);
  g_free (got);
}

/* A @status_line answer without any Location. */
static void
expect_no_redirect (gchar *got, const char *status_line, const char *what)
{
  if (!g_str_has_prefix (got, status_line) || strstr (got, "\r\nLocation:") != NULL)
    g_error ("%s: expected %s without a Location, got:\n%s", what, status_line, got);
  g_free (got);
}

/* The tree of the redirect tests: index.html, a.txt, sub/ with an
 * index, sub/deeper/ without. */
static void
redirect_tree (Srv *s, const char *prefix)
{
  static const char *const names[] = { "index.html", "a.txt", NULL };
  static const char *const contents[] = { "home", "AAA", NULL };
  srv_start_at (s, prefix, names, contents);
  mkdir_in (s, "sub", 0755);
  write_in (s, "sub/index.html", "in sub");
  mkdir_in (s, "sub/deeper", 0755);
}

/* A directory asked for without its trailing slash is a 301 to the same
 * path with it, as nginx and Apache answer (relative links in its index
 * need the slash): the mount point itself too ("/static" for a directory
 * at "/static/", a route of its own, as the prefix route never matches
 * it), and any directory below. The Location is relative (RFC 9110
 * §10.2.2: no Host to trust) and keeps each segment as sent, escapes
 * included; empty and "." segments are left out. */
static void
test_dir_without_slash_redirects (void)
{
  Srv s;
  redirect_tree (&s, "/static/");
  const struct {
    const char *path, *location;
  } rows[] = {
    { "/static", "/static/" },
    { "/st%61tic", "/st%61tic/" }, /* the mount point, escaped as sent */
    { "/static/sub", "/static/sub/" },
    { "/static/sub/deeper", "/static/sub/deeper/" }, /* no index: the 404 comes after */
    { "/static/s%75b", "/static/s%75b/" },
    { "/static/sub/%64eeper", "/static/sub/%64eeper/" },
    { "/static//sub", "/static/sub/" },
    { "/static/./sub/.", "/static/sub/" },
    { "/static/sub/%2E", "/static/sub/" },
  };
  for (guint i = 0; i < G_N_ELEMENTS (rows); i++)
    expect_redirect (get (s.port, rows[i].path, NULL), rows[i].location, rows[i].path);
  /* Where the redirects lead. */
  expect_answer (get (s.port, "/static/", NULL), "HTTP/1.1 200 ", "home");
  expect_answer (get (s.port, "/static/sub/", NULL), "HTTP/1.1 200 ", "in sub");
  expect_answer (get (s.port, "/static/s%75b/", NULL), "HTTP/1.1 200 ", "in sub");
  expect_status (get (s.port, "/static/sub/deeper/", NULL), "HTTP/1.1 404 ", "no index");
  /* Another method on the mount point is refused as on the files below. */
  gchar *got = exchange_to_close (s.port, "POST /static HTTP/1.1\r\nHost: a\r\n"
                                          "Content-Length: 0\r\nConnection: close\r\n\r\n");
  if (!g_str_has_prefix (got, "HTTP/1.1 405 ") || strstr (got, "\r\nAllow: GET, HEAD\r\n") == NULL)
    g_error ("POST /static:\n%s", got);
  g_free (got);
  srv_stop (&s);

  /* Mounted at the root, and at a prefix without a slash ("/files*"
   * matches "/files" already). */
  redirect_tree (&s, "/");
  expect_redirect (get (s.port, "/sub", NULL), "/sub/", "/sub at /");
  expect_redirect (get (s.port, "/sub/deeper", NULL), "/sub/deeper/", "/sub/deeper at /");
  srv_stop (&s);
  redirect_tree (&s, "/files");
  expect_redirect (get (s.port, "/files", NULL), "/files/", "/files at /files");
  expect_redirect (get (s.port, "/files/sub", NULL), "/files/sub/", "/files/sub at /files");
  expect_status (get (s.port, "/filesx", NULL), "HTTP/1.1 404 ", "/filesx at /files");
  srv_stop (&s);
}

/* The query goes along with the redirect, as sent. */
static void
test_redirect_keeps_query (void)
{
  Srv s;
  redirect_tree (&s, "/static/");
  const struct {
    const char *path, *location;
  } rows[] = {
    { "/static?a=1&b=%2F", "/static/?a=1&b=%2F" },
    { "/static/sub?x=%20y", "/static/sub/?x=%20y" },
    { "/static/s%75b?q", "/static/s%75b/?q" },
    { "/static/sub?a/b?c", "/static/sub/?a/b?c" },
    { "/static/sub?", "/static/sub/" }, /* an empty query: nothing to keep */
  };
  for (guint i = 0; i < G_N_ELEMENTS (rows); i++)
    expect_redirect (get (s.port, rows[i].path, NULL), rows[i].location, rows[i].path);
  srv_stop (&s);
}

/* A HEAD gets the redirect's head and no body: the next answer on the
 * connection follows the blank line at once. */
static void
test_redirect_head_no_body (void)
{
  Srv s;
  redirect_tree (&s, "/static/");
  const char *const paths[] = { "/static", "/static/sub" };
  for (guint i = 0; i < G_N_ELEMENTS (paths); i++)
    {
      gchar *req = g_strdup_printf ("HEAD %s HTTP/1.1\r\nHost: a\r\n\r\n"
                                    "GET /static/sub/ HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                                    paths[i]);
      gchar *got = exchange_to_close (s.port, req);
      gchar *want = g_strdup_printf ("\r\nLocation: %s/\r\n", paths[i]);
      const char *end = strstr (got, "\r\n\r\n");
      if (!g_str_has_prefix (got, "HTTP/1.1 301 ") || end == NULL || strstr (got, want) == NULL ||
          strstr (got, want) > end || !g_str_has_prefix (end + 4, "HTTP/1.1 200 ") || !g_str_has_suffix (got, "\r\n\r\nin sub"))
        g_error ("HEAD %s:\n%s", paths[i], got);
      g_free (want);
      g_free (got);
      g_free (req);
    }
  srv_stop (&s);
}

/* Only a directory the handler would serve is redirected: a file, a
 * missing name, a ".." path, a symlink to a directory out of the root
 * keep their answers (404); the mount point's own route is exact. Run
 * as root, a directory not searchable by all gets the 403 its slashed
 * form gets, not a redirect to it. The same with the walk that
 * replaces openat2. */
static void
no_redirect_for_file_or_missing (gboolean walk)
{
  weft__http_static_force_fallback (walk);
  Srv s;
  redirect_tree (&s, "/static/");
  gchar *outside = g_dir_make_tmp ("weft-static3-out-XXXXXX", NULL);
  gchar *p, *t;
  g_assert_true (g_file_set_contents (p = g_build_filename (outside, "index.html", NULL),
                                      "secret", -1, NULL));
  g_free (p);
  g_assert_cmpint (symlink (outside, p = g_build_filename (s.root, "out", NULL)), ==, 0);
  g_free (p);
  t = g_build_filename ("..", strrchr (outside, '/') + 1, NULL);
  g_assert_cmpint (symlink (t, p = g_build_filename (s.root, "rel-out", NULL)), ==, 0);
  g_free (p);
  g_free (t);
  g_assert_cmpint (symlink ("sub", p = g_build_filename (s.root, "in-link", NULL)), ==, 0);
  g_free (p);
  mkdir_in (&s, "closed", 0700);

  expect_answer (get (s.port, "/static/a.txt", NULL), "HTTP/1.1 200 ", "AAA");
  gboolean walking = weft__http_static_uses_fallback ();
  g_assert_true (walking || !walk);
  const char *const missing[] = {
    "/static/missing", "/static/sub/missing", "/static/a.txt/", "/static/a.txt/.",
    "/static/sub/%2e%2e/sub", "/static/../static/sub", "/static/sub/..", "/static/out",
    "/static/rel-out", "/static/out/", "/staticx", "/static%2Fsub", "/stat", "/static/%00",
  };
  for (guint i = 0; i < G_N_ELEMENTS (missing); i++)
    {
      gchar *got = get (s.port, missing[i], NULL);
      if (strstr (got, "secret") != NULL)
        g_error ("%s: out of the root:\n%s", missing[i], got);
      expect_no_redirect (got, "HTTP/1.1 404 ", missing[i]);
    }
  /* A symlink inside the root: followed by openat2 alone, never by the
   * walk, which a server running as root always takes. */
  gboolean root = geteuid () == 0;
  if (!walking && !root)
    expect_redirect (get (s.port, "/static/in-link", NULL), "/static/in-link/", "in-link");
  else
    expect_no_redirect (get (s.port, "/static/in-link", NULL), "HTTP/1.1 404 ", "in-link");
  if (root)
    {
      expect_no_redirect (get (s.port, "/static/closed", NULL), "HTTP/1.1 403 ", "0700, as root");
      expect_no_redirect (get (s.port, "/static/closed/", NULL), "HTTP/1.1 403 ", "0700/, as root");
    }
  else
    expect_redirect (get (s.port, "/static/closed", NULL), "/static/closed/", "0700");

  srv_stop (&s);
  weft__http_static_force_fallback (FALSE);
  wt_remove_tree (outside);
  g_free (outside);
}

static void
test_no_redirect_for_file_or_missing (void)
{
  no_redirect_for_file_or_missing (FALSE);
}

static void
test_no_redirect_for_file_or_missing_fallback (void)
{
  no_redirect_for_file_or_missing (TRUE);
}

/* A path that begins with an empty segment ("//evil.com", also behind "."
 * segments) would give "Location: //evil.com/", a network-path reference:
 * a browser takes it for another host. It is refused (404, no Location),
 * and so is a backslash, which browsers read as a slash. A %2F keeps
 * its escape: "/%2Fevil.com/" is a path on this host. */
static void
test_no_open_redirect (void)
{
  Srv s;
  redirect_tree (&s, "/");
  mkdir_in (&s, "evil.com", 0755);
  const char *const refused[] = {
    "//evil.com", "///evil.com", "/.//evil.com", "/%2e//evil.com", "/./%2E//evil.com",
    "//evil.com?x", "/\\evil.com", "/%5Cevil.com", "/%5cevil.com",
  };
  for (guint i = 0; i < G_N_ELEMENTS (refused); i++)
    expect_no_redirect (get (s.port, refused[i], NULL), "HTTP/1.1 404 ", refused[i]);
  /* The absolute form's path is the same path. */
  gchar *got = exchange_to_close (s.port, "GET http://a//evil.com HTTP/1.1\r\nHost: a\r\n"
                                          "Connection: close\r\n\r\n");
  expect_no_redirect (got, "HTTP/1.1 404 ", "absolute-form //evil.com");
  expect_redirect (get (s.port, "/evil.com", NULL), "/evil.com/", "/evil.com");
  expect_redirect (get (s.port, "/%2Fevil.com", NULL), "/%2Fevil.com/", "/%2Fevil.com");
  srv_stop (&s);

  /* Below a mount point the first segment is the prefix's. */
  redirect_tree (&s, "/static/");
  mkdir_in (&s, "evil.com", 0755);
  expect_redirect (get (s.port, "/static//evil.com", NULL), "/static/evil.com/", "/static//evil.com");
  expect_no_redirect (get (s.port, "//static/evil.com", NULL), "HTTP/1.1 404 ", "//static/evil.com");
  srv_stop (&s);
}

/* The seconds of the IMF-fixdate @date (exactly one: 29 characters), or
 * -1 if it is not one. */
static gint64
imf_fixdate_seconds (const char *date)
{
  struct tm tm = { 0 };
  const char *end = strptime (date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (strlen (date) != 29 || end == NULL || *end != '\0')
    return -1;
  return (gint64) timegm (&tm);
}

/* Sets @name's modification time to @sec seconds since the epoch; FALSE
 * if the file system cannot hold it. */
static gboolean
set_mtime (Srv *s, const char *name, gint64 sec)
{
  gchar *path = g_build_filename (s->root, name, NULL);
  struct timespec ts[2] = { { .tv_sec = (time_t) sec }, { .tv_sec = (time_t) sec } };
  struct stat st;
  gboolean ok = utimensat (AT_FDCWD, path, ts, 0) == 0 && stat (path, &st) == 0 &&
                (gint64) st.st_mtim.tv_sec == sec;
  g_free (path);
  return ok;
}

/* Checks the answer to GET /@name: 200 with its body, and a
 * Last-Modified, if any, that is an IMF-fixdate no later than the Date
 * (RFC 9110 §8.8.2.1: a modification time in the future is replaced with
 * the time of the answer). */
static void
expect_sane_last_modified (Srv *s, const char *name, const char *body)
{
  gchar *path = g_strconcat ("/", name, NULL);
  gchar *got = get (s->port, path, NULL);
  const char *end = strstr (got, "\r\n\r\n");
  if (!g_str_has_prefix (got, "HTTP/1.1 200 ") || end == NULL || strcmp (end + 4, body) != 0)
    g_error ("%s: expected 200 with body %s, got:\n%s", name, body, got);
  gchar *date = header_of (got, "\r\nDate: ");
  if (strstr (got, "\r\nLast-Modified: ") != NULL)
    {
      gchar *modified = header_of (got, "\r\nLast-Modified: ");
      gint64 lm = imf_fixdate_seconds (modified), now = imf_fixdate_seconds (date);
      if (lm < 0 || now < 0 || lm > now)
        g_error ("%s: Last-Modified %s, Date %s", name, modified, date);
      g_free (modified);
    }
  g_free (date);
  g_free (got);
  g_free (path);
}

/* A file's modification time is whatever its owner set: one in the
 * future went out as a Last-Modified later than the Date (RFC 9110
 * §8.8.2.1 forbids it), one past year 9999 as a five-digit year (not an
 * HTTP-date), and one gmtime() cannot convert (tmpfs keeps 64-bit times)
 * was formatted from an unset struct tm: garbage, or an out-of-bounds
 * read of the month and day names that crashed the server. */
static void
test_last_modified_bounds (void)
{
  static const char *const names[] = { "soon.txt", NULL };
  static const char *const contents[] = { "soon", NULL };
  Srv s;
  srv_start (&s, names, contents);
  g_assert_true (set_mtime (&s, "soon.txt", (gint64) time (NULL) + 86400));
  expect_sane_last_modified (&s, "soon.txt", "soon");
  srv_stop (&s);

  /* Times out of gmtime()'s or IMF-fixdate's range need a file system
   * that keeps them (tmpfs does; ext4 stops at 2446). */
  s.root = g_mkdtemp (g_strdup ("/dev/shm/weft-static3-XXXXXX"));
  if (s.root == NULL)
    {
      g_test_skip ("no /dev/shm");
      return;
    }
  srv_serve (&s, "/");
  const gint64 times[] = { G_GINT64_CONSTANT (253402300800) /* 1 Jan 10000 */,
                           G_GINT64_CONSTANT (1) << 62, -(G_GINT64_CONSTANT (1) << 62),
                           G_GINT64_CONSTANT (-62167219300) /* year -1 */ };
  guint tried = 0;
  for (guint i = 0; i < G_N_ELEMENTS (times); i++)
    {
      gchar *name = g_strdup_printf ("t%u.txt", i);
      write_in (&s, name, "far");
      if (set_mtime (&s, name, times[i]))
        {
          expect_sane_last_modified (&s, name, "far");
          tried++;
        }
      g_free (name);
    }
  g_test_message ("%u of %u far-off times kept by the file system", tried,
                  (guint) G_N_ELEMENTS (times));
  srv_stop (&s);
}

/* A keep-alive connection whose answer is still going out is not idle:
 * a large file to a slow client outlasted the keep-alive timeout, which
 * counts from when the answer was queued. A request the client sent
 * meanwhile was still unread then (reading pauses while the file fills
 * the write queue), and closing with it unread made the kernel reset the
 * connection, destroying the rest of the file still in the socket
 * buffer: the client got megabytes fewer than the Content-Length. Now
 * the whole file comes, then the answer to the second request, then the
 * keep-alive close (a FIN, no reset). */
static void
test_keepalive_close_keeps_file (void)
{
  const gsize size = 32 * 1024 * 1024;
  Srv s;
  srv_keepalive_ms = 200;
  static const char *const names[] = { "a.txt", NULL };
  static const char *const contents[] = { "a", NULL };
  srv_start (&s, names, contents);
  srv_keepalive_ms = 0;
  /* Sparse: 32 MiB on disk for nothing. */
  gchar *path = g_build_filename (s.root, "big.bin", NULL);
  int ffd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  g_assert_cmpint (ffd, >=, 0);
  g_assert_cmpint (ftruncate (ffd, (off_t) size), ==, 0);
  close (ffd);
  g_free (path);

  int fd = wt_connect_tcp (s.port);
  wt_send_str (fd, "GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n");
  /* The head has come: the file is queued and the server reads no more
   * until most of it is gone. The next request waits unread. */
  char buf[65536];
  gsize have = 0;
  while (g_strstr_len (buf, (gssize) have, "\r\n\r\n") == NULL)
    {
      ssize_t n = recv (fd, buf + have, sizeof buf - 1 - have, 0);
      g_assert_cmpint (n, >, 0);
      have += (gsize) n;
    }
  wt_send_str (fd, "GET /a.txt HTTP/1.1\r\nHost: a\r\n\r\n");
  gsize head = (gsize) (g_strstr_len (buf, (gssize) have, "\r\n\r\n") + 4 - buf);
  gsize body = have - head;
  /* Slowly (16 MB/s at most, 2 s for the file): the keep-alive timeout
   * (0.2 to 0.25 s) passes long before the file has left the queue. */
  gboolean reset = FALSE;
  GString *tail = g_string_new (NULL); /* what comes after the file */
  for (;;)
    {
      ssize_t n = recv (fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && errno == ECONNRESET)
        {
          reset = TRUE;
          break;
        }
      g_assert_cmpint (n, >=, 0);
      if (n == 0)
        break;
      if (body + (gsize) n > size)
        {
          gsize skip = body >= size ? 0 : size - body;
          g_string_append_len (tail, buf + skip, (gssize) ((gsize) n - skip));
        }
      body += (gsize) n;
      g_usleep (4000);
    }
  close (fd);
  g_test_message ("%" G_GSIZE_FORMAT " bytes after the head%s", body, reset ? ", then a reset" : "");
  g_assert_false (reset);
  g_assert_cmpuint (body, >=, size);
  g_assert_true (g_str_has_prefix (tail->str, "HTTP/1.1 200 "));
  g_assert_true (g_str_has_suffix (tail->str, "\r\n\r\na"));
  g_string_free (tail, TRUE);
  srv_stop (&s);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  signal (SIGPIPE, SIG_IGN);
  g_test_add_func ("/http-static/unread-answers-hold-few-fds", test_unread_answers_hold_few_fds);
  g_test_add_func ("/http-static/if-range", test_if_range);
  g_test_add_func ("/http-static/root-redirect", test_root_redirect);
  g_test_add_func ("/http-static/preconditions", test_preconditions);
  g_test_add_func ("/http-static/http-dates", test_http_dates);
  g_test_add_func ("/http-static/file-as-directory", test_file_as_directory);
  g_test_add_func ("/http-static/range-edges", test_range_edges);
  g_test_add_func ("/http-static/private-files", test_private_files);
  g_test_add_func ("/http-static/dir-without-slash-redirects", test_dir_without_slash_redirects);
  g_test_add_func ("/http-static/redirect-keeps-query", test_redirect_keeps_query);
  g_test_add_func ("/http-static/redirect-head-no-body", test_redirect_head_no_body);
  g_test_add_func ("/http-static/no-redirect-for-file-or-missing",
                   test_no_redirect_for_file_or_missing);
  g_test_add_func ("/http-static/no-redirect-for-file-or-missing-fallback",
                   test_no_redirect_for_file_or_missing_fallback);
  g_test_add_func ("/http-static/no-open-redirect", test_no_open_redirect);
  g_test_add_func ("/http-static/last-modified-bounds", test_last_modified_bounds);
  g_test_add_func ("/http-static/keepalive-close-keeps-file", test_keepalive_close_keeps_file);
  return g_test_run ();
}
