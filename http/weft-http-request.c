/* weft-http-request.c: the request API, and answers: whole (bytes, a
 * file) or streamed (chunked, with an optional producer).
 *
 * An answer is built on the caller's thread (pure work, no connection
 * state) and then attached on the connection's context, directly if the
 * caller is the request's handler, else by a posted job; the context
 * writes answers in request order (weft_http_flush_ready()). A streamed
 * answer's writes follow the same path: on the context they go straight
 * to the connection once the answer is at the head of the line, and are
 * kept in the request until then; from elsewhere they are posted.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-http-private.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

G_DEFINE_BOXED_TYPE (WeftHttpRequest, weft_http_request, weft_http_request_ref,
                     weft_http_request_unref)

/* ---- small things ------------------------------------------------------- */

static const char *
reason_len (guint status, gsize *len)
{
  /* The length with the text: the answer's head is built per request. */
#define R(text) return (*len = sizeof (text) - 1, text)
  if (G_LIKELY (status == 200))
    R ("OK");
  switch (status)
    {
    /* RFC 9110 §15, and RFC 6585's 428, 429 and 431. */
    case 100: R ("Continue");
    case 101: R ("Switching Protocols");
    case 103: R ("Early Hints");
    case 200: R ("OK");
    case 201: R ("Created");
    case 202: R ("Accepted");
    case 203: R ("Non-Authoritative Information");
    case 204: R ("No Content");
    case 205: R ("Reset Content");
    case 206: R ("Partial Content");
    case 300: R ("Multiple Choices");
    case 301: R ("Moved Permanently");
    case 302: R ("Found");
    case 303: R ("See Other");
    case 304: R ("Not Modified");
    case 307: R ("Temporary Redirect");
    case 308: R ("Permanent Redirect");
    case 400: R ("Bad Request");
    case 401: R ("Unauthorized");
    case 402: R ("Payment Required");
    case 403: R ("Forbidden");
    case 404: R ("Not Found");
    case 405: R ("Method Not Allowed");
    case 406: R ("Not Acceptable");
    case 407: R ("Proxy Authentication Required");
    case 408: R ("Request Timeout");
    case 409: R ("Conflict");
    case 410: R ("Gone");
    case 411: R ("Length Required");
    case 412: R ("Precondition Failed");
    case 413: R ("Content Too Large");
    case 414: R ("URI Too Long");
    case 415: R ("Unsupported Media Type");
    case 416: R ("Range Not Satisfiable");
    case 417: R ("Expectation Failed");
    case 421: R ("Misdirected Request");
    case 422: R ("Unprocessable Content");
    case 426: R ("Upgrade Required");
    case 428: R ("Precondition Required");
    case 429: R ("Too Many Requests");
    case 431: R ("Request Header Fields Too Large");
    case 500: R ("Internal Server Error");
    case 501: R ("Not Implemented");
    case 502: R ("Bad Gateway");
    case 503: R ("Service Unavailable");
    case 504: R ("Gateway Timeout");
    case 505: R ("HTTP Version Not Supported");
    default: R ("Unknown");
    }
#undef R
}

static const char *
reason (guint status)
{
  gsize len;
  return reason_len (status, &len);
}

/* The Date header's line, "\r\nDate: " and the value and "\r\n" (what
 * ends the status line and the line itself, copied in one fixed-size
 * copy), formatted once a second per thread (the C locale's names,
 * whatever the process locale): the value is always HTTP_DATE_LEN bytes
 * (IMF-fixdate, RFC 9110 §5.6.7; years 1000-9999). */
#define HTTP_DATE_LEN 29
#define DATE_LINE_LEN (8 + HTTP_DATE_LEN + 2)
static const char *
http_date_line (void)
{
  static _Thread_local WEFT_TLS_IE time_t cached_sec = -1;
  static _Thread_local WEFT_TLS_IE char buf[48];
  time_t now = time (NULL);
  if (now != cached_sec)
    {
      static const char days[][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
      static const char months[][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
      struct tm tm;
      gmtime_r (&now, &tm);
      snprintf (buf, sizeof buf, "\r\nDate: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n",
                days[tm.tm_wday], tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour,
                tm.tm_min, tm.tm_sec);
      g_assert (strlen (buf) == DATE_LINE_LEN);
      cached_sec = now;
    }
  return buf;
}


_Thread_local WEFT_TLS_IE char weft__http_thread_token;

static gboolean
on_context (HttpConn *hc)
{
  return weft_context_get_current () == weft_http_conn_ctx (hc);
}

/* Room kept for a small answer's head (and body) in the request's
 * allocation: at least a hello answer's buffer as build_response() sizes it. */
#define RESP_SPARE 256
/* The size of a one-allocation request: glibc's thread cache takes
 * chunks up to 1032 bytes (above, a malloc and a free take the arena's
 * slower path). All the same size, so that a thread can keep one. */
#define ONE_ALLOC 1000
/* The largest answer (head and copied body) held for on_data's one flush
 * after a read (see attach()): about the size of its request. */
#define HELD_MAX 1024

/* A one-allocation request goes to the thread's spare for its next
 * request (every request takes one and frees it). */
static inline __attribute__ ((always_inline)) void
request_free (WeftHttpRequest *req)
{
  if (req->resp_spare == NULL || !weft__spare_keep (WEFT_SPARE_HTTP_REQUEST, req))
    g_free (req);
}

/* @one_alloc: ONE_ALLOC bytes, the request first; else the request alone. */
static WeftHttpRequest *
request_alloc (HttpConn *hc, gboolean one_alloc)
{
  /* malloc and memset, not calloc: glibc's calloc skips the thread
   * cache (its arena path and lock, once per request), and the requests
   * it freed then overflowed the cache's bin on the free side too. */
  WeftHttpRequest *req;
  if (!one_alloc)
    req = g_malloc (sizeof *req);
  else if ((req = weft__spare_take (WEFT_SPARE_HTTP_REQUEST)) == NULL)
    req = g_malloc (ONE_ALLOC);
  memset (req, 0, sizeof *req);
  req->ref_count = 1;
  req->hc = hc;
  req->hc_local = weft_http_conn_ref_local (hc); /* (requests are made on the context) */
  req->method = req->path = req->query = "";
  req->resp_fd = -1;
  /* (stream_q: all zero is G_QUEUE_INIT, no g_queue_init() call.) */
  return req;
}

WeftHttpRequest *
weft_http_request_new (HttpConn *hc)
{
  return request_alloc (hc, FALSE);
}

/* A request for a head of @head_len bytes with @n_headers fields: the
 * header slices and the head's bytes (req->headers, req->head, set here)
 * and room for a small answer follow the request in one allocation while
 * that stays small enough for the allocator's thread cache; per request,
 * two mallocs and frees fewer, and the lines written are the request's
 * own. A larger head gets its own block, as before. */
WeftHttpRequest *
weft_http_request_new_for_head (HttpConn *hc, gsize n_headers, gsize head_len)
{
  gsize block = n_headers * sizeof (WeftHttpHeader) + head_len + 1;
  G_STATIC_ASSERT (sizeof (WeftHttpRequest) % sizeof (gpointer) == 0);
  if (sizeof (WeftHttpRequest) + block + RESP_SPARE > ONE_ALLOC)
    {
      WeftHttpRequest *req = request_alloc (hc, FALSE);
      req->headers = g_malloc (block);
      req->head = (char *) (req->headers + n_headers);
      return req;
    }
  WeftHttpRequest *req = request_alloc (hc, TRUE);
  req->headers = (WeftHttpHeader *) (req + 1);
  req->head = (char *) (req->headers + n_headers);
  req->resp_spare = req->head + head_len + 1;
  req->resp_spare_len = ONE_ALLOC - sizeof *req - block;
  return req;
}

static inline gboolean
headers_inline (WeftHttpRequest *req)
{
  return req->headers == (WeftHttpHeader *) (req + 1);
}

/* Frees the answer's head buffer unless it is the request's spare room. */
static inline void
free_resp_head (WeftHttpRequest *req)
{
  if (req->resp_head != req->resp_spare)
    g_free (req->resp_head);
  req->resp_head = NULL;
}

/* Forgets the body reader; returns its notify (and *data) for the caller
 * to run once it is done with the request. */
GDestroyNotify
weft_http_take_body_reader (WeftHttpRequest *req, gpointer *data)
{
  GDestroyNotify bn = req->body_notify;
  *data = req->body_data;
  req->body_func = NULL;
  req->body_notify = NULL;
  req->body_data = NULL;
  return bn;
}

static void
release_body_reader (WeftHttpRequest *req)
{
  gpointer bd;
  GDestroyNotify bn = weft_http_take_body_reader (req, &bd);
  if (bn != NULL)
    bn (bd);
}

/* On the context: the body will never come (the connection is gone, or
 * the request was cut off or refused before its reader asked). The reader
 * gets no done call, only its notify, and now rather than when the request
 * is freed: a coroutine waiting for the body holds the request. */
static void
body_abandon (WeftHttpRequest *req)
{
  if (req->body_done)
    return;
  req->body_done = TRUE;
  release_body_reader (req);
}

/* The stream producer's notify, once: when the streamed answer ends. Not
 * the body reader's: an answer may end before its request's body does,
 * and the pieces still due go to the reader. */
void
weft_http_producer_release (WeftHttpRequest *req)
{
  /* Never inside the producer's own call (its write failed and the
   * connection closed, or it finished): its data must live until it
   * returns, and a binding frees the closure that is running. */
  if (req->in_producer)
    {
      req->producer_on = FALSE;
      req->producer_release_due = TRUE;
      return;
    }
  GDestroyNotify pn = req->producer_notify;
  gpointer pd = req->producer_data;
  req->producer = NULL;
  req->producer_on = FALSE;
  req->producer_notify = NULL;
  req->producer_data = NULL;
  if (pn != NULL)
    pn (pd);
}

/* The stream's and the body reader's notifies, once: when the request
 * leaves the connection or is freed. */
static void
weft_http_stream_release (WeftHttpRequest *req)
{
  gpointer bd;
  GDestroyNotify bn = weft_http_take_body_reader (req, &bd);
  weft_http_producer_release (req);
  if (bn != NULL)
    bn (bd);
}

/* On the context: an answer that will never be sent stops producing. */
static void
drop_answer (WeftHttpRequest *req)
{
  req->stream_done = TRUE;
  weft_http_producer_release (req);
}

/* On the context: @req leaves the connection unanswered (the connection
 * is gone, or a half-close cut it off). Its body reader hears of it now.
 * Its stream producer only if the answer is attached: until then a
 * handler on another thread may be writing the producer fields in
 * weft_http_request_respond_stream(), and reading or clearing them here
 * raced with it (the notify could be lost). That answer's attach, on
 * this context, releases the producer instead. */
void
weft_http_request_drop (WeftHttpRequest *req)
{
  req->dropped = TRUE;
  release_body_reader (req); /* not body_abandon(): a reader may still come, and is told */
  if (req->ready)
    drop_answer (req);
}

/* ---- answers ------------------------------------------------------------ */

/* "00" to "99": two digits a step. */
static const char digit_pairs[201] =
  "00010203040506070809" "10111213141516171819" "20212223242526272829"
  "30313233343536373839" "40414243444546474849" "50515253545556575859"
  "60616263646566676869" "70717273747576777879" "80818283848586878889"
  "90919293949596979899";

/* Appends decimal @v at @p; returns the end. Counted first, so that the
 * digits go in place from the last back (no copy from a scratch array),
 * two a division. */
static inline char *
put_u64 (char *p, guint64 v)
{
  gsize n = 1;
  for (guint64 lim = 10; n < 20 && v >= lim; lim *= 10)
    n++;
  char *end = p + n;
  p = end;
  while (v >= 100)
    {
      p -= 2;
      memcpy (p, digit_pairs + 2 * (v % 100), 2);
      v /= 100;
    }
  if (v >= 10)
    memcpy (p - 2, digit_pairs + 2 * v, 2);
  else
    p[-1] = (char) ('0' + v);
  return end;
}

/* The copies of a length known only here: memcpy() calls, but two
 * overlapping words for 8 to 16 bytes (a Content-Type, a small body). */
static inline char *
put (char *p, const char *s, gsize n)
{
  if (__builtin_constant_p (n) || n < 8 || n > 16)
    memcpy (p, s, n);
  else
    {
      memcpy (p, s, 8);
      memcpy (p + n - 8, s + n - 8, 8);
    }
  return p + n;
}

#define PUT_LIT(p, lit) put ((p), (lit), sizeof (lit) - 1)

/* A header name: a token (RFC 9110 §5.6.2: no control character, space,
 * DEL, non-ASCII byte or delimiter such as ':', '"', '(' or ','). */
static gboolean
header_name_ok (const char *s)
{
  if (*s == '\0')
    return FALSE;
  for (const guchar *p = (const guchar *) s; *p != '\0'; p++)
    if (*p <= ' ' || *p >= 0x7f || strchr ("\"(),/:;<=>?@[\\]{}", *p) != NULL)
      return FALSE;
  return TRUE;
}

/* The headers build_response() writes itself: one added by a handler too
 * would frame the answer twice (two lengths, a length and chunks, a
 * close the connection does not make). */
static gboolean
header_is_servers (const char *name)
{
  return g_ascii_strcasecmp (name, "Content-Length") == 0 ||
         g_ascii_strcasecmp (name, "Transfer-Encoding") == 0 ||
         g_ascii_strcasecmp (name, "Connection") == 0 ||
         g_ascii_strcasecmp (name, "Date") == 0;
}

/* A byte's high bit flags each byte of @x below 0x20 (a tab included) or
 * DEL. Borrows make false flags only beside a true one, so "none
 * flagged" is exact. */
static inline guint64
ctl_flags (guint64 x)
{
  const guint64 ones = G_GUINT64_CONSTANT (0x0101010101010101);
  guint64 del = x ^ (ones * 0x7f);
  return ((x - ones * 0x20) & ~x) | ((del - ones) & ~del);
}

/* The length of a header value, or -1 if it holds a control character
 * other than tab. */
static inline gssize
header_value_len (const char *s)
{
  /* Per answer (the Content-Type): 8 bytes at a time when nothing below
   * 0x20 (a tab included) nor DEL is there. */
  gsize n = strlen (s);
  if (n >= 8)
    {
      /* The first and last words, then those between (none up to 16). */
      guint64 x, y;
      memcpy (&x, s, 8);
      memcpy (&y, s + n - 8, 8);
      guint64 flags = ctl_flags (x) | ctl_flags (y);
      for (gsize i = 8; i + 8 < n; i += 8)
        {
          memcpy (&x, s + i, 8);
          flags |= ctl_flags (x);
        }
      if ((flags & (G_GUINT64_CONSTANT (0x0101010101010101) << 7)) == 0)
        return (gssize) n;
    }
  const guchar *p = (const guchar *) s;
  for (; *p != '\0'; p++)
    if ((*p < ' ' && *p != '\t') || *p == 0x7f)
      return -1;
  return (gssize) (p - (const guchar *) s);
}

/* Builds the answer's head (and a small body) on the caller's thread: one
 * buffer, sized first, filled without printf (this is per request). */
static void
build_response (WeftHttpRequest *req, const GString *extra, guint status, const char *content_type,
                const guint8 *body, gsize len, GBytes *body_bytes)
{
  gssize ct_len = content_type != NULL ? header_value_len (content_type) : 0;
  if (ct_len < 0)
    {
      /* Checked always (see add_response_header): left out, not sent. */
      g_critical ("HTTP answer: refused a Content-Type with a control character");
      content_type = NULL;
      ct_len = 0;
    }
  if (body_bytes != NULL)
    len = g_bytes_get_size (body_bytes);
  if (req->resp_fd >= 0)
    len = (gsize) req->resp_len;
  req->status = status;
  /* RFC 9110 §15.3.6: no content in a 205, delimited as empty. */
  gboolean reset = status == 205;
  if (reset)
    len = 0;
  gboolean no_body = req->is_head || status == 204 || status == 304 || reset;
  /* During a shutdown the connection's last answer is marked so when it
   * goes out (see drain_stop()); so is one whose streamed body is left
   * unread (see weft_http_flush_ready()). */
  gboolean last = !req->keep_alive;
  if (req->streaming)
    {
      req->no_body_out = no_body;
      req->chunked_out = req->minor >= 1 && !reset;
      if (!req->chunked_out && !no_body)
        last = TRUE; /* HTTP/1.0: the close delimits the body */
    }
  req->close_after = last;

  /* What goes in the buffer after the head: a small body, copied. */
  const guint8 *inline_body = NULL;
  gsize inline_len = 0;
  if (no_body)
    {
      /* No body: a file given for it is not needed. */
      if (req->resp_fd >= 0)
        {
          close (req->resp_fd);
          req->resp_fd = -1;
        }
    }
  else if (req->resp_fd < 0 && !req->streaming)
    {
      req->bytes_out = len;
      if (body_bytes != NULL && len > WEFT_HTTP_BIG_BODY)
        req->resp_body = g_bytes_ref (body_bytes);
      else if (len > 0)
        {
          inline_body = body_bytes != NULL ? g_bytes_get_data (body_bytes, NULL) : body;
          inline_len = len;
        }
    }
  else if (req->resp_fd >= 0)
    req->bytes_out = req->resp_len;

  gsize why_len = 2;
  const char *why = status == 200 ? "OK" : reason_len (status, &why_len);
  gsize extra_len = extra != NULL ? extra->len : 0;
  gsize cap = 9 + 4 + why_len + DATE_LINE_LEN + (14 + (gsize) ct_len + 2) + (16 + 20 + 2) + 28 +
              extra_len + 24 + 2 + inline_len;
  /* A response is built once (claim()); the spare room is used at most once. */
  char *buf = cap <= req->resp_spare_len ? req->resp_spare : g_malloc (cap);
  char *p = buf;
  if (G_LIKELY (status == 200))
    p = PUT_LIT (p, "HTTP/1.1 200 OK");
  else
    {
      p = PUT_LIT (p, "HTTP/1.1 ");
      *p++ = (char) ('0' + status / 100);
      *p++ = (char) ('0' + status / 10 % 10);
      *p++ = (char) ('0' + status % 10);
      *p++ = ' ';
      p = put (p, why, why_len);
    }
  /* The status line's end and the Date line, in one copy. */
  p = put (p, http_date_line (), DATE_LINE_LEN);
  if (content_type != NULL)
    {
      p = PUT_LIT (p, "Content-Type: ");
      p = put (p, content_type, (gsize) ct_len);
      p = PUT_LIT (p, "\r\n");
    }
  /* Every answer is delimited; 204 and 304 carry no length. */
  if (status == 204 || status == 304)
    ;
  else if (req->streaming && !reset)
    {
      if (req->chunked_out)
        p = PUT_LIT (p, "Transfer-Encoding: chunked\r\n");
    }
  else
    {
      p = PUT_LIT (p, "Content-Length: ");
      p = put_u64 (p, len);
      p = PUT_LIT (p, "\r\n");
    }
  if (extra_len > 0)
    p = put (p, extra->str, extra_len);
  if (last)
    p = PUT_LIT (p, "Connection: close\r\n");
  else if (req->minor == 0)
    p = PUT_LIT (p, "Connection: keep-alive\r\n");
  p = PUT_LIT (p, "\r\n");
  if (inline_len > 0)
    p = put (p, (const char *) inline_body, inline_len);
  g_assert ((gsize) (p - buf) <= cap);
  req->resp_head = buf;
  req->resp_head_len = (gsize) (p - buf);
}

static void
attach_job (gpointer data)
{
  WeftHttpRequest *req = data;
  HttpConn *hc = req->hc;
  if (req->dropped)
    {
      drop_answer (req);
      return;
    }
  req->ready = TRUE;
  if (req->failed)
    weft_http_fail_answered (req);
  if (!hc->closed)
    weft_http_flush_ready (hc);
}

static void
flush_job (gpointer data)
{
  HttpConn *hc = data;
  hc->flush_posted = FALSE;
  if (!hc->closed)
    weft_http_flush_ready (hc);
}

/* req->responded: 0, not yet; 1, by the application; 2, by the server
 * itself (a refusal, a timeout: weft_http_respond_self()). */
#define ANSWERED_BY_SERVER 2

/* Whether the server answered @req itself: a handler answering it later,
 * from another thread, could not know (nor avoid it), so its answer is
 * refused without a critical warning. */
static gboolean
answered_by_server (WeftHttpRequest *req)
{
  return atomic_load (&req->responded) == ANSWERED_BY_SERVER;
}

static gboolean
claim (WeftHttpRequest *req, const char *func)
{
  int was = 0;
  if (!atomic_compare_exchange_strong (&req->responded, &was, 1))
    {
      if (was != ANSWERED_BY_SERVER)
        g_critical ("%s: request already answered", func);
      return FALSE;
    }
  return TRUE;
}

static void
attach (WeftHttpRequest *req)
{
  HttpConn *hc = req->hc;
  WeftContext *current = weft_context_get_current ();
  gboolean on_context = current == weft_http_conn_ctx (hc);
  if (on_context && req->dropped)
    {
      drop_answer (req);
      return;
    }
  if (on_context && hc->flush_defer && !req->close_after && !req->streaming &&
      req->resp_fd < 0 && req->resp_body == NULL && req->resp_head_len <= HELD_MAX)
    {
      /* Answered while on_data dispatches the requests of one read: one
       * flush after them writes every answer (pipelining), instead of one
       * flush each. A last answer or a stream flushes as below, and so
       * does a file: held here, each would keep its descriptor open past
       * the connection's bound on queued files (up to the pipeline limit
       * of them per connection). So does an answer above HELD_MAX:
       * held answers are not in the write queue, whose high mark stops
       * the parsing, so a client that did not read got up to the
       * pipeline limit of 1 MiB answers built at once; a small one held
       * costs about what its request does, which that limit bounds. */
      req->ready = TRUE;
      hc->flush_due = TRUE;
      return;
    }
  /* (The context test first: another thread must not read inline_req.)
   * Its handler's thread is not enough: a handler waiting in a nested
   * main loop (a modal dialog) lets that thread run another context's
   * callbacks, which must not write to this connection: they post. (No
   * current context at all passes, as for the connection's own writes.) */
  if ((atomic_load_explicit (&req->handler_thread, memory_order_relaxed) == weft_http_this_thread () &&
       (on_context || current == NULL)) ||
      (on_context && hc->inline_req == req))
    {
      /* Inside its handler, on the connection's context. */
      req->ready = TRUE;
      if (!hc->closed)
        weft_http_flush_ready (hc);
      return;
    }
  if (on_context)
    {
      /* On the connection's context, outside the handler's call (a
       * coroutine handler, a job): the request stays queued, so no
       * reference is needed, and one flush job serves every answer made
       * before it runs (pipelined coroutine handlers: one write). */
      req->ready = TRUE;
      if (!hc->flush_posted && !hc->closed)
        {
          hc->flush_posted = TRUE;
          weft__context_post_continuation (weft_http_conn_ctx (hc), flush_job,
                                           weft_http_conn_ref (hc),
                                           (GDestroyNotify) weft_http_conn_unref);
        }
      return;
    }
  weft__context_post_continuation (weft_http_conn_ctx (hc), attach_job, weft_http_request_ref (req),
                                   (GDestroyNotify) weft_http_request_unref);
}

/* An answer the server gives itself (errors, 404), on the context.
 * Returns FALSE if the request was answered already: a handler's answer
 * from another thread may come first at any moment, so the caller cannot
 * test for it beforehand (claimed in one step, without a critical).
 * @with_headers: send the headers added to @req (a 405's Allow); only
 * where no handler has the request, which could be adding one on another
 * thread while the head is built (a refusal, a handler's 500 or 503
 * leave them out). */
gboolean
weft_http_respond_self (WeftHttpRequest *req, guint status, gboolean close, gboolean with_headers)
{
  int expected = 0;
  if (!atomic_compare_exchange_strong (&req->responded, &expected, ANSWERED_BY_SERVER))
    return FALSE;
  /* Only now: the answering thread reads it in build_response(). */
  if (close)
    req->keep_alive = FALSE;
  char text[64];
  int n = g_snprintf (text, sizeof text, "%u %s\n", status, reason (status));
  /* Answering writes it out and may drop the queue's reference. */
  weft_http_request_ref (req);
  atomic_store_explicit (&req->handler_thread, weft_http_this_thread (), memory_order_relaxed);
  build_response (req, with_headers ? req->extra : NULL, status, "text/plain",
                  (const guint8 *) text, (gsize) n, NULL);
  attach (req);
  atomic_store_explicit (&req->handler_thread, NULL, memory_order_relaxed);
  weft_http_request_unref (req);
  return TRUE;
}

/* On the context, before the head goes out: makes the answer the
 * connection's last (its request's body will not be read). */
void
weft_http_force_close (WeftHttpRequest *req)
{
  if (req->close_after)
    return;
  req->close_after = TRUE;
  if (req->resp_head == NULL)
    return; /* out already (handed over): the close is all that is left */
  gsize len = req->resp_head_len;
  const char *h = req->resp_head;
  /* A whole line: a handler's header value may end with the same text
   * (a client's, echoed), and erasing that joined two lines and left the
   * server's keep-alive beside the close. */
  static const char ka[] = "\r\nConnection: keep-alive\r\n";
  /* The head ends at the first blank line; a small body may follow. */
  gsize head_len = (gsize) (g_strstr_len (h, (gssize) len, "\r\n\r\n") - h) + 4;
  GString *s = g_string_new_len (h, (gssize) len);
  const char *k = g_strstr_len (s->str, (gssize) head_len, ka);
  if (k != NULL)
    {
      g_string_erase (s, k + 2 - s->str, sizeof ka - 3);
      head_len -= sizeof ka - 3;
    }
  g_string_insert (s, (gssize) head_len - 2, "Connection: close\r\n");
  free_resp_head (req);
  req->resp_head_len = s->len;
  req->resp_head = g_string_free (s, FALSE);
}

/* ---- the request -------------------------------------------------------- */

/**
 * weft_http_request_ref:
 * @self: a request
 *
 * Takes a reference on @self, for example to answer it after the handler
 * returned; drop it with weft_http_request_unref(). Any thread.
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

/* What weft_http_request_unref() frees of the fields most requests leave
 * unset. */
static void
request_free_rare (WeftHttpRequest *self)
{
  if (self->in_body != NULL)
    g_byte_array_unref (self->in_body); /* cut off while it arrived */
  if (self->extra != NULL)
    g_string_free (self->extra, TRUE);
  if (self->allow != NULL)
    g_string_free (self->allow, TRUE);
  if (self->params != NULL)
    weft_http_params_free (self->params, self->n_params);
  GHashTable *q = atomic_load (&self->query_table);
  if (q != NULL)
    g_hash_table_unref (q);
  if (self->resp_body != NULL)
    g_bytes_unref (self->resp_body);
  if (!g_queue_is_empty (&self->stream_q))
    g_queue_clear_full (&self->stream_q, (GDestroyNotify) g_bytes_unref);
}

/* weft_http_request_unref(); @here: on the request's context (which
 * spares its request's local reference on hc the test). */
static inline __attribute__ ((always_inline)) void
request_unref (WeftHttpRequest *self, gboolean here)
{
  /* The last reference (the pending line's, usually) goes without a
   * locked instruction: 1 means no one else holds one, so no one else may
   * take or drop one now; acquire, to see what those who dropped theirs
   * did to the request. */
  if (atomic_load_explicit ((atomic_int *) &self->ref_count, memory_order_acquire) != 1 &&
      !g_atomic_int_dec_and_test (&self->ref_count))
    return;
  HttpConn *hc = self->hc;
  /* Most requests have no notify to run (clearing the fields is moot here). */
  if (self->body_notify != NULL || self->producer_notify != NULL)
    weft_http_stream_release (self);
  if (!headers_inline (self))
    g_free (self->headers); /* with the head's bytes */
  if (self->body != NULL && self->body != weft__http_empty_body)
    g_bytes_unref (self->body);
  /* Nor any of these: one test for all, ORed (no branch per field). */
  if (((guintptr) self->in_body | (guintptr) self->extra | (guintptr) self->allow |
       (guintptr) self->params | (guintptr) atomic_load (&self->query_table) |
       (guintptr) self->resp_body | (guintptr) self->stream_q.head) != 0)
    request_free_rare (self);
  free_resp_head (self);
  if (self->resp_fd >= 0)
    close (self->resp_fd);
  guint8 hc_local = self->hc_local;
  request_free (self);
  if (G_LIKELY (hc_local))
    weft_http_conn_unref_local (hc, here);
  else
    weft_http_conn_unref (hc);
}

/**
 * weft_http_request_unref:
 * @self: (transfer full) (nullable): a request
 *
 * Drops a reference. A request dropped unanswered by everyone holds up
 * the connection's later answers until the connection closes: answer
 * every request.
 */
void
weft_http_request_unref (WeftHttpRequest *self)
{
  if (self == NULL)
    return;
  request_unref (self, FALSE);
}

/* weft_http_request_unref() on the request's context. */
void
weft__http_request_unref_here (WeftHttpRequest *self)
{
  request_unref (self, TRUE);
}

/**
 * weft_http_request_get_method:
 * @self: a request
 *
 * Gets the request's method as sent (methods are case-sensitive). The
 * string belongs to the request and lives as long as it. Any thread.
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
 * Gets the path part of the request-target, without the query. The string
 * belongs to the request and lives as long as it. Any thread.
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
 * Gets the raw query string, not decoded; weft_http_request_get_query_param()
 * decodes it. The string belongs to the request and lives as long as it.
 * Any thread.
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
 * weft_http_request_get_param:
 * @self: a request
 * @name: the name of a `{name}` segment of the route's pattern
 *
 * Gets the path segment that matched a `{name}` segment of the handler's
 * route (see weft_http_server_add_handler_full()). The string belongs to
 * the request and lives as long as it. Any thread.
 *
 * Returns: (nullable): the segment's value, percent-decoded, or %NULL if
 *   the route has no such segment
 */
const gchar *
weft_http_request_get_param (WeftHttpRequest *self, const gchar *name)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (name != NULL, NULL);
  for (guint i = 0; i < self->n_params; i++)
    if (strcmp (self->params[i].name, name) == 0)
      return self->params[i].value;
  return NULL;
}

/**
 * weft_http_request_get_query_params:
 * @self: a request
 *
 * The query decoded as `application/x-www-form-urlencoded` ('+' is a
 * space, percent-escapes decoded); for a name given twice, the first
 * value; pairs with a malformed or NUL escape are left out. Decoded once,
 * on first use; safe from any thread.
 *
 * Returns: (transfer none) (element-type utf8 utf8): name to value
 */
GHashTable *
weft_http_request_get_query_params (WeftHttpRequest *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  GHashTable *t = atomic_load (&self->query_table);
  if (t != NULL)
    return t;
  GHashTable *mine = weft_http_query_parse (self->query);
  GHashTable *expected = NULL;
  if (atomic_compare_exchange_strong (&self->query_table, &expected, mine))
    return mine;
  g_hash_table_unref (mine); /* another thread was first */
  return expected;
}

/**
 * weft_http_request_get_query_param:
 * @self: a request
 * @name: a query parameter's name, decoded
 *
 * Looks up one parameter of the decoded query; for a name given several
 * times, the first value. The string belongs to the request and lives as
 * long as it. Any thread.
 *
 * Returns: (nullable): its decoded value ("" for a name without '='), or
 *   %NULL (see weft_http_request_get_query_params())
 */
const gchar *
weft_http_request_get_query_param (WeftHttpRequest *self, const gchar *name)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (name != NULL, NULL);
  return g_hash_table_lookup (weft_http_request_get_query_params (self), name);
}

/**
 * weft_http_request_get_header:
 * @self: a request
 * @name: a header name, in any case
 *
 * Looks up a request header; for a header sent several times, only the
 * first line's value. The string belongs to the request and lives as long
 * as it. Any thread.
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
 * Gets the whole request body, complete by the time a default handler
 * runs. The bytes belong to the request: take a reference with
 * g_bytes_ref() to keep them longer. Any thread.
 *
 * Returns: (transfer none) (nullable): the body, de-chunked; empty if
 *   none; %NULL for a request whose handler streams the body
 *   (%WEFT_HTTP_HANDLER_STREAM_BODY)
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
 * Adds a header to the answer. Date, Content-Length, Transfer-Encoding
 * and Connection are the server's: adding one of them, a name that is not
 * a token or a value with a control character other than tab is refused
 * (a critical warning; the header is left out). The headers go with the
 * answer the handler makes: if the server answers the request itself
 * first (its body was malformed or too slow), its answer has none of
 * them.
 */
void
weft_http_request_add_response_header (WeftHttpRequest *self, const gchar *name,
                                       const gchar *value)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (name != NULL && value != NULL);
  int responded = atomic_load (&self->responded);
  if (responded == ANSWERED_BY_SERVER)
    return; /* refused meanwhile (see claim()) */
  g_return_if_fail (responded == 0);
  /* Checked even with G_DISABLE_CHECKS: a CR or LF here would let a value
   * that came from a client write headers (or a whole answer) of its own. */
  if (!header_name_ok (name) || header_value_len (value) < 0)
    {
      g_critical ("weft_http_request_add_response_header: refused a header with a control "
                  "character or a bad name: %s", name);
      return;
    }
  if (header_is_servers (name))
    {
      g_critical ("weft_http_request_add_response_header: refused %s: the server writes it",
                  name);
      return;
    }
  if (self->extra == NULL)
    self->extra = g_string_new (NULL);
  g_string_append_printf (self->extra, "%s: %s\r\n", name, value);
}

/* A final status, or 500 with a critical warning: refusing the answer
 * left its client waiting until a timeout. */
static guint
final_status (guint status, const char *func)
{
  if (G_LIKELY (status >= 200 && status <= 599))
    return status;
  g_critical ("%s: %u is not a final status (200 to 599); answered 500", func, status);
  return 500;
}

/**
 * weft_http_request_respond:
 * @self: a request not answered yet
 * @status: the status code (200 to 599; another is a programmer error,
 *   answered 500)
 * @content_type: (nullable): the Content-Type, or %NULL
 * @body: (array length=len) (nullable): the body (copied)
 * @len: its length
 *
 * Answers the request, from any thread. Answers go out in the order the
 * requests came. The body is left out for HEAD. The server may have
 * answered the request itself meanwhile (a malformed or timed-out body:
 * 400, 408, 413): then this answer, and the headers, writes and finish
 * of a streamed one, are dropped without a warning, as for a client
 * that is gone. Answering twice otherwise is a programmer error.
 */
void
weft_http_request_respond (WeftHttpRequest *self, guint status, const gchar *content_type,
                           const guint8 *body, gsize len)
{
  g_return_if_fail (self != NULL);
  status = final_status (status, G_STRFUNC);
  g_return_if_fail (body != NULL || len == 0);
  if (!claim (self, G_STRFUNC))
    return;
  build_response (self, self->extra, status, content_type, body, len, NULL);
  attach (self);
}

/**
 * weft_http_request_respond_bytes:
 * @self: a request not answered yet
 * @status: the status code (200 to 599; another is a programmer error,
 *   answered 500)
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
  status = final_status (status, G_STRFUNC);
  g_return_if_fail (body != NULL);
  if (!claim (self, G_STRFUNC))
    return;
  build_response (self, self->extra, status, content_type, NULL, 0, body);
  attach (self);
}

/**
 * weft_http_request_respond_file:
 * @self: a request not answered yet
 * @status: the status code (200 to 599; another is a programmer error,
 *   answered 500)
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
  status = final_status (status, G_STRFUNC);
  g_return_if_fail (fd >= 0);
  if (!claim (self, G_STRFUNC))
    {
      close (fd);
      return;
    }
  self->resp_fd = fd;
  self->resp_off = offset;
  self->resp_len = length;
  build_response (self, self->extra, status, content_type, NULL, 0, NULL);
  attach (self);
}

/* ---- streamed answers --------------------------------------------------- */

static void producer_job (gpointer data);

/* Calls the producer soon (as a job, so never inside a write), if it
 * wants calling and the stream is writing. */
void
weft_http_stream_pump (WeftHttpRequest *req)
{
  HttpConn *hc = req->hc;
  if (!req->producer_on || req->producer_queued || req->stream_done || hc->closed ||
      hc->active != req)
    return;
  req->producer_queued = TRUE;
  weft__context_post_continuation (weft_http_conn_ctx (hc), producer_job,
                                   weft_http_request_ref (req),
                                   (GDestroyNotify) weft_http_request_unref);
}

static void
producer_job (gpointer data)
{
  WeftHttpRequest *req = data;
  HttpConn *hc = req->hc;
  req->producer_queued = FALSE;
  if (!req->producer_on || req->stream_done || hc->closed || hc->active != req)
    return;
  req->producer_mark = req->bytes_out;
  req->in_producer = TRUE;
  gboolean more = req->producer (req, req->producer_data);
  req->in_producer = FALSE;
  if (req->producer_release_due)
    {
      req->producer_release_due = FALSE;
      weft_http_producer_release (req);
      return;
    }
  if (!more || req->stream_done)
    {
      req->producer_on = FALSE;
      return;
    }
  if (req->bytes_out == req->producer_mark)
    {
      /* TRUE without writing would spin the CPU. */
      g_warning ("WeftHttpProducer returned TRUE without writing; it is not called again");
      req->producer_on = FALSE;
      return;
    }
  if (!hc->closed && !weft_connection_is_write_blocked (hc->conn))
    weft_http_stream_pump (req); /* room left: again; else on DRAINED */
}

/**
 * weft_http_request_respond_stream:
 * @self: a request not answered yet
 * @status: the status code (200 to 599; another is a programmer error,
 *   answered 500)
 * @content_type: (nullable): the Content-Type, or %NULL (for server-sent
 *   events, "text/event-stream")
 * @producer: (scope notified) (closure user_data) (destroy notify) (nullable):
 *   called on the connection's context whenever the connection can take
 *   more of the body, for as long as it returns %TRUE; or %NULL if the body
 *   is written by other means
 * @user_data: data for @producer
 * @notify: (nullable): frees @user_data, on the connection's context, once
 *   the answer is finished or the connection is gone; never inside a call
 *   of @producer (if that call finishes the answer, or its write finds the
 *   client gone, @notify runs when it returns)
 *
 * Starts an answer whose body is written piece by piece, with
 * weft_http_request_write() from any thread, and ended with
 * weft_http_request_finish(). It is sent with chunked transfer coding
 * (to an HTTP/1.0 client: delimited by closing the connection). The
 * pieces go out as soon as the answers before this one are out; until
 * then they are kept. For HEAD, 204 and 304 no body is sent: the answer
 * is finished at once and @producer is never called.
 */
void
weft_http_request_respond_stream (WeftHttpRequest *self, guint status, const gchar *content_type,
                                  WeftHttpProducer producer, gpointer user_data,
                                  GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  status = final_status (status, G_STRFUNC);
  if (!claim (self, G_STRFUNC))
    {
      if (notify != NULL)
        notify (user_data);
      return;
    }
  self->streaming = TRUE;
  self->producer = producer;
  self->producer_data = user_data;
  self->producer_notify = notify;
  build_response (self, self->extra, status, content_type, NULL, 0, NULL);
  if (self->no_body_out)
    {
      self->stream_done = TRUE;
      atomic_store (&self->finish_called, TRUE);
    }
  else
    self->producer_on = producer != NULL;
  attach (self);
}

typedef struct {
  WeftHttpRequest *req;
  GBytes *chunk;  /* NULL: the finish */
  gsize payload;
} StreamOp;

/* On the context: a piece (or the end) of a stream, in order. */
static void
stream_put (WeftHttpRequest *req, GBytes *chunk, gsize payload)
{
  HttpConn *hc = req->hc;
  if (hc->closed || req->stream_done || req->dropped)
    return;
  if (chunk == NULL)
    {
      req->stream_done = TRUE;
      req->producer_on = FALSE;
      if (hc->active == req || (req->ready && weft_http_pending_peek (hc) == req))
        weft_http_flush_ready (hc);
      return;
    }
  req->bytes_out += payload;
  if (hc->active == req)
    weft_connection_write_bytes (hc->conn, chunk);
  else
    g_queue_push_tail (&req->stream_q, g_bytes_ref (chunk));
}

static void
stream_op_job (gpointer data)
{
  StreamOp *op = data;
  stream_put (op->req, op->chunk, op->payload);
}

static void
stream_op_free (gpointer data)
{
  StreamOp *op = data;
  if (op->chunk != NULL)
    g_bytes_unref (op->chunk);
  weft_http_request_unref (op->req);
  g_free (op);
}

static void
stream_op (WeftHttpRequest *req, GBytes *chunk, gsize payload)
{
  HttpConn *hc = req->hc;
  if (on_context (hc))
    {
      stream_put (req, chunk, payload);
      if (chunk != NULL)
        g_bytes_unref (chunk);
      return;
    }
  StreamOp *op = g_new (StreamOp, 1);
  op->req = weft_http_request_ref (req);
  op->chunk = chunk;
  op->payload = payload;
  weft__context_post_continuation (weft_http_conn_ctx (hc), stream_op_job, op, stream_op_free);
}

static gboolean
stream_writable (WeftHttpRequest *self, const char *func)
{
  if (!self->streaming)
    {
      if (answered_by_server (self))
        return FALSE; /* its stream was refused (see claim()) */
      g_critical ("%s: the request has no streamed answer", func);
      return FALSE;
    }
  if (atomic_load (&self->finish_called) || atomic_load (&self->hc->gone))
    return FALSE;
  return TRUE;
}

/* One chunk in chunked coding: size line, data, CRLF; or the data alone
 * for an HTTP/1.0 close-delimited body. */
static GBytes *
encode_chunk (WeftHttpRequest *self, const guint8 *data, gsize len)
{
  if (!self->chunked_out)
    return g_bytes_new (data, len);
  char line[24];
  int n = g_snprintf (line, sizeof line, "%zx\r\n", len);
  guint8 *buf = g_malloc ((gsize) n + len + 2);
  memcpy (buf, line, (gsize) n);
  memcpy (buf + n, data, len);
  memcpy (buf + n + len, "\r\n", 2);
  return g_bytes_new_take (buf, (gsize) n + len + 2);
}

/**
 * weft_http_request_write:
 * @self: a request answered with weft_http_request_respond_stream()
 * @data: (array length=len): the next piece of the body (copied)
 * @len: its length; 0 writes nothing
 *
 * Adds to a streamed answer's body, from any thread: pieces written from
 * one thread go out in the order written. Pieces are queued without
 * bound; to follow the client's pace, write from a #WeftHttpProducer,
 * which is called when the connection has room.
 *
 * Returns: %TRUE if queued; %FALSE once the connection is gone, the
 *   stream was finished, or the answer has no body (HEAD)
 */
gboolean
weft_http_request_write (WeftHttpRequest *self, const guint8 *data, gsize len)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (data != NULL || len == 0, FALSE);
  if (!stream_writable (self, G_STRFUNC) || self->no_body_out)
    return FALSE;
  if (len == 0)
    return TRUE;
  stream_op (self, encode_chunk (self, data, len), len);
  return TRUE;
}

/**
 * weft_http_request_write_bytes:
 * @self: a request answered with weft_http_request_respond_stream()
 * @bytes: the next piece of the body
 *
 * weft_http_request_write() with a #GBytes.
 *
 * Returns: %TRUE if queued (see weft_http_request_write())
 */
gboolean
weft_http_request_write_bytes (WeftHttpRequest *self, GBytes *bytes)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (bytes != NULL, FALSE);
  gsize len;
  const guint8 *data = g_bytes_get_data (bytes, &len);
  if (!self->chunked_out && self->streaming && len > 0 && stream_writable (self, G_STRFUNC) &&
      !self->no_body_out)
    {
      stream_op (self, g_bytes_ref (bytes), len);
      return TRUE;
    }
  return weft_http_request_write (self, data, len);
}

/**
 * weft_http_request_finish:
 * @self: a request answered with weft_http_request_respond_stream()
 *
 * Ends a streamed answer's body, from any thread (after the writes made
 * from that thread). The connection then goes on with the next request.
 * Finishing twice, or after the connection is gone, does nothing.
 */
void
weft_http_request_finish (WeftHttpRequest *self)
{
  g_return_if_fail (self != NULL);
  if (!self->streaming && answered_by_server (self))
    return; /* its stream was refused (see claim()) */
  g_return_if_fail (self->streaming);
  if (atomic_exchange (&self->finish_called, TRUE))
    return;
  if (atomic_load (&self->hc->gone))
    return;
  stream_op (self, NULL, 0);
}

/* ---- streamed bodies ---------------------------------------------------- */

/* On the context: delivers a piece of a streamed body to its reader. */
void
weft_http_body_deliver (WeftHttpRequest *req, const guint8 *data, gsize len, gboolean done)
{
  if (req->body_done)
    return;
  if (done)
    req->body_done = TRUE;
  /* The reader may answer and finish, which can free the request. */
  weft_http_request_ref (req);
  WeftHttpBodyFunc func = req->body_func;
  if (func != NULL)
    func (req, data != NULL ? data : (const guint8 *) "", len, done, req->body_data);
  if (done)
    release_body_reader (req); /* the reader is done with: only its notify is left */
  weft_http_request_unref (req);
}

static void
read_body_job (gpointer data)
{
  WeftHttpRequest *req = data;
  HttpConn *hc = req->hc;
  if (hc->closed)
    {
      body_abandon (req);
      return;
    }
  if (!req->has_body)
    {
      weft_http_body_deliver (req, NULL, 0, TRUE);
      return;
    }
  if (hc->reading != req)
    {
      body_abandon (req);
      return;
    }
  weft_http_send_continue (req);
  weft_http_resume_body (hc);
}

/* The 100 (Continue) of @req, the request whose body is being read, if it
 * asked for one and it is due: the client waits for it before sending the
 * body. Only if nothing of the body came yet, no earlier answer is still
 * due (it would overtake it: then weft_http_flush_ready() sends it once
 * those are out), and its own answer's head is not out. A streamed body's
 * 100 is due once its handler asks for the body, even if it answered
 * first: that answer waits for the body (or, a stream, follows the 100),
 * so without the 100 its client and the server waited for each other. A
 * whole body's request answered already was refused: no 100. Once. */
void
weft_http_send_continue (WeftHttpRequest *req)
{
  HttpConn *hc = req->hc;
  if (!req->expect_continue || req->in_bytes != 0 || weft_http_pending_peek (hc) != req ||
      req->head_sent)
    return;
  if (req->stream_body ? !atomic_load (&req->body_wanted) : atomic_load (&req->responded))
    return;
  static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
  req->expect_continue = FALSE;
  /* The body's clock starts now: the client was waiting for this. */
  req->in_start_us = req->in_last_us = g_get_monotonic_time ();
  weft_connection_write (hc->conn, (const guint8 *) cont, sizeof cont - 1);
}

/**
 * weft_http_request_read_body:
 * @self: a request of a %WEFT_HTTP_HANDLER_STREAM_BODY handler
 * @func: (scope notified) (closure user_data) (destroy notify): receives
 *   the body's pieces on the connection's context, the last call with
 *   done = %TRUE
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data, on the connection's context, after
 *   the last call, or when the connection is gone before the body ended
 *
 * Starts reading the request's body; call it on the connection's context
 * (in the handler, or later in a job posted there). An `Expect:
 * 100-continue` request is sent its 100 now. The handler may answer
 * before, during or after the body. If the body never ends (the client
 * goes away, a timeout, a framing error), @func gets no done call, and
 * @notify still runs.
 */
void
weft_http_request_read_body (WeftHttpRequest *self, WeftHttpBodyFunc func, gpointer user_data,
                             GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (func != NULL);
  g_return_if_fail (self->stream_body);
  g_return_if_fail (on_context (self->hc));
  if (atomic_load (&self->body_wanted))
    {
      g_critical ("weft_http_request_read_body: the body is already being read");
      return;
    }
  self->body_func = func;
  self->body_data = user_data;
  self->body_notify = notify;
  atomic_store (&self->body_wanted, TRUE);
  weft__context_post_continuation (weft_http_conn_ctx (self->hc), read_body_job,
                                   weft_http_request_ref (self),
                                   (GDestroyNotify) weft_http_request_unref);
}
