/* bench-parser.c: HTTP/1.1 request heads parsed per second by Weft's
 * parser, picohttpparser and nodejs' http-parser, on one set of realistic
 * browser and API requests, in one run.
 *
 * picohttpparser is the copy that Debian's libh2o0.13 exports
 * (phr_parse_request), loaded with dlopen; http-parser comes from
 * libhttp-parser-dev when it was found at build time. Each parser sees the
 * same bytes; each records the method, target and every header as slices
 * (http-parser through its callbacks), which is what a server needs.
 * Weft's parser also applies the Host and framing rules.
 *
 * Usage: bench-parser [SECONDS_PER_ROUND] [ROUNDS]   (defaults 1 and 5)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <dlfcn.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft-http-parser.h"
#include "weft-bench.h"

#ifdef HAVE_HTTP_PARSER
#include <http_parser.h>
#endif

static const char *requests[] = {
  /* Chrome, a page load */
  "GET /wiki/Hypertext_Transfer_Protocol HTTP/1.1\r\n"
  "Host: en.wikipedia.org\r\n"
  "Connection: keep-alive\r\n"
  "Cache-Control: max-age=0\r\n"
  "sec-ch-ua: \"Chromium\";v=\"118\", \"Google Chrome\";v=\"118\", \"Not=A?Brand\";v=\"99\"\r\n"
  "sec-ch-ua-mobile: ?0\r\n"
  "sec-ch-ua-platform: \"Linux\"\r\n"
  "Upgrade-Insecure-Requests: 1\r\n"
  "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/118.0.0.0 Safari/537.36\r\n"
  "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7\r\n"
  "Sec-Fetch-Site: none\r\n"
  "Sec-Fetch-Mode: navigate\r\n"
  "Sec-Fetch-User: ?1\r\n"
  "Sec-Fetch-Dest: document\r\n"
  "Accept-Encoding: gzip, deflate, br\r\n"
  "Accept-Language: en-GB,en-US;q=0.9,en;q=0.8\r\n"
  "Cookie: WMF-Last-Access=22-Nov-2026; GeoIP=GB:ENG:London:51.51:-0.13:v4; enwikimwuser-sessionId=5f2c1a7e9b3d4c8a\r\n"
  "\r\n",
  /* Firefox, a stylesheet */
  "GET /static/css/site.min.css?v=20261122 HTTP/1.1\r\n"
  "Host: www.example.org\r\n"
  "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:119.0) Gecko/20100101 Firefox/119.0\r\n"
  "Accept: text/css,*/*;q=0.1\r\n"
  "Accept-Language: en-US,en;q=0.5\r\n"
  "Accept-Encoding: gzip, deflate, br\r\n"
  "Referer: https://www.example.org/\r\n"
  "Connection: keep-alive\r\n"
  "Sec-Fetch-Dest: style\r\n"
  "Sec-Fetch-Mode: no-cors\r\n"
  "Sec-Fetch-Site: same-origin\r\n"
  "If-Modified-Since: Sat, 21 Nov 2026 10:00:00 GMT\r\n"
  "If-None-Match: \"5f2c-1a7e9b3d\"\r\n"
  "\r\n",
  /* Safari, an image */
  "GET /images/logo@2x.png HTTP/1.1\r\n"
  "Host: cdn.example.net\r\n"
  "Accept: image/webp,image/avif,image/jxl,image/heic,image/heic-sequence,video/*;q=0.8,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5\r\n"
  "Accept-Language: en-GB,en;q=0.9\r\n"
  "Connection: keep-alive\r\n"
  "Accept-Encoding: gzip, deflate, br\r\n"
  "User-Agent: Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15\r\n"
  "Referer: https://www.example.net/products/42\r\n"
  "\r\n",
  /* an API call with a body */
  "POST /api/v2/orders?dry_run=false HTTP/1.1\r\n"
  "Host: api.example.com\r\n"
  "User-Agent: python-requests/2.31.0\r\n"
  "Accept-Encoding: gzip, deflate\r\n"
  "Accept: application/json\r\n"
  "Connection: keep-alive\r\n"
  "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U\r\n"
  "Content-Type: application/json\r\n"
  "Content-Length: 27\r\n"
  "\r\n",
  /* curl */
  "GET / HTTP/1.1\r\n"
  "Host: localhost:8080\r\n"
  "User-Agent: curl/7.88.1\r\n"
  "Accept: */*\r\n"
  "\r\n",
};

#define N_REQ G_N_ELEMENTS (requests)
#define MAX_HEADERS 64

static gsize lens[N_REQ];
static volatile gsize sink;

/* ---- Weft ------------------------------------------------------------- */

static gboolean
run_weft (void)
{
  static WeftHttpHeader headers[MAX_HEADERS];
  WeftHttpLimits limits;
  weft_http_limits_init (&limits);
  gsize acc = 0;
  for (gsize i = 0; i < N_REQ; i++)
    {
      WeftHttpHead req;
      guint status;
      gssize r = weft_http_parse_request (requests[i], lens[i], &limits, &req, headers,
                                          MAX_HEADERS, &status);
      if (r <= 0)
        return FALSE;
      acc += req.n_headers + req.target.len;
    }
  sink += acc;
  return TRUE;
}

/* ---- picohttpparser (from libh2o) ----------------------------------------- */

struct phr_header {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
};
typedef int (*PhrParseRequest) (const char *buf, size_t len, const char **method,
                                size_t *method_len, const char **path, size_t *path_len,
                                int *minor_version, struct phr_header *headers,
                                size_t *num_headers, size_t last_len);
static PhrParseRequest phr_parse_request;

static gboolean
run_pico (void)
{
  static struct phr_header headers[MAX_HEADERS];
  gsize acc = 0;
  for (gsize i = 0; i < N_REQ; i++)
    {
      const char *method, *path;
      size_t method_len, path_len, num_headers = MAX_HEADERS;
      int minor;
      int r = phr_parse_request (requests[i], lens[i], &method, &method_len, &path, &path_len,
                                 &minor, headers, &num_headers, 0);
      if (r <= 0)
        return FALSE;
      acc += num_headers + path_len;
    }
  sink += acc;
  return TRUE;
}

/* ---- http-parser ---------------------------------------------------------- */

#ifdef HAVE_HTTP_PARSER
typedef struct {
  WeftHttpSlice url;
  WeftHttpHeader headers[MAX_HEADERS];
  gsize n;
  gboolean in_value;
  gboolean done;
} HpState;

static int
hp_url (http_parser *p, const char *at, size_t len)
{
  HpState *s = p->data;
  s->url = (WeftHttpSlice) { at, len };
  return 0;
}

static int
hp_field (http_parser *p, const char *at, size_t len)
{
  HpState *s = p->data;
  if (s->n >= MAX_HEADERS)
    return 1;
  s->headers[s->n].name = (WeftHttpSlice) { at, len };
  s->in_value = FALSE;
  return 0;
}

static int
hp_value (http_parser *p, const char *at, size_t len)
{
  HpState *s = p->data;
  s->headers[s->n++].value = (WeftHttpSlice) { at, len };
  return 0;
}

static int
hp_headers_complete (http_parser *p)
{
  HpState *s = p->data;
  s->done = TRUE;
  return 1; /* skip the body: we measure heads */
}

static http_parser_settings hp_settings;

static gboolean
run_http_parser (void)
{
  gsize acc = 0;
  for (gsize i = 0; i < N_REQ; i++)
    {
      http_parser p;
      HpState s = { 0 };
      http_parser_init (&p, HTTP_REQUEST);
      p.data = &s;
      http_parser_execute (&p, &hp_settings, requests[i], lens[i]);
      if (!s.done)
        return FALSE;
      acc += s.n + s.url.len;
    }
  sink += acc;
  return TRUE;
}
#endif

/* Runs @fn (one pass over the request set) for @seconds; requests/s. */
static double
measure (gboolean (*fn) (void), double seconds)
{
  guint64 passes = 0;
  gint64 start = g_get_monotonic_time (), now;
  do
    {
      for (int k = 0; k < 100; k++)
        if (!fn ())
          {
            fprintf (stderr, "bench-parser: a parser refused a request\n");
            exit (1);
          }
      passes += 100;
      now = g_get_monotonic_time ();
    }
  while (now - start < (gint64) (seconds * G_USEC_PER_SEC));
  return (double) passes * N_REQ / ((double) (now - start) / G_USEC_PER_SEC);
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

int
main (int argc, char **argv)
{
  double seconds = argc > 1 ? atof (argv[1]) : 1.0;
  int rounds = argc > 2 ? atoi (argv[2]) : 5;
  if (rounds < 1 || rounds > 100)
    rounds = 5;
  gsize bytes = 0;
  for (gsize i = 0; i < N_REQ; i++)
    bytes += lens[i] = strlen (requests[i]);

  void *h2o = dlopen ("libh2o.so.0.13", RTLD_NOW);
  if (h2o != NULL)
    phr_parse_request = (PhrParseRequest) dlsym (h2o, "phr_parse_request");
#ifdef HAVE_HTTP_PARSER
  hp_settings.on_url = hp_url;
  hp_settings.on_header_field = hp_field;
  hp_settings.on_header_value = hp_value;
  hp_settings.on_headers_complete = hp_headers_complete;
#endif

  struct {
    const char *name;
    gboolean (*fn) (void);
    double r[100];
  } impls[] = {
    { "Weft weft_http_parse_request", run_weft, { 0 } },
    { "picohttpparser (libh2o0.13)", phr_parse_request != NULL ? run_pico : NULL, { 0 } },
#ifdef HAVE_HTTP_PARSER
    { "http-parser 2.9 (nodejs)", run_http_parser, { 0 } },
#else
    { "http-parser 2.9 (nodejs)", NULL, { 0 } },
#endif
  };
  /* Interleaved rounds: every parser sees the same machine state. */
  for (int r = 0; r < rounds; r++)
    for (gsize k = 0; k < G_N_ELEMENTS (impls); k++)
      if (impls[k].fn != NULL)
        impls[k].r[r] = measure (impls[k].fn, seconds);

  gchar *note = g_strdup_printf ("%zu requests (%zu bytes, %zu B average), median of %d rounds "
                                 "of %.1f s, interleaved",
                                 (gsize) N_REQ, bytes, bytes / N_REQ, rounds, seconds);
  double weft = 0;
  for (gsize k = 0; k < G_N_ELEMENTS (impls); k++)
    {
      if (impls[k].fn == NULL)
        {
          printf ("# %s: not available (skipped)\n", impls[k].name);
          continue;
        }
      qsort (impls[k].r, (size_t) rounds, sizeof (double), cmp_double);
      double med = impls[k].r[rounds / 2];
      if (k == 0)
        weft = med;
      wb_report ("parser", impls[k].name, "request heads parsed per second", med / 1e6,
                         "Mreq/s", note);
      wb_report ("parser", impls[k].name, "time per request head", 1e9 / med, "ns",
                         note);
      if (k > 0)
        wb_report ("parser", impls[k].name, "Weft / this", weft / med, "ratio",
                           "goal: >= 1 against picohttpparser, >= 3 against http-parser");
    }
  g_free (note);
  return 0;
}
