/* weft-http-server.c: HTTP/1.1 on connections (RFC 9112): the server and
 * each connection's reading side.
 *
 * Each accepted connection gets an HttpConn on its own context. Bytes are
 * read in raw mode: the parser (weft-http-parser.c) looks at the
 * connection's buffer in place, and only a complete head is copied, once,
 * into the request it becomes. Requests are answered strictly in arrival
 * order (pipelining): each waits in hc->pending until its answer is
 * attached, and only the oldest is ever written (weft_http_flush_ready()).
 * Answers, streams and the request API live in weft-http-request.c.
 *
 * Timeouts: a connection has at most one timer of its own, and only while
 * a request arrives: the header timeout from a request's first byte, then
 * a once-a-second body check (idle time and average rate) while a body
 * arrives. Idle keep-alive connections have none: one sweep per server
 * closes those idle too long (keepalive_sweep()), so an idle connection
 * costs no timer memory. A connection that has sent nothing since it was
 * accepted is held to the header timeout by the same sweep.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-http-private.h"
#include "weft-coro-private.h"
#include "weft-engine.h"
#include "weft-coro.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <string.h>
#include <unistd.h>

#define MAX_HEADERS 256           /* the array; the limit may be lower */
#define BODY_CHECK_MS 1000
#define BODY_RATE_GRACE_US (10 * G_USEC_PER_SEC) /* without a body timeout */

G_DEFINE_BOXED_TYPE (WeftHttpServer, weft_http_server, weft_http_server_ref,
                     weft_http_server_unref)
G_DEFINE_FLAGS_TYPE (WeftHttpHandlerFlags, weft_http_handler_flags,
                     G_DEFINE_ENUM_VALUE (WEFT_HTTP_HANDLER_DEFAULT, "default"),
                     G_DEFINE_ENUM_VALUE (WEFT_HTTP_HANDLER_STREAM_BODY, "stream-body"),
                     G_DEFINE_ENUM_VALUE (WEFT_HTTP_HANDLER_COROUTINE, "coroutine"))
G_DEFINE_ENUM_TYPE (WeftHttpLimit, weft_http_limit,
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_MAX_TARGET_BYTES, "max-target-bytes"),
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_MAX_HEAD_BYTES, "max-head-bytes"),
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_MAX_HEADERS, "max-headers"),
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_MAX_BODY_BYTES, "max-body-bytes"),
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS, "header-timeout-ms"),
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS, "body-timeout-ms"),
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_BODY_MIN_RATE, "body-min-rate"),
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS,
                                         "keepalive-timeout-ms"),
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_WRITE_TIMEOUT_MS, "write-timeout-ms"),
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_MAX_CONNECTIONS, "max-connections"),
                    G_DEFINE_ENUM_VALUE (WEFT_HTTP_LIMIT_MAX_PIPELINE, "max-pipeline"))

static const guint64 default_limit[] = {
  [WEFT_HTTP_LIMIT_MAX_TARGET_BYTES] = 8 * 1024,
  [WEFT_HTTP_LIMIT_MAX_HEAD_BYTES] = 16 * 1024,
  [WEFT_HTTP_LIMIT_MAX_HEADERS] = 100,
  [WEFT_HTTP_LIMIT_MAX_BODY_BYTES] = 8 * 1024 * 1024,
  [WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS] = 20000,
  [WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS] = 20000,
  [WEFT_HTTP_LIMIT_BODY_MIN_RATE] = 256,
  [WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS] = 30000,
  [WEFT_HTTP_LIMIT_WRITE_TIMEOUT_MS] = 60000,
  [WEFT_HTTP_LIMIT_MAX_CONNECTIONS] = 16384,
  [WEFT_HTTP_LIMIT_MAX_PIPELINE] = 32,
};

static gsize on_data (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data);

static gboolean
known_method (const char *m)
{
  if (m[0] == 'G' && m[1] == 'E' && m[2] == 'T' && m[3] == '\0')
    return TRUE; /* most requests: no loop */
  static const char *const known[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS",
                                       "PATCH", "TRACE", "CONNECT" };
  for (guint i = 0; i < G_N_ELEMENTS (known); i++)
    if (strcmp (m, known[i]) == 0)
      return TRUE;
  return FALSE;
}

/* The body of every bodiless request: one shared, never freed. Made with
 * pthread_once, which TSan understands (g_once's flag is written inside
 * uninstrumented GLib). */
GBytes *weft__http_empty_body;

static void
make_empty_body (void)
{
  weft__http_empty_body = g_bytes_new_static ("", 0);
}

/* Made once, by the first weft_http_server_new(): every request comes
 * after its server, so the hot path reads weft__http_empty_body without
 * a pthread_once. Never freed; a request does not count a reference on
 * it (two atomic operations less per bodiless request), see
 * weft_http_request_unref(). */
static void
ensure_empty_body (void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once (&once, make_empty_body);
}

/* ---- the connection state ---------------------------------------------- */

HttpConn *
weft_http_conn_ref (HttpConn *hc)
{
  atomic_fetch_add (&hc->ref_count, 1);
  return hc;
}

static void
conn_free (HttpConn *hc)
{
  g_assert ((hc->n_pending == 0));
  WeftConnection *conn = hc->conn;
  weft_http_server_unref (hc->server);
  if (!hc->embedded)
    g_free (hc);
  weft_connection_unref (conn); /* (an embedded hc's memory may go with it) */
}

void
weft_http_conn_unref (HttpConn *hc)
{
  if (atomic_fetch_sub (&hc->ref_count, 1) == 1)
    conn_free (hc);
}

/* The close (the event function's notify), on the context: the local
 * side and its reference go, ref_count becoming the sum of the references
 * left (see weft_http_conn_ref_local()): ref_count - WEFT_HTTP_CONN_LOCAL
 * + local_refs, which is below 2^32, so its low 32 bits are all of it. */
static void
conn_merge_local (HttpConn *hc)
{
  gint64 rc = atomic_load (&hc->ref_count);
  gint64 total;
  do
    total = (gint64) (guint32) ((guint64) rc - (guint64) WEFT_HTTP_CONN_LOCAL + hc->local_refs);
  while (!atomic_compare_exchange_weak (&hc->ref_count, &rc, total));
  if (total == 0)
    conn_free (hc);
}

/* The pending line lets go of @req (popped), on the context: its
 * reference goes, or passes to dispatch() if that holds it (req->held). */
static inline void
pending_release (HttpConn *hc, WeftHttpRequest *req)
{
  if (G_UNLIKELY (req->held))
    {
      req->held = 2;
      return;
    }
  weft__http_request_unref_here (req);
}

static void account (HttpConn *hc, WeftHttpRequest *req, gint64 *now, WeftHttpStats **st);

/* Drops everything still queued: the connection is gone. Streams and
 * body readers hear of it (their notifies run) here, on the context. */
static void
drop_pending (HttpConn *hc)
{
  WeftHttpRequest *req;
  gint64 now = 0;
  WeftHttpStats *st = NULL;
  hc->reading = NULL;
  hc->active = NULL;
  while ((req = weft_http_pending_pop (hc)) != NULL)
    {
      /* A stream whose head is out was answered, even if it never ends
       * (its client went away, the drain's deadline cut it off): it is
       * counted and logged now, with the body written so far. Else an
       * event stream, which only ever ends so, was in no count or log. */
      if (req->head_sent)
        account (hc, req, &now, &st);
      weft_http_request_drop (req);
      pending_release (hc, req);
    }
}

static void
stop_timer (HttpConn *hc)
{
  if (hc->timer != 0)
    {
      weft_context_remove (weft_http_conn_ctx (hc), hc->timer);
      hc->timer = 0;
    }
}

/* The client's end came in the middle of the body of hc->reading, the
 * newest request, while older ones still wait for their answers: those
 * must still go out (closing at once lost them; found by
 * fuzz-http-connection). The cut-off request leaves the line unanswered;
 * its stream and body reader hear of it now, and what its handler still
 * writes or answers goes nowhere. */
static void
drop_cut_off (HttpConn *hc)
{
  WeftHttpRequest *req = hc->reading;
  WeftHttpRequest *prev = hc->pending_head;
  g_assert (hc->pending_tail == req && prev != req);
  while (prev->next != req)
    prev = prev->next;
  prev->next = NULL;
  hc->pending_tail = prev;
  hc->n_pending--;
  hc->reading = NULL;
  hc->body_paused = FALSE;
  g_clear_pointer (&req->in_body, g_byte_array_unref);
  atomic_store (&req->finish_called, TRUE);
  weft_http_request_drop (req);
  pending_release (hc, req);
}

/* The client sends no more: answer what it asked, then close; a request
 * cut off in its head or body is never answered. */
static void
end_of_input (HttpConn *hc)
{
  hc->input_ended = FALSE;
  hc->closing = TRUE;
  stop_timer (hc);
  if (hc->reading != NULL && weft_http_pending_peek (hc) != hc->reading)
    drop_cut_off (hc);
  if (hc->reading != NULL || (hc->n_pending == 0))
    weft_connection_close (hc->conn);
}

static void
on_event (WeftConnection *conn, WeftConnectionEvent event, const GError *error,
          gpointer user_data)
{
  HttpConn *hc = user_data;
  switch (event)
    {
    case WEFT_CONNECTION_EVENT_PEER_CLOSED:
      /* Requests the client sent before its end but that a pause holds
       * unparsed (a deep pipeline, then a half-close) are answered first:
       * on_data() ends the input once it has parsed them. */
      if (hc->held)
        hc->input_ended = TRUE;
      else
        end_of_input (hc);
      break;
    case WEFT_CONNECTION_EVENT_DRAINED:
      if (hc->active != NULL)
        weft_http_stream_pump (hc->active);
      if (hc->write_paused && !hc->closing && !hc->closed)
        {
          /* Room again: parse what is kept (the reader, installed anew,
           * gets it from a job). */
          hc->write_paused = FALSE;
          if (!hc->paused && !hc->body_paused)
            weft_connection_start_reading (conn, on_data, hc, NULL);
        }
      break;
    case WEFT_CONNECTION_EVENT_ERROR:
      break;
    case WEFT_CONNECTION_EVENT_CLOSED:
      hc->closed = TRUE;
      atomic_store (&hc->gone, TRUE);
      stop_timer (hc);
      drop_pending (hc);
      if (!hc->embedded)
        {
          pthread_mutex_lock (&hc->server->live_lock);
          g_hash_table_remove (hc->server->live, hc);
          pthread_mutex_unlock (&hc->server->live_lock);
        }
      break;
    }
}

/* ---- the counters ------------------------------------------------------- */

/* The calling thread's shard of @server's counters: its worker's if it is
 * one of the engine's workers, else the shared one. workers[i] runs on one
 * thread at a time (its own; for a GMainContext engine, which has no
 * threads, the thread dispatching that GMainContext, or the stop's drain,
 * which waits for that dispatch), so its shard has a single writer: the
 * engine's own per-worker counters rest on the same rule. The stand-in
 * worker that runs a context bound to a GMainContext
 * (weft_context_new_for_main_context()) is not in workers[]: shared. */
static WeftHttpStats *
stats_find (WeftHttpServer *server, WeftWorker *w)
{
  WeftEngine *e = server->engine;
  if (w != NULL && w->engine == e && w->index < server->n_workers &&
      w == &e->workers[w->index])
    return &server->stats[w->index];
  return &server->stats[server->n_workers];
}

/* The thread's last answer of stats_find(), for the server of that id
 * while the thread acted as that worker (an id, not the server's address:
 * a new server may have the address of a freed one). */
static _Thread_local WEFT_TLS_IE struct {
  guint64 id;
  WeftWorker *worker;
  WeftHttpStats *stats;
} tls_stats;

static inline WeftHttpStats *
stats_here (WeftHttpServer *server)
{
  WeftWorker *w = weft__worker_current ();
  if (G_LIKELY (tls_stats.id == server->stats_id && tls_stats.worker == w))
    return tls_stats.stats;
  tls_stats.stats = stats_find (server, w);
  tls_stats.id = server->stats_id;
  tls_stats.worker = w;
  return tls_stats.stats;
}

/* Adds one to @counter, in @st. */
static inline void
stats_bump (WeftHttpStats *st, _Atomic guint64 *counter)
{
  if (!st->shared)
    weft__own_counter_add (counter, 1); /* a worker's shard: its only writer */
  else
    atomic_fetch_add_explicit (counter, 1, memory_order_relaxed);
}

/* Counts a routed request. On the connection's context. */
static inline void
count_request (WeftHttpServer *server)
{
  WeftHttpStats *st = stats_here (server);
  stats_bump (st, &st->n_requests);
}

/* Sums one counter over the shards. Any thread. */
static guint64
stats_sum (WeftHttpServer *server, gsize offset)
{
  guint64 n = 0;
  for (guint i = 0; i <= server->n_workers; i++)
    n += atomic_load_explicit ((_Atomic guint64 *) ((guint8 *) &server->stats[i] + offset),
                               memory_order_relaxed);
  return n;
}

/* Counts a request whose answer has been queued whole. On the
 * connection's context; *now and *st are found once per flush. */
static void
account (HttpConn *hc, WeftHttpRequest *req, gint64 *now, WeftHttpStats **st)
{
  WeftHttpServer *server = hc->server;
  if (*st == NULL)
    *st = stats_here (server);
  WeftHttpStats *s = *st;
  /* (Status 100 to 599: class 0 is a slot no one reads.) */
  guint cls = req->status / 100;
  if (cls > 5)
    cls = 0;
  /* One clock read per flush, shared by the answers it writes. */
  if (*now == 0)
    *now = g_get_monotonic_time ();
  gint64 us = *now - req->start_us;
  guint b = us > 1 ? (guint) (63 - __builtin_clzll ((guint64) us)) : 0;
  if (b >= WEFT_HTTP_LATENCY_BUCKETS)
    b = WEFT_HTTP_LATENCY_BUCKETS - 1;
  if (G_LIKELY (!s->shared))
    {
      weft__own_counter_add (&s->n_status[cls], 1);
      weft__own_counter_add (&s->latency[b], 1);
    }
  else
    {
      atomic_fetch_add_explicit (&s->n_status[cls], 1, memory_order_relaxed);
      atomic_fetch_add_explicit (&s->latency[b], 1, memory_order_relaxed);
    }
  if (server->log != NULL)
    weft_http_access_log_add (server->log, req);
}

/* Inlined in its one caller, as it was before account() grew: a call
 * and its frame per flush. */
static inline __attribute__ ((always_inline)) void flush_ready_corked (HttpConn *hc);

/* After the last answer: the client may still be sending (a body refused
 * with 413, pipelined requests after a "Connection: close" one). Closing
 * with its bytes unread would reset the connection, and the reset may
 * destroy the answer before the client reads it; so the connection
 * lingers, dropping input, until the client closes too: at most
 * LINGER_MS and LINGER_MAX_BYTES (as nginx's lingering close). */
#define LINGER_MS 5000
#define LINGER_MAX_BYTES (64 * 1024 * 1024)

static void
close_lingering (HttpConn *hc)
{
  weft__connection_close_lingering (hc->conn, LINGER_MS, LINGER_MAX_BYTES, hc->linger_always);
}

/* Corked, so the answers of one flush leave in one system call (and a
 * write cannot close the connection under the loop). The caller keeps
 * @hc alive across the call (on_data() running, a reference on it or on
 * one of its requests, held by the caller or its job): @hc's reference
 * keeps the connection, which is all that is used once the loop closed
 * it. (No reference taken here: two locked instructions per request.) */
void
weft_http_flush_ready (HttpConn *hc)
{
  WeftConnection *conn = hc->conn;
  weft__connection_cork (conn);
  flush_ready_corked (hc);
  weft__connection_uncork (conn);
}

/* Writes the answers that are ready, oldest first, stopping at the first
 * that is not: pipelined answers never overtake each other. A streamed
 * answer stays at the head (hc->active) until it is finished. */
static inline __attribute__ ((always_inline)) void
flush_ready_corked (HttpConn *hc)
{
  WeftHttpRequest *req;
  gint64 now = 0;
  WeftHttpStats *st = NULL;
  while (!hc->closed && (req = weft_http_pending_peek (hc)) != NULL && req->ready)
    {
      if (req == hc->reading)
        {
          if (req->stream_body && !atomic_load (&req->body_wanted))
            {
              /* Answered without reading its body. Its handler may still
               * ask for it before it returns; after, the body (if the
               * client sends it at all) is not read, and the connection
               * closes after the answer. */
              if (atomic_load (&req->handler_thread) != NULL || req->coro_handler_running)
                break; /* its handler flushes again when it returns */
              weft_http_force_close (req);
              hc->reading = NULL;
              hc->closing = TRUE;
              hc->linger_always = TRUE; /* the body may still come */
              stop_timer (hc);
              weft_connection_stop_reading (hc->conn);
            }
          else if (!req->streaming)
            break; /* answered before its body was read: wait for the body */
        }
      /* A stream answering a body its handler asked for: the body's 100
       * (Continue) goes first, or its client, waiting for the 100, never
       * sends the body the stream waits for. */
      if (req == hc->reading)
        weft_http_send_continue (req);
      if (!req->head_sent)
        {
          /* Draining, no request will follow: an answer built before it
           * was known to be the last says so now. */
          if (hc->draining && (hc->closing || hc->drain_taken) && req == hc->pending_tail)
            weft_http_force_close (req);
          req->head_sent = TRUE;
          /* Copied where the connection would copy it anyway (pipelined
           * answers then share a chunk), without a GBytes around it. */
          if (req->resp_head_len < WEFT_CONNECTION_SMALL_COPY)
            weft_connection_write (hc->conn, (const guint8 *) req->resp_head,
                                   req->resp_head_len);
          else
            {
              /* (Never the request's spare room, which is smaller.) */
              g_assert (req->resp_head != req->resp_spare);
              GBytes *head = g_bytes_new_take (g_steal_pointer (&req->resp_head),
                                               req->resp_head_len);
              weft_connection_write_bytes (hc->conn, head);
              g_bytes_unref (head);
            }
          if (req->resp_body != NULL)
            weft_connection_write_bytes (hc->conn, req->resp_body);
          if (req->resp_fd >= 0 && req->resp_len > 0)
            {
              /* The connection takes the request's descriptor: a dup would
               * need a second one, and out of descriptors it failed after
               * the head had promised the length. */
              int fd = req->resp_fd;
              req->resp_fd = -1;
              if (!weft__connection_send_file_take (hc->conn, fd, req->resp_off, req->resp_len))
                {
                  /* The head promised a length: the connection cannot go on. */
                  g_info ("HTTP: sending a file failed: the connection is closed");
                  req->close_after = TRUE;
                }
            }
          /* A write that fails at once (a reset peer) closes the
           * connection under us: CLOSED has dropped the pending line, and
           * the queue's reference on req with it. */
          if (hc->closed)
            return;
        }
      if (req->streaming)
        {
          GBytes *b;
          while ((b = g_queue_pop_head (&req->stream_q)) != NULL)
            {
              weft_connection_write_bytes (hc->conn, b);
              g_bytes_unref (b);
            }
          if (hc->closed)
            return;
          if (!req->stream_done)
            {
              if (hc->active != req)
                {
                  hc->active = req;
                  weft_http_stream_pump (req);
                }
              break;
            }
          hc->active = NULL;
          if (!req->tail_sent)
            {
              static const char tail[] = "0\r\n\r\n";
              req->tail_sent = TRUE;
              if (req->chunked_out && !req->no_body_out)
                weft_connection_write (hc->conn, (const guint8 *) tail, sizeof tail - 1);
              weft_http_producer_release (req); /* a body still due keeps its reader */
            }
          if (hc->closed)
            return;
        }
      if (req == hc->reading)
        break; /* a stream answered while its body still arrives */
      weft_http_pending_pop (hc);
      account (hc, req, &now, &st);
      gboolean close = req->close_after;
      /* After the answer to a close its client asked for, the close
       * lingers (shut the write side, drop input until the client closes)
       * even with nothing unread yet, as RFC 9112 §9.6 advises: bytes the
       * client sends after it anyway would otherwise meet a closed socket,
       * whose reset can destroy the answer still on its way. (Refusals
       * set linger_always themselves; a 408 or a close of the server's
       * own, the drain's, lingers only on input already there: a slow
       * client would hold its slot longer.) */
      if (close && req->client_close && req->status != 408)
        hc->linger_always = TRUE;
      pending_release (hc, req);
      if (close)
        {
          hc->closing = TRUE;
          drop_pending (hc);
          close_lingering (hc);
          return;
        }
    }
  if (hc->closed)
    return;
  if (hc->closing && (hc->n_pending == 0))
    {
      close_lingering (hc);
      return;
    }
  /* A request that came behind others got no 100 (Continue) then (it
   * would have overtaken their answers): it is due now that the request
   * is the oldest, or its client, holding the body back for it, and the
   * server, waiting for the body, wait for each other (RFC 9110 §10.1.1).
   * A streamed body's 100 waits for its handler to ask for the body. */
  req = weft_http_pending_peek (hc);
  if (req != NULL && req == hc->reading && !hc->closing)
    weft_http_send_continue (req);
  if ((hc->n_pending == 0) && hc->reading == NULL && !hc->held)
    atomic_store_explicit (&hc->idle_since, now != 0 ? now : g_get_monotonic_time (),
                           memory_order_relaxed);
  if (hc->paused &&
      hc->n_pending < hc->server->limit[WEFT_HTTP_LIMIT_MAX_PIPELINE] / 2 + 1)
    {
      hc->paused = FALSE;
      weft_connection_start_reading (hc->conn, on_data, hc, NULL);
    }
}

/* ---- requests in -------------------------------------------------------- */

/* What on_data() is parsing, while it dispatches a bodiless request: a
 * coroutine handler that answered without waiting goes on with the
 * requests after it (see batch_next()). */
typedef struct _HttpBatch {
  const guint8 *data;
  gsize len;
  gsize consumed;            /* advanced by whoever takes a request */
  gint64 now;
  WeftHttpHeader *headers;   /* the parser's array, on on_data()'s stack */
  WeftHttpRequest *handoff;  /* taken by the coroutine, for on_data() to
                              * dispatch (not a coroutine handler's) */
} HttpBatch;

static WeftHttpRequest *batch_next (HttpConn *hc, HttpBatch *b);

/* A coroutine handler: runs in the connection's context, may wait. Its
 * data is the request (a reference), its handler the request's route's.
 * While it runs inside on_data() (it has not waited), it goes on with the
 * next requests of the same read that are for coroutine handlers too,
 * one after the other on its stack, already hot: a pipelined batch costs
 * one coroutine and no switch per request. It ends at the first request
 * it does not take, once its handler has waited (it was resumed by a job,
 * outside on_data()), or when someone else holds a reference to it. */
static gpointer
coro_handler (gpointer data)
{
  WeftHttpRequest *req = data;
  HttpConn *hc = req->hc;
  WeftCoro *self = weft_coro_self ();
  for (;;)
    {
      WeftHttpHandler func = (WeftHttpHandler) weft_http_route_get_handler (req->route);
      func (hc->server, req, weft_http_route_get_data (req->route));
      req->coro_handler_running = FALSE;
      if (!atomic_load (&req->responded))
        {
          g_info ("HTTP coroutine handler for %s %s returned without answering: 500",
                  req->method, req->path);
          weft_http_respond_self (req, 500, FALSE, FALSE);
        }
      else if (req->stream_body && req->ready && !hc->closed)
        weft_http_flush_ready (hc); /* what waited for the handler's return */
      /* Still inside on_data() (which holds hc)? Not after a wait: then hc
       * may go with the request, and is not touched again. */
      HttpBatch *b = hc->batch;
      if (hc->inline_req != req || b == NULL || !weft__coro_renew (self))
        return NULL; /* the notify drops the request */
      weft__coro_set_data (self, NULL);
      weft_http_request_unref (req);
      req = batch_next (hc, b);
      if (req == NULL)
        return NULL;
      weft__coro_set_data (self, req);
      req->coro_handler_running = TRUE;
      hc->inline_req = req;
    }
}

/* The handler's coroutine starts at once, here on the connection's
 * context, and runs until it first waits: a handler that answers without
 * waiting costs no job and answers as a callback handler does (in order,
 * written when the fd callback returns). After a wait it resumes from a
 * job, and its answer goes through a flush job. */
static void
spawn_handler (HttpConn *hc, WeftHttpRequest *req)
{
  /* The request may be answered, written and freed inside: the pending
   * line's reference goes with the flush, the coroutine's at its end. */
  req->coro_handler_running = TRUE;
  hc->inline_req = req;
  gboolean started = weft__coro_spawn_here (weft_http_conn_ctx (hc), coro_handler,
                                            weft_http_request_ref (req),
                                            (GDestroyNotify) weft_http_request_unref,
                                            hc->server->coro_stack);
  hc->inline_req = NULL;
  if (!started)
    {
      /* No stack, or the context is closing (the notify has run; the
       * pending line still holds the request). */
      req->coro_handler_running = FALSE;
      if (!atomic_load (&req->responded))
        weft_http_respond_self (req, 503, TRUE, FALSE);
    }
}

/* The server's own answer to a request no handler takes. */
static void
answer_unrouted (HttpConn *hc, WeftHttpRequest *req, guint status)
{
  /* A streamed-body one (a streamed-body route's, or one whose client
   * waits for a 100: see on_data_held()) is still the request being read,
   * so the flush inside the answer waited for the answering call to
   * return, as for a handler: flush now. (That request stays in the line
   * until then; another may be gone once answered.) */
  gboolean refused_body = req->stream_body;
  weft_http_respond_self (req, status, FALSE, TRUE);
  if (refused_body && !hc->closed)
    weft_http_flush_ready (hc);
}

static void
dispatch (HttpConn *hc, WeftHttpRequest *req)
{
  WeftHttpServer *server = hc->server;
  count_request (server);
  if (!known_method (req->method))
    {
      answer_unrouted (hc, req, 501);
      return;
    }
  switch (req->route_result)
    {
    case WEFT_HTTP_ROUTE_FOUND:
      break;
    case WEFT_HTTP_ROUTE_NOT_FOUND:
      answer_unrouted (hc, req, 404);
      return;
    case WEFT_HTTP_ROUTE_BAD_METHOD:
      weft_http_request_add_response_header (req, "Allow", req->allow->str);
      answer_unrouted (hc, req, 405);
      return;
    case WEFT_HTTP_ROUTE_BAD_PATH:
      answer_unrouted (hc, req, 400);
      return;
    }
  WeftHttpHandler func = (WeftHttpHandler) weft_http_route_get_handler (req->route);
  if (weft_http_route_get_flags (req->route) & WEFT_HTTP_HANDLER_COROUTINE)
    {
      spawn_handler (hc, req);
      return;
    }
  /* The handler's answer may be written, or the connection closed, inside
   * it: either pops the request from the pending line, whose reference
   * then passes to us (req->held) instead of going, so the request
   * outlives the call without a reference of our own (two locked
   * instructions per request). A request is dispatched once: no nesting. */
  req->held = 1;
  /* Relaxed: only the thread that stores its token compares with it. */
  atomic_store_explicit (&req->handler_thread, weft_http_this_thread (), memory_order_relaxed);
  func (server, req, weft_http_route_get_data (req->route));
  atomic_store_explicit (&req->handler_thread, NULL, memory_order_relaxed);
  guint8 held = req->held;
  req->held = 0;
  if (req->stream_body && req->ready && !hc->closed)
    weft_http_flush_ready (hc); /* what waited for the handler's return (not
                                 * req if the line let go of it) */
  if (held == 2)
    weft__http_request_unref_here (req);
}

/* A request-level error: answer @status in order and close after it. */
static void
fail_request (HttpConn *hc, guint status)
{
  WeftHttpRequest *req = hc->reading;
  if (req == NULL)
    {
      req = weft_http_request_new (hc);
      req->start_us = g_get_monotonic_time ();
      /* A refused HEAD gets no content either (RFC 9110 §9.3.2): its
       * client would take the body for the next answer. */
      req->is_head = hc->head_refused;
      weft_http_pending_push (hc, req);
    }
  hc->reading = NULL;
  hc->closing = TRUE;
  /* The rest of what it sends is refused: linger, so the answer survives.
   * Not for a timeout: a client that slow has little in flight, and a
   * slowloris would only hold its slot longer. */
  hc->linger_always = status != 408;
  stop_timer (hc);
  weft_connection_stop_reading (hc->conn);
  GDestroyNotify body_notify = NULL;
  gpointer body_data = NULL;
  if (req->body_func != NULL && !req->body_done)
    {
      /* A streamed body that will not end: its reader hears of it at the
       * end of this function (its notify runs), once the answer is out.
       * Not when the request is freed: a handler that holds the request
       * while it waits for the body (a coroutine on a condition) would
       * wait for ever, and hold the connection's context with it (found
       * by fuzz-http-connection). */
      req->body_done = TRUE;
      body_notify = weft_http_take_body_reader (req, &body_data);
    }
  /* Claimed in one step: a handler on another thread may answer between
   * a test and the claim; then its answer is finished here. */
  if (!weft_http_respond_self (req, status, TRUE, FALSE))
    {
      if (!req->ready)
        /* Its head may still be in the making there: its attach job,
         * which follows, finishes it as below. */
        req->failed = TRUE;
      else
        {
          weft_http_fail_answered (req);
          weft_http_flush_ready (hc);
        }
    }
  if (body_notify != NULL)
    body_notify (body_data);
}

/* On the context, for a request answered before its body failed, its
 * answer here: close after it, and say so if its head is not out yet
 * (else the client may send its next request into the close). */
void
weft_http_fail_answered (WeftHttpRequest *req)
{
  if (!req->head_sent)
    weft_http_force_close (req);
  req->close_after = TRUE;
  req->ready = TRUE;
  if (req->streaming && !req->stream_done)
    {
      /* A stream cut off by its own request's failure ends here,
       * without the last chunk: the close then tells its client the
       * answer is incomplete (RFC 9112 §8), where "0\r\n\r\n" passed
       * what was written so far for the whole body. */
      req->stream_done = TRUE;
      req->tail_sent = TRUE;
      atomic_store (&req->finish_called, TRUE);
      weft_http_producer_release (req);
    }
}

/* The timers' fail_request(): the timer holds no reference, and the
 * answer's flush may close the connection, dropping the last (see
 * weft_http_flush_ready()). */
static void
fail_request_held (HttpConn *hc, guint status)
{
  weft_http_conn_ref (hc);
  fail_request (hc, status);
  weft_http_conn_unref (hc);
}

static gboolean
header_timed_out (gpointer data)
{
  HttpConn *hc = data;
  hc->timer = 0;
  fail_request_held (hc, 408);
  return G_SOURCE_REMOVE;
}

/* Once a second while a body arrives: too long without a byte, or too slow
 * on average once the body has taken longer than the body timeout, is a
 * 408 (small bodies never meet the rate rule). A streamed body that its
 * handler has not asked for yet is not the client's delay, nor is a body
 * held back for a 100 (Continue) not sent yet. */
static gboolean
body_check (gpointer data)
{
  HttpConn *hc = data;
  WeftHttpRequest *req = hc->reading; /* armed for it, stopped when it ends */
  const guint64 *limit = hc->server->limit;
  gint64 now = g_get_monotonic_time ();
  if (req == NULL)
    {
      hc->timer = 0;
      return G_SOURCE_REMOVE;
    }
  if (hc->body_paused ||
      (req->expect_continue && req->in_bytes == 0 && !atomic_load (&req->responded) &&
       (weft_http_pending_peek (hc) != req ||
        (req->stream_body && !atomic_load (&req->body_wanted)))))
    {
      /* Its client waits for the 100 (Continue), which is due once the
       * answers before it are out and, for a streamed body, once its
       * handler asks for the body (weft_http_send_continue()): not the
       * client's delay either. */
      req->in_start_us = req->in_last_us = now;
      return G_SOURCE_CONTINUE;
    }
  gboolean idle = limit[WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS] != 0 &&
                  now - req->in_last_us >= (gint64) limit[WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS] * 1000;
  gint64 elapsed = now - req->in_start_us;
  gint64 grace = limit[WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS] != 0
                     ? (gint64) limit[WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS] * 1000
                     : BODY_RATE_GRACE_US;
  gboolean slow = limit[WEFT_HTTP_LIMIT_BODY_MIN_RATE] != 0 && elapsed >= grace &&
                  (double) req->in_bytes * G_USEC_PER_SEC / (double) elapsed <
                      (double) limit[WEFT_HTTP_LIMIT_BODY_MIN_RATE];
  if (!idle && !slow)
    return G_SOURCE_CONTINUE;
  hc->timer = 0;
  fail_request_held (hc, 408);
  return G_SOURCE_REMOVE;
}

/* Keep-alive: no timer per connection (an idle connection should cost
 * little memory). One sweep for the whole server, every quarter of the
 * shorter of the keep-alive and header timeouts, on a context of its own,
 * finds the connections idle too long (idle_limit_us()) and posts each a
 * job that checks again on its own context and closes it. A connection
 * closes between 1 and 1.25 times its limit idle. */
typedef struct _HttpSweep {
  gint ref_count;         /* the server's and the timer's: either may go first */
  pthread_mutex_t lock;
  WeftHttpServer *server; /* HOLDS: lock; NULL once the server is gone */
  gint64 prev_now;        /* HOLDS: lock; when the previous sweep began (0: none) */
} HttpSweep;

/* How long @hc may stay idle, in microseconds (0: for ever). One that has
 * sent nothing since it was accepted is a request head that has not begun:
 * the header timeout applies when it is the shorter, so a client that
 * connects and stays silent is gone as soon as a slowloris would be.
 * @server is passed, not read from @hc: the sweep also meets HttpConns not
 * set up yet (all zero, server NULL), and reads only atomics of them. */
static gint64
idle_limit_us (WeftHttpServer *server, HttpConn *hc)
{
  const guint64 *limit = server->limit;
  guint64 ka = limit[WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS];
  guint64 head = limit[WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS];
  if (head != 0 && (ka == 0 || head < ka) &&
      atomic_load_explicit (&hc->silent, memory_order_relaxed))
    return (gint64) head * 1000;
  return (gint64) ka * 1000;
}

/* From the sweep's thread: whether @hc has been idle past its limit. An
 * HttpConn not set up yet reads idle_since 0, as busy. */
static gboolean
idle_expired (WeftHttpServer *server, HttpConn *hc, gint64 now)
{
  gint64 since = atomic_load_explicit (&hc->idle_since, memory_order_relaxed);
  if (since == 0)
    return FALSE;
  gint64 limit = idle_limit_us (server, hc);
  return limit != 0 && now - since >= limit;
}

static void
keepalive_close (HttpConn *hc, gint64 prev_now)
{
  gint64 limit = idle_limit_us (hc->server, hc);
  gint64 since = atomic_load_explicit (&hc->idle_since, memory_order_relaxed);
  if (hc->closed || since == 0 || limit == 0 || hc->timer != 0 || hc->n_pending != 0 ||
      hc->reading != NULL || g_get_monotonic_time () - since < limit)
    return;
  /* Still sending (a large file to a slow client): not idle, whatever
   * the clock says, which runs from when the last answer was queued.
   * Reading pauses while the queue is high, so a request the client sent
   * meanwhile is read, and answered, once it is low; a client that takes
   * nothing is the write timeout's. The clock starts again now. */
  if (weft_connection_get_write_queued (hc->conn) > 0)
    {
      atomic_store_explicit (&hc->idle_since, g_get_monotonic_time (), memory_order_relaxed);
      return;
    }
  /* Expired before the previous sweep began, yet still open: that sweep's
   * walk did not find it (a close job of its own would have run first on
   * this context, and set closing). */
  if (!hc->closing && prev_now != 0 && since + limit <= prev_now)
    atomic_fetch_add_explicit (&hc->server->sweep_missed, 1, memory_order_relaxed);
  hc->closing = TRUE;
  /* The last of an answer may still be in the socket buffer, with a
   * request sent meanwhile unread: a close with unread input makes the
   * kernel reset the connection and destroy that tail. The close lingers
   * if input is there, as the other closes do. */
  close_lingering (hc);
}

/* The HttpConn in the allocation of @conn (an accepted connection), on
 * its context: NULL unless it is set up and open. A closed connection's
 * HttpConn may be gone (its memory stays with the connection's). */
static HttpConn *
embedded_hc (WeftConnection *conn)
{
  HttpConn *hc = weft__connection_get_data (conn);
  if (hc == NULL || weft_connection_is_closed (conn) || atomic_load (&hc->ref_count) == 0)
    return NULL; /* (0: on_accept() has not run yet, a TLS handshake goes on) */
  return hc;
}

/* A sweep's close job: an accepted connection (@conn, its HttpConn in its
 * allocation) or an adopted one's HttpConn (@hc), with a reference, and
 * when the sweep before the one that posted it began. */
typedef struct {
  WeftConnection *conn;
  HttpConn *hc;
  gint64 prev_now;
} SweepClose;

static void
keepalive_close_job (gpointer data)
{
  SweepClose *sc = data;
  HttpConn *hc = sc->hc != NULL ? sc->hc : embedded_hc (sc->conn);
  if (hc != NULL)
    keepalive_close (hc, sc->prev_now);
}

static void
sweep_close_free (gpointer data)
{
  SweepClose *sc = data;
  if (sc->hc != NULL)
    weft_http_conn_unref (sc->hc);
  else
    weft_connection_unref (sc->conn);
  g_free (sc);
}

/* Posts the close job to @ctx; takes the reference on @conn or @hc. */
static void
post_sweep_close (WeftContext *ctx, WeftConnection *conn, HttpConn *hc, gint64 prev_now)
{
  SweepClose *sc = g_new (SweepClose, 1);
  sc->conn = conn;
  sc->hc = hc;
  sc->prev_now = prev_now;
  weft__context_post_continuation (ctx, keepalive_close_job, sc, sweep_close_free);
}

guint
weft__http_server_sweep_missed (WeftHttpServer *server)
{
  return atomic_load (&server->sweep_missed);
}

typedef struct {
  WeftHttpServer *server;
  gint64 now;
} SweepAt;

/* A WeftConnectionFilter: reads only atomics of the HttpConn (see
 * idle_expired()). */
static gboolean
conn_idle_expired (WeftConnection *conn, gpointer data)
{
  SweepAt *at = data;
  HttpConn *hc = weft__connection_get_data (conn);
  return hc != NULL && idle_expired (at->server, hc, at->now);
}

static gboolean
keepalive_sweep (gpointer data)
{
  HttpSweep *sw = data;
  pthread_mutex_lock (&sw->lock);
  WeftHttpServer *server = sw->server;
  if (server != NULL)
    {
      SweepAt at = { server, g_get_monotonic_time () };
      gint64 now = at.now;
      /* Accepted connections hold their HttpConn (no set of them: the
       * listener finds them); only adopted ones are in server->live. Only
       * the expired ones are collected: an array of every connection per
       * tick grew the heap by 8 bytes per idle connection. */
      GPtrArray *conns =
        weft__listener_live_connections_where (server->listener, conn_idle_expired, &at);
      for (guint i = 0; i < conns->len; i++)
        {
          WeftConnection *conn = conns->pdata[i];
          post_sweep_close (weft_connection_get_context (conn), weft_connection_ref (conn), NULL,
                            sw->prev_now);
        }
      g_ptr_array_unref (conns);
      pthread_mutex_lock (&server->live_lock);
      GHashTableIter it;
      gpointer key;
      g_hash_table_iter_init (&it, server->live);
      while (g_hash_table_iter_next (&it, &key, NULL))
        {
          HttpConn *hc = key;
          if (idle_expired (server, hc, now))
            post_sweep_close (weft_http_conn_ctx (hc), NULL, weft_http_conn_ref (hc),
                              sw->prev_now);
        }
      pthread_mutex_unlock (&server->live_lock);
      sw->prev_now = now;
    }
  pthread_mutex_unlock (&sw->lock);
  return G_SOURCE_CONTINUE;
}

static void
sweep_unref (gpointer data)
{
  HttpSweep *sw = data;
  if (!g_atomic_int_dec_and_test (&sw->ref_count))
    return;
  pthread_mutex_destroy (&sw->lock);
  g_free (sw);
}

static void
start_sweep (WeftHttpServer *self)
{
  /* Every quarter of the shorter idle limit: a connection goes 1 to 1.25
   * times its limit after it fell idle (30 to 37.5 s by default; 20 to
   * 25 s for a connection that never sent a byte). */
  guint64 ka = self->limit[WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS];
  guint64 head = self->limit[WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS];
  if (head != 0 && (ka == 0 || head < ka))
    ka = head;
  if (ka == 0)
    return;
  HttpSweep *sw = g_new0 (HttpSweep, 1);
  sw->ref_count = 2;
  pthread_mutex_init (&sw->lock, NULL);
  sw->server = self;
  self->sweep = sw;
  self->sweep_ctx = weft_context_new (self->engine);
  if (weft_context_add_timeout (self->sweep_ctx, (guint) MAX (ka / 4, 1), keepalive_sweep, sw,
                                sweep_unref) == 0)
    sweep_unref (sw); /* the context is closed already: no timer */
  weft_context_dispatch (self->sweep_ctx);
}

static void
stop_sweep (WeftHttpServer *self)
{
  if (self->sweep == NULL)
    return;
  /* A sweep running now finishes first; later ones see no server. (The
   * engine may have closed the sweep's context already, freeing the
   * timer's reference: the server keeps its own.) */
  pthread_mutex_lock (&self->sweep->lock);
  self->sweep->server = NULL;
  pthread_mutex_unlock (&self->sweep->lock);
  weft_context_destroy (self->sweep_ctx);
  weft_context_unref (self->sweep_ctx);
  sweep_unref (self->sweep);
  self->sweep = NULL;
  self->sweep_ctx = NULL;
}

/* A slice of the head at @buf as a C string in the copy: the byte after
 * every slice is a separator (SP, '?', ':', CR or whitespace) the request
 * no longer needs, so it becomes the NUL. A slice that does not point into
 * the head (the parser's literal "/" for "http://host") gives @fallback. */
static inline const char *
cut (WeftHttpRequest *req, const char *buf, gsize head_len, WeftHttpSlice s,
     const char *fallback)
{
  /* Compared as unsigned: a slice before @buf wraps to a large offset. */
  gsize off = (gsize) ((guintptr) s.ptr - (guintptr) buf);
  if (off > head_len || s.len > head_len - off)
    return fallback;
  char *p = req->head + off;
  p[s.len] = '\0';
  return p;
}

/* A complete head at @buf: the request it describes, routed and queued.
 * Inlined in both callers: on_data()'s loop runs it for every request. */
static inline __attribute__ ((always_inline)) WeftHttpRequest *
take_head (HttpConn *hc, const char *buf, gsize head_len, WeftHttpHead *head, gint64 now)
{
  /* The header slices, then the head's bytes: after the request, or in
   * a block of their own for a large head. */
  gsize n = head->n_headers;
  WeftHttpRequest *req = weft_http_request_new_for_head (hc, n, head_len);
  req->start_us = now;
  memcpy (req->head, buf, head_len);
  req->head[head_len] = '\0';
  /* Rebase the header slices onto the copy and cut every slice out in
   * place (no slice starts at another's terminator). One pass, the
   * parser's slices read into locals first: the terminators are char
   * stores, which the compiler must assume may change them. */
  const WeftHttpHeader *from = head->headers;
  WeftHttpHeader *to = req->headers;
  char *copy = req->head;
  for (gsize i = 0; i < n; i++)
    {
      WeftHttpHeader h = from[i];
      char *name = copy + (h.name.ptr - buf);
      char *value = copy + (h.value.ptr - buf);
      to[i].name.ptr = name;
      to[i].name.len = h.name.len;
      to[i].value.ptr = value;
      to[i].value.len = h.value.len;
      name[h.name.len] = '\0';
      value[h.value.len] = '\0';
    }
  req->n_headers = n;
  req->method = cut (req, buf, head_len, head->method, "");
  req->path = cut (req, buf, head_len, head->path, "/");
  req->query = cut (req, buf, head_len, head->query, "");
  req->minor = head->minor_version;
  req->keep_alive = head->keep_alive && !hc->closing;
  req->client_close = !head->keep_alive;
  req->is_head = req->method[0] == 'H' && strcmp (req->method, "HEAD") == 0;
  /* RFC 9110 §10.1.1: a 100-continue expectation in an HTTP/1.0 request
   * MUST be ignored (and §15.2: no 1xx to an HTTP/1.0 client). */
  req->expect_continue = head->expect_continue && head->minor_version >= 1;
  req->has_body = head->body != WEFT_HTTP_BODY_NONE;
  /* The parser knows the lengths and whether the path has escapes. */
  gboolean escaped = head->path_escaped;
  req->route_result = weft_http_router_match_sized (
      hc->server->router, req->method, head->method.len, req->path, head->path.len, escaped,
      &req->route, &req->params, &req->n_params, NULL);
  if (req->route_result == WEFT_HTTP_ROUTE_BAD_METHOD)
    {
      /* Rare: match again, collecting the Allow list. */
      req->allow = g_string_new (NULL);
      weft_http_router_match_sized (hc->server->router, req->method, head->method.len,
                                    req->path, head->path.len, escaped, &req->route,
                                    &req->params, &req->n_params, req->allow);
    }
  req->stream_body = req->route != NULL &&
                     (weft_http_route_get_flags (req->route) & WEFT_HTTP_HANDLER_STREAM_BODY);
  weft_http_pending_push (hc, req);
  return req;
}

/* Feeds body bytes to the request being read; returns how many it took,
 * or -1 after failing the request. */
static gssize
take_body (HttpConn *hc, const guint8 *data, gsize len)
{
  WeftHttpRequest *req = hc->reading;
  req->in_last_us = g_get_monotonic_time ();
  if (!req->in_chunked)
    {
      gsize n = (gsize) MIN ((guint64) len, req->in_left);
      req->in_left -= n;
      req->in_bytes += n;
      if (req->stream_body)
        {
          if (n > 0)
            weft_http_body_deliver (req, data, n, FALSE);
        }
      else
        g_byte_array_append (req->in_body, data, (guint) n);
      return (gssize) n;
    }
  gsize used_total = 0;
  for (;;)
    {
      const char *piece;
      gsize piece_len;
      gboolean done;
      guint status;
      gssize used = weft_http_chunked_decode (&req->in_dec, (const char *) data + used_total,
                                              len - used_total, &piece, &piece_len, &done,
                                              &status);
      if (used == WEFT_HTTP_ERROR)
        {
          fail_request (hc, status);
          return -1;
        }
      if (piece_len > 0)
        {
          req->in_bytes += piece_len;
          if (req->stream_body)
            weft_http_body_deliver (req, (const guint8 *) piece, piece_len, FALSE);
          else
            g_byte_array_append (req->in_body, (const guint8 *) piece, (guint) piece_len);
          if (hc->closed || hc->reading != req)
            return -1; /* the reader closed or failed the request */
        }
      used_total += (gsize) used;
      if (done)
        {
          req->in_left = 0;
          req->in_chunked = FALSE;
          return (gssize) used_total;
        }
      if (used == 0)
        {
          req->in_left = 1; /* more to come */
          return (gssize) used_total;
        }
    }
}

static void
body_complete (HttpConn *hc)
{
  WeftHttpRequest *req = hc->reading;
  hc->reading = NULL;
  stop_timer (hc);
  if (req->stream_body)
    {
      weft_http_body_deliver (req, NULL, 0, TRUE);
      if (!hc->closed)
        weft_http_flush_ready (hc);
      return;
    }
  req->body = g_byte_array_free_to_bytes (req->in_body);
  req->in_body = NULL;
  if (atomic_load (&req->responded))
    {
      /* Answered before its body ended (refused early): it may go now. */
      weft_http_flush_ready (hc);
      return;
    }
  dispatch (hc, req);
}

/* A streamed body's handler asked for it: read on. */
void
weft_http_resume_body (HttpConn *hc)
{
  if (hc->closed || !hc->body_paused)
    return;
  hc->body_paused = FALSE;
  /* Only a body not begun is paused: its clock starts now. */
  if (hc->reading != NULL)
    hc->reading->in_start_us = hc->reading->in_last_us = g_get_monotonic_time ();
  weft_connection_start_reading (hc->conn, on_data, hc, NULL);
}

static void
start_body (HttpConn *hc, WeftHttpRequest *req, const WeftHttpHead *head)
{
  const guint64 *limit = hc->server->limit;
  hc->reading = req;
  req->in_chunked = head->body == WEFT_HTTP_BODY_CHUNKED;
  req->in_bytes = 0;
  req->in_start_us = req->in_last_us = req->start_us;
  if (req->in_chunked)
    {
      weft_http_chunked_init (&req->in_dec, limit[WEFT_HTTP_LIMIT_MAX_BODY_BYTES]);
      req->in_left = 1;
    }
  else
    req->in_left = head->content_length;
  if (!req->stream_body)
    req->in_body = g_byte_array_sized_new (
        (guint) MIN (req->in_chunked ? 0 : head->content_length, 65536));
  if (limit[WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS] != 0 || limit[WEFT_HTTP_LIMIT_BODY_MIN_RATE] != 0)
    hc->timer =
        weft_context_add_timeout (weft_http_conn_ctx (hc), BODY_CHECK_MS, body_check, hc, NULL);
}

/* Shutdown, at a request boundary: read no more, answer what was taken
 * (the last answer says "Connection: close" unless it is on its way
 * already: see flush_ready_corked()), then close; idle, at once. Bytes of
 * a request not taken are refused: the close lingers, so that its client
 * meets a FIN, not a reset that could destroy the answers before it reads
 * them, and knows from the close before any answer that the request was
 * never taken (it may retry it, RFC 9112 9.3.1). */
static void
drain_stop (HttpConn *hc)
{
  hc->closing = TRUE;
  hc->linger_always = hc->unparsed;
  stop_timer (hc);
  weft_connection_stop_reading (hc->conn);
  if (hc->n_pending == 0)
    close_lingering (hc);
}

/* The newest request is whole and its client asked for the close: what
 * the client sends after it is not processed (RFC 9112 §9.6). */
static inline gboolean
after_client_close (HttpConn *hc)
{
  return hc->pending_tail != NULL && hc->pending_tail->client_close;
}

/* More input came after a whole request whose client asked for the
 * close: read no more; the close lingers (drops that input) after the
 * answers due. */
static void
close_after_client_close (HttpConn *hc)
{
  hc->closing = TRUE;
  hc->linger_always = TRUE;
  stop_timer (hc);
  weft_connection_stop_reading (hc->conn);
}

/* On a connection's context during shutdown. A request whose bytes have
 * begun to arrive (its body, or part of its head) is read to its end and
 * answered, as the connection's last; the connection stops at the
 * boundary after it (see on_data()). */
static void
wind_down_job (gpointer data)
{
  HttpConn *hc = data;
  if (hc->closed || hc->closing || hc->draining)
    return;
  hc->draining = TRUE;
  if (hc->reading != NULL)
    hc->drain_taken = TRUE;
  else if (!hc->unparsed)
    drain_stop (hc);
}

/* From any thread: @hc winds down on its own context. */
static void
post_wind_down (HttpConn *hc)
{
  weft__context_post_continuation (weft_http_conn_ctx (hc), wind_down_job, weft_http_conn_ref (hc),
                                   (GDestroyNotify) weft_http_conn_unref);
}

static void
wind_down_conn_job (gpointer data)
{
  HttpConn *hc = embedded_hc (data);
  if (hc != NULL)
    wind_down_job (hc);
}

/* TRUE if @data is only CR and LF: empty lines between requests, which
 * RFC 9112 §2.2 lets a server ignore; they begin no request. */
static gboolean
only_empty_lines (const guint8 *data, gsize len)
{
  for (gsize i = 0; i < len; i++)
    if (data[i] != '\r' && data[i] != '\n')
      return FALSE;
  return TRUE;
}

/* For a coroutine handler's coroutine, inside on_data(), its handler
 * done: takes the next request of the read if nothing stops on_data()
 * there, it is whole and bodiless, and it is for a coroutine handler:
 * returns it (a reference for the coroutine), counted. Anything else is
 * left to on_data(), which parses it again: NULL. A request taken but not
 * for a coroutine handler (a callback handler may need more stack than a
 * coroutine has) is handed back to on_data() in b->handoff. */
static WeftHttpRequest *
batch_next (HttpConn *hc, HttpBatch *b)
{
  WeftHttpServer *server = hc->server;
  /* on_data()'s reasons to stop, or to take more care (the drain). */
  if (b->consumed >= b->len || hc->closing || hc->closed || hc->reading != NULL ||
      hc->draining || weft_connection_is_write_blocked (hc->conn) ||
      after_client_close (hc) ||
      hc->n_pending >= server->limit[WEFT_HTTP_LIMIT_MAX_PIPELINE])
    return NULL;
  WeftHttpHead head;
  guint status = 0;
  const char *at = (const char *) b->data + b->consumed;
  gssize r = weft_http_parse_request (at, b->len - b->consumed, &server->limits, &head,
                                      b->headers, MAX_HEADERS, &status);
  if (r < 0 || head.body != WEFT_HTTP_BODY_NONE)
    return NULL;
  stop_timer (hc);
  WeftHttpRequest *req = take_head (hc, at, (gsize) r, &head, b->now);
  b->consumed += (gsize) r;
  if (!req->stream_body)
    req->body = weft__http_empty_body;
  if (req->route_result != WEFT_HTTP_ROUTE_FOUND || req->stream_body ||
      !(weft_http_route_get_flags (req->route) & WEFT_HTTP_HANDLER_COROUTINE) ||
      !known_method (req->method))
    {
      b->handoff = req;
      return NULL;
    }
  count_request (server);
  return weft_http_request_ref (req);
}

static gsize on_data_held (WeftConnection *conn, const guint8 *data, gsize len, HttpConn *hc);

/* Held for the call: a handler's answer, a flush or the drain may close
 * the connection inside, and CLOSED drops the connection's reference. A
 * local reference (see weft_http_conn_ref_local()): no locked instruction
 * unless the connection closed inside, when the close has made it a plain
 * one. */
static gsize
on_data (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  HttpConn *hc = user_data;
  gboolean local = weft_http_conn_ref_local (hc);
  gsize consumed = on_data_held (conn, data, len, hc);
  if (G_LIKELY (local))
    weft_http_conn_unref_local (hc, TRUE);
  else
    weft_http_conn_unref (hc);
  return consumed;
}

/* Writes the answers on_data held back (see attach()), if any. */
static void
flush_deferred (HttpConn *hc)
{
  if (!hc->flush_due)
    return;
  hc->flush_due = FALSE;
  if (!hc->closed)
    weft_http_flush_ready (hc);
}

static gsize
on_data_held (WeftConnection *conn, const guint8 *data, gsize len, HttpConn *hc)
{
  WeftHttpServer *server = hc->server;
  gsize consumed = 0;
  WeftHttpHeader headers[MAX_HEADERS];
  gint64 now = g_get_monotonic_time (); /* one read for the heads of one read */

  atomic_store_explicit (&hc->idle_since, 0, memory_order_relaxed);
  atomic_store_explicit (&hc->silent, FALSE, memory_order_relaxed);
  hc->held = FALSE; /* what a pause held comes first in @data */
  while (consumed < len && !hc->closing && !hc->closed)
    {
      if (hc->reading != NULL)
        {
          WeftHttpRequest *req = hc->reading;
          if (req->stream_body && !atomic_load (&req->body_wanted))
            {
              /* Its handler has not asked for the body (yet). */
              hc->body_paused = TRUE;
              hc->held = TRUE;
              weft_connection_stop_reading (conn);
              break;
            }
          gssize n = take_body (hc, data + consumed, len - consumed);
          if (n < 0 || hc->closed || hc->reading != req)
            {
              flush_deferred (hc);
              return len;
            }
          consumed += (gsize) n;
          if (req->in_left > 0)
            break; /* wait for more */
          body_complete (hc);
          continue;
        }
      if (hc->drain_taken)
        break; /* draining, and the last request is in: the rest is refused */
      if (after_client_close (hc))
        {
          /* What it sent after is only dropped, by the lingering close
           * once that request is answered (its handler may answer
           * later). */
          close_after_client_close (hc);
          break;
        }
      if (weft_connection_is_write_blocked (conn))
        {
          /* The client takes its answers slower than it asks: parse no
           * more until they drain, or every request of one read (thousands
           * of small ones) would be answered into memory at once. */
          hc->write_paused = TRUE;
          hc->held = TRUE;
          break;
        }
      if (hc->n_pending >= server->limit[WEFT_HTTP_LIMIT_MAX_PIPELINE])
        {
          if (hc->flush_due)
            {
              /* Answered, only not written yet: write them and look again
               * (flush_due is clear now, so this is taken once). */
              flush_deferred (hc);
              continue;
            }
          /* Enough unanswered requests: read on once they are answered. */
          hc->paused = TRUE;
          hc->held = TRUE;
          weft_connection_stop_reading (conn);
          break;
        }
      WeftHttpHead head;
      guint status = 0;
      gssize r = weft_http_parse_request ((const char *) data + consumed, len - consumed,
                                          &server->limits, &head, headers, MAX_HEADERS, &status);
      if (r < 0) /* not taken: a timeout or a refusal answers it */
        hc->head_refused = head.method.len == 4 && memcmp (head.method.ptr, "HEAD", 4) == 0;
      if (r == WEFT_HTTP_INCOMPLETE)
        {
          if (hc->timer == 0 && server->limit[WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS] != 0)
            hc->timer = weft_context_add_timeout (
                weft_http_conn_ctx (hc), (guint) server->limit[WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS],
                header_timed_out, hc, NULL);
          break;
        }
      if (r == WEFT_HTTP_ERROR)
        {
          fail_request (hc, status);
          flush_deferred (hc);
          return len;
        }
      stop_timer (hc);
      WeftHttpRequest *req = take_head (hc, (const char *) data + consumed, (gsize) r, &head, now);
      consumed += (gsize) r;
      if (hc->draining)
        {
          hc->drain_taken = TRUE;
          req->keep_alive = FALSE;
        }
      if (head.body == WEFT_HTTP_BODY_NONE)
        {
          /* Not for a streamed-body handler, even with no body: its
           * get_body() is NULL, as documented (its read_body() ends at
           * once). Found by fuzz-http-connection. */
          if (!req->stream_body)
            req->body = weft__http_empty_body;
          if (req->route == NULL ||
              !(weft_http_route_get_flags (req->route) & WEFT_HTTP_HANDLER_COROUTINE))
            {
              hc->flush_defer = TRUE;
              dispatch (hc, req);
              hc->flush_defer = FALSE;
              continue;
            }
          /* Its coroutine handler may take the requests after it (and
           * hand back one that is not for it). */
          HttpBatch batch = { data, len, consumed, now, headers, NULL };
          hc->batch = &batch;
          hc->flush_defer = TRUE; /* (its answers too: one flush after the read) */
          dispatch (hc, req);
          while (batch.handoff != NULL)
            {
              req = batch.handoff;
              batch.handoff = NULL;
              dispatch (hc, req);
            }
          hc->flush_defer = FALSE;
          hc->batch = NULL;
          consumed = batch.consumed;
          continue;
        }
      /* No handler will take it (404, 405, 501, a bad path) and its client
       * holds the body back for a 100 (Continue), none of it here yet:
       * answered at once, without the 100 or the body (RFC 9110 §10.1.1),
       * the way a streamed-body handler's refusal is, and closed after, as
       * the client may or may not send the body then. (A body that came
       * with the head is read and skipped, as without Expect.) */
      if (req->expect_continue && consumed == len && !req->stream_body &&
          (req->route_result != WEFT_HTTP_ROUTE_FOUND || !known_method (req->method)))
        req->stream_body = TRUE;
      start_body (hc, req, &head);
      if (req->stream_body)
        dispatch (hc, req); /* the handler decides whether to read the body */
      else if (consumed == len)
        weft_http_send_continue (req);
    }
  flush_deferred (hc);
  hc->unparsed = consumed < len && !only_empty_lines (data + consumed, len - consumed);
  /* Draining: stop once the request begun is whole. */
  if (hc->draining && !hc->closing && !hc->closed && hc->reading == NULL &&
      (hc->drain_taken || !hc->unparsed))
    drain_stop (hc);
  if (hc->input_ended && !hc->held && !hc->closing && !hc->closed)
    end_of_input (hc); /* the requests held are parsed: now the client's end */
  return consumed;
}

/* The event function's notify: the connection is closed. On its context
 * (see finish_close() in weft-connection.c), where local_refs is kept. */
static void
hc_free_notify (gpointer data)
{
  conn_merge_local (data);
}

/* A reference unless the last one is gone already. */
static gboolean
server_try_ref (WeftHttpServer *self)
{
  gint n = g_atomic_int_get (&self->ref_count);
  while (n > 0)
    if (__atomic_compare_exchange_n (&self->ref_count, &n, n + 1, TRUE, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
      return TRUE;
  return FALSE;
}

static void
server_core_unref (gpointer data)
{
  WeftHttpServer *self = data;
  if (g_atomic_int_dec_and_test (&self->core_refs))
    g_free (self);
}

static void
on_accept (WeftListener *listener, WeftConnection *conn, gpointer user_data)
{
  WeftHttpServer *server = user_data;
  /* The listener calls no more after its last reference went, but that
   * is not always the server's (the application may hold the listener),
   * and a call begun before may still run on another worker while the
   * server's last reference goes (its memory is the listener's until
   * then): the connection is refused. */
  if (!server_try_ref (server))
    {
      weft_connection_abort (conn);
      return;
    }
  /* In the connection's allocation when the listener made room for it. */
  HttpConn *hc = weft__connection_get_data (conn);
  if (hc != NULL)
    hc->embedded = TRUE;
  else
    hc = g_new0 (HttpConn, 1);
  /* Atomic: the sweeps look at it from other threads (embedded_hc()). The
   * event function's reference is the local side's. */
  hc->local_refs = 0;
  atomic_store (&hc->ref_count, WEFT_HTTP_CONN_LOCAL);
  hc->server = server; /* the reference taken above */
  hc->conn = weft_connection_ref (conn);
  weft_connection_set_event_func (conn, on_event, hc, hc_free_notify);
  if (!hc->embedded)
    {
      pthread_mutex_lock (&server->live_lock);
      g_hash_table_add (server->live, hc);
      pthread_mutex_unlock (&server->live_lock);
    }
  /* Accepted as the shutdown began, after its sweep over the live set:
   * the lock (for an embedded HttpConn, the sequentially consistent
   * marking of its context's tail against the shutdown's store, then its
   * look at the tails) orders this read after the flag's store. Its job
   * there may have found the HttpConn not set up yet; two winds-down are
   * one. */
  if (atomic_load (&server->stopping))
    post_wind_down (hc);
  atomic_store_explicit (&hc->silent, TRUE, memory_order_relaxed);
  atomic_store_explicit (&hc->idle_since, g_get_monotonic_time (), memory_order_relaxed);
  if (server->limit[WEFT_HTTP_LIMIT_WRITE_TIMEOUT_MS] != 0)
    weft_connection_set_write_timeout (conn, (guint) server->limit[WEFT_HTTP_LIMIT_WRITE_TIMEOUT_MS]);
  /* Answers are whole messages written at once: Nagle could only hold
   * back the last segment of one behind an unacknowledged previous one. */
  int one = 1;
  setsockopt (weft_connection_get_fd (conn), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  /* The log's peer, asked for now: the line of a stream cut off is
   * written once the connection is closed (drop_pending()), when it can
   * no longer be asked, and said "-". */
  if (server->log != NULL)
    weft__connection_peer_text (conn);
  weft_connection_start_reading (conn, on_data, hc, NULL);
}

guint
weft__http_server_n_live (WeftHttpServer *self)
{
  guint n = 0;
  GPtrArray *conns = weft__listener_live_connections (self->listener);
  for (guint i = 0; i < conns->len; i++)
    {
      HttpConn *hc = weft__connection_get_data (conns->pdata[i]);
      if (hc != NULL && atomic_load (&hc->ref_count) > 0 && !atomic_load (&hc->gone))
        n++;
    }
  g_ptr_array_unref (conns);
  pthread_mutex_lock (&self->live_lock);
  n += g_hash_table_size (self->live);
  pthread_mutex_unlock (&self->live_lock);
  return n;
}

/* Serves @conn as if the listener had accepted it: for
 * tests/fuzz/fuzz-http-connection.c, which drives a socketpair through the
 * real state machine. Same rules as on_accept(): on @conn's context, or
 * before that context is dispatched; @self started. */
void
weft__http_server_adopt (WeftHttpServer *self, WeftConnection *conn)
{
  g_return_if_fail (self != NULL && self->started);
  on_accept (self->listener, conn, self);
}

/* ---- the server --------------------------------------------------------- */

/**
 * weft_http_server_new:
 * @engine: the engine whose workers serve the connections; it must
 *   outlive the server (the server does not keep a reference)
 *
 * Creates an HTTP/1.1 server. Add sockets (and TLS) through
 * weft_http_server_get_listener(), handlers with
 * weft_http_server_add_handler(), then call weft_http_server_start().
 * Limits and timeouts have safe defaults (see #WeftHttpLimit).
 *
 * Returns: (transfer full): a new server
 */
WeftHttpServer *
weft_http_server_new (WeftEngine *engine)
{
  g_return_val_if_fail (engine != NULL, NULL);
  WeftHttpServer *self = g_new0 (WeftHttpServer, 1);
  self->ref_count = 1;
  self->core_refs = 2; /* the public side's and the listener's */
  /* Borrowed, like the listener's: connections keep the server alive and
   * may drop it on a worker, where an engine must not die. */
  self->engine = engine;
  self->router = weft_http_router_new ();
  ensure_empty_body ();
  memcpy (self->limit, default_limit, sizeof self->limit);
  self->coro_stack = 32 * 1024; /* handlers' coroutines: little stack, many at once */
  self->listener = weft_listener_new (engine, on_accept, self, server_core_unref);
  weft__listener_set_connection_data_size (self->listener, sizeof (HttpConn));
  pthread_mutex_init (&self->live_lock, NULL);
  self->live = g_hash_table_new (NULL, NULL);
  /* A shard per worker and the shared one (see stats_here()). */
  self->n_workers = weft_engine_get_n_workers (engine);
  self->stats = weft__aligned_alloc (self->n_workers + 1, sizeof (WeftHttpStats),
                                     G_ALIGNOF (WeftHttpStats), TRUE);
  self->stats[self->n_workers].shared = TRUE;
  static atomic_uint_fast64_t last_stats_id;
  self->stats_id = atomic_fetch_add (&last_stats_id, 1) + 1;
  return self;
}

/**
 * weft_http_server_ref:
 * @self: a server
 *
 * Takes a reference on @self; drop it with weft_http_server_unref(). Any
 * thread.
 *
 * Returns: (transfer full): @self
 */
WeftHttpServer *
weft_http_server_ref (WeftHttpServer *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_atomic_int_inc (&self->ref_count);
  return self;
}

/**
 * weft_http_server_unref:
 * @self: (transfer full) (nullable): a server
 *
 * Drops a reference. Live connections hold their own; to stop serving,
 * use weft_http_server_shutdown().
 */
void
weft_http_server_unref (WeftHttpServer *self)
{
  if (self == NULL)
    return;
  if (!g_atomic_int_dec_and_test (&self->ref_count))
    return;
  stop_sweep (self);
  weft_listener_unref (self->listener);
  weft_http_router_free (self->router);
  if (self->log != NULL)
    weft_http_access_log_free (self->log);
  g_hash_table_unref (self->live);
  pthread_mutex_destroy (&self->live_lock);
  g_aligned_free (self->stats);
  server_core_unref (self);
}

/**
 * weft_http_server_get_listener:
 * @self: a server
 *
 * The listener that accepts the server's connections: add addresses to it
 * (weft_listener_add_tcp() and friends) and set TLS on it.
 *
 * Returns: (transfer none): the listener
 */
WeftListener *
weft_http_server_get_listener (WeftHttpServer *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->listener;
}

/**
 * weft_http_server_add_handler_full:
 * @self: a server, not started yet
 * @method: (nullable): the method to serve ("GET", "POST", ...), or %NULL
 *   for any; a GET handler also answers HEAD (the first route in order
 *   that fits wins). Other methods than GET, HEAD, POST, PUT, DELETE,
 *   OPTIONS, PATCH, TRACE and CONNECT get 501, so a handler for one is
 *   refused
 * @path: the path pattern: segments separated by '/', each literal or a
 *   whole `{name}` segment (read with weft_http_request_get_param()),
 *   optionally ending in a star for a prefix ("/static/" then "*"); or
 *   exactly "*" for `OPTIONS *`
 * @flags: how the handler gets the body
 * @func: (scope notified) (closure user_data) (destroy notify): the handler
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data with the server
 *
 * Routes matching requests to @func. The first matching handler, in the
 * order they were added, serves a request. Literal segments match the
 * percent-decoded path. Without a match the answer is 404, or 405 (with
 * Allow) if other methods have a handler for the path; a malformed or NUL
 * percent-escape in a segment gets 400.
 */
void
weft_http_server_add_handler_full (WeftHttpServer *self, const gchar *method, const gchar *path,
                                   WeftHttpHandlerFlags flags, WeftHttpHandler func,
                                   gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (path != NULL && path[0] != '\0');
  g_return_if_fail (func != NULL);
  g_return_if_fail (!self->started);
  /* A method the server answers 501 to would never reach the route, yet
   * be listed in 405s' Allow (an empty one made that list loop for ever,
   * one with CR LF made the Allow header refused). */
  if (method != NULL && !known_method (method))
    {
      g_critical ("weft_http_server_add_handler: method \"%s\" is never served "
                  "(use GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE or CONNECT)",
                  method);
      return;
    }
  if (!weft_http_router_add (self->router, method, path, flags, func, user_data, notify))
    g_critical ("weft_http_server_add_handler: malformed path pattern \"%s\"", path);
}

/**
 * weft_http_server_add_handler:
 * @self: a server, not started yet
 * @method: (nullable): the method, or %NULL for any
 * @path: the path pattern (see weft_http_server_add_handler_full())
 * @func: (scope notified) (closure user_data) (destroy notify): the handler
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data with the server
 *
 * weft_http_server_add_handler_full() with %WEFT_HTTP_HANDLER_DEFAULT:
 * the handler runs once the whole body has arrived.
 */
void
weft_http_server_add_handler (WeftHttpServer *self, const gchar *method, const gchar *path,
                              WeftHttpHandler func, gpointer user_data, GDestroyNotify notify)
{
  weft_http_server_add_handler_full (self, method, path, WEFT_HTTP_HANDLER_DEFAULT, func,
                                     user_data, notify);
}

/**
 * weft_http_server_set_limit:
 * @self: a server, not started yet
 * @limit: which limit
 * @value: its new value (see #WeftHttpLimit for units and defaults)
 *
 * Sets one of the server's limits or timeouts.
 */
void
weft_http_server_set_limit (WeftHttpServer *self, WeftHttpLimit limit, guint64 value)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail ((guint) limit <= WEFT_HTTP_LIMIT_MAX_PIPELINE);
  g_return_if_fail (!self->started);
  switch (limit)
    {
    case WEFT_HTTP_LIMIT_MAX_HEADERS:
      g_return_if_fail (value >= 1 && value <= MAX_HEADERS);
      break;
    case WEFT_HTTP_LIMIT_MAX_PIPELINE:
    case WEFT_HTTP_LIMIT_MAX_TARGET_BYTES:
    case WEFT_HTTP_LIMIT_MAX_HEAD_BYTES:
      g_return_if_fail (value >= 1);
      break;
    case WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS:
    case WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS:
    case WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS:
    case WEFT_HTTP_LIMIT_WRITE_TIMEOUT_MS:
    case WEFT_HTTP_LIMIT_MAX_CONNECTIONS:
      g_return_if_fail (value <= G_MAXUINT);
      break;
    default:
      break;
    }
  self->limit[limit] = value;
}

/**
 * weft_http_server_get_limit:
 * @self: a server
 * @limit: which limit
 *
 * Gets one of the server's limits or timeouts, in the units of
 * #WeftHttpLimit: the default unless weft_http_server_set_limit() (or
 * weft_http_server_set_max_body() or weft_http_server_set_timeouts())
 * changed it. Any thread.
 *
 * Returns: the limit's value
 */
guint64
weft_http_server_get_limit (WeftHttpServer *self, WeftHttpLimit limit)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail ((guint) limit <= WEFT_HTTP_LIMIT_MAX_PIPELINE, 0);
  return self->limit[limit];
}

/**
 * weft_http_server_set_max_body:
 * @self: a server, not started yet
 * @max_bytes: the largest request body accepted; larger ones get 413
 *
 * Sets %WEFT_HTTP_LIMIT_MAX_BODY_BYTES.
 */
void
weft_http_server_set_max_body (WeftHttpServer *self, guint64 max_bytes)
{
  weft_http_server_set_limit (self, WEFT_HTTP_LIMIT_MAX_BODY_BYTES, max_bytes);
}

/**
 * weft_http_server_set_timeouts:
 * @self: a server, not started yet
 * @request_ms: the header timeout and the body timeout (408 after them);
 *   0 for none
 * @keepalive_ms: how long a connection between requests is kept; 0 for
 *   ever
 *
 * Sets %WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS, %WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS
 * and %WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS.
 */
void
weft_http_server_set_timeouts (WeftHttpServer *self, guint request_ms, guint keepalive_ms)
{
  weft_http_server_set_limit (self, WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS, request_ms);
  weft_http_server_set_limit (self, WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS, request_ms);
  weft_http_server_set_limit (self, WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS, keepalive_ms);
}

/**
 * weft_http_server_start:
 * @self: a server with at least one socket on its listener
 * @error: return location for a #GError
 *
 * Starts accepting. Handlers and limits are fixed from now on.
 *
 * Returns: %TRUE on success
 */
gboolean
weft_http_server_start (WeftHttpServer *self, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  g_return_val_if_fail (!self->started, FALSE);
  self->started = TRUE;
  weft_http_limits_init (&self->limits);
  self->limits.max_target = (gsize) self->limit[WEFT_HTTP_LIMIT_MAX_TARGET_BYTES];
  self->limits.max_head = (gsize) self->limit[WEFT_HTTP_LIMIT_MAX_HEAD_BYTES];
  self->limits.max_headers = (gsize) self->limit[WEFT_HTTP_LIMIT_MAX_HEADERS];
  self->limits.max_body = self->limit[WEFT_HTTP_LIMIT_MAX_BODY_BYTES];
  weft_listener_set_max_connections (self->listener,
                                     (guint) self->limit[WEFT_HTTP_LIMIT_MAX_CONNECTIONS]);
  if (!weft_listener_start (self->listener, error))
    return FALSE;
  start_sweep (self);
  return TRUE;
}

/**
 * weft_http_server_get_n_requests:
 * @self: a server
 *
 * Counts the requests that reached routing, those answered 404, 405 or
 * 501 included; a request whose handler streams the body counts once its
 * head has arrived. Requests the server refuses itself (malformed, over a
 * limit, timed out) are not counted. Any thread.
 *
 * Returns: the requests routed since the server started
 */
guint64
weft_http_server_get_n_requests (WeftHttpServer *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return stats_sum (self, G_STRUCT_OFFSET (WeftHttpStats, n_requests));
}

/**
 * weft_http_server_get_status_json:
 * @self: a server
 *
 * The server's counters as a JSON object: requests, answers by status
 * class, a latency histogram (from a request's head to its answer being
 * queued whole, in power-of-two microsecond buckets), live connections,
 * and the engine's stats. This is what `examples/weft-httpd` serves at
 * `/_weft/status`.
 *
 * Returns: (transfer full): the JSON text
 */
gchar *
weft_http_server_get_status_json (WeftHttpServer *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  WeftEngineStats st;
  weft_engine_get_stats (self->engine, &st);
  GString *s = g_string_new ("{\n");
  g_string_append_printf (s,
                          "  \"requests\": %" G_GUINT64_FORMAT ",\n"
                          "  \"connections\": {\"live\": %u, \"accepted\": %" G_GUINT64_FORMAT
                          ", \"tls_failed\": %" G_GUINT64_FORMAT "},\n",
                          stats_sum (self, G_STRUCT_OFFSET (WeftHttpStats, n_requests)),
                          weft_listener_get_n_connections (self->listener),
                          weft_listener_get_n_accepted (self->listener),
                          weft_listener_get_n_tls_failed (self->listener));
  g_string_append (s, "  \"responses\": {");
  for (guint c = 1; c <= 5; c++)
    g_string_append_printf (s, "%s\"%uxx\": %" G_GUINT64_FORMAT, c > 1 ? ", " : "", c,
                            stats_sum (self, G_STRUCT_OFFSET (WeftHttpStats, n_status) + c * sizeof (guint64)));
  g_string_append (s, "},\n  \"latency_us\": [");
  gboolean first = TRUE;
  for (guint b = 0; b < WEFT_HTTP_LATENCY_BUCKETS; b++)
    {
      guint64 n = stats_sum (self, G_STRUCT_OFFSET (WeftHttpStats, latency) + b * sizeof (guint64));
      if (n == 0)
        continue;
      /* Bucket b holds latencies below 2^(b+1) µs (the last: the rest). */
      if (b + 1 < WEFT_HTTP_LATENCY_BUCKETS)
        g_string_append_printf (s, "%s{\"le\": %" G_GUINT64_FORMAT ", \"count\": %" G_GUINT64_FORMAT "}",
                                first ? "" : ", ", (guint64) 1 << (b + 1), n);
      else
        g_string_append_printf (s, "%s{\"le\": null, \"count\": %" G_GUINT64_FORMAT "}",
                                first ? "" : ", ", n);
      first = FALSE;
    }
  g_string_append_printf (s,
                          "],\n  \"engine\": {\"workers\": %u, \"sleeping\": %u, \"contexts\": %"
                          G_GUINT64_FORMAT ", \"jobs_run\": %" G_GUINT64_FORMAT
                          ", \"polls\": %" G_GUINT64_FORMAT ", \"wakeups\": %" G_GUINT64_FORMAT
                          ", \"fd_events\": %" G_GUINT64_FORMAT ", \"timers_fired\": %"
                          G_GUINT64_FORMAT "}\n}\n",
                          st.n_workers, st.n_sleeping, st.n_contexts, st.jobs_run, st.polls,
                          st.wakeups, st.fd_events, st.timers_fired);
  return g_string_free (s, FALSE);
}

/**
 * weft_http_server_shutdown:
 * @self: a started server
 * @timeout_ms: how long requests in flight may take to finish
 * @func: (scope notified) (closure user_data) (destroy notify) (nullable):
 *   called once no connection is left (see #WeftListenerDoneFunc)
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data
 *
 * Graceful stop, from any thread: stops accepting, closes idle keep-alive
 * connections at once, lets requests in flight be answered (each answer
 * then closes its connection), and aborts what is left after @timeout_ms.
 */
void
weft_http_server_shutdown (WeftHttpServer *self, guint timeout_ms, WeftListenerDoneFunc func,
                           gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  atomic_store (&self->stopping, TRUE);
  GPtrArray *conns = weft__listener_live_connections (self->listener);
  for (guint i = 0; i < conns->len; i++)
    {
      WeftConnection *conn = conns->pdata[i];
      weft__context_post_continuation (weft_connection_get_context (conn), wind_down_conn_job,
                                       weft_connection_ref (conn),
                                       (GDestroyNotify) weft_connection_unref);
    }
  g_ptr_array_unref (conns);
  pthread_mutex_lock (&self->live_lock);
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init (&it, self->live);
  while (g_hash_table_iter_next (&it, &key, NULL))
    post_wind_down (key);
  pthread_mutex_unlock (&self->live_lock);
  weft_listener_shutdown (self->listener, timeout_ms, func, user_data, notify);
}
