/* test-http-stream.c: streamed answers (chunked, producers, writes from
 * other threads, backpressure, a client that goes away) and streamed
 * request bodies (pieces, 100-continue decided by the handler, full
 * duplex), against a live server on 127.0.0.1.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-net-util.h"

typedef struct {
  WeftEngine *engine;
  WeftHttpServer *server;
  guint16 port;
} Srv;

/* What the handlers did, read by the tests. */
static gint producer_calls;
static gint notifies;
static guint64 produced;
static gint thread_saw_gone;
static gint client_acks; /* events the client has read (no GAsyncQueue: TSan) */

static void
count_notify (gpointer data)
{
  g_atomic_int_inc (&notifies);
}

/* ---- handlers ----------------------------------------------------------- */

typedef struct {
  guint next;
  guint n;
} Count;

/* Writes "piece-<i>\n" for i < n, then finishes. */
static gboolean
count_producer (WeftHttpRequest *req, gpointer data)
{
  Count *c = data;
  g_atomic_int_inc (&producer_calls);
  char line[32];
  int len = g_snprintf (line, sizeof line, "piece-%u\n", c->next++);
  g_assert_true (weft_http_request_write (req, (const guint8 *) line, (gsize) len));
  if (c->next < c->n)
    return TRUE;
  weft_http_request_finish (req);
  return FALSE;
}

static void
count_free (gpointer data)
{
  g_free (data);
  g_atomic_int_inc (&notifies);
}

static void
count_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  Count *c = g_new0 (Count, 1);
  c->n = 100;
  weft_http_request_respond_stream (req, 200, "text/plain", count_producer, c, count_free);
}

/* 64 KiB at a time, 32 MiB in all. */
static gboolean
flood_producer (WeftHttpRequest *req, gpointer data)
{
  static guint8 block[65536];
  memset (block, 'f', sizeof block);
  g_atomic_int_inc (&producer_calls);
  weft_http_request_write (req, block, sizeof block);
  guint64 total = __atomic_add_fetch (&produced, sizeof block, __ATOMIC_SEQ_CST);
  if (total < 32 * 1024 * 1024)
    return TRUE;
  weft_http_request_finish (req);
  return FALSE;
}

static void
flood_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  weft_http_request_respond_stream (req, 200, "application/octet-stream", flood_producer, NULL,
                                    count_notify);
}

/* Never finishes: 1 KiB per call for as long as the client reads. */
static gboolean
forever_producer (WeftHttpRequest *req, gpointer data)
{
  static const guint8 block[1024];
  g_atomic_int_inc (&producer_calls);
  return weft_http_request_write (req, block, sizeof block);
}

static void
forever_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  weft_http_request_respond_stream (req, 200, "application/octet-stream", forever_producer, NULL,
                                    count_notify);
}

/* Server-sent events written by another thread, each only after the
 * client has acknowledged the previous one: an answer that was buffered
 * instead of streamed never gets its first acknowledgement. */
static gpointer
sse_thread (gpointer data)
{
  WeftHttpRequest *req = data;
  for (guint i = 0; i < 3; i++)
    {
      gchar *ev = g_strdup_printf ("data: event %u\n\n", i);
      g_assert_true (weft_http_request_write (req, (const guint8 *) ev, strlen (ev)));
      g_free (ev);
      gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
      while (g_atomic_int_get (&client_acks) <= (gint) i && g_get_monotonic_time () < end)
        g_usleep (1000);
      g_assert_cmpint (g_atomic_int_get (&client_acks), >, (gint) i);
    }
  weft_http_request_finish (req);
  weft_http_request_unref (req);
  return NULL;
}

static void
sse_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  weft_http_request_add_response_header (req, "Cache-Control", "no-cache");
  weft_http_request_respond_stream (req, 200, "text/event-stream", NULL, NULL, count_notify);
  g_thread_unref (g_thread_new ("sse", sse_thread, weft_http_request_ref (req)));
}

/* Writes from a thread until the client is gone. */
static gpointer
gone_thread (gpointer data)
{
  WeftHttpRequest *req = data;
  gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (g_get_monotonic_time () < end)
    {
      if (!weft_http_request_write (req, (const guint8 *) "tick\n", 5))
        {
          g_atomic_int_set (&thread_saw_gone, 1);
          break;
        }
      g_usleep (5000);
    }
  weft_http_request_unref (req);
  return NULL;
}

static void
gone_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  weft_http_request_respond_stream (req, 200, "text/plain", NULL, NULL, count_notify);
  g_thread_unref (g_thread_new ("gone", gone_thread, weft_http_request_ref (req)));
}

static void
hello (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_respond (request, 200, "text/plain", (const guint8 *) "Hello, World!", 13);
}

/* A streamed body summed piece by piece. */
typedef struct {
  guint64 len;
  guint32 sum;
  guint pieces;
} Sum;

static void
sum_piece (WeftHttpRequest *req, const guint8 *data, gsize len, gboolean done, gpointer user_data)
{
  Sum *s = user_data;
  g_assert_true (len > 0 || done);
  s->len += len;
  for (gsize i = 0; i < len; i++)
    s->sum = s->sum * 31 + data[i];
  if (len > 0)
    s->pieces++;
  if (done)
    {
      gchar *text = g_strdup_printf ("len=%" G_GUINT64_FORMAT " sum=%u pieces=%u", s->len, s->sum,
                                     s->pieces);
      weft_http_request_respond (req, 200, "text/plain", (const guint8 *) text, strlen (text));
      g_free (text);
    }
}

static void
sum_free (gpointer data)
{
  g_free (data);
  g_atomic_int_inc (&notifies);
}

static void
sum_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  g_assert_null (weft_http_request_get_body (req));
  const char *refuse = weft_http_request_get_header (req, "X-Refuse");
  if (refuse != NULL)
    {
      /* Refused before reading: no 100 is sent, the body is not read. */
      weft_http_request_respond (req, (guint) atoi (refuse), "text/plain", (const guint8 *) "no\n",
                                 3);
      return;
    }
  weft_http_request_read_body (req, sum_piece, g_new0 (Sum, 1), sum_free);
}

/* Full duplex: each piece of the body is written back as it arrives. */
static void
dup_piece (WeftHttpRequest *req, const guint8 *data, gsize len, gboolean done, gpointer user_data)
{
  if (len > 0)
    weft_http_request_write (req, data, len);
  if (done)
    weft_http_request_finish (req);
}

/* Answers from another thread with a producer (see test_answer_races_drop). */
static gint race_handled;
static gint race_threads_done;

static gboolean
race_producer (WeftHttpRequest *req, gpointer data)
{
  weft_http_request_write (req, (const guint8 *) "race\n", 5);
  weft_http_request_finish (req);
  return FALSE;
}

static gpointer
race_thread (gpointer data)
{
  WeftHttpRequest *req = data;
  weft_http_request_respond_stream (req, 200, "text/plain", race_producer, g_new0 (Count, 1),
                                    count_free);
  weft_http_request_unref (req);
  g_atomic_int_inc (&race_threads_done);
  return NULL;
}

static void
race_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  g_atomic_int_inc (&race_handled);
  g_thread_unref (g_thread_new ("race", race_thread, weft_http_request_ref (req)));
}

static void
dup_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  weft_http_request_respond_stream (req, 200, "application/octet-stream", NULL, NULL, NULL);
  weft_http_request_read_body (req, dup_piece, NULL, NULL);
}

/* Answers first, then reads the body (and drops it). */
static void
drop_piece (WeftHttpRequest *req, const guint8 *data, gsize len, gboolean done, gpointer user_data)
{
}

static void
pre_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  weft_http_request_respond (req, 200, "text/plain", (const guint8 *) "pre\n", 4);
  weft_http_request_read_body (req, drop_piece, NULL, NULL);
}

/* Reads the body, has another thread answer 100 ms later, and holds the
 * connection's context for 300 ms: the body (malformed) is parsed after
 * that answer was made, before it reached the context. */
static gpointer
pre_thread_answer (gpointer data)
{
  WeftHttpRequest *req = data;
  g_usleep (100 * 1000);
  weft_http_request_respond (req, 200, "text/plain", (const guint8 *) "pre\n", 4);
  weft_http_request_unref (req);
  return NULL;
}

static void
pre_thread_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  weft_http_request_read_body (req, drop_piece, NULL, NULL);
  g_thread_unref (g_thread_new ("answer", pre_thread_answer, weft_http_request_ref (req)));
  g_usleep (300 * 1000);
}

static void late_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data);
static void early_header_handler (WeftHttpServer *server, WeftHttpRequest *req,
                                  gpointer user_data);

static guint srv_body_timeout_ms; /* 0: the default */
static const gchar *srv_access_log; /* NULL: none */

/* /proxy: a streamed answer fed by a second connection (a socketpair, the
 * "backend") that the handler opens on the request's context. */
typedef struct {
  WeftHttpRequest *req;
  WeftConnection *backend;
  int peer;            /* the backend's other end, the test's */
  atomic_int ready;
  atomic_int checked;  /* 1: the read data were intact; 2: overwritten */
} Proxy;

static Proxy proxy;

static gsize
proxy_read (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  guint8 *copy = g_memdup2 (data, len);
  /* The last piece: the finish flushes at once on this context, and the
   * answer's client asked for the close, which lingers. */
  weft_http_request_write (proxy.req, data, len);
  weft_http_request_finish (proxy.req);
  atomic_store (&proxy.checked, memcmp (copy, data, len) == 0 ? 1 : 2);
  g_free (copy);
  weft_connection_close (conn);
  return len;
}

static void
proxy_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  int sv[2];
  wt_socketpair (sv);
  proxy.peer = sv[1];
  proxy.req = weft_http_request_ref (req);
  proxy.backend = weft_connection_new (weft_context_get_current (), sv[0], NULL);
  g_assert_nonnull (proxy.backend);
  weft_http_request_respond_stream (req, 200, "text/plain", NULL, NULL, NULL);
  weft_connection_start_reading (proxy.backend, proxy_read, NULL, NULL);
  atomic_store (&proxy.ready, 1);
}

static void
srv_start (Srv *s)
{
  GError *error = NULL;
  g_atomic_int_set (&producer_calls, 0);
  g_atomic_int_set (&notifies, 0);
  g_atomic_int_set (&thread_saw_gone, 0);
  __atomic_store_n (&produced, 0, __ATOMIC_SEQ_CST);
  s->engine = wt_engine_new (2);
  s->server = weft_http_server_new (s->engine);
  if (srv_body_timeout_ms != 0)
    weft_http_server_set_limit (s->server, WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS, srv_body_timeout_ms);
  if (srv_access_log != NULL)
    g_assert_true (weft_http_server_set_access_log (s->server, srv_access_log, &error));
  weft_http_server_add_handler (s->server, "GET", "/count", count_handler, NULL, NULL);
  weft_http_server_add_handler (s->server, "GET", "/flood", flood_handler, NULL, NULL);
  weft_http_server_add_handler (s->server, "GET", "/forever", forever_handler, NULL, NULL);
  weft_http_server_add_handler (s->server, "GET", "/sse", sse_handler, NULL, NULL);
  weft_http_server_add_handler (s->server, "GET", "/gone", gone_handler, NULL, NULL);
  weft_http_server_add_handler (s->server, "GET", "/race", race_handler, NULL, NULL);
  weft_http_server_add_handler (s->server, "GET", "/", hello, NULL, NULL);
  weft_http_server_add_handler (s->server, "GET", "/proxy", proxy_handler, NULL, NULL);
  weft_http_server_add_handler_full (s->server, "POST", "/sum", WEFT_HTTP_HANDLER_STREAM_BODY,
                                     sum_handler, NULL, NULL);
  weft_http_server_add_handler_full (s->server, "POST", "/dup", WEFT_HTTP_HANDLER_STREAM_BODY,
                                     dup_handler, NULL, NULL);
  weft_http_server_add_handler_full (s->server, "POST", "/pre", WEFT_HTTP_HANDLER_STREAM_BODY,
                                     pre_handler, NULL, NULL);
  weft_http_server_add_handler_full (s->server, "POST", "/pre-thread",
                                     WEFT_HTTP_HANDLER_STREAM_BODY, pre_thread_handler, NULL,
                                     NULL);
  weft_http_server_add_handler_full (s->server, "POST", "/late", WEFT_HTTP_HANDLER_STREAM_BODY,
                                     late_handler, NULL, NULL);
  weft_http_server_add_handler_full (s->server, "POST", "/early-header",
                                     WEFT_HTTP_HANDLER_STREAM_BODY, early_header_handler, NULL,
                                     NULL);
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
}

static gchar *
exchange_to_close (guint16 port, const char *req)
{
  int fd = wt_connect_tcp (port);
  wt_send_str (fd, req);
  GByteArray *got = wt_recv_to_eof (fd, FALSE, NULL);
  close (fd);
  g_byte_array_append (got, (const guint8 *) "", 1);
  return (gchar *) g_byte_array_free (got, FALSE);
}

/* Decodes a chunked body at @p (up to and including its last chunk and
 * the empty trailer); returns where it ended, or NULL if malformed. */
static const char *
dechunk (const char *p, GString *out)
{
  for (;;)
    {
      char *end;
      guint64 n = g_ascii_strtoull (p, &end, 16);
      if (end == p || !g_str_has_prefix (end, "\r\n"))
        return NULL;
      p = end + 2;
      if (n == 0)
        return g_str_has_prefix (p, "\r\n") ? p + 2 : NULL;
      if (strlen (p) < n + 2 || p[n] != '\r' || p[n + 1] != '\n')
        return NULL;
      g_string_append_len (out, p, (gssize) n);
      p += n + 2;
    }
}

static gchar *
expected_count (guint n)
{
  GString *s = g_string_new (NULL);
  for (guint i = 0; i < n; i++)
    g_string_append_printf (s, "piece-%u\n", i);
  return g_string_free (s, FALSE);
}

static void
wait_for (gint *counter, gint value)
{
  gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (g_atomic_int_get (counter) < value && g_get_monotonic_time () < end)
    g_usleep (2000);
  g_assert_cmpint (g_atomic_int_get (counter), ==, value);
}

/* ---- streamed answers --------------------------------------------------- */

/* A producer's pieces arrive as one chunked body, terminated; its notify
 * runs once. */
static void
test_chunked_producer (void)
{
  Srv s;
  srv_start (&s);
  gchar *got = exchange_to_close (s.port, "GET /count HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  const char *body = strstr (got, "\r\n\r\n");
  g_assert_nonnull (body);
  if (!g_str_has_prefix (got, "HTTP/1.1 200 OK\r\n") ||
      strstr (got, "Transfer-Encoding: chunked\r\n") == NULL || strstr (got, "Content-Length") != NULL)
    g_error ("head:\n%s", got);
  GString *dec = g_string_new (NULL);
  const char *end = dechunk (body + 4, dec);
  g_assert_nonnull (end);
  g_assert_cmpstr (end, ==, "");
  gchar *want = expected_count (100);
  g_assert_cmpstr (dec->str, ==, want);
  g_free (want);
  g_string_free (dec, TRUE);
  g_free (got);
  g_assert_cmpint (g_atomic_int_get (&producer_calls), ==, 100);
  wait_for (&notifies, 1);
  srv_stop (&s);
}

/* Python's http.client reads the same stream. */
static void
test_python_client (void)
{
  const char *python = g_getenv ("WEFT_TEST_PYTHON");
  if (python == NULL)
    {
      g_test_skip ("python3 not found");
      return;
    }
  Srv s;
  srv_start (&s);
  gchar *port = g_strdup_printf ("%u", s.port);
  const char *script =
      "import http.client, sys\n"
      "c = http.client.HTTPConnection('127.0.0.1', int(sys.argv[1]), timeout=10)\n"
      "for i in range(3):\n"
      "    c.request('GET', '/count')\n"
      "    r = c.getresponse()\n"
      "    assert r.status == 200 and r.getheader('Transfer-Encoding') == 'chunked'\n"
      "    body = r.read().decode()\n"
      "    assert body == ''.join('piece-%d\\n' % j for j in range(100)), body[:100]\n"
      "    c.request('GET', '/')\n"
      "    assert c.getresponse().read() == b'Hello, World!'\n"
      "print('ok')\n";
  const char *argv[] = { python, "-c", script, port, NULL };
  gchar *out = NULL, *err = NULL;
  gint status;
  GError *error = NULL;
  g_spawn_sync (NULL, (gchar **) argv, NULL, G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL, &out, &err,
                &status, &error);
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("python client failed:\n%s\n%s", out, err);
  g_assert_cmpstr (out, ==, "ok\n");
  g_free (out);
  g_free (err);
  g_free (port);
  wait_for (&notifies, 3);
  srv_stop (&s);
}

/* Events written by another thread reach the client one by one. */
static void
test_sse_from_thread (void)
{
  Srv s;
  srv_start (&s);
  g_atomic_int_set (&client_acks, 0);
  int fd = wt_connect_tcp (s.port);
  wt_send_str (fd, "GET /sse HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  GString *all = g_string_new (NULL);
  guint seen = 0;
  while (seen < 3)
    {
      char buf[4096];
      ssize_t n = recv (fd, buf, sizeof buf, 0);
      g_assert_cmpint (n, >, 0); /* a buffered stream times out here */
      g_string_append_len (all, buf, n);
      gchar *ev = g_strdup_printf ("data: event %u\n\n", seen);
      if (strstr (all->str, ev) != NULL)
        {
          seen++;
          g_atomic_int_inc (&client_acks);
        }
      g_free (ev);
    }
  GByteArray *rest = wt_recv_to_eof (fd, FALSE, NULL);
  g_string_append_len (all, (const char *) rest->data, rest->len);
  g_byte_array_unref (rest);
  close (fd);
  g_assert_nonnull (strstr (all->str, "Content-Type: text/event-stream\r\n"));
  g_assert_nonnull (strstr (all->str, "Cache-Control: no-cache\r\n"));
  GString *dec = g_string_new (NULL);
  const char *end = dechunk (strstr (all->str, "\r\n\r\n") + 4, dec);
  g_assert_nonnull (end);
  g_assert_cmpstr (dec->str, ==, "data: event 0\n\ndata: event 1\n\ndata: event 2\n\n");
  g_string_free (dec, TRUE);
  g_string_free (all, TRUE);
  wait_for (&notifies, 1);
  srv_stop (&s);
}

/* Pipelined behind and before a stream, answers keep their order. */
static void
test_pipelined_order (void)
{
  Srv s;
  srv_start (&s);
  gchar *got = exchange_to_close (s.port,
                                  "GET /count HTTP/1.1\r\nHost: a\r\n\r\n"
                                  "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
                                  "GET /count HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  const char *p = strstr (got, "\r\n\r\n");
  g_assert_nonnull (p);
  GString *dec = g_string_new (NULL);
  p = dechunk (p + 4, dec);
  g_assert_nonnull (p);
  g_assert_true (g_str_has_prefix (p, "HTTP/1.1 200 OK\r\n"));
  const char *hello_end = strstr (p, "Hello, World!");
  g_assert_nonnull (hello_end);
  p = hello_end + 13;
  g_assert_true (g_str_has_prefix (p, "HTTP/1.1 200 OK\r\n"));
  p = strstr (p, "\r\n\r\n");
  g_string_truncate (dec, 0);
  p = dechunk (p + 4, dec);
  g_assert_nonnull (p);
  g_assert_cmpstr (p, ==, "");
  gchar *want = expected_count (100);
  g_assert_cmpstr (dec->str, ==, want);
  g_free (want);
  g_string_free (dec, TRUE);
  g_free (got);
  srv_stop (&s);
}

/* HTTP/1.0 has no chunked coding: the body is delimited by the close. */
static void
test_http10 (void)
{
  Srv s;
  srv_start (&s);
  gchar *got = exchange_to_close (s.port, "GET /count HTTP/1.0\r\n\r\n");
  g_assert_true (g_str_has_prefix (got, "HTTP/1.1 200 OK\r\n"));
  g_assert_null (strstr (got, "Transfer-Encoding"));
  g_assert_nonnull (strstr (got, "Connection: close\r\n"));
  gchar *want = expected_count (100);
  g_assert_cmpstr (strstr (got, "\r\n\r\n") + 4, ==, want);
  g_free (want);
  g_free (got);
  srv_stop (&s);
}

/* HEAD gets the head only; the producer never runs; the connection goes
 * on with the next request. */
static void
test_head (void)
{
  Srv s;
  srv_start (&s);
  gchar *got = exchange_to_close (s.port,
                                  "HEAD /count HTTP/1.1\r\nHost: a\r\n\r\n"
                                  "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  if (!g_str_has_prefix (got, "HTTP/1.1 200 OK\r\n"))
    g_error ("HEAD:\n%s", got);
  const char *second = strstr (got, "\r\n\r\n") + 4;
  if (!g_str_has_prefix (second, "HTTP/1.1 200 OK\r\n") || !g_str_has_suffix (second, "Hello, World!"))
    g_error ("after HEAD:\n%s", got);
  g_assert_cmpint (g_atomic_int_get (&producer_calls), ==, 0);
  wait_for (&notifies, 1);
  g_free (got);
  srv_stop (&s);
}

/* A client that does not read holds the producer back: memory stays
 * bounded by the write queue's high mark and the socket buffers. */
static void
test_backpressure (void)
{
  Srv s;
  srv_start (&s);
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int small = 65536; /* no receive-buffer autotuning to hide the bound */
  setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (s.port),
                            .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
  g_assert_cmpint (connect (fd, (struct sockaddr *) &sa, sizeof sa), ==, 0);
  wt_set_timeouts (fd, 10000);
  wt_send_str (fd, "GET /flood HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  g_usleep (500 * 1000);
  guint64 early = __atomic_load_n (&produced, __ATOMIC_SEQ_CST);
  g_test_message ("produced %" G_GUINT64_FORMAT " bytes while the client did not read", early);
  g_assert_cmpuint (early, >, 0);
  g_assert_cmpuint (early, <, 12 * 1024 * 1024);
  /* Now read it all: 32 MiB of 'f', chunked, terminated. */
  guint64 body = 0;
  GString *pending = g_string_new (NULL);
  gboolean ended = FALSE;
  gboolean in_head = TRUE;
  char buf[65536];
  while (!ended)
    {
      ssize_t n = recv (fd, buf, sizeof buf, 0);
      g_assert_cmpint (n, >, 0);
      g_string_append_len (pending, buf, n);
      if (in_head)
        {
          char *e = strstr (pending->str, "\r\n\r\n");
          if (e == NULL)
            continue;
          g_string_erase (pending, 0, e + 4 - pending->str);
          in_head = FALSE;
        }
      /* Consume whole chunks. */
      for (;;)
        {
          char *nl = g_strstr_len (pending->str, (gssize) MIN (pending->len, 20), "\r\n");
          if (nl == NULL)
            break;
          guint64 size = g_ascii_strtoull (pending->str, NULL, 16);
          gsize need = (gsize) (nl - pending->str) + 2 + size + 2;
          if (pending->len < need)
            break;
          body += size;
          g_string_erase (pending, 0, (gssize) need);
          if (size == 0)
            {
              ended = TRUE;
              break;
            }
        }
    }
  g_assert_cmpuint (body, ==, 32 * 1024 * 1024);
  g_string_free (pending, TRUE);
  close (fd);
  wait_for (&notifies, 1);
  srv_stop (&s);
}

/* A client reads some of the endless /forever stream and goes away; its
 * producer's notify has run. */
static void
leave_forever_stream (Srv *s)
{
  int fd = wt_connect_tcp (s->port);
  wt_send_str (fd, "GET /forever HTTP/1.1\r\nHost: a\r\n\r\n");
  wt_recv_discard (fd, 64 * 1024);
  close (fd);
  wait_for (&notifies, 1);
}

/* A client that goes away mid-stream: the producer stops being called and
 * its notify runs once. */
static void
test_client_gone (void)
{
  Srv s;
  srv_start (&s);
  leave_forever_stream (&s);
  gint calls = g_atomic_int_get (&producer_calls);
  g_usleep (100 * 1000);
  g_assert_cmpint (g_atomic_int_get (&producer_calls), ==, calls);
  srv_stop (&s);
}

/* A stream its client leaves is still an answer (200, its head out): the
 * status counts it and its latency, as it would an access log line. An
 * event stream only ever ends so, and was in no count at all. */
static void
test_client_gone_counted (void)
{
  Srv s;
  srv_start (&s);
  leave_forever_stream (&s);
  gchar *json = NULL;
  gint64 end = g_get_monotonic_time () + WT_DEADLINE_US;
  do
    {
      g_free (json);
      json = weft_http_server_get_status_json (s.server);
    }
  while (strstr (json, "\"2xx\": 1,") == NULL && g_get_monotonic_time () < end);
  g_test_message ("%s", json);
  g_assert_nonnull (strstr (json, "\"requests\": 1,"));
  g_assert_nonnull (strstr (json, "\"2xx\": 1, \"3xx\": 0, \"4xx\": 0, \"5xx\": 0"));
  guint64 total = 0;
  for (const char *p = strstr (json, "\"latency_us\""); (p = strstr (p, "\"count\": ")) != NULL; p++)
    total += g_ascii_strtoull (p + 9, NULL, 10);
  g_assert_cmpuint (total, ==, 1);
  g_free (json);
  srv_stop (&s);
}

/* ... and the access log has its line, with the client's address (asked
 * once the connection was closed, it was "-"). */
static void
test_client_gone_logged (void)
{
  GError *error = NULL;
  gchar *dir = g_dir_make_tmp ("weft-log-XXXXXX", &error);
  g_assert_no_error (error);
  gchar *path = g_build_filename (dir, "access.log", NULL);
  srv_access_log = path;
  Srv s;
  srv_start (&s);
  srv_access_log = NULL;
  leave_forever_stream (&s);
  srv_stop (&s); /* writes the log's last lines */
  gchar *text = NULL;
  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  g_test_message ("%s", text);
  g_assert_true (g_str_has_prefix (text, "127.0.0.1 - - ["));
  g_assert_nonnull (strstr (text, "] \"GET /forever HTTP/1.1\" 200 "));
  g_free (text);
  unlink (path);
  rmdir (dir);
  g_free (path);
  g_free (dir);
}

/* Writes from a thread fail once the client is gone. */
static void
test_write_after_gone (void)
{
  Srv s;
  srv_start (&s);
  int fd = wt_connect_tcp (s.port);
  wt_send_str (fd, "GET /gone HTTP/1.1\r\nHost: a\r\n\r\n");
  GString *all = g_string_new (NULL);
  while (strstr (all->str, "tick") == NULL)
    {
      char buf[4096];
      ssize_t n = recv (fd, buf, sizeof buf, 0);
      g_assert_cmpint (n, >, 0);
      g_string_append_len (all, buf, n);
    }
  g_string_free (all, TRUE);
  close (fd);
  wait_for (&thread_saw_gone, 1);
  wait_for (&notifies, 1);
  srv_stop (&s);
}

/* A thread answers with a producer while the client resets the
 * connection: the context drops the request at about the moment the
 * thread publishes the producer. Each producer's notify runs exactly once.
 * (The drop used to read and clear the producer fields while the thread
 * wrote them: a notify could be lost, and TSan reported the race.) */
static void
test_answer_races_drop (void)
{
  const int rounds = 300;
  Srv s;
  srv_start (&s);
  g_atomic_int_set (&race_handled, 0);
  g_atomic_int_set (&race_threads_done, 0);
  for (int i = 0; i < rounds; i++)
    {
      int fd = wt_connect_tcp (s.port);
      wt_send_str (fd, "GET /race HTTP/1.1\r\nHost: a\r\n\r\n");
      if (i % 4 != 0)
        g_usleep ((gulong) (i % 4) * 40);
      struct linger lg = { 1, 0 };
      g_assert_cmpint (setsockopt (fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), ==, 0);
      close (fd);
    }
  /* Every request the server took has its thread; wait for them all,
   * then stop the server: afterwards nothing holds a request. */
  gint64 end = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  while (g_get_monotonic_time () < end &&
         (g_atomic_int_get (&race_handled) == 0 ||
          g_atomic_int_get (&race_threads_done) < g_atomic_int_get (&race_handled)))
    g_usleep (2000);
  g_assert_cmpint (g_atomic_int_get (&race_threads_done), ==, g_atomic_int_get (&race_handled));
  srv_stop (&s);
  /* A connection still unread at that moment may have reached the handler
   * while the server stopped (its thread started after the wait above):
   * the engine's workers are joined now, so no handler starts any more;
   * wait for the threads once more. */
  end = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  while (g_get_monotonic_time () < end &&
         g_atomic_int_get (&race_threads_done) < g_atomic_int_get (&race_handled))
    g_usleep (2000);
  g_assert_cmpint (g_atomic_int_get (&race_threads_done), ==, g_atomic_int_get (&race_handled));
  g_test_message ("%d of %d requests reached the handler", g_atomic_int_get (&race_handled),
                  rounds);
  g_assert_cmpint (g_atomic_int_get (&race_handled), >, 0);
  g_assert_cmpint (g_atomic_int_get (&notifies), ==, g_atomic_int_get (&race_handled));
}

/* ---- a producer's notify after its call --------------------------------- */

/* One per request; the notify marks it instead of freeing it, so that a
 * producer that finds it marked is a deterministic failure, not a
 * use-after-free only a sanitizer sees. */
typedef struct {
  atomic_int released;
  atomic_int violations; /* the producer saw itself released */
  int pieces;
  gboolean finish_inside;
} Guard;

#define MAX_GUARDS 64
static Guard *guards[MAX_GUARDS];
static atomic_int n_guards;

static void
guard_release (gpointer data)
{
  Guard *g = data;
  atomic_fetch_add (&g->released, 1);
}

static gboolean
guard_producer (WeftHttpRequest *req, gpointer data)
{
  Guard *g = data;
  static guint8 block[64 * 1024];
  gboolean ok = weft_http_request_write (req, block, sizeof block);
  if (atomic_load (&g->released))
    atomic_fetch_add (&g->violations, 1);
  if (g->finish_inside && ++g->pieces == 3)
    {
      weft_http_request_finish (req);
      if (atomic_load (&g->released))
        atomic_fetch_add (&g->violations, 1);
      return FALSE;
    }
  return ok;
}

static void
guard_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  int i = atomic_fetch_add (&n_guards, 1);
  g_assert_cmpint (i, <, MAX_GUARDS);
  Guard *g = g_new0 (Guard, 1);
  g->finish_inside = GPOINTER_TO_INT (user_data);
  guards[i] = g;
  weft_http_request_respond_stream (req, 200, "application/octet-stream", guard_producer, g,
                                    guard_release);
}

/* The producer's notify never runs inside the producer's own call: not
 * when the producer finishes the stream (the tutorial's pattern), nor when
 * its write fails because the client reset the connection. It used to run
 * from inside weft_http_request_finish() or _write(), so a producer that
 * looked at its data afterwards read freed memory (and a binding freed
 * the closure it was running). */
static void
test_producer_notify_after_call (void)
{
  atomic_store (&n_guards, 0);
  WeftEngine *engine = wt_engine_new (2);
  WeftHttpServer *server = weft_http_server_new (engine);
  weft_http_server_add_handler (server, "GET", "/finish", guard_handler, GINT_TO_POINTER (TRUE),
                                NULL);
  weft_http_server_add_handler (server, "GET", "/forever", guard_handler,
                                GINT_TO_POINTER (FALSE), NULL);
  GError *error = NULL;
  WeftListener *l = weft_http_server_get_listener (server);
  g_assert_true (weft_listener_add_tcp (l, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  guint16 port = weft_listener_get_port (l, 0);
  g_assert_true (weft_http_server_start (server, &error));

  /* Finished inside the producer: the whole body, then the notify. */
  int fd = wt_connect_tcp (port);
  wt_send_str (fd, "GET /finish HTTP/1.0\r\n\r\n");
  GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
  g_assert_cmpuint (got->len, >, 3 * 64 * 1024);
  g_byte_array_unref (got);
  close (fd);

  /* Reset while the producer writes. */
  const int resets = 40;
  for (int i = 0; i < resets; i++)
    {
      fd = wt_connect_tcp (port);
      wt_send_str (fd, "GET /forever HTTP/1.1\r\nHost: a\r\n\r\n");
      wt_recv_discard (fd, 128 * 1024);
      struct linger lg = { 1, 0 };
      g_assert_cmpint (setsockopt (fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), ==, 0);
      close (fd);
    }
  gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  for (int i = 0; i < 1 + resets; i++)
    {
      while (g_get_monotonic_time () < end &&
             (atomic_load (&n_guards) <= i || atomic_load (&guards[i]->released) == 0))
        g_usleep (1000);
      g_assert_cmpint (atomic_load (&n_guards), >, i);
      g_assert_cmpint (atomic_load (&guards[i]->released), ==, 1);
    }
  weft_http_server_unref (server);
  g_assert_true (weft_engine_shutdown (engine, WT_DEADLINE_US));
  weft_engine_unref (engine);
  g_assert_cmpint (atomic_load (&n_guards), ==, 1 + resets);
  for (int i = 0; i < 1 + resets; i++)
    {
      g_assert_cmpint (atomic_load (&guards[i]->released), ==, 1);
      g_assert_cmpint (atomic_load (&guards[i]->violations), ==, 0);
      g_free (guards[i]);
    }
}

/* ---- streamed bodies ---------------------------------------------------- */

static gchar *
expected_sum (gsize len)
{
  guint32 sum = 0;
  for (gsize i = 0; i < len; i++)
    sum = sum * 31 + (guint8) (i * 7);
  return g_strdup_printf ("len=%" G_GSIZE_FORMAT " sum=%u", len, sum);
}

/* 3 MiB bodies, with a length and chunked (Python's http.client), reach
 * the reader in several pieces, whole and in order. */
static void
test_body_pieces (void)
{
  const char *python = g_getenv ("WEFT_TEST_PYTHON");
  if (python == NULL)
    {
      g_test_skip ("python3 not found");
      return;
    }
  Srv s;
  srv_start (&s);
  gchar *port = g_strdup_printf ("%u", s.port);
  const char *script =
      "import http.client, sys\n"
      "n = 3 * 1024 * 1024\n"
      "data = bytes((i * 7) & 255 for i in range(n))\n"
      "c = http.client.HTTPConnection('127.0.0.1', int(sys.argv[1]), timeout=10)\n"
      "c.request('POST', '/sum', body=data)\n"
      "print(c.getresponse().read().decode())\n"
      "def gen():\n"
      "    for i in range(0, n, 100000):\n"
      "        yield data[i:i + 100000]\n"
      "c.request('POST', '/sum', body=gen(), encode_chunked=True)\n"
      "print(c.getresponse().read().decode())\n";
  const char *argv[] = { python, "-c", script, port, NULL };
  gchar *out = NULL, *err = NULL;
  gint status;
  GError *error = NULL;
  g_spawn_sync (NULL, (gchar **) argv, NULL, G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL, &out, &err,
                &status, &error);
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("python client failed:\n%s\n%s", out, err);
  gchar **lines = g_strsplit (out, "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, 3);
  gchar *want = expected_sum (3 * 1024 * 1024);
  for (guint i = 0; i < 2; i++)
    {
      g_test_message ("%s", lines[i]);
      g_assert_true (g_str_has_prefix (lines[i], want));
      guint pieces = (guint) atoi (strstr (lines[i], "pieces=") + 7);
      g_assert_cmpuint (pieces, >, 1);
    }
  g_free (want);
  g_strfreev (lines);
  g_free (out);
  g_free (err);
  g_free (port);
  wait_for (&notifies, 2);
  srv_stop (&s);
}

/* The handler refuses an Expect: 100-continue request without reading:
 * the client gets the refusal, no 100, and the connection closes. */
static void
test_refused_before_continue (void)
{
  Srv s;
  srv_start (&s);
  int fd = wt_connect_tcp (s.port);
  wt_send_str (fd, "POST /sum HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nX-Refuse: 417\r\n"
                   "Content-Length: 1000000\r\n\r\n");
  GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
  g_byte_array_append (got, (const guint8 *) "", 1);
  const char *text = (const char *) got->data;
  if (!g_str_has_prefix (text, "HTTP/1.1 417 ") || strstr (text, "Connection: close\r\n") == NULL ||
      strstr (text, "100 Continue") != NULL)
    g_error ("refusal:\n%s", text);
  g_byte_array_unref (got);
  close (fd);
  /* The same with 413 and no Expect, body already on its way. */
  fd = wt_connect_tcp (s.port);
  wt_send_str (fd, "POST /sum HTTP/1.1\r\nHost: a\r\nX-Refuse: 413\r\nContent-Length: 10\r\n\r\n01234");
  got = wt_recv_to_eof (fd, TRUE, NULL);
  g_byte_array_append (got, (const guint8 *) "", 1);
  text = (const char *) got->data;
  if (!g_str_has_prefix (text, "HTTP/1.1 413 ") || strstr (text, "Connection: close\r\n") == NULL)
    g_error ("refusal:\n%s", text);
  g_byte_array_unref (got);
  close (fd);
  srv_stop (&s);
}

/* A handler that reads the body sends the 100 when it asks for it. */
static void
test_continue_on_read (void)
{
  Srv s;
  srv_start (&s);
  int fd = wt_connect_tcp (s.port);
  wt_send_str (fd, "POST /sum HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                   "Content-Length: 3\r\n\r\n");
  char cont[25];
  wt_recv_exactly (fd, cont, sizeof cont);
  g_assert_cmpmem (cont, sizeof cont, "HTTP/1.1 100 Continue\r\n\r\n", 25);
  wt_send_all (fd, "\x00\x07\x0e", 3);
  /* Then a pipelined request on the same connection. */
  wt_send_str (fd, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  GByteArray *got = wt_recv_to_eof (fd, FALSE, NULL);
  g_byte_array_append (got, (const guint8 *) "", 1);
  gchar *want = expected_sum (3);
  if (strstr ((char *) got->data, want) == NULL ||
      !g_str_has_suffix ((char *) got->data, "Hello, World!"))
    g_error ("after 100:\n%s", (char *) got->data);
  g_free (want);
  g_byte_array_unref (got);
  close (fd);
  srv_stop (&s);
}

/* A handler that answers and then asks for the body still gets its
 * client the 100 (Continue): the answer waits for the body, and the
 * client for the 100 (RFC 9110 §10.1.1: the server must not wait for the
 * content before sending it). A stream that echoes the body sends it
 * before its head. */
static void
test_continue_after_answer (void)
{
  Srv s;
  srv_start (&s);
  const char *paths[] = { "/pre", "/dup" };
  for (guint i = 0; i < G_N_ELEMENTS (paths); i++)
    {
      int fd = wt_connect_tcp (s.port);
      wt_set_timeouts (fd, 3000); /* no 100 by then: the client would wait for ever */
      gchar *head = g_strdup_printf ("POST %s HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                                     "Connection: close\r\nContent-Length: 3\r\n\r\n",
                                     paths[i]);
      wt_send_str (fd, head);
      g_free (head);
      char cont[25];
      ssize_t n = recv (fd, cont, sizeof cont, MSG_WAITALL);
      if (n != (ssize_t) sizeof cont || memcmp (cont, "HTTP/1.1 100 Continue\r\n\r\n", 25) != 0)
        g_error ("%s: no 100 (Continue) first: %.*s", paths[i], (int) MAX (n, 0), cont);
      wt_send_str (fd, "abc");
      GByteArray *got = wt_recv_to_eof (fd, FALSE, NULL);
      g_byte_array_append (got, (const guint8 *) "", 1);
      const char *text = (const char *) got->data;
      if (!g_str_has_prefix (text, "HTTP/1.1 200 ") || strstr (text, "100 Continue") != NULL ||
          (i == 0 && !g_str_has_suffix (text, "\r\n\r\npre\n")) ||
          (i == 1 && !g_str_has_suffix (text, "\r\n\r\n3\r\nabc\r\n0\r\n\r\n")))
        g_error ("%s: after the 100:\n%s", paths[i], text);
      g_byte_array_unref (got);
      close (fd);
    }
  srv_stop (&s);
}

/* A stream whose own request then fails (a malformed chunk: 400; a body
 * that stops: 408) is cut off: the close ends it without the last chunk,
 * so its client knows the answer is incomplete (RFC 9112 §8), instead of
 * taking the echo of half a body for a whole answer. */
static void
test_stream_cut_by_bad_body (void)
{
  Srv s;
  srv_body_timeout_ms = 1000;
  srv_start (&s);
  srv_body_timeout_ms = 0;
  const char *bodies[] = { "5\r\nhello\r\nZZ\r\n", "5\r\nhello\r\n" };
  for (guint i = 0; i < G_N_ELEMENTS (bodies); i++)
    {
      int fd = wt_connect_tcp (s.port);
      wt_send_str (fd, "POST /dup HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
      wt_send_str (fd, bodies[i]);
      GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
      g_byte_array_append (got, (const guint8 *) "", 1);
      const char *text = (const char *) got->data;
      if (!g_str_has_prefix (text, "HTTP/1.1 200 ") || !g_str_has_suffix (text, "\r\n5\r\nhello\r\n"))
        g_error ("stream cut off by its request's failure:\n%s", text);
      g_byte_array_unref (got);
      close (fd);
    }
  srv_stop (&s);
}

/* An answer given before its body, whose body then fails, is the
 * connection's last: its head says so (else the client may send its next
 * request into the close). */
static void
expect_answer_then_close (const char *path)
{
  Srv s;
  srv_start (&s);
  int fd = wt_connect_tcp (s.port);
  gchar *req = g_strdup_printf ("POST %s HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                                "3\r\nabc\r\nZZ\r\n", path);
  wt_send_str (fd, req);
  g_free (req);
  GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
  g_byte_array_append (got, (const guint8 *) "", 1);
  const char *text = (const char *) got->data;
  if (!g_str_has_prefix (text, "HTTP/1.1 200 ") || strstr (text, "\r\nConnection: close\r\n") == NULL ||
      !g_str_has_suffix (text, "\r\n\r\npre\n"))
    g_error ("%s: answer before a malformed body:\n%s", path, text);
  g_byte_array_unref (got);
  close (fd);
  srv_stop (&s);
}

static void
test_answered_then_bad_body (void)
{
  expect_answer_then_close ("/pre");
}

/* The same when the answer, made on another thread, is on its way to the
 * connection's context as the body fails: the failure is applied when the
 * answer arrives, which then goes out with its close. (Before, the failure
 * took the answer as arrived and rewrote its head; when the answer was
 * still being built on the other thread, that was a data race. This
 * ordering, with the answer built before the failure, passed then too:
 * the race itself has no deterministic test.) */
static void
test_answered_elsewhere_then_bad_body (void)
{
  expect_answer_then_close ("/pre-thread");
}

/* ---- a late answer to a request the server refused ------------------------- */

/* The handler reads the body and hands the request to a thread that
 * answers once the test says so (late_go): after the server has refused
 * the request itself (its body was malformed). */
static atomic_int late_go;
static atomic_int late_write_ok;
static atomic_int late_notified;
static GThread *late_thread;

static void
late_notify (gpointer data)
{
  atomic_fetch_add (&late_notified, 1);
}

static gpointer
late_answer (gpointer data)
{
  WeftHttpRequest *req = data;
  while (!atomic_load (&late_go))
    g_usleep (1000);
  weft_http_request_add_response_header (req, "X-Late", "1");
  weft_http_request_respond_stream (req, 200, "text/plain", NULL, NULL, late_notify);
  atomic_store (&late_write_ok, weft_http_request_write (req, (const guint8 *) "late", 4));
  weft_http_request_finish (req);
  weft_http_request_unref (req);
  return NULL;
}

static void
late_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  weft_http_request_read_body (req, drop_piece, NULL, NULL);
  late_thread = g_thread_new ("late", late_answer, weft_http_request_ref (req));
}

/* A streamed body's handler answers from another thread, but the body
 * fails first and the server answers 400 itself: the handler could not
 * know, so its answer is refused quietly, as one to a client gone is
 * (the stream's notify runs, its writes return FALSE). It was a critical
 * warning ("request already answered", "has no streamed answer"), which
 * G_DEBUG=fatal-criticals makes an abort, for a race the application
 * cannot avoid. */
static void
test_late_answer_after_refusal (void)
{
  Srv s;
  srv_start (&s);
  atomic_store (&late_go, 0);
  atomic_store (&late_write_ok, -1);
  atomic_store (&late_notified, 0);
  late_thread = NULL;
  int fd = wt_connect_tcp (s.port);
  wt_send_str (fd, "POST /late HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "3\r\nabc\r\nZZ\r\n");
  GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
  g_byte_array_append (got, (const guint8 *) "", 1);
  if (!g_str_has_prefix ((const char *) got->data, "HTTP/1.1 400 "))
    g_error ("malformed body:\n%s", (const char *) got->data);
  g_byte_array_unref (got);
  close (fd);
  atomic_store (&late_go, 1);
  WT_WAIT_UNTIL (late_thread != NULL);
  g_assert_nonnull (late_thread);
  g_thread_join (late_thread);
  g_assert_cmpint (atomic_load (&late_write_ok), ==, FALSE);
  WT_WAIT_UNTIL (atomic_load (&late_notified) == 1);
  g_assert_cmpint (atomic_load (&late_notified), ==, 1);
  srv_stop (&s);
}

/* ---- the server's own refusal leaves the handler's headers out ------------ */

static void
early_header_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  weft_http_request_add_response_header (req, "X-Handler", "1");
  weft_http_request_read_body (req, drop_piece, NULL, NULL);
}

/* A header a handler adds before it answers belongs to its answer, not
 * to the server's refusal of the request's body (400 here). The refusal
 * built its head from them, on the connection's context, while the
 * handler (the request handed to another thread, say) could be adding
 * one: a read of a string being reallocated. */
static void
test_refusal_leaves_out_handler_headers (void)
{
  Srv s;
  srv_start (&s);
  int fd = wt_connect_tcp (s.port);
  wt_send_str (fd, "POST /early-header HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "3\r\nabc\r\nZZ\r\n");
  GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
  g_byte_array_append (got, (const guint8 *) "", 1);
  const char *text = (const char *) got->data;
  if (!g_str_has_prefix (text, "HTTP/1.1 400 "))
    g_error ("malformed body:\n%s", text);
  g_assert_null (strstr (text, "X-Handler"));
  g_byte_array_unref (got);
  close (fd);
  srv_stop (&s);
}

/* Full duplex: the echo of the first part arrives before the client sends
 * the rest. */
static void
test_duplex (void)
{
  Srv s;
  srv_start (&s);
  int fd = wt_connect_tcp (s.port);
  const gsize total = 1024 * 1024;
  guint8 *data = g_malloc (total);
  for (gsize i = 0; i < total; i++)
    data[i] = (guint8) (1 + (i * 13) % 255); /* no NUL: the checks use strings */
  wt_send_str (fd, "POST /dup HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
                   "Content-Length: 1048576\r\n\r\n");
  wt_send_all (fd, data, 1000);
  GString *all = g_string_new (NULL);
  for (;;)
    {
      char buf[4096];
      ssize_t n = recv (fd, buf, sizeof buf, 0);
      g_assert_cmpint (n, >, 0); /* no echo before the whole body: times out */
      g_string_append_len (all, buf, n);
      const char *b = strstr (all->str, "\r\n\r\n");
      if (b != NULL && strstr (b, "\r\n3e8\r\n") != NULL)
        break;
      if (b != NULL && all->len - (gsize) (b + 4 - all->str) > 1000)
        break;
    }
  wt_send_all (fd, data + 1000, total - 1000);
  GByteArray *rest = wt_recv_to_eof (fd, FALSE, NULL);
  g_string_append_len (all, (const char *) rest->data, rest->len);
  g_byte_array_unref (rest);
  GString *dec = g_string_new (NULL);
  const char *end = dechunk (strstr (all->str, "\r\n\r\n") + 4, dec);
  g_assert_nonnull (end);
  g_assert_cmpmem (dec->str, dec->len, data, total);
  g_string_free (dec, TRUE);
  g_string_free (all, TRUE);
  g_free (data);
  close (fd);
  srv_stop (&s);
}

/* WeftConnectionReadFunc's data stay valid until the callback returns. A
 * read function on an HTTP connection's context (a proxy's backend) that
 * ends an answer whose client asked for the close starts that
 * connection's lingering close, which reads and drops the client's input
 * at once; it read it into the thread's read scratch buffer, where the
 * read function's data were (here overwritten by the client's "J"s). */
static void
test_linger_keeps_read_data (void)
{
  Srv s;
  srv_start (&s);
  memset (&proxy, 0, sizeof proxy);
  int fd = wt_connect_tcp (s.port);
  /* The "J"s behind the request stop the reading; those sent later stay
   * in the socket for the lingering close. */
  wt_send_str (fd, "GET /proxy HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nJJJJ");
  WT_WAIT_UNTIL (atomic_load (&proxy.ready) == 1);
  g_assert_cmpint (atomic_load (&proxy.ready), ==, 1);
  char junk[512];
  memset (junk, 'J', sizeof junk);
  wt_send_all (fd, junk, sizeof junk);
  g_usleep (50 * 1000); /* (in the socket either way: the reading stopped) */

  static const char msg[] = "these bytes are the read function's";
  wt_send_all (proxy.peer, msg, sizeof msg - 1);
  WT_WAIT_UNTIL (atomic_load (&proxy.checked) != 0);
  g_assert_cmpint (atomic_load (&proxy.checked), ==, 1);

  GByteArray *all = wt_recv_to_eof (fd, FALSE, NULL);
  g_byte_array_append (all, (const guint8 *) "", 1);
  g_assert_nonnull (strstr ((const char *) all->data, msg));
  g_byte_array_unref (all);
  close (fd);
  close (proxy.peer);
  weft_connection_unref (proxy.backend);
  weft_http_request_unref (proxy.req);
  srv_stop (&s);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  signal (SIGPIPE, SIG_IGN);
  g_test_add_func ("/http-stream/chunked-producer", test_chunked_producer);
  g_test_add_func ("/http-stream/python-client", test_python_client);
  g_test_add_func ("/http-stream/sse-from-thread", test_sse_from_thread);
  g_test_add_func ("/http-stream/pipelined-order", test_pipelined_order);
  g_test_add_func ("/http-stream/http10-close-delimited", test_http10);
  g_test_add_func ("/http-stream/head", test_head);
  g_test_add_func ("/http-stream/backpressure", test_backpressure);
  g_test_add_func ("/http-stream/client-gone", test_client_gone);
  g_test_add_func ("/http-stream/client-gone-counted", test_client_gone_counted);
  g_test_add_func ("/http-stream/client-gone-logged", test_client_gone_logged);
  g_test_add_func ("/http-stream/write-after-gone", test_write_after_gone);
  g_test_add_func ("/http-stream/answer-races-drop", test_answer_races_drop);
  g_test_add_func ("/http-stream/producer-notify-after-call", test_producer_notify_after_call);
  g_test_add_func ("/http-stream/body-pieces", test_body_pieces);
  g_test_add_func ("/http-stream/refused-before-continue", test_refused_before_continue);
  g_test_add_func ("/http-stream/continue-on-read", test_continue_on_read);
  g_test_add_func ("/http-stream/duplex", test_duplex);
  g_test_add_func ("/http-stream/continue-after-answer", test_continue_after_answer);
  g_test_add_func ("/http-stream/stream-cut-by-bad-body", test_stream_cut_by_bad_body);
  g_test_add_func ("/http-stream/answered-then-bad-body", test_answered_then_bad_body);
  g_test_add_func ("/http-stream/answered-elsewhere-then-bad-body",
                   test_answered_elsewhere_then_bad_body);
  g_test_add_func ("/http-stream/linger-keeps-read-data", test_linger_keeps_read_data);
  g_test_add_func ("/http-stream/late-answer-after-refusal", test_late_answer_after_refusal);
  g_test_add_func ("/http-stream/refusal-leaves-out-handler-headers",
                   test_refusal_leaves_out_handler_headers);
  return g_test_run ();
}
