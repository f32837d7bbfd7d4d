/* weft-http-parser.c: RFC 9112 request heads and chunked bodies. See
 * weft-http-parser.h for the contract; the comments here say which rule a
 * check enforces.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-http-parser.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* ---- character classes ---------------------------------------------------- */

enum {
  C_TCHAR = 1 << 0,  /* token (RFC 9110 §5.6.2) */
  C_TARGET = 1 << 1, /* request-target: VCHAR except '#' (no fragment) */
  C_VALUE = 1 << 2,  /* field-value: VCHAR, obs-text, SP, HTAB */
  C_HOST = 1 << 3,   /* Host: reg-name, IP-literal, port */
  C_OWS = 1 << 4,    /* SP, HTAB */
  C_PATH = 1 << 5,   /* C_TARGET but '?' and '%': the path's scan stops at the
                      * query and at escapes (the server tells the router) */
};

static guint8 classes[256];
static atomic_bool classes_ready;

static void
init_classes (void)
{
  for (int c = 0; c < 256; c++)
    {
      guint8 k = 0;
      if (g_ascii_isalnum (c) || (c != 0 && strchr ("!#$%&'*+-.^_`|~", c) != NULL))
        k |= C_TCHAR;
      if (c > 0x20 && c < 0x7f && c != '#')
        k |= C_TARGET;
      if ((c > 0x20 && c != 0x7f) || c == ' ' || c == '\t')
        k |= C_VALUE;
      if (g_ascii_isalnum (c) || (c != 0 && strchr ("-._~!$&'()*+,;=:%[]", c) != NULL))
        k |= C_HOST;
      if (c == ' ' || c == '\t')
        k |= C_OWS;
      if ((k & C_TARGET) && c != '?' && c != '%')
        k |= C_PATH;
      classes[c] = k;
    }
  atomic_store_explicit (&classes_ready, TRUE, memory_order_release);
}

/* Not g_once(): its fast path reads a flag that uninstrumented GLib wrote,
 * so ThreadSanitizer saw two workers' first parses race on the table. An
 * acquire load here, pthread_once (which TSan knows) the first time. */
static inline void
ensure_classes (void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (G_UNLIKELY (!atomic_load_explicit (&classes_ready, memory_order_acquire)))
    pthread_once (&once, init_classes);
}

#define IS(c, k) ((classes[(guint8) (c)] & (k)) != 0)

/* The long runs of a request head (the method, header names and values,
 * the target) are scanned many bytes at a time. scan() returns the first
 * byte at or after @p that may end a run of @kind, or @end: every byte
 * before it is in the run's class, but the byte it stops at may be one too
 * (the wide tests are narrower than the classes: a tab in a value, a digit
 * in a name; the target's stops at '?' on purpose), so callers check it
 * and scan on. @lo is the start of the buffer: the bytes from @lo to @end
 * may be read.
 *
 * x86-64 always has SSE2: 16 bytes per step there. Elsewhere, or built
 * with WEFT_HTTP_PARSER_NO_SIMD (the tests build that too), 8 bytes per
 * step in a 64-bit word on little-endian CPUs, then a byte loop. */
enum { RUN_NAME, RUN_VALUE, RUN_TARGET, RUN_HOST, RUN_QUERY };

static const guint8 run_class[] = { C_TCHAR, C_VALUE, C_PATH, C_HOST, C_TARGET };

#if defined(__SSE2__) && !defined(WEFT_HTTP_PARSER_NO_SIMD)
#define SCAN_SSE2 1
#include <emmintrin.h>

static inline __m128i
load128 (const char *p)
{
  return _mm_loadu_si128 ((const __m128i *) (const void *) p);
}

/* One bit per byte of @x (bit 0: the first), set where the byte may end a
 * run of @kind. */
static inline guint
stops16 (__m128i x, int kind)
{
  switch (kind)
    {
    case RUN_VALUE:
      {
        /* Controls (min (x, 0x1f) == x: x <= 0x1f unsigned, HTAB among
         * them) and DEL; obs-text passes. */
        __m128i ctl = _mm_cmpeq_epi8 (_mm_min_epu8 (x, _mm_set1_epi8 (0x1f)), x);
        __m128i del = _mm_cmpeq_epi8 (x, _mm_set1_epi8 (0x7f));
        return (guint) _mm_movemask_epi8 (_mm_or_si128 (ctl, del));
      }
    case RUN_TARGET:
    case RUN_QUERY:
      {
        /* 0x21 to 0x7e compared as signed bytes (0x80 and up are
         * negative), without '#'; in the path '?' (the query's start)
         * and '%' stop too. */
        __m128i ok = _mm_and_si128 (_mm_cmpgt_epi8 (x, _mm_set1_epi8 (0x20)),
                                    _mm_cmplt_epi8 (x, _mm_set1_epi8 (0x7f)));
        __m128i no = _mm_cmpeq_epi8 (x, _mm_set1_epi8 ('#'));
        if (kind == RUN_TARGET)
          no = _mm_or_si128 (no, _mm_or_si128 (_mm_cmpeq_epi8 (x, _mm_set1_epi8 ('?')),
                                               _mm_cmpeq_epi8 (x, _mm_set1_epi8 ('%'))));
        ok = _mm_andnot_si128 (no, ok);
        return (guint) _mm_movemask_epi8 (ok) ^ 0xffffu;
      }
    default:
      {
        /* Letters (OR 0x20 folds case; then x - 'a' <= 25 unsigned) and
         * '-': what names and methods are nearly always made of; host
         * names also of digits, '.' and ':'. */
        __m128i d = _mm_sub_epi8 (_mm_or_si128 (x, _mm_set1_epi8 (0x20)), _mm_set1_epi8 ('a'));
        __m128i ok = _mm_or_si128 (_mm_cmpeq_epi8 (_mm_min_epu8 (d, _mm_set1_epi8 (25)), d),
                                   _mm_cmpeq_epi8 (x, _mm_set1_epi8 ('-')));
        if (kind == RUN_HOST)
          {
            __m128i n = _mm_sub_epi8 (x, _mm_set1_epi8 ('0'));
            ok = _mm_or_si128 (ok, _mm_cmpeq_epi8 (_mm_min_epu8 (n, _mm_set1_epi8 (9)), n));
            ok = _mm_or_si128 (ok, _mm_cmpeq_epi8 (x, _mm_set1_epi8 ('.')));
            ok = _mm_or_si128 (ok, _mm_cmpeq_epi8 (x, _mm_set1_epi8 (':')));
          }
        return (guint) _mm_movemask_epi8 (ok) ^ 0xffffu;
      }
    }
}

/* A Host value of 1 to 16 bytes at @p (the 16 bytes before @end may be
 * read) decided with one load: 1 valid, 0 not, -1 if a byte outside
 * letters, digits, '-', '.' and ':' leaves it to the exact test. With
 * those bytes only, host_shape_ok() asks that a ':' have a name before it
 * and only digits after it. */
static inline int
host_fast (const char *p, gsize n, const char *end)
{
  const char *w = end - p >= 16 ? p : end - 16;
  __m128i x = load128 (w);
  guint shift = (guint) (p - w), in = (1u << n) - 1;
  if (((stops16 (x, RUN_HOST) >> shift) & in) != 0)
    return -1;
  guint colon = ((guint) _mm_movemask_epi8 (_mm_cmpeq_epi8 (x, _mm_set1_epi8 (':'))) >> shift) & in;
  if (colon == 0)
    return 1;
  __m128i d = _mm_sub_epi8 (x, _mm_set1_epi8 ('0'));
  guint digit = (guint) _mm_movemask_epi8 (_mm_cmpeq_epi8 (_mm_min_epu8 (d, _mm_set1_epi8 (9)), d)) >>
                shift;
  guint first = (guint) __builtin_ctz (colon);
  guint after = in & ~((2u << first) - 1);
  return first > 0 && (digit & after) == after;
}

static inline const char *
scan (const char *p, const char *end, const char *lo, int kind)
{
  while (end - p >= 16)
    {
      guint m = stops16 (load128 (p), kind);
      if (m != 0)
        return p + __builtin_ctz (m);
      p += 16;
    }
  if (p == end)
    return p;
  if (end - lo >= 16)
    {
      /* Fewer than 16 bytes left: the buffer's last 16 hold them, and the
       * shift drops those before @p. */
      guint m = stops16 (load128 (end - 16), kind) >> (16 - (end - p));
      return m != 0 ? p + __builtin_ctz (m) : end;
    }
  while (p < end && IS (*p, run_class[kind]))
    p++;
  return p;
}

#else /* portable */

#if G_BYTE_ORDER == G_LITTLE_ENDIAN
/* In a 64-bit word the lowest flagged byte is the first in memory; later
 * flags may be false positives from borrows, the first never is. */
#define FIRST_FLAGGED(m) ((gsize) __builtin_ctzll (m) / 8)
#define ONES G_GUINT64_CONSTANT (0x0101010101010101)
#define HIGHS G_GUINT64_CONSTANT (0x8080808080808080)
#define HAS_LESS(x, n) (((x) - ONES * (n)) & ~(x) & HIGHS) /* some byte < n (n <= 128) */
#define HAS_BYTE(x, b) HAS_LESS ((x) ^ (ONES * (b)), 1)

static inline guint64
stops8 (guint64 x, int kind)
{
  switch (kind)
    {
    case RUN_VALUE:
      /* Controls (HTAB among them) and DEL. */
      return HAS_LESS (x, 0x20) | HAS_BYTE (x, 0x7f);
    case RUN_TARGET:
      return HAS_LESS (x, 0x21) | (x & HIGHS) | HAS_BYTE (x, 0x7f) | HAS_BYTE (x, '#') |
             HAS_BYTE (x, '?') | HAS_BYTE (x, '%');
    case RUN_QUERY:
      return HAS_LESS (x, 0x21) | (x & HIGHS) | HAS_BYTE (x, 0x7f) | HAS_BYTE (x, '#');
    default:
      {
        /* Letters and '-', per byte without carries between bytes: the
         * low 7 bits plus a constant set the high bit exactly when the
         * byte reaches a bound. */
        const guint64 low7 = ONES * 0x7f;
        guint64 t = (x | (ONES * 0x20)) & low7; /* case folded */
        guint64 ge_a = (t + ONES * (0x80 - 'a')) & HIGHS;
        guint64 gt_z = (t + ONES * (0x7f - 'z')) & HIGHS;
        guint64 dash = ~(((x & low7) ^ (ONES * '-')) + low7) & HIGHS;
        guint64 ok = ((ge_a & ~gt_z) | dash) & ~(x & HIGHS);
        return ~ok & HIGHS;
      }
    }
}
#endif

static inline const char *
scan (const char *p, const char *end, const char *lo, int kind)
{
  (void) lo;
#if G_BYTE_ORDER == G_LITTLE_ENDIAN
  while (end - p >= 8)
    {
      guint64 x;
      memcpy (&x, p, sizeof x);
      guint64 m = stops8 (x, kind);
      if (m != 0)
        return p + FIRST_FLAGGED (m);
      p += 8;
    }
#endif
  while (p < end && IS (*p, run_class[kind]))
    p++;
  return p;
}
#endif

/* See weft-http-parser.h. */
const char *
weft_http_parser_scan_name (void)
{
#if defined(SCAN_SSE2)
  return "sse2";
#elif G_BYTE_ORDER == G_LITTLE_ENDIAN
  return "swar";
#else
  return "bytes";
#endif
}

void
weft_http_limits_init (WeftHttpLimits *limits)
{
  limits->max_target = 8 * 1024;
  limits->max_head = 16 * 1024;
  limits->max_headers = 100;
  limits->max_body = 8 * 1024 * 1024;
}

/* Compares a parsed name or list element with a lowercase literal of
 * letters, digits and '-'. ORing 0x20 folds case; for the bytes that can
 * reach here (tokens, or field values without controls) it maps nothing
 * else onto a letter, a digit or '-'. */
static inline gboolean
slice_ieq_n (WeftHttpSlice s, const char *lit, gsize n)
{
  /* The literals' bytes all have 0x20 set, so ORing it into a whole word
   * is the same as per byte. Overlapping words cover lengths that are not
   * a multiple of the word. */
  if (s.len != n)
    return FALSE;
  if (n >= 8)
    {
      guint64 a, b;
      for (gsize i = 0; i + 8 < n; i += 8)
        {
          memcpy (&a, s.ptr + i, 8);
          memcpy (&b, lit + i, 8);
          if ((a | G_GUINT64_CONSTANT (0x2020202020202020)) != b)
            return FALSE;
        }
      memcpy (&a, s.ptr + n - 8, 8);
      memcpy (&b, lit + n - 8, 8);
      return (a | G_GUINT64_CONSTANT (0x2020202020202020)) == b;
    }
  if (n >= 4)
    {
      guint32 a, b, c, d;
      memcpy (&a, s.ptr, 4);
      memcpy (&b, lit, 4);
      memcpy (&c, s.ptr + n - 4, 4);
      memcpy (&d, lit + n - 4, 4);
      return ((a | 0x20202020u) == b) & ((c | 0x20202020u) == d);
    }
  for (gsize i = 0; i < n; i++)
    if ((s.ptr[i] | 0x20) != lit[i])
      return FALSE;
  return TRUE;
}

/* @lit: a string literal (its length is taken with sizeof, not strlen:
 * GCC does not inline every call, and the copy it keeps would call
 * strlen). */
#define slice_ieq(s, lit) slice_ieq_n ((s), "" lit "", sizeof (lit) - 1)

/* ---- the request head ---------------------------------------------------- */

#define FAIL(code)                                                                                \
  do                                                                                              \
    {                                                                                             \
      *status = (code);                                                                           \
      req->close_after = TRUE;                                                                    \
      return WEFT_HTTP_ERROR;                                                                     \
    }                                                                                             \
  while (0)

/* Running out of bytes: wait for more unless the head is already over its
 * limit, then fail with @over: 414 when the request-target is what is too
 * long, 501 for the method (RFC 9112 §3: a method longer than any the
 * server implements), else 431. */
#define NEED_MORE(over)                                                                           \
  do                                                                                              \
    {                                                                                             \
      if (len >= limits->max_head)                                                                \
        FAIL (over);                                                                              \
      return WEFT_HTTP_INCOMPLETE;                                                                \
    }                                                                                             \
  while (0)

/* Moves p past a run of @kind up to @delim (not in the run's class), or
 * waits for more bytes (failing with @over past the head limit), or fails
 * with 400 at a byte outside the class. scan() may stop early at a byte of
 * the class (see there): scan on. */
#define SCAN_TO(kind, delim, over)                                                                \
  do                                                                                              \
    {                                                                                             \
      p = scan (p, end, buf, (kind));                                                             \
      while (p == end || *p != (delim))                                                           \
        {                                                                                         \
          if (p == end)                                                                           \
            NEED_MORE (over);                                                                     \
          if (!IS (*p, run_class[(kind)]))                                                        \
            FAIL (400);                                                                           \
          p = scan (p + 1, end, buf, (kind));                                                     \
        }                                                                                         \
    }                                                                                             \
  while (0)

/* Walks a comma-separated list value (RFC 9110 §5.6.1), calling @fn on
 * each non-empty element with surrounding whitespace removed. Returns FALSE
 * as soon as @fn does. */
static gboolean
for_each_element (WeftHttpSlice value, gboolean (*fn) (WeftHttpSlice, gpointer), gpointer data)
{
  const char *p = value.ptr, *end = value.ptr + value.len;
  while (p < end)
    {
      const char *s = p;
      while (p < end && *p != ',')
        p++;
      const char *e = p;
      while (s < e && (*s == ' ' || *s == '\t'))
        s++;
      while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
      if (e > s && !fn ((WeftHttpSlice) { s, (gsize) (e - s) }, data))
        return FALSE;
      if (p < end)
        p++; /* the comma */
    }
  return TRUE;
}

typedef struct {
  guint n;           /* codings seen */
  gboolean chunked_last;
  gboolean chunked_twice;
  gboolean seen_chunked;
  gboolean unknown;  /* a coding other than chunked */
  gboolean bad;      /* not a token */
} TeScan;

static gboolean
te_element (WeftHttpSlice el, gpointer data)
{
  TeScan *t = data;
  /* transfer-coding = token *( OWS ";" OWS transfer-parameter ) */
  gsize n = 0;
  while (n < el.len && IS (el.ptr[n], C_TCHAR))
    n++;
  if (n == 0)
    {
      t->bad = TRUE;
      return FALSE;
    }
  WeftHttpSlice name = { el.ptr, n };
  t->n++;
  if (slice_ieq (name, "chunked"))
    {
      if (t->seen_chunked)
        t->chunked_twice = TRUE;
      t->seen_chunked = TRUE;
      t->chunked_last = n == el.len; /* parameters on chunked are not allowed */
      if (n != el.len)
        t->bad = TRUE;
    }
  else
    {
      t->chunked_last = FALSE;
      t->unknown = TRUE;
    }
  return TRUE;
}

typedef struct {
  gboolean close;
  gboolean keep_alive;
} ConnScan;

static gboolean
conn_element (WeftHttpSlice el, gpointer data)
{
  ConnScan *c = data;
  if (slice_ieq (el, "close"))
    c->close = TRUE;
  else if (slice_ieq (el, "keep-alive"))
    c->keep_alive = TRUE;
  return TRUE;
}

/* The shape of Host = uri-host [ ":" port ] (RFC 9110 §7.2, RFC 3986
 * §3.2.2), for a value whose bytes are all C_HOST: an IP-literal in
 * brackets (its characters checked, not the address) or a non-empty
 * reg-name (IPv4 is one) whose escapes are "%" HEXDIG HEXDIG, then
 * nothing, or ":" and digits. */
static gboolean
host_shape_ok (WeftHttpSlice h)
{
  const char *p = h.ptr, *end = h.ptr + h.len;
  if (p < end && *p == '[')
    {
      const char *close = memchr (p, ']', h.len);
      if (close == NULL || close == p + 1 || memchr (p + 1, '[', (gsize) (close - p - 1)) != NULL)
        return FALSE;
      p = close + 1;
    }
  else
    {
      const char *s = p;
      for (; p < end && *p != ':'; p++)
        if (*p == '[' || *p == ']' ||
            (*p == '%' && (end - p < 3 || !g_ascii_isxdigit (p[1]) || !g_ascii_isxdigit (p[2]))))
          return FALSE;
      if (p == s)
        return FALSE;
    }
  if (p == end)
    return TRUE;
  if (*p != ':')
    return FALSE;
  for (p++; p < end; p++)
    if (!g_ascii_isdigit (*p))
      return FALSE;
  return TRUE;
}

/* valid_host() for a value that the one-load test left undecided. */
static G_GNUC_NO_INLINE gboolean
valid_host_bytes (WeftHttpSlice h)
{
  /* ANDed over the bytes, one test at the end: the loop has no exit that
   * depends on the data. */
  guint8 all = C_HOST;
  for (gsize i = 0; i < h.len; i++)
    all &= classes[(guint8) h.ptr[i]];
  return all != 0 && host_shape_ok (h);
}

/* @lo, @end: the parsed head, which holds @h. Inline, the loop apart:
 * most hosts are decided by host_fast() for less than a call costs. */
static inline gboolean
valid_host (WeftHttpSlice h, const char *lo, const char *end)
{
  /* Host = uri-host [ ":" port ]; empty is allowed by RFC 9110 §7.2 only
   * for targets without an authority, which origin-form requests to us
   * are not: require something. */
  if (h.len == 0)
    return FALSE;
#ifdef SCAN_SSE2
  /* Most hosts: 16 bytes or fewer of letters, digits, '.', '-', ':'. */
  if (h.len <= 16 && end - lo >= 16)
    {
      int v = host_fast (h.ptr, h.len, end);
      if (v >= 0)
        return v;
    }
#else
  (void) lo;
  (void) end;
#endif
  return valid_host_bytes (h);
}

/* Splits an origin-form (or absolute-form path part) target at @q, its
 * first '?' (the scan of the target found it), or NULL if none.
 * @escaped: the path holds a '%'. */
static void
split_path (WeftHttpHead *req, const char *p, const char *end, const char *q, gboolean escaped)
{
  req->path_escaped = escaped;
  if (q == NULL)
    {
      req->path = (WeftHttpSlice) { p, (gsize) (end - p) };
      req->query = (WeftHttpSlice) { end, 0 };
    }
  else
    {
      req->path = (WeftHttpSlice) { p, (gsize) (q - p) };
      req->query = (WeftHttpSlice) { q + 1, (gsize) (end - q - 1) };
    }
}

/* @qmark: the target's first '?', or NULL; @pct: its first '%' before
 * that, or NULL; @lo, @end: the parsed head. */
static guint
classify_target (WeftHttpHead *req, WeftHttpSlice *authority, const char *qmark,
                 const char *pct, const char *lo, const char *end_of_head)
{
  const char *t = req->target.ptr, *end = t + req->target.len;
  /* Methods are case-sensitive (RFC 9110 §9.1). */
  gboolean connect = req->method.len == 7 && memcmp (req->method.ptr, "CONNECT", 7) == 0;
  gboolean options = req->method.len == 7 && memcmp (req->method.ptr, "OPTIONS", 7) == 0;
  *authority = (WeftHttpSlice) { NULL, 0 };
  if (connect)
    {
      /* authority-form = uri-host ":" port */
      req->form = WEFT_HTTP_FORM_AUTHORITY;
      const char *colon = NULL;
      for (const char *p = t; p < end; p++)
        {
          if (!IS (*p, C_HOST) || *p == '/' || *p == '?')
            return 400;
          if (*p == ':')
            colon = p;
        }
      if (colon == NULL || colon == t || colon + 1 == end)
        return 400;
      for (const char *p = colon + 1; p < end; p++)
        if (!g_ascii_isdigit (*p))
          return 400;
      *authority = req->target;
      req->path = (WeftHttpSlice) { end, 0 };
      req->query = (WeftHttpSlice) { end, 0 };
      return 0;
    }
  if (req->target.len == 1 && t[0] == '*')
    {
      if (!options)
        return 400;
      req->form = WEFT_HTTP_FORM_ASTERISK;
      req->path = req->target;
      req->query = (WeftHttpSlice) { end, 0 };
      return 0;
    }
  if (t[0] == '/')
    {
      req->form = WEFT_HTTP_FORM_ORIGIN;
      split_path (req, t, end, qmark, pct != NULL);
      return 0;
    }
  /* absolute-form: scheme "://" authority path-abempty [ "?" query ] */
  const char *p = t;
  if (!g_ascii_isalpha (*p))
    return 400;
  while (p < end && (g_ascii_isalnum (*p) || *p == '+' || *p == '-' || *p == '.'))
    p++;
  if (end - p < 3 || memcmp (p, "://", 3) != 0)
    return 400;
  WeftHttpSlice scheme = { t, (gsize) (p - t) };
  if (!slice_ieq (scheme, "http") && !slice_ieq (scheme, "https"))
    return 400;
  const char *a = p + 3, *ae = a;
  while (ae < end && *ae != '/' && *ae != '?')
    ae++;
  WeftHttpSlice auth = { a, (gsize) (ae - a) };
  if (!valid_host (auth, lo, end_of_head) || memchr (a, '@', auth.len) != NULL) /* no userinfo */
    return 400;
  req->form = WEFT_HTTP_FORM_ABSOLUTE;
  *authority = auth;
  if (ae == end || *ae == '?')
    {
      /* An empty path is "/" (RFC 9112 §3.2.2 / RFC 3986). */
      req->path = (WeftHttpSlice) { "/", 1 };
      req->query = ae == end ? (WeftHttpSlice) { end, 0 }
                             : (WeftHttpSlice) { ae + 1, (gsize) (end - ae - 1) };
    }
  else
    {
      /* No '?' before @ae: it is the first. The first '%' may be the
       * authority's, and one in the path after it. */
      gsize n = (gsize) ((qmark != NULL ? qmark : end) - ae);
      split_path (req, ae, end, qmark, pct != NULL && memchr (ae, '%', n) != NULL);
    }
  return 0;
}

/* A header name's length and its first four bytes ORed with 0x20 (which
 * folds case, see slice_ieq), as one number; @name has at least 4 bytes. */
static inline guint64
name_key (WeftHttpSlice name)
{
  guint32 w;
  memcpy (&w, name.ptr, sizeof w);
  return (guint64) name.len << 32 | (GUINT32_FROM_LE (w) | 0x20202020u);
}

/* name_key() of a lowercase name starting with @s (4 bytes), @len long. */
#define KEY(s, len)                                                                               \
  ((guint64) (len) << 32 | (guint32) (guint8) (s)[0] | (guint32) (guint8) (s)[1] << 8           \
   | (guint32) (guint8) (s)[2] << 16 | (guint32) (guint8) (s)[3] << 24)

/* What the framing rules need from the lines other than Host. */
typedef struct {
  guint n_cl, n_te;
  TeScan te;
  ConnScan conn;
  guint64 cl;
  gboolean cl_too_big;
  gboolean cl_bad; /* a Content-Length that is not 1*DIGIT: 400 */
  gboolean expect_continue;
  gboolean expect_unknown; /* an expectation other than 100-continue: 417 */
} FramingRest;

/* What the framing and Host rules need from the header lines, gathered
 * while they are parsed. Most requests have Host and none of the other
 * lines: @rest is zeroed when the first of those comes (zeroing it all
 * for every parse was 18 instructions), check_semantics() reads a zero
 * one if none did. */
typedef struct {
  guint n_host;
  gboolean has_rest; /* @rest is set */
  WeftHttpSlice host; /* absent: empty, never NULL */
  FramingRest rest;
} Framing;

/* Expect = #expectation (RFC 9110 §10.1.1); 100-continue is the only one
 * defined (case-insensitive, no parameters). */
static gboolean
expect_element (WeftHttpSlice el, gpointer data)
{
  FramingRest *fr = data;
  if (slice_ieq (el, "100-continue"))
    fr->expect_continue = TRUE;
  else
    fr->expect_unknown = TRUE;
  return !fr->expect_unknown;
}

/* The five names that matter here have lengths 4, 6, 10, 14 and 17, which
 * are told apart by (length / 2) % 8: that slot's name_key() is the only
 * one a name can match. Most lines match none, at the cost of one
 * compare (a switch on the length was a jump table, mispredicted about
 * every other header). */
enum { SLOT_TE = 0, SLOT_HOST = 2, SLOT_EXPECT = 3, SLOT_CONNECTION = 5, SLOT_CL = 7 };
#define SLOT_OF(len) (((len) >> 1) & 7)
G_STATIC_ASSERT (SLOT_OF (sizeof "transfer-encoding" - 1) == SLOT_TE);
G_STATIC_ASSERT (SLOT_OF (sizeof "host" - 1) == SLOT_HOST);
G_STATIC_ASSERT (SLOT_OF (sizeof "expect" - 1) == SLOT_EXPECT);
G_STATIC_ASSERT (SLOT_OF (sizeof "connection" - 1) == SLOT_CONNECTION);
G_STATIC_ASSERT (SLOT_OF (sizeof "content-length" - 1) == SLOT_CL);

static const guint64 framing_keys[8] = {
  [SLOT_TE] = KEY ("tran", 17),
  [SLOT_HOST] = KEY ("host", 4),
  [SLOT_EXPECT] = KEY ("expe", 6),
  [SLOT_CONNECTION] = KEY ("conn", 10),
  [SLOT_CL] = KEY ("cont", 14),
};

static inline gboolean
framing_slot (WeftHttpSlice name, guint *slot)
{
  /* 4 to 17 bytes: one unsigned compare; name_key() needs 4. */
  if (name.len - 4 > 13)
    return FALSE;
  *slot = (guint) SLOT_OF (name.len);
  return name_key (name) == framing_keys[*slot];
}

/* A header line whose name's length and first four bytes are those of
 * @slot's name. */
static void
note_framing (Framing *frame, guint slot, WeftHttpSlice name, WeftHttpSlice value)
{
  if (slot == SLOT_HOST) /* the key is the whole name */
    {
      frame->n_host++;
      frame->host = value;
      return;
    }
  if (!frame->has_rest)
    {
      memset (&frame->rest, 0, sizeof frame->rest);
      frame->has_rest = TRUE;
    }
  FramingRest *fr = &frame->rest;
  switch (slot)
    {
    case SLOT_CONNECTION:
      if (slice_ieq (name, "connection"))
        {
          /* Usually the whole value is one of the two we look for. */
          if (slice_ieq (value, "keep-alive"))
            fr->conn.keep_alive = TRUE;
          else if (slice_ieq (value, "close"))
            fr->conn.close = TRUE;
          else
            for_each_element (value, conn_element, &fr->conn);
        }
      break;
    case SLOT_CL:
      if (slice_ieq (name, "content-length"))
        {
          /* Content-Length = 1*DIGIT, once (a list or a repeat, even of
           * the same value, is refused: RFC 9112 §6.3 lets us, and it
           * closes the door on smuggling through disagreeing parsers). */
          fr->n_cl++;
          if (value.len == 0)
            fr->cl_bad = TRUE;
          fr->cl = 0;
          for (gsize k = 0; k < value.len; k++)
            {
              char c = value.ptr[k];
              if (!g_ascii_isdigit (c))
                {
                  fr->cl_bad = TRUE;
                  break;
                }
              if (fr->cl > (G_MAXUINT64 - 9) / 10)
                {
                  fr->cl_too_big = TRUE; /* more than any limit; keep checking digits */
                  continue;
                }
              fr->cl = fr->cl * 10 + (guint64) (c - '0');
            }
        }
      break;
    case SLOT_TE:
      if (slice_ieq (name, "transfer-encoding"))
        {
          fr->n_te++;
          for_each_element (value, te_element, &fr->te);
        }
      break;
    case SLOT_EXPECT:
      if (slice_ieq (name, "expect"))
        for_each_element (value, expect_element, fr);
      break;
    default:
      g_assert_not_reached ();
    }
}

/* The header section is syntactically fine: apply the framing and Host
 * rules. Returns 0 or a status. */
static guint
check_semantics (WeftHttpHead *req, const WeftHttpLimits *limits, const Framing *frame,
                 const char *qmark, const char *pct, const char *lo, const char *end)
{
  static const FramingRest none;
  const FramingRest *fr = frame->has_rest ? &frame->rest : &none;
  const TeScan *te = &fr->te;
  if (fr->cl_bad)
    return 400;
  if (fr->n_cl > 1)
    return 400;
  if (fr->n_te > 0)
    {
      /* RFC 9112 §6.1: chunked at most once, and last; a request whose
       * final coding is not chunked has no knowable length: 400 and
       * close. Codings we do not implement before a final chunked: 501.
       * With Content-Length too: refuse (§6.3 permits; smuggling). */
      if (req->minor_version == 0)
        return 400;
      if (te->bad || te->n == 0 || te->chunked_twice || !te->chunked_last)
        return 400;
      if (fr->n_cl > 0)
        return 400;
      if (te->unknown)
        return 501;
      req->body = WEFT_HTTP_BODY_CHUNKED;
    }
  else if (fr->n_cl == 1)
    {
      if (fr->cl_too_big || fr->cl > limits->max_body)
        return 413;
      req->content_length = fr->cl;
      req->body = fr->cl > 0 ? WEFT_HTTP_BODY_LENGTH : WEFT_HTTP_BODY_NONE;
    }

  /* Host: exactly one in HTTP/1.1 (RFC 9112 §3.2), valid; an absolute
   * target's authority wins over it. */
  if (frame->n_host > 1)
    return 400;
  if (frame->n_host == 1 && !valid_host (frame->host, lo, end))
    return 400;
  if (req->minor_version >= 1 && frame->n_host == 0)
    return 400;
  WeftHttpSlice authority;
  guint st = classify_target (req, &authority, qmark, pct, lo, end);
  if (st != 0)
    return st;
  req->host = authority.ptr != NULL ? authority : frame->host;

  if (req->minor_version >= 1)
    req->keep_alive = !fr->conn.close;
  else
    req->keep_alive = fr->conn.keep_alive && !fr->conn.close;
  /* RFC 9110 §10.1.1: an expectation the server cannot meet may be
   * answered 417, the strict choice (a client waiting for one we do not
   * know would otherwise take the answer as meeting it). Framing errors
   * come first: after them the connection cannot go on at all. */
  if (fr->expect_unknown)
    return 417;
  req->expect_continue = fr->expect_continue;
  return 0;
}

gssize
weft_http_parse_request (const char *buf, gsize len, const WeftHttpLimits *limits,
                         WeftHttpHead *req, WeftHttpHeader *headers, gsize max_headers,
                         guint *status)
{
  g_return_val_if_fail (buf != NULL || len == 0, WEFT_HTTP_ERROR);
  g_return_val_if_fail (limits != NULL && req != NULL && status != NULL, WEFT_HTTP_ERROR);
  g_return_val_if_fail (headers != NULL || max_headers == 0, WEFT_HTTP_ERROR);
  ensure_classes ();
  /* A copy of a zero struct, not memset: GCC turns this memset into
   * "rep stos", whose start-up cost was 8% of a parse. */
  static const WeftHttpHead zero;
  *req = zero;
  req->headers = headers;
  *status = 0;
  if (max_headers > limits->max_headers)
    max_headers = limits->max_headers;

  /* Never look past the head limit: an error beyond it would otherwise be
   * a 400 or a 431 depending on how the bytes arrived. */
  const char *p = buf, *end = buf + MIN (len, limits->max_head);

  /* RFC 9112 §2.2: ignore empty lines before the request line. */
  while (p < end && (*p == '\r' || *p == '\n'))
    {
      if (*p == '\n' || p + 1 == end)
        {
          if (*p == '\n')
            FAIL (400); /* bare LF */
          NEED_MORE (431);
        }
      if (p[1] != '\n')
        FAIL (400);
      p += 2;
    }

  /* method = token, then exactly one SP */
  const char *s = p;
  SCAN_TO (RUN_NAME, ' ', 501);
  if (p == s)
    FAIL (400);
  req->method = (WeftHttpSlice) { s, (gsize) (p - s) };
  p++;

  /* request-target, then exactly one SP */
  s = p;
  const char *qmark = NULL; /* the first '?': where the query starts */
  const char *pct = NULL;   /* the first '%' before it */
  p = scan (p, end, buf, RUN_TARGET);
  while (p < end && *p == '%')
    {
      if (pct == NULL)
        pct = p;
      p = scan (p + 1, end, buf, RUN_TARGET);
    }
  if (p < end && *p == '?')
    {
      /* The query's scan stops at neither '?' nor '%'. */
      qmark = p;
      p = scan (p + 1, end, buf, RUN_QUERY);
    }
  if ((gsize) (p - s) > limits->max_target)
    FAIL (414);
  if (p == end)
    NEED_MORE (414);
  if (p == s || *p != ' ')
    FAIL (400);
  req->target = (WeftHttpSlice) { s, (gsize) (p - s) };
  p++;

  /* HTTP-version = "HTTP/" DIGIT "." DIGIT, case-sensitive. Nearly always
   * "HTTP/1.1" or "HTTP/1.0" then CRLF, whole in the buffer: one compare. */
  if (G_LIKELY (end - p >= 10 && memcmp (p, "HTTP/1.", 7) == 0 && (p[7] == '1' || p[7] == '0') &&
                p[8] == '\r' && p[9] == '\n'))
    {
      req->minor_version = (guint) (p[7] - '0');
      p += 10;
    }
  else
    {
      static const char proto[] = "HTTP/";
      for (guint i = 0; i < 5; i++, p++)
        {
          if (p == end)
            NEED_MORE (431);
          if (*p != proto[i])
            FAIL (400);
        }
      if (end - p < 3)
        {
          for (const char *q = p; q < end; q++)
            if (!(q - p == 1 ? *q == '.' : g_ascii_isdigit (*q)))
              FAIL (400);
          NEED_MORE (431);
        }
      if (!g_ascii_isdigit (p[0]) || p[1] != '.' || !g_ascii_isdigit (p[2]))
        FAIL (400);
      if (p[0] != '1')
        FAIL (505);
      req->minor_version = (guint) (p[2] - '0');
      if (req->minor_version > 1)
        req->minor_version = 1; /* a later 1.x: answer as 1.1 (RFC 9110 §6.2) */
      p += 3;
      if (p == end)
        NEED_MORE (431);
      if (*p != '\r')
        FAIL (400);
      if (p + 1 == end)
        NEED_MORE (431);
      if (p[1] != '\n')
        FAIL (400);
      p += 2;
    }

  /* field-line = field-name ":" OWS field-value OWS CRLF. The scans stop
   * at the byte that usually ends a run (':', CR), so the common path
   * tests for it before the slower checks for why else they stopped. */
  gsize n_headers = 0;
  Framing fr;
  fr.n_host = 0;
  fr.has_rest = FALSE;
  fr.host = (WeftHttpSlice) { "", 0 };
  for (;;)
    {
      if (p == end)
        NEED_MORE (431);
      if (*p == '\r')
        {
          if (p + 1 == end)
            NEED_MORE (431);
          if (p[1] != '\n')
            FAIL (400);
          p += 2;
          break;
        }
      /* A line starting with whitespace is obs-fold (or garbage): refused
       * (RFC 9112 §5.2 lets a server reject it with 400) as an empty name
       * or a name with a byte that is not a token's, below. */
      s = p;
      /* (No whitespace between name and colon: RFC 9112 §5.1, MUST 400.) */
      SCAN_TO (RUN_NAME, ':', 431);
      if (p == s)
        FAIL (400);
      WeftHttpSlice name = { s, (gsize) (p - s) };
      p++;
      if (p < end && *p == ' ') /* the usual single SP, without the loop */
        p++;
      while (p < end && IS (*p, C_OWS))
        p++;
      s = p;
      SCAN_TO (RUN_VALUE, '\r', 431); /* (stopped by any other control: NUL, bare LF) */
      if (p + 1 == end)
        NEED_MORE (431);
      if (p[1] != '\n')
        FAIL (400);
      const char *e = p;
      while (e > s && IS (e[-1], C_OWS))
        e--;
      if (n_headers >= max_headers)
        FAIL (431);
      WeftHttpSlice value = { s, (gsize) (e - s) };
      headers[n_headers].name = name;
      headers[n_headers].value = value;
      n_headers++;
      guint slot;
      if (G_UNLIKELY (framing_slot (name, &slot)))
        note_framing (&fr, slot, name, value);
      p += 2;
    }
  req->n_headers = n_headers;
  /* No length check here: p never passes end, which is at most max_head. */

  guint st = check_semantics (req, limits, &fr, qmark, pct, buf, p);
  if (st != 0)
    FAIL (st);
  return (gssize) (p - buf);
}

const WeftHttpSlice *
weft_http_head_get_header (const WeftHttpHead *req, const char *name)
{
  g_return_val_if_fail (req != NULL && name != NULL, NULL);
  gsize n = strlen (name);
  for (gsize i = 0; i < req->n_headers; i++)
    if (req->headers[i].name.len == n && g_ascii_strncasecmp (req->headers[i].name.ptr, name, n) == 0)
      return &req->headers[i].value;
  return NULL;
}

/* ---- chunked ------------------------------------------------------------- */

enum {
  CH_SIZE,        /* hex digits of chunk-size */
  CH_EXT,         /* after the size: BWS, chunk-ext, up to CR */
  CH_SIZE_LF,     /* LF after the size line's CR */
  CH_DATA,
  CH_DATA_CR,
  CH_DATA_LF,
  CH_TRAILER,     /* start of a trailer line, or the final CRLF */
  CH_TRAILER_LINE,
  CH_TRAILER_LF,
  CH_END_LF,
  CH_DONE,
};

#define MAX_SIZE_LINE 4096    /* chunk-size + extensions */
#define MAX_TRAILERS (8 * 1024)

void
weft_http_chunked_init (WeftHttpChunked *dec, guint64 max_body)
{
  g_return_if_fail (dec != NULL);
  memset (dec, 0, sizeof *dec);
  dec->state = CH_SIZE;
  dec->max_body = max_body;
}

static inline int
hexval (char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
 * with chunk-ext-name = token and chunk-ext-val = token / quoted-string
 * (RFC 9112 §7.1.1), checked byte by byte. Extensions mean nothing here
 * and are skipped, but one that is not the grammar is refused (400), not
 * read past: a recipient that ended it elsewhere (at a quote, a
 * backslash or blank) would frame the body differently. BWS is taken
 * only where the grammar has it, so "5 \r\n" is refused too. */
enum {
  EXT_START,     /* after the size: ';', BWS or the end */
  EXT_START_BWS, /* BWS after the size: ';' must follow */
  EXT_NAME_START,/* after ';': BWS, then a name */
  EXT_NAME,      /* in the name */
  EXT_NAME_BWS,  /* BWS after the name: '=' or ';' must follow */
  EXT_VAL_START, /* after '=': BWS, then a token or a quoted string */
  EXT_VAL_TOKEN, /* in a token value */
  EXT_QUOTED,    /* in a quoted string */
  EXT_QUOTED_PAIR, /* after a backslash in it */
  EXT_VAL_END,   /* after the closing quote */
  EXT_VAL_BWS,   /* BWS after a value: ';' must follow */
};

static inline gboolean
ext_may_end (guint8 state)
{
  return state == EXT_START || state == EXT_NAME || state == EXT_VAL_TOKEN ||
         state == EXT_VAL_END;
}

/* Advances *@state over @c (not CR); FALSE if @c may not come here. */
static gboolean
ext_step (guint8 *state, char c)
{
  gboolean ws = c == ' ' || c == '\t';
  guint8 u = (guint8) c;
  switch (*state)
    {
    case EXT_START:
    case EXT_START_BWS:
    case EXT_VAL_END:
    case EXT_VAL_BWS:
      if (c == ';')
        *state = EXT_NAME_START;
      else if (ws)
        *state = *state == EXT_START || *state == EXT_START_BWS ? EXT_START_BWS : EXT_VAL_BWS;
      else
        return FALSE;
      return TRUE;
    case EXT_NAME_START:
      if (IS (c, C_TCHAR))
        *state = EXT_NAME;
      return ws || IS (c, C_TCHAR);
    case EXT_NAME:
    case EXT_NAME_BWS:
      if (c == ';')
        *state = EXT_NAME_START;
      else if (c == '=')
        *state = EXT_VAL_START;
      else if (ws)
        *state = EXT_NAME_BWS;
      else if (!(*state == EXT_NAME && IS (c, C_TCHAR)))
        return FALSE;
      return TRUE;
    case EXT_VAL_START:
      if (c == '"')
        *state = EXT_QUOTED;
      else if (IS (c, C_TCHAR))
        *state = EXT_VAL_TOKEN;
      else if (!ws)
        return FALSE;
      return TRUE;
    case EXT_VAL_TOKEN:
      if (c == ';')
        *state = EXT_NAME_START;
      else if (ws)
        *state = EXT_VAL_BWS;
      else if (!IS (c, C_TCHAR))
        return FALSE;
      return TRUE;
    case EXT_QUOTED:
      /* qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text */
      if (c == '"')
        *state = EXT_VAL_END;
      else if (c == '\\')
        *state = EXT_QUOTED_PAIR;
      else if (!(ws || (u >= 0x21 && u != 0x7f)))
        return FALSE;
      return TRUE;
    case EXT_QUOTED_PAIR:
      /* quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text ) */
      if (!(ws || (u >= 0x21 && u != 0x7f)))
        return FALSE;
      *state = EXT_QUOTED;
      return TRUE;
    }
  return FALSE;
}

#define CH_FAIL(code)                                                                             \
  do                                                                                              \
    {                                                                                             \
      *status = (code);                                                                           \
      return WEFT_HTTP_ERROR;                                                                     \
    }                                                                                             \
  while (0)

gssize
weft_http_chunked_decode (WeftHttpChunked *dec, const char *buf, gsize len, const char **data,
                          gsize *data_len, gboolean *done, guint *status)
{
  g_return_val_if_fail (dec != NULL && data != NULL && data_len != NULL, WEFT_HTTP_ERROR);
  g_return_val_if_fail (done != NULL && status != NULL, WEFT_HTTP_ERROR);
  g_return_val_if_fail (buf != NULL || len == 0, WEFT_HTTP_ERROR);
  ensure_classes ();
  *data = NULL;
  *data_len = 0;
  *done = dec->state == CH_DONE;
  const char *p = buf, *end = buf + len;

  while (p < end && dec->state != CH_DONE)
    {
      char c = *p;
      switch (dec->state)
        {
        case CH_SIZE:
          {
            int v = hexval (c);
            if (v >= 0)
              {
                /* A digit more would overflow 64 bits: refuse before.
                 * Leading zeros are no size (RFC 9112 §7.1: 1*HEXDIG);
                 * they count against the size line's limit instead. */
                if (dec->remaining > G_MAXUINT64 >> 4 || ++dec->line_len > MAX_SIZE_LINE)
                  CH_FAIL (400);
                dec->remaining = dec->remaining * 16 + (guint64) v;
                dec->digits++;
                p++;
                break;
              }
            if (dec->digits == 0)
              CH_FAIL (400);
            dec->state = CH_EXT;
            break; /* look at @c again as part of the extension */
          }
        case CH_EXT:
          if (++dec->line_len > MAX_SIZE_LINE)
            CH_FAIL (400);
          /* RFC 9112 §7.1.1: the extensions' total length is bounded too
           * (they count towards the body limit), or 4 KiB of them per byte
           * of data would come free. */
          if (c != '\r' && ++dec->total > dec->max_body)
            CH_FAIL (413);
          if (c == '\r')
            {
              /* Only where an extension (or none) may end. */
              if (!ext_may_end (dec->ext_state))
                CH_FAIL (400);
              dec->state = CH_SIZE_LF;
              p++;
              break;
            }
          if (!ext_step (&dec->ext_state, c))
            CH_FAIL (400); /* bare LF, NUL, controls, or not the grammar */
          p++;
          break;
        case CH_SIZE_LF:
          if (c != '\n')
            CH_FAIL (400);
          p++;
          dec->line_len = 0;
          dec->digits = 0;
          dec->ext_state = EXT_START;
          if (dec->remaining == 0)
            dec->state = CH_TRAILER;
          else
            {
              if (dec->remaining > dec->max_body - MIN (dec->total, dec->max_body))
                CH_FAIL (413);
              dec->state = CH_DATA;
            }
          break;
        case CH_DATA:
          {
            gsize n = (gsize) MIN ((guint64) (end - p), dec->remaining);
            *data = p;
            *data_len = n;
            dec->remaining -= n;
            dec->total += n;
            p += n;
            if (dec->remaining == 0)
              dec->state = CH_DATA_CR;
            return (gssize) (p - buf); /* one data slice per call */
          }
        case CH_DATA_CR:
          if (c != '\r')
            CH_FAIL (400); /* the chunk is longer than its size said */
          dec->state = CH_DATA_LF;
          p++;
          break;
        case CH_DATA_LF:
          if (c != '\n')
            CH_FAIL (400);
          dec->state = CH_SIZE;
          p++;
          break;
        case CH_TRAILER:
          if (c == '\r')
            {
              dec->state = CH_END_LF;
              p++;
              break;
            }
          /* A trailer field line: name ":" value; no folding. */
          if (!IS (c, C_TCHAR))
            CH_FAIL (400);
          dec->state = CH_TRAILER_LINE;
          dec->digits = 0; /* reused: 1 once the colon was seen */
          break;
        case CH_TRAILER_LINE:
          if (++dec->line_len > MAX_TRAILERS)
            CH_FAIL (431);
          if (c == '\r')
            {
              if (dec->digits == 0)
                CH_FAIL (400); /* no colon */
              dec->state = CH_TRAILER_LF;
            }
          else if (dec->digits == 0)
            {
              if (c == ':')
                dec->digits = 1;
              else if (!IS (c, C_TCHAR))
                CH_FAIL (400);
            }
          else if (!IS (c, C_VALUE))
            CH_FAIL (400);
          p++;
          break;
        case CH_TRAILER_LF:
          if (c != '\n')
            CH_FAIL (400);
          dec->state = CH_TRAILER;
          p++;
          break;
        case CH_END_LF:
          if (c != '\n')
            CH_FAIL (400);
          dec->state = CH_DONE;
          p++;
          break;
        default:
          g_assert_not_reached ();
        }
    }
  *done = dec->state == CH_DONE;
  return (gssize) (p - buf);
}
