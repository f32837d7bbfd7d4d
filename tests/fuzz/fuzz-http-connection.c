/* fuzz-http-connection.c: libFuzzer target for a whole HTTP connection:
 * arbitrary bytes, split at points the input chooses, through the real
 * server state machine (http/weft-http-server.c, weft-http-request.c,
 * weft-http-static.c on listener/weft-connection.c). Built by
 * tests/fuzz/run; replayed by tests/test-fuzz-replay.c.
 *
 * How. One engine driven by a GMainContext (weft_engine_new_for_main_context)
 * that only this thread iterates, so every callback runs here, in an order
 * that depends on the input alone; one WeftHttpServer with the handlers
 * below, both made once and reused. Per input, an AF_UNIX socketpair (not
 * TCP: the kernel's TCP paths, Nagle and TCP_NODELAY, are not exercised):
 * the server's end becomes a WeftConnection on a fresh context, adopted
 * with weft__http_server_adopt() (what the listener's accept does); the
 * client's end stays here. Each piece of the input is written to it, the
 * main context is iterated until nothing is left to run, and the answers
 * are read back without blocking. Then the client half-closes, everything
 * runs again, and the client closes; the connection, its context and its
 * HTTP state must then be gone (so nothing carries over to the next
 * input), and with them everything they allocated (LeakSanitizer).
 *
 * Input: byte 0, bits 0-2: the number of cuts n (0-7); bit 3: end
 * abruptly (close without half-closing first, answers unread); bit 4: in
 * a hurry (the end comes right behind the last piece, before the server
 * ran: both are read together). Bytes 1..n: the lengths of the first n
 * pieces; the rest is the last piece. (A hurry that let the server run a
 * few steps between pieces would depend on the main-context bridge's 2 ms
 * budget per dispatch, so on the machine's speed: not reproducible.)
 *
 * Checked on the answers (half-close runs only): each starts with
 * "HTTP/1.1 " and a known 3-digit status (no 408: timeouts are an hour
 * here; no 500 or 503: the handlers always answer), has well-formed
 * header lines and a body framed by its Content-Length, chunked coding or
 * the close; nothing follows an answer saying "Connection: close"; there
 * are never more final answers than complete heads the input could hold
 * (one per "\r\n\r\n") or whole requests it holds (read with the
 * server's own parser, as a model of the client), plus one refusal or
 * early answer; unless an answer said "Connection: close", every whole
 * request is answered, however the connection ends; and the server closes
 * its end once the client half-closed and every answer is out.
 *
 * WEFT_FUZZ_VERBOSE=1 prints each input's answers (to look at a reproducer).
 *
 * Bodies of answers never contain "HTTP/" (the tree's files, the
 * handlers' texts), so an answer to HEAD (a length, no body) is told
 * from one with a body by what follows its head.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "weft-http-private.h"
#include "weft-gmain.h"
#include "weft-engine.h"
#include "weft-coro.h"
#include "fuzz-tree.h"

#define OUT_CAP (4 * 1024 * 1024) /* answers kept for checking */
#define HOUR_MS (3600 * 1000)

static struct {
  GMainContext *mc;
  WeftEngine *engine;
  WeftHttpServer *server;
  guint64 n_contexts; /* with no connection */
  gboolean verbose;   /* WEFT_FUZZ_VERBOSE set: print the answers */
} F;

static guint64
timers_fired (void)
{
  WeftEngineStats st;
  weft_engine_get_stats (F.engine, &st);
  return st.timers_fired;
}

/* ---- handlers ------------------------------------------------------------- */

static void
respond_text (WeftHttpRequest *req, guint status, const char *text)
{
  weft_http_request_respond (req, status, "text/plain", (const guint8 *) text, strlen (text));
}

static void
hello (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  respond_text (req, 200, "hello\n");
}

/* A {param} route that also decodes the query. */
static void
param (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  const char *name = weft_http_request_get_param (req, "name");
  const char *method = weft_http_request_get_method (req);
  /* (A GET route serves HEAD too.) */
  if (name == NULL || name[0] == '\0' ||
      (strcmp (method, "GET") != 0 && strcmp (method, "HEAD") != 0) ||
      strchr (weft_http_request_get_query (req), '#') != NULL)
    abort ();
  GHashTable *q = weft_http_request_get_query_params (req);
  gboolean has_q = g_hash_table_lookup (q, "q") != NULL;
  if (has_q != (weft_http_request_get_query_param (req, "q") != NULL))
    abort ();
  respond_text (req, 200, g_hash_table_size (q) > 0 ? "query\n" : "no query\n");
}

/* The whole body (default handler): its length and a sum. */
static void
sum_body (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  gsize len;
  const guint8 *p = g_bytes_get_data (weft_http_request_get_body (req), &len);
  guint sum = 0;
  for (gsize i = 0; i < len; i++)
    sum = sum * 31 + p[i];
  char text[64];
  g_snprintf (text, sizeof text, "len=%" G_GSIZE_FORMAT " sum=%u\n", len, sum);
  respond_text (req, 200, text);
}

/* A large body, sent by reference (above WEFT_HTTP_BIG_BODY). */
static void
big (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  static guint8 block[20000];
  memset (block, 'b', sizeof block);
  GBytes *b = g_bytes_new_static (block, sizeof block);
  weft_http_request_respond_bytes (req, 200, "application/octet-stream", b);
  g_bytes_unref (b);
}

/* The request's X-Echo in a response header: whatever the parser let in
 * must be acceptable there (else a critical, fatal here). */
static void
echo_header (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  const char *v = weft_http_request_get_header (req, "X-Echo");
  if (v != NULL)
    weft_http_request_add_response_header (req, "X-Echo", v);
  respond_text (req, 200, "header\n");
}

/* A streamed answer: n pieces from a producer (n from the path), or, for
 * n = 0, two pieces written and finished inside the handler. */
static gboolean
pieces (WeftHttpRequest *req, gpointer data)
{
  guint *left = data;
  weft_http_request_write (req, (const guint8 *) "piece\n", 6);
  if (--*left > 0)
    return TRUE;
  weft_http_request_finish (req);
  return FALSE;
}

static void
stream (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  guint n = (guint) ((guchar) weft_http_request_get_param (req, "n")[0] % 8);
  if (n == 0)
    {
      weft_http_request_respond_stream (req, 200, "text/plain", NULL, NULL, NULL);
      GBytes *b = g_bytes_new_static ("now\n", 4);
      weft_http_request_write_bytes (req, b);
      g_bytes_unref (b);
      weft_http_request_write (req, (const guint8 *) "done\n", 5);
      weft_http_request_finish (req);
      return;
    }
  guint *left = g_new (guint, 1);
  *left = n;
  weft_http_request_respond_stream (req, 200, "text/plain", pieces, left, g_free);
}

/* A streamed body (STREAM_BODY), summed piece by piece. "X-Refuse" answers
 * 413 without reading it; "X-Early" answers first and reads after. */
typedef struct {
  guint64 len;
  guint sum;
  gboolean early;
} Sum;

static void
sum_piece (WeftHttpRequest *req, const guint8 *p, gsize len, gboolean done, gpointer data)
{
  Sum *s = data;
  if (len == 0 && !done)
    abort (); /* an empty piece is only ever the last call */
  for (gsize i = 0; i < len; i++)
    s->sum = s->sum * 31 + p[i];
  s->len += len;
  if (done && !s->early)
    {
      char text[64];
      g_snprintf (text, sizeof text, "len=%" G_GUINT64_FORMAT " sum=%u\n", s->len, s->sum);
      respond_text (req, 200, text);
    }
}

static void
upload (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  if (weft_http_request_get_body (req) != NULL)
    abort (); /* a streamed body is never buffered */
  if (weft_http_request_get_header (req, "X-Refuse") != NULL)
    {
      respond_text (req, 413, "refused\n");
      return;
    }
  Sum *s = g_new0 (Sum, 1);
  s->early = weft_http_request_get_header (req, "X-Early") != NULL;
  if (s->early)
    respond_text (req, 200, "early\n");
  weft_http_request_read_body (req, sum_piece, s, g_free);
}

/* Full duplex: a streamed answer that reports each body piece as it
 * arrives (not its bytes: answers must not contain "HTTP/"). */
static void
duplex_piece (WeftHttpRequest *req, const guint8 *p, gsize len, gboolean done, gpointer data)
{
  char text[32];
  if (len > 0)
    {
      int n = g_snprintf (text, sizeof text, "got %" G_GSIZE_FORMAT "\n", len);
      weft_http_request_write (req, (const guint8 *) text, (gsize) n);
    }
  if (done)
    weft_http_request_finish (req);
}

static void
duplex (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  weft_http_request_respond_stream (req, 200, "text/plain", NULL, NULL, NULL);
  weft_http_request_read_body (req, duplex_piece, NULL, NULL);
}

/* A coroutine handler that answers after a yield (through a job). */
static void
coro_yield (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  weft_coro_yield ();
  respond_text (req, 200, "yielded\n");
}

/* A coroutine handler that answers at once: its coroutine goes on with
 * the next coroutine requests of the same read. */
static void
coro_now (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  respond_text (req, 200, "now\n");
}

/* A coroutine handler of a streamed body: waits for the pieces on a
 * condition. Its state is shared with the body reader and freed by the
 * last of the two: a connection that dies under it runs the reader's
 * notify, which wakes it. */
typedef struct {
  gint refs;
  WeftCoroCond *cond;
  guint64 len;
  gboolean done;
  gboolean over; /* the reader's notify ran: no more pieces */
} CoroBody;

static void
coro_body_unref (gpointer data)
{
  CoroBody *b = data;
  if (--b->refs > 0)
    return;
  weft_coro_cond_unref (b->cond);
  g_free (b);
}

static void
coro_body_piece (WeftHttpRequest *req, const guint8 *p, gsize len, gboolean done, gpointer data)
{
  CoroBody *b = data;
  b->len += len;
  b->done = done;
  weft_coro_cond_signal (b->cond);
}

static void
coro_body_over (gpointer data)
{
  CoroBody *b = data;
  b->over = TRUE;
  weft_coro_cond_signal (b->cond);
  coro_body_unref (b);
}

static void
coro_body (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  CoroBody *b = g_new0 (CoroBody, 1);
  b->refs = 2;
  b->cond = weft_coro_cond_new ();
  weft_http_request_read_body (req, coro_body_piece, b, coro_body_over);
  /* Both run on this context: no mutex. */
  while (!b->done && !b->over)
    if (weft_coro_cond_wait (b->cond, NULL, -1) != 0)
      break;
  if (b->done)
    {
      char text[48];
      g_snprintf (text, sizeof text, "coro len=%" G_GUINT64_FORMAT "\n", b->len);
      respond_text (req, 200, text);
    }
  /* else the connection is gone: the server's 500 goes nowhere */
  coro_body_unref (b);
}

static void
setup (void)
{
  if (F.server != NULL)
    return;
  /* Criticals and warnings are bugs here (a refused header, a failed
   * accept...): make them crashes the fuzzer sees. */
  g_log_set_always_fatal (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  const FuzzTree *tree = fuzz_tree_get ();
  GError *error = NULL;
  F.verbose = g_getenv ("WEFT_FUZZ_VERBOSE") != NULL;
  F.mc = g_main_context_new ();
  F.engine = weft_engine_new_for_main_context (F.mc, &error);
  if (F.engine == NULL)
    abort ();
  WeftHttpServer *s = weft_http_server_new (F.engine);
  weft_http_server_add_handler (s, "GET", "/", hello, NULL, NULL);
  weft_http_server_add_handler (s, "GET", "/p/{name}", param, NULL, NULL);
  weft_http_server_add_handler (s, "HEAD", "/head-only", hello, NULL, NULL);
  weft_http_server_add_handler (s, "POST", "/sum", sum_body, NULL, NULL);
  weft_http_server_add_handler (s, "GET", "/big", big, NULL, NULL);
  weft_http_server_add_handler (s, "GET", "/hdr", echo_header, NULL, NULL);
  weft_http_server_add_handler (s, "GET", "/stream/{n}", stream, NULL, NULL);
  weft_http_server_add_handler_full (s, "POST", "/upload", WEFT_HTTP_HANDLER_STREAM_BODY, upload,
                                     NULL, NULL);
  weft_http_server_add_handler_full (s, "PUT", "/duplex", WEFT_HTTP_HANDLER_STREAM_BODY, duplex,
                                     NULL, NULL);
  weft_http_server_add_handler_full (s, "GET", "/coro", WEFT_HTTP_HANDLER_COROUTINE, coro_yield,
                                     NULL, NULL);
  weft_http_server_add_handler_full (s, "GET", "/coro-now", WEFT_HTTP_HANDLER_COROUTINE, coro_now,
                                     NULL, NULL);
  weft_http_server_add_handler_full (s, "POST", "/coro-body",
                                     WEFT_HTTP_HANDLER_COROUTINE | WEFT_HTTP_HANDLER_STREAM_BODY,
                                     coro_body, NULL, NULL);
  if (!weft_http_server_add_directory (s, "/files/", tree->root, &error))
    abort ();
  /* Small limits, so that they are reached; timeouts an hour, so that none
   * fires (their timers are still set and removed); no keep-alive sweep. */
  weft_http_server_set_limit (s, WEFT_HTTP_LIMIT_MAX_TARGET_BYTES, 1024);
  weft_http_server_set_limit (s, WEFT_HTTP_LIMIT_MAX_HEAD_BYTES, 4096);
  weft_http_server_set_limit (s, WEFT_HTTP_LIMIT_MAX_HEADERS, 16);
  weft_http_server_set_limit (s, WEFT_HTTP_LIMIT_MAX_BODY_BYTES, 65536);
  weft_http_server_set_limit (s, WEFT_HTTP_LIMIT_MAX_PIPELINE, 4);
  weft_http_server_set_limit (s, WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS, HOUR_MS);
  weft_http_server_set_limit (s, WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS, HOUR_MS);
  weft_http_server_set_limit (s, WEFT_HTTP_LIMIT_BODY_MIN_RATE, 0);
  weft_http_server_set_limit (s, WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS, 0);
  weft_http_server_set_limit (s, WEFT_HTTP_LIMIT_WRITE_TIMEOUT_MS, HOUR_MS);
  /* start() wants a socket: one nobody connects to. */
  char *sock = g_build_filename (fuzz_tree.base, "listen.sock", NULL);
  if (!weft_listener_add_unix (weft_http_server_get_listener (s), sock, &error) ||
      !weft_http_server_start (s, &error))
    abort ();
  g_free (sock);
  F.server = s;
  while (g_main_context_iteration (F.mc, FALSE))
    ;
  WeftEngineStats st;
  weft_engine_get_stats (F.engine, &st);
  F.n_contexts = st.n_contexts;
}

/* ---- driving one connection ----------------------------------------------- */

typedef struct {
  int fd;            /* the client's end */
  GByteArray *out;   /* what the server sent, up to OUT_CAP */
  gboolean eof;      /* the server closed (or reset) its end */
  gsize sent;        /* input bytes the server's end took */
} Client;

/* Runs the engine until it has nothing to do. Returns whether it ran. */
static gboolean
iterate (void)
{
  gboolean ran = FALSE;
  while (g_main_context_iteration (F.mc, FALSE))
    ran = TRUE;
  return ran;
}

/* Reads what the server sent. Returns whether anything came. */
static gboolean
drain (Client *c)
{
  gboolean got = FALSE;
  guint8 buf[65536];
  while (!c->eof)
    {
      ssize_t n = read (c->fd, buf, sizeof buf);
      if (n > 0)
        {
          got = TRUE;
          if (c->out->len < OUT_CAP)
            g_byte_array_append (c->out, buf, (guint) MIN ((gsize) n, OUT_CAP - c->out->len));
        }
      else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        c->eof = TRUE;
      else if (errno == EAGAIN)
        break;
    }
  return got;
}

static void
pump (Client *c)
{
  gboolean a, b;
  do
    {
      a = iterate ();
      b = drain (c);
    }
  while (a || b);
}

/* Writes @len bytes, running the server while the socket is full, then
 * runs it until idle unless @hurry. FALSE if the server stopped reading
 * (a paused or closing connection). */
static gboolean
send_piece (Client *c, const guint8 *p, gsize len, gboolean hurry)
{
  while (len > 0)
    {
      ssize_t n = send (c->fd, p, len, MSG_NOSIGNAL); /* a closed server end: EPIPE, no signal */
      if (n > 0)
        {
          p += n;
          len -= (gsize) n;
          c->sent += (gsize) n;
          continue;
        }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && errno != EAGAIN)
        return FALSE; /* the server's end is gone */
      gboolean a = iterate ();
      gboolean b = drain (c);
      if (!a && !b)
        return FALSE;
    }
  if (!hurry)
    pump (c);
  return TRUE;
}

/* ---- checking the answers ------------------------------------------------- */

static G_NORETURN void
fail (const char *why, const GByteArray *out, gsize at)
{
  fprintf (stderr, "fuzz-http-connection: %s at byte %" G_GSIZE_FORMAT " of %u of output:\n%.*s\n",
           why, at, out->len, (int) MIN (out->len - at, 600), (const char *) out->data + at);
  abort ();
}

static gboolean
starts (const guint8 *p, gsize len, const char *lit)
{
  gsize n = strlen (lit);
  return len >= n && memcmp (p, lit, n) == 0;
}

static gsize
count_heads (const guint8 *p, gsize len)
{
  gsize n = 0;
  for (gsize i = 0; i + 4 <= len; i++)
    if (memcmp (p + i, "\r\n\r\n", 4) == 0)
      {
        n++;
        i += 3;
      }
  return n;
}

#define CHUNKS_BAD (-1)
#define CHUNKS_CUT (-2) /* well-formed as far as it goes, but not ended */

/* Skips a chunked body at @p; returns its length, CHUNKS_BAD or CHUNKS_CUT. */
static gssize
chunked_len (const guint8 *p, gsize len)
{
  gsize i = 0;
  for (;;)
    {
      guint64 size = 0;
      gsize digits = 0;
      while (i < len && g_ascii_isxdigit (p[i]) && digits < 15)
        {
          size = size * 16 + (guint64) g_ascii_xdigit_value (p[i]);
          i++;
          digits++;
        }
      if (i == len || (p[i] == '\r' && i + 1 == len))
        return CHUNKS_CUT;
      if (digits == 0 || !starts (p + i, len - i, "\r\n"))
        return CHUNKS_BAD;
      i += 2;
      if (size > len - i)
        return CHUNKS_CUT;
      i += size;
      if (i == len || (p[i] == '\r' && i + 1 == len))
        return CHUNKS_CUT;
      if (!starts (p + i, len - i, "\r\n"))
        return CHUNKS_BAD;
      i += 2;
      if (size == 0)
        return (gssize) i; /* the server sends no trailers */
    }
}

/* The model of the client's side: how many whole requests (head and body)
 * the first @len bytes of the input hold, read with the server's parser
 * and limits, up to the first it refuses or the first cut off. */
static gsize
count_complete (const guint8 *p, gsize len)
{
  const WeftHttpLimits *lim = &F.server->limits;
  WeftHttpHeader headers[256];
  gsize at = 0, n = 0;
  while (at < len)
    {
      WeftHttpHead head;
      guint status;
      gssize r = weft_http_parse_request ((const char *) p + at, len - at, lim, &head, headers,
                                          G_N_ELEMENTS (headers), &status);
      if (r < 0)
        break;
      at += (gsize) r;
      if (head.body == WEFT_HTTP_BODY_LENGTH)
        {
          if (head.content_length > len - at)
            break;
          at += head.content_length;
        }
      else if (head.body == WEFT_HTTP_BODY_CHUNKED)
        {
          WeftHttpChunked dec;
          weft_http_chunked_init (&dec, lim->max_body);
          gboolean done = FALSE;
          while (!done)
            {
              const char *d;
              gsize dl;
              gssize u = weft_http_chunked_decode (&dec, (const char *) p + at, len - at, &d, &dl,
                                                   &done, &status);
              if (u < 0 || (u == 0 && !done))
                return n;
              at += (gsize) u;
            }
        }
      n++;
    }
  return n;
}

static void
check_answers (const GByteArray *out, const guint8 *input, gsize input_len, guint64 routed)
{
  const guint8 *p = out->data;
  gsize len = out->len, at = 0, finals = 0, continues = 0;
  gboolean closed = FALSE, cut = FALSE;
  if (len >= OUT_CAP)
    return; /* cut at the cap: nothing reliable to say */
  while (at < len)
    {
      if (closed)
        fail ("bytes after a \"Connection: close\" answer", out, at);
      if (!starts (p + at, len - at, "HTTP/1.1 ") || len - at < 13 ||
          !g_ascii_isdigit (p[at + 9]) || !g_ascii_isdigit (p[at + 10]) ||
          !g_ascii_isdigit (p[at + 11]) || p[at + 12] != ' ')
        fail ("no status line", out, at);
      guint status =
          (guint) ((p[at + 9] - '0') * 100 + (p[at + 10] - '0') * 10 + (p[at + 11] - '0'));
      static const guint known[] = { 100, 200, 206, 301, 304, 400, 403, 404, 405, 412,
                                     413, 414, 416, 417, 431, 501, 505 };
      gboolean ok = FALSE;
      for (guint i = 0; i < G_N_ELEMENTS (known); i++)
        ok |= status == known[i];
      if (!ok)
        fail ("unexpected status", out, at);
      const guint8 *end = memmem (p + at, len - at, "\r\n\r\n", 4);
      if (end == NULL)
        fail ("head cut off", out, at);
      gsize head_end = (gsize) (end - p) + 4;
      /* The header lines: "Name: value", no CR or LF inside. */
      guint64 clen = 0;
      gboolean has_len = FALSE, chunked = FALSE;
      gsize line = at;
      while (TRUE)
        {
          const guint8 *eol = memmem (p + line, head_end - line, "\r\n", 2);
          gsize l = (gsize) (eol - (p + line));
          if (memchr (p + line, '\r', l) != NULL || memchr (p + line, '\n', l) != NULL)
            fail ("CR or LF inside a header line", out, line);
          if (line > at && l > 0)
            {
              const guint8 *colon = memchr (p + line, ':', l);
              if (colon == NULL || colon == p + line)
                fail ("bad header line", out, line);
              for (const guint8 *q = p + line; q < colon; q++)
                if (*q <= ' ' || *q >= 0x7f)
                  fail ("bad header name", out, line);
              if (starts (p + line, l, "Content-Length: "))
                {
                  has_len = TRUE;
                  if (l == 16 || l > 16 + 19)
                    fail ("bad Content-Length", out, line);
                  for (gsize i = 16; i < l; i++)
                    {
                      if (!g_ascii_isdigit (p[line + i]))
                        fail ("bad Content-Length", out, line);
                      clen = clen * 10 + (guint64) (p[line + i] - '0');
                    }
                }
              else if (starts (p + line, l, "Transfer-Encoding: chunked") && l == 26)
                chunked = TRUE;
              else if (starts (p + line, l, "Connection: close") && l == 17)
                closed = TRUE;
            }
          line += l + 2;
          if (l == 0 || line >= head_end)
            break;
        }
      at = head_end;
      if (status == 100)
        {
          if (has_len || chunked || closed)
            fail ("a 100 with framing", out, at);
          continues++;
          continue;
        }
      finals++;
      gboolean head_answer = at == len || starts (p + at, len - at, "HTTP/1.1 ");
      if (status == 204 || status == 304)
        continue;
      if (has_len)
        {
          if (head_answer)
            continue; /* HEAD: the length without the body */
          if (clen > len - at)
            fail ("body shorter than its Content-Length", out, at);
          at += clen;
        }
      else if (chunked)
        {
          if (head_answer)
            continue;
          gssize n = chunked_len (p + at, len - at);
          if (n == CHUNKS_BAD)
            fail ("bad chunked body", out, at);
          if (n == CHUNKS_CUT)
            {
              /* A stream whose request's body the half-close cut off
               * (full duplex) ends with the connection. That request is
               * not a whole one: the whole ones must all be answered
               * besides it. */
              cut = TRUE;
              n = (gssize) (len - at);
            }
          at += (gsize) n;
        }
      else if (closed)
        at = len; /* delimited by the close (HTTP/1.0 streams): the last answer */
      else if (!head_answer)
        fail ("no framing and no close", out, at); /* (HEAD to an HTTP/1.0 stream: none needed) */
    }
  gsize heads = count_heads (input, input_len);
  gsize complete = count_complete (input, input_len);
  if (finals > heads + 1 || finals > complete + 1 || finals > routed + 1 || continues > heads ||
      (!closed && finals - cut < complete))
    {
      fprintf (stderr, "fuzz-http-connection: %" G_GSIZE_FORMAT " answers, %" G_GSIZE_FORMAT
               " continues for %" G_GSIZE_FORMAT " heads, %" G_GSIZE_FORMAT
               " complete requests, %" G_GUINT64_FORMAT " routed\n",
               finals, continues, heads, complete, routed);
      fail (finals - cut < complete ? "a complete request was not answered" : "too many answers",
            out, 0);
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  setup ();
  if (size < 1)
    return 0;
  guint n_cuts = data[0] & 7;
  gboolean abrupt = (data[0] & 8) != 0;
  gboolean hurry = (data[0] & 16) != 0;
  if (size < 1 + (gsize) n_cuts)
    return 0;
  const guint8 *payload = data + 1 + n_cuts;
  gsize payload_len = size - 1 - n_cuts;

  int sv[2];
  if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
    abort ();
  GError *error = NULL;
  WeftContext *ctx = weft_context_new (F.engine);
  WeftConnection *conn = weft_connection_new (ctx, sv[0], &error);
  if (conn == NULL)
    abort ();
  guint64 routed_before = weft_http_server_get_n_requests (F.server);
  guint64 fired_before = timers_fired ();
  weft__http_server_adopt (F.server, conn);
  weft_context_dispatch (ctx);
  weft_context_unref (ctx); /* the connection holds it */

  Client c = { sv[1], g_byte_array_new (), FALSE };
  pump (&c);
  gsize done = 0;
  gboolean writing = TRUE;
  for (guint i = 0; i <= n_cuts && writing; i++)
    {
      gsize n = i < n_cuts ? MIN ((gsize) data[1 + i], payload_len - done) : payload_len - done;
      if (n > 0)
        writing = send_piece (&c, payload + done, n, hurry && i == n_cuts);
      done += n;
    }

  if (!abrupt)
    {
      shutdown (c.fd, SHUT_WR);
      pump (&c);
      if (F.verbose)
        fprintf (stderr, "---- %u bytes of answers%s:\n%.*s\n----\n", c.out->len,
                 c.eof ? ", then the close" : "", (int) c.out->len, (const char *) c.out->data);
      if (!c.eof)
        fail ("the server kept a half-closed connection with nothing to do", c.out, 0);
      check_answers (c.out, payload, c.sent,
                     weft_http_server_get_n_requests (F.server) - routed_before);
    }
  close (c.fd);
  iterate ();

  /* The client is gone: so must be the connection and all it holds. */
  pthread_mutex_lock (&F.server->live_lock);
  guint live = g_hash_table_size (F.server->live);
  pthread_mutex_unlock (&F.server->live_lock);
  if (!weft_connection_is_closed (conn) || live != 0)
    {
      fprintf (stderr, "fuzz-http-connection: the connection outlived its client\n");
      abort ();
    }
  weft_connection_unref (conn);
  iterate ();
  WeftEngineStats st;
  weft_engine_get_stats (F.engine, &st);
  if (st.n_contexts != F.n_contexts)
    {
      fprintf (stderr,
               "fuzz-http-connection: %" G_GUINT64_FORMAT " contexts left, %" G_GUINT64_FORMAT
               " before\n", (guint64) st.n_contexts, F.n_contexts);
      abort ();
    }
  if (timers_fired () != fired_before)
    {
      /* Every timeout here is an hour: one that fired means the run was
       * not the input's alone. */
      fprintf (stderr, "fuzz-http-connection: a timer fired\n");
      abort ();
    }
  g_byte_array_unref (c.out);
  return 0;
}
