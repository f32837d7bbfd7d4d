/* weft-connect.c: outgoing connections. Names are resolved on a small
 * thread pool of our own, never on the engine's workers (getaddrinfo
 * blocks); each address is then tried in turn with a non-blocking connect
 * watched by the caller's context, all within one deadline.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "weft-connection-private.h"

#define RESOLVER_THREADS 4

typedef struct {
  gint refs;                /* (atomic) */
  WeftContext *ctx;
  gchar *host;
  guint16 port;
  WeftTlsConfig *tls;
  WeftConnectFunc func;
  gpointer user_data;
  GDestroyNotify notify;
  gint64 deadline_us;       /* monotonic; 0: none. The timeout itself is
                             * added on ctx, which alone touches timeout_id */

  /* on ctx only, once resolved */
  struct addrinfo *addrs;
  struct addrinfo *next;
  int gai_error;
  int fd;
  int attempt_error;        /* errno of the attempt on fd; 0: connected */
  guint fd_id;
  guint timeout_id;
  gboolean finished;
  GError *last_error;
  WeftConnection *conn;     /* (owned) (nullable) in its TLS handshake */
} Connect;

static Connect *
connect_ref (Connect *c)
{
  g_atomic_int_inc (&c->refs);
  return c;
}

static void
connect_unref (gpointer data)
{
  Connect *c = data;
  if (!g_atomic_int_dec_and_test (&c->refs))
    return;
  if (!c->finished && c->notify != NULL)
    c->notify (c->user_data); /* the context refused our jobs */
  /* The context went with a connect in flight (its fd source and jobs
   * dropped): the socket is ours to close. */
  if (c->fd >= 0)
    close (c->fd);
  g_clear_pointer (&c->conn, weft_connection_unref);
  if (c->addrs != NULL)
    freeaddrinfo (c->addrs);
  if (c->tls != NULL)
    weft_tls_config_unref (c->tls);
  g_clear_error (&c->last_error);
  weft_context_unref (c->ctx);
  g_free (c->host);
  g_free (c);
}

static void
finish (Connect *c, WeftConnection *conn, GError *error)
{
  if (c->finished)
    {
      g_clear_error (&error);
      return;
    }
  c->finished = TRUE;
  if (c->timeout_id != 0)
    weft_context_remove (c->ctx, c->timeout_id);
  c->timeout_id = 0;
  /* Failing (the deadline) with a connection in its TLS handshake: nobody
   * will get it, so it goes now (its done callback, called by the abort,
   * finds this finished). Not when it is what failed: closed already, maybe
   * by its context's destruction on another thread. */
  WeftConnection *handshaking = c->conn;
  c->conn = NULL;
  if (handshaking != NULL && handshaking != conn && !weft_connection_is_closed (handshaking))
    weft_connection_abort (handshaking);
  if (c->fd_id != 0)
    weft_context_remove (c->ctx, c->fd_id);
  c->fd_id = 0;
  if (c->fd >= 0 && conn == NULL)
    close (c->fd);
  c->fd = -1;
  c->func (conn, error, c->user_data);
  if (c->notify != NULL)
    c->notify (c->user_data);
  g_clear_error (&error);
  if (handshaking != NULL)
    weft_connection_unref (handshaking);
}

static void try_next (Connect *c);

static void
tls_done (WeftConnection *conn, const GError *error, gpointer data)
{
  Connect *c = data;
  finish (c, conn, error != NULL ? g_error_copy (error) : NULL);
}

static void
connected (Connect *c)
{
  int fd = c->fd;
  c->fd = -1;
  GError *error = NULL;
  WeftConnection *conn = weft__connection_new (c->ctx, fd, &error);
  if (conn == NULL)
    {
      finish (c, NULL, error);
      return;
    }
  if (c->tls != NULL)
    {
      /* The deadline covers the handshake too: keep the timeout, and the
       * connection, which finish() aborts if it passes. */
      c->conn = conn;
      weft_connection_start_tls (conn, c->tls, c->host, tls_done, connect_ref (c),
                                 connect_unref);
      return;
    }
  finish (c, conn, NULL);
  weft_connection_unref (conn);
}

/* Runs after on_connect_fd() returned, so its source is gone and the fd
 * may be closed or handed to a connection. */
static void
attempt_done_job (gpointer data)
{
  Connect *c = data;
  if (c->finished || c->fd < 0)
    return;
  int err = c->attempt_error;
  if (err == 0)
    {
      connected (c);
      return;
    }
  g_clear_error (&c->last_error);
  c->last_error = g_error_new (G_IO_ERROR, g_io_error_from_errno (err), "connect to %s:%u: %s",
                               c->host, c->port, g_strerror (err));
  close (c->fd);
  c->fd = -1;
  try_next (c);
}

static gboolean
on_connect_fd (gint fd, GIOCondition condition, gpointer data)
{
  Connect *c = data;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt (fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
    err = errno;
  if (err == 0 && (condition & (G_IO_ERR | G_IO_HUP)))
    err = ECONNREFUSED;
  c->attempt_error = err;
  c->fd_id = 0;
  weft__context_post_continuation (c->ctx, attempt_done_job, connect_ref (c), connect_unref);
  return G_SOURCE_REMOVE;
}

static void
try_next (Connect *c)
{
  while (c->next != NULL && !c->finished)
    {
      struct addrinfo *ai = c->next;
      c->next = ai->ai_next;
      int fd = socket (ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0)
        {
          int err = errno;
          g_clear_error (&c->last_error);
          c->last_error = g_error_new (G_IO_ERROR, g_io_error_from_errno (err), "socket: %s",
                                       g_strerror (err));
          continue;
        }
      int r;
      do
        r = connect (fd, ai->ai_addr, ai->ai_addrlen);
      while (r < 0 && errno == EINTR);
      int err = r < 0 ? errno : 0;
      if (r < 0 && err != EINPROGRESS)
        {
          close (fd);
          g_clear_error (&c->last_error);
          c->last_error = g_error_new (G_IO_ERROR, g_io_error_from_errno (err),
                                       "connect to %s:%u: %s", c->host, c->port,
                                       g_strerror (err));
          continue;
        }
      c->fd = fd;
      /* Connected at once (Unix-domain, sometimes loopback) or pending:
       * either way writability says when. */
      GError *error = NULL;
      c->fd_id = weft_context_add_fd (c->ctx, fd, G_IO_OUT, on_connect_fd, connect_ref (c),
                                      connect_unref, &error);
      if (c->fd_id == 0)
        {
          close (fd);
          c->fd = -1;
          finish (c, NULL, error);
        }
      return;
    }
  if (!c->finished)
    {
      GError *error = c->last_error;
      c->last_error = NULL;
      if (error == NULL)
        error = g_error_new (G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "%s has no usable address",
                             c->host);
      finish (c, NULL, error);
    }
}

static gboolean
on_timeout (gpointer data)
{
  Connect *c = data;
  c->timeout_id = 0;
  finish (c, NULL, g_error_new (G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                                "connecting to %s:%u timed out", c->host, c->port));
  return G_SOURCE_REMOVE;
}

/* Back on the context with the addresses. */
static void
resolved_job (gpointer data)
{
  Connect *c = data;
  if (c->finished)
    return;
  if (c->gai_error != 0)
    {
      finish (c, NULL, g_error_new (G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "cannot resolve %s: %s",
                                    c->host, gai_strerror (c->gai_error)));
      return;
    }
  c->next = c->addrs;
  try_next (c);
}

static void
resolve (gpointer data, gpointer unused)
{
  Connect *c = data;
  struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                            .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG };
  gchar port[8];
  g_snprintf (port, sizeof port, "%u", c->port);
  c->gai_error = getaddrinfo (c->host, port, &hints, &c->addrs);
  /* Our reference goes to the job, which may drop the last one of the
   * context before the post returns: hold the context meanwhile. */
  WeftContext *ctx = weft_context_ref (c->ctx);
  weft__context_post_continuation (ctx, resolved_job, c, connect_unref);
  weft_context_unref (ctx);
}

/* The resolver pool: up to RESOLVER_THREADS threads that live while there
 * is work. pthread primitives rather than GThreadPool so that the thread
 * sanitizer sees the hand-off. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cond = PTHREAD_COND_INITIALIZER;
static GQueue pool_queue = G_QUEUE_INIT; /* HOLDS: pool_lock; Connect* */
static guint pool_threads;               /* HOLDS: pool_lock */
static guint pool_idle;                  /* HOLDS: pool_lock */

static void *
resolver_main (void *data)
{
  pthread_mutex_lock (&pool_lock);
  for (;;)
    {
      Connect *c = g_queue_pop_head (&pool_queue);
      if (c == NULL)
        {
          /* Linger a little for the next lookup, then go. */
          struct timespec until;
          clock_gettime (CLOCK_REALTIME, &until);
          until.tv_sec += 5;
          pool_idle++;
          int r = pthread_cond_timedwait (&pool_cond, &pool_lock, &until);
          pool_idle--;
          if (r != 0 && g_queue_is_empty (&pool_queue))
            break;
          continue;
        }
      pthread_mutex_unlock (&pool_lock);
      resolve (c, NULL);
      pthread_mutex_lock (&pool_lock);
    }
  pool_threads--;
  pthread_mutex_unlock (&pool_lock);
  return NULL;
}

static void
resolver_push (Connect *c)
{
  pthread_mutex_lock (&pool_lock);
  g_queue_push_tail (&pool_queue, c);
  if (pool_idle > 0)
    pthread_cond_signal (&pool_cond);
  else if (pool_threads < RESOLVER_THREADS)
    {
      pthread_t t;
      pthread_attr_t attr;
      pthread_attr_init (&attr);
      pthread_attr_setdetachstate (&attr, PTHREAD_CREATE_DETACHED);
      if (pthread_create (&t, &attr, resolver_main, NULL) == 0)
        pool_threads++;
      pthread_attr_destroy (&attr);
    }
  pthread_mutex_unlock (&pool_lock);
}

static void
start_job (gpointer data)
{
  Connect *c = data;
  if (c->finished)
    return;
  if (c->deadline_us != 0)
    {
      gint64 left_us = MAX (c->deadline_us - g_get_monotonic_time (), 0);
      c->timeout_id = weft_context_add_timeout (c->ctx, (guint) ((left_us + 999) / 1000),
                                                on_timeout, connect_ref (c), connect_unref);
    }
  resolver_push (connect_ref (c));
}

/**
 * weft_connection_connect_async:
 * @ctx: the context that will own the connection and run @func
 * @host: a host name or numeric address
 * @port: the port
 * @timeout_ms: give up after this long, resolution, connecting and the TLS
 *   handshake included (0: no limit)
 * @tls: (nullable): a client configuration to start TLS with (its
 *   certificate is checked against @host)
 * @func: (scope notified) (closure user_data) (destroy notify): called
 *   once on @ctx with the connection or the error
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data after @func ran
 *
 * Opens a TCP connection. Names are resolved off the engine's workers;
 * every address is tried in order. Any thread.
 */
void
weft_connection_connect_async (WeftContext *ctx, const gchar *host, guint16 port,
                               guint timeout_ms, WeftTlsConfig *tls, WeftConnectFunc func,
                               gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (ctx != NULL);
  g_return_if_fail (host != NULL);
  g_return_if_fail (func != NULL);
  g_return_if_fail (tls == NULL || !weft__tls_config_is_server (tls));

  Connect *c = g_new0 (Connect, 1);
  c->refs = 1;
  c->ctx = weft_context_ref (ctx);
  c->host = g_strdup (host);
  c->port = port;
  c->tls = tls != NULL ? weft_tls_config_ref (tls) : NULL;
  c->func = func;
  c->user_data = user_data;
  c->notify = notify;
  c->fd = -1;
  if (timeout_ms != 0)
    c->deadline_us = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  /* Start from the context, so the pool's answer cannot overtake it. */
  weft_context_post (ctx, start_job, c, connect_unref);
}
