/* weft-listener.c: listening sockets that give every accepted connection a
 * context of its own.
 *
 * The listener has a context of its own too, which owns the listening
 * sockets: accepting runs there, in batches, and each accepted socket gets
 * a new context that the engine's run queue hands to whichever worker is
 * free, so connections spread over the workers. The application's callback
 * runs on the new context, not on the listener's.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "weft-connection-private.h"
#include "weft-listener.h"

G_DEFINE_BOXED_TYPE (WeftListener, weft_listener, weft_listener_ref, weft_listener_unref)

#define ACCEPT_BATCH 64
#define DEFAULT_BACKLOG 4096
#define FD_EXHAUSTED_BACKOFF_MS 100

typedef struct {
  WeftListener *listener;
  int fd;
  guint id;                 /* fd source on the listener's context; 0 if none */
  gchar *unix_path;         /* unlinked when closed (not for adopted fds) */
} ListenSocket;

struct _WeftListener {
  gint ref_count;           /* (atomic) public references */
  gint internal_refs;       /* (atomic) 1 while ref_count > 0, +1 per live connection */
  atomic_bool refusing;     /* the last public reference is gone: hand nothing over */
  WeftEngine *engine;       /* borrowed; ctx keeps it alive */
  WeftContext *ctx;

  WeftListenerFunc func;
  gpointer user_data;
  GDestroyNotify notify;

  pthread_mutex_t lock;     /* sockets, settings, started, stopping */
  GPtrArray *sockets;       /* ListenSocket* */
  gboolean reuse_port;
  gint backlog;
  guint max_connections;    /* 0: no limit */
  gsize conn_data_size;     /* weft__listener_set_connection_data_size() */
  WeftTlsConfig *tls;
  gboolean started;
  gboolean stopping;

  /* listener context only */
  gboolean paused_at_limit;
  gboolean paused_no_fds;
  guint backoff_id;
  gint64 last_fd_warning;
  guint deadline_id;
  WeftListenerDoneFunc done_func;
  gpointer done_data;
  GDestroyNotify done_notify;
  gboolean done_called;
  gboolean deadline_passed;

  atomic_uint n_live;
  _Atomic guint64 n_accepted;
  _Atomic guint64 n_tls_failed;
};

static void listener_internal_unref (WeftListener *self);
static void listener_unref_internal_notify (gpointer data);
static void stop_accepting (WeftListener *self);

/* ---- lifetime ---------------------------------------------------------- */

/**
 * weft_listener_new:
 * @engine: the engine that runs the listener and its connections
 * @func: (scope notified) (closure user_data) (destroy notify): called on a
 *   new context for each accepted connection
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data when the listener is finalized
 *
 * Creates a listener without sockets. Add them with
 * weft_listener_add_tcp() and friends, then weft_listener_start().
 *
 * From the last weft_listener_unref() on, a connection accepted before it
 * that was not handed over yet (its job was still queued, or its TLS
 * handshake was going on) is aborted instead of passed to @func. A
 * hand-over on another worker that had already looked may still call
 * @func, even just after weft_listener_unref() returned (it does not wait,
 * so it may be called from @func itself): keep @user_data valid until
 * @notify, which runs after every call has returned and every connection
 * the listener accepted has closed, once.
 *
 * A connection that ends before it is handed over (its peer resets it, or
 * shuts its side down without sending a byte) is closed and never passed
 * to @func: there is nothing to answer on it.
 *
 * Returns: (transfer full): a new listener
 */
WeftListener *
weft_listener_new (WeftEngine *engine, WeftListenerFunc func, gpointer user_data,
                   GDestroyNotify notify)
{
  g_return_val_if_fail (engine != NULL, NULL);
  g_return_val_if_fail (func != NULL, NULL);

  WeftListener *self = g_new0 (WeftListener, 1);
  self->ref_count = 1;
  self->internal_refs = 1;
  /* Borrowed: the context keeps the engine's memory alive, and a public
   * reference here would make some worker drop the engine's last one. */
  self->engine = engine;
  self->ctx = weft_context_new (engine);
  self->func = func;
  self->user_data = user_data;
  self->notify = notify;
  pthread_mutex_init (&self->lock, NULL);
  self->sockets = g_ptr_array_new ();
  self->backlog = DEFAULT_BACKLOG;
  return self;
}

/**
 * weft_listener_ref:
 * @self: a listener
 *
 * Takes a reference on @self; drop it with weft_listener_unref(). Any
 * thread.
 *
 * Returns: (transfer full): @self
 */
WeftListener *
weft_listener_ref (WeftListener *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_atomic_int_inc (&self->ref_count);
  return self;
}

static void
close_socket (ListenSocket *ls)
{
  if (ls->fd >= 0)
    {
      close (ls->fd);
      ls->fd = -1;
    }
  if (ls->unix_path != NULL)
    {
      unlink (ls->unix_path);
      g_clear_pointer (&ls->unix_path, g_free);
    }
}

static void
listener_internal_unref (WeftListener *self)
{
  if (!g_atomic_int_dec_and_test (&self->internal_refs))
    return;
  for (guint i = 0; i < self->sockets->len; i++)
    {
      ListenSocket *ls = self->sockets->pdata[i];
      /* Still watched if the stop-accepting job never ran (its context
       * was closed first, by the engine's last unref): out of epoll before
       * the close, or a number reused meanwhile would lose its watcher.
       * (On a closed context the close detached it already.) */
      if (ls->id != 0)
        {
          weft_context_remove (self->ctx, ls->id);
          ls->id = 0;
        }
      close_socket (ls);
      g_free (ls);
    }
  g_ptr_array_unref (self->sockets);
  if (self->tls != NULL)
    weft_tls_config_unref (self->tls);
  if (self->done_notify != NULL)
    self->done_notify (self->done_data);
  if (self->notify != NULL)
    self->notify (self->user_data);
  weft_context_unref (self->ctx);
  pthread_mutex_destroy (&self->lock);
  g_free (self);
}

static void
stop_accepting_job (gpointer data)
{
  stop_accepting (data);
}

/**
 * weft_listener_unref:
 * @self: (nullable) (transfer full): a listener
 *
 * Drops a reference. The last one stops accepting and closes the
 * listening sockets; connections already handed to the listener's function
 * go on until they close, and those not handed over yet are aborted (see
 * weft_listener_new()). Any thread.
 */
void
weft_listener_unref (WeftListener *self)
{
  if (self == NULL)
    return;
  if (!g_atomic_int_dec_and_test (&self->ref_count))
    return;
  /* First of all: from here on hand_over() refuses (sequentially
   * consistent with its load: a hand-over that looks after this store
   * refuses; one that looked before goes ahead, and the notify waits for
   * it). */
  atomic_store (&self->refusing, TRUE);
  /* Close the sockets on the listener's context, so no accept callback is
   * running on them. The job holds the internal reference. */
  pthread_mutex_lock (&self->lock);
  gboolean started = self->started;
  self->stopping = TRUE;
  pthread_mutex_unlock (&self->lock);
  if (started)
    {
      /* If the post is refused (the engine is gone), its notify still
       * drops the reference. The job may free the listener and its
       * context before the post returns: hold the context meanwhile. */
      WeftContext *ctx = weft_context_ref (self->ctx);
      weft__context_post_continuation (ctx, stop_accepting_job, self,
                                       listener_unref_internal_notify);
      weft_context_unref (ctx);
      return;
    }
  weft_context_destroy (self->ctx);
  listener_internal_unref (self);
}

/* ---- settings ---------------------------------------------------------- */

/**
 * weft_listener_set_reuse_port:
 * @self: a listener
 * @reuse_port: set SO_REUSEPORT on sockets added from now on, so that
 *   several processes (or listeners) can share a port and the kernel
 *   spreads connections among them
 *
 * Chooses whether TCP sockets created by later weft_listener_add_tcp()
 * and weft_listener_add_address() calls set SO_REUSEPORT (default
 * %FALSE); sockets already added, Unix sockets and adopted ones are not
 * affected. Any thread.
 */
void
weft_listener_set_reuse_port (WeftListener *self, gboolean reuse_port)
{
  g_return_if_fail (self != NULL);
  pthread_mutex_lock (&self->lock);
  self->reuse_port = reuse_port;
  pthread_mutex_unlock (&self->lock);
}

/**
 * weft_listener_set_backlog:
 * @self: a listener
 * @backlog: the listen() backlog for sockets added from now on (default
 *   4096; the kernel caps it at net.core.somaxconn)
 *
 * Sets the backlog of the listening sockets added after this call. Call it
 * before weft_listener_add_tcp() and friends; adopted sockets
 * (weft_listener_add_fd()) keep their own. Any thread.
 */
void
weft_listener_set_backlog (WeftListener *self, gint backlog)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (backlog > 0);
  pthread_mutex_lock (&self->lock);
  self->backlog = backlog;
  pthread_mutex_unlock (&self->lock);
}

static void resume_job (gpointer data);
static void listener_unref_internal_notify (gpointer data);

/**
 * weft_listener_set_max_connections:
 * @self: a listener
 * @max_connections: stop accepting while this many connections are live,
 *   resume below (0, the default: no limit). Waiting clients stay in the
 *   kernel's accept queue.
 *
 * Bounds the live connections (those accepted and not yet closed, TLS
 * handshakes included). May be changed while the listener runs: raising
 * (or removing) the limit while accepting is paused at the old one
 * resumes accepting. Any thread.
 */
void
weft_listener_set_max_connections (WeftListener *self, guint max_connections)
{
  g_return_if_fail (self != NULL);
  pthread_mutex_lock (&self->lock);
  self->max_connections = max_connections;
  gboolean started = self->started;
  pthread_mutex_unlock (&self->lock);
  if (started)
    {
      /* The pause state lives on the listener's context: look there. */
      g_atomic_int_inc (&self->internal_refs);
      weft__context_post_continuation (self->ctx, resume_job, self, listener_unref_internal_notify);
    }
}

/**
 * weft_listener_set_tls:
 * @self: a listener, not started yet
 * @tls: (nullable): a server configuration: every accepted connection
 *   does the TLS handshake before the listener's callback sees it, and a
 *   failed handshake just closes that connection
 *
 * Sets, replaces or (with %NULL) removes the TLS configuration the
 * listener takes a reference on. Only before weft_listener_start(); a
 * started listener logs a critical warning and keeps its configuration.
 * Failed handshakes are counted by weft_listener_get_n_tls_failed().
 */
void
weft_listener_set_tls (WeftListener *self, WeftTlsConfig *tls)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (tls == NULL || weft__tls_config_is_server (tls));
  pthread_mutex_lock (&self->lock);
  if (self->started)
    {
      pthread_mutex_unlock (&self->lock);
      g_critical ("weft_listener_set_tls: the listener is already started");
      return;
    }
  if (tls != NULL)
    weft_tls_config_ref (tls);
  if (self->tls != NULL)
    weft_tls_config_unref (self->tls);
  self->tls = tls;
  pthread_mutex_unlock (&self->lock);
}

/* ---- accepting --------------------------------------------------------- */

static void
set_accepting (WeftListener *self, gboolean on)
{
  for (guint i = 0; i < self->sockets->len; i++)
    {
      ListenSocket *ls = self->sockets->pdata[i];
      if (ls->id != 0)
        weft__context_set_fd_interest (self->ctx, ls->id, on ? G_IO_IN : 0, NULL);
    }
}

static void
update_accepting (WeftListener *self)
{
  pthread_mutex_lock (&self->lock);
  gboolean stopping = self->stopping;
  pthread_mutex_unlock (&self->lock);
  set_accepting (self, !stopping && !self->paused_at_limit && !self->paused_no_fds);
}

static void
resume_job (gpointer data)
{
  WeftListener *self = data;
  pthread_mutex_lock (&self->lock);
  guint max = self->max_connections;
  pthread_mutex_unlock (&self->lock);
  if (self->paused_at_limit && (max == 0 || atomic_load (&self->n_live) < max))
    {
      self->paused_at_limit = FALSE;
      update_accepting (self);
    }
}

static void
call_done (WeftListener *self)
{
  if (self->done_called || self->done_func == NULL)
    return;
  self->done_called = TRUE;
  if (self->deadline_id != 0)
    {
      weft_context_remove (self->ctx, self->deadline_id);
      self->deadline_id = 0;
    }
  self->done_func (self, !self->deadline_passed, self->done_data);
}

static void
drained_job (gpointer data)
{
  WeftListener *self = data;
  if (atomic_load (&self->n_live) == 0)
    call_done (self);
}

static void
listener_unref_internal_notify (gpointer data)
{
  listener_internal_unref (data);
}

void (*_Atomic weft__listener_test_closing_hook) (void);

/* On the connection's context, once it is closed. */
void
weft__listener_connection_closed (WeftListener *self, WeftConnection *conn)
{
  /* The count drops under the lock that shutdown sets stopping under:
   * either shutdown then sees this connection gone, or this close sees
   * stopping and posts the drained job. Apart, a close that read
   * stopping == FALSE and counted down only after shutdown had looked at
   * the count left nobody to call the done callback. */
  pthread_mutex_lock (&self->lock);
  guint max = self->max_connections;
  gboolean stopping = self->stopping;
  void (*hook) (void) = atomic_load_explicit (&weft__listener_test_closing_hook,
                                              memory_order_acquire);
  if (G_UNLIKELY (hook != NULL))
    hook ();
  guint before = atomic_fetch_sub (&self->n_live, 1);
  pthread_mutex_unlock (&self->lock);
  if (max != 0 && before == max)
    {
      g_atomic_int_inc (&self->internal_refs);
      weft__context_post_continuation (self->ctx, resume_job, self, listener_unref_internal_notify);
    }
  if (stopping && before == 1)
    {
      g_atomic_int_inc (&self->internal_refs);
      weft__context_post_continuation (self->ctx, drained_job, self,
                                       listener_unref_internal_notify);
    }
  listener_internal_unref (self); /* the connection's reference */
}

/* Whether the listener's last public reference is gone: then a connection
 * not handed over yet is aborted. (A hand-over that looked just before the
 * flag was set still calls @func, possibly after the unref returned: the
 * user_data stays valid until the notify.) */
static gboolean
refuse (WeftListener *self, WeftConnection *conn)
{
  if (!atomic_load (&self->refusing))
    return FALSE;
  weft_connection_abort (conn);
  return TRUE;
}

static void
hand_over (WeftListener *self, WeftConnection *conn)
{
  if (refuse (self, conn))
    return;
  self->func (self, conn, self->user_data);
  /* Nobody is reading or listening: nothing could ever happen on it. */
  if (!weft_connection_is_closed (conn) && !weft__connection_has_callbacks (conn))
    weft_connection_close (conn);
}

static void
handshake_done (WeftConnection *conn, const GError *error, gpointer data)
{
  WeftListener *self = data;
  if (conn == NULL)
    {
      atomic_fetch_add_explicit (&self->n_tls_failed, 1, memory_order_relaxed);
      g_info ("TLS handshake failed, connection closed: %s", error->message);
      return;
    }
  hand_over (self, conn);
}

typedef struct {
  WeftListener *listener;
  WeftConnection *conn;
} Accepted;

static void
accepted_free (gpointer data)
{
  Accepted *a = data;
  weft_connection_unref (a->conn);
  listener_internal_unref (a->listener);
  g_free (a);
}

static void
accepted_job (gpointer data)
{
  Accepted *a = data;
  WeftListener *self = a->listener;
  if (weft_connection_is_closed (a->conn) || refuse (self, a->conn))
    return;
  if (self->tls != NULL)
    {
      g_atomic_int_inc (&self->internal_refs); /* for handshake_done() */
      weft_connection_start_tls (a->conn, self->tls, NULL, handshake_done, self,
                                 listener_unref_internal_notify);
    }
  else
    hand_over (self, a->conn);
}

typedef struct {
  WeftListener *listener;
  WeftConnectionFilter keep;
  gpointer keep_data;
  GPtrArray *out;
} LiveCollect;

static void
collect_live (gpointer tail, gpointer data)
{
  LiveCollect *c = data;
  WeftConnection *conn = weft__connection_ref_tail (tail, c->listener, c->keep, c->keep_data);
  if (conn != NULL)
    g_ptr_array_add (c->out, conn);
}

GPtrArray *
weft__listener_live_connections_where (WeftListener *self, WeftConnectionFilter keep,
                                       gpointer data)
{
  LiveCollect c = { self, keep, data,
                    g_ptr_array_new_with_free_func ((GDestroyNotify) weft_connection_unref) };
  weft__engine_foreach_tail (self->engine, collect_live, &c);
  return c.out;
}

GPtrArray *
weft__listener_live_connections (WeftListener *self)
{
  return weft__listener_live_connections_where (self, NULL, NULL);
}

void
weft__listener_set_connection_data_size (WeftListener *self, gsize size)
{
  pthread_mutex_lock (&self->lock);
  g_warn_if_fail (!self->started);
  self->conn_data_size = size;
  pthread_mutex_unlock (&self->lock);
}

/* One allocation per connection: its context, the connection, its fd
 * source and the owner's data (weft__connection_new_in_tail()). */
static void
take_connection (WeftListener *self, int fd)
{
  gsize data_size = self->conn_data_size; /* fixed once started */
  WeftContext *ctx =
      weft__context_new_with_tail (self->engine, weft__connection_tail_size (data_size));
  GError *error = NULL;
  WeftConnection *conn = weft__connection_new_in_tail (ctx, fd, data_size, &error);
  if (conn == NULL)
    {
      g_warning ("accepted connection dropped: %s", error->message);
      g_error_free (error);
      weft_context_destroy (ctx);
      weft_context_unref (ctx);
      return;
    }
  atomic_fetch_add (&self->n_live, 1);
  atomic_fetch_add_explicit (&self->n_accepted, 1, memory_order_relaxed);
  g_atomic_int_inc (&self->internal_refs); /* dropped by weft__listener_connection_closed() */
  weft__connection_set_close_listener (conn, self);
  /* Found from now on by weft__listener_live_connections(), without a set
   * of live connections (a hash table entry per idle connection). */
  weft__context_mark_tail_conn (ctx);

  Accepted *a = g_new (Accepted, 1);
  a->listener = self;
  g_atomic_int_inc (&self->internal_refs);
  a->conn = conn; /* our reference goes to the job */
  weft__context_post_continuation (ctx, accepted_job, a, accepted_free);
  weft_context_dispatch (ctx);
  weft_context_unref (ctx); /* the connection keeps it */
}

static gboolean
backoff_over (gpointer data)
{
  WeftListener *self = data;
  self->backoff_id = 0;
  self->paused_no_fds = FALSE;
  update_accepting (self);
  return G_SOURCE_REMOVE;
}

static gboolean
on_listen_fd (gint fd, GIOCondition condition, gpointer data)
{
  ListenSocket *ls = data;
  WeftListener *self = ls->listener;

  pthread_mutex_lock (&self->lock);
  guint max = self->max_connections;
  gboolean stopping = self->stopping;
  pthread_mutex_unlock (&self->lock);
  if (stopping)
    return G_SOURCE_CONTINUE;

  for (guint i = 0; i < ACCEPT_BATCH; i++)
    {
      if (max != 0 && atomic_load (&self->n_live) >= max)
        {
          self->paused_at_limit = TRUE;
          update_accepting (self);
          /* A connection may have closed between the check and the pause. */
          if (atomic_load (&self->n_live) < max)
            {
              self->paused_at_limit = FALSE;
              update_accepting (self);
            }
          break;
        }
      int cfd = accept4 (fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (cfd >= 0)
        {
          take_connection (self, cfd);
          continue;
        }
      int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK)
        break;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO || err == EPERM)
        continue; /* that client is gone, or a firewall said no: next */
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
        {
          /* Out of descriptors or memory: retrying now would spin. Stop
           * polling the socket for a while; live connections go on and
           * free descriptors as they close. */
          gint64 now = g_get_monotonic_time ();
          if (now - self->last_fd_warning > 60 * G_USEC_PER_SEC || self->last_fd_warning == 0)
            {
              /* Once a minute at most: the condition may last. */
              self->last_fd_warning = now;
              g_warning ("accept: %s; pausing accepts for %d ms at a time", g_strerror (err),
                         FD_EXHAUSTED_BACKOFF_MS);
            }
          self->paused_no_fds = TRUE;
          update_accepting (self);
          if (self->backoff_id == 0)
            self->backoff_id = weft_context_add_timeout (self->ctx, FD_EXHAUSTED_BACKOFF_MS,
                                                         backoff_over, self, NULL);
          break;
        }
      /* The socket itself failed (EINVAL once another holder of an adopted
       * socket shut it down): it stays readable or hung up, so watching it
       * on would spin. Stop, once; it is closed with the others. */
      g_warning ("accept on fd %d: %s; no longer accepting on it", fd, g_strerror (err));
      ls->id = 0;
      return G_SOURCE_REMOVE;
    }
  return G_SOURCE_CONTINUE;
}

/* ---- sockets ----------------------------------------------------------- */

static gboolean
set_error_errno (GError **error, int err, const char *what, const char *address)
{
  g_set_error (error, G_IO_ERROR, g_io_error_from_errno (err), "%s %s: %s", what, address,
               g_strerror (err));
  return FALSE;
}

static void
watch_socket (WeftListener *self, ListenSocket *ls)
{
  ls->id = weft_context_add_fd (self->ctx, ls->fd, G_IO_IN, on_listen_fd, ls, NULL, NULL);
  pthread_mutex_lock (&self->lock);
  gboolean stopping = self->stopping;
  pthread_mutex_unlock (&self->lock);
  if (ls->id != 0 && (self->paused_at_limit || self->paused_no_fds || stopping))
    weft__context_set_fd_interest (self->ctx, ls->id, 0, NULL);
}

/* Takes @fd (listening, non-blocking) into the listener. */
static void
add_socket (WeftListener *self, int fd, gchar *unix_path)
{
  ListenSocket *ls = g_new0 (ListenSocket, 1);
  ls->listener = self;
  ls->fd = fd;
  ls->unix_path = unix_path;
  pthread_mutex_lock (&self->lock);
  g_ptr_array_add (self->sockets, ls);
  gboolean started = self->started;
  pthread_mutex_unlock (&self->lock);
  if (started)
    watch_socket (self, ls);
}

/* A listening socket bound to @sa, not yet the listener's: -1 with @error
 * and *@err (the errno) set on failure. */
static int
open_listening (WeftListener *self, const struct sockaddr *sa, socklen_t len, gboolean v6only,
                const char *address, int *err, GError **error)
{
  int fd = socket (sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    {
      *err = errno;
      set_error_errno (error, *err, "socket for", address);
      return -1;
    }
  int one = 1;
  pthread_mutex_lock (&self->lock);
  gboolean reuse_port = self->reuse_port;
  int backlog = self->backlog;
  pthread_mutex_unlock (&self->lock);
  if (sa->sa_family != AF_UNIX)
    {
      setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (reuse_port && setsockopt (fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
        {
          *err = errno;
          close (fd);
          set_error_errno (error, *err, "SO_REUSEPORT on", address);
          return -1;
        }
    }
  if (sa->sa_family == AF_INET6)
    {
      int v = v6only;
      setsockopt (fd, IPPROTO_IPV6, IPV6_V6ONLY, &v, sizeof v);
    }
  if (bind (fd, sa, len) < 0 || listen (fd, backlog) < 0)
    {
      *err = errno;
      close (fd);
      set_error_errno (error, *err, "cannot listen on", address);
      return -1;
    }
  return fd;
}

static gboolean
bind_and_listen (WeftListener *self, const struct sockaddr *sa, socklen_t len,
                 gboolean v6only, const char *address, GError **error)
{
  int err;
  int fd = open_listening (self, sa, len, v6only, address, &err, error);
  if (fd < 0)
    return FALSE;
  gchar *path = NULL;
  if (sa->sa_family == AF_UNIX)
    path = g_strdup (((const struct sockaddr_un *) sa)->sun_path);
  add_socket (self, fd, path);
  return TRUE;
}

/* Tests only: resolves instead of getaddrinfo() when set; what it returns
 * is freed with freeaddrinfo(). */
int (*weft__listener_test_resolve) (const char *host, const char *port,
                                    const struct addrinfo *hints, struct addrinfo **res);

/* Whether a bind failed because this machine has no such address now (a
 * name's IPv6 address on a host without IPv6): the name's other addresses
 * may serve without it. Any other failure (in use, not permitted) means
 * the name is not served as asked. */
static gboolean
address_missing_here (int err)
{
  return err == EADDRNOTAVAIL || err == EAFNOSUPPORT;
}

/* The TCP port @fd is bound to; 0 for other sockets. */
static guint16
bound_port (int fd)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname (fd, (struct sockaddr *) &ss, &len) != 0)
    return 0;
  if (ss.ss_family == AF_INET)
    return ntohs (((struct sockaddr_in *) &ss)->sin_port);
  if (ss.ss_family == AF_INET6)
    return ntohs (((struct sockaddr_in6 *) &ss)->sin6_port);
  return 0;
}

/* Binds every address of @res, all or none: an address this machine does
 * not have is skipped, any other failure closes what this call bound. */
static gboolean
bind_all (WeftListener *self, struct addrinfo *res, guint16 port, const char *address,
          GError **error)
{
  GArray *fds = g_array_new (FALSE, FALSE, sizeof (int));
  GError *missing = NULL; /* the first address found missing */
  gboolean failed = FALSE;
  guint16 chosen = port;
  for (struct addrinfo *ai = res; ai != NULL && !failed; ai = ai->ai_next)
    {
      /* With port 0 and several addresses, use the port the first got. */
      if (ai->ai_family == AF_INET)
        ((struct sockaddr_in *) ai->ai_addr)->sin_port = htons (chosen);
      else if (ai->ai_family == AF_INET6)
        ((struct sockaddr_in6 *) ai->ai_addr)->sin6_port = htons (chosen);
      else
        continue;
      GError *one_error = NULL;
      int err = 0;
      int fd = open_listening (self, ai->ai_addr, ai->ai_addrlen, TRUE, address, &err, &one_error);
      if (fd >= 0)
        {
          g_array_append_val (fds, fd);
          if (chosen == 0)
            chosen = bound_port (fd);
        }
      else if (address_missing_here (err))
        {
          if (missing == NULL)
            missing = one_error;
          else
            g_error_free (one_error);
        }
      else
        {
          g_propagate_error (error, one_error);
          failed = TRUE;
        }
    }
  if (!failed && fds->len == 0)
    {
      failed = TRUE;
      if (missing != NULL)
        g_propagate_error (error, g_steal_pointer (&missing));
      else
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "no TCP address for %s",
                     address);
    }
  g_clear_error (&missing);
  for (guint i = 0; i < fds->len; i++)
    {
      int fd = g_array_index (fds, int, i);
      if (failed)
        close (fd);
      else
        add_socket (self, fd, NULL);
    }
  g_array_free (fds, TRUE);
  return !failed;
}

/**
 * weft_listener_add_tcp:
 * @self: a listener
 * @host: (nullable): a numeric address or a host name of this machine
 *   ("127.0.0.1", "::1", "localhost"); %NULL for every address (IPv6 and
 *   IPv4 on one dual-stack socket where the system has IPv6)
 * @port: the port; 0 lets the system choose (read it back with
 *   weft_listener_get_port())
 * @error: return location for a #GError
 *
 * Binds and listens at once (so the port is taken when this returns);
 * accepting starts with weft_listener_start(). A name with several
 * addresses gets a socket for each address this machine has: one it does
 * not have (an IPv6 address on a host without IPv6) is skipped. Any other
 * failure (an address in use, a port not permitted) binds none of them.
 *
 * Returns: %TRUE on success; %FALSE with @error set (%G_IO_ERROR_ADDRESS_IN_USE,
 *   %G_IO_ERROR_PERMISSION_DENIED, %G_IO_ERROR_NOT_FOUND for a name that
 *   does not resolve, ...)
 */
gboolean
weft_listener_add_tcp (WeftListener *self, const gchar *host, guint16 port, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  gchar *address = g_strdup_printf (host != NULL && strchr (host, ':') ? "[%s]:%u" : "%s:%u",
                                    host != NULL ? host : "*", port);
  gboolean ok = FALSE;
  if (host == NULL)
    {
      struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons (port),
                                 .sin6_addr = IN6ADDR_ANY_INIT };
      GError *v6_error = NULL;
      ok = bind_and_listen (self, (struct sockaddr *) &a6, sizeof a6, FALSE, address,
                            &v6_error);
      if (!ok && (g_error_matches (v6_error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED) ||
                  g_error_matches (v6_error, G_IO_ERROR, G_IO_ERROR_FAILED)))
        {
          struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons (port),
                                    .sin_addr.s_addr = htonl (INADDR_ANY) };
          g_clear_error (&v6_error);
          ok = bind_and_listen (self, (struct sockaddr *) &a4, sizeof a4, FALSE, address,
                                error);
        }
      else if (!ok)
        g_propagate_error (error, v6_error);
      g_free (address);
      return ok;
    }

  struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                            .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
  struct addrinfo *res = NULL;
  gchar portstr[8];
  g_snprintf (portstr, sizeof portstr, "%u", port);
  int r = weft__listener_test_resolve != NULL
              ? weft__listener_test_resolve (host, portstr, &hints, &res)
              : getaddrinfo (host, portstr, &hints, &res);
  if (r != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "cannot resolve %s: %s", address,
                   gai_strerror (r));
      g_free (address);
      return FALSE;
    }
  ok = bind_all (self, res, port, address, error);
  freeaddrinfo (res);
  g_free (address);
  return ok;
}

/**
 * weft_listener_add_address:
 * @self: a listener
 * @address: "host:port", "[v6 address]:port", ":port" or "*:port" for all
 *   addresses, or "unix:/path/to/socket"
 * @error: return location for a #GError
 *
 * weft_listener_add_tcp() or weft_listener_add_unix() from one string, as a
 * command line would give it.
 *
 * Returns: %TRUE on success; %FALSE with @error set, %G_IO_ERROR_INVALID_ARGUMENT
 *   for a string that is not an address
 */
gboolean
weft_listener_add_address (WeftListener *self, const gchar *address, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (address != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (g_str_has_prefix (address, "unix:"))
    return weft_listener_add_unix (self, address + 5, error);

  const char *colon = strrchr (address, ':');
  gchar *end = NULL;
  guint64 port = colon != NULL ? g_ascii_strtoull (colon + 1, &end, 10) : 0;
  /* Digits only: strtoull alone would take " 80", "+80" and "-0". */
  if (colon == NULL || !g_ascii_isdigit (colon[1]) || *end != '\0' || port > 65535)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "not an address (host:port or unix:/path): %s", address);
      return FALSE;
    }
  gchar *host = g_strndup (address, (gsize) (colon - address));
  if (host[0] == '[')
    {
      gsize n = strlen (host);
      if (n < 2 || host[n - 1] != ']')
        {
          g_free (host);
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "unbalanced brackets in %s", address);
          return FALSE;
        }
      gchar *inner = g_strndup (host + 1, n - 2);
      g_free (host);
      host = inner;
    }
  else if (strchr (host, ':') != NULL)
    {
      g_free (host);
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "an IPv6 address needs brackets: %s", address);
      return FALSE;
    }
  gboolean any = host[0] == '\0' || strcmp (host, "*") == 0;
  gboolean ok = weft_listener_add_tcp (self, any ? NULL : host, (guint16) port, error);
  g_free (host);
  return ok;
}

/**
 * weft_listener_add_unix:
 * @self: a listener
 * @path: where to create the socket; a stale socket file there is
 *   replaced, any other file is an error. A leading '@' means Linux's
 *   abstract namespace.
 * @error: return location for a #GError
 *
 * Binds and listens on a Unix stream socket at once; accepting starts with
 * weft_listener_start(). The socket file is removed when the listener
 * closes its sockets. Any thread.
 *
 * Returns: %TRUE on success; %FALSE with @error set
 */
gboolean
weft_listener_add_unix (WeftListener *self, const gchar *path, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (path != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  struct sockaddr_un sun = { .sun_family = AF_UNIX };
  gsize n = strlen (path);
  if (n == 0 || n >= sizeof sun.sun_path)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "unix socket path is empty or too long: %s", path);
      return FALSE;
    }
  memcpy (sun.sun_path, path, n);
  socklen_t len = (socklen_t) (G_STRUCT_OFFSET (struct sockaddr_un, sun_path) + n + 1);
  if (path[0] == '@')
    {
      sun.sun_path[0] = '\0';
      len = (socklen_t) (G_STRUCT_OFFSET (struct sockaddr_un, sun_path) + n);
    }
  else
    {
      struct stat st;
      if (lstat (path, &st) == 0)
        {
          if (!S_ISSOCK (st.st_mode))
            return set_error_errno (error, EEXIST, "cannot listen on", path);
          unlink (path); /* a previous run's socket */
        }
    }
  gchar *address = g_strconcat ("unix:", path, NULL);
  gboolean ok = bind_and_listen (self, (struct sockaddr *) &sun, len, FALSE, address, error);
  g_free (address);
  if (ok && path[0] == '@')
    {
      /* Nothing to unlink in the abstract namespace. */
      pthread_mutex_lock (&self->lock);
      ListenSocket *ls = self->sockets->pdata[self->sockets->len - 1];
      g_clear_pointer (&ls->unix_path, g_free);
      pthread_mutex_unlock (&self->lock);
    }
  return ok;
}

/**
 * weft_listener_add_fd:
 * @self: a listener
 * @fd: a socket that is already bound and listening (from a parent
 *   process or a service manager); the listener takes it over and closes
 *   it when done
 * @error: return location for a #GError
 *
 * Adopts a listening socket, made non-blocking and close-on-exec; its
 * backlog and options stay as they are. Accepting on it starts with
 * weft_listener_start(), or at once if the listener is started. Any
 * thread.
 *
 * Returns: %TRUE on success; %FALSE with @error set if @fd is not a
 *   listening stream socket (then @fd is left alone)
 */
gboolean
weft_listener_add_fd (WeftListener *self, gint fd, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (fd >= 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  int listening = 0, type = 0;
  socklen_t len = sizeof listening;
  gchar *what = g_strdup_printf ("fd %d", fd);
  if (getsockopt (fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0)
    {
      gboolean r = set_error_errno (error, errno, "cannot adopt", what);
      g_free (what);
      return r;
    }
  len = sizeof type;
  getsockopt (fd, SOL_SOCKET, SO_TYPE, &type, &len);
  if (!listening || type != SOCK_STREAM)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "cannot adopt %s: not a listening stream socket", what);
      g_free (what);
      return FALSE;
    }
  g_free (what);
  int flags = fcntl (fd, F_GETFL);
  fcntl (fd, F_SETFL, flags | O_NONBLOCK);
  fcntl (fd, F_SETFD, FD_CLOEXEC);
  add_socket (self, fd, NULL);
  return TRUE;
}

/**
 * weft_listener_add_systemd:
 * @self: a listener
 * @error: return location for a #GError
 *
 * Adopts the sockets a service manager passed with the socket activation
 * protocol ($LISTEN_PID equal to this process, $LISTEN_FDS sockets from
 * fd 3). The variables are left in the environment (changing it is not
 * thread safe); do not pass them on to child processes.
 *
 * Returns: how many sockets were adopted (0 if none were passed), or -1
 *   with @error set
 */
gint
weft_listener_add_systemd (WeftListener *self, GError **error)
{
  g_return_val_if_fail (self != NULL, -1);
  g_return_val_if_fail (error == NULL || *error == NULL, -1);

  const char *pid = g_getenv ("LISTEN_PID");
  const char *fds = g_getenv ("LISTEN_FDS");
  if (pid == NULL || fds == NULL)
    return 0;
  gchar *end = NULL;
  guint64 p = g_ascii_strtoull (pid, &end, 10);
  if (*end != '\0' || p != (guint64) getpid ())
    return 0; /* meant for another process */
  guint64 n = g_ascii_strtoull (fds, &end, 10);
  if (*end != '\0' || n > 1024)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT, "bad LISTEN_FDS: %s", fds);
      return -1;
    }
  for (guint i = 0; i < n; i++)
    if (!weft_listener_add_fd (self, 3 + (gint) i, error))
      return -1;
  return (gint) n;
}

/**
 * weft_listener_get_n_sockets:
 * @self: a listener
 *
 * Counts the sockets added so far; a name with several addresses adds
 * several. Sockets closed by a shutdown still count. Valid indexes for
 * weft_listener_get_port() are below this number. Any thread.
 *
 * Returns: how many listening sockets were added
 */
guint
weft_listener_get_n_sockets (WeftListener *self)
{
  g_return_val_if_fail (self != NULL, 0);
  pthread_mutex_lock (&self->lock);
  guint n = self->sockets->len;
  pthread_mutex_unlock (&self->lock);
  return n;
}

/**
 * weft_listener_get_port:
 * @self: a listener
 * @index: which socket, in the order they were added
 *
 * Asks the kernel which port a socket is bound to, typically to learn the
 * port chosen for port 0. Any thread.
 *
 * Returns: the TCP port socket @index is bound to (the chosen one after
 *   port 0), or 0 for a Unix socket, a closed one or a bad index
 */
guint16
weft_listener_get_port (WeftListener *self, guint index)
{
  g_return_val_if_fail (self != NULL, 0);
  guint16 port = 0;
  pthread_mutex_lock (&self->lock);
  if (index < self->sockets->len)
    {
      ListenSocket *ls = self->sockets->pdata[index];
      if (ls->fd >= 0)
        port = bound_port (ls->fd);
    }
  pthread_mutex_unlock (&self->lock);
  return port;
}

/* ---- start and stop ---------------------------------------------------- */

/**
 * weft_listener_start:
 * @self: a listener with at least one socket
 * @error: return location for a #GError
 *
 * Starts accepting. Sockets added afterwards are accepted on at once.
 *
 * Returns: %TRUE on success; %FALSE with @error set if the listener has no
 *   socket or was shut down
 */
gboolean
weft_listener_start (WeftListener *self, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  pthread_mutex_lock (&self->lock);
  if (self->stopping || self->sockets->len == 0)
    {
      pthread_mutex_unlock (&self->lock);
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_NOT_INITIALIZED,
                           self->stopping ? "the listener was shut down"
                                          : "the listener has no socket");
      return FALSE;
    }
  if (self->started)
    {
      pthread_mutex_unlock (&self->lock);
      return TRUE;
    }
  self->started = TRUE;
  GPtrArray *sockets = g_ptr_array_copy (self->sockets, NULL, NULL);
  pthread_mutex_unlock (&self->lock);
  for (guint i = 0; i < sockets->len; i++)
    watch_socket (self, sockets->pdata[i]);
  g_ptr_array_unref (sockets);
  weft_context_dispatch (self->ctx);
  return TRUE;
}

/* On the listener's context. */
static void
stop_accepting (WeftListener *self)
{
  pthread_mutex_lock (&self->lock);
  self->stopping = TRUE;
  GPtrArray *sockets = g_ptr_array_copy (self->sockets, NULL, NULL);
  pthread_mutex_unlock (&self->lock);
  for (guint i = 0; i < sockets->len; i++)
    {
      ListenSocket *ls = sockets->pdata[i];
      if (ls->id != 0)
        weft_context_remove (self->ctx, ls->id);
      ls->id = 0;
      close_socket (ls);
    }
  g_ptr_array_unref (sockets);
  if (self->backoff_id != 0)
    weft_context_remove (self->ctx, self->backoff_id);
  self->backoff_id = 0;
}

static void
abort_job (gpointer data)
{
  weft_connection_abort (data);
}

static gboolean
deadline_passed (gpointer data)
{
  WeftListener *self = data;
  self->deadline_id = 0;
  if (atomic_load (&self->n_live) == 0)
    {
      /* All finished in time (their drained job may still be queued). */
      call_done (self);
      return G_SOURCE_REMOVE;
    }
  self->deadline_passed = TRUE;
  GPtrArray *live = weft__listener_live_connections (self);
  for (guint i = 0; i < live->len; i++)
    {
      WeftConnection *conn = live->pdata[i];
      /* Abort on the connection's own context (nothing if it is closed
       * already); the job's reference keeps the connection alive until then. */
      weft__context_post_continuation (weft_connection_get_context (conn), abort_job,
                                       weft_connection_ref (conn),
                                       (GDestroyNotify) weft_connection_unref);
    }
  g_ptr_array_unref (live);
  return G_SOURCE_REMOVE;
}

typedef struct {
  WeftListener *listener;
  guint timeout_ms;
  WeftListenerDoneFunc func;
  gpointer user_data;
  GDestroyNotify notify;
} Shutdown;

static void
shutdown_job (gpointer data)
{
  Shutdown *s = data;
  WeftListener *self = s->listener;
  stop_accepting (self);
  if (self->done_func != NULL || self->done_called)
    return; /* a second shutdown: the first one's callback stands */
  self->done_func = s->func;
  self->done_data = s->user_data;
  self->done_notify = s->notify;
  s->notify = NULL;
  if (atomic_load (&self->n_live) == 0)
    call_done (self);
  else
    self->deadline_id = weft_context_add_timeout (self->ctx, s->timeout_ms, deadline_passed,
                                                  self, NULL);
}

static void
shutdown_free (gpointer data)
{
  Shutdown *s = data;
  if (s->notify != NULL)
    s->notify (s->user_data);
  listener_internal_unref (s->listener);
  g_free (s);
}

/**
 * weft_listener_shutdown:
 * @self: a listener
 * @timeout_ms: how long live connections may take to finish
 * @func: (scope notified) (closure user_data) (destroy notify) (nullable):
 *   called on the listener's context once no connection is left
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data
 *
 * Graceful stop: closes the listening sockets at once, then waits for the
 * live connections to close by themselves. Those still open after
 * @timeout_ms are aborted. Any thread.
 */
void
weft_listener_shutdown (WeftListener *self, guint timeout_ms, WeftListenerDoneFunc func,
                        gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);

  Shutdown *s = g_new0 (Shutdown, 1);
  s->listener = self;
  g_atomic_int_inc (&self->internal_refs);
  s->timeout_ms = timeout_ms;
  s->func = func;
  s->user_data = user_data;
  s->notify = notify;
  pthread_mutex_lock (&self->lock);
  self->stopping = TRUE;
  gboolean started = self->started;
  self->started = TRUE;
  pthread_mutex_unlock (&self->lock);
  if (!started)
    weft_context_dispatch (self->ctx); /* never started: let the job run */
  weft__context_post_continuation (self->ctx, shutdown_job, s, shutdown_free);
}

/**
 * weft_listener_get_n_connections:
 * @self: a listener
 *
 * Counts the live connections, the number weft_listener_set_max_connections()
 * bounds; a connection still in its TLS handshake counts. Any thread.
 *
 * Returns: connections accepted and not yet closed
 */
guint
weft_listener_get_n_connections (WeftListener *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return atomic_load (&self->n_live);
}

/**
 * weft_listener_get_n_accepted:
 * @self: a listener
 *
 * Counts every connection accepted and handed to a new context, whether it
 * is still open or not (TLS handshakes that failed included). Any thread.
 *
 * Returns: connections accepted since the listener was created
 */
guint64
weft_listener_get_n_accepted (WeftListener *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return atomic_load (&self->n_accepted);
}

/**
 * weft_listener_get_n_tls_failed:
 * @self: a listener
 *
 * Failed handshakes are logged with g_info() only (a hostile client could
 * flood a louder log); this count is how a status page sees them.
 *
 * Returns: TLS handshakes that failed or timed out since the listener was
 *   created
 */
guint64
weft_listener_get_n_tls_failed (WeftListener *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return atomic_load (&self->n_tls_failed);
}
