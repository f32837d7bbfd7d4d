/* test-drain.c: graceful drain of a real server process under load.
 *
 * examples/bench-server (path in WEFT_BENCH_SERVER) is started on a free
 * port and loaded by client threads on keep-alive connections: plain GETs,
 * pipelined pairs, POST /echo bodies sent in pieces, chunked PUT /echo.
 * SIGTERM arrives mid-load. A request counts as
 *   ok          its whole answer arrived and is right;
 *   unanswered  its connection closed (FIN or reset) before one byte of
 *               its answer, after SIGTERM: the server never took it
 *               (RFC 9112 9.3.1: a client may retry it elsewhere);
 *   failed      anything else: an error before SIGTERM, a cut or wrong
 *               answer, a timeout.
 * The server prints how many requests it dispatched when it exits; every
 * one of them must have reached its client whole (ok == dispatched), no
 * request may fail, and the server must report "all finished".
 *
 * Then, in process through weft_http_server_shutdown(), the cases a load
 * only meets by chance: a body half sent, pipelined requests answered
 * after the shutdown began, and the deadline.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <weft.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "weft-net-util.h"
#include "weft-test-util.h"

#define N_CLIENTS 12
#define N_TRIALS 20
#define LOAD_BEFORE_TERM 300 /* answers seen before SIGTERM is sent */

/* ---- the server process -------------------------------------------------- */

typedef struct {
  GPid pid;
  FILE *out;
  guint16 port;
} Server;

/* The server dies with the test: a failed test must not leave it
 * holding the test's stderr (and so the test runner) open. */
static void
die_with_parent (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

static void
server_start (Server *s, const char *drain_ms)
{
  const char *path = g_getenv ("WEFT_BENCH_SERVER");
  g_assert_nonnull (path);
  const char *argv[] = { path, "--port", "0", "--workers", "2", "--drain-ms", drain_ms, NULL };
  int out_fd = -1;
  GError *error = NULL;
  gboolean ok = g_spawn_async_with_pipes (NULL, (gchar **) argv, NULL,
                                          G_SPAWN_DO_NOT_REAP_CHILD, die_with_parent, NULL,
                                          &s->pid, NULL,
                                          &out_fd, NULL, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  s->out = fdopen (out_fd, "r");
  g_assert_nonnull (s->out);
  char line[256];
  g_assert_nonnull (fgets (line, sizeof line, s->out));
  const char *colon = strrchr (line, ':');
  g_assert_nonnull (colon);
  s->port = (guint16) g_ascii_strtoull (colon + 1, NULL, 10);
  g_assert_cmpuint (s->port, !=, 0);
}

/* After the stop signal: the server's last line, its exit status. */
static gchar *
server_wait (Server *s)
{
  GString *rest = g_string_new (NULL);
  char line[256];
  while (fgets (line, sizeof line, s->out) != NULL)
    g_string_append (rest, line);
  fclose (s->out);
  int status = 0;
  g_assert_cmpint (waitpid (s->pid, &status, 0), ==, s->pid);
  g_spawn_close_pid (s->pid);
  if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
    g_error ("bench-server ended with status 0x%x; it printed:\n%s", status, rest->str);
  return g_string_free (rest, FALSE);
}

/* ---- the clients ----------------------------------------------------------- */

typedef enum { OUTCOME_OK, OUTCOME_UNANSWERED, OUTCOME_FAILED } Outcome;

typedef struct {
  guint16 port;
  guint id;
  atomic_bool *term_sent;
  atomic_uint *total_ok;
  guint64 ok, unanswered, failed, ok_across_term;
  gchar *failure; /* the first failure, for the message */
} Client;

static void
client_fail (Client *c, const char *what)
{
  c->failed++;
  if (c->failure == NULL)
    c->failure = g_strdup_printf ("client %u: %s (errno %d: %s)", c->id, what, errno,
                                  g_strerror (errno));
}

/* Sends everything; FALSE if the connection broke. */
static gboolean
send_all (int fd, const void *data, gsize len)
{
  const char *p = data;
  while (len > 0)
    {
      ssize_t n = send (fd, p, len, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return FALSE;
      p += n;
      len -= (gsize) n;
    }
  return TRUE;
}

/* A buffered reader over the connection. */
typedef struct {
  int fd;
  GByteArray *buf;
  gboolean broken; /* EOF, reset or timeout seen */
  int error;       /* errno of the break, 0 for EOF */
} Reader;

static gboolean
fill (Reader *r)
{
  guint8 tmp[16384];
  for (;;)
    {
      ssize_t n = recv (r->fd, tmp, sizeof tmp, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        {
          r->broken = TRUE;
          r->error = n < 0 ? errno : 0;
          return FALSE;
        }
      g_byte_array_append (r->buf, tmp, (guint) n);
      return TRUE;
    }
}

/* Reads one answer and checks it against @want. Returns the outcome;
 * *said_close tells whether the server said it closes after it. */
static Outcome
read_answer (Client *c, Reader *r, const guint8 *want, gsize want_len, gboolean term_at_start,
             gboolean *said_close)
{
  gsize had = r->buf->len;
  const char *end;
  while (r->buf->len == 0 || (end = memmem (r->buf->data, r->buf->len, "\r\n\r\n", 4)) == NULL)
    if (!fill (r))
      goto broken;
  gsize head_len = (gsize) (end - (const char *) r->buf->data) + 4;
  gchar *head = g_strndup ((const char *) r->buf->data, head_len);
  gchar *down = g_ascii_strdown (head, -1);
  gboolean ok_status = g_str_has_prefix (head, "HTTP/1.1 200 ");
  const char *cl = strstr (down, "\r\ncontent-length:");
  *said_close = strstr (down, "\r\nconnection: close\r\n") != NULL;
  guint64 body_len = cl != NULL ? g_ascii_strtoull (cl + 17, NULL, 10) : G_MAXUINT64;
  g_free (down);
  if (!ok_status || body_len != want_len)
    {
      errno = 0;
      gchar *msg = g_strdup_printf ("unexpected answer head:\n%s", head);
      client_fail (c, msg);
      g_free (msg);
      g_free (head);
      return OUTCOME_FAILED;
    }
  g_free (head);
  while (r->buf->len < head_len + want_len)
    if (!fill (r))
      {
        had = 1; /* part of the answer came: cut off */
        goto broken;
      }
  if (memcmp (r->buf->data + head_len, want, want_len) != 0)
    {
      errno = 0;
      client_fail (c, "answer body differs");
      return OUTCOME_FAILED;
    }
  g_byte_array_remove_range (r->buf, 0, (guint) (head_len + want_len));
  return OUTCOME_OK;

broken:
  /* Closed before a byte of this answer, and SIGTERM was sent before the
   * connection broke: a request the server never took. */
  if (had == 0 && r->buf->len == 0 && atomic_load (c->term_sent))
    return OUTCOME_UNANSWERED;
  errno = r->error;
  client_fail (c, had != 0 || r->buf->len != 0 ? "answer cut off" : "closed before SIGTERM");
  (void) term_at_start;
  return OUTCOME_FAILED;
}

static void
count (Client *c, Outcome o, gboolean term_at_start)
{
  if (o == OUTCOME_OK)
    {
      c->ok++;
      atomic_fetch_add (c->total_ok, 1);
      if (!term_at_start && atomic_load (c->term_sent))
        c->ok_across_term++;
    }
  else if (o == OUTCOME_UNANSWERED)
    c->unanswered++;
}

static gpointer
client_thread (gpointer data)
{
  Client *c = data;
  GRand *rand = g_rand_new_with_seed (c->id * 7919u + 1);
  Reader r = { .fd = -1, .buf = g_byte_array_new () };
  static const guint8 hello[] = "Hello, World!";
  for (guint n = 0;; n++)
    {
      if (r.fd < 0)
        {
          gboolean term = atomic_load (c->term_sent);
          r.fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
          struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = g_htons (c->port),
                                    .sin_addr.s_addr = g_htonl (INADDR_LOOPBACK) };
          if (connect (r.fd, (struct sockaddr *) &sa, sizeof sa) != 0)
            {
              if (!term)
                client_fail (c, "connect before SIGTERM");
              break; /* refused after SIGTERM: the drain is on */
            }
          wt_set_timeouts (r.fd, 30000); /* a hang fails, never blocks CI */
          r.broken = FALSE;
          g_byte_array_set_size (r.buf, 0);
        }
      gboolean term_at_start = atomic_load (c->term_sent);
      guint kind = (n + c->id) % 4;
      gboolean said_close = FALSE;
      Outcome o;
      if (kind == 0 || kind == 1)
        {
          /* One GET, or two pipelined. */
          static const char get[] = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
          guint k = kind == 0 ? 1 : 2;
          gchar *reqs = g_strnfill (0, 0);
          for (guint i = 0; i < k; i++)
            {
              gchar *t = g_strconcat (reqs, get, NULL);
              g_free (reqs);
              reqs = t;
            }
          send_all (r.fd, reqs, strlen (reqs)); /* a break shows in the read */
          g_free (reqs);
          o = OUTCOME_OK;
          for (guint i = 0; i < k && o == OUTCOME_OK; i++)
            {
              o = read_answer (c, &r, hello, sizeof hello - 1, term_at_start, &said_close);
              count (c, o, term_at_start);
            }
        }
      else
        {
          /* A body of up to 256 KiB in 16 KiB pieces: with Content-Length
           * (POST) or chunked (PUT). */
          gsize len = 1 + g_rand_int_range (rand, 0, 256 * 1024);
          guint8 *body = g_malloc (len);
          for (gsize i = 0; i < len; i++)
            body[i] = (guint8) (i * 31 + n);
          gboolean chunked = kind == 3;
          gchar *head = chunked
              ? g_strdup ("PUT /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
              : g_strdup_printf ("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n",
                                 len);
          gboolean sent = send_all (r.fd, head, strlen (head));
          g_free (head);
          for (gsize off = 0; sent && off < len; off += 16384)
            {
              gsize piece = MIN (16384, len - off);
              if (chunked)
                {
                  gchar *size = g_strdup_printf ("%zx\r\n", piece);
                  sent = send_all (r.fd, size, strlen (size));
                  g_free (size);
                }
              sent = sent && send_all (r.fd, body + off, piece);
              if (chunked)
                sent = sent && send_all (r.fd, "\r\n", 2);
            }
          if (sent && chunked)
            send_all (r.fd, "0\r\n\r\n", 5);
          o = read_answer (c, &r, body, len, term_at_start, &said_close);
          count (c, o, term_at_start);
          g_free (body);
        }
      if (o == OUTCOME_FAILED)
        break;
      if (o == OUTCOME_UNANSWERED || said_close)
        {
          close (r.fd);
          r.fd = -1;
        }
    }
  if (r.fd >= 0)
    close (r.fd);
  g_byte_array_unref (r.buf);
  g_rand_free (rand);
  return NULL;
}

/* ---- /drain/sigterm-under-load ---------------------------------------- */

/* One trial; returns the answers that crossed the signal (begun before,
 * whole after). */
static guint64
drain_trial (guint trial)
{
  Server s;
  server_start (&s, "5000");
  atomic_bool term_sent = FALSE;
  atomic_uint total_ok = 0;
  Client clients[N_CLIENTS];
  GThread *threads[N_CLIENTS];
  for (guint i = 0; i < N_CLIENTS; i++)
    {
      clients[i] = (Client) { .port = s.port, .id = trial * N_CLIENTS + i,
                              .term_sent = &term_sent, .total_ok = &total_ok };
      threads[i] = g_thread_new ("client", client_thread, &clients[i]);
    }
  WT_WAIT_UNTIL (atomic_load (&total_ok) >= LOAD_BEFORE_TERM);
  g_assert_cmpuint (atomic_load (&total_ok), >=, LOAD_BEFORE_TERM);
  atomic_store (&term_sent, TRUE);
  g_assert_cmpint (kill (s.pid, SIGTERM), ==, 0);
  gchar *said = server_wait (&s);

  guint64 ok = 0, unanswered = 0, failed = 0, across = 0;
  for (guint i = 0; i < N_CLIENTS; i++)
    {
      g_thread_join (threads[i]);
      ok += clients[i].ok;
      unanswered += clients[i].unanswered;
      failed += clients[i].failed;
      across += clients[i].ok_across_term;
      if (clients[i].failure != NULL)
        g_test_message ("trial %u: %s", trial, clients[i].failure);
    }
  g_test_message ("trial %u: ok %" G_GUINT64_FORMAT ", unanswered %" G_GUINT64_FORMAT
                  ", failed %" G_GUINT64_FORMAT ", in flight at SIGTERM %" G_GUINT64_FORMAT
                  "; server: %s", trial, ok, unanswered, failed, across, g_strchomp (said));
  for (guint i = 0; i < N_CLIENTS; i++)
    if (clients[i].failure != NULL)
      g_error ("trial %u: %s", trial, clients[i].failure);
  g_assert_cmpuint (failed, ==, 0);
  guint64 dispatched = 0;
  char verdict[32] = "";
  if (sscanf (said, "bench-server: stopped: %" G_GUINT64_FORMAT " requests, %31[a-z ]",
              &dispatched, verdict) != 2)
    g_error ("trial %u: unexpected last words: %s", trial, said);
  g_assert_cmpstr (verdict, ==, "all finished");
  /* Every request the server took reached its client whole. */
  g_assert_cmpuint (ok, ==, dispatched);
  g_free (said);
  return across;
}

static void
test_sigterm_under_load (void)
{
  guint64 across = 0;
  for (guint t = 0; t < N_TRIALS; t++)
    across += drain_trial (t);
  /* The trials did catch requests in flight (else they proved little). */
  g_assert_cmpuint (across, >, 0);
}

/* ---- in process, through the API ------------------------------------- */

/* Requests held by their handler until the test answers them. */
typedef struct {
  pthread_mutex_t lock;
  WeftHttpRequest *held[8]; /* HOLDS: lock */
  guint n_held;             /* HOLDS: lock */
  atomic_size_t body_seen;  /* /upload: body bytes delivered so far */
  atomic_int done;          /* shutdown: 1 drained, 2 cut off */
  atomic_int reader_notified; /* /late-reader: its body reader's notify ran */
} Api;

static void
hold (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  Api *api = user_data;
  pthread_mutex_lock (&api->lock);
  g_assert_cmpuint (api->n_held, <, G_N_ELEMENTS (api->held));
  api->held[api->n_held++] = weft_http_request_ref (request);
  pthread_mutex_unlock (&api->lock);
}

static guint
n_held (Api *api)
{
  pthread_mutex_lock (&api->lock);
  guint n = api->n_held;
  pthread_mutex_unlock (&api->lock);
  return n;
}

static void
hello (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_respond (request, 200, "text/plain", (const guint8 *) "Hello, World!", 13);
}

static void
upload_piece (WeftHttpRequest *req, const guint8 *data, gsize len, gboolean done,
              gpointer user_data)
{
  Api *api = user_data;
  gsize total = atomic_fetch_add (&api->body_seen, len) + len;
  if (done)
    {
      gchar *text = g_strdup_printf ("%zu", total);
      weft_http_request_respond (req, 200, "text/plain", (const guint8 *) text, strlen (text));
      g_free (text);
    }
}

/* Streamed body: the handler runs once the head is in, so the test knows
 * when the request has begun on the server. */
static void
upload (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_read_body (request, upload_piece, user_data, NULL);
}

static void
count_piece (WeftHttpRequest *req, const guint8 *data, gsize len, gboolean done,
             gpointer user_data)
{
  Api *api = user_data;
  atomic_fetch_add (&api->body_seen, len);
}

/* Streamed body, answered at once with a finished stream: the answer is
 * out before the body ends. */
static void
early (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_read_body (request, count_piece, user_data, NULL);
  weft_http_request_respond_stream (request, 200, "text/plain", NULL, NULL, NULL);
  weft_http_request_write (request, (const guint8 *) "early", 5);
  weft_http_request_finish (request);
}

static void
reader_gone (gpointer data)
{
  Api *api = data;
  atomic_store (&api->reader_notified, 1);
}

/* A coroutine handler that waits before it asks for its body, then waits
 * for the body's end or its reader's notify. */
static void
late_reader (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  Api *api = user_data;
  weft_coro_sleep (100);
  weft_http_request_read_body (request, count_piece, api, reader_gone);
  while (!atomic_load (&api->reader_notified))
    weft_coro_sleep (10);
}

static void
on_done (WeftListener *listener, gboolean drained, gpointer user_data)
{
  Api *api = user_data;
  atomic_store (&api->done, drained ? 1 : 2);
}

typedef struct {
  WeftEngine *engine;
  WeftHttpServer *server;
  guint16 port;
  Api api;
} Inproc;

static void
inproc_start (Inproc *t)
{
  memset (&t->api, 0, sizeof t->api);
  pthread_mutex_init (&t->api.lock, NULL);
  t->engine = wt_engine_new (2);
  t->server = weft_http_server_new (t->engine);
  weft_http_server_add_handler (t->server, "GET", "/", hello, NULL, NULL);
  weft_http_server_add_handler (t->server, "GET", "/hold", hold, &t->api, NULL);
  weft_http_server_add_handler_full (t->server, "POST", "/upload", WEFT_HTTP_HANDLER_STREAM_BODY,
                                     upload, &t->api, NULL);
  weft_http_server_add_handler_full (t->server, "POST", "/early", WEFT_HTTP_HANDLER_STREAM_BODY,
                                     early, &t->api, NULL);
  weft_http_server_add_handler_full (t->server, "POST", "/late-reader",
                                     WEFT_HTTP_HANDLER_STREAM_BODY | WEFT_HTTP_HANDLER_COROUTINE,
                                     late_reader, &t->api, NULL);
  WeftListener *listener = weft_http_server_get_listener (t->server);
  GError *error = NULL;
  g_assert_true (weft_listener_add_tcp (listener, "127.0.0.1", 0, &error));
  g_assert_true (weft_http_server_start (t->server, &error));
  g_assert_no_error (error);
  t->port = weft_listener_get_port (listener, 0);
}

static void
inproc_stop (Inproc *t)
{
  for (guint i = 0; i < t->api.n_held; i++)
    weft_http_request_unref (t->api.held[i]);
  weft_http_server_unref (t->server);
  weft_engine_unref (t->engine);
  pthread_mutex_destroy (&t->api.lock);
}

/* Splits @all into HTTP/1.1 answers with a Content-Length; returns how
 * many, and whether the last said "Connection: close". */
static guint
count_answers (GByteArray *all, const char *want_body, gboolean *last_close)
{
  guint n = 0;
  gsize off = 0;
  g_byte_array_append (all, (const guint8 *) "", 1);
  while (off + 1 < all->len)
    {
      const char *head = (const char *) all->data + off;
      const char *end = strstr (head, "\r\n\r\n");
      g_assert_nonnull (end);
      g_assert_true (g_str_has_prefix (head, "HTTP/1.1 200 "));
      gchar *h = g_ascii_strdown (head, end - head + 2);
      const char *cl = strstr (h, "\r\ncontent-length:");
      g_assert_nonnull (cl);
      gsize len = (gsize) g_ascii_strtoull (cl + 17, NULL, 10);
      *last_close = strstr (h, "\r\nconnection: close\r\n") != NULL;
      g_free (h);
      g_assert_cmpmem (end + 4, len, want_body, strlen (want_body));
      off = (gsize) (end + 4 - (const char *) all->data) + len;
      n++;
    }
  return n;
}

/* /drain/finishes-begun-body: a request whose body is half sent when the
 * shutdown comes is read to its end and answered (with "Connection:
 * close"); the drain then ends, drained. */
static void
test_finishes_begun_body (void)
{
  Inproc t;
  inproc_start (&t);
  int fd = wt_connect_tcp (t.port);
  wt_send_str (fd, "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n");
  char part[1000];
  memset (part, 'x', sizeof part);
  wt_send_all (fd, part, sizeof part);
  WT_WAIT_UNTIL (atomic_load (&t.api.body_seen) == sizeof part);
  g_assert_cmpuint (atomic_load (&t.api.body_seen), ==, sizeof part);

  weft_http_server_shutdown (t.server, 10000, on_done, &t.api, NULL);
  for (guint i = 0; i < 4; i++)
    wt_send_all (fd, part, sizeof part);
  GByteArray *all = wt_recv_to_eof (fd, FALSE, NULL);
  gboolean last_close = FALSE;
  g_assert_cmpuint (count_answers (all, "5000", &last_close), ==, 1);
  g_assert_true (last_close);
  g_byte_array_unref (all);
  WT_WAIT_UNTIL (atomic_load (&t.api.done) != 0);
  g_assert_cmpint (atomic_load (&t.api.done), ==, 1);
  close (fd);
  inproc_stop (&t);
}

/* /drain/pipelined-all-answered: three pipelined requests taken before
 * the shutdown are all answered, in order, the last with "Connection:
 * close", even though their handlers answer after the shutdown began. An
 * idle keep-alive connection beside them closes at once: its end comes
 * while they are still unanswered, so the drain has not ended. */
static void
test_pipelined_all_answered (void)
{
  Inproc t;
  inproc_start (&t);
  int idle = wt_connect_tcp (t.port);
  wt_send_str (idle, "GET / HTTP/1.1\r\nHost: t\r\n\r\n");
  char buf[512];
  g_assert_cmpint (recv (idle, buf, sizeof buf, 0), >, 0);
  int fd = wt_connect_tcp (t.port);
  wt_send_str (fd, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n"
                   "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n"
                   "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
  WT_WAIT_UNTIL (n_held (&t.api) == 3);
  g_assert_cmpuint (n_held (&t.api), ==, 3);
  weft_http_server_shutdown (t.server, 10000, on_done, &t.api, NULL);
  GByteArray *rest = wt_recv_to_eof (idle, FALSE, NULL);
  g_assert_cmpuint (rest->len, ==, 0);
  g_byte_array_unref (rest);
  g_assert_cmpint (atomic_load (&t.api.done), ==, 0);
  for (guint i = 0; i < 3; i++)
    weft_http_request_respond (t.api.held[i], 200, "text/plain", (const guint8 *) "held", 4);
  GByteArray *all = wt_recv_to_eof (fd, FALSE, NULL);
  gboolean last_close = FALSE;
  g_assert_cmpuint (count_answers (all, "held", &last_close), ==, 3);
  g_assert_true (last_close);
  g_byte_array_unref (all);
  WT_WAIT_UNTIL (atomic_load (&t.api.done) != 0);
  g_assert_cmpint (atomic_load (&t.api.done), ==, 1);
  close (idle);
  close (fd);
  inproc_stop (&t);
}

/* /drain/deadline-cuts-off: a request its handler never answers holds the
 * drain until the deadline, which closes it unanswered and reports "not
 * drained". An answer given after that is harmless. */
static void
test_deadline_cuts_off (void)
{
  Inproc t;
  inproc_start (&t);
  int stuck = wt_connect_tcp (t.port);
  wt_send_str (stuck, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
  WT_WAIT_UNTIL (n_held (&t.api) == 1);
  g_assert_cmpuint (n_held (&t.api), ==, 1);

  weft_http_server_shutdown (t.server, 300, on_done, &t.api, NULL);
  GByteArray *rest = wt_recv_to_eof (stuck, TRUE, NULL);
  g_assert_cmpuint (rest->len, ==, 0);
  g_byte_array_unref (rest);
  WT_WAIT_UNTIL (atomic_load (&t.api.done) != 0);
  g_assert_cmpint (atomic_load (&t.api.done), ==, 2);
  weft_http_request_respond (t.api.held[0], 200, "text/plain", (const guint8 *) "late", 4);
  close (stuck);
  inproc_stop (&t);
}

/* Reads until the end of a chunked answer. */
static void
read_chunked_answer (int fd)
{
  GString *in = g_string_new (NULL);
  char buf[4096];
  while (strstr (in->str, "\r\n0\r\n\r\n") == NULL)
    {
      ssize_t n = recv (fd, buf, sizeof buf, 0);
      g_assert_cmpint (n, >, 0);
      g_string_append_len (in, buf, n);
    }
  g_assert_true (g_str_has_prefix (in->str, "HTTP/1.1 200 "));
  g_string_free (in, TRUE);
}

/* Sends half a body to /early (whose answer goes out at once), reads the
 * answer, calls @between (if any), then sends the rest: every piece
 * reaches the body reader even though the answer has ended (finishing it
 * once dropped the reader), and the body's end closes the connection (it
 * was the last request) without freeing anything under the reader (it
 * once did: ASan). */
static void
early_answer_then_body_end (Inproc *t, const char *extra_header, void (*between) (Inproc *))
{
  int fd = wt_connect_tcp (t->port);
  gchar *head = g_strdup_printf ("POST /early HTTP/1.1\r\nHost: t\r\n%s"
                                 "Content-Length: 10\r\n\r\n12345", extra_header);
  wt_send_str (fd, head);
  g_free (head);
  read_chunked_answer (fd);
  WT_WAIT_UNTIL (atomic_load (&t->api.body_seen) == 5);
  g_assert_cmpuint (atomic_load (&t->api.body_seen), ==, 5);
  if (between != NULL)
    between (t);
  wt_send_str (fd, "67890");
  GByteArray *rest = wt_recv_to_eof (fd, TRUE, NULL);
  g_assert_cmpuint (rest->len, ==, 0);
  g_byte_array_unref (rest);
  /* The answer's end did not end the reading: the reader got it all. */
  WT_WAIT_UNTIL (atomic_load (&t->api.body_seen) == 10);
  g_assert_cmpuint (atomic_load (&t->api.body_seen), ==, 10);
  close (fd);
}

static void
shut_down (Inproc *t)
{
  weft_http_server_shutdown (t->server, 10000, on_done, &t->api, NULL);
}

/* /drain/answered-before-body-ends: the shutdown comes while a body is
 * half sent and its answer is already out; the rest of the body ends the
 * request, and the connection closes, drained. */
static void
test_answered_before_body_ends (void)
{
  Inproc t;
  inproc_start (&t);
  early_answer_then_body_end (&t, "", shut_down);
  WT_WAIT_UNTIL (atomic_load (&t.api.done) != 0);
  g_assert_cmpint (atomic_load (&t.api.done), ==, 1);
  inproc_stop (&t);
}

/* /drain/last-answer-before-body-ends: the same without a shutdown, on a
 * request that is the connection's last ("Connection: close"). */
static void
test_last_answer_before_body_ends (void)
{
  Inproc t;
  inproc_start (&t);
  early_answer_then_body_end (&t, "Connection: close\r\n", NULL);
  WT_WAIT_UNTIL (weft_listener_get_n_connections (weft_http_server_get_listener (t.server)) == 0);
  g_assert_cmpuint (weft_listener_get_n_connections (weft_http_server_get_listener (t.server)),
                    ==, 0);
  inproc_stop (&t);
}

/* /drain/stray-empty-line: an empty line after a request (RFC 9112 2.2
 * lets clients send one) begins no request: the drain closes the
 * connection at once, with no 408, drained. */
static void
test_stray_empty_line (void)
{
  Inproc t;
  inproc_start (&t);
  int fd = wt_connect_tcp (t.port);
  wt_send_str (fd, "GET / HTTP/1.1\r\nHost: t\r\n\r\n\r\n");
  char buf[512];
  g_assert_cmpint (recv (fd, buf, sizeof buf, 0), >, 0);
  /* The header timeout (20 s) is past the deadline: a drain waiting for a
   * request that never comes is cut off instead of drained. */
  weft_http_server_shutdown (t.server, 5000, on_done, &t.api, NULL);
  GByteArray *rest = wt_recv_to_eof (fd, TRUE, NULL);
  g_assert_cmpuint (rest->len, ==, 0);
  g_byte_array_unref (rest);
  WT_WAIT_UNTIL (atomic_load (&t.api.done) != 0);
  g_assert_cmpint (atomic_load (&t.api.done), ==, 1);
  close (fd);
  inproc_stop (&t);
}

/* /drain/late-reader-told: a request cut off by the client's half-close
 * (its head in, no body) behind one still unanswered leaves the line; a
 * coroutine handler that asks for its body only then gets its reader's
 * notify at once (it waited for ever before). */
static void
test_late_reader_told (void)
{
  Inproc t;
  inproc_start (&t);
  int fd = wt_connect_tcp (t.port);
  wt_send_str (fd, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n"
                   "POST /late-reader HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n");
  WT_WAIT_UNTIL (n_held (&t.api) == 1);
  g_assert_cmpuint (n_held (&t.api), ==, 1);
  shutdown (fd, SHUT_WR);
  WT_WAIT_UNTIL (atomic_load (&t.api.reader_notified) != 0);
  g_assert_cmpint (atomic_load (&t.api.reader_notified), ==, 1);
  /* The earlier request is still answered. */
  weft_http_request_respond (t.api.held[0], 200, "text/plain", (const guint8 *) "held", 4);
  GByteArray *all = wt_recv_to_eof (fd, FALSE, NULL);
  gboolean last_close = FALSE;
  g_assert_cmpuint (count_answers (all, "held", &last_close), ==, 1);
  g_byte_array_unref (all);
  close (fd);
  inproc_stop (&t);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  signal (SIGPIPE, SIG_IGN);
  g_test_add_func ("/drain/sigterm-under-load", test_sigterm_under_load);
  g_test_add_func ("/drain/finishes-begun-body", test_finishes_begun_body);
  g_test_add_func ("/drain/pipelined-all-answered", test_pipelined_all_answered);
  g_test_add_func ("/drain/deadline-cuts-off", test_deadline_cuts_off);
  g_test_add_func ("/drain/answered-before-body-ends", test_answered_before_body_ends);
  g_test_add_func ("/drain/last-answer-before-body-ends", test_last_answer_before_body_ends);
  g_test_add_func ("/drain/stray-empty-line", test_stray_empty_line);
  g_test_add_func ("/drain/late-reader-told", test_late_reader_told);
  return g_test_run ();
}
