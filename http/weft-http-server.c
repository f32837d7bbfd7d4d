/* weft-http-server.c: HTTP/1.1 on connections (RFC 9112).
 *
 * Each accepted connection gets an HttpConn on its own context. Bytes are
 * read in raw mode: the parser (weft-http-parser.c) looks at the
 * connection's buffer in place, and only a complete head is copied, once,
 * into the request it becomes. Requests are answered strictly in arrival
 * order (pipelining): each waits in hc->pending until its response is
 * attached, and only the oldest is ever written. A handler may answer at
 * once, later, or from another thread; an answer from elsewhere than the
 * handler's own call is posted to the connection's context.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-http-server.h"
#include "weft-http-parser.h"
#include "weft-connection.h"
#include "weft-context.h"
#include "weft-engine.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEADERS 100
#define DEFAULT_REQUEST_TIMEOUT_MS 20000  /* head and body: slowloris */
#define DEFAULT_KEEPALIVE_MS 30000
#define MAX_PIPELINE 32                   /* parsed, unanswered requests */
#define BIG_BODY 16384                    /* bodies above: written by reference */

G_DEFINE_BOXED_TYPE (WeftHttpServer, weft_http_server, weft_http_server_ref,
                     weft_http_server_unref)
G_DEFINE_BOXED_TYPE (WeftHttpRequest, weft_http_request, weft_http_request_ref,
                     weft_http_request_unref)

typedef struct {
  gchar *method; /* NULL: any */
  gchar *path;
  gboolean prefix; /* the pattern ended with '*' */
  WeftHttpHandler func;
  gpointer data;
  GDestroyNotify notify;
} Route;

struct _WeftHttpServer {
  gint ref_count;
  WeftEngine *engine;
  WeftListener *listener;
  GPtrArray *routes; /* fixed once started: read without a lock */
  WeftHttpLimits limits;
  guint request_timeout_ms;
  guint keepalive_ms;
  gboolean started;
  _Atomic guint64 n_requests;
  atomic_bool stopping;      /* no more keep-alive: close after each answer */
  pthread_mutex_t live_lock;
  GHashTable *live;          /* HttpConn set; HOLDS: live_lock */
};

typedef struct _HttpConn HttpConn;

struct _WeftHttpRequest {
  gint ref_count;
  HttpConn *hc;             /* ref */
  char *head;               /* the head's bytes, slices NUL-terminated in place */
  const char *method;
  const char *path;
  const char *query;
  WeftHttpHeader *headers;  /* into head */
  gsize n_headers;
  GBytes *body;
  guint minor;
  gboolean keep_alive;
  gboolean is_head;         /* HEAD: no body in the response */
  gboolean expect_continue;
  GString *extra;           /* response headers added by the handler */

  /* The answer; set once (responded), written in arrival order. */
  atomic_int responded;
  GThread *_Atomic handler_thread; /* set while its handler runs */
  GBytes *resp_head;
  GBytes *resp_body;
  int resp_fd;              /* a file body (owned), or -1 */
  guint64 resp_off;
  guint64 resp_len;
  gboolean ready;           /* on the context: resp_* attached */
  gboolean close_after;
};

struct _HttpConn {
  gint ref_count;
  WeftHttpServer *server;
  WeftConnection *conn;
  WeftContext *ctx;
  GQueue pending;           /* WeftHttpRequest, oldest first, one ref each */
  WeftHttpRequest *reading; /* the newest request, while its body arrives */
  guint64 body_left;
  gboolean chunked;
  WeftHttpChunked dec;
  GByteArray *body;
  guint timer;              /* request timeout */
  gboolean closing;         /* read no more; close after the queued answers */
  gboolean closed;
  gboolean paused;          /* reading stopped: too many unanswered requests */
};

static void flush_ready (HttpConn *hc);
static gsize on_data (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data);

/* ---- small things ------------------------------------------------------- */

static const char *
reason (guint status)
{
  switch (status)
    {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

/* The Date header's value, formatted once a second per thread (the C
 * locale's names, whatever the process locale). */
static const char *
http_date (void)
{
  static __thread time_t cached_sec = -1;
  static __thread char buf[40];
  time_t now = time (NULL);
  if (now != cached_sec)
    {
      static const char days[][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
      static const char months[][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
      struct tm tm;
      gmtime_r (&now, &tm);
      snprintf (buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
                tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                tm.tm_sec);
      cached_sec = now;
    }
  return buf;
}

static gboolean
known_method (const char *m)
{
  static const char *const known[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS",
                                       "PATCH", "TRACE", "CONNECT" };
  for (guint i = 0; i < G_N_ELEMENTS (known); i++)
    if (strcmp (m, known[i]) == 0)
      return TRUE;
  return FALSE;
}

/* ---- the connection state ---------------------------------------------- */

static HttpConn *
hc_ref (HttpConn *hc)
{
  g_atomic_int_inc (&hc->ref_count);
  return hc;
}

static void
hc_unref (HttpConn *hc)
{
  if (!g_atomic_int_dec_and_test (&hc->ref_count))
    return;
  g_assert (g_queue_is_empty (&hc->pending));
  if (hc->body != NULL)
    g_byte_array_unref (hc->body);
  weft_connection_unref (hc->conn);
  weft_http_server_unref (hc->server);
  g_free (hc);
}

static WeftHttpRequest *
request_new (HttpConn *hc)
{
  WeftHttpRequest *req = g_new0 (WeftHttpRequest, 1);
  req->ref_count = 1;
  req->hc = hc_ref (hc);
  req->method = req->path = req->query = "";
  req->resp_fd = -1;
  return req;
}

/* Drops everything still queued: the connection is gone. */
static void
drop_pending (HttpConn *hc)
{
  WeftHttpRequest *req;
  while ((req = g_queue_pop_head (&hc->pending)) != NULL)
    weft_http_request_unref (req);
  hc->reading = NULL;
}

static void
stop_timer (HttpConn *hc)
{
  if (hc->timer != 0)
    {
      weft_context_remove (hc->ctx, hc->timer);
      hc->timer = 0;
    }
}

static void
on_event (WeftConnection *conn, WeftConnectionEvent event, const GError *error,
          gpointer user_data)
{
  HttpConn *hc = user_data;
  if (event == WEFT_CONNECTION_EVENT_PEER_CLOSED)
    {
      /* The client sends no more: answer what it asked, then close; a
       * request cut off in its body is never answered. */
      hc->closing = TRUE;
      stop_timer (hc);
      if (hc->reading != NULL || g_queue_is_empty (&hc->pending))
        weft_connection_close (conn);
    }
  else if (event == WEFT_CONNECTION_EVENT_CLOSED)
    {
      hc->closed = TRUE;
      stop_timer (hc);
      drop_pending (hc);
      pthread_mutex_lock (&hc->server->live_lock);
      g_hash_table_remove (hc->server->live, hc);
      pthread_mutex_unlock (&hc->server->live_lock);
    }
}

/* ---- answers ------------------------------------------------------------ */

/* Builds the answer on the caller's thread (pure work, no connection
 * state), so answering from another thread costs the context one job. */
static void
build_response (WeftHttpRequest *req, guint status, const char *content_type, const guint8 *body,
                gsize len, GBytes *body_bytes)
{
  if (body_bytes != NULL)
    len = g_bytes_get_size (body_bytes);
  if (req->resp_fd >= 0)
    len = (gsize) req->resp_len;
  /* During a shutdown every answer is the connection's last. */
  gboolean last = !req->keep_alive || atomic_load (&req->hc->server->stopping);
  req->close_after = last;
  GString *s = g_string_sized_new (160 + (req->extra != NULL ? req->extra->len : 0) +
                                   (body_bytes == NULL && !req->is_head ? len : 0));
  g_string_append_printf (s, "HTTP/1.1 %u %s\r\nDate: %s\r\n", status, reason (status),
                          http_date ());
  if (content_type != NULL)
    g_string_append_printf (s, "Content-Type: %s\r\n", content_type);
  /* Every answer is delimited; 1xx, 204 and 304 carry no length. */
  if (status != 204 && status != 304)
    g_string_append_printf (s, "Content-Length: %" G_GSIZE_FORMAT "\r\n", len);
  if (req->extra != NULL)
    g_string_append_len (s, req->extra->str, (gssize) req->extra->len);
  if (last)
    g_string_append (s, "Connection: close\r\n");
  else if (req->minor == 0)
    g_string_append (s, "Connection: keep-alive\r\n");
  g_string_append (s, "\r\n");
  if (req->is_head || status == 204 || status == 304)
    {
      /* No body: a file given for it is not needed. */
      if (req->resp_fd >= 0)
        {
          close (req->resp_fd);
          req->resp_fd = -1;
        }
    }
  else if (req->resp_fd < 0)
    {
      if (body_bytes != NULL && len > BIG_BODY)
        req->resp_body = g_bytes_ref (body_bytes);
      else if (body_bytes != NULL)
        g_string_append_len (s, g_bytes_get_data (body_bytes, NULL), (gssize) len);
      else if (len > 0)
        g_string_append_len (s, (const char *) body, (gssize) len);
    }
  req->resp_head = g_string_free_to_bytes (s);
}

static void
attach_job (gpointer data)
{
  WeftHttpRequest *req = data;
  HttpConn *hc = req->hc;
  req->ready = TRUE;
  if (!hc->closed)
    flush_ready (hc);
}

static void
respond_common (WeftHttpRequest *req, guint status, const char *content_type,
                const guint8 *body, gsize len, GBytes *body_bytes)
{
  if (atomic_exchange (&req->responded, 1))
    {
      g_critical ("weft_http_request_respond: request already answered");
      return;
    }
  build_response (req, status, content_type, body, len, body_bytes);
  HttpConn *hc = req->hc;
  if (atomic_load (&req->handler_thread) == g_thread_self ())
    {
      /* Inside its handler, on the connection's context. */
      req->ready = TRUE;
      if (!hc->closed)
        flush_ready (hc);
      return;
    }
  weft_context_post (hc->ctx, attach_job, weft_http_request_ref (req),
                     (GDestroyNotify) weft_http_request_unref);
}

/* An answer the server gives itself (errors, 404), on the context. */
static void
respond_self (WeftHttpRequest *req, guint status, gboolean close)
{
  if (close)
    req->keep_alive = FALSE;
  char text[64];
  int n = g_snprintf (text, sizeof text, "%u %s\n", status, reason (status));
  /* Answering writes it out and may drop the queue's reference. */
  weft_http_request_ref (req);
  atomic_store (&req->handler_thread, g_thread_self ());
  respond_common (req, status, "text/plain", (const guint8 *) text, (gsize) n, NULL);
  atomic_store (&req->handler_thread, NULL);
  weft_http_request_unref (req);
}

/* Writes the answers that are ready, oldest first, stopping at the first
 * that is not: pipelined answers never overtake each other. */
static void
flush_ready (HttpConn *hc)
{
  WeftHttpRequest *req;
  while (!hc->closed && (req = g_queue_peek_head (&hc->pending)) != NULL && req->ready)
    {
      if (req == hc->reading)
        break; /* answered before its body was read: wait for the body */
      g_queue_pop_head (&hc->pending);
      weft_connection_write_bytes (hc->conn, req->resp_head);
      if (req->resp_body != NULL)
        weft_connection_write_bytes (hc->conn, req->resp_body);
      if (req->resp_fd >= 0 && req->resp_len > 0)
        {
          GError *error = NULL;
          if (!weft_connection_send_file (hc->conn, req->resp_fd, req->resp_off, req->resp_len,
                                          &error))
            {
              /* The head promised a length: the connection cannot go on. */
              g_info ("HTTP: sending a file failed: %s", error->message);
              g_error_free (error);
              req->close_after = TRUE;
            }
        }
      gboolean close = req->close_after;
      weft_http_request_unref (req);
      if (close)
        {
          hc->closing = TRUE;
          drop_pending (hc);
          weft_connection_close (hc->conn);
          return;
        }
    }
  if (hc->closed)
    return;
  if (hc->closing && g_queue_is_empty (&hc->pending))
    {
      weft_connection_close (hc->conn);
      return;
    }
  if (hc->paused && g_queue_get_length (&hc->pending) < MAX_PIPELINE / 2)
    {
      hc->paused = FALSE;
      weft_connection_start_reading (hc->conn, on_data, hc, NULL);
    }
}

/* ---- requests in -------------------------------------------------------- */

static const Route *
find_route (WeftHttpServer *server, const char *method, const char *path)
{
  const Route *fallback = NULL;
  for (guint i = 0; i < server->routes->len; i++)
    {
      const Route *r = server->routes->pdata[i];
      gboolean path_ok = r->prefix ? g_str_has_prefix (path, r->path) : strcmp (path, r->path) == 0;
      if (!path_ok)
        continue;
      if (r->method == NULL || strcmp (r->method, method) == 0)
        return r;
      /* HEAD is GET without the body (RFC 9110 §9.3.2). */
      if (fallback == NULL && strcmp (method, "HEAD") == 0 && strcmp (r->method, "GET") == 0)
        fallback = r;
    }
  return fallback;
}

static void
dispatch (HttpConn *hc, WeftHttpRequest *req)
{
  WeftHttpServer *server = hc->server;
  atomic_fetch_add_explicit (&server->n_requests, 1, memory_order_relaxed);
  if (hc->reading == req)
    hc->reading = NULL;
  stop_timer (hc);
  if (!known_method (req->method))
    {
      respond_self (req, 501, FALSE);
      return;
    }
  const Route *route = find_route (server, req->method, req->path);
  if (route == NULL)
    {
      respond_self (req, 404, FALSE);
      return;
    }
  weft_http_request_ref (req);
  atomic_store (&req->handler_thread, g_thread_self ());
  route->func (server, req, route->data);
  atomic_store (&req->handler_thread, NULL);
  weft_http_request_unref (req);
}

/* A request-level error: answer @status in order and close after it. */
static void
fail_request (HttpConn *hc, guint status)
{
  WeftHttpRequest *req = hc->reading;
  if (req == NULL)
    {
      req = request_new (hc);
      g_queue_push_tail (&hc->pending, req);
    }
  hc->reading = NULL;
  hc->closing = TRUE;
  stop_timer (hc);
  weft_connection_stop_reading (hc->conn);
  if (!atomic_load (&req->responded))
    respond_self (req, status, TRUE);
  else
    {
      /* Already answered (before its body ended): close after it. */
      req->close_after = TRUE;
      req->ready = TRUE;
      flush_ready (hc);
    }
}

static gboolean
request_timed_out (gpointer data)
{
  HttpConn *hc = data;
  hc->timer = 0;
  fail_request (hc, 408);
  return G_SOURCE_REMOVE;
}

/* A slice of the head at @buf as a C string in the copy: the byte after
 * every slice is a separator (SP, '?', ':', CR or whitespace) the request
 * no longer needs, so it becomes the NUL. A slice that does not point into
 * the head (the parser's literal "/" for "http://host") gives @fallback. */
static const char *
cut (WeftHttpRequest *req, const char *buf, gsize head_len, WeftHttpSlice s,
     const char *fallback)
{
  if (s.ptr < buf || s.ptr > buf + head_len || (gsize) (s.ptr - buf) + s.len > head_len)
    return fallback;
  char *p = req->head + (s.ptr - buf);
  p[s.len] = '\0';
  return p;
}

/* A complete head at @buf: the request it describes, queued. */
static WeftHttpRequest *
take_head (HttpConn *hc, const char *buf, gsize head_len, WeftHttpHead *head)
{
  WeftHttpRequest *req = request_new (hc);
  req->head = g_malloc (head_len + 1);
  memcpy (req->head, buf, head_len);
  req->head[head_len] = '\0';
  /* Rebase the header slices onto the copy, then cut every slice out in
   * place (no slice starts at another's terminator). */
  gsize n = head->n_headers;
  req->headers = g_new (WeftHttpHeader, MAX (n, 1));
  for (gsize i = 0; i < n; i++)
    {
      req->headers[i].name.ptr = req->head + (head->headers[i].name.ptr - buf);
      req->headers[i].name.len = head->headers[i].name.len;
      req->headers[i].value.ptr = req->head + (head->headers[i].value.ptr - buf);
      req->headers[i].value.len = head->headers[i].value.len;
    }
  req->n_headers = n;
  req->method = cut (req, buf, head_len, head->method, "");
  req->path = cut (req, buf, head_len, head->path, "/");
  req->query = cut (req, buf, head_len, head->query, "");
  for (gsize i = 0; i < n; i++)
    {
      char *name = (char *) req->headers[i].name.ptr;
      char *value = (char *) req->headers[i].value.ptr;
      name[req->headers[i].name.len] = '\0';
      value[req->headers[i].value.len] = '\0';
    }
  req->minor = head->minor_version;
  req->keep_alive = head->keep_alive && !hc->closing && !atomic_load (&hc->server->stopping);
  req->is_head = strcmp (req->method, "HEAD") == 0;
  req->expect_continue = head->expect_continue;
  g_queue_push_tail (&hc->pending, req);
  return req;
}

/* Feeds body bytes to the request being read; returns how many it took,
 * or -1 after failing the request. */
static gssize
take_body (HttpConn *hc, const guint8 *data, gsize len)
{
  if (!hc->chunked)
    {
      gsize n = (gsize) MIN ((guint64) len, hc->body_left);
      g_byte_array_append (hc->body, data, (guint) n);
      hc->body_left -= n;
      return (gssize) n;
    }
  gsize used_total = 0;
  for (;;)
    {
      const char *piece;
      gsize piece_len;
      gboolean done;
      guint status;
      gssize used = weft_http_chunked_decode (&hc->dec, (const char *) data + used_total,
                                              len - used_total, &piece, &piece_len, &done,
                                              &status);
      if (used == WEFT_HTTP_ERROR)
        {
          fail_request (hc, status);
          return -1;
        }
      if (piece_len > 0)
        g_byte_array_append (hc->body, (const guint8 *) piece, (guint) piece_len);
      used_total += (gsize) used;
      if (done)
        {
          hc->body_left = 0;
          hc->chunked = FALSE;
          return (gssize) used_total;
        }
      if (used == 0)
        {
          hc->body_left = 1; /* more to come */
          return (gssize) used_total;
        }
    }
}

static void
body_complete (HttpConn *hc)
{
  WeftHttpRequest *req = hc->reading;
  req->body = g_byte_array_free_to_bytes (hc->body);
  hc->body = NULL;
  if (atomic_load (&req->responded))
    {
      /* Answered before its body ended (refused early): it may go now. */
      hc->reading = NULL;
      flush_ready (hc);
      return;
    }
  dispatch (hc, req);
}

static gsize
on_data (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  HttpConn *hc = user_data;
  WeftHttpServer *server = hc->server;
  gsize consumed = 0;
  WeftHttpHeader headers[MAX_HEADERS];

  while (consumed < len && !hc->closing && !hc->closed)
    {
      if (hc->reading != NULL)
        {
          gssize n = take_body (hc, data + consumed, len - consumed);
          if (n < 0)
            return len;
          consumed += (gsize) n;
          if (hc->body_left > 0)
            break; /* wait for more */
          body_complete (hc);
          continue;
        }
      if (g_queue_get_length (&hc->pending) >= MAX_PIPELINE)
        {
          /* Enough unanswered requests: read on once they are answered. */
          hc->paused = TRUE;
          weft_connection_stop_reading (conn);
          break;
        }
      WeftHttpHead head;
      guint status = 0;
      gssize r = weft_http_parse_request ((const char *) data + consumed, len - consumed,
                                          &server->limits, &head, headers, MAX_HEADERS, &status);
      if (r == WEFT_HTTP_INCOMPLETE)
        {
          if (hc->timer == 0 && server->request_timeout_ms != 0)
            hc->timer = weft_context_add_timeout (hc->ctx, server->request_timeout_ms,
                                                  request_timed_out, hc, NULL);
          break;
        }
      if (r == WEFT_HTTP_ERROR)
        {
          fail_request (hc, status);
          return len;
        }
      WeftHttpRequest *req = take_head (hc, (const char *) data + consumed, (gsize) r, &head);
      consumed += (gsize) r;
      if (head.body == WEFT_HTTP_BODY_NONE)
        {
          req->body = g_bytes_new_static ("", 0);
          dispatch (hc, req);
          continue;
        }
      hc->reading = req;
      hc->chunked = head.body == WEFT_HTTP_BODY_CHUNKED;
      if (hc->chunked)
        {
          hc->body = g_byte_array_new ();
          weft_http_chunked_init (&hc->dec, server->limits.max_body);
          hc->body_left = 1;
        }
      else
        {
          hc->body = g_byte_array_sized_new ((guint) MIN (head.content_length, 65536));
          hc->body_left = head.content_length;
        }
      if (req->expect_continue && consumed == len && g_queue_peek_head (&hc->pending) == req)
        {
          static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
          weft_connection_write (conn, (const guint8 *) cont, sizeof cont - 1);
        }
      if (hc->timer == 0 && server->request_timeout_ms != 0)
        hc->timer = weft_context_add_timeout (hc->ctx, server->request_timeout_ms,
                                              request_timed_out, hc, NULL);
    }
  return consumed;
}

static void
hc_free_notify (gpointer data)
{
  hc_unref (data);
}

static void
on_accept (WeftListener *listener, WeftConnection *conn, gpointer user_data)
{
  WeftHttpServer *server = user_data;
  HttpConn *hc = g_new0 (HttpConn, 1);
  hc->ref_count = 1; /* the event function's */
  hc->server = weft_http_server_ref (server);
  hc->conn = weft_connection_ref (conn);
  hc->ctx = weft_connection_get_context (conn);
  g_queue_init (&hc->pending);
  weft_connection_set_event_func (conn, on_event, hc, hc_free_notify);
  pthread_mutex_lock (&server->live_lock);
  g_hash_table_add (server->live, hc);
  pthread_mutex_unlock (&server->live_lock);
  if (server->keepalive_ms != 0)
    weft_connection_set_idle_timeout (conn, server->keepalive_ms);
  /* Answers are whole messages written at once: Nagle could only hold
   * back the last segment of one behind an unacknowledged previous one. */
  int one = 1;
  setsockopt (weft_connection_get_fd (conn), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  weft_connection_start_reading (conn, on_data, hc, NULL);
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
 *
 * Defaults: 8 MiB request bodies, 8 KiB targets, 16 KiB heads, 100 header
 * lines; a request must arrive whole within 20 s (else 408), an idle
 * keep-alive connection is closed after 30 s.
 *
 * Returns: (transfer full): a new server
 */
WeftHttpServer *
weft_http_server_new (WeftEngine *engine)
{
  g_return_val_if_fail (engine != NULL, NULL);
  WeftHttpServer *self = g_new0 (WeftHttpServer, 1);
  self->ref_count = 1;
  /* Borrowed, like the listener's: connections keep the server alive and
   * may drop it on a worker, where an engine must not die. */
  self->engine = engine;
  self->routes = g_ptr_array_new ();
  weft_http_limits_init (&self->limits);
  self->request_timeout_ms = DEFAULT_REQUEST_TIMEOUT_MS;
  self->keepalive_ms = DEFAULT_KEEPALIVE_MS;
  self->listener = weft_listener_new (engine, on_accept, self, NULL);
  pthread_mutex_init (&self->live_lock, NULL);
  self->live = g_hash_table_new (NULL, NULL);
  return self;
}

/**
 * weft_http_server_ref:
 * @self: a server
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
 * @self: (transfer full): a server
 *
 * Drops a reference. Live connections hold their own; to stop serving,
 * shut the listener down (weft_listener_shutdown()).
 */
void
weft_http_server_unref (WeftHttpServer *self)
{
  g_return_if_fail (self != NULL);
  if (!g_atomic_int_dec_and_test (&self->ref_count))
    return;
  weft_listener_unref (self->listener);
  for (guint i = 0; i < self->routes->len; i++)
    {
      Route *r = self->routes->pdata[i];
      if (r->notify != NULL)
        r->notify (r->data);
      g_free (r->method);
      g_free (r->path);
      g_free (r);
    }
  g_ptr_array_unref (self->routes);
  g_hash_table_unref (self->live);
  pthread_mutex_destroy (&self->live_lock);
  g_free (self);
}

/**
 * weft_http_server_get_listener:
 * @self: a server
 *
 * The listener that accepts the server's connections: add addresses to it
 * (weft_listener_add_tcp() and friends), set TLS, limits, and shut it down
 * to stop.
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
 * weft_http_server_add_handler:
 * @self: a server, not started yet
 * @method: (nullable): the method to serve ("GET", "POST", ...), or %NULL
 *   for any; a GET handler also answers HEAD unless a HEAD handler exists
 * @path: an exact path ("/echo"), or a prefix followed by a star (as in "/static/" then "*")
 * @func: (scope notified) (closure user_data) (destroy notify): the handler
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data with the server
 *
 * Routes matching requests to @func. The first matching handler, in the
 * order they were added, serves a request; without one the answer is 404.
 */
void
weft_http_server_add_handler (WeftHttpServer *self, const gchar *method, const gchar *path,
                              WeftHttpHandler func, gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (path != NULL && path[0] != '\0');
  g_return_if_fail (func != NULL);
  g_return_if_fail (!self->started);
  Route *r = g_new0 (Route, 1);
  r->method = g_strdup (method);
  gsize n = strlen (path);
  r->prefix = path[n - 1] == '*';
  r->path = g_strndup (path, r->prefix ? n - 1 : n);
  r->func = func;
  r->data = user_data;
  r->notify = notify;
  g_ptr_array_add (self->routes, r);
}

/**
 * weft_http_server_set_max_body:
 * @self: a server, not started yet
 * @max_bytes: the largest request body accepted; larger ones get 413
 */
void
weft_http_server_set_max_body (WeftHttpServer *self, guint64 max_bytes)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (!self->started);
  self->limits.max_body = max_bytes;
}

/**
 * weft_http_server_set_timeouts:
 * @self: a server, not started yet
 * @request_ms: the time a request's head and body may take to arrive,
 *   from its first byte (408 after it); 0 for none
 * @keepalive_ms: how long an idle connection is kept; 0 for ever
 */
void
weft_http_server_set_timeouts (WeftHttpServer *self, guint request_ms, guint keepalive_ms)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (!self->started);
  self->request_timeout_ms = request_ms;
  self->keepalive_ms = keepalive_ms;
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
  return weft_listener_start (self->listener, error);
}

/**
 * weft_http_server_get_n_requests:
 * @self: a server
 *
 * Returns: requests received whole since the server started
 */
guint64
weft_http_server_get_n_requests (WeftHttpServer *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return atomic_load (&self->n_requests);
}

/* ---- requests ----------------------------------------------------------- */

/**
 * weft_http_request_ref:
 * @self: a request
 *
 * Returns: (transfer full): @self
 */
WeftHttpRequest *
weft_http_request_ref (WeftHttpRequest *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_atomic_int_inc (&self->ref_count);
  return self;
}

/**
 * weft_http_request_unref:
 * @self: (transfer full): a request
 *
 * Drops a reference. A request dropped unanswered by everyone holds up
 * the connection's later answers until the connection closes: answer
 * every request.
 */
void
weft_http_request_unref (WeftHttpRequest *self)
{
  g_return_if_fail (self != NULL);
  if (!g_atomic_int_dec_and_test (&self->ref_count))
    return;
  HttpConn *hc = self->hc;
  g_free (self->head);
  g_free (self->headers);
  if (self->body != NULL)
    g_bytes_unref (self->body);
  if (self->extra != NULL)
    g_string_free (self->extra, TRUE);
  if (self->resp_head != NULL)
    g_bytes_unref (self->resp_head);
  if (self->resp_body != NULL)
    g_bytes_unref (self->resp_body);
  if (self->resp_fd >= 0)
    close (self->resp_fd);
  g_free (self);
  hc_unref (hc);
}

/**
 * weft_http_request_get_method:
 * @self: a request
 *
 * Returns: the method, such as "GET"
 */
const gchar *
weft_http_request_get_method (WeftHttpRequest *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->method;
}

/**
 * weft_http_request_get_path:
 * @self: a request
 *
 * Returns: the target's path, as sent (not percent-decoded), such as
 *   "/a/b"; "*" for "OPTIONS *"
 */
const gchar *
weft_http_request_get_path (WeftHttpRequest *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->path;
}

/**
 * weft_http_request_get_query:
 * @self: a request
 *
 * Returns: the query after '?', as sent; "" if none
 */
const gchar *
weft_http_request_get_query (WeftHttpRequest *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->query;
}

/**
 * weft_http_request_get_header:
 * @self: a request
 * @name: a header name, in any case
 *
 * Returns: (nullable): the value of the first header called @name, without
 *   surrounding whitespace, or %NULL
 */
const gchar *
weft_http_request_get_header (WeftHttpRequest *self, const gchar *name)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (name != NULL, NULL);
  for (gsize i = 0; i < self->n_headers; i++)
    if (g_ascii_strcasecmp (self->headers[i].name.ptr, name) == 0)
      return self->headers[i].value.ptr;
  return NULL;
}

/**
 * weft_http_request_get_body:
 * @self: a request
 *
 * Returns: (transfer none): the body, de-chunked; empty if none
 */
GBytes *
weft_http_request_get_body (WeftHttpRequest *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->body;
}

/**
 * weft_http_request_add_response_header:
 * @self: a request not answered yet
 * @name: a header name (a token)
 * @value: its value (no CR or LF)
 *
 * Adds a header to the answer. Date, Content-Length and Connection are the
 * server's.
 */
void
weft_http_request_add_response_header (WeftHttpRequest *self, const gchar *name,
                                       const gchar *value)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (name != NULL && name[0] != '\0' && strpbrk (name, ":\r\n \t") == NULL);
  g_return_if_fail (value != NULL && strpbrk (value, "\r\n") == NULL);
  g_return_if_fail (!atomic_load (&self->responded));
  if (self->extra == NULL)
    self->extra = g_string_new (NULL);
  g_string_append_printf (self->extra, "%s: %s\r\n", name, value);
}

/**
 * weft_http_request_respond:
 * @self: a request not answered yet
 * @status: the status code (200 to 599)
 * @content_type: (nullable): the Content-Type, or %NULL
 * @body: (array length=len) (nullable): the body (copied)
 * @len: its length
 *
 * Answers the request, from any thread. Answers go out in the order the
 * requests came. The body is left out for HEAD.
 */
void
weft_http_request_respond (WeftHttpRequest *self, guint status, const gchar *content_type,
                           const guint8 *body, gsize len)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (status >= 200 && status <= 599);
  g_return_if_fail (body != NULL || len == 0);
  respond_common (self, status, content_type, body, len, NULL);
}

/**
 * weft_http_request_respond_bytes:
 * @self: a request not answered yet
 * @status: the status code (200 to 599)
 * @content_type: (nullable): the Content-Type, or %NULL
 * @body: the body, referenced (large bodies are not copied)
 *
 * Like weft_http_request_respond() with a #GBytes body.
 */
void
weft_http_request_respond_bytes (WeftHttpRequest *self, guint status, const gchar *content_type,
                                 GBytes *body)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (status >= 200 && status <= 599);
  g_return_if_fail (body != NULL);
  respond_common (self, status, content_type, NULL, 0, body);
}

/**
 * weft_http_request_respond_file:
 * @self: a request not answered yet
 * @status: the status code (200 to 599)
 * @content_type: (nullable): the Content-Type, or %NULL
 * @fd: a regular file open for reading; the request owns it from now on
 *   and closes it
 * @offset: where the body starts in the file
 * @length: the body's length
 *
 * Answers with part of a file as the body, sent with sendfile() (or read
 * and encrypted under TLS), never copied into memory whole.
 */
void
weft_http_request_respond_file (WeftHttpRequest *self, guint status, const gchar *content_type,
                                gint fd, guint64 offset, guint64 length)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (status >= 200 && status <= 599);
  g_return_if_fail (fd >= 0);
  if (atomic_load (&self->responded))
    {
      close (fd);
      g_critical ("weft_http_request_respond_file: request already answered");
      return;
    }
  self->resp_fd = fd;
  self->resp_off = offset;
  self->resp_len = length;
  respond_common (self, status, content_type, NULL, 0, NULL);
}


/* On a connection's context during shutdown: an idle keep-alive
 * connection closes now; a busy one answers what it has (with
 * "Connection: close") and closes then. */
static void
wind_down_job (gpointer data)
{
  HttpConn *hc = data;
  if (hc->closed)
    return;
  hc->closing = TRUE;
  stop_timer (hc);
  if (g_queue_is_empty (&hc->pending))
    weft_connection_close (hc->conn);
  else
    weft_connection_stop_reading (hc->conn); /* answers built from now say close */
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
 * Graceful stop, from any thread that is not one of the engine's workers
 * or from one: stops accepting, closes idle keep-alive connections at
 * once, lets requests in flight be answered (each answer then closes its
 * connection), and aborts what is left after @timeout_ms.
 */
void
weft_http_server_shutdown (WeftHttpServer *self, guint timeout_ms, WeftListenerDoneFunc func,
                           gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  atomic_store (&self->stopping, TRUE);
  pthread_mutex_lock (&self->live_lock);
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init (&it, self->live);
  while (g_hash_table_iter_next (&it, &key, NULL))
    {
      HttpConn *hc = key;
      weft_context_post (hc->ctx, wind_down_job, hc_ref (hc), (GDestroyNotify) hc_unref);
    }
  pthread_mutex_unlock (&self->live_lock);
  weft_listener_shutdown (self->listener, timeout_ms, func, user_data, notify);
}
