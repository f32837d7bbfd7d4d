/* test-http-static.c: weft_http_server_add_directory() under hostile
 * clients: what the wire-level probes (tests/http-conformance.py, which
 * runs against bench-server) and the path tests of test-http-server.c do
 * not reach.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-net-util.h"

#include <fcntl.h>
#include <sys/socket.h>

typedef struct {
  WeftEngine *engine;
  WeftHttpServer *server;
  guint16 port;
  gchar *root;
} Srv;

/* A server for a fresh directory holding the files of @names and
 * @contents (NULL-terminated). */
static void
srv_start (Srv *s, const char *const *names, const char *const *contents)
{
  GError *error = NULL;
  s->root = g_dir_make_tmp ("weft-static3-XXXXXX", NULL);
  g_assert_nonnull (s->root);
  for (guint i = 0; names[i] != NULL; i++)
    {
      gchar *p = g_build_filename (s->root, names[i], NULL);
      g_assert_true (g_file_set_contents (p, contents[i], -1, NULL));
      g_free (p);
    }
  s->engine = wt_engine_new (2);
  s->server = weft_http_server_new (s->engine);
  g_assert_true (weft_http_server_add_directory (s->server, "/", s->root, &error));
  g_assert_no_error (error);
  WeftListener *l = weft_http_server_get_listener (s->server);
  g_assert_true (weft_listener_add_tcp (l, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  s->port = weft_listener_get_port (l, 0);
  g_assert_true (weft_http_server_start (s->server, &error));
  g_assert_no_error (error);
}

static void
srv_stop (Srv *s)
{
  weft_http_server_unref (s->server);
  weft_engine_unref (s->engine);
  gchar *cmd[] = { "rm", "-rf", s->root, NULL };
  g_spawn_sync (NULL, cmd, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free (s->root);
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
  /* The client's socket, the server's, and at most 17 files queued. */
  g_assert_cmpuint (during, <, before + 40);
  g_string_free (reqs, TRUE);
  srv_stop (&s);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  signal (SIGPIPE, SIG_IGN);
  g_test_add_func ("/http-static/unread-answers-hold-few-fds", test_unread_answers_hold_few_fds);
  return g_test_run ();
}
