/* weft-http-private.h: the server's state, shared by weft-http-server.c
 * (connections, requests in) and weft-http-request.c (the request API,
 * answers out, streams).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "weft-http-server.h"
#include "weft-http-parser.h"
#include "weft-http-router.h"
#include "weft-connection-private.h"
#include "weft-context.h"
#include "weft-coro.h"

#include <pthread.h>
#include <stdatomic.h>

#define WEFT_HTTP_BIG_BODY 16384      /* bodies above: written by reference */
#define WEFT_HTTP_LATENCY_BUCKETS 24  /* log2 µs: [2^i, 2^(i+1)), last open */

typedef struct _HttpConn HttpConn;
typedef struct _WeftHttpAccessLog WeftHttpAccessLog;

/* A shard of a server's counters. Each engine worker has one that only it
 * writes (a relaxed load and store: no locked instruction per request);
 * threads that are not a worker share the last one (atomic adds). The
 * getters sum them. A cache line each (four, in fact): no false sharing. */
typedef struct {
  gboolean shared;             /* the last one: atomic adds */
  _Atomic guint64 n_requests;
  _Atomic guint64 n_status[6]; /* by class: [1] 1xx ... [5] 5xx */
  _Atomic guint64 latency[WEFT_HTTP_LATENCY_BUCKETS];
} __attribute__ ((aligned (64))) WeftHttpStats;

struct _WeftHttpServer {
  gint ref_count;            /* the public references; connections hold some */
  gint core_refs;            /* the memory's: the public side holds one while
                              * ref_count > 0, the listener's user_data one
                              * (an accept job queued before the last unref
                              * may run after it) */
  WeftEngine *engine;
  WeftListener *listener;
  WeftHttpRouter *router;    /* fixed once started: read without a lock */
  WeftHttpLimits limits;
  guint64 limit[WEFT_HTTP_LIMIT_MAX_PIPELINE + 1];
  gboolean started;
  WeftHttpStats *stats;      /* (owned) n_workers + 1 shards (see stats_here()) */
  guint n_workers;           /* the engine's, fixed at its creation */
  guint64 stats_id;          /* unique in the process, never 0 (stats_here()) */
  atomic_bool stopping;      /* no more keep-alive: close after each answer */
  pthread_mutex_t live_lock;
  GHashTable *live;          /* HttpConn set, adopted ones only (accepted ones are
                              * found through the listener); HOLDS: live_lock */
  WeftHttpAccessLog *log;    /* NULL: off */
  gsize coro_stack;          /* stack of coroutine handlers */
  WeftContext *sweep_ctx;    /* the keep-alive sweep's timer, if any */
  struct _HttpSweep *sweep;
  /* Connections a sweep closed that had expired before the previous sweep
   * began: that sweep's walk missed them. Always 0 unless the walk is
   * broken (read by the tests). */
  atomic_uint sweep_missed;
};

struct _WeftHttpRequest {
  gint ref_count;
  guint8 hc_local;          /* its reference on hc is a local one */
  guint8 held;              /* on the context: dispatch() uses it without a
                             * reference around its handler (1); should the
                             * pending line let go of it meanwhile (its
                             * answer written, the connection closed), the
                             * line's reference passes to dispatch() (2),
                             * which drops it when done (see
                             * pending_release()) */
  HttpConn *hc;             /* ref (see weft_http_conn_ref_local()) */
  WeftHttpRequest *next;    /* in hc's pending line */
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
  gboolean expect_continue;  /* and its 100 (Continue) not sent yet */
  gboolean has_body;        /* the request has a body to read */
  gboolean client_close;    /* its client asked for the close (Connection:
                             * close, HTTP/1.0 without keep-alive) */
  GString *extra;           /* response headers added by the handler */
  gint64 start_us;          /* head complete: latency and log */

  /* Routing, decided when the head is complete. */
  const WeftHttpRoute *route;
  WeftHttpRouteResult route_result;
  GString *allow;           /* for 405 */
  WeftHttpParam *params;
  guint n_params;
  GHashTable *_Atomic query_table; /* decoded on first use */

  /* The answer; set once (responded), written in arrival order. */
  atomic_int responded;
  gconstpointer _Atomic handler_thread; /* weft_http_this_thread(), while its
                                         * handler runs */
  gboolean coro_handler_running; /* its coroutine handler has not returned
                                  * (on the connection's context) */
  guint status;
  char *resp_head;          /* (owned unless resp_spare) the head and a
                             * small body: a plain buffer, no GBytes (two
                             * allocations less per request) */
  char *resp_spare;         /* room for a small resp_head at the end of the
                             * request's own allocation, or NULL */
  gsize resp_spare_len;
  gsize resp_head_len;
  GBytes *resp_body;
  int resp_fd;              /* a file body (owned), or -1 */
  guint64 resp_off;
  guint64 resp_len;
  guint64 bytes_out;        /* body bytes, for the log */
  gboolean ready;           /* on the context: resp_* attached */
  gboolean dropped;         /* on the context: left the line unanswered */
  gboolean close_after;
  gboolean head_sent;       /* on the context: resp_head written */
  gboolean failed;          /* on the context: its body failed while its
                             * answer, made on another thread, was on its
                             * way here (see weft_http_fail_answered()) */

  /* A streamed answer (weft_http_request_respond_stream()). Fields below
   * are the context's, except where marked. */
  gboolean streaming;       /* set before responded */
  gboolean chunked_out;     /* chunked; else delimited by the close */
  gboolean no_body_out;     /* HEAD, 204, 304: writes are dropped */
  atomic_bool finish_called;     /* any thread */
  gboolean stream_done;     /* the finish reached the context */
  gboolean tail_sent;
  GQueue stream_q;          /* GBytes written before the head could go */
  WeftHttpProducer producer;
  gpointer producer_data;
  GDestroyNotify producer_notify;
  gboolean producer_on;     /* call it again when there is room */
  gboolean producer_queued;
  gboolean in_producer;     /* the producer is being called */
  gboolean producer_release_due; /* released meanwhile: notify on return */
  guint64 producer_mark;    /* bytes_out when last called */

  /* A streamed body (WEFT_HTTP_HANDLER_STREAM_BODY). */
  gboolean stream_body;
  atomic_bool body_wanted;  /* weft_http_request_read_body() was called */
  WeftHttpBodyFunc body_func;
  gpointer body_data;
  GDestroyNotify body_notify;
  gboolean body_done;

  /* The body arriving, while this is hc->reading (weft-http-server.c). */
  gboolean in_chunked;
  guint64 in_left;
  guint64 in_bytes;
  gint64 in_start_us;
  gint64 in_last_us;
  GByteArray *in_body;      /* a body read whole, not streamed */
  WeftHttpChunked in_dec;
};

/* One per connection, kept while it is idle: what only a request being
 * read needs (its body's progress) lives in that request, and the flags
 * are bits (all written on the connection's context only, except gone and
 * idle_since), so that idle keep-alive connections cost little memory. */
struct _HttpConn {
  /* References: those taken anywhere, and while the connection is open
   * WEFT_HTTP_CONN_LOCAL for the context's side: the event function's and
   * local_refs, which on_data() and the requests take and (on the
   * context) drop without locked instructions. The close folds local_refs
   * in (see weft_http_conn_ref_local()). 0: not set up yet, or gone. */
  _Atomic gint64 ref_count;
  guint32 local_refs;       /* on the context only, until the close */
  guint n_pending;
  WeftHttpServer *server;
  WeftConnection *conn;     /* its context is the connection's: weft_http_conn_ctx() */
  WeftHttpRequest *pending_head; /* requests, oldest first, one ref each, */
  WeftHttpRequest *pending_tail; /* linked through their next */
  WeftHttpRequest *reading; /* the newest request, while its body arrives */
  WeftHttpRequest *inline_req; /* its coroutine handler runs inline, in
                                * dispatch (as a callback handler would) */
  struct _HttpBatch *batch; /* in on_data, around a bodiless request's
                             * dispatch: the read being parsed, which its
                             * coroutine handler may go on with */
  WeftHttpRequest *active;  /* a stream at the head, head written, not done */
  _Atomic gint64 idle_since; /* 0: busy; read by the keep-alive sweep */
  guint timer;              /* header timeout, then body checks */
  atomic_bool gone;         /* closed, readable from any thread */
  atomic_bool silent;       /* no byte read yet: the sweep holds it to the
                             * header timeout (idle_limit_us()); read from
                             * the sweep's thread, so a byte, not a bit */
  guint closing : 1;        /* read no more; close after the queued answers */
  guint draining : 1;       /* shutdown: finish the request begun, then close */
  guint drain_taken : 1;    /* draining: the last request's head is taken */
  guint unparsed : 1;       /* on_data left bytes of a head begun (more than
                             * empty lines) for later */
  guint flush_posted : 1;   /* a flush_job is queued (answers made on the context) */
  guint flush_defer : 1;    /* on_data is dispatching a bodiless request: an
                             * answer made on the context waits for one
                             * flush after the read's requests */
  guint flush_due : 1;      /* such an answer is ready, not flushed yet */
  guint linger_always : 1;  /* the close lingers whether or not input has
                             * arrived: after refusing input still on its
                             * way, or answering a close the client asked for */
  guint closed : 1;
  guint paused : 1;         /* reading stopped: too many unanswered requests */
  guint body_paused : 1;    /* reading stopped: a streamed body not wanted yet */
  guint write_paused : 1;   /* parsing stopped: the answers queued are above
                             * the write queue's high water mark (until DRAINED) */
  guint held : 1;           /* a pause holds bytes read but not parsed; on_data()
                             * gets them when it resumes */
  guint input_ended : 1;    /* the peer's end came while bytes were held */
  guint head_refused : 1;   /* the head being parsed (or refused) is a HEAD
                             * request's: a refusal of it has no content */
  guint embedded : 1;       /* in the connection's allocation (the listener's
                             * data), not freed by itself */
};

/* The connection's context (any thread: it is fixed). */
static inline WeftContext *
weft_http_conn_ctx (HttpConn *hc)
{
  return weft_connection_get_context (hc->conn);
}

/* The pending line, on the connection's context (no GQueue: its links
 * are an allocation per request). */
static inline WeftHttpRequest *
weft_http_pending_peek (HttpConn *hc)
{
  return hc->pending_head;
}

static inline void
weft_http_pending_push (HttpConn *hc, WeftHttpRequest *req)
{
  req->next = NULL;
  if (hc->pending_tail != NULL)
    hc->pending_tail->next = req;
  else
    hc->pending_head = req;
  hc->pending_tail = req;
  hc->n_pending++;
}

static inline WeftHttpRequest *
weft_http_pending_pop (HttpConn *hc)
{
  WeftHttpRequest *req = hc->pending_head;
  if (req == NULL)
    return NULL;
  hc->pending_head = req->next;
  if (hc->pending_head == NULL)
    hc->pending_tail = NULL;
  req->next = NULL;
  hc->n_pending--;
  return req;
}

/* weft-http-server.c */
#define WEFT_HTTP_CONN_LOCAL (G_GINT64_CONSTANT (1) << 62)
HttpConn *weft_http_conn_ref (HttpConn *hc);
void weft_http_conn_unref (HttpConn *hc);
void weft_http_flush_ready (HttpConn *hc);
void weft_http_fail_answered (WeftHttpRequest *req);
void weft_http_resume_body (HttpConn *hc);
/* What the listener's accept callback does, for a connection made
 * elsewhere (the whole-connection fuzz target). */
void weft__http_server_adopt (WeftHttpServer *self, WeftConnection *conn);
/* The connections the server serves and that are not closed yet, for the
 * tests: accepted ones are found through the listener, adopted ones are
 * in server->live. Any thread; a snapshot. */
guint weft__http_server_n_live (WeftHttpServer *self);

/* weft-http-request.c */
WeftHttpRequest *weft_http_request_new (HttpConn *hc);
void weft__http_request_unref_here (WeftHttpRequest *self);
WeftHttpRequest *weft_http_request_new_for_head (HttpConn *hc, gsize n_headers, gsize head_len);
gboolean weft_http_respond_self (WeftHttpRequest *req, guint status, gboolean close,
                                 gboolean with_headers);
void weft_http_send_continue (WeftHttpRequest *req);
void weft_http_force_close (WeftHttpRequest *req);
void weft_http_stream_pump (WeftHttpRequest *req);
void weft_http_producer_release (WeftHttpRequest *req);
void weft_http_request_drop (WeftHttpRequest *req);
void weft_http_body_deliver (WeftHttpRequest *req, const guint8 *data, gsize len,
                             gboolean done);
GDestroyNotify weft_http_take_body_reader (WeftHttpRequest *req, gpointer *data);

/* weft-http-static.c: the path resolver, internal so that
 * tests/fuzz/fuzz-http-static.c can reach it. relative_path decodes a
 * request path into one relative to the root (no "..", NUL or backslash;
 * "" for the root), or NULL; open_beneath opens it under @root_fd with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), or by the O_NOFOLLOW
 * walk where openat2 is missing; -1 (errno set) on failure. */
gchar *weft__http_static_relative_path (const char *path);
int weft__http_static_open_beneath (int root_fd, const char *rel);

/* weft-http-log.c */
WeftHttpAccessLog *weft_http_access_log_new (int fd);
void weft_http_access_log_free (WeftHttpAccessLog *log);
void weft_http_access_log_add (WeftHttpAccessLog *log, WeftHttpRequest *req);

/* For the tests: how many connections the keep-alive sweep missed once
 * (closed by a later sweep than the first to begin after they expired). */
guint weft__http_server_sweep_missed (WeftHttpServer *server);

/* weft-http-static.c: for the tests, the openat2-less path */
void weft__http_static_force_fallback (gboolean force);
gboolean weft__http_static_uses_fallback (void);

/* The calling thread, as handler_thread records it: the address of a
 * thread-local, one %fs-relative add (g_thread_self() is a GPrivate
 * lookup, and it was taken twice per request). */
extern _Thread_local WEFT_TLS_IE char weft__http_thread_token;

/* The empty body of bodiless requests (weft-http-server.c): shared, never
 * freed, not counted in their references. */
extern GBytes *weft__http_empty_body;

static inline gconstpointer
weft_http_this_thread (void)
{
  return &weft__http_thread_token;
}

/* Whether @hc's context still counts local references (the connection
 * is open), on that context: ref_count is at least WEFT_HTTP_CONN_LOCAL
 * less the local references dropped elsewhere until the close, far less
 * after it. */
static inline gboolean
weft_http_conn_local_open (HttpConn *hc)
{
  return atomic_load_explicit (&hc->ref_count, memory_order_relaxed) > WEFT_HTTP_CONN_LOCAL / 2;
}

/* A reference on @hc taken on @hc's context (by on_data(), by a request
 * made there) without a locked instruction (two per request and two per
 * read): counted in local_refs, which the context alone touches, while
 * the connection is open. Returns TRUE for such a local reference; after
 * the close, a plain one (FALSE). Drop it with weft_http_conn_unref_local().
 *
 * ref_count holds WEFT_HTTP_CONN_LOCAL for the local side until the
 * close, so the references are ref_count - WEFT_HTTP_CONN_LOCAL +
 * local_refs. A local reference dropped on another thread (a request
 * freed there) is taken from ref_count, which cannot reach 0 (nor
 * WEFT_HTTP_CONN_LOCAL / 2) before the close: 2^61 such drops would be
 * needed. The close (conn_merge_local()) makes ref_count that sum, and
 * from then on ref_count alone counts. local_refs, which such drops leave
 * as it was, is counted modulo 2^32: the sum is fewer than 2^32 live
 * references (requests and jobs, each an allocation), so it is exact. */
static inline gboolean
weft_http_conn_ref_local (HttpConn *hc)
{
  if (G_UNLIKELY (!weft_http_conn_local_open (hc)))
    {
      weft_http_conn_ref (hc);
      return FALSE;
    }
  hc->local_refs++;
  return TRUE;
}

/* Drops a reference weft_http_conn_ref_local() returned TRUE for. Any
 * thread (@here: the caller knows it is on @hc's context): on another, or
 * after the close, from ref_count. */
static inline void
weft_http_conn_unref_local (HttpConn *hc, gboolean here)
{
  if (G_LIKELY ((here || weft_context_get_current () == weft_http_conn_ctx (hc)) &&
                weft_http_conn_local_open (hc)))
    {
      hc->local_refs--;
      return;
    }
  weft_http_conn_unref (hc);
}
