/* weft-http-parser.h: the HTTP/1.1 request parser (RFC 9112), internal.
 *
 * Zero-copy and allocation-free: it parses the caller's buffer and returns
 * slices into it. Stateless between calls for the request head: call again
 * with the same buffer grown by the bytes that arrived (a head split byte
 * by byte parses exactly as one write). The chunked body decoder keeps a
 * small state instead, since body bytes are consumed as they come. No I/O
 * here: the server (weft-http-server.c) feeds it from a connection's read
 * buffer.
 *
 * Strict where RFC 9112 lets a recipient choose: bare LF, whitespace before
 * a header's colon, obs-fold, control characters, Content-Length together
 * with Transfer-Encoding, duplicate Content-Length and anything but a final
 * "chunked" are rejected with the status the RFC names, and the request
 * is marked so the server closes after answering where framing is unsafe.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* A slice of the parsed buffer: not NUL-terminated. */
typedef struct {
  const char *ptr;
  gsize len;
} WeftHttpSlice;

typedef struct {
  WeftHttpSlice name;
  WeftHttpSlice value; /* without leading and trailing whitespace */
} WeftHttpHeader;

typedef enum {
  WEFT_HTTP_FORM_ORIGIN,    /* "/path?query" */
  WEFT_HTTP_FORM_ABSOLUTE,  /* "http://host/path" */
  WEFT_HTTP_FORM_AUTHORITY, /* "host:port", CONNECT only */
  WEFT_HTTP_FORM_ASTERISK,  /* "*", OPTIONS only */
} WeftHttpTargetForm;

typedef enum {
  WEFT_HTTP_BODY_NONE,
  WEFT_HTTP_BODY_LENGTH,  /* content_length bytes */
  WEFT_HTTP_BODY_CHUNKED, /* decode with WeftHttpChunked */
} WeftHttpBodyKind;

typedef struct {
  gsize max_target;       /* request-target bytes; over: 414 */
  gsize max_head;         /* request line + header section; over: 431 */
  gsize max_headers;      /* header lines; over: 431 (also bounded by the array) */
  guint64 max_body;       /* Content-Length above it: 413 */
} WeftHttpLimits;

/* Safe defaults: 8 KiB target, 16 KiB head, 100 headers, 8 MiB body. */
void weft_http_limits_init (WeftHttpLimits *limits);

typedef struct {
  WeftHttpSlice method;
  WeftHttpSlice target;
  WeftHttpTargetForm form;
  gboolean path_escaped;   /* path holds a '%' (the target's scan saw it) */
  WeftHttpSlice path;      /* origin/absolute form: up to '?' (no decoding) */
  WeftHttpSlice query;     /* after '?', without it; len 0 if none */
  WeftHttpSlice host;      /* the Host header (or the absolute target's authority) */
  guint minor_version;     /* HTTP/1.minor; 1.2+ is treated as 1.1 */
  WeftHttpHeader *headers; /* the caller's array */
  gsize n_headers;
  WeftHttpBodyKind body;
  guint64 content_length;
  gboolean keep_alive;       /* by version and Connection */
  gboolean expect_continue;  /* Expect: 100-continue */
  gboolean close_after;      /* set with an error: framing is unsafe, close */
} WeftHttpHead;

/* Results of weft_http_parse_request() besides a head length. */
#define WEFT_HTTP_INCOMPLETE (-1) /* need more bytes */
#define WEFT_HTTP_ERROR (-2)      /* *status says which answer */

/* Parses a request head at @buf (@len bytes so far). Returns its length
 * (the body, if any, follows), WEFT_HTTP_INCOMPLETE, or WEFT_HTTP_ERROR
 * with *@status (400, 413, 414, 417, 431, 501, 505) and req->close_after.
 * With either of the two, req->method is set if the method and the SP
 * after it were read (an answer to a HEAD carries no content), else empty.
 * @headers: room for @max_headers entries; more header lines give 431. */
gssize weft_http_parse_request (const char *buf, gsize len, const WeftHttpLimits *limits,
                                WeftHttpHead *req, WeftHttpHeader *headers,
                                gsize max_headers, guint *status);

/* Which scan this copy of the parser was built with: "sse2" (16 bytes a
 * step), "swar" (8 bytes in a 64-bit word: CPUs without SSE2, or built with
 * WEFT_HTTP_PARSER_NO_SIMD) or "bytes". For the tests, which build it both
 * ways and must know which one they exercise. */
const char *weft_http_parser_scan_name (void);

/* Finds a header by name, case-insensitively; NULL if absent. */
const WeftHttpSlice *weft_http_head_get_header (const WeftHttpHead *req,
                                                   const char *name);

/* ---- chunked transfer coding (RFC 9112 §7.1) ----------------------------- */

typedef struct {
  guint state;
  guint64 remaining;  /* bytes left in the current chunk */
  guint64 total;      /* data bytes decoded so far, and chunk-ext bytes */
  guint64 max_body;   /* over: 413 */
  gsize line_len;     /* bytes of the current size line or trailer section */
  guint digits;
  guint8 ext_state;   /* where the size line's chunk-ext is (its grammar) */
} WeftHttpChunked;

void weft_http_chunked_init (WeftHttpChunked *dec, guint64 max_body);

/* Decodes from @buf (@len bytes). Returns how many bytes of @buf it used
 * (0 means it needs more input), or WEFT_HTTP_ERROR with *@status (400,
 * 413 for a body over the limit (chunk extensions count towards it), or
 * 431 for a trailer section past
 * 8 KiB). Data found is returned as one slice per call in *@data and
 * *@data_len (pointing into @buf; *@data_len 0 if none), so call again
 * with the rest until it uses nothing. *@done turns TRUE after the last
 * chunk and the trailer section: the bytes after it belong to the next
 * request. Trailer fields are checked for syntax and dropped. */
gssize weft_http_chunked_decode (WeftHttpChunked *dec, const char *buf, gsize len,
                                 const char **data, gsize *data_len, gboolean *done,
                                 guint *status);

G_END_DECLS
