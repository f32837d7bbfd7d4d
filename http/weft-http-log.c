/* weft-http-log.c: the access log, off the hot path.
 *
 * A finished request appends one line (the Combined Log Format plus the
 * latency in microseconds) to a shared buffer under a short lock; a
 * thread of the log's own writes the buffer out every 100 ms, or at once
 * when it passes 64 KiB, so no worker ever waits on the disk. If the disk
 * falls more than 4 MiB behind, lines are dropped and counted rather than
 * letting memory grow.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-http-private.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FLUSH_BYTES (64 * 1024)
#define MAX_BACKLOG (4 * 1024 * 1024)

struct _WeftHttpAccessLog {
  int fd;
  GThread *thread;
  pthread_mutex_t lock; /* pthread, not GMutex: visible to TSan */
  pthread_cond_t cond;  /* on CLOCK_MONOTONIC */
  GString *buf;    /* HOLDS: lock */
  gboolean quit;   /* HOLDS: lock */
  gboolean done;   /* HOLDS: lock; the thread wrote its last line */
  gboolean orphan; /* HOLDS: lock; freed by the thread when it is done */
  guint64 dropped; /* HOLDS: lock */
};

/* How long freeing the log waits for its last lines to be written. */
#define FREE_WAIT_US (2 * G_USEC_PER_SEC)

static void log_destroy (WeftHttpAccessLog *log);

static void
write_all (int fd, const char *p, gsize n)
{
  while (n > 0)
    {
      ssize_t w = write (fd, p, n);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return; /* a log that cannot be written is not the server's failure */
      p += w;
      n -= (gsize) w;
    }
}

static gpointer
log_thread (gpointer data)
{
  WeftHttpAccessLog *log = data;
  GString *out = g_string_new (NULL);
  pthread_mutex_lock (&log->lock);
  for (;;)
    {
      if (log->buf->len < FLUSH_BYTES && !log->quit)
        {
          struct timespec ts;
          clock_gettime (CLOCK_MONOTONIC, &ts);
          ts.tv_nsec += 100 * 1000 * 1000;
          if (ts.tv_nsec >= 1000000000)
            {
              ts.tv_sec++;
              ts.tv_nsec -= 1000000000;
            }
          pthread_cond_timedwait (&log->cond, &log->lock, &ts);
        }
      GString *t = log->buf;
      log->buf = out;
      out = t;
      gboolean quit = log->quit;
      pthread_mutex_unlock (&log->lock);
      write_all (log->fd, out->str, out->len);
      g_string_truncate (out, 0);
      pthread_mutex_lock (&log->lock);
      if (quit && log->buf->len == 0)
        break;
    }
  log->done = TRUE;
  gboolean orphan = log->orphan;
  pthread_cond_broadcast (&log->cond);
  pthread_mutex_unlock (&log->lock);
  g_string_free (out, TRUE);
  if (orphan)
    log_destroy (log);
  return NULL;
}

WeftHttpAccessLog *
weft_http_access_log_new (int fd)
{
  WeftHttpAccessLog *log = g_new0 (WeftHttpAccessLog, 1);
  log->fd = fd;
  pthread_mutex_init (&log->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&log->cond, &attr);
  pthread_condattr_destroy (&attr);
  log->buf = g_string_sized_new (FLUSH_BYTES);
  log->thread = g_thread_new ("weft-access-log", log_thread, log);
  return log;
}

/* Freeing waits for the last lines, but not for ever: a write blocked
 * on a pipe nobody reads (a log on standard error, piped) held the
 * server's unref, so a shutdown never ended. Then the thread, once its
 * write returns, frees the log itself. */
void
weft_http_access_log_free (WeftHttpAccessLog *log)
{
  pthread_mutex_lock (&log->lock);
  log->quit = TRUE;
  pthread_cond_broadcast (&log->cond);
  gint64 end = g_get_monotonic_time () + FREE_WAIT_US;
  while (!log->done && g_get_monotonic_time () < end)
    {
      struct timespec ts = { end / G_USEC_PER_SEC, (end % G_USEC_PER_SEC) * 1000 };
      pthread_cond_timedwait (&log->cond, &log->lock, &ts);
    }
  if (!log->done)
    {
      /* (The thread may free the log as soon as the lock is let go.) */
      GThread *thread = log->thread;
      log->orphan = TRUE;
      pthread_mutex_unlock (&log->lock);
      g_thread_unref (thread);
      return;
    }
  pthread_mutex_unlock (&log->lock);
  g_thread_join (log->thread);
  log_destroy (log);
}

static void
log_destroy (WeftHttpAccessLog *log)
{
  if (log->dropped > 0)
    {
      char line[96];
      int n = g_snprintf (line, sizeof line, "# weft: %" G_GUINT64_FORMAT
                          " access log lines dropped (disk too slow)\n", log->dropped);
      write_all (log->fd, line, (gsize) n);
    }
  close (log->fd);
  g_string_free (log->buf, TRUE);
  pthread_mutex_destroy (&log->lock);
  pthread_cond_destroy (&log->cond);
  g_free (log);
}

/* A header value for the log: quotes, backslashes, controls and bytes
 * from 0x7f up escaped (as nginx does): raw, UTF-8 C1 controls such as
 * CSI (c2 9b) would reach the terminal of whoever reads the log. */
static void
append_quoted (GString *s, const char *v)
{
  g_string_append_c (s, '"');
  if (v == NULL)
    g_string_append_c (s, '-');
  else
    for (const unsigned char *p = (const unsigned char *) v; *p != '\0'; p++)
      {
        if (*p == '"' || *p == '\\')
          g_string_append_printf (s, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
          g_string_append_printf (s, "\\x%02x", *p);
        else
          g_string_append_c (s, (char) *p);
      }
  g_string_append_c (s, '"');
}

static const char *
peer_of (HttpConn *hc)
{
  return weft__connection_peer_text (hc->conn);
}

/* On the request's context, once its answer is queued whole. */
void
weft_http_access_log_add (WeftHttpAccessLog *log, WeftHttpRequest *req)
{
  GString *line = g_string_sized_new (200);
  time_t now = time (NULL);
  struct tm tm;
  gmtime_r (&now, &tm);
  /* The Common Log Format's months are English: strftime's %b follows
   * LC_TIME, which a GTK application sets from the user's locale. */
  static const char months[][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
  char when[40];
  g_snprintf (when, sizeof when, "%02d/%s/%04d:%02d:%02d:%02d +0000", tm.tm_mday,
              months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  g_string_append_printf (line, "%s - - [%s] ", peer_of (req->hc), when);
  if (req->head != NULL)
    {
      GString *rl = g_string_new (req->method);
      g_string_append_printf (rl, " %s%s%s HTTP/1.%u", req->path, req->query[0] ? "?" : "",
                              req->query, req->minor);
      append_quoted (line, rl->str);
      g_string_free (rl, TRUE);
    }
  else
    append_quoted (line, NULL); /* no head: a request refused while parsing */
  g_string_append_printf (line, " %u %" G_GUINT64_FORMAT " ", req->status, req->bytes_out);
  append_quoted (line, req->head != NULL ? weft_http_request_get_header (req, "Referer") : NULL);
  g_string_append_c (line, ' ');
  append_quoted (line, req->head != NULL ? weft_http_request_get_header (req, "User-Agent") : NULL);
  g_string_append_printf (line, " %" G_GINT64_FORMAT "\n", g_get_monotonic_time () - req->start_us);

  pthread_mutex_lock (&log->lock);
  if (log->buf->len + line->len > MAX_BACKLOG)
    log->dropped++;
  else
    {
      g_string_append_len (log->buf, line->str, (gssize) line->len);
      if (log->buf->len >= FLUSH_BYTES)
        pthread_cond_signal (&log->cond);
    }
  pthread_mutex_unlock (&log->lock);
  g_string_free (line, TRUE);
}

/**
 * weft_http_server_set_access_log:
 * @self: a server, not started yet
 * @path: (type filename) (nullable): a file to append to, "-" for standard
 *   error, or %NULL to turn the log off (the default)
 * @error: return location for a #GError
 *
 * Logs every answered request, one line each in the Combined Log Format
 * followed by the time from the request's head to its answer in
 * microseconds. Lines are written by a thread of the log's own, so
 * serving never waits on the disk. When the server is freed, the lines
 * not yet written are waited for at most 2 s; a log that takes none in
 * that time (a pipe nobody reads) is left to that thread, which writes
 * them and closes the file once the log takes them.
 *
 * Returns: %TRUE on success; %FALSE if the file cannot be opened
 */
gboolean
weft_http_server_set_access_log (WeftHttpServer *self, const gchar *path, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  g_return_val_if_fail (!self->started, FALSE);
  int fd = -1;
  if (path != NULL && strcmp (path, "-") == 0)
    fd = dup (STDERR_FILENO);
  else if (path != NULL)
    fd = open (path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (path != NULL && fd < 0)
    {
      int e = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e), "cannot open access log %s: %s",
                   path, g_strerror (e));
      return FALSE;
    }
  if (self->log != NULL)
    weft_http_access_log_free (self->log);
  self->log = fd >= 0 ? weft_http_access_log_new (fd) : NULL;
  return TRUE;
}
