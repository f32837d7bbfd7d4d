/* test-faults.c: a live WeftHttpServer on 127.0.0.1 under load, faults and
 * hostile clients: 10,000 keep-alive connections at once, resets at every
 * stage of an exchange, slow and non-reading clients, a deep pipeline then
 * a half-close, descriptor and stack exhaustion. Each path checks that only the faulty connection goes (the
 * server's connection counts come back), and, where it matters, that a
 * client on another connection (the watcher, a thread of its own) is
 * answered throughout, without a single failure.
 *
 * The client side of /faults/keepalive-10k is this program run again as a
 * helper (--keepalive-client): 10,000 client and 10,000 server descriptors
 * do not fit under one process's RLIMIT_NOFILE.
 *
 * It links the static copy of the library to look at what the public API
 * does not show: the server's set of live connections, a connection's
 * write queue, the stack size of coroutine handlers.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-net-util.h"
#include "weft-http-private.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <glib/gstdio.h>

#define BIG_SIZE (8 * 1024 * 1024)        /* /big's body */
#define COPY_SIZE (1024 * 1024)           /* /copy's body, copied into each answer */
#define STREAM_PIECE (64 * 1024)          /* what /stream's producer writes per call */
#define STREAM_CAP ((guint64) 256 << 20)  /* /stream ends there: a broken bound must not eat the machine */
#define HIGH_WATER (1024 * 1024)          /* a connection's default high water mark */
#define ROUNDS 5

/* /big's body: a pattern, not periodic in 64 KiB. */
static GBytes *big_body;

/* If @buf holds a whole answer delimited by Content-Length: its length;
 * 0 while more is needed; -1 if it cannot be one. */
static gssize
answer_length (const char *buf, gsize len)
{
  if (len == 0)
    return 0;
  const char *end = g_strstr_len (buf, (gssize) len, "\r\n\r\n");
  if (end == NULL)
    return len >= 8192 ? -1 : 0;
  gsize head = (gsize) (end - buf) + 4;
  const char *cl = g_strstr_len (buf, (gssize) head, "\r\nContent-Length: ");
  if (cl == NULL)
    return -1;
  guint64 body = g_ascii_strtoull (cl + 18, NULL, 10);
  return len >= head + body ? (gssize) (head + body) : 0;
}

/* A blocking client socket like wt_connect_tcp()'s that fails with -1
 * instead of asserting (for threads and helpers). */
static int
connect_quiet (guint16 port)
{
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (port),
                            .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
  if (connect (fd, (struct sockaddr *) &sa, sizeof sa) != 0)
    {
      int err = errno;
      close (fd);
      errno = err;
      return -1;
    }
  wt_set_timeouts (fd, WT_DEADLINE_US / 1000);
  return fd;
}

static void
reset_close (int fd)
{
  /* Linger on, time 0: close() sends a reset instead of a FIN. */
  struct linger lg = { .l_onoff = 1, .l_linger = 0 };
  g_assert_cmpint (setsockopt (fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), ==, 0);
  wt_close (fd);
}

/* Reads one answer (Content-Length delimited) on a blocking socket. */
static gchar *
recv_answer (int fd)
{
  GByteArray *got = g_byte_array_new ();
  char buf[4096];
  gssize total;
  while ((total = answer_length ((const char *) got->data, got->len)) == 0)
    {
      ssize_t n = recv (fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      g_byte_array_append (got, (const guint8 *) buf, (guint) n);
    }
  g_byte_array_append (got, (const guint8 *) "", 1);
  return (gchar *) g_byte_array_free (got, FALSE);
}

static void
expect_answer (int fd, const char *request, const char *status_line, const char *body)
{
  wt_send_str (fd, request);
  gchar *got = recv_answer (fd);
  if (!g_str_has_prefix (got, status_line) || (body != NULL && !g_str_has_suffix (got, body)))
    g_error ("%s: expected %s ... %s, got:\n%s", request, status_line, body ? body : "", got);
  g_free (got);
}

/* ---- the server ---------------------------------------------------------- */

/* What the handlers saw: written on connections' contexts (and the /late
 * threads), read by the test thread. */
typedef struct {
  atomic_int echo_calls;
  atomic_int upload_bytes;
  atomic_int upload_notified;
  atomic_int copy_calls;
  atomic_int stream_notified;
  atomic_int late_started;
  atomic_int late_answered;
  atomic_int coro_ran;
  _Atomic guint64 stream_bytes;
  _Atomic guint64 max_queued;   /* the most output a connection held, seen by /copy and /stream */
} Stats;

typedef struct {
  WeftEngine *engine;
  WeftHttpServer *server;
  WeftListener *listener;
  guint16 port;
  Stats st;
} Srv;

static void
on_hello (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  static const char body[] = "Hello, World!";
  weft_http_request_respond (request, 200, "text/plain", (const guint8 *) body, sizeof body - 1);
}

/* "id=<id> r=<r>": an answer each connection of /faults/keepalive-10k can
 * tell from the others'. */
static void
on_key (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  const char *r = weft_http_request_get_query_param (request, "r");
  gchar *text = g_strdup_printf ("id=%s r=%s", weft_http_request_get_param (request, "id"),
                                 r != NULL ? r : "-");
  weft_http_request_respond (request, 200, "text/plain", (const guint8 *) text, strlen (text));
  g_free (text);
}

static void
on_echo (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  Stats *st = user_data;
  atomic_fetch_add (&st->echo_calls, 1);
  weft_http_request_respond_bytes (request, 200, "application/octet-stream",
                                   weft_http_request_get_body (request));
}

/* /upload streams its body (WEFT_HTTP_HANDLER_STREAM_BODY). */
typedef struct {
  Stats *st;
  gsize len;
} Upload;

static void
upload_piece (WeftHttpRequest *request, const guint8 *data, gsize len, gboolean done,
              gpointer user_data)
{
  Upload *u = user_data;
  u->len += len;
  atomic_fetch_add (&u->st->upload_bytes, (int) len);
  if (done)
    {
      gchar *text = g_strdup_printf ("%" G_GSIZE_FORMAT, u->len);
      weft_http_request_respond (request, 200, "text/plain", (const guint8 *) text,
                                 strlen (text));
      g_free (text);
    }
}

static void
upload_free (gpointer data)
{
  Upload *u = data;
  atomic_fetch_add (&u->st->upload_notified, 1);
  g_free (u);
}

static void
on_upload (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  Upload *u = g_new0 (Upload, 1);
  u->st = user_data;
  weft_http_request_read_body (request, upload_piece, u, upload_free);
}

static void
on_big (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_respond_bytes (request, 200, "application/octet-stream", big_body);
}

/* On the connection's context: how much output its connection holds. */
static void
note_queued (Stats *st, WeftHttpRequest *request)
{
  guint64 q = weft_connection_get_write_queued (request->hc->conn);
  guint64 cur = atomic_load (&st->max_queued);
  while (q > cur && !atomic_compare_exchange_weak (&st->max_queued, &cur, q))
    ;
}

/* A 1 MiB answer copied into the answer's own buffer, as a handler that
 * builds its body (a JSON document, a page) would. */
static void
on_copy (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  Stats *st = user_data;
  atomic_fetch_add (&st->copy_calls, 1);
  /* Answered inside the handler: queued at once. */
  weft_http_request_ref (request);
  weft_http_request_respond (request, 200, "application/octet-stream",
                             g_bytes_get_data (big_body, NULL), COPY_SIZE);
  note_queued (st, request);
  weft_http_request_unref (request);
}

/* /stream: an answer that never ends, written by a producer (called when
 * the connection has room). */
static gboolean
produce (WeftHttpRequest *request, gpointer user_data)
{
  Stats *st = user_data;
  if (atomic_load (&st->stream_bytes) >= STREAM_CAP)
    {
      weft_http_request_finish (request);
      return FALSE;
    }
  weft_http_request_write (request, g_bytes_get_data (big_body, NULL), STREAM_PIECE);
  atomic_fetch_add (&st->stream_bytes, STREAM_PIECE);
  note_queued (st, request);
  return TRUE;
}

static void
stream_done (gpointer data)
{
  Stats *st = data;
  atomic_fetch_add (&st->stream_notified, 1);
}

static void
on_stream (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_respond_stream (request, 200, "application/octet-stream", produce, user_data,
                                    stream_done);
}

/* /late: answered 20 ms later from a thread of its own. */
typedef struct {
  WeftHttpRequest *request;
  Stats *st;
} Late;

static gpointer
late_thread (gpointer data)
{
  Late *l = data;
  g_usleep (20000);
  weft_http_request_respond (l->request, 200, "text/plain", (const guint8 *) "late", 4);
  weft_http_request_unref (l->request);
  atomic_fetch_add (&l->st->late_answered, 1);
  g_free (l);
  return NULL;
}

static void
on_late (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  Late *l = g_new (Late, 1);
  atomic_fetch_add (&((Stats *) user_data)->late_started, 1);
  l->request = weft_http_request_ref (request);
  l->st = user_data;
  g_thread_unref (g_thread_new ("late", late_thread, l));
}

/* /coro: a coroutine handler that waits a little before answering. */
static void
on_coro (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  Stats *st = user_data;
  atomic_fetch_add (&st->coro_ran, 1);
  weft_coro_sleep (10);
  weft_http_request_respond (request, 200, "text/plain", (const guint8 *) "coro", 4);
}

typedef void (*Configure) (WeftHttpServer *server, gpointer data);

static void
srv_start_full (Srv *s, Configure configure, gpointer data)
{
  GError *error = NULL;
  memset (s, 0, sizeof *s);
  s->engine = wt_engine_new (2);
  s->server = weft_http_server_new (s->engine);
  WeftHttpServer *h = s->server;
  Stats *st = &s->st;
  weft_http_server_add_handler (h, "GET", "/hello", on_hello, NULL, NULL);
  weft_http_server_add_handler (h, "GET", "/k/{id}", on_key, NULL, NULL);
  weft_http_server_add_handler (h, "POST", "/echo", on_echo, st, NULL);
  weft_http_server_add_handler_full (h, "POST", "/upload", WEFT_HTTP_HANDLER_STREAM_BODY,
                                     on_upload, st, NULL);
  weft_http_server_add_handler (h, "GET", "/big", on_big, NULL, NULL);
  weft_http_server_add_handler (h, "GET", "/copy", on_copy, st, NULL);
  weft_http_server_add_handler (h, "GET", "/stream", on_stream, st, NULL);
  weft_http_server_add_handler (h, "GET", "/late", on_late, st, NULL);
  weft_http_server_add_handler_full (h, "GET", "/coro", WEFT_HTTP_HANDLER_COROUTINE, on_coro,
                                     st, NULL);
  if (configure != NULL)
    configure (h, data);
  s->listener = weft_http_server_get_listener (h);
  g_assert_true (weft_listener_add_tcp (s->listener, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  s->port = weft_listener_get_port (s->listener, 0);
  g_assert_true (weft_http_server_start (h, &error));
  g_assert_no_error (error);
}

static void
srv_start (Srv *s)
{
  srv_start_full (s, NULL, NULL);
}

static void
srv_stop (Srv *s)
{
  weft_http_server_unref (s->server);
  weft_engine_unref (s->engine);
}

/* The connections the server still holds state for. */
static guint
srv_live (Srv *s)
{
  return weft__http_server_n_live (s->server);
}

static guint
srv_conns (Srv *s)
{
  return weft_listener_get_n_connections (s->listener);
}

/* Both counts, the listener's and the server's, come to @n. */
static void
wait_connections (Srv *s, guint n)
{
  WT_WAIT_UNTIL (srv_conns (s) == n && srv_live (s) == n);
  g_assert_cmpuint (srv_conns (s), ==, n);
  g_assert_cmpuint (srv_live (s), ==, n);
}

/* ---- the watcher: a keep-alive client on a thread of its own ---------- */

typedef struct {
  guint16 port;
  pthread_t thread;
  atomic_int stop;
  atomic_int pause;         /* asked to send nothing for a while */
  atomic_int parked;        /* it is sending nothing */
  atomic_int ok;            /* 200s with the right body */
  atomic_int failed;
  pthread_mutex_t lock;
  char error[256];          /* HOLDS: lock; the first failure */
} Watcher;

static void
watcher_fail (Watcher *w, const char *what, int err)
{
  pthread_mutex_lock (&w->lock);
  if (w->error[0] == '\0')
    g_snprintf (w->error, sizeof w->error, "%s after %d answers (%s)", what,
                atomic_load (&w->ok), err != 0 ? g_strerror (err) : "no errno");
  pthread_mutex_unlock (&w->lock);
  atomic_fetch_add (&w->failed, 1);
}

/* One request and its answer; NULL if all was well, else what failed. */
static const char *
watcher_exchange (int fd, int *err)
{
  static const char req[] = "GET /hello HTTP/1.1\r\nHost: watcher\r\n\r\n";
  static const char body[] = "Hello, World!";
  char buf[1024];
  gsize len = 0;
  gssize total;
  *err = 0;
  if (send (fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t) (sizeof req - 1))
    {
      *err = errno;
      return "send";
    }
  while ((total = answer_length (buf, len)) == 0)
    {
      if (len == sizeof buf)
        return "answer too long";
      ssize_t n = recv (fd, buf + len, sizeof buf - len, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          *err = errno;
          return "recv";
        }
      if (n == 0)
        return "closed by the server";
      len += (gsize) n;
    }
  if (total < 0 || (gsize) total != len || len < sizeof "HTTP/1.1 200 OK\r\n" ||
      memcmp (buf, "HTTP/1.1 200 OK\r\n", 17) != 0 ||
      memcmp (buf + len - (sizeof body - 1), body, sizeof body - 1) != 0)
    return "wrong answer";
  return NULL;
}

static void *
watcher_main (void *data)
{
  Watcher *w = data;
  int fd = -1;
  while (!atomic_load (&w->stop))
    {
      if (atomic_load (&w->pause))
        {
          atomic_store (&w->parked, 1);
          g_usleep (1000);
          continue;
        }
      atomic_store (&w->parked, 0);
      if (fd < 0 && (fd = connect_quiet (w->port)) < 0)
        {
          watcher_fail (w, "connect", errno);
          g_usleep (10000);
          continue;
        }
      int err;
      const char *what = watcher_exchange (fd, &err);
      if (what != NULL)
        {
          watcher_fail (w, what, err);
          close (fd);
          fd = -1;
          g_usleep (10000);
          continue;
        }
      atomic_fetch_add (&w->ok, 1);
      g_usleep (1000); /* a steady client, not a load generator */
    }
  if (fd >= 0)
    close (fd);
  return NULL;
}

static void
watcher_start (Watcher *w, guint16 port)
{
  memset (w, 0, sizeof *w);
  w->port = port;
  pthread_mutex_init (&w->lock, NULL);
  g_assert_cmpint (pthread_create (&w->thread, NULL, watcher_main, w), ==, 0);
  WT_WAIT_UNTIL (atomic_load (&w->ok) > 0 || atomic_load (&w->failed) > 0);
  g_assert_cmpint (atomic_load (&w->ok), >, 0);
}

static void
watcher_assert_no_failure (Watcher *w)
{
  if (atomic_load (&w->failed) != 0)
    {
      pthread_mutex_lock (&w->lock);
      g_error ("the watcher failed %d times; first: %s", atomic_load (&w->failed), w->error);
      pthread_mutex_unlock (&w->lock);
    }
}

/* The watcher is answered from now on: a few more 200s, no failure. */
static void
watcher_expect_progress (Watcher *w)
{
  int before = atomic_load (&w->ok);
  WT_WAIT_UNTIL (atomic_load (&w->ok) >= before + 3 || atomic_load (&w->failed) > 0);
  watcher_assert_no_failure (w);
  g_assert_cmpint (atomic_load (&w->ok), >=, before + 3);
}

static void
watcher_stop (Watcher *w)
{
  atomic_store (&w->stop, 1);
  pthread_join (w->thread, NULL);
  watcher_assert_no_failure (w);
  g_test_message ("the watcher had %d answers", atomic_load (&w->ok));
  pthread_mutex_destroy (&w->lock);
}

/* ---- /faults/keepalive-10k --------------------------------------------- */

#define KA_CONNECTIONS 10000
#define KA_INFLIGHT 512     /* connects and first requests at once: well within the accept backlog */
#define KA_GUARD_US (240 * G_USEC_PER_SEC) /* against a hang only; a run takes seconds */

typedef struct {
  int fd;
  guint8 state;
  guint16 len;
  char buf[232];
} KaConn;

enum { KA_CONNECTING = 1, KA_WAIT1, KA_IDLE, KA_WAIT2, KA_DONE };

static int
ka_fail (guint i, const KaConn *c, const char *what, int err)
{
  fprintf (stderr, "keepalive client: connection %u (state %u): %s (%s); it got %u bytes: %.*s\n",
           i, c->state, what, err != 0 ? strerror (err) : "no errno", c->len, (int) c->len,
           c->buf);
  return -1;
}

static void
ka_interest (int ep, guint i, KaConn *c, guint32 events)
{
  struct epoll_event ev = { .events = events, .data.u32 = i };
  epoll_ctl (ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Sends request @round (1 or 2) of connection @i. */
static int
ka_send (int ep, guint i, KaConn *c, guint round)
{
  char req[96];
  int n = g_snprintf (req, sizeof req, "GET /k/%u?r=%u HTTP/1.1\r\nHost: a\r\n\r\n", i, round);
  if (send (c->fd, req, (size_t) n, MSG_NOSIGNAL) != n)
    return ka_fail (i, c, "send", errno);
  c->state = round == 1 ? KA_WAIT1 : KA_WAIT2;
  c->len = 0;
  ka_interest (ep, i, c, EPOLLIN);
  return 0;
}

/* One readiness of connection @i: -1 on failure, 1 once an answer is
 * complete and right, else 0. */
static int
ka_event (int ep, guint i, KaConn *c, guint32 events)
{
  if (c->state == KA_CONNECTING)
    {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt (c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || (events & (EPOLLERR | EPOLLHUP)))
        return ka_fail (i, c, "connect", err);
      return ka_send (ep, i, c, 1);
    }
  if (c->state != KA_WAIT1 && c->state != KA_WAIT2)
    return ka_fail (i, c, "closed or reset by the server while idle", 0);
  for (;;)
    {
      ssize_t n = recv (c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
      if (n < 0)
        return ka_fail (i, c, "recv", errno);
      if (n == 0)
        return ka_fail (i, c, "closed by the server", 0);
      c->len += (guint16) n;
      gssize total = answer_length (c->buf, c->len);
      if (total == 0 && c->len < sizeof c->buf)
        continue;
      char want[64];
      int wn = g_snprintf (want, sizeof want, "\r\n\r\nid=%u r=%u", i, c->state == KA_WAIT1 ? 1 : 2);
      if (total != c->len || c->len < 17 || memcmp (c->buf, "HTTP/1.1 200 OK\r\n", 17) != 0 ||
          c->len < (guint) wn || memcmp (c->buf + c->len - wn, want, (size_t) wn) != 0 ||
          g_strstr_len (c->buf, c->len, "Connection: close") != NULL)
        return ka_fail (i, c, "wrong answer", 0);
      c->state = c->state == KA_WAIT1 ? KA_IDLE : KA_DONE;
      /* Idle: only a close or reset by the server would be reported. */
      ka_interest (ep, i, c, EPOLLRDHUP);
      return 1;
    }
}

/* Waits for readiness and handles it until @remaining answers came. */
static int
ka_run (int ep, KaConn *c, guint n, guint *remaining, guint *opened, guint *inflight,
        guint16 port, gint64 deadline)
{
  struct epoll_event evs[256];
  while (*remaining > 0)
    {
      while (opened != NULL && *opened < n && *inflight < KA_INFLIGHT)
        {
          guint i = (*opened)++;
          c[i].fd = socket (AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
          if (c[i].fd < 0)
            return ka_fail (i, &c[i], "socket", errno);
          struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (port),
                                    .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
          if (connect (c[i].fd, (struct sockaddr *) &sa, sizeof sa) != 0 && errno != EINPROGRESS)
            return ka_fail (i, &c[i], "connect", errno);
          c[i].state = KA_CONNECTING;
          struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = i };
          if (epoll_ctl (ep, EPOLL_CTL_ADD, c[i].fd, &ev) != 0)
            return ka_fail (i, &c[i], "epoll_ctl", errno);
          (*inflight)++;
        }
      int k = epoll_wait (ep, evs, G_N_ELEMENTS (evs), 1000);
      if (k < 0 && errno != EINTR)
        return ka_fail (0, &c[0], "epoll_wait", errno);
      if (g_get_monotonic_time () > deadline)
        {
          fprintf (stderr, "keepalive client: %u answers still missing at the guard\n",
                   *remaining);
          return -1;
        }
      for (int j = 0; j < k; j++)
        {
          guint i = evs[j].data.u32;
          int r = ka_event (ep, i, &c[i], evs[j].events);
          if (r < 0)
            return -1;
          if (r == 1)
            {
              (*remaining)--;
              if (inflight != NULL)
                (*inflight)--;
            }
        }
    }
  return 0;
}

/* The helper: opens @n keep-alive connections to @port, each asking
 * GET /k/<i>?r=1, and holds them all open; says "open <n>" on stdout and
 * waits for "go" on stdin; then asks GET /k/<i>?r=2 on each, says "done",
 * and closes them. Every answer must be 200 with its own body, on the same
 * connection. Exit status 0 if all went so. */
static int
keepalive_client_main (int argc, char **argv)
{
  if (argc != 4)
    {
      fprintf (stderr, "usage: %s --keepalive-client PORT N\n", argv[0]);
      return 2;
    }
  guint16 port = (guint16) atoi (argv[2]);
  guint n = (guint) atoi (argv[3]);
  struct rlimit rl;
  getrlimit (RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit (RLIMIT_NOFILE, &rl);
  getrlimit (RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < (rlim_t) n + 64)
    {
      fprintf (stderr, "keepalive client: RLIMIT_NOFILE is %lu (hard %lu), below the %u "
               "descriptors %u connections need\n", (unsigned long) rl.rlim_cur,
               (unsigned long) rl.rlim_max, n + 64, n);
      return 2;
    }
  KaConn *c = g_new0 (KaConn, n);
  int ep = epoll_create1 (EPOLL_CLOEXEC);
  gint64 deadline = g_get_monotonic_time () + KA_GUARD_US;
  guint opened = 0, inflight = 0, remaining = n;
  int status = 0;
  if (ka_run (ep, c, n, &remaining, &opened, &inflight, port, deadline) != 0)
    status = 3;
  char line[64];
  if (status == 0)
    {
      printf ("open %u\n", n);
      fflush (stdout);
      if (fgets (line, sizeof line, stdin) == NULL || strncmp (line, "go", 2) != 0)
        status = 4;
    }
  if (status == 0)
    {
      for (guint i = 0; i < n && status == 0; i++)
        if (ka_send (ep, i, &c[i], 2) != 0)
          status = 3;
      remaining = n;
      if (status == 0 && ka_run (ep, c, n, &remaining, NULL, NULL, port, deadline) != 0)
        status = 3;
    }
  if (status == 0)
    {
      printf ("done %u\n", n);
      fflush (stdout);
    }
  for (guint i = 0; i < n; i++)
    if (c[i].fd > 0)
      close (c[i].fd);
  close (ep);
  g_free (c);
  return status;
}

/* Reads a line of the helper's; FALSE at its end of file or at the
 * guard. */
static gboolean
read_line (int fd, char *buf, gsize cap, gint64 deadline)
{
  gsize len = 0;
  while (len + 1 < cap)
    {
      struct pollfd p = { .fd = fd, .events = POLLIN };
      gint64 left = (deadline - g_get_monotonic_time ()) / 1000;
      if (left <= 0 || poll (&p, 1, (int) MIN (left, 1000)) < 0)
        {
          if (left > 0 && errno == EINTR)
            continue;
          return FALSE;
        }
      if (!(p.revents & (POLLIN | POLLHUP)))
        continue;
      ssize_t n = read (fd, buf + len, 1);
      if (n <= 0)
        return FALSE;
      if (buf[len] == '\n')
        break;
      len++;
    }
  buf[len] = '\0';
  return TRUE;
}

static void
ka_configure (WeftHttpServer *server, gpointer data)
{
  weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_MAX_CONNECTIONS, 2 * KA_CONNECTIONS);
  /* Opening 10,000 connections under TSan takes a while: the first must
   * not be swept as idle before the last is open. */
  weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS, 600000);
}

/* Waits until the connections are down to @n, for as long as they keep
 * going down (closing 10,000 takes a while under the sanitizers). */
static void
wait_count_down (Srv *s, guint n)
{
  guint last = G_MAXUINT;
  while (srv_conns (s) != n && srv_conns (s) != last)
    {
      last = srv_conns (s);
      WT_WAIT_UNTIL (srv_conns (s) == n || srv_conns (s) < last);
    }
  wait_connections (s, n);
}

/* 10,000 keep-alive connections open at once (the server counts them
 * all), each answered twice on the same connection with its own body;
 * then all close and the counts go back to 0. */
static void
test_keepalive_10k (void)
{
  const guint n = KA_CONNECTIONS;
  /* The server side needs a descriptor per connection and a few more;
   * the helper raises its own limit. */
  rlim_t lim = wt_raise_nofile ((rlim_t) n + 1024);
  if (lim < (rlim_t) n + 256)
    {
      struct rlimit rl;
      getrlimit (RLIMIT_NOFILE, &rl);
      g_error ("RLIMIT_NOFILE: the hard limit is %lu, but the server side of %u connections "
               "needs %u descriptors (raise the hard limit: ulimit -Hn)",
               (unsigned long) rl.rlim_max, n, n + 256);
    }
  Srv s;
  srv_start_full (&s, ka_configure, NULL);
  g_assert_cmpuint (weft_listener_get_n_connections (s.listener), ==, 0);

  GError *error = NULL;
  gchar *self_exe = g_file_read_link ("/proc/self/exe", &error);
  g_assert_no_error (error);
  gchar *port = g_strdup_printf ("%u", s.port);
  gchar *count = g_strdup_printf ("%u", n);
  gchar *argv[] = { self_exe, "--keepalive-client", port, count, NULL };
  GPid pid;
  int to_child, from_child;
  gint64 t0 = g_get_monotonic_time ();
  g_assert_true (g_spawn_async_with_pipes (NULL, argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD, NULL,
                                           NULL, &pid, &to_child, &from_child, NULL, &error));
  g_assert_no_error (error);
  gint64 guard = g_get_monotonic_time () + KA_GUARD_US;
  char line[64];
  gboolean got = read_line (from_child, line, sizeof line, guard);
  if (!got || strcmp (line, "open 10000") != 0)
    {
      kill (pid, SIGKILL);
      g_error ("the keepalive helper did not open its connections (said \"%s\"; see its "
               "message above)", got ? line : "nothing");
    }
  gint64 t1 = g_get_monotonic_time ();
  /* Every connection is open and answered once: the server holds them all
   * at the same time. */
  g_assert_cmpuint (srv_conns (&s), ==, n);
  g_assert_cmpuint (srv_live (&s), ==, n);
  g_assert_cmpuint (weft_listener_get_n_accepted (s.listener), ==, n);
  g_assert_cmpint (write (to_child, "go\n", 3), ==, 3);
  got = read_line (from_child, line, sizeof line, guard);
  if (!got || strcmp (line, "done 10000") != 0)
    {
      kill (pid, SIGKILL);
      g_error ("the keepalive helper failed its second round (said \"%s\"; see its message "
               "above)", got ? line : "nothing");
    }
  gint64 t2 = g_get_monotonic_time ();
  int status = 0;
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
  g_spawn_close_pid (pid);
  wait_count_down (&s, 0);
  gint64 t3 = g_get_monotonic_time ();
  g_assert_cmpuint (weft_http_server_get_n_requests (s.server), ==, 2 * n);
  g_assert_cmpuint (weft_listener_get_n_accepted (s.listener), ==, n);
  g_test_message ("10,000 connections: opened and answered in %.2f s, second round %.2f s, "
                  "all closed %.2f s later", (double) (t1 - t0) / 1e6, (double) (t2 - t1) / 1e6,
                  (double) (t3 - t2) / 1e6);
  close (to_child);
  close (from_child);
  g_free (self_exe);
  g_free (port);
  g_free (count);
  srv_stop (&s);
}

/* ---- resets -------------------------------------------------------------- */

/* A request head cut off by a reset, at several points: in the request
 * line, in a header, at the end of a header line. */
static void
test_reset_mid_head (void)
{
  static const char *const cuts[] = {
    "GE",
    "GET /hello HTTP/1.1\r\nHost: a\r\nX-Cut: abc",
    "GET /hello HTTP/1.1\r\nHost: a\r\n",
  };
  Srv s;
  srv_start (&s);
  Watcher w;
  watcher_start (&w, s.port);
  wait_connections (&s, 1);
  for (guint round = 0; round < ROUNDS; round++)
    for (guint i = 0; i < G_N_ELEMENTS (cuts); i++)
      {
        int fd = wt_connect_tcp (s.port);
        wait_connections (&s, 2);
        wt_send_str (fd, cuts[i]);
        wt_quiet_window_ms (20); /* the server reads the partial head */
        reset_close (fd);
        wait_connections (&s, 1);
        watcher_expect_progress (&w);
      }
  watcher_stop (&w);
  srv_stop (&s);
}

/* Bodies cut off by a reset: Content-Length and chunked, to a handler that
 * gets the body whole (never called) and to one that streams it (its
 * reader's notify runs). */
static void
test_reset_mid_body (void)
{
  Srv s;
  srv_start (&s);
  Watcher w;
  watcher_start (&w, s.port);
  wait_connections (&s, 1);
  static char filler[4096];
  memset (filler, 'b', sizeof filler);
  for (guint round = 0; round < ROUNDS; round++)
    {
      /* Whole-body handler, Content-Length. Each connection is waited
       * for before its reset, as in /faults/reset-mid-pipeline. */
      int fd = wt_connect_tcp (s.port);
      wait_connections (&s, 2);
      wt_send_str (fd, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n");
      wt_send_all (fd, filler, 3000);
      wt_quiet_window_ms (20);
      reset_close (fd);
      wait_connections (&s, 1);

      /* Whole-body handler, chunked, cut inside a chunk. */
      fd = wt_connect_tcp (s.port);
      wait_connections (&s, 2);
      wt_send_str (fd, "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "1000\r\n");
      wt_send_all (fd, filler, 2000);
      wt_quiet_window_ms (20);
      reset_close (fd);
      wait_connections (&s, 1);

      /* Streamed body, Content-Length: reset once the handler has the
       * first bytes. */
      int before = atomic_load (&s.st.upload_bytes);
      fd = wt_connect_tcp (s.port);
      wt_send_str (fd, "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n");
      wt_send_all (fd, filler, 3000);
      WT_WAIT_UNTIL (atomic_load (&s.st.upload_bytes) == before + 3000);
      g_assert_cmpint (atomic_load (&s.st.upload_bytes), ==, before + 3000);
      reset_close (fd);
      WT_WAIT_UNTIL (atomic_load (&s.st.upload_notified) == 2 * (int) round + 1);
      g_assert_cmpint (atomic_load (&s.st.upload_notified), ==, 2 * (int) round + 1);
      wait_connections (&s, 1);

      /* Streamed body, chunked: one whole chunk, then half of the next. */
      before = atomic_load (&s.st.upload_bytes);
      fd = wt_connect_tcp (s.port);
      wt_send_str (fd, "POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "800\r\n");
      wt_send_all (fd, filler, 2048);
      wt_send_str (fd, "\r\n800\r\n");
      wt_send_all (fd, filler, 1000);
      WT_WAIT_UNTIL (atomic_load (&s.st.upload_bytes) == before + 3048);
      g_assert_cmpint (atomic_load (&s.st.upload_bytes), ==, before + 3048);
      reset_close (fd);
      WT_WAIT_UNTIL (atomic_load (&s.st.upload_notified) == 2 * (int) round + 2);
      g_assert_cmpint (atomic_load (&s.st.upload_notified), ==, 2 * (int) round + 2);
      wait_connections (&s, 1);
      watcher_expect_progress (&w);
    }
  /* No body was complete: the whole-body handler never ran. */
  g_assert_cmpint (atomic_load (&s.st.echo_calls), ==, 0);
  watcher_stop (&w);
  srv_stop (&s);
}

/* Several requests in one write (answers from the handler, from another
 * thread later, from a coroutine, an 8 MiB one, a body), then a reset
 * before reading any answer: at once, or once the answers are on their
 * way. */
static void
test_reset_mid_pipeline (void)
{
  static const char pipeline[] =
      "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET /late HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET /coro HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET /big HTTP/1.1\r\nHost: a\r\n\r\n"
      "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"
      "GET /late HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET /copy HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n";
  Srv s;
  srv_start (&s);
  Watcher w;
  watcher_start (&w, s.port);
  wait_connections (&s, 1);
  for (guint round = 0; round < 2 * ROUNDS; round++)
    {
      int fd = wt_connect_tcp (s.port);
      /* Accepted before the reset: otherwise the wait for one connection
       * below could be over before the server took this one. */
      wait_connections (&s, 2);
      wt_send_str (fd, pipeline);
      if (round % 2 == 1)
        wt_quiet_window_ms (30); /* the answers are being written */
      reset_close (fd);
      wait_connections (&s, 1);
      /* The /late answers come from their threads whenever they come;
       * the connection is gone by then. (A reset that arrives before the
       * server read the requests ends the connection before any runs.) */
      WT_WAIT_UNTIL (atomic_load (&s.st.late_answered) == atomic_load (&s.st.late_started));
      g_assert_cmpint (atomic_load (&s.st.late_answered), ==, atomic_load (&s.st.late_started));
      watcher_expect_progress (&w);
    }
  g_test_message ("%d /late handlers ran", atomic_load (&s.st.late_started));
  watcher_stop (&w);
  srv_stop (&s);
}

/* A reset while an answer is being read: an 8 MiB answer, and a streamed
 * one that never ends (its producer's notify runs). */
static void
test_reset_mid_response (void)
{
  Srv s;
  srv_start (&s);
  Watcher w;
  watcher_start (&w, s.port);
  wait_connections (&s, 1);
  char buf[65536];
  for (guint round = 0; round < ROUNDS; round++)
    {
      int fd = wt_connect_tcp (s.port);
      wt_send_str (fd, "GET /big HTTP/1.1\r\nHost: a\r\n\r\n");
      wt_recv_exactly (fd, buf, sizeof buf);
      g_assert_true (g_str_has_prefix (buf, "HTTP/1.1 200 OK\r\n"));
      reset_close (fd);
      wait_connections (&s, 1);

      fd = wt_connect_tcp (s.port);
      wt_send_str (fd, "GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
      wt_recv_exactly (fd, buf, sizeof buf);
      g_assert_true (g_str_has_prefix (buf, "HTTP/1.1 200 OK\r\n"));
      g_assert_nonnull (g_strstr_len (buf, sizeof buf, "Transfer-Encoding: chunked\r\n"));
      reset_close (fd);
      WT_WAIT_UNTIL (atomic_load (&s.st.stream_notified) == (int) round + 1);
      g_assert_cmpint (atomic_load (&s.st.stream_notified), ==, (int) round + 1);
      wait_connections (&s, 1);
      watcher_expect_progress (&w);
    }
  watcher_stop (&w);
  srv_stop (&s);
}

/* ---- slow clients ---------------------------------------------------------- */

#define SLOW_HEADER_MS 600
#define SLOW_BODY_MS 500
#define TRICKLE_MS 50

typedef struct {
  int fd;
  const char *next;       /* what it trickles */
  gsize step;             /* bytes per trickle */
  gboolean repeat;        /* trickle @next again and again */
  const char *start;
  gint64 since;           /* when the server's clock for it started */
  gint64 answered;        /* when the first byte of the answer came; 0: not yet */
  GByteArray *got;
  gboolean done;          /* end of file (or a reset after the answer) */
} Slow;

/* Trickles every slow client's bytes every TRICKLE_MS (each stops
 * sending once its answer begins) until every one has its answer and the
 * server closed it, or the deadline passed. */
static void
trickle (Slow *c, guint n)
{
  gint64 deadline = g_get_monotonic_time () + WT_DEADLINE_US;
  guint left = n;
  while (left > 0 && g_get_monotonic_time () < deadline)
    {
      for (guint i = 0; i < n; i++)
        {
          if (c[i].done)
            continue;
          char buf[4096];
          ssize_t r;
          while ((r = recv (c[i].fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
            {
              if (c[i].answered == 0)
                c[i].answered = g_get_monotonic_time ();
              g_byte_array_append (c[i].got, (const guint8 *) buf, (guint) r);
            }
          if (r == 0 || (r < 0 && errno == ECONNRESET && c[i].answered != 0))
            {
              c[i].done = TRUE;
              left--;
              continue;
            }
          g_assert_true (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
          if (c[i].answered != 0)
            continue;
          if (*c[i].next == '\0' && c[i].repeat)
            c[i].next = c[i].start;
          gsize k = MIN (c[i].step, strlen (c[i].next));
          if (k > 0)
            {
              wt_send_all (c[i].fd, c[i].next, k);
              c[i].next += k;
            }
        }
      g_usleep (TRICKLE_MS * 1000);
    }
}

static void
slow_check (Slow *c, guint n, gint64 at_least_us, const char *what)
{
  for (guint i = 0; i < n; i++)
    {
      g_byte_array_append (c[i].got, (const guint8 *) "", 1);
      const char *text = (const char *) c[i].got->data;
      if (!c[i].done || !g_str_has_prefix (text, "HTTP/1.1 408 ") ||
          strstr (text, "\r\nConnection: close\r\n") == NULL)
        g_error ("%s client %u: %s; got:\n%s", what, i,
                 c[i].done ? "closed" : "not closed", text);
      gint64 took = c[i].answered - c[i].since;
      g_test_message ("%s client %u: 408 after %" G_GINT64_FORMAT " ms", what, i, took / 1000);
      /* The server's clock started no earlier than ours: it cannot have
       * fired before its timeout. */
      g_assert_cmpint (took, >=, at_least_us);
      g_byte_array_unref (c[i].got);
      close (c[i].fd);
    }
}

static void
slowloris_configure (WeftHttpServer *server, gpointer data)
{
  weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS, SLOW_HEADER_MS);
}

/* Slowloris: heads trickled a byte at a time, far more often than the
 * header timeout but never complete (header lines without end). Each gets
 * 408 and is closed when the header timeout fires; the watcher is served
 * meanwhile. */
static void
test_slowloris (void)
{
  static const char head[] = "GET /hello HTTP/1.1\r\nHost: a\r\n";
  static const char more[] = "X-Slow: a\r\n";
  Srv s;
  srv_start_full (&s, slowloris_configure, NULL);
  Watcher w;
  watcher_start (&w, s.port);
  wait_connections (&s, 1);
  Slow c[8];
  for (guint i = 0; i < G_N_ELEMENTS (c); i++)
    {
      c[i] = (Slow) { .fd = wt_connect_tcp (s.port), .step = 1, .got = g_byte_array_new () };
      /* The request line first, then header lines for ever. (Our clock
       * first: the server's cannot start before it.) */
      c[i].since = g_get_monotonic_time ();
      wt_send_str (c[i].fd, head);
      c[i].next = c[i].start = more;
      c[i].repeat = TRUE;
    }
  wait_connections (&s, 1 + G_N_ELEMENTS (c));
  int ok_before = atomic_load (&w.ok);
  trickle (c, G_N_ELEMENTS (c));
  int ok_during = atomic_load (&w.ok) - ok_before;
  slow_check (c, G_N_ELEMENTS (c), SLOW_HEADER_MS * 1000, "slowloris");
  g_test_message ("the watcher had %d answers meanwhile", ok_during);
  watcher_assert_no_failure (&w);
  g_assert_cmpint (ok_during, >, 0);
  wait_connections (&s, 1);
  watcher_expect_progress (&w);
  watcher_stop (&w);
  srv_stop (&s);
}

static void
slow_body_configure (WeftHttpServer *server, gpointer data)
{
  weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS, SLOW_BODY_MS);
  weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_BODY_MIN_RATE, 1000);
}

/* Slow bodies: one that stops (Content-Length, then nothing), one
 * trickled far below the minimum rate (Content-Length), one trickled in
 * chunks that never end, to a whole-body handler and to a streamed-body
 * one. Each gets 408 and is closed once the body timeout (or the rate
 * rule) fires; the watcher is served meanwhile. */
static void
test_slow_body (void)
{
  static const char chunk[] = "5\r\nabcde\r\n";
  static const char digits[] = "0123456789";
  Srv s;
  srv_start_full (&s, slow_body_configure, NULL);
  Watcher w;
  watcher_start (&w, s.port);
  wait_connections (&s, 1);
  static const struct {
    const char *head;
    const char *trickled;   /* NULL: stalls after the head and 10 bytes */
  } kinds[] = {
    { "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n", NULL },
    { "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n", digits },
    { "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", chunk },
    { "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n", NULL },
    { "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n", digits },
    { "POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", chunk },
  };
  Slow c[G_N_ELEMENTS (kinds)];
  for (guint i = 0; i < G_N_ELEMENTS (c); i++)
    {
      c[i] = (Slow) { .fd = wt_connect_tcp (s.port), .got = g_byte_array_new () };
      c[i].since = g_get_monotonic_time ();
      wt_send_str (c[i].fd, kinds[i].head);
      if (kinds[i].trickled == NULL)
        {
          wt_send_str (c[i].fd, digits);
          c[i].next = "";
        }
      else
        {
          /* 10 (or 5) bytes every 50 ms: never idle for the body timeout,
           * far below 1000 B/s. */
          c[i].next = c[i].start = kinds[i].trickled;
          c[i].step = strlen (kinds[i].trickled);
          c[i].repeat = TRUE;
        }
    }
  wait_connections (&s, 1 + G_N_ELEMENTS (c));
  int ok_before = atomic_load (&w.ok);
  trickle (c, G_N_ELEMENTS (c));
  int ok_during = atomic_load (&w.ok) - ok_before;
  slow_check (c, G_N_ELEMENTS (c), SLOW_BODY_MS * 1000, "slow body");
  g_test_message ("the watcher had %d answers meanwhile", ok_during);
  watcher_assert_no_failure (&w);
  g_assert_cmpint (ok_during, >, 0);
  wait_connections (&s, 1);
  /* No body was complete; each streamed body's reader heard the end. */
  g_assert_cmpint (atomic_load (&s.st.echo_calls), ==, 0);
  WT_WAIT_UNTIL (atomic_load (&s.st.upload_notified) == 3);
  g_assert_cmpint (atomic_load (&s.st.upload_notified), ==, 3);
  watcher_expect_progress (&w);
  watcher_stop (&w);
  srv_stop (&s);
}

/* ---- a client that never reads ------------------------------------------- */

#define WRITE_TIMEOUT_MS 400

static void
write_timeout_configure (WeftHttpServer *server, gpointer data)
{
  weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_WRITE_TIMEOUT_MS, WRITE_TIMEOUT_MS);
}

/* The kernel's part of the output a non-reading client leaves: the
 * server socket's send buffer can grow to tcp_wmem's maximum. */
static guint64
kernel_send_buffer_max (void)
{
  gchar *text = NULL;
  guint64 max = 16 * 1024 * 1024;
  if (g_file_get_contents ("/proc/sys/net/ipv4/tcp_wmem", &text, NULL, NULL))
    {
      gchar **f = g_strsplit_set (g_strstrip (text), " \t", -1);
      guint nf = g_strv_length (f);
      if (nf >= 3)
        max = g_ascii_strtoull (f[nf - 1], NULL, 10);
      g_strfreev (f);
    }
  g_free (text);
  return max;
}

/* A non-reading client socket: a small receive buffer, so the kernel
 * holds little for it. */
static int
connect_small_window (guint16 port)
{
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  g_assert_cmpint (fd, >=, 0);
  int rcv = 16384;
  g_assert_cmpint (setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv), ==, 0);
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (port),
                            .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
  g_assert_cmpint (connect (fd, (struct sockaddr *) &sa, sizeof sa), ==, 0);
  wt_set_timeouts (fd, WT_DEADLINE_US / 1000);
  return fd;
}

/* Reads what the server sent to a client that did not read, to its end:
 * the write timeout aborted the connection, so it ends with a reset. */
static void
expect_reset_after_output (int fd)
{
  gboolean reset = FALSE;
  GByteArray *got = wt_recv_to_eof (fd, TRUE, &reset);
  g_assert_cmpuint (got->len, >, 0);
  g_assert_true (reset);
  g_byte_array_unref (got);
  close (fd);
}

/* Clients that never read: a streamed answer that never ends, and
 * pipelined requests for 1 MiB answers built by the handler. The server's
 * output for each stays bounded (the producer is called no more, requests
 * are parsed no more, while the write queue is above its high water
 * mark), the write timeout aborts them, and the watcher is served
 * meanwhile. */
static void
test_non_reading_client (void)
{
  Srv s;
  srv_start_full (&s, write_timeout_configure, NULL);
  Watcher w;
  watcher_start (&w, s.port);
  wait_connections (&s, 1);
  /* The server socket's send buffer and the client's receive buffer
   * (16 KiB, which the kernel doubles), with as much again for slack. */
  guint64 kernel = kernel_send_buffer_max () + 2 * (2 * 16384);

  /* A never-ending streamed answer. */
  int fd = connect_small_window (s.port);
  wt_send_str (fd, "GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  int ok_before = atomic_load (&w.ok);
  WT_WAIT_UNTIL (atomic_load (&s.st.stream_notified) == 1);
  g_assert_cmpint (atomic_load (&s.st.stream_notified), ==, 1);
  int ok_during = atomic_load (&w.ok) - ok_before;
  guint64 produced = atomic_load (&s.st.stream_bytes);
  guint64 queued = atomic_load (&s.st.max_queued);
  g_test_message ("stream: %" G_GUINT64_FORMAT " bytes produced, at most %" G_GUINT64_FORMAT
                  " queued; kernel buffers up to %" G_GUINT64_FORMAT "; the watcher had %d "
                  "answers meanwhile", produced, queued, kernel, ok_during);
  /* The producer is not called while the queue is above the high water
   * mark: it holds at most that and one piece (and its chunk framing). */
  g_assert_cmpuint (queued, <=, HIGH_WATER + STREAM_PIECE + 64);
  /* What the kernel took besides: its buffers, no more. */
  g_assert_cmpuint (produced, <=, HIGH_WATER + 2 * STREAM_PIECE + kernel);
  expect_reset_after_output (fd);
  wait_connections (&s, 1);
  watcher_assert_no_failure (&w);
  g_assert_cmpint (ok_during, >, 0);

  /* 64 pipelined requests for 1 MiB answers, in one write. */
  atomic_store (&s.st.max_queued, 0);
  GString *reqs = g_string_new (NULL);
  for (guint i = 0; i < 64; i++)
    g_string_append (reqs, "GET /copy HTTP/1.1\r\nHost: a\r\n\r\n");
  fd = connect_small_window (s.port);
  wt_send_all (fd, reqs->str, reqs->len);
  g_string_free (reqs, TRUE);
  ok_before = atomic_load (&w.ok);
  WT_WAIT_UNTIL (srv_conns (&s) == 1 && atomic_load (&s.st.copy_calls) > 0);
  g_assert_cmpint (atomic_load (&s.st.copy_calls), >, 0);
  ok_during = atomic_load (&w.ok) - ok_before;
  queued = atomic_load (&s.st.max_queued);
  g_test_message ("copy: %d of 64 requests answered, at most %" G_GUINT64_FORMAT " bytes "
                  "queued; the watcher had %d answers meanwhile",
                  atomic_load (&s.st.copy_calls), queued, ok_during);
  /* Requests are parsed (and answered) no more once the answers queued
   * pass the high water mark. */
  g_assert_cmpuint (queued, <=, HIGH_WATER + COPY_SIZE + 4096);
  expect_reset_after_output (fd);
  /* Nor were more answers built than the queue and the kernel's buffers
   * took: answers held for one flush after the read count too (held,
   * the 32 of one read were built at once, 32 MiB, while the queue was
   * still empty). */
  g_test_message ("copy: %d answers built in all", atomic_load (&s.st.copy_calls));
  g_assert_cmpuint ((guint64) atomic_load (&s.st.copy_calls) * COPY_SIZE, <=,
                    HIGH_WATER + COPY_SIZE + kernel + 64 * 4096);
  wait_connections (&s, 1);
  watcher_assert_no_failure (&w);
  g_assert_cmpint (ok_during, >, 0);

  watcher_expect_progress (&w);
  watcher_stop (&w);
  srv_stop (&s);
}

/* ---- a half-closed deep pipeline ------------------------------------------ */

/* Splits what came into answers; returns how many, each checked to be a
 * 200 whose body ends with what @expect_body says for it. */
static guint
count_answers (GByteArray *got, const char *(*expect_body) (guint i, gchar **free_me))
{
  gsize off = 0;
  guint n = 0;
  while (off < got->len)
    {
      const char *a = (const char *) got->data + off;
      gssize len = answer_length (a, got->len - off);
      if (len <= 0)
        g_error ("answer %u is cut off or malformed (%" G_GSIZE_FORMAT " bytes left): %.*s", n,
                 got->len - off, (int) MIN (got->len - off, 200), a);
      gchar *free_me = NULL;
      const char *body = expect_body (n, &free_me);
      gsize blen = strlen (body);
      if (!g_str_has_prefix (a, "HTTP/1.1 200 OK\r\n") || (gsize) len < blen ||
          memcmp (a + len - blen, body, blen) != 0)
        g_error ("answer %u: expected 200 ... %s, got: %.*s", n, body, (int) MIN (len, 300), a);
      g_free (free_me);
      off += (gsize) len;
      n++;
    }
  return n;
}

/* 40 times /late, then /k/40 to /k/99. */
static const char *
late_then_key_body (guint i, gchar **free_me)
{
  if (i < 40)
    return "\r\n\r\nlate";
  return *free_me = g_strdup_printf ("\r\n\r\nid=%u r=-", i);
}

static const char *
copy_body (guint i, gchar **free_me)
{
  /* The last bytes of /copy's body. */
  static char tail[17];
  memcpy (tail, (const char *) g_bytes_get_data (big_body, NULL) + COPY_SIZE - 16, 16);
  tail[16] = '\0';
  return strlen (tail) == 16 ? tail : "";
}

/* A client sends many requests at once and shuts its sending side down
 * (as `printf ... | nc` does): every complete request is answered, in
 * order, then the server closes. More requests than the pipeline limit
 * (32), and answers that pass the write queue's high water mark, both
 * make the server stop parsing for a while: the end of the client's
 * input must not make it forget the requests it has not parsed yet. */
static void
test_half_close_pipeline (void)
{
  Srv s;
  srv_start (&s);
  GString *reqs = g_string_new (NULL);
  /* The /late answers come 20 ms later: 32 wait unanswered, and the
   * server stops parsing until they are. */
  for (guint i = 0; i < 100; i++)
    if (i < 40)
      g_string_append (reqs, "GET /late HTTP/1.1\r\nHost: a\r\n\r\n");
    else
      g_string_append_printf (reqs, "GET /k/%u HTTP/1.1\r\nHost: a\r\n\r\n", i);
  int fd = wt_connect_tcp (s.port);
  wt_send_all (fd, reqs->str, reqs->len);
  g_assert_cmpint (shutdown (fd, SHUT_WR), ==, 0);
  GByteArray *got = wt_recv_to_eof (fd, FALSE, NULL);
  g_assert_cmpuint (count_answers (got, late_then_key_body), ==, 100);
  g_byte_array_unref (got);
  close (fd);

  g_string_truncate (reqs, 0);
  for (guint i = 0; i < 8; i++)
    g_string_append (reqs, "GET /copy HTTP/1.1\r\nHost: a\r\n\r\n");
  fd = wt_connect_tcp (s.port);
  wt_send_all (fd, reqs->str, reqs->len);
  g_assert_cmpint (shutdown (fd, SHUT_WR), ==, 0);
  wt_quiet_window_ms (50); /* the answers fill the queue before the client reads */
  got = wt_recv_to_eof (fd, FALSE, NULL);
  g_assert_cmpuint (count_answers (got, copy_body), ==, 8);
  g_byte_array_unref (got);
  close (fd);
  g_string_free (reqs, TRUE);
  wait_connections (&s, 0);
  srv_stop (&s);
}

/* ---- descriptor exhaustion ---------------------------------------------- */

static atomic_int emfile_warnings;

static void
count_warnings (const gchar *domain, GLogLevelFlags level, const gchar *message,
                gpointer user_data)
{
  if (strstr (message, "Too many open files") != NULL)
    atomic_fetch_add (&emfile_warnings, 1);
  g_log_default_handler (domain, level, message, user_data);
}

static int
count_open_fds (void)
{
  int n = 0;
  GDir *d = g_dir_open ("/proc/self/fd", 0, NULL);
  while (g_dir_read_name (d) != NULL)
    n++;
  g_dir_close (d);
  return n - 1; /* the GDir's own */
}

static void
files_configure (WeftHttpServer *server, gpointer data)
{
  GError *error = NULL;
  g_assert_true (weft_http_server_add_directory (server, "/files/", data, &error));
  g_assert_no_error (error);
}

#define N_WAITING 4

/* Out of descriptors (RLIMIT_NOFILE lowered in a subprocess and the table
 * filled to it), while clients keep connecting: the server cannot accept
 * them, backs off instead of spinning, goes on serving its live
 * connections (a static file it cannot open is a 503, not a 404); once
 * descriptors are free, the waiting clients are served. */
static void
test_emfile (void)
{
  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      g_test_trap_assert_stderr ("*accept: Too many open files; pausing*");
      return;
    }
  /* The listener's EMFILE warning is expected here. */
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  g_log_set_default_handler (count_warnings, NULL);
  gchar *root = g_dir_make_tmp ("weft-faults-XXXXXX", NULL);
  gchar *file = g_build_filename (root, "a.txt", NULL);
  g_assert_true (g_file_set_contents (file, "AAA", -1, NULL));
  Srv s;
  srv_start_full (&s, files_configure, root);
  Watcher w;
  watcher_start (&w, s.port);
  int live = wt_connect_tcp (s.port);
  expect_answer (live, "GET /files/a.txt HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 200 ", "AAA");
  /* The file's descriptors are closed on the connection's context after
   * the answer went out: one more answer there, and they are. */
  expect_answer (live, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 200 ", "Hello, World!");
  wait_connections (&s, 2);

  /* The waiting clients' sockets exist before the table is full:
   * connecting them takes no descriptor. */
  int waiting[N_WAITING];
  for (guint i = 0; i < N_WAITING; i++)
    waiting[i] = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct rlimit rl;
  getrlimit (RLIMIT_NOFILE, &rl);
  struct rlimit low = { (rlim_t) count_open_fds () + 16, rl.rlim_max };
  g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &low), ==, 0);
  GArray *fillers = g_array_new (FALSE, FALSE, sizeof (int));
  for (;;)
    {
      int fd = open ("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        break;
      g_array_append_val (fillers, fd);
    }
  g_assert_cmpint (errno, ==, EMFILE);

  /* One descriptor free (before any client waits to take it): a static
   * file answer needs no more than that one. */
  int spare = g_array_index (fillers, int, fillers->len - 1);
  g_array_set_size (fillers, fillers->len - 1);
  close (spare);
  expect_answer (live, "GET /files/a.txt HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 200 ", "AAA");
  expect_answer (live, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 200 ", "Hello, World!");
  spare = open ("/dev/null", O_RDONLY | O_CLOEXEC);
  g_assert_cmpint (spare, >=, 0);
  g_array_append_val (fillers, spare);
  g_assert_cmpint (open ("/dev/null", O_RDONLY | O_CLOEXEC), ==, -1);

  guint64 accepted = weft_listener_get_n_accepted (s.listener);
  for (guint i = 0; i < N_WAITING; i++)
    {
      struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (s.port),
                                .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
      g_assert_cmpint (connect (waiting[i], (struct sockaddr *) &sa, sizeof sa), ==, 0);
      wt_set_timeouts (waiting[i], WT_DEADLINE_US / 1000);
      wt_send_str (waiting[i], "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
    }
  WT_WAIT_UNTIL (atomic_load (&emfile_warnings) > 0);
  g_assert_cmpint (atomic_load (&emfile_warnings), >, 0);

  /* Backing off, not spinning: with the watcher quiet, the engine runs a
   * handful of callbacks (a retry every 100 ms), not thousands. */
  atomic_store (&w.pause, 1);
  WT_WAIT_UNTIL (atomic_load (&w.parked));
  g_assert_true (atomic_load (&w.parked));
  WeftEngineStats a = wt_stats (s.engine);
  wt_quiet_window_ms (500);
  WeftEngineStats b = wt_stats (s.engine);
  g_test_message ("while out of descriptors: %" G_GUINT64_FORMAT " callbacks, %"
                  G_GUINT64_FORMAT " fd events in 500 ms", b.jobs_run - a.jobs_run,
                  b.fd_events - a.fd_events);
  g_assert_cmpuint (b.jobs_run - a.jobs_run, <, 100);
  atomic_store (&w.pause, 0);

  /* Live connections are served; the waiting clients are not accepted. */
  expect_answer (live, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 200 ", "Hello, World!");
  expect_answer (live, "GET /files/a.txt HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 503 ", NULL);
  watcher_expect_progress (&w);
  g_assert_cmpuint (weft_listener_get_n_accepted (s.listener), ==, accepted);
  for (guint i = 0; i < N_WAITING; i++)
    {
      char c;
      g_assert_cmpint (recv (waiting[i], &c, 1, MSG_DONTWAIT), ==, -1);
      g_assert_cmpint (errno, ==, EAGAIN);
    }

  /* Descriptors free again: the waiting clients are accepted and served. */
  for (guint i = 0; i < fillers->len; i++)
    close (g_array_index (fillers, int, i));
  g_array_free (fillers, TRUE);
  for (guint i = 0; i < N_WAITING; i++)
    {
      gchar *got = recv_answer (waiting[i]);
      if (!g_str_has_prefix (got, "HTTP/1.1 200 ") || !g_str_has_suffix (got, "Hello, World!"))
        g_error ("waiting client %u:\n%s", i, got);
      g_free (got);
    }
  g_assert_cmpuint (weft_listener_get_n_accepted (s.listener), ==, accepted + N_WAITING);
  expect_answer (live, "GET /files/a.txt HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 200 ", "AAA");
  watcher_expect_progress (&w);
  for (guint i = 0; i < N_WAITING; i++)
    close (waiting[i]);
  close (live);
  wait_connections (&s, 1);
  watcher_stop (&w);
  srv_stop (&s);
  g_unlink (file);
  g_rmdir (root);
  g_free (file);
  g_free (root);
}

/* ---- coroutine stacks that cannot be mapped ----------------------------- */

static gpointer
never_runs (gpointer data)
{
  g_error ("a coroutine without a stack ran");
  return NULL;
}

static void
count_notify (gpointer data)
{
  atomic_fetch_add ((atomic_int *) data, 1);
}

/* More address space than x86-64 or AArch64 user space has: mmap fails
 * with ENOMEM whatever the machine (and the sanitizers) have. */
#define NO_SUCH_STACK ((gsize) 1 << 50)

static void
huge_coro_stack (WeftHttpServer *server, gpointer data)
{
  /* Internal: the stack of coroutine handlers (32 KiB by default). */
  server->coro_stack = NO_SUCH_STACK;
}

/* A coroutine whose stack cannot be mapped (malloc failures abort in
 * GLib, but a stack mmap fails softly): weft_coro_spawn() returns NULL
 * and runs the notify; a coroutine handler that cannot start is answered
 * 503 and its connection closed, and the server serves on. */
static void
test_enomem_coro_stack (void)
{
  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      g_test_trap_assert_stderr ("*weft_coro_spawn: cannot map a*-byte stack*");
      return;
    }
  /* The spawn's warning is expected here. */
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  Srv s;
  srv_start_full (&s, huge_coro_stack, NULL);

  /* The public call. */
  atomic_int notified = 0;
  WeftContext *ctx = weft_context_new (s.engine);
  weft_context_dispatch (ctx);
  WeftCoro *c = weft_coro_spawn (ctx, never_runs, &notified, count_notify,
                                 NO_SUCH_STACK);
  g_assert_null (c);
  g_assert_cmpint (atomic_load (&notified), ==, 1);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);

  Watcher w;
  watcher_start (&w, s.port);
  for (guint round = 0; round < ROUNDS; round++)
    {
      /* The request after it is not answered: the connection closes after
       * the 503. */
      int fd = wt_connect_tcp (s.port);
      wt_send_str (fd, "GET /coro HTTP/1.1\r\nHost: a\r\n\r\n"
                       "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
      GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
      g_byte_array_append (got, (const guint8 *) "", 1);
      const char *text = (const char *) got->data;
      if (!g_str_has_prefix (text, "HTTP/1.1 503 ") ||
          strstr (text, "\r\nConnection: close\r\n") == NULL || strstr (text, "Hello") != NULL)
        g_error ("a coroutine handler without a stack:\n%s", text);
      g_byte_array_unref (got);
      close (fd);
      wait_connections (&s, 1);
      watcher_expect_progress (&w);
    }
  g_assert_cmpint (atomic_load (&s.st.coro_ran), ==, 0);
  watcher_stop (&w);
  srv_stop (&s);
}

static gsize
vm_size (void)
{
  gchar *text = NULL;
  g_assert_true (g_file_get_contents ("/proc/self/statm", &text, NULL, NULL));
  gsize pages = (gsize) g_ascii_strtoull (text, NULL, 10);
  g_free (text);
  return pages * (gsize) sysconf (_SC_PAGESIZE);
}

/* Address space limited (RLIMIT_AS) to what the process already has: the
 * next coroutine stack cannot be mapped, while the allocator still finds
 * room in its arenas. */
static void
test_enomem_address_space (void)
{
  if (WT_SANITIZED)
    {
      g_test_skip ("the sanitizers reserve terabytes of address space: RLIMIT_AS cannot be "
                   "set just above what the process uses");
      return;
    }
  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      g_test_trap_assert_stderr ("*weft_coro_spawn: cannot map a 32768-byte stack*");
      return;
    }
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  Srv s;
  srv_start (&s);
  int fd = wt_connect_tcp (s.port);
  for (guint i = 0; i < 20; i++)
    expect_answer (fd, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 200 ", "Hello, World!");
  struct rlimit rl;
  getrlimit (RLIMIT_AS, &rl);
  struct rlimit low = { vm_size (), rl.rlim_max };
  g_assert_cmpint (setrlimit (RLIMIT_AS, &low), ==, 0);
  wt_send_str (fd, "GET /coro HTTP/1.1\r\nHost: a\r\n\r\nGET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
  GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
  g_assert_cmpint (setrlimit (RLIMIT_AS, &rl), ==, 0);
  g_byte_array_append (got, (const guint8 *) "", 1);
  if (!g_str_has_prefix ((const char *) got->data, "HTTP/1.1 503 "))
    g_error ("out of address space:\n%s", (const char *) got->data);
  g_byte_array_unref (got);
  close (fd);
  fd = wt_connect_tcp (s.port);
  expect_answer (fd, "GET /coro HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 200 ", "coro");
  close (fd);
  wait_connections (&s, 0);
  srv_stop (&s);
}

int
main (int argc, char **argv)
{
  if (argc >= 2 && strcmp (argv[1], "--keepalive-client") == 0)
    return keepalive_client_main (argc, argv);
  g_test_init (&argc, &argv, NULL);
  signal (SIGPIPE, SIG_IGN);
  guint8 *pattern = g_malloc (BIG_SIZE);
  for (gsize i = 0; i < BIG_SIZE; i++)
    pattern[i] = (guint8) (i ^ (i >> 8) ^ (i >> 16));
  big_body = g_bytes_new_take (pattern, BIG_SIZE);
  g_test_add_func ("/faults/keepalive-10k", test_keepalive_10k);
  g_test_add_func ("/faults/reset-mid-head", test_reset_mid_head);
  g_test_add_func ("/faults/reset-mid-body", test_reset_mid_body);
  g_test_add_func ("/faults/reset-mid-pipeline", test_reset_mid_pipeline);
  g_test_add_func ("/faults/reset-mid-response", test_reset_mid_response);
  g_test_add_func ("/faults/slowloris", test_slowloris);
  g_test_add_func ("/faults/slow-body", test_slow_body);
  g_test_add_func ("/faults/non-reading-client", test_non_reading_client);
  g_test_add_func ("/faults/half-close-pipeline", test_half_close_pipeline);
  g_test_add_func ("/faults/emfile", test_emfile);
  g_test_add_func ("/faults/enomem-coro-stack", test_enomem_coro_stack);
  g_test_add_func ("/faults/enomem-address-space", test_enomem_address_space);
  int r = g_test_run ();
  g_bytes_unref (big_body);
  return r;
}
