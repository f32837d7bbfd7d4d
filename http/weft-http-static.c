/* weft-http-static.c: serving a directory's files (GET and HEAD).
 *
 * Safety first: the path is percent-decoded once, split on '/', and any
 * ".." segment, NUL or backslash is refused; the file is then opened with
 * openat2(RESOLVE_BENEATH) relative to the root, so no symlink and no
 * trick of the path can leave the root. Where openat2 is missing (ENOSYS:
 * kernels before 5.6, Valgrind 3.19), the path is walked one component at
 * a time from the root with O_NOFOLLOW, so no symlink is followed at all:
 * stricter than RESOLVE_BENEATH, which follows symlinks that stay inside
 * the root. Bodies go out with sendfile; ETag and Last-Modified allow
 * 304; single byte ranges give 206 or 416, under If-Range's condition. A
 * directory named without its slash (the mount point too) is a 301 to
 * the path as sent with it, never to a "//host" one.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-http-private.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  gchar *prefix;
  gchar *norm_prefix; /* decoded, no leading or trailing slash: "" for "/" */
  int root_fd; /* O_PATH | O_DIRECTORY */
} StaticDir;

static void
static_dir_free (gpointer data)
{
  StaticDir *d = data;
  close (d->root_fd);
  g_free (d->prefix);
  g_free (d->norm_prefix);
  g_free (d);
}

/* Set once openat2 has answered ENOSYS (or by the tests): from then on
 * every open walks. Relaxed: each open only needs some value of it, and
 * both paths are safe. */
static atomic_bool use_walk;

/* The fallback: @rel ("a/b/c", no "..", as
 * weft__http_static_relative_path() makes it) one component at a time
 * from @root_fd, each opened with O_NOFOLLOW, so a
 * symlink anywhere on the path fails (ENOTDIR for a directory component
 * under O_PATH | O_DIRECTORY, ELOOP for the last one): refused, however
 * the link points. Each step opens relative to the fd of the previous
 * one, so nothing is resolved twice. errno is that of the failing step. */
static int
open_walk (int root_fd, const char *rel, gboolean anyone)
{
  int dir = root_fd;
  const char *p = rel;
  for (;;)
    {
      const char *slash = strchr (p, '/');
      gsize n = slash != NULL ? (gsize) (slash - p) : strlen (p);
      char name[NAME_MAX + 1];
      int fd;
      if (n == 0 || n > NAME_MAX || (n == 2 && p[0] == '.' && p[1] == '.'))
        {
          /* the resolver never makes these: refuse rather than trust */
          fd = -1;
          errno = n > NAME_MAX ? ENAMETOOLONG : ENOENT;
        }
      else
        {
          memcpy (name, p, n);
          name[n] = '\0';
          /* O_NONBLOCK on the last one: see weft__http_static_open_beneath() */
          fd = slash != NULL
                 ? openat (dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                 : openat (dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        }
      if (dir != root_fd)
        {
          int err = errno;
          close (dir);
          errno = err;
        }
      if (fd < 0 || slash == NULL)
        return fd;
      /* @anyone: only through directories any user may search (EACCES);
       * the root itself ("." for its index) was chosen by whoever serves
       * it. */
      struct stat ds;
      if (anyone && !(n == 1 && p[0] == '.') &&
          (fstat (fd, &ds) != 0 || (ds.st_mode & S_IXOTH) == 0))
        {
          close (fd);
          errno = EACCES;
          return -1;
        }
      dir = fd;
      p = slash + 1;
    }
}

/* Internal (weft-http-private.h), also for tests/fuzz/fuzz-http-static.c. */
int
weft__http_static_open_beneath (int root_fd, const char *rel)
{
  if (!atomic_load_explicit (&use_walk, memory_order_relaxed))
    {
      /* O_NONBLOCK: opening a FIFO must not block the worker (it is then
       * refused as not a regular file); it changes nothing for files. */
      struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                              .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
      long fd = syscall (SYS_openat2, root_fd, rel, &how, sizeof how);
      if (fd >= 0 || errno != ENOSYS)
        return fd < 0 ? -1 : (int) fd;
      atomic_store_explicit (&use_walk, true, memory_order_relaxed);
    }
  return open_walk (root_fd, rel, FALSE);
}

/* For the tests: walk whether or not openat2 exists (TRUE), or try
 * openat2 again (FALSE). */
void
weft__http_static_force_fallback (gboolean force)
{
  atomic_store_explicit (&use_walk, force != FALSE, memory_order_relaxed);
}

/* For the tests: whether opens walk now. */
gboolean
weft__http_static_uses_fallback (void)
{
  return atomic_load_explicit (&use_walk, memory_order_relaxed);
}

static int
hexval (char c)
{
  return g_ascii_xdigit_value (c);
}

/* Decodes @path (after the prefix) into a relative path, or NULL if it is
 * not acceptable. "" stands for the root itself. Internal
 * (weft-http-private.h), for the fuzz target. */
gchar *
weft__http_static_relative_path (const char *path)
{
  GString *dec = g_string_new (NULL);
  for (const char *p = path; *p != '\0'; p++)
    {
      char c = *p;
      if (c == '%')
        {
          int h = hexval (p[1]), l = h < 0 ? -1 : hexval (p[2]);
          if (h < 0 || l < 0)
            goto bad;
          c = (char) (h * 16 + l);
          p += 2;
        }
      if (c == '\0' || c == '\\')
        goto bad;
      g_string_append_c (dec, c);
    }
  gchar **parts = g_strsplit (dec->str, "/", -1);
  GString *rel = g_string_new (NULL);
  for (gchar **s = parts; *s != NULL; s++)
    {
      if (**s == '\0' || strcmp (*s, ".") == 0)
        continue;
      if (strcmp (*s, "..") == 0)
        {
          g_strfreev (parts);
          g_string_free (rel, TRUE);
          goto bad;
        }
      if (rel->len > 0)
        g_string_append_c (rel, '/');
      g_string_append (rel, *s);
    }
  g_strfreev (parts);
  g_string_free (dec, TRUE);
  return g_string_free (rel, FALSE);
bad:
  g_string_free (dec, TRUE);
  return NULL;
}

static const char *
mime_type (const char *name)
{
  static const struct { const char *ext, *type; } types[] = {
    { "html", "text/html; charset=utf-8" }, { "htm", "text/html; charset=utf-8" },
    { "css", "text/css; charset=utf-8" }, { "js", "text/javascript; charset=utf-8" },
    { "mjs", "text/javascript; charset=utf-8" }, { "json", "application/json" },
    { "txt", "text/plain; charset=utf-8" }, { "md", "text/markdown; charset=utf-8" },
    { "xml", "application/xml" }, { "svg", "image/svg+xml" }, { "png", "image/png" },
    { "jpg", "image/jpeg" }, { "jpeg", "image/jpeg" }, { "gif", "image/gif" },
    { "webp", "image/webp" }, { "ico", "image/x-icon" }, { "wasm", "application/wasm" },
    { "pdf", "application/pdf" }, { "woff2", "font/woff2" }, { "c", "text/plain; charset=utf-8" },
    { "h", "text/plain; charset=utf-8" },
  };
  const char *dot = strrchr (name, '.');
  const char *slash = strrchr (name, '/');
  if (dot != NULL && (slash == NULL || dot > slash))
    for (guint i = 0; i < G_N_ELEMENTS (types); i++)
      if (g_ascii_strcasecmp (dot + 1, types[i].ext) == 0)
        return types[i].type;
  return "application/octet-stream";
}

/* An IMF-fixdate; FALSE for a time that has none: gmtime() cannot
 * convert it (a file's mtime is any 64-bit value its owner set, on
 * tmpfs), or its year is not the four digits the form has (nor one
 * parse_http_date() would read back). */
static gboolean
format_http_date (time_t t, char *buf, gsize len)
{
  static const char days[][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
  static const char months[][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
  struct tm tm;
  if (gmtime_r (&t, &tm) == NULL || tm.tm_year < 0 || tm.tm_year > 9999 - 1900)
    return FALSE;
  snprintf (buf, len, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday], tm.tm_mday,
            months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return TRUE;
}

/* Reads @n digits at @p into *@v; FALSE if any is not a digit. */
static gboolean
digits (const char *p, guint n, int *v)
{
  *v = 0;
  for (guint i = 0; i < n; i++)
    {
      if (!g_ascii_isdigit (p[i]))
        return FALSE;
      *v = *v * 10 + (p[i] - '0');
    }
  return TRUE;
}

/* The month at @p (three letters, case-sensitive as RFC 9110 spells
 * them), or -1. */
static int
month_of (const char *p)
{
  static const char months[][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
  for (int i = 0; i < 12; i++)
    if (strncmp (p, months[i], 3) == 0)
      return i;
  return -1;
}

/* The length of the day name at @p (short: "Sun"; long: "Sunday"), or 0. */
static gsize
day_name (const char *p, gboolean long_form)
{
  static const char *const days[] = { "Sunday", "Monday", "Tuesday", "Wednesday",
                                      "Thursday", "Friday", "Saturday" };
  for (guint i = 0; i < G_N_ELEMENTS (days); i++)
    {
      gsize n = long_form ? strlen (days[i]) : 3;
      if (strncmp (p, days[i], n) == 0)
        return n;
    }
  return 0;
}

/* "HH:MM:SS" at @p into @tm; FALSE unless it is one, in range. */
static gboolean
time_of_day (const char *p, struct tm *tm)
{
  return digits (p, 2, &tm->tm_hour) && p[2] == ':' && digits (p + 3, 2, &tm->tm_min) &&
         p[5] == ':' && digits (p + 6, 2, &tm->tm_sec) && tm->tm_hour <= 23 && tm->tm_min <= 59 &&
         tm->tm_sec <= 60;
}

/* An HTTP-date (RFC 9110 §5.6.7) in any of its three forms, which a
 * recipient must all accept: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37
 * GMT", the one we send), RFC 850 ("Sunday, 06-Nov-94 08:49:37 GMT") and
 * asctime ("Sun Nov  6 08:49:37 1994"). -1 for anything else, a day the
 * month does not have included: an invalid date is ignored (§13.1.3), not
 * normalised into some other day. */
static time_t
parse_http_date (const char *s)
{
  struct tm tm = { 0 };
  int year = 0;
  gsize n = strlen (s);
  gsize d;
  if (n == 29 && (d = day_name (s, FALSE)) == 3 && s[3] == ',' && s[4] == ' ')
    {
      /* IMF-fixdate */
      if (!digits (s + 5, 2, &tm.tm_mday) || s[7] != ' ' || (tm.tm_mon = month_of (s + 8)) < 0 ||
          s[11] != ' ' || !digits (s + 12, 4, &year) || s[16] != ' ' ||
          !time_of_day (s + 17, &tm) || strcmp (s + 25, " GMT") != 0)
        return -1;
    }
  else if (n == 24 && day_name (s, FALSE) == 3 && s[3] == ' ')
    {
      /* asctime: the day is ( 2DIGIT / ( SP DIGIT ) ) */
      if ((tm.tm_mon = month_of (s + 4)) < 0 || s[7] != ' ' ||
          !(s[8] == ' ' ? digits (s + 9, 1, &tm.tm_mday) : digits (s + 8, 2, &tm.tm_mday)) ||
          s[10] != ' ' || !time_of_day (s + 11, &tm) || s[19] != ' ' || !digits (s + 20, 4, &year))
        return -1;
    }
  else if ((d = day_name (s, TRUE)) != 0 && n == d + 24 && s[d] == ',' && s[d + 1] == ' ')
    {
      /* RFC 850: a two-digit year more than 50 years ahead is in the past */
      const char *p = s + d + 2;
      if (!digits (p, 2, &tm.tm_mday) || p[2] != '-' || (tm.tm_mon = month_of (p + 3)) < 0 ||
          p[6] != '-' || !digits (p + 7, 2, &year) || p[9] != ' ' || !time_of_day (p + 10, &tm) ||
          strcmp (p + 18, " GMT") != 0)
        return -1;
      time_t now = time (NULL);
      struct tm now_tm;
      gmtime_r (&now, &now_tm);
      int this_year = now_tm.tm_year + 1900;
      year += this_year - this_year % 100;
      if (year > this_year + 50)
        year -= 100;
    }
  else
    return -1;
  if (tm.tm_mday < 1 || year < 1900)
    return -1;
  tm.tm_year = year - 1900;
  int mday = tm.tm_mday, mon = tm.tm_mon;
  time_t t = timegm (&tm);
  /* timegm normalises (31 Feb is 3 Mar): refuse what it had to move. */
  if (t == (time_t) -1 || tm.tm_mday != mday || tm.tm_mon != mon)
    return -1;
  return t;
}

/* One "bytes=" range of a @size-byte file. Returns 1 with the range, 0 to
 * serve the whole file (no header, or several ranges, or not bytes: all
 * allowed by RFC 9110 §14.2), -1 if unsatisfiable (416). */
static int
parse_range (const char *h, guint64 size, guint64 *off, guint64 *len)
{
  if (h == NULL || !g_str_has_prefix (h, "bytes="))
    return 0;
  const char *p = h + 6;
  if (strchr (p, ',') != NULL)
    return 0;
  char *end;
  if (*p == '-')
    {
      /* suffix: the last N bytes */
      if (!g_ascii_isdigit (p[1]))
        return 0;
      guint64 n = g_ascii_strtoull (p + 1, &end, 10);
      if (*end != '\0')
        return 0;
      if (n == 0)
        return -1;
      if (size == 0)
        return 0; /* satisfiable (§14.1.1), yet no part to send: the whole */
      n = MIN (n, size);
      *off = size - n;
      *len = n;
      return 1;
    }
  if (!g_ascii_isdigit (*p))
    return 0;
  guint64 first = g_ascii_strtoull (p, &end, 10);
  if (*end != '-')
    return 0;
  p = end + 1;
  guint64 last = size - 1;
  if (*p != '\0')
    {
      if (!g_ascii_isdigit (*p))
        return 0;
      last = g_ascii_strtoull (p, &end, 10);
      if (*end != '\0' || last < first)
        return 0;
    }
  if (first >= size)
    return -1;
  last = MIN (last, size - 1);
  *off = first;
  *len = last - first + 1;
  return 1;
}

/* RFC 9110 §13.1.5: whether the Range of a request with If-Range @h may
 * be served, for a file of @etag modified at @mtime. An entity tag must
 * match strongly (a weak one never does); a date must be the file's
 * Last-Modified exactly, and that a strong validator: older than a second,
 * or a second write within it would go unnoticed. Anything else sends the
 * whole file: a client resuming a download of a file that changed
 * meanwhile must not get a piece of the new one to splice onto the old. */
static gboolean
if_range_holds (const char *h, const char *etag, time_t mtime)
{
  if (h[0] == '"')
    return strcmp (h, etag) == 0;
  if (h[0] == 'W' && h[1] == '/')
    return FALSE;
  time_t t = parse_http_date (h);
  return t >= 0 && t == mtime && time (NULL) - mtime >= 1;
}

/* Whether the raw segment @seg (@len bytes) is ".", spelled any way the
 * decoder takes. */
static gboolean
is_dot_segment (const char *seg, gsize len)
{
  return (len == 1 && seg[0] == '.') || (len == 3 && g_ascii_strncasecmp (seg, "%2e", 3) == 0);
}

/* Whether a request for @dec (the path, decoded) names a directory: it
 * ends in a slash, or in a "." segment. A file asked for that way is not
 * there (as a file system says ENOTDIR), so one file has one URL and
 * relative links in it resolve as its author meant. Decoded, because the
 * file is opened from the decoded path: an escaped slash ("%2f") at the
 * end is a trailing slash too. */
static gboolean
names_directory (const char *dec)
{
  const char *last = strrchr (dec, '/');
  last = last != NULL ? last + 1 : dec;
  return *last == '\0' || strcmp (last, ".") == 0;
}

/* The Location that redirects @path (as sent, a directory without its
 * trailing slash) to the directory itself: relative (RFC 9110 §10.2.2
 * allows it; an absolute one would trust Host), @path's segments exactly
 * as sent, escapes included, less the empty and "." ones (a client drops
 * the dots anyway; "//" merged), then "/" and the query if any. Both come
 * from the request-target, which the parser keeps to visible ASCII: safe
 * in a header. NULL if @path begins with an empty segment, also behind
 * "." ones ("//evil.com", "/.//evil.com"): kept, that is "//evil.com/",
 * a network-path reference a browser takes for another host; merged, a
 * path its sender never wrote. A backslash, which browsers read as a
 * slash, never gets here (the decoder refuses it, raw or escaped). */
static gchar *
redirect_location (const char *path, const char *query)
{
  GString *loc = g_string_new (NULL);
  gboolean leading = TRUE;
  const char *p = path[0] == '/' ? path + 1 : path;
  for (;;)
    {
      const char *e = strchrnul (p, '/');
      gsize len = (gsize) (e - p);
      if (len == 0 && leading)
        {
          g_string_free (loc, TRUE);
          return NULL;
        }
      if (len > 0 && !is_dot_segment (p, len))
        {
          g_string_append_c (loc, '/');
          g_string_append_len (loc, p, (gssize) len);
          leading = FALSE;
        }
      if (*e == '\0')
        break;
      p = e + 1;
    }
  /* The root itself ("/." or "/%2e") is "/", never "//". */
  g_string_append_c (loc, '/');
  if (query != NULL && *query != '\0')
    {
      g_string_append_c (loc, '?');
      g_string_append (loc, query);
    }
  return g_string_free (loc, FALSE);
}

/* Opens @rel beneath the root. Running as root, the kernel lets us read
 * anything: then only what any user could read is served (o+x on each
 * directory below the root on the way, o+r on the file, which serve()
 * checks), as by a server that dropped its privileges, so a file kept
 * private in the tree is not published by running as root. That walk
 * follows no symlink (one could lead past a closed directory), and it
 * checks the directories it opened, not names looked up again. */
static int
open_file (StaticDir *d, const char *rel, gboolean as_root)
{
  return as_root ? open_walk (d->root_fd, rel, TRUE)
                 : weft__http_static_open_beneath (d->root_fd, rel);
}

/* RFC 9110 §13.1.1-2: whether a list of entity tags in the request's
 * @name fields (all of its lines: a list may be split over several)
 * matches @etag (a strong tag of ours, quotes included). -1 without the
 * field; 1 for "*" or a match, strong (§8.8.3.2: a weak tag never
 * matches) or weak (W/ ignored); 0 otherwise, a malformed list included
 * (it matches nothing). */
static int
etag_list_matches (WeftHttpRequest *req, const char *name, const char *etag, gboolean strong)
{
  int found = -1;
  gsize elen = strlen (etag);
  for (gsize i = 0; i < req->n_headers; i++)
    {
      if (g_ascii_strcasecmp (req->headers[i].name.ptr, name) != 0)
        continue;
      if (found < 0)
        found = 0;
      const char *p = req->headers[i].value.ptr;
      for (;;)
        {
          while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
          if (*p == '\0')
            break;
          if (*p == '*')
            {
              p++;
              found = 1;
              continue;
            }
          gboolean weak = p[0] == 'W' && p[1] == '/';
          if (weak)
            p += 2;
          if (*p != '"')
            return 0;
          const char *q = p + 1;
          while (*q != '"' && *q != '\0')
            {
              guint8 c = (guint8) *q;
              if (c < 0x21 || c == 0x7f)
                return 0; /* etagc = %x21 / %x23-7E / obs-text */
              q++;
            }
          if (*q != '"')
            return 0;
          q++;
          if ((gsize) (q - p) == elen && memcmp (p, etag, elen) == 0 && !(weak && strong))
            found = 1;
          p = q;
          while (*p == ' ' || *p == '\t')
            p++;
          if (*p != ',' && *p != '\0')
            return 0;
        }
    }
  return found;
}

static void
answer_status (WeftHttpRequest *req, guint status)
{
  char text[48];
  int n = g_snprintf (text, sizeof text, "%u\n", status);
  weft_http_request_respond (req, status, "text/plain", (const guint8 *) text, (gsize) n);
}

static void
serve (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  StaticDir *d = user_data;
  const char *path = weft_http_request_get_path (req);
  /* The router matched the decoded path against the prefix: decode the
   * whole path and take the prefix off its decoded, normalised form (the
   * raw path may spell the prefix with escapes). */
  g_autofree gchar *full = weft__http_static_relative_path (path);
  /* (Where full is made, so is this: the same escapes decode.) */
  g_autofree gchar *dec = full != NULL ? g_uri_unescape_string (path, NULL) : NULL;
  gchar *rel = NULL;
  if (full != NULL)
    {
      gsize n = strlen (d->norm_prefix);
      if (n == 0)
        rel = g_strdup (full);
      else if (strncmp (full, d->norm_prefix, n) == 0 && (full[n] == '\0' || full[n] == '/'))
        rel = g_strdup (full + n + (full[n] == '/'));
    }
  if (rel == NULL || dec == NULL)
    {
      g_free (rel);
      answer_status (req, 404); /* never say why: 404 for traversal attempts too */
      return;
    }
  gboolean as_root = geteuid () == 0;
  int fd = open_file (d, *rel != '\0' ? rel : ".", as_root);
  int open_err = fd < 0 ? errno : 0;
  struct stat st;
  if (fd >= 0 && fstat (fd, &st) != 0)
    {
      close (fd);
      fd = -1;
    }
  if (fd >= 0 && S_ISDIR (st.st_mode))
    {
      /* (The raw path: a client resolves relative links against the
       * URL as sent, so "/sub%2f" is redirected too.) */
      if (!g_str_has_suffix (path, "/"))
        {
          /* A directory named without its slash (the mount point too,
           * through its own route): relative links in its index need
           * it. Running as root, one that not all may search is refused
           * as its contents would be, not redirected to. */
          close (fd);
          gchar *loc = redirect_location (path, weft_http_request_get_query (req));
          if (loc == NULL || (as_root && *rel != '\0' && (st.st_mode & S_IXOTH) == 0))
            answer_status (req, loc == NULL ? 404 : 403);
          else
            {
              weft_http_request_add_response_header (req, "Location", loc);
              answer_status (req, 301);
            }
          g_free (loc);
          g_free (rel);
          return;
        }
      gchar *index = g_strconcat (*rel != '\0' ? rel : ".", "/index.html", NULL);
      close (fd);
      fd = open_file (d, index, as_root);
      open_err = fd < 0 ? errno : 0;
      g_free (rel);
      rel = index;
      if (fd >= 0 && fstat (fd, &st) != 0)
        {
          close (fd);
          fd = -1;
        }
    }
  else if (fd >= 0 && names_directory (dec))
    {
      /* A file asked for as a directory ("/a.txt/"). */
      close (fd);
      fd = -1;
      open_err = ENOENT;
    }
  if (fd >= 0 && !S_ISREG (st.st_mode))
    {
      close (fd);
      fd = -1;
      open_err = ENOENT;
    }
  if (fd >= 0 && as_root && (st.st_mode & S_IROTH) == 0)
    {
      close (fd);
      fd = -1;
      open_err = EACCES;
    }
  if (fd < 0)
    {
      /* Out of descriptors or memory says nothing about the file: a 404
       * then would be wrong, and cached as such. */
      guint status = 404;
      if (open_err == EACCES)
        status = 403;
      else if (open_err == EMFILE || open_err == ENFILE || open_err == ENOMEM)
        status = 503;
      answer_status (req, status);
      g_free (rel);
      return;
    }

  char etag[64], modified[40];
  g_snprintf (etag, sizeof etag, "\"%" G_GINT64_MODIFIER "x-%" G_GINT64_MODIFIER "x-%lx\"",
              (gint64) st.st_size, (gint64) st.st_mtim.tv_sec, (long) st.st_mtim.tv_nsec);
  weft_http_request_add_response_header (req, "ETag", etag);
  /* RFC 9110 §8.8.2.1: a modification time in the future is sent as now,
   * never as a Last-Modified later than the Date; none without a date. */
  if (format_http_date (MIN (st.st_mtim.tv_sec, time (NULL)), modified, sizeof modified))
    weft_http_request_add_response_header (req, "Last-Modified", modified);
  weft_http_request_add_response_header (req, "Accept-Ranges", "bytes");

  /* RFC 9110 §13.2.2, in its order: If-Match (strong), else
   * If-Unmodified-Since, refuse with 412; then If-None-Match (weak), else
   * If-Modified-Since, answer 304. A date that is not an HTTP-date is
   * ignored (§13.1.3-4). */
  const char *type = mime_type (rel);
  g_free (rel);
  time_t mtime = st.st_mtim.tv_sec;
  guint cond_status = 0;
  int im = etag_list_matches (req, "If-Match", etag, TRUE);
  if (im == 0)
    cond_status = 412;
  else if (im < 0)
    {
      const char *ius = weft_http_request_get_header (req, "If-Unmodified-Since");
      time_t t = ius != NULL ? parse_http_date (ius) : -1;
      if (t >= 0 && mtime > t)
        cond_status = 412;
    }
  if (cond_status == 0)
    {
      int inm = etag_list_matches (req, "If-None-Match", etag, FALSE);
      if (inm > 0)
        cond_status = 304;
      else if (inm < 0)
        {
          const char *ims = weft_http_request_get_header (req, "If-Modified-Since");
          time_t t = ims != NULL ? parse_http_date (ims) : -1;
          if (t >= 0 && mtime <= t)
            cond_status = 304;
        }
    }
  if (cond_status == 304)
    {
      close (fd);
      weft_http_request_respond (req, 304, NULL, NULL, 0);
      return;
    }
  if (cond_status == 412)
    {
      close (fd);
      answer_status (req, 412);
      return;
    }

  guint64 size = (guint64) st.st_size, off = 0, len = size;
  /* Range is defined for GET only (§14.2): a HEAD gets the whole
   * answer's head, as its GET without Range would. */
  const char *range = strcmp (weft_http_request_get_method (req), "GET") == 0
                          ? weft_http_request_get_header (req, "Range")
                          : NULL;
  const char *if_range = weft_http_request_get_header (req, "If-Range");
  if (range != NULL && if_range != NULL && !if_range_holds (if_range, etag, st.st_mtim.tv_sec))
    range = NULL;
  int r = parse_range (range, size, &off, &len);
  if (r < 0)
    {
      close (fd);
      char cr[48];
      g_snprintf (cr, sizeof cr, "bytes */%" G_GUINT64_FORMAT, size);
      weft_http_request_add_response_header (req, "Content-Range", cr);
      answer_status (req, 416);
      return;
    }
  if (r > 0)
    {
      char cr[80];
      g_snprintf (cr, sizeof cr, "bytes %" G_GUINT64_FORMAT "-%" G_GUINT64_FORMAT "/%" G_GUINT64_FORMAT,
                  off, off + len - 1, size);
      weft_http_request_add_response_header (req, "Content-Range", cr);
    }
  weft_http_request_respond_file (req, r > 0 ? 206 : 200, type, fd, off, len);
}

/**
 * weft_http_server_add_directory:
 * @self: a server, not started yet
 * @url_prefix: where the files appear, such as "/" or "/static/"
 * @root: (type filename): the directory to serve
 * @error: return location for a #GError
 *
 * Serves the files under @root for GET and HEAD: a directory's
 * index.html, MIME types by extension, ETag and Last-Modified with the
 * conditional requests of RFC 9110 (If-Match and If-Unmodified-Since
 * answer 412, If-None-Match and If-Modified-Since 304; dates in all three
 * HTTP-date forms), single byte ranges for GET (206, 416; If-Range
 * honoured), bodies sent with sendfile. Nothing outside @root is ever
 * served: ".." segments (also percent-encoded) are refused and files are
 * opened with openat2(RESOLVE_BENEATH), so symlinks cannot lead out
 * either. Where openat2 is missing (Linux before 5.6), no symlink under
 * @root is followed at all. No directory listings. A file named as a
 * directory ("/a.txt/") is not found. In a process running as root
 * (which the kernel lets read anything), only what any user could read
 * is served, the file world-readable and the directories on its way
 * below @root world-searchable (anything else is 403), and no symlink is
 * followed.
 *
 * A directory named without its trailing slash ("/static/sub", and the
 * mount point "/static" itself when @url_prefix is "/static/") is
 * answered 301 Moved Permanently, as nginx and Apache do, with a
 * relative `Location` (RFC 9110 §10.2.2): the path's segments as sent,
 * percent-escapes kept, empty and "." segments left out, then "/" and the
 * query if there was one ("/static/s%75b?x" goes to "/static/s%75b/?x").
 * The body is a few bytes, none for HEAD. Only a directory the handler
 * would serve from is redirected, under the rules above (no "..", no
 * symlink out of @root; as root, one not world-searchable is 403);
 * anything else keeps its answer, 404 for a file or a missing name. A
 * path that begins with an empty segment ("//evil.com", also after "."
 * segments) is 404 rather than redirected: "Location: //evil.com/" would
 * send a browser to another host.
 *
 * For a @url_prefix ending in "/" (other than "/"), the mount point
 * without its slash gets a GET route of its own, added with the prefix
 * route: a handler for exactly that path must be added before this call
 * to be reached, as one for any path below @url_prefix must.
 *
 * Returns: %TRUE on success; %FALSE if @root cannot be opened as a
 *   directory
 */
gboolean
weft_http_server_add_directory (WeftHttpServer *self, const gchar *url_prefix, const gchar *root,
                                GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (url_prefix != NULL && url_prefix[0] == '/', FALSE);
  g_autofree gchar *norm = weft__http_static_relative_path (url_prefix);
  g_return_val_if_fail (norm != NULL, FALSE); /* no "..", no bad escapes */
  g_return_val_if_fail (root != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  int fd = open (root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    {
      int err = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (err), "cannot open %s: %s", root,
                   g_strerror (err));
      return FALSE;
    }
  StaticDir *d = g_new0 (StaticDir, 1);
  d->root_fd = fd;
  d->prefix = g_strdup (url_prefix);
  d->norm_prefix = g_steal_pointer (&norm);
  gchar *pattern = g_strconcat (url_prefix, "*", NULL);
  weft_http_server_add_handler (self, "GET", pattern, serve, d, static_dir_free);
  g_free (pattern);
  /* "/static/" then "*" never matches "/static" (the router wants the
   * slash before the star's part): the mount point gets an exact route
   * of its own, to the same handler, which redirects it to "/static/".
   * The first route frees @d; both go with the server. */
  gsize n = strlen (url_prefix);
  while (n > 1 && url_prefix[n - 1] == '/')
    n--;
  if (*d->norm_prefix != '\0' && n < strlen (url_prefix))
    {
      gchar *bare = g_strndup (url_prefix, n);
      weft_http_server_add_handler (self, "GET", bare, serve, d, NULL);
      g_free (bare);
    }
  return TRUE;
}
