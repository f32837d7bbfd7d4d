/* test-connection-coro.c: connections driven from coroutines
 * (weft_connection_coro_*), one path per behaviour: a line protocol with
 * lines split byte by byte and pipelined, exact-length reads, bounded
 * reads, the peer's half-close after data (nothing lost), read timeouts
 * that leave the connection usable, an over-long line, write backpressure,
 * interrupt, and the context destroyed under a waiting read.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-net-util.h"

#include <signal.h>

typedef gpointer (*Body) (WeftConnection *conn);

/* What the server side saw, for the test thread to assert. */
static atomic_int last_error_code;   /* GIOErrorEnum + 1, 0: none */
static atomic_int bodies_freed;
static _Atomic (WeftCoro *) running_coro;
static atomic_int max_queued;
static atomic_int waits_seen;
static atomic_int write_must_wait; /* flood_body: a write that has to wait */

typedef struct {
  WeftConnection *conn; /* ref */
  Body body;
} Served;

static void
served_free (gpointer data)
{
  Served *s = data;
  weft_connection_unref (s->conn);
  g_free (s);
  atomic_fetch_add (&bodies_freed, 1);
}

static gpointer
served_main (gpointer data)
{
  Served *s = data;
  return s->body (s->conn);
}

static void
spawn_setup (WeftConnection *conn, gpointer test_data)
{
  Served *s = g_new0 (Served, 1);
  s->conn = weft_connection_ref (conn);
  s->body = (Body) test_data;
  WeftCoro *c = weft_connection_coro_spawn (conn, served_main, s, served_free, 0);
  g_assert_nonnull (c);
  atomic_store (&running_coro, c);
  weft_coro_unref (c);
}

static void
record_error (const GError *error)
{
  g_assert_nonnull (error);
  g_assert_true (error->domain == G_IO_ERROR);
  atomic_store (&last_error_code, error->code + 1);
}

static void
reply (WeftConnection *conn, const char *text)
{
  GError *error = NULL;
  gboolean ok = weft_connection_coro_write (conn, (const guint8 *) text, strlen (text), 5000,
                                            &error);
  g_assert_no_error (error);
  g_assert_true (ok);
}

static void
start (WtServer *srv, Body body)
{
  atomic_store (&last_error_code, 0);
  atomic_store (&bodies_freed, 0);
  atomic_store (&running_coro, NULL);
  wt_server_start (srv, 2, spawn_setup, (gpointer) body);
}

static void
recv_expect (int fd, const char *want)
{
  gsize len = strlen (want);
  gchar *got = g_malloc0 (len + 1);
  wt_recv_exactly (fd, got, len);
  g_assert_cmpstr (got, ==, want);
  g_free (got);
}

/* ---- a line protocol ---------------------------------------------------- */

/* "ECHO x" answers "x"; "BIN n" reads n bytes and answers their count and
 * sum; "QUIT" answers "bye" and closes; end of input records the error. */
static gpointer
line_body (WeftConnection *conn)
{
  for (;;)
    {
      GError *error = NULL;
      gsize len = 0;
      gchar *line = weft_connection_coro_read_line (conn, 256, 5000, &len, &error);
      if (line == NULL)
        {
          record_error (error);
          g_error_free (error);
          weft_connection_close (conn);
          return NULL;
        }
      g_assert_cmpuint (len, ==, strlen (line));
      if (g_str_has_prefix (line, "ECHO "))
        {
          gchar *out = g_strdup_printf ("%s\n", line + 5);
          reply (conn, out);
          g_free (out);
        }
      else if (g_str_has_prefix (line, "BIN "))
        {
          gsize n = (gsize) g_ascii_strtoull (line + 4, NULL, 10);
          GBytes *b = weft_connection_coro_read_exactly (conn, n, 5000, &error);
          g_assert_no_error (error);
          gsize got = 0;
          const guint8 *p = g_bytes_get_data (b, &got);
          guint sum = 0;
          for (gsize i = 0; i < got; i++)
            sum += p[i];
          gchar *out = g_strdup_printf ("got %" G_GSIZE_FORMAT " sum %u\n", got, sum);
          reply (conn, out);
          g_free (out);
          g_bytes_unref (b);
        }
      else if (g_str_equal (line, "QUIT"))
        {
          reply (conn, "bye\n");
          weft_connection_close (conn);
          g_free (line);
          return NULL;
        }
      else
        reply (conn, "?\n");
      g_free (line);
    }
}

static void
test_line_protocol (void)
{
  WtServer srv;
  start (&srv, line_body);
  int fd = wt_connect_tcp (srv.port);

  /* One line a byte at a time: the coroutine waits between them. */
  const char *slow = "ECHO one byte at a time\n";
  for (const char *p = slow; *p != '\0'; p++)
    {
      wt_send_all (fd, p, 1);
      g_usleep (500);
    }
  recv_expect (fd, "one byte at a time\n");

  /* Pipelined lines and a binary block in one write, a CRLF line, a
   * block split across writes. */
  guint8 block[300];
  guint sum = 0;
  for (guint i = 0; i < sizeof block; i++)
    {
      block[i] = (guint8) (i * 7);
      sum += block[i];
    }
  GByteArray *req = g_byte_array_new ();
  const char *head = "ECHO a\r\nECHO b\nBIN 300\n";
  g_byte_array_append (req, (const guint8 *) head, (guint) strlen (head));
  g_byte_array_append (req, block, 100);
  wt_send_all (fd, req->data, req->len);
  g_usleep (20000);
  wt_send_all (fd, block + 100, 200);
  wt_send_str (fd, "FOO\nQUIT\n");
  gchar *want = g_strdup_printf ("a\nb\ngot 300 sum %u\n?\nbye\n", sum);
  GByteArray *all = wt_recv_to_eof (fd, FALSE, NULL);
  g_byte_array_append (all, (const guint8 *) "", 1);
  g_assert_cmpstr ((const char *) all->data, ==, want);
  g_free (want);
  g_byte_array_unref (all);
  g_byte_array_unref (req);
  close (fd);

  WT_WAIT_UNTIL (wt_load (&bodies_freed) == 1);
  g_assert_cmpint (wt_load (&bodies_freed), ==, 1);
  g_assert_cmpint (wt_load (&last_error_code), ==, 0);
  wt_server_stop (&srv);
}

/* The peer sends two lines and shuts its side at once: both are answered
 * (nothing kept is dropped by an automatic close), then the coroutine
 * learns of the end as G_IO_ERROR_CONNECTION_CLOSED. */
static void
test_half_close_after_data (void)
{
  WtServer srv;
  start (&srv, line_body);
  for (guint round = 0; round < 20; round++)
    {
      int fd = wt_connect_tcp (srv.port);
      wt_send_str (fd, "ECHO a\nECHO b\nECHO c\n");
      shutdown (fd, SHUT_WR);
      GByteArray *all = wt_recv_to_eof (fd, FALSE, NULL);
      g_byte_array_append (all, (const guint8 *) "", 1);
      g_assert_cmpstr ((const char *) all->data, ==, "a\nb\nc\n");
      g_byte_array_unref (all);
      close (fd);
      WT_WAIT_UNTIL (wt_load (&bodies_freed) == (gint) round + 1);
      g_assert_cmpint (wt_load (&bodies_freed), ==, (gint) round + 1);
      g_assert_cmpint (wt_load (&last_error_code), ==, G_IO_ERROR_CONNECTION_CLOSED + 1);
      atomic_store (&last_error_code, 0);
    }
  wt_server_stop (&srv);
}

/* ---- bounded reads ------------------------------------------------------ */

static gpointer
some_body (WeftConnection *conn)
{
  GString *out = g_string_new (NULL);
  GError *error = NULL;
  GBytes *b;
  gsize total = 0;
  while (total < 11 && (b = weft_connection_coro_read (conn, 5, 5000, &error)) != NULL)
    {
      gsize len = 0;
      const char *p = g_bytes_get_data (b, &len);
      g_assert_cmpuint (len, >=, 1);
      g_assert_cmpuint (len, <=, 5);
      g_string_append_c (out, '[');
      g_string_append_len (out, p, (gssize) len);
      g_string_append_c (out, ']');
      total += len;
      g_bytes_unref (b);
    }
  g_assert_no_error (error);
  g_string_append_c (out, '\n');
  reply (conn, out->str);
  g_string_free (out, TRUE);
  weft_connection_close (conn);
  return NULL;
}

static void
test_read_some (void)
{
  WtServer srv;
  start (&srv, some_body);
  int fd = wt_connect_tcp (srv.port);
  wt_send_str (fd, "hello world");
  GByteArray *all = wt_recv_to_eof (fd, FALSE, NULL);
  g_byte_array_append (all, (const guint8 *) "", 1);
  /* All eleven bytes arrive in one segment: five, five, one. */
  g_assert_cmpstr ((const char *) all->data, ==, "[hello][ worl][d]\n");
  g_byte_array_unref (all);
  close (fd);
  wt_server_stop (&srv);
}

/* ---- timeouts ----------------------------------------------------------- */

static gpointer
timeout_body (WeftConnection *conn)
{
  GError *error = NULL;
  gchar *line = weft_connection_coro_read_line (conn, 0, 100, NULL, &error);
  g_assert_null (line);
  record_error (error);
  g_clear_error (&error);
  reply (conn, "timeout\n");
  /* The connection is as it was: the next read works. */
  line = weft_connection_coro_read_line (conn, 0, 5000, NULL, &error);
  g_assert_no_error (error);
  gchar *out = g_strdup_printf ("%s\n", line);
  reply (conn, out);
  g_free (out);
  g_free (line);
  weft_connection_close (conn);
  return NULL;
}

static void
test_read_timeout (void)
{
  WtServer srv;
  start (&srv, timeout_body);
  int fd = wt_connect_tcp (srv.port);
  recv_expect (fd, "timeout\n");
  g_assert_cmpint (wt_load (&last_error_code), ==, G_IO_ERROR_TIMED_OUT + 1);
  wt_send_str (fd, "late\n");
  recv_expect (fd, "late\n");
  close (fd);
  wt_server_stop (&srv);
}

/* A line past the limit fails the connection (no unbounded buffering). */
static gpointer
long_line_body (WeftConnection *conn)
{
  GError *error = NULL;
  gchar *line = weft_connection_coro_read_line (conn, 16, 5000, NULL, &error);
  g_assert_null (line);
  record_error (error);
  g_clear_error (&error);
  g_assert_true (weft_connection_is_closed (conn));
  /* Further calls fail at once with the connection's error. */
  GBytes *b = weft_connection_coro_read (conn, 10, 5000, &error);
  g_assert_null (b);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE);
  g_clear_error (&error);
  g_assert_false (weft_connection_coro_write (conn, (const guint8 *) "x", 1, 100, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE);
  g_clear_error (&error);
  return NULL;
}

static void
test_line_too_long (void)
{
  WtServer srv;
  start (&srv, long_line_body);
  int fd = wt_connect_tcp (srv.port);
  char big[100];
  memset (big, 'x', sizeof big);
  wt_send_all (fd, big, sizeof big);
  gboolean reset = FALSE;
  GByteArray *all = wt_recv_to_eof (fd, TRUE, &reset);
  g_assert_cmpuint (all->len, ==, 0);
  g_byte_array_unref (all);
  close (fd);
  WT_WAIT_UNTIL (wt_load (&bodies_freed) == 1);
  g_assert_cmpint (wt_load (&last_error_code), ==, G_IO_ERROR_MESSAGE_TOO_LARGE + 1);
  wt_server_stop (&srv);
}

/* ---- writes ------------------------------------------------------------- */

#define BP_TOTAL (16 * 1024 * 1024)
#define BP_PIECE 4096
#define BP_HIGH (64 * 1024)
#define BP_LOW (16 * 1024)

static gpointer
flood_body (WeftConnection *conn)
{
  weft_connection_set_write_watermarks (conn, BP_HIGH, BP_LOW);
  guint8 piece[BP_PIECE];
  GError *error = NULL;
  for (guint off = 0; off < BP_TOTAL; off += BP_PIECE)
    {
      for (guint i = 0; i < BP_PIECE; i++)
        piece[i] = (guint8) ((off + i) % 251);
      gsize before = weft_connection_get_write_queued (conn);
      /* Queued output means the socket is full, and the peer reads
       * nothing until this is set: this write must wait for the drain. */
      if (before + BP_PIECE > BP_HIGH)
        atomic_store (&write_must_wait, 1);
      g_assert_true (weft_connection_coro_write (conn, piece, BP_PIECE, 10000, &error));
      g_assert_no_error (error);
      gsize queued = weft_connection_get_write_queued (conn);
      if ((gint) queued > atomic_load (&max_queued))
        atomic_store (&max_queued, (gint) queued);
      if (before + BP_PIECE > BP_HIGH && queued <= BP_LOW)
        atomic_fetch_add (&waits_seen, 1); /* it waited for the drain */
    }
  weft_connection_close (conn);
  return NULL;
}

static void
test_write_backpressure (void)
{
  WtServer srv;
  atomic_store (&max_queued, 0);
  atomic_store (&waits_seen, 0);
  atomic_store (&write_must_wait, 0);
  start (&srv, flood_body);
  int fd = wt_connect_tcp (srv.port);
  /* The socket fills and the queue reaches the high mark. Waited for, not
   * slept: under Valgrind 200 ms did not fill the socket, the reads kept
   * up and no write ever had to wait. */
  WT_WAIT_UNTIL (wt_load (&write_must_wait) == 1);
  GByteArray *all = wt_recv_to_eof (fd, FALSE, NULL);
  g_assert_cmpuint (all->len, ==, BP_TOTAL);
  for (guint i = 0; i < all->len; i++)
    if (all->data[i] != (guint8) (i % 251))
      g_error ("byte %u is %u, not %u", i, all->data[i], i % 251);
  g_byte_array_unref (all);
  close (fd);
  /* Never much above the high mark; and it did have to wait. */
  g_assert_cmpint (wt_load (&max_queued), <=, BP_HIGH + BP_PIECE);
  g_assert_cmpint (wt_load (&waits_seen), >, 0);
  wt_server_stop (&srv);
}

/* A coroutine waiting for room in weft_connection_coro_write() while
 * another coroutine shuts the write side: once the peer has taken the
 * output, the writer returns (it used to wait for ever: DRAINED is not
 * emitted to a connection shut for writing). */
static atomic_int writer_returned;

static gpointer
shutter (gpointer data)
{
  WeftConnection *conn = data;
  weft_coro_sleep (100);
  weft_connection_shutdown_write (conn);
  return NULL;
}

static gpointer
blocked_writer_body (WeftConnection *conn)
{
  weft_connection_set_write_watermarks (conn, BP_HIGH, BP_LOW);
  WeftCoro *s = weft_coro_spawn (weft_connection_get_context (conn), shutter, conn, NULL, 0);
  weft_coro_unref (s);
  static guint8 big[4 * 1024 * 1024];
  memset (big, 'w', sizeof big);
  GError *error = NULL;
  gboolean ok = weft_connection_coro_write (conn, big, sizeof big, -1, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  atomic_store (&writer_returned, 1);
  weft_connection_close (conn);
  return NULL;
}

static void
test_write_wait_ends_on_shutdown (void)
{
  WtServer srv;
  atomic_store (&writer_returned, 0);
  start (&srv, blocked_writer_body);
  int fd = wt_connect_tcp (srv.port);
  g_usleep (300000); /* the writer waits; the write side gets shut */
  GByteArray *all = wt_recv_to_eof (fd, FALSE, NULL);
  g_assert_cmpuint (all->len, ==, 4 * 1024 * 1024);
  g_byte_array_unref (all);
  WT_WAIT_UNTIL (wt_load (&writer_returned) == 1);
  g_assert_cmpint (wt_load (&writer_returned), ==, 1);
  close (fd);
  wt_server_stop (&srv);
}

/* ---- interrupt and destruction ----------------------------------------- */

static gpointer
interrupted_body (WeftConnection *conn)
{
  GError *error = NULL;
  gchar *line = weft_connection_coro_read_line (conn, 0, -1, NULL, &error);
  g_assert_null (line);
  record_error (error);
  g_clear_error (&error);
  reply (conn, "interrupted\n");
  weft_connection_close (conn);
  return NULL;
}

static void
test_interrupt (void)
{
  WtServer srv;
  start (&srv, interrupted_body);
  int fd = wt_connect_tcp (srv.port);
  WT_WAIT_UNTIL (atomic_load (&running_coro) != NULL);
  wt_quiet_window_ms (50); /* let it reach its read */
  /* The coroutine is alive until its body returns (it has not). */
  weft_coro_interrupt (atomic_load (&running_coro));
  recv_expect (fd, "interrupted\n");
  g_assert_cmpint (wt_load (&last_error_code), ==, G_IO_ERROR_CANCELLED + 1);
  close (fd);
  wt_server_stop (&srv);
}

static atomic_int waiting;

static gpointer
stuck_body (WeftConnection *conn)
{
  GError *error = NULL;
  atomic_fetch_add (&waiting, 1);
  gchar *line = weft_connection_coro_read_line (conn, 0, -1, NULL, &error);
  g_error ("the read returned (%s) instead of being abandoned",
           line != NULL ? line : error->message);
  return NULL;
}

/* The engine (and so every connection's context) goes away while each
 * coroutine waits in a read: each is freed once, its data's notify runs
 * once, nothing leaks (ASan checks the last). */
static void
test_context_destroyed (void)
{
  WtServer srv;
  atomic_store (&waiting, 0);
  start (&srv, stuck_body);
  int fds[8];
  for (guint i = 0; i < G_N_ELEMENTS (fds); i++)
    fds[i] = wt_connect_tcp (srv.port);
  WT_WAIT_UNTIL (wt_load (&waiting) == G_N_ELEMENTS (fds));
  g_assert_cmpint (wt_load (&waiting), ==, G_N_ELEMENTS (fds));
  wt_quiet_window_ms (20);
  wt_server_stop (&srv);
  g_assert_cmpint (wt_load (&bodies_freed), ==, G_N_ELEMENTS (fds));
  for (guint i = 0; i < G_N_ELEMENTS (fds); i++)
    {
      GByteArray *all = wt_recv_to_eof (fds[i], TRUE, NULL);
      g_assert_cmpuint (all->len, ==, 0);
      g_byte_array_unref (all);
      close (fds[i]);
    }
}

/* Misuse: outside a coroutine, or from a coroutine of another context. */
static gpointer
foreign_body (gpointer data)
{
  WeftConnection *conn = data;
  return weft_connection_coro_read (conn, 1, 10, NULL);
}

static gpointer
misuse_body (WeftConnection *conn)
{
  WeftContext *other = weft_context_new (weft_context_get_engine (weft_connection_get_context (conn)));
  weft_context_dispatch (other);
  WeftCoro *c = weft_coro_spawn (other, foreign_body, conn, NULL, 0);
  gpointer got = conn;
  g_assert_cmpint (weft_coro_join (c, &got, 5000), ==, 0);
  g_assert_null (got);
  weft_coro_unref (c);
  weft_context_unref (other);
  reply (conn, "done\n");
  weft_connection_close (conn);
  return NULL;
}

static void
test_misuse (void)
{
  WtServer srv;
  g_test_expect_message ("Weft", G_LOG_LEVEL_CRITICAL, "*not run on the connection's context*");
  start (&srv, misuse_body);
  int fd = wt_connect_tcp (srv.port);
  recv_expect (fd, "done\n");
  g_test_assert_expected_messages ();
  close (fd);
  wt_server_stop (&srv);

  int sv[2];
  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), ==, 0);
  WeftEngine *engine = wt_engine_new (1);
  WeftContext *ctx = weft_context_new (engine);
  GError *error = NULL;
  WeftConnection *conn = weft_connection_new (ctx, sv[0], &error);
  g_assert_no_error (error);
  g_test_expect_message ("Weft", G_LOG_LEVEL_CRITICAL, "*not called from a coroutine*");
  g_assert_null (weft_connection_coro_read (conn, 1, 10, &error));
  g_test_assert_expected_messages ();
  g_assert_no_error (error);
  weft_connection_abort (conn);
  weft_connection_unref (conn);
  weft_context_unref (ctx);
  weft_engine_unref (engine);
  close (sv[1]);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  signal (SIGPIPE, SIG_IGN);
  g_test_add_func ("/connection-coro/line-protocol", test_line_protocol);
  g_test_add_func ("/connection-coro/half-close-after-data", test_half_close_after_data);
  g_test_add_func ("/connection-coro/read-some", test_read_some);
  g_test_add_func ("/connection-coro/read-timeout", test_read_timeout);
  g_test_add_func ("/connection-coro/line-too-long", test_line_too_long);
  g_test_add_func ("/connection-coro/write-backpressure", test_write_backpressure);
  g_test_add_func ("/connection-coro/write-wait-ends-on-shutdown",
                   test_write_wait_ends_on_shutdown);
  g_test_add_func ("/connection-coro/interrupt", test_interrupt);
  g_test_add_func ("/connection-coro/context-destroyed", test_context_destroyed);
  g_test_add_func ("/connection-coro/misuse", test_misuse);
  return g_test_run ();
}
