/* fuzz-http-parser.c: libFuzzer target for the request parser and the
 * chunked decoder (http/weft-http-parser.c). Built by tests/fuzz/run with
 * clang -fsanitize=fuzzer,address,undefined; not part of the meson build.
 *
 * The first byte picks the target. Beyond "no crash, no read past the
 * input", it checks that feeding in two pieces agrees with one piece:
 *   parser: a prefix is incomplete, or gives the same answer as the whole
 *           (an error may only show earlier, never change);
 *   chunked: decoding all at once and in two pieces yields the same bytes
 *           and the same verdict;
 * and that the parser built with its portable scan (parser-portable.c)
 * gives the same answer as the SSE2 one, field by field.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parser-portable.h"
#include "weft-http-parser.h"

#define MAX_HEADERS 64

static void
check_slice (WeftHttpSlice s, const char *buf, size_t len)
{
  if (s.len == 0)
    return;
  if (s.ptr < buf || s.ptr + s.len > buf + len)
    abort ();
}

/* Empty slices may point at a literal, which each copy of the parser has
 * its own of. */
static gboolean
same_slice (WeftHttpSlice a, WeftHttpSlice b)
{
  return a.len == b.len && (a.len == 0 || a.ptr == b.ptr);
}

/* The portable scan must agree with the one this build uses, on every
 * field of a head and on every verdict. */
static void
check_portable (const char *buf, size_t len, const WeftHttpLimits *limits, gssize r,
                const WeftHttpHead *req, const WeftHttpHeader *headers, guint status)
{
#ifdef __SSE2__
  /* Two different scans, or this compares a copy with itself. */
  if (strcmp (weft_http_parser_scan_name (), "sse2") != 0 ||
      strcmp (weft_http_parser_scan_name_portable (), "sse2") == 0)
    abort ();
#endif
  WeftHttpHeader h2[MAX_HEADERS];
  WeftHttpHead q;
  guint st = 0;
  gssize r2 = weft_http_parse_request_portable (buf, len, limits, &q, h2, MAX_HEADERS, &st);
  if (r2 != r || st != status)
    abort ();
  if (r == WEFT_HTTP_ERROR && q.close_after != req->close_after)
    abort ();
  if (!same_slice (q.method, req->method)) /* set on failures too, once read */
    abort ();
  if (r < 0)
    return;
  if (!same_slice (q.method, req->method) || !same_slice (q.target, req->target) ||
      q.form != req->form || q.path.len != req->path.len ||
      memcmp (q.path.ptr, req->path.ptr, q.path.len) != 0 || !same_slice (q.query, req->query) ||
      !same_slice (q.host, req->host) || q.minor_version != req->minor_version ||
      q.n_headers != req->n_headers || q.body != req->body ||
      q.content_length != req->content_length || q.keep_alive != req->keep_alive ||
      q.expect_continue != req->expect_continue || q.close_after != req->close_after)
    abort ();
  for (gsize i = 0; i < q.n_headers; i++)
    if (!same_slice (h2[i].name, headers[i].name) || !same_slice (h2[i].value, headers[i].value))
      abort ();
}

static void
fuzz_parser (const char *buf, size_t len, size_t split)
{
  WeftHttpLimits limits;
  weft_http_limits_init (&limits);
  limits.max_head = 4096; /* small, so limits are reached too */
  limits.max_target = 1024;
  WeftHttpHeader headers[MAX_HEADERS];
  WeftHttpHead req;
  guint status = 0, st2 = 0;
  gssize r = weft_http_parse_request (buf, len, &limits, &req, headers, MAX_HEADERS, &status);
  if (r >= 0)
    {
      if ((size_t) r > len)
        abort ();
      check_slice (req.method, buf, len);
      check_slice (req.target, buf, len);
      /* An absolute-form target without a path gets the literal "/". */
      if (!(req.form == WEFT_HTTP_FORM_ABSOLUTE && req.path.len == 1 && req.path.ptr[0] == '/' &&
            (req.path.ptr < buf || req.path.ptr >= buf + len)))
        check_slice (req.path, buf, len);
      check_slice (req.query, buf, len);
      if (req.host.len > 0 && req.form != WEFT_HTTP_FORM_ABSOLUTE)
        check_slice (req.host, buf, len);
      if (req.n_headers > MAX_HEADERS)
        abort ();
      for (gsize i = 0; i < req.n_headers; i++)
        {
          check_slice (headers[i].name, buf, len);
          check_slice (headers[i].value, buf, len);
        }
    }
  else
    {
      if (r == WEFT_HTTP_ERROR && (status < 400 || status > 505))
        abort ();
      check_slice (req.method, buf, len);
    }
  check_portable (buf, len, &limits, r, &req, headers, status);

  /* The prefix, copied so ASan sees its end. */
  char *prefix = malloc (split ? split : 1);
  if (split > 0)
    memcpy (prefix, buf, split);
  gssize r2 = weft_http_parse_request (prefix, split, &limits, &req, headers, MAX_HEADERS, &st2);
  if (r2 >= 0 && r2 != r)
    abort (); /* a complete head in the prefix is the whole input's head */
  if (r2 == WEFT_HTTP_ERROR && (r != WEFT_HTTP_ERROR || st2 != status))
    abort (); /* an error cannot go away or change with more bytes */
  if (r >= 0 && (size_t) r <= split && r2 != r)
    abort ();
  free (prefix);
}

/* Decodes @buf fed as @a then the rest; returns the verdict and appends
 * the body to @out (at most @cap bytes). */
static int
decode (const char *buf, size_t len, size_t a, char *out, size_t cap, size_t *out_len)
{
  WeftHttpChunked dec;
  weft_http_chunked_init (&dec, 1 << 20);
  char *pending = malloc (len ? len : 1);
  size_t plen = 0, fed = 0;
  *out_len = 0;
  gboolean done = FALSE;
  guint status = 0;
  for (int piece = 0; !done && piece < 2; piece++)
    {
      size_t n = piece == 0 ? a : len - fed;
      if (n > 0)
        memcpy (pending + plen, buf + fed, n);
      plen += n;
      fed += n;
      for (;;)
        {
          /* An exact-size copy, so reading past it is caught. */
          char *view = malloc (plen ? plen : 1);
          if (plen > 0)
            memcpy (view, pending, plen);
          const char *data;
          gsize dlen;
          gssize used = weft_http_chunked_decode (&dec, view, plen, &data, &dlen, &done, &status);
          if (used == WEFT_HTTP_ERROR)
            {
              free (view);
              free (pending);
              return (int) status;
            }
          if ((size_t) used > plen || (dlen > 0 && (data < view || data + dlen > view + used)))
            abort ();
          if (dlen > 0 && *out_len + dlen <= cap)
            memcpy (out + *out_len, data, dlen);
          *out_len += dlen;
          free (view);
          if (plen > (size_t) used)
            memmove (pending, pending + used, plen - (size_t) used);
          plen -= (size_t) used;
          if (used == 0 || done)
            break;
        }
    }
  free (pending);
  return done ? 0 : 1;
}

static void
fuzz_chunked (const char *buf, size_t len, size_t split)
{
  static char out1[1 << 16], out2[1 << 16];
  size_t n1, n2;
  int v1 = decode (buf, len, len, out1, sizeof out1, &n1);
  int v2 = decode (buf, len, split, out2, sizeof out2, &n2);
  if (v1 != v2)
    abort ();
  if (v1 == 0 && (n1 != n2 || memcmp (out1, out2, n1 < sizeof out1 ? n1 : sizeof out1) != 0))
    abort ();
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (size < 2)
    return 0;
  uint8_t mode = data[0], cut = data[1];
  const char *buf = (const char *) data + 2;
  size_t len = size - 2;
  size_t split = len ? (size_t) cut * len / 256 : 0;
  if (mode & 1)
    fuzz_chunked (buf, len, split);
  else
    fuzz_parser (buf, len, split);
  return 0;
}
