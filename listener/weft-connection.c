/* weft-connection.c: a socket owned by a context.
 *
 * Reads go into a per-thread scratch buffer and are handed to the reader
 * from there; only bytes the reader leaves unconsumed are copied into a
 * buffer of the connection's own, which is freed as soon as it empties. So
 * an idle connection holds no read buffer at all.
 *
 * Writes made from a callback on the connection's context are queued and
 * flushed with one sendmsg when the fd callback returns (or at once when
 * made from a job or timer); what the socket does not take stays queued, as
 * copies or as references to GBytes and files. Above the high water mark
 * reading pauses, so a peer that does not read cannot make us buffer more.
 *
 * Every function must be called on the connection's context (from its
 * callbacks, or from the creating thread before the context is
 * dispatched). Socket I/O happens only on the engine's workers, where
 * SIGPIPE is blocked.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "weft-connection-private.h"
#include "weft-sys.h"

G_DEFINE_BOXED_TYPE (WeftConnection, weft_connection, weft_connection_ref,
                     weft_connection_unref)
G_DEFINE_ENUM_TYPE (WeftConnectionEvent, weft_connection_event,
                    G_DEFINE_ENUM_VALUE (WEFT_CONNECTION_EVENT_PEER_CLOSED, "peer-closed"),
                    G_DEFINE_ENUM_VALUE (WEFT_CONNECTION_EVENT_DRAINED, "drained"),
                    G_DEFINE_ENUM_VALUE (WEFT_CONNECTION_EVENT_ERROR, "error"),
                    G_DEFINE_ENUM_VALUE (WEFT_CONNECTION_EVENT_CLOSED, "closed"))

#define SCRATCH_SIZE (64 * 1024)
#define MAX_IOV 64
#define READS_PER_CALLBACK 4          /* fairness: then let others run */
#define DEFAULT_MAX_READ_BUFFER (1024 * 1024)
#define DEFAULT_HIGH_WATER (1024 * 1024)
#define DEFAULT_LOW_WATER (256 * 1024)
/* Queued file parts that block the writer whatever their bytes: each holds
 * a descriptor, so a peer that asks for many small files and reads nothing
 * held thousands of them under the byte mark (4,938 for one pipelining
 * client of weft-httpd, far past the usual limit of 1,024 a process). */
#define MAX_QUEUED_FILES 16
#define CHUNK_ALLOC 1024              /* a small chunk's allocation, header included:
                                       * within glibc's per-thread cache (1032) */
#define DEFAULT_CLOSE_LINGER_MS 30000 /* graceful close without a write timeout */

typedef enum {
  READ_NONE,
  READ_RAW,
  READ_EXACTLY,
  READ_UNTIL,
} ReadMode;

typedef enum {
  CHUNK_COPY,
  CHUNK_BYTES,
  CHUNK_FILE,
} ChunkKind;

typedef struct _Chunk Chunk;
struct _Chunk {
  Chunk *next;
  ChunkKind kind;
  gsize off;          /* COPY/BYTES: bytes already sent */
  gsize len;          /* COPY/BYTES: bytes in the chunk; FILE: bytes left */
  union {
    struct { gsize cap; guint8 data[]; } copy;
    GBytes *bytes;
    struct { int fd; guint64 pos; } file;
  };
};

typedef struct {
  WeftConnectionReadFunc func;
  gpointer data;
  GDestroyNotify notify;
} ReadCb;

/* A destroy notify held back until the callback that caused it returns. */
typedef struct _Deferred Deferred;
struct _Deferred {
  Deferred *next;
  GDestroyNotify notify;
  gpointer data;
};

/* What few connections use, allocated on first use (ext_get()) and kept
 * until the connection is freed: an idle plain connection with the default
 * limits has none, which keeps its memory small (an HTTP server holds
 * thousands of them). */
typedef struct {
  /* read side */
  gsize want;                 /* READ_EXACTLY: bytes; READ_UNTIL: max length */
  guint8 *delim;
  gsize delim_len;
  gsize max_read_buffer;
  gsize high_water;
  gsize low_water;

  /* the idle timeout and a lingering close */
  guint idle_ms;
  guint idle_id;
  gint64 last_activity;
  guint linger_id;
  guint linger_ms;            /* lingering: how long to discard input */
  guint64 discard_left;       /* lingering: how much input to discard */

  /* TLS */
  WeftTlsSession *tls;        /* (nullable) see tls_session() */
  WeftTlsConfig *tls_config;
  guint handshake_id;         /* the handshake timeout */
  WeftConnectFunc tls_done;
  gpointer tls_done_data;
  GDestroyNotify tls_done_notify;
  gchar *alpn;
  gchar *server_name;

  /* Coroutine I/O (weft-connection-coro.c): told of every event before the
   * application, and of the peer's end even when the application has no
   * event callback. (owned) by the connection, freed with it. */
  WeftConnectionWaitHook wait_hook;
  gpointer wait_hook_data;
  GDestroyNotify wait_hook_free;

  gchar *peer_text;           /* weft__connection_peer_text()'s */

  /* Notifies of readers and event functions released while one of the
   * connection's callbacks ran: they run, in order, when it returns. */
  Deferred *deferred;
  Deferred *deferred_tail;
} ConnExt;

struct _WeftConnection {
  gint ref_count;
  int fd;
  WeftContext *ctx;
  guint fd_id;
  GIOCondition interest;      /* what the fd source waits for now */

  /* state */
  guint in_fd_callback : 1;   /* writes are flushed when it returns */
  guint read_paused : 1;      /* above the high water mark */
  guint peer_closed : 1;
  guint fin_seen : 1;         /* the peer shut down while we were not reading */
  guint write_shutdown : 1;   /* requested: shut the write side once flushed */
  guint write_shut_done : 1;
  guint notify_waits : 1;     /* TLS: the close_notify waits for room */
  guint closing : 1;          /* graceful close: flush, then close */
  guint closed : 1;
  guint above_high : 1;
  guint handshaking : 1;
  guint is_tls : 1;
  guint tls_read_wants_out : 1;
  guint tls_write_wants_in : 1;
  guint drained : 1;          /* no unread bytes in the socket, as of the last
                               * read: the edge-triggered fd reports new ones */
  guint read_more_posted : 1;
  guint in_write_call : 1;    /* flushing from weft_connection_write() & co. */
  guint drained_posted : 1;   /* a drained_job is pending and still due */
  guint corked : 1;           /* weft__connection_cork(): writes wait */
  guint lingering : 1;        /* close: after the output, shut the write side
                               * and read (discarding) until the peer's end */
  guint discarding : 1;       /* lingering now: output gone, write side shut */
  guint linger_always : 1;    /* linger even if no input is waiting yet */
  guint fin_pending : 1;      /* epoll said the peer shut down or hung up: a
                               * short read is no proof of a drained socket,
                               * read on to end of file */
  guint sent_since_check : 1; /* the peer took output since the last write check */
  guint stalled_checks : 2;   /* write checks in a row that saw no progress */
  guint in_callback : 1;      /* a reader or event function is running */
  guint8 mode;                /* ReadMode */
  /* Set at construction, then read from any thread (the owner's data is
   * found from other threads: weft__connection_get_data()): bytes of their
   * own, not bits beside the ones the context writes. */
  guint8 embedded;            /* in its context's tail, with its fd source */
  guint8 has_data;            /* and data for its owner after them */
  guint8 wq_files;            /* file parts queued (MAX_QUEUED_FILES); sticks
                               * at 255, then counts again from an empty queue */

  ReadCb reader;
  guint8 *rbuf;               /* unconsumed bytes; NULL when none */
  guint32 rlen;               /* both at most max_read_buffer (< 4 GiB): */
  guint32 rcap;               /* 8 bytes less per idle connection */

  /* write side */
  Chunk *wq_head;
  Chunk *wq_tail;
  gsize wq_bytes;

  WeftConnectionEventFunc event_func;
  gpointer event_data;
  GDestroyNotify event_notify;

  guint write_ms;             /* the write timeout */
  guint write_id;

  WeftListener *listener; /* (nullable) told by weft__listener_connection_closed() */

  ConnExt *ext;               /* (nullable) (owned) */
};

static gboolean on_fd (gint fd, GIOCondition condition, gpointer user_data);
static void flush (WeftConnection *self);
static void arm_write_check (WeftConnection *self);
static void update_interest (WeftConnection *self);
static inline void queued (WeftConnection *self);
static void close_flushed (WeftConnection *self);
static void discard_input (WeftConnection *self);
static gboolean linger_expired (gpointer data);
static void deliver_buffered_job (gpointer data);
static inline __attribute__ ((always_inline)) void
deliver (WeftConnection *self, guint8 *owned, gsize owned_cap, const guint8 *data, gsize len);
static void fail (WeftConnection *self, GError *error);
static void finish_close (WeftConnection *self, gboolean abortive);
static void drive_handshake (WeftConnection *self);

/* ---- helpers ----------------------------------------------------------- */

static inline gboolean
on_own_context (WeftConnection *self)
{
  WeftContext *current = weft_context_get_current ();
  return current == NULL || current == self->ctx;
}

static ConnExt *
ext_get (WeftConnection *self)
{
  if (G_UNLIKELY (self->ext == NULL))
    {
      self->ext = g_new0 (ConnExt, 1);
      self->ext->max_read_buffer = DEFAULT_MAX_READ_BUFFER;
      self->ext->high_water = DEFAULT_HIGH_WATER;
      self->ext->low_water = DEFAULT_LOW_WATER;
    }
  return self->ext;
}

/* The TLS session, or NULL: none started, or it could not be made. */
static inline WeftTlsSession *
tls_session (WeftConnection *self)
{
  return G_UNLIKELY (self->is_tls) ? self->ext->tls : NULL;
}

static inline gsize
max_read_buffer (WeftConnection *self)
{
  return self->ext != NULL ? self->ext->max_read_buffer : DEFAULT_MAX_READ_BUFFER;
}

static inline gsize
high_water (WeftConnection *self)
{
  return self->ext != NULL ? self->ext->high_water : DEFAULT_HIGH_WATER;
}

static inline gsize
low_water (WeftConnection *self)
{
  return self->ext != NULL ? self->ext->low_water : DEFAULT_LOW_WATER;
}

/* Per-thread buffers: made on first use, freed when the thread exits
 * (GPrivate's notify); the thread-local pointer saves the lookup. */
static inline __attribute__ ((always_inline)) guint8 *
thread_buffer (guint8 **buf, GPrivate *key, gsize size)
{
  if (G_UNLIKELY (*buf == NULL))
    {
      *buf = g_malloc (size);
      g_private_set (key, *buf);
    }
  return *buf;
}

static GPrivate scratch_key = G_PRIVATE_INIT (g_free);
static _Thread_local WEFT_TLS_IE guint8 *scratch;

static guint8 *
scratch_buffer (void)
{
  return thread_buffer (&scratch, &scratch_key, SCRATCH_SIZE);
}

/* Where I/O may happen now: on a worker (SIGPIPE blocked, and the context
 * runs there), not on a foreign thread setting the connection up. */
static inline gboolean
can_do_io (WeftConnection *self)
{
  return weft_engine_is_worker_thread (weft_context_get_engine (self->ctx));
}

static void
run_deferred (WeftConnection *self)
{
  ConnExt *ext = self->ext;
  while (ext != NULL && ext->deferred != NULL)
    {
      Deferred *d = ext->deferred;
      ext->deferred = d->next;
      if (ext->deferred == NULL)
        ext->deferred_tail = NULL;
      d->notify (d->data);
      g_free (d);
    }
}

/* Around each call of the application's reader or event function (and
 * the coroutine hook): see release(). */
static inline guint
callback_enter (WeftConnection *self)
{
  guint was = self->in_callback;
  self->in_callback = 1;
  return was;
}

static inline void
callback_leave (WeftConnection *self, guint was)
{
  self->in_callback = was;
  if (!was && G_UNLIKELY (self->ext != NULL && self->ext->deferred != NULL))
    run_deferred (self);
}

/* Runs a reader's or event function's @notify now or, inside one of the
 * connection's callbacks, when that returns: the callback that closed the
 * connection or replaced itself may still use its data, and a binding
 * (PyGObject) frees the closure it is running. */
static void
release (WeftConnection *self, GDestroyNotify notify, gpointer data)
{
  if (notify == NULL)
    return;
  if (!self->in_callback)
    {
      notify (data);
      return;
    }
  ConnExt *ext = ext_get (self);
  Deferred *d = g_new (Deferred, 1);
  d->next = NULL;
  d->notify = notify;
  d->data = data;
  if (ext->deferred_tail != NULL)
    ext->deferred_tail->next = d;
  else
    ext->deferred = d;
  ext->deferred_tail = d;
}

static void
emit (WeftConnection *self, WeftConnectionEvent event, const GError *error)
{
  guint was = callback_enter (self);
  if (self->ext != NULL && self->ext->wait_hook != NULL)
    self->ext->wait_hook (self, event, error, self->ext->wait_hook_data);
  if (self->event_func != NULL)
    self->event_func (self, event, error, self->event_data);
  callback_leave (self, was);
}

static void
clear_reader (WeftConnection *self)
{
  ReadCb old = self->reader;
  self->mode = READ_NONE;
  memset (&self->reader, 0, sizeof self->reader);
  if (self->ext != NULL)
    g_clear_pointer (&self->ext->delim, g_free);
  release (self, old.notify, old.data);
}

/* A small copy chunk comes from and goes to the thread's spare: a reply's
 * chunk is taken and freed once per request (the allocator's malloc and
 * free cost about 100 instructions per request). */
#define SMALL_CHUNK_CAP ((gsize) CHUNK_ALLOC - offsetof (Chunk, copy.data))

static Chunk *
new_copy_chunk (gsize cap)
{
  Chunk *c = cap == SMALL_CHUNK_CAP ? weft__spare_take (WEFT_SPARE_WRITE_CHUNK) : NULL;
  if (c == NULL)
    c = g_malloc (offsetof (Chunk, copy.data) + cap);
  c->kind = CHUNK_COPY;
  c->copy.cap = cap;
  return c;
}

/* Inline: a reply's chunk is freed once per request (a copy: tested
 * first). */
static inline void
free_chunk (Chunk *c)
{
  if (c->kind == CHUNK_COPY)
    {
      if (c->copy.cap == SMALL_CHUNK_CAP && weft__spare_keep (WEFT_SPARE_WRITE_CHUNK, c))
        return;
    }
  else if (c->kind == CHUNK_BYTES)
    g_bytes_unref (c->bytes);
  else
    close (c->file.fd);
  g_free (c);
}

static void
drop_queue (WeftConnection *self)
{
  Chunk *c = self->wq_head;
  while (c != NULL)
    {
      Chunk *next = c->next;
      free_chunk (c);
      c = next;
    }
  self->wq_head = self->wq_tail = NULL;
  self->wq_bytes = 0;
  self->wq_files = 0;
}

static void
touch (WeftConnection *self)
{
  if (self->ext != NULL && self->ext->idle_ms != 0)
    self->ext->last_activity = g_get_monotonic_time ();
}

/* ---- construction ------------------------------------------------------ */

/* The fd source's notify: the engine no longer watches the fd, so only now
 * may it be closed (its number could otherwise be reused while still
 * registered). Runs on the context, after on_fd() if that is running. */
static void
source_gone (gpointer data)
{
  WeftConnection *self = data;
  if (!self->closed)
    {
      /* The context was destroyed under us (or the engine died): close
       * the way an abort would, minus the source already gone. */
      self->fd_id = 0;
      finish_close (self, TRUE);
    }
  if (self->fd >= 0)
    close (self->fd);
  self->fd = -1;
  weft_connection_unref (self);
}

/* In a context's tail: the connection, its fd source, then the owner's
 * data, aligned for pointers and for 64-bit integers and doubles (an
 * HttpConn holds 64-bit atomics; a 32-bit CPU may align pointers to 4
 * only). On 64-bit CPUs both are 8: the same layout. */
typedef union {
  gpointer p;
  gint64 i;
  gdouble d;
} TailData;
#define TAIL_SOURCE_OFFSET (G_STRUCT_OFFSET (struct { WeftConnection c; WeftFdSource s; }, s))
#define TAIL_DATA_OFFSET \
  (G_STRUCT_OFFSET (struct { WeftConnection c; WeftFdSource s; TailData d; }, d))
G_STATIC_ASSERT (sizeof (gpointer) != 8 ||
                 TAIL_DATA_OFFSET == G_STRUCT_OFFSET (struct {
                                       WeftConnection c;
                                       WeftFdSource s;
                                       gpointer d;
                                     }, d));

gsize
weft__connection_tail_size (gsize data_size)
{
  return TAIL_DATA_OFFSET + data_size;
}

gpointer
weft__connection_get_data (WeftConnection *self)
{
  return self->has_data ? (guint8 *) self + TAIL_DATA_OFFSET : NULL;
}

static WeftConnection *
connection_new (WeftContext *ctx, int fd, gboolean in_tail, gsize data_size, GError **error)
{
  WeftConnection *self = in_tail ? weft__context_tail (ctx) : g_new0 (WeftConnection, 1);
  self->embedded = in_tail;
  self->has_data = in_tail && data_size > 0;
  self->ref_count = 1;
  self->ctx = weft_context_ref (ctx);
  self->fd = fd;
  self->drained = TRUE; /* registering reports bytes already there */

  /* The source holds a reference until the socket is closed. Until a
   * reader is installed only the peer's shutdown, errors and hang-ups are
   * reported. Edge-triggered: reads go on until the socket is drained (or
   * continue from a job, see update_interest()), so no re-arm syscall
   * follows each readiness. */
  self->interest = WEFT__IO_RDHUP;
  WeftFdSource *storage = in_tail ? (WeftFdSource *) ((guint8 *) self + TAIL_SOURCE_OFFSET)
                                  : NULL;
  self->fd_id = weft__context_add_fd_in (ctx, storage, fd, self->interest | WEFT__IO_EDGE, on_fd,
                                         weft_connection_ref (self), source_gone, error);
  if (self->fd_id == 0)
    {
      /* source_gone() ran and closed the fd. */
      self->closed = TRUE;
      weft_connection_unref (self);
      return NULL;
    }
  return self;
}

WeftConnection *
weft__connection_new (WeftContext *ctx, int fd, GError **error)
{
  return connection_new (ctx, fd, FALSE, 0, error);
}

WeftConnection *
weft__connection_new_in_tail (WeftContext *ctx, int fd, gsize data_size, GError **error)
{
  return connection_new (ctx, fd, TRUE, data_size, error);
}

/**
 * weft_connection_new:
 * @ctx: the context that will own the connection and run its callbacks
 * @fd: a connected stream socket (TCP or Unix); the connection takes it
 *   over, makes it non-blocking and closes it when done
 * @error: return location for a #GError
 *
 * Wraps a connected socket. Install callbacks with
 * weft_connection_start_reading() and friends and
 * weft_connection_set_event_func(), from @ctx's callbacks or before
 * dispatching @ctx.
 *
 * Returns: (transfer full) (nullable): a new connection, or %NULL with
 *   @error set (then @fd is closed)
 */
WeftConnection *
weft_connection_new (WeftContext *ctx, gint fd, GError **error)
{
  g_return_val_if_fail (ctx != NULL, NULL);
  g_return_val_if_fail (fd >= 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  int flags = fcntl (fd, F_GETFL);
  if (flags < 0 || (!(flags & O_NONBLOCK) && fcntl (fd, F_SETFL, flags | O_NONBLOCK) < 0))
    {
      int err = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (err),
                   "fd %d: cannot make it non-blocking: %s", fd, g_strerror (err));
      close (fd);
      return NULL;
    }
  return weft__connection_new (ctx, fd, error);
}

/**
 * weft_connection_ref:
 * @self: a connection
 *
 * Takes a reference on @self; drop it with weft_connection_unref(). A
 * reference keeps the object alive, not the connection open. Any thread.
 *
 * Returns: (transfer full): @self
 */
WeftConnection *
weft_connection_ref (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_atomic_int_inc (&self->ref_count);
  return self;
}

/**
 * weft_connection_unref:
 * @self: (nullable) (transfer full): a connection
 *
 * Drops a reference. An open connection stays open while its socket is
 * registered (it holds a reference of its own until it is closed), so
 * dropping yours does not close it: call weft_connection_close() first if
 * that is what you mean. Any thread.
 */
void
weft_connection_unref (WeftConnection *self)
{
  if (self == NULL)
    return;
  if (!g_atomic_int_dec_and_test (&self->ref_count))
    return;
  /* The last reference can only go after the fd source let go, i.e. after
   * finish_close() or a failed construction. */
  g_assert (self->closed);
  g_assert (!self->in_callback);
  run_deferred (self);
  drop_queue (self);
  g_free (self->rbuf);
  ConnExt *ext = self->ext;
  if (ext != NULL)
    {
      g_free (ext->delim);
      g_free (ext->peer_text);
      g_free (ext->alpn);
      g_free (ext->server_name);
      if (ext->wait_hook_free != NULL)
        ext->wait_hook_free (ext->wait_hook_data);
      if (ext->tls != NULL)
        weft__tls_session_free (ext->tls);
      if (ext->tls_config != NULL)
        weft_tls_config_unref (ext->tls_config);
      g_free (ext);
    }
  WeftContext *ctx = self->ctx;
  if (!self->embedded)
    g_free (self);
  weft_context_unref (ctx); /* (an embedded connection's memory may go with it) */
}

/**
 * weft_connection_get_context:
 * @self: a connection
 *
 * Gets the context that runs @self's callbacks and on which its functions
 * must be called, for example to post work to it from another thread.
 * The connection holds a reference on it for as long as it exists. Any
 * thread.
 *
 * Returns: (transfer none): the context that owns @self
 */
WeftContext *
weft_connection_get_context (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->ctx;
}

/**
 * weft_connection_get_fd:
 * @self: a connection
 *
 * Gets the socket's file descriptor, which stays owned by the connection
 * (do not close it). Call it on the connection's context.
 *
 * Returns: the socket, or -1 once closed. Do not read or write it directly
 *   (the connection buffers), but setting socket options is fine.
 */
gint
weft_connection_get_fd (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, -1);
  return self->closed ? -1 : self->fd;
}

/* A reference, unless the last one is gone already (the memory of a
 * connection in a context's tail outlives it): for weft__engine_foreach_tail(). */
static gboolean
try_ref (WeftConnection *self)
{
  for (;;)
    {
      gint refs = g_atomic_int_get (&self->ref_count);
      if (refs <= 0)
        return FALSE;
      if (g_atomic_int_compare_and_exchange (&self->ref_count, refs, refs + 1))
        return TRUE;
    }
}

WeftConnection *
weft__connection_ref_tail (gpointer tail, WeftListener *listener, WeftConnectionFilter keep,
                           gpointer data)
{
  WeftConnection *self = tail;
  /* The listener pointer was written before the tail was marked. */
  if (self->listener != listener || (keep != NULL && !keep (self, data)))
    return NULL;
  return try_ref (self) ? self : NULL;
}

void
weft__connection_set_close_listener (WeftConnection *self, WeftListener *listener)
{
  self->listener = listener;
}

gboolean
weft__connection_has_callbacks (WeftConnection *self)
{
  return self->mode != READ_NONE || self->event_func != NULL ||
         (self->ext != NULL && self->ext->wait_hook != NULL);
}

gpointer
weft__connection_get_wait_hook_data (WeftConnection *self)
{
  return self->ext != NULL ? self->ext->wait_hook_data : NULL;
}

void
weft__connection_set_wait_hook (WeftConnection *self, WeftConnectionWaitHook hook,
                                gpointer data, GDestroyNotify data_free)
{
  ConnExt *ext = ext_get (self);
  g_assert (ext->wait_hook == NULL);
  ext->wait_hook = hook;
  ext->wait_hook_data = data;
  ext->wait_hook_free = data_free;
}

void
weft__connection_cork (WeftConnection *self)
{
  self->corked = TRUE;
}

void
weft__connection_uncork (WeftConnection *self)
{
  if (!self->corked)
    return;
  self->corked = FALSE;
  if (self->closed || self->in_fd_callback || self->wq_head == NULL)
    return; /* (the fd callback flushes when it returns) */
  queued (self); /* as if the last write had just been made */
}

gboolean
weft__connection_peer_closed (WeftConnection *self)
{
  return self->peer_closed;
}

/* The reader just installed gets the bytes kept from before now, instead
 * of from deliver_buffered_job (whose later run then finds nothing). */
void
weft__connection_deliver_now (WeftConnection *self)
{
  weft_connection_ref (self); /* the job's body runs without its reference */
  deliver_buffered_job (self);
  weft_connection_unref (self);
}

/**
 * weft_connection_set_event_func:
 * @self: a connection
 * @func: (scope notified) (closure user_data) (destroy notify) (nullable):
 *   called on @self's context for each #WeftConnectionEvent
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data when @func is replaced or the
 *   connection is closed; if that happens inside one of the connection's
 *   callbacks (@func itself aborting, say), once that callback returns
 *
 * Without an event callback, a connection whose peer closes its side is
 * closed gracefully once its output is flushed.
 */
void
weft_connection_set_event_func (WeftConnection *self, WeftConnectionEventFunc func,
                                gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (on_own_context (self));

  GDestroyNotify old_notify = self->event_notify;
  gpointer old_data = self->event_data;
  self->event_func = self->closed ? NULL : func;
  self->event_data = user_data;
  self->event_notify = notify;
  release (self, old_notify, old_data);
  if (self->closed)
    {
      self->event_notify = NULL;
      release (self, notify, user_data);
    }
}

/* ---- reading ----------------------------------------------------------- */

static void
set_reader (WeftConnection *self, ReadMode mode, WeftConnectionReadFunc func,
            gpointer user_data, GDestroyNotify notify)
{
  if (self->mode != READ_NONE)
    clear_reader (self);
  if (self->closed)
    {
      release (self, notify, user_data);
      return;
    }
  self->mode = mode;
  self->reader.func = func;
  self->reader.data = user_data;
  self->reader.notify = notify;
}

/* Ends a stretch run as if in the fd callback: a lingering close begun
 * in it could not read yet (the scratch buffer was in use): read now. */
static void
leave_fd_callback (WeftConnection *self)
{
  self->in_fd_callback = FALSE;
  if (self->discarding && !self->closed)
    discard_input (self);
}

/* A reader installed from a callback may already be satisfied by buffered
 * bytes: deliver them from a job, so the caller's stack unwinds first and
 * the order of callbacks stays simple. */
static void
deliver_buffered_job (gpointer data)
{
  WeftConnection *self = data;
  if (!self->closed && self->rlen > 0 && self->mode != READ_NONE && !self->in_fd_callback)
    {
      guint8 *buf = self->rbuf;
      gsize len = self->rlen, cap = self->rcap;
      self->rbuf = NULL;
      self->rlen = self->rcap = 0;
      self->in_fd_callback = TRUE; /* batch the reader's writes */
      deliver (self, buf, cap, buf, len);
      leave_fd_callback (self);
      if (!self->closed)
        flush (self);
      if (!self->closed)
        update_interest (self);
    }
}

static void
reader_installed (WeftConnection *self)
{
  if (self->closed)
    return;
  if (self->rlen > 0 && !self->in_fd_callback)
    weft__context_post_continuation (self->ctx, deliver_buffered_job, weft_connection_ref (self),
                                     (GDestroyNotify) weft_connection_unref);
  if (!self->in_fd_callback)
    update_interest (self);
}

/**
 * weft_connection_start_reading:
 * @self: a connection
 * @func: (scope notified) (closure user_data) (destroy notify): gets the
 *   bytes as they arrive and returns how many it consumed
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data when the reader is replaced or
 *   stopped, or the connection closes; if that happens inside one of the
 *   connection's callbacks (@func closing the connection or installing
 *   another reader, say), once that callback returns
 *
 * Raw mode: @func sees every byte that arrives, together with whatever it
 * left unconsumed before. Unconsumed bytes are kept (up to
 * weft_connection_set_max_read_buffer(); beyond that the connection fails
 * with %G_IO_ERROR_MESSAGE_TOO_LARGE). Replaces any other reader.
 */
void
weft_connection_start_reading (WeftConnection *self, WeftConnectionReadFunc func,
                               gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (func != NULL);
  g_return_if_fail (on_own_context (self));
  set_reader (self, READ_RAW, func, user_data, notify);
  reader_installed (self);
}

/**
 * weft_connection_read_exactly:
 * @self: a connection
 * @n: how many bytes to wait for (> 0, at most the maximum read buffer)
 * @func: (scope notified) (closure user_data) (destroy notify): called once
 *   with exactly @n bytes
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data after the call, or when the request
 *   is replaced or the connection closes first
 *
 * One-shot: calls @func once @n bytes have arrived, then stops reading
 * (install the next reader from @func to go on). Replaces any other reader.
 */
void
weft_connection_read_exactly (WeftConnection *self, gsize n, WeftConnectionReadFunc func,
                              gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (func != NULL);
  g_return_if_fail (n > 0 && n <= max_read_buffer (self));
  g_return_if_fail (on_own_context (self));
  set_reader (self, READ_EXACTLY, func, user_data, notify);
  ext_get (self)->want = n;
  reader_installed (self);
}

/**
 * weft_connection_read_until:
 * @self: a connection
 * @delimiter: (array length=delimiter_len): the bytes to wait for, such as
 *   "\r\n"
 * @delimiter_len: their number (> 0)
 * @max_len: fail with %G_IO_ERROR_MESSAGE_TOO_LARGE if this many bytes
 *   arrive without the delimiter (0: the maximum read buffer)
 * @func: (scope notified) (closure user_data) (destroy notify): called once
 *   with the bytes up to and including the delimiter
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data after the call, or when the request
 *   is replaced or the connection closes first
 *
 * One-shot, like weft_connection_read_exactly(), for a delimiter.
 */
void
weft_connection_read_until (WeftConnection *self, const guint8 *delimiter, gsize delimiter_len,
                            gsize max_len, WeftConnectionReadFunc func, gpointer user_data,
                            GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (delimiter != NULL && delimiter_len > 0);
  g_return_if_fail (func != NULL);
  g_return_if_fail (on_own_context (self));
  set_reader (self, READ_UNTIL, func, user_data, notify);
  if (self->mode != READ_UNTIL)
    return; /* closed */
  ConnExt *ext = ext_get (self);
  ext->delim = g_memdup2 (delimiter, delimiter_len);
  ext->delim_len = delimiter_len;
  ext->want = max_len == 0 || max_len > ext->max_read_buffer ? ext->max_read_buffer : max_len;
  reader_installed (self);
}

/**
 * weft_connection_stop_reading:
 * @self: a connection
 *
 * Removes the reader (its notify runs). Bytes that arrive meanwhile stay in
 * the kernel, so the peer is slowed down by TCP flow control.
 */
void
weft_connection_stop_reading (WeftConnection *self)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (on_own_context (self));
  if (self->mode != READ_NONE)
    clear_reader (self);
  if (!self->in_fd_callback && !self->closed)
    update_interest (self);
}

/**
 * weft_connection_set_max_read_buffer:
 * @self: a connection
 * @max_bytes: the most unconsumed bytes kept (at least 1; default 1 MiB;
 *   values above 4 GiB - 1 are taken as 4 GiB - 1)
 *
 * Bounds the bytes the connection keeps for its reader: more unconsumed
 * input than this fails the connection with
 * %G_IO_ERROR_MESSAGE_TOO_LARGE, and the bound also caps
 * weft_connection_read_exactly() and weft_connection_read_until(). A
 * weft_connection_read_until() already installed keeps the length limit
 * it started with. Call it on the connection's context.
 */
void
weft_connection_set_max_read_buffer (WeftConnection *self, gsize max_bytes)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (max_bytes > 0);
  g_return_if_fail (on_own_context (self));
  ext_get (self)->max_read_buffer = MIN (max_bytes, (gsize) G_MAXUINT32);
}

static void
fail_literal (WeftConnection *self, GIOErrorEnum code, const char *message)
{
  fail (self, g_error_new_literal (G_IO_ERROR, code, message));
}

/* Hands @data to the reader until it stops taking bytes, and keeps the
 * rest in rbuf. @data points into scratch (@owned NULL) or into @owned, a
 * heap buffer of @owned_cap bytes that deliver() takes over. Inline: once
 * per read, in do_reads(). */
static inline __attribute__ ((always_inline)) void
deliver (WeftConnection *self, guint8 *owned, gsize owned_cap, const guint8 *data, gsize len)
{
  guint handovers = 0;
  while (len > 0 && !self->closed && self->mode != READ_NONE)
    {
      gsize used = 0;
      /* (Raw first: an HTTP connection's reader.) */
      switch ((ReadMode) __builtin_expect (self->mode, READ_RAW))
        {
        case READ_RAW:
          {
            ReadCb before = self->reader;
            guint was = callback_enter (self);
            used = self->reader.func (self, data, len, self->reader.data);
            callback_leave (self, was);
            g_return_if_fail (used <= len);
            /* Took nothing but handed over to another reader: that one
             * sees the bytes now, as no new edge may come to present them.
             * (Bounded: readers that hand over to each other for ever,
             * taking nothing, must not hold the worker.) */
            if (used == 0 && handovers++ < 16 &&
                (self->mode != READ_RAW || self->reader.func != before.func ||
                 self->reader.data != before.data))
              continue;
            break;
          }
        case READ_EXACTLY:
          if (len >= self->ext->want)
            {
              ReadCb cb = self->reader;
              used = self->ext->want;
              /* Clear first: the callback may install the next reader. */
              self->mode = READ_NONE;
              memset (&self->reader, 0, sizeof self->reader);
              guint was = callback_enter (self);
              cb.func (self, data, used, cb.data);
              callback_leave (self, was);
              release (self, cb.notify, cb.data);
            }
          break;
        case READ_UNTIL:
          {
            ConnExt *ext = self->ext; /* READ_UNTIL made it */
            const guint8 *hit = memmem (data, MIN (len, ext->want), ext->delim, ext->delim_len);
            if (hit != NULL)
              {
                ReadCb cb = self->reader;
                used = (gsize) (hit - data) + ext->delim_len;
                self->mode = READ_NONE;
                memset (&self->reader, 0, sizeof self->reader);
                g_clear_pointer (&ext->delim, g_free);
                guint was = callback_enter (self);
                cb.func (self, data, used, cb.data);
                callback_leave (self, was);
                release (self, cb.notify, cb.data);
              }
            else if (len >= ext->want)
              {
                fail_literal (self, G_IO_ERROR_MESSAGE_TOO_LARGE,
                              "the delimiter did not arrive within the length limit");
                return;
              }
            break;
          }
        case READ_NONE:
          break;
        }
      if (used == 0)
        break;
      data += used;
      len -= used;
    }

  if (len == 0 || self->closed || self->closing)
    {
      if (owned != NULL) /* (a call saved per scratch read) */
        g_free (owned); /* (closing: no reader will come for it) */
      return;
    }
  /* Keep the rest for the next reader, or for more bytes. The reader may
   * have left bytes kept from before (it ran with them), so rbuf is empty
   * here. */
  g_assert (self->rbuf == NULL);
  if (len > max_read_buffer (self))
    {
      g_free (owned);
      fail_literal (self, G_IO_ERROR_MESSAGE_TOO_LARGE,
                    "more unconsumed input than the read buffer limit");
      return;
    }
  if (owned != NULL)
    {
      memmove (owned, data, len);
      /* Do not sit on a big buffer for a few bytes. */
      if (owned_cap > 4 * len && owned_cap > 4096)
        {
          owned_cap = MAX (len, (gsize) 256);
          owned = g_realloc (owned, owned_cap);
        }
    }
  else
    {
      owned_cap = MAX (len, (gsize) 256);
      owned = g_malloc (owned_cap);
      memcpy (owned, data, len);
    }
  self->rbuf = owned;
  self->rlen = len;
  self->rcap = owned_cap;
}

/* Reads once: into the scratch buffer, or after the kept bytes. Returns
 * bytes read, 0 at end of file, -EAGAIN, or another -errno (error set).
 * @out_short: a plain read() that did not fill its room. */
static gssize
read_once (WeftConnection *self, guint8 **out_buf, gsize *out_cap, gsize *out_len,
           gboolean *out_short, GError **error)
{
  guint8 *buf;
  gsize room;
  gboolean owned = self->rlen > 0;

  if (owned)
    {
      gsize limit = max_read_buffer (self);
      if (self->rlen >= limit)
        return -ENOBUFS;
      if (self->rcap - self->rlen < 4096 && self->rcap < limit)
        {
          self->rcap = (guint32) MIN (MAX ((gsize) self->rcap * 2, (gsize) self->rlen + 4096),
                                      limit);
          self->rbuf = g_realloc (self->rbuf, self->rcap);
        }
      buf = self->rbuf + self->rlen;
      room = self->rcap - self->rlen;
    }
  else
    {
      buf = scratch_buffer ();
      room = MIN ((gsize) SCRATCH_SIZE, max_read_buffer (self));
    }

  gssize n;
  if (tls_session (self) != NULL)
    {
      GIOCondition want = 0;
      n = weft__tls_read (tls_session (self), buf, room, &want, error);
      *out_short = FALSE; /* record-sized: says nothing */
      if (n == WEFT_TLS_AGAIN)
        {
          self->tls_read_wants_out = (want & G_IO_OUT) != 0;
          return -EAGAIN;
        }
      self->tls_read_wants_out = FALSE;
      if (n == WEFT_TLS_ERROR)
        return -EPROTO;
    }
  else
    {
      do
        n = weft__sys_read (self->fd, buf, room);
      while (n < 0 && errno == EINTR);
      *out_short = (gsize) n < room; /* (only read when n > 0) */
      if (n < 0)
        {
          int err = errno;
          if (err == EAGAIN || err == EWOULDBLOCK)
            return -EAGAIN;
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (err), "read: %s",
                       g_strerror (err));
          return -err;
        }
    }
  if (n > 0)
    {
      if (owned)
        {
          /* The buffer goes to deliver(), which keeps what is left. */
          *out_buf = self->rbuf;
          *out_cap = self->rcap;
          *out_len = self->rlen + (gsize) n;
          self->rbuf = NULL;
          self->rlen = self->rcap = 0;
        }
      else
        {
          *out_buf = buf;
          *out_cap = 0;
          *out_len = (gsize) n;
        }
    }
  return n;
}

static void
handle_peer_closed (WeftConnection *self)
{
  if (self->peer_closed)
    return;
  self->peer_closed = TRUE;
  /* A coroutine driving the connection reads what is kept, then learns of
   * the end itself: no automatic close under it. */
  if (self->event_func != NULL || (self->ext != NULL && self->ext->wait_hook != NULL))
    emit (self, WEFT_CONNECTION_EVENT_PEER_CLOSED, NULL);
  else
    weft_connection_close (self);
  if (!self->closed && self->write_shut_done)
    finish_close (self, FALSE);
}

static void
do_reads (WeftConnection *self)
{
  for (guint i = 0; i < READS_PER_CALLBACK; i++)
    {
      if (self->closed || self->mode == READ_NONE || self->read_paused || self->peer_closed ||
          self->closing)
        return;
      guint8 *buf = NULL;
      gsize cap = 0, len = 0;
      gboolean short_read;
      GError *error = NULL;
      gssize n = read_once (self, &buf, &cap, &len, &short_read, &error);
      if (n == -EAGAIN)
        {
          /* Drained; or TLS wants to write first, and the OUT edge will
           * bring us back (see on_fd()). */
          self->drained = TRUE;
          return;
        }
      if (n == -ENOBUFS)
        {
          fail_literal (self, G_IO_ERROR_MESSAGE_TOO_LARGE,
                        "more unconsumed input than the read buffer limit");
          return;
        }
      if (n < 0)
        {
          fail (self, error);
          return;
        }
      if (n == 0)
        {
          self->drained = FALSE;
          handle_peer_closed (self);
          return;
        }
      touch (self);
      deliver (self, cap != 0 ? buf : NULL, cap, buf, len);
      /* A short read drained the socket (epoll reports anything that
       * arrives later). TLS reads are record-sized: read on to EAGAIN.
       * (Written once per read: update_interest() looks at it only
       * outside the fd callback, where the reader's callbacks run.) */
      gboolean drained = short_read && tls_session (self) == NULL && !self->fin_pending;
      self->drained = drained;
      if (drained)
        return;
    }
}

/* ---- writing ----------------------------------------------------------- */

static void
check_high_water (WeftConnection *self)
{
  if (!self->above_high &&
      (self->wq_bytes > high_water (self) || self->wq_files > MAX_QUEUED_FILES))
    {
      self->above_high = TRUE;
      self->read_paused = TRUE;
    }
}

static void
append_chunk (WeftConnection *self, Chunk *c)
{
  c->next = NULL;
  if (self->wq_tail != NULL)
    self->wq_tail->next = c;
  else
    self->wq_head = c;
  self->wq_tail = c;
}

static gboolean
can_write (WeftConnection *self)
{
  return !self->closed && !self->closing && !self->write_shutdown;
}

/* queued()'s flush now. */
static void
queued_flush (WeftConnection *self)
{
  /* A failed flush closes the connection, and the CLOSED handler may drop
   * the caller's last reference: hold one of our own. */
  weft_connection_ref (self);
  if (can_do_io (self) && !self->handshaking)
    {
      self->in_write_call = TRUE;
      flush (self);
      self->in_write_call = FALSE;
    }
  if (!self->closed)
    update_interest (self);
  weft_connection_unref (self);
}

/* After queueing: flush now unless a flush is coming anyway (the fd
 * callback flushes when it returns) or we are not on a worker. Inline:
 * for a write in the fd callback or corked (each pipelined answer), the
 * tests are all there is. */
static inline void
queued (WeftConnection *self)
{
  check_high_water (self);
  if (self->in_fd_callback || self->corked)
    return;
  queued_flush (self);
}

/**
 * weft_connection_write:
 * @self: a connection
 * @data: (array length=len): bytes to send; copied if they cannot be sent
 *   at once
 * @len: their number
 *
 * Queues bytes for sending, in order with everything written before.
 * Never blocks; check weft_connection_is_write_blocked() to stop producing
 * while the peer is slow, and resume on %WEFT_CONNECTION_EVENT_DRAINED.
 *
 * Returns: %TRUE if queued; %FALSE if the connection is closed or closing
 *   or its write side was shut down.
 */
gboolean
weft_connection_write (WeftConnection *self, const guint8 *data, gsize len)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (data != NULL || len == 0, FALSE);
  g_return_val_if_fail (on_own_context (self), FALSE);
  if (!can_write (self))
    return FALSE;
  if (len == 0)
    return TRUE;

  Chunk *tail = self->wq_tail;
  if (tail != NULL && tail->kind == CHUNK_COPY && tail->copy.cap - tail->len >= len)
    {
      /* Small writes share one chunk: fewer iovecs, fewer allocations. */
      memcpy (tail->copy.data + tail->len, data, len);
      tail->len += len;
    }
  else
    {
      Chunk *c = new_copy_chunk (MAX (len, SMALL_CHUNK_CAP));
      c->off = 0;
      c->len = len;
      memcpy (c->copy.data, data, len);
      append_chunk (self, c);
    }
  self->wq_bytes += len;
  queued (self);
  return TRUE;
}

/**
 * weft_connection_write_bytes:
 * @self: a connection
 * @bytes: bytes to send, referenced until sent
 *
 * Like weft_connection_write() without copying.
 *
 * Returns: %TRUE if queued; %FALSE if the connection is closed or closing.
 */
gboolean
weft_connection_write_bytes (WeftConnection *self, GBytes *bytes)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (bytes != NULL, FALSE);
  g_return_val_if_fail (on_own_context (self), FALSE);
  if (!can_write (self))
    return FALSE;
  gsize len = g_bytes_get_size (bytes);
  if (len == 0)
    return TRUE;
  if (len < WEFT_CONNECTION_SMALL_COPY)
    return weft_connection_write (self, g_bytes_get_data (bytes, NULL), len);
  Chunk *c = g_new (Chunk, 1);
  c->kind = CHUNK_BYTES;
  c->off = 0;
  c->len = len;
  c->bytes = g_bytes_ref (bytes);
  append_chunk (self, c);
  self->wq_bytes += len;
  queued (self);
  return TRUE;
}

/* Queues @length bytes of @fd (owned: closed once sent or dropped). */
static void
queue_file (WeftConnection *self, int fd, guint64 offset, guint64 length)
{
  Chunk *c = g_new (Chunk, 1);
  c->kind = CHUNK_FILE;
  c->off = 0;
  c->len = length;
  c->file.fd = fd;
  c->file.pos = offset;
  append_chunk (self, c);
  self->wq_bytes += length;
  if (self->wq_files < G_MAXUINT8)
    self->wq_files++;
  queued (self);
}

/* A file part left the queue. Past 255 the count is not known: it stays
 * there (blocked) until the queue is empty (here, or in flush()). */
static void
file_sent (WeftConnection *self)
{
  if (self->wq_head == NULL)
    self->wq_files = 0;
  else if (self->wq_files < G_MAXUINT8)
    self->wq_files--;
}

/**
 * weft_connection_send_file:
 * @self: a connection
 * @fd: a regular file open for reading; it is duplicated, so the caller
 *   may close its own descriptor at once
 * @offset: where to start
 * @length: how many bytes to send
 * @error: return location for a #GError
 *
 * Queues part of a file, sent with sendfile() (or read and encrypted, on a
 * TLS connection). Counts towards the write queue size like other bytes;
 * and since each part queued holds a descriptor, more than 16 of them
 * block the writer too (weft_connection_is_write_blocked()), until no
 * more than 8 are left.
 *
 * Returns: %TRUE if queued; %FALSE with @error set if the connection is
 *   closed (%G_IO_ERROR_CLOSED) or @fd cannot be duplicated.
 */
gboolean
weft_connection_send_file (WeftConnection *self, gint fd, guint64 offset, guint64 length,
                           GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (fd >= 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  g_return_val_if_fail (on_own_context (self), FALSE);
  if (!can_write (self))
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CLOSED, "the connection is closed");
      return FALSE;
    }
  if (length == 0)
    return TRUE;
  int copy = fcntl (fd, F_DUPFD_CLOEXEC, 3);
  if (copy < 0)
    {
      int err = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (err), "dup: %s",
                   g_strerror (err));
      return FALSE;
    }
  queue_file (self, copy, offset, length);
  return TRUE;
}

gboolean
weft__connection_send_file_take (WeftConnection *self, int fd, guint64 offset, guint64 length)
{
  if (!can_write (self) || length == 0)
    {
      close (fd);
      return length == 0 && can_write (self);
    }
  queue_file (self, fd, offset, length);
  return TRUE;
}

/**
 * weft_connection_get_write_queued:
 * @self: a connection
 *
 * Gets the size of the write queue: bytes written, GBytes and file parts
 * not yet handed to the kernel. Call it on the connection's context.
 *
 * Returns: bytes queued and not yet taken by the kernel
 */
gsize
weft_connection_get_write_queued (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->wq_bytes;
}

/**
 * weft_connection_set_write_watermarks:
 * @self: a connection
 * @high: above this many queued bytes, weft_connection_is_write_blocked()
 *   is %TRUE and the connection stops reading (default 1 MiB)
 * @low: once the queue falls to this, %WEFT_CONNECTION_EVENT_DRAINED is
 *   emitted and reading resumes (default 256 KiB; at most @high)
 *
 * Sets the write queue's water marks, the connection's backpressure. If
 * the queue is already above the new @high, the connection is blocked at
 * once. Call it on the connection's context.
 *
 * Pausing reads protects a server from a peer that does not read. Two
 * peers that both pause deadlock once the kernel buffers between them
 * fill; a connection that must go on reading while it writes (a client
 * streaming a large upload to an echoing server) sets @high above what it
 * queues, for example %G_MAXSIZE. More than 16 file parts queued
 * (weft_connection_send_file()) block it whatever the marks say.
 */
void
weft_connection_set_write_watermarks (WeftConnection *self, gsize high, gsize low)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (low <= high);
  g_return_if_fail (on_own_context (self));
  ConnExt *ext = ext_get (self);
  ext->high_water = high;
  ext->low_water = low;
  check_high_water (self);
}

/**
 * weft_connection_is_write_blocked:
 * @self: a connection
 *
 * Tells a producer to stop writing for now: the write queue went above the
 * high water mark (see weft_connection_set_write_watermarks()) and has not
 * yet fallen to the low one. Writes still succeed while blocked. Call it
 * on the connection's context.
 *
 * Returns: %TRUE between crossing the high water mark and the
 *   %WEFT_CONNECTION_EVENT_DRAINED event
 */
gboolean
weft_connection_is_write_blocked (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->above_high;
}

/* Where flush_tls() reads a file part to encrypt: not the scratch
 * buffer, which may hold the bytes a read function on this thread is
 * still looking at (it may write to a TLS connection on its context,
 * which flushes at once). discard_input() drops what it reads there too:
 * neither keeps anything in it across a call. */
#define FILE_READ_SIZE 16384
static GPrivate file_read_key = G_PRIVATE_INIT (g_free);
static _Thread_local WEFT_TLS_IE guint8 *file_read;

static guint8 *
file_read_buffer (void)
{
  return thread_buffer (&file_read, &file_read_key, FILE_READ_SIZE);
}

/* Sends what the socket takes. Returns FALSE if the connection failed.
 * Inline: flush() is its only caller, once per reply. */
static inline __attribute__ ((always_inline)) gboolean
flush_plain (WeftConnection *self)
{
  while (self->wq_head != NULL)
    {
      Chunk *c = self->wq_head;
      gssize n;
      if (c->kind == CHUNK_FILE)
        {
          off_t pos = (off_t) c->file.pos;
          gsize count = MIN (c->len, (gsize) (1 << 30));
          do
            n = sendfile (self->fd, c->file.fd, &pos, count);
          while (n < 0 && errno == EINTR);
          if (n == 0)
            {
              fail_literal (self, G_IO_ERROR_FAILED, "sendfile: the file is shorter than the "
                                                      "length queued");
              return FALSE;
            }
          if (n > 0)
            {
              c->file.pos += (guint64) n;
              c->len -= (gsize) n;
              self->wq_bytes -= (gsize) n;
              self->sent_since_check = TRUE;
              if (c->len == 0)
                {
                  self->wq_head = c->next;
                  if (self->wq_head == NULL)
                    self->wq_tail = NULL;
                  free_chunk (c);
                  file_sent (self);
                }
              continue;
            }
        }
      else
        {
          struct iovec iov[MAX_IOV];
          int k = 0;
          for (Chunk *p = c; p != NULL && p->kind != CHUNK_FILE && k < MAX_IOV; p = p->next)
            {
              const guint8 *base = p->kind == CHUNK_COPY
                                     ? p->copy.data
                                     : g_bytes_get_data (p->bytes, NULL);
              iov[k].iov_base = (void *) (base + p->off);
              iov[k].iov_len = p->len - p->off;
              k++;
            }
          /* One buffer, the usual case for a reply: send() skips copying
           * the msghdr and iovec into the kernel (and we skip filling
           * the msghdr). */
          do
            {
              if (k == 1)
                n = weft__sys_send (self->fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL);
              else
                {
                  struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t) k };
                  n = weft__sys_sendmsg (self->fd, &msg, MSG_NOSIGNAL);
                }
            }
          while (n < 0 && errno == EINTR);
          if (n > 0)
            {
              gsize left = (gsize) n;
              self->wq_bytes -= left;
              self->sent_since_check = TRUE;
              if (self->wq_bytes == 0)
                {
                  /* All of it, the usual reply (no file part either): no
                   * sums per chunk. */
                  drop_queue (self);
                  return TRUE;
                }
              while (left > 0)
                {
                  Chunk *h = self->wq_head;
                  gsize avail = h->len - h->off;
                  if (left < avail)
                    {
                      h->off += left;
                      break;
                    }
                  left -= avail;
                  self->wq_head = h->next;
                  if (self->wq_head == NULL)
                    self->wq_tail = NULL;
                  free_chunk (h);
                }
              continue;
            }
        }
      int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK)
        return TRUE;
      fail (self, g_error_new (G_IO_ERROR, g_io_error_from_errno (err), "write: %s",
                               g_strerror (err)));
      return FALSE;
    }
  return TRUE;
}

static gboolean
flush_tls (WeftConnection *self)
{
  while (self->wq_head != NULL)
    {
      Chunk *c = self->wq_head;
      const guint8 *data;
      gsize len;
      if (c->kind == CHUNK_FILE)
        {
          guint8 *buf = file_read_buffer ();
          gssize r;
          do
            r = pread (c->file.fd, buf, MIN (c->len, (gsize) FILE_READ_SIZE), (off_t) c->file.pos);
          while (r < 0 && errno == EINTR);
          if (r <= 0)
            {
              fail_literal (self, G_IO_ERROR_FAILED, "reading the file to send failed");
              return FALSE;
            }
          data = buf;
          len = (gsize) r;
        }
      else
        {
          const guint8 *base = c->kind == CHUNK_COPY ? c->copy.data
                                                     : g_bytes_get_data (c->bytes, NULL);
          data = base + c->off;
          len = c->len - c->off;
        }
      GIOCondition want = 0;
      GError *error = NULL;
      gssize n = weft__tls_write (tls_session (self), data, len, &want, &error);
      if (n == WEFT_TLS_AGAIN)
        {
          self->tls_write_wants_in = (want & G_IO_IN) != 0;
          return TRUE;
        }
      self->tls_write_wants_in = FALSE;
      if (n == WEFT_TLS_ERROR)
        {
          fail (self, error);
          return FALSE;
        }
      self->wq_bytes -= (gsize) n;
      self->sent_since_check = TRUE;
      gboolean done;
      if (c->kind == CHUNK_FILE)
        {
          c->file.pos += (guint64) n;
          c->len -= (gsize) n;
          done = c->len == 0;
        }
      else
        {
          c->off += (gsize) n;
          done = c->off == c->len;
        }
      if (done)
        {
          gboolean file = c->kind == CHUNK_FILE;
          self->wq_head = c->next;
          if (self->wq_head == NULL)
            self->wq_tail = NULL;
          free_chunk (c);
          if (file)
            file_sent (self);
        }
    }
  return TRUE;
}

static void
drained_job (gpointer data)
{
  WeftConnection *self = data;
  /* Not if a direct emission came first (drained_posted cleared). */
  if (!self->drained_posted)
    return;
  self->drained_posted = FALSE;
  if (!self->closed && !self->closing && !self->write_shutdown && !self->above_high)
    emit (self, WEFT_CONNECTION_EVENT_DRAINED, NULL);
}

/* A TLS connection's output ends with its close_notify, sent once the
 * rest is gone. Sent then whether or not the socket took it, it was lost
 * or cut short when the socket was full (a peer reading slowly), and the
 * peer saw a truncation. FALSE: the socket is full; the close_notify waits
 * for room as other output does (flush() comes back on the OUT edge), as
 * long as the write timeout, or the close's 30 s, allows. */
static gboolean
close_notify_sent (WeftConnection *self)
{
  if (tls_session (self) == NULL || self->write_shut_done || self->handshaking)
    return TRUE;
  ConnExt *ext = self->ext; /* (a TLS connection has one) */
  if (weft__tls_shutdown (tls_session (self)))
    {
      if (self->notify_waits && ext->linger_id != 0)
        {
          weft_context_remove (self->ctx, ext->linger_id);
          ext->linger_id = 0;
        }
      self->notify_waits = FALSE;
      return TRUE;
    }
  if (!self->notify_waits && ext->linger_id == 0)
    ext->linger_id = weft_context_add_timeout (self->ctx,
                                               self->write_ms != 0 ? self->write_ms
                                                                   : DEFAULT_CLOSE_LINGER_MS,
                                               linger_expired, self, NULL);
  self->notify_waits = TRUE;
  update_interest (self);
  return FALSE;
}

static void
flush (WeftConnection *self)
{
  if (self->closed || self->handshaking || self->wq_head == NULL)
    goto after;
  gsize before = self->wq_bytes;
  if (!(tls_session (self) != NULL ? flush_tls (self) : flush_plain (self)))
    return;
  /* Empty, the file count is exact again, also when what went last was
   * bytes after a count stuck at 255 (file_sent() sees file parts only). */
  if (self->wq_head == NULL)
    self->wq_files = 0;
  if (self->ext != NULL && self->wq_bytes < before) /* (no ext, no idle timeout) */
    touch (self);
  if (self->above_high && self->wq_bytes <= low_water (self) &&
      self->wq_files <= MAX_QUEUED_FILES / 2)
    {
      self->above_high = FALSE;
      self->read_paused = FALSE;
      /* Not from inside the caller's own write: a producer that writes
       * again on DRAINED would re-enter itself. */
      if (self->closing || self->write_shutdown)
        {
          /* Nobody may write more, but a coroutine waiting for room in
           * weft_connection_coro_write() must learn that it is there. */
          if (self->ext != NULL && self->ext->wait_hook != NULL)
            self->ext->wait_hook (self, WEFT_CONNECTION_EVENT_DRAINED, NULL,
                                  self->ext->wait_hook_data);
        }
      else if (self->in_write_call)
        {
          if (!self->drained_posted)
            {
              self->drained_posted = TRUE;
              weft__context_post_continuation (self->ctx, drained_job, weft_connection_ref (self),
                                               (GDestroyNotify) weft_connection_unref);
            }
        }
      else
        {
          self->drained_posted = FALSE; /* this one counts for it */
          emit (self, WEFT_CONNECTION_EVENT_DRAINED, NULL);
        }
      if (self->closed)
        return;
    }

after:
  if (self->closed)
    return;
  if (self->wq_head != NULL)
    {
      /* The write timeout's timer runs only while output waits. */
      if (self->write_ms != 0 && self->write_id == 0)
        arm_write_check (self);
      return;
    }
  /* Flushed: the usual connection, neither closing nor half-closed, is
   * done (the bits share a word: one test). */
  if (!(self->closing || self->write_shutdown) || self->handshaking)
    return;
  if (self->closing)
    close_flushed (self);
  else if (self->write_shutdown && !self->write_shut_done)
    {
      if (!close_notify_sent (self))
        return;
      shutdown (self->fd, SHUT_WR);
      self->write_shut_done = TRUE;
      if (self->peer_closed)
        finish_close (self, FALSE);
    }
}

/* ---- interest and the fd callback -------------------------------------- */

static void
read_more_job (gpointer data)
{
  WeftConnection *self = data;
  self->read_more_posted = FALSE;
  if (self->closed || self->handshaking || self->in_fd_callback)
    return;
  self->in_fd_callback = TRUE; /* batch the reader's writes */
  do_reads (self);
  leave_fd_callback (self);
  if (!self->closed)
    flush (self);
  if (!self->closed)
    update_interest (self);
}

static void
update_interest (WeftConnection *self)
{
  GIOCondition want;
  /* The rare states first, in one test (the bits share a word). */
  if (G_UNLIKELY (self->closed || self->handshaking || self->discarding))
    {
      if (self->closed)
        return;
      want = self->handshaking ? self->interest /* drive_handshake() chose it */ : G_IO_IN;
    }
  else
    {
      want = 0;
      if (self->mode != READ_NONE && !(self->read_paused || self->peer_closed || self->closing))
        want |= G_IO_IN;
      if (self->wq_head != NULL || self->notify_waits)
        want |= G_IO_OUT;
      if (G_UNLIKELY (self->tls_read_wants_out || self->tls_write_wants_in))
        {
          if (self->tls_read_wants_out && (want & G_IO_IN))
            want |= G_IO_OUT;
          if (self->tls_write_wants_in && (want & G_IO_OUT))
            want |= G_IO_IN;
        }
      /* Not reading: still learn when the peer goes away, without taking
       * its bytes (flow control stays with the kernel). */
      if (!(want & G_IO_IN) && !self->peer_closed && !self->fin_seen)
        want |= WEFT__IO_RDHUP;
    }
  if (want != self->interest)
    {
      self->interest = want;
      weft__context_set_fd_interest (self->ctx, self->fd_id, want, NULL);
    }
  /* Edge-triggered: bytes left in the socket (the read budget ran out, or
   * the reader paused and resumed within one callback) raise no new edge.
   * Read them from a job. */
  if ((want & G_IO_IN) && self->mode != READ_NONE && !self->read_paused && !self->drained &&
      !self->read_more_posted && !self->in_fd_callback)
    {
      self->read_more_posted = TRUE;
      weft__context_post_continuation (self->ctx, read_more_job, weft_connection_ref (self),
                                       (GDestroyNotify) weft_connection_unref);
    }
}

/* Whether the peer shut down its sending side, with bytes possibly still
 * unread. TCP says so in its state; elsewhere a peek can only tell when
 * nothing is left unread. */
static gboolean
peer_has_shut_down (WeftConnection *self)
{
  struct tcp_info info;
  socklen_t len = sizeof info;
  if (getsockopt (self->fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0)
    return info.tcpi_state == TCP_CLOSE_WAIT || info.tcpi_state == TCP_LAST_ACK ||
           info.tcpi_state == TCP_CLOSING || info.tcpi_state == TCP_CLOSE ||
           info.tcpi_state == TCP_TIME_WAIT;
  char c;
  ssize_t n = recv (self->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0;
}

/* on_fd()'s rare cases, out of line: its frame stays small. */
static __attribute__ ((noinline)) void
fail_on_socket_error (WeftConnection *self, int fd)
{
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt (fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0)
    fail (self, g_error_new (G_IO_ERROR, g_io_error_from_errno (err), "socket: %s",
                             g_strerror (err)));
}

/* EPOLLRDHUP while not reading, or a readiness from before the reader
 * went away. */
static __attribute__ ((noinline)) void
check_peer_shut_down (WeftConnection *self, int fd)
{
  if (peer_has_shut_down (self))
    {
      int unread = 0;
      /* Stop watching for it (it stays reported). Unread bytes come
       * first: the next reader gets them, then end of file. */
      self->fin_seen = TRUE;
      if (ioctl (fd, FIONREAD, &unread) == 0 && unread == 0)
        handle_peer_closed (self);
    }
}

static gboolean
on_fd (gint fd, GIOCondition condition, gpointer user_data)
{
  WeftConnection *self = user_data;
  if (self->closed)
    return G_SOURCE_REMOVE;

  /* No reference of our own: the source's goes only after this returns
   * (a removal while its callback runs defers source_gone()). */
  self->in_fd_callback = TRUE;
  if (condition & (WEFT__IO_RDHUP | G_IO_HUP | G_IO_ERR))
    self->fin_pending = TRUE; /* edge-triggered: said once only */
  if (self->discarding)
    ; /* lingering: leave_fd_callback() reads what arrived */
  else if (self->handshaking)
    drive_handshake (self);
  else
    {
      if (condition & G_IO_ERR)
        fail_on_socket_error (self, fd);
      if (!self->closed && (condition & G_IO_IN) && !(self->interest & G_IO_IN))
        check_peer_shut_down (self, fd);
      else if (!self->closed && ((condition & (G_IO_IN | G_IO_HUP | G_IO_ERR))
                                 || ((condition & G_IO_OUT) && self->tls_read_wants_out)))
        do_reads (self);
      if (!self->closed && (condition & G_IO_HUP) && !(self->interest & G_IO_IN))
        {
          /* Hung up while we were not reading: nothing more can happen. */
          if (!self->peer_closed)
            handle_peer_closed (self);
          if (!self->closed)
            fail_literal (self, G_IO_ERROR_CONNECTION_CLOSED, "the peer hung up");
        }
    }
  leave_fd_callback (self); /* (and reads what a lingering close drops) */
  if (!self->closed && !self->handshaking)
    flush (self);
  gboolean keep = !self->closed;
  if (keep)
    update_interest (self);
  return keep ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

/* ---- closing ----------------------------------------------------------- */

static void
remove_timeouts (WeftConnection *self)
{
  ConnExt *ext = self->ext;
  guint *ids[] = { &self->write_id, ext ? &ext->idle_id : NULL, ext ? &ext->linger_id : NULL,
                   ext ? &ext->handshake_id : NULL };
  for (guint i = 0; i < G_N_ELEMENTS (ids); i++)
    if (ids[i] != NULL && *ids[i] != 0)
      {
        weft_context_remove (self->ctx, *ids[i]);
        *ids[i] = 0;
      }
}

static void
finish_close (WeftConnection *self, gboolean abortive)
{
  if (self->closed)
    return;
  self->closed = TRUE;
  weft_connection_ref (self);
  remove_timeouts (self);
  /* Unregister before closing, so the fd number cannot be reused while the
   * engine still watches it. The source's reference goes with it. */
  guint id = self->fd_id; /* 0 if the source is already gone */
  self->fd_id = 0;
  if (!abortive && tls_session (self) != NULL && !self->write_shut_done && !self->handshaking)
    weft__tls_shutdown (tls_session (self));
  if (abortive)
    {
      struct linger lg = { .l_onoff = 1, .l_linger = 0 };
      setsockopt (self->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
  if (id != 0)
    weft_context_remove (self->ctx, id); /* closes the fd, now or on return */
  drop_queue (self);
  g_clear_pointer (&self->rbuf, g_free);
  self->rlen = self->rcap = 0;
  if (self->mode != READ_NONE)
    clear_reader (self);

  if (self->ext != NULL && self->ext->tls_done != NULL)
    {
      /* Closed during the handshake. */
      ConnExt *ext = self->ext;
      WeftConnectFunc done = ext->tls_done;
      ext->tls_done = NULL;
      GError *error = g_error_new_literal (G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                                           "closed during the TLS handshake");
      done (NULL, error, ext->tls_done_data);
      g_error_free (error);
      if (ext->tls_done_notify != NULL)
        ext->tls_done_notify (ext->tls_done_data);
    }

  emit (self, WEFT_CONNECTION_EVENT_CLOSED, NULL);
  WeftConnectionEventFunc ev = self->event_func;
  self->event_func = NULL;
  if (ev != NULL)
    release (self, self->event_notify, self->event_data);
  self->event_notify = NULL;
  if (self->listener != NULL)
    weft__listener_connection_closed (self->listener, self);
  weft_connection_unref (self);
}

/* Emits ERROR, then closes abortively. Takes @error. */
static void
fail (WeftConnection *self, GError *error)
{
  if (self->closed)
    {
      g_error_free (error);
      return;
    }
  /* TLS failures after the handshake (a bad record, an alert) are logged
   * like failed handshakes, quietly: a hostile peer must not flood the
   * log. The application sees every error as the ERROR event. */
  if (tls_session (self) != NULL && !self->handshaking)
    g_info ("TLS connection closed: %s", error->message);
  /* From a timer (idle, write, linger) nothing else holds the connection:
   * an event function that closes it on ERROR would drop the last
   * reference while it runs, and the close below would follow. */
  weft_connection_ref (self);
  emit (self, WEFT_CONNECTION_EVENT_ERROR, error);
  g_error_free (error);
  finish_close (self, TRUE);
  weft_connection_unref (self);
}

static gboolean
linger_expired (gpointer data)
{
  WeftConnection *self = data;
  self->ext->linger_id = 0;
  fail_literal (self, G_IO_ERROR_TIMED_OUT, "the peer did not take the output in time");
  return G_SOURCE_REMOVE;
}

/* Lingering: reads and drops what the peer still sends, until its end of
 * file, the byte budget or the linger timeout; then closes. Into the file
 * read buffer, which holds nothing between calls: not the scratch buffer,
 * where a read function on this thread (another connection's, on this
 * context, that made this one close) may still be looking at its data. */
static void
discard_input (WeftConnection *self)
{
  guint8 *buf = file_read_buffer ();
  for (;;)
    {
      ssize_t n = weft__sys_recv (self->fd, buf, FILE_READ_SIZE, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
      if (n <= 0 || (guint64) n > self->ext->discard_left)
        {
          /* The peer's end (or its reset), or more than we will take. */
          finish_close (self, n > 0);
          return;
        }
      self->ext->discard_left -= (guint64) n;
    }
}

static gboolean
discard_expired (gpointer data)
{
  WeftConnection *self = data;
  self->ext->linger_id = 0;
  finish_close (self, FALSE);
  return G_SOURCE_REMOVE;
}

/* The output of a closing connection is gone: close, or linger first. */
static void
close_flushed (WeftConnection *self)
{
  if (self->discarding)
    return; /* (every flush ends here: the end comes from discard_input) */
  if (!close_notify_sent (self))
    return; /* (flush() calls again) */
  int unread = 0;
  if (!self->lingering || self->peer_closed ||
      (!self->linger_always && ioctl (self->fd, FIONREAD, &unread) == 0 && unread == 0))
    {
      finish_close (self, FALSE);
      return;
    }
  /* Closing a socket with unread input makes the kernel send a reset,
   * which may reach the peer before it has read our last answer (an
   * error such as 413 sent while its body still arrives). Shut the write
   * side instead, so the answer and an end of file go out, and drop input
   * until the peer closes too. */
  self->discarding = TRUE;
  ConnExt *ext = self->ext; /* made by weft__connection_close_lingering() */
  if (ext->idle_id != 0) /* the linger timer bounds it now */
    {
      weft_context_remove (self->ctx, ext->idle_id);
      ext->idle_id = 0;
    }
  if (ext->linger_id != 0)
    weft_context_remove (self->ctx, ext->linger_id);
  ext->linger_id = weft_context_add_timeout (self->ctx, ext->linger_ms, discard_expired, self,
                                             NULL);
  if (tls_session (self) != NULL && !self->write_shut_done)
    weft__tls_shutdown (tls_session (self));
  shutdown (self->fd, SHUT_WR);
  self->write_shut_done = TRUE;
  /* Edge-triggered: input already there raises no new edge, so read it
   * now; from inside the fd callback (whose reads may still be using the
   * scratch buffer) that is done when the callback ends. */
  if (!self->in_fd_callback)
    {
      discard_input (self);
      if (!self->closed)
        update_interest (self);
    }
}

void
weft__connection_close_lingering (WeftConnection *self, guint linger_ms, guint64 max_discard,
                                  gboolean always)
{
  if (self->closed || self->closing)
    return;
  ConnExt *ext = ext_get (self);
  self->lingering = TRUE;
  self->linger_always = always;
  ext->linger_ms = MAX (linger_ms, 1u);
  ext->discard_left = MAX (max_discard, (guint64) 1);
  weft_connection_close (self);
}

/**
 * weft_connection_close:
 * @self: a connection
 *
 * Graceful close: stops reading, sends what is queued, then closes (a TLS
 * connection sends close_notify first). If the output is not taken within
 * the write timeout (or 30 s without one), the connection fails with
 * %G_IO_ERROR_TIMED_OUT and is closed abortively. The %WEFT_CONNECTION_EVENT_CLOSED
 * event follows. Calling it again, or on a closed connection, does nothing.
 */
void
weft_connection_close (WeftConnection *self)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (on_own_context (self));
  if (self->closed || self->closing)
    return;
  self->closing = TRUE;
  if (self->mode != READ_NONE)
    clear_reader (self);
  if (self->wq_head == NULL)
    {
      close_flushed (self);
      return;
    }
  if (self->write_ms == 0)
    ext_get (self)->linger_id = weft_context_add_timeout (self->ctx, DEFAULT_CLOSE_LINGER_MS,
                                                          linger_expired, self, NULL);
  if (!self->in_fd_callback)
    {
      if (can_do_io (self))
        flush (self);
      if (!self->closed)
        update_interest (self);
    }
}

/**
 * weft_connection_abort:
 * @self: a connection
 *
 * Abortive close: drops queued output and resets the connection (the peer
 * sees ECONNRESET). The %WEFT_CONNECTION_EVENT_CLOSED event follows at once.
 */
void
weft_connection_abort (WeftConnection *self)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (on_own_context (self));
  finish_close (self, TRUE);
}

/**
 * weft_connection_shutdown_write:
 * @self: a connection
 *
 * Half-close: once the queued output is sent, shuts down the sending side
 * (the peer reads end of file) while reading goes on. Further writes
 * return %FALSE. If the peer has closed its side too, the connection
 * closes.
 */
void
weft_connection_shutdown_write (WeftConnection *self)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (on_own_context (self));
  if (self->closed || self->write_shutdown)
    return;
  self->write_shutdown = TRUE;
  if (!self->in_fd_callback && can_do_io (self))
    flush (self);
  else if (!self->in_fd_callback && !self->closed)
    update_interest (self);
}

/**
 * weft_connection_is_closed:
 * @self: a connection
 *
 * Tells whether the socket is closed. A connection closing gracefully
 * (weft_connection_close() still sending its queue) is not closed yet.
 * Call it on the connection's context.
 *
 * Returns: %TRUE once the socket is closed
 */
gboolean
weft_connection_is_closed (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, TRUE);
  return self->closed;
}

/* ---- timeouts ---------------------------------------------------------- */

static gboolean
idle_check (gpointer data)
{
  WeftConnection *self = data;
  gint64 idle = g_get_monotonic_time () - self->ext->last_activity;
  if (idle >= (gint64) self->ext->idle_ms * 1000)
    {
      self->ext->idle_id = 0;
      fail_literal (self, G_IO_ERROR_TIMED_OUT, "idle timeout");
      return G_SOURCE_REMOVE;
    }
  return G_SOURCE_CONTINUE;
}

/**
 * weft_connection_set_idle_timeout:
 * @self: a connection
 * @timeout_ms: fail with %G_IO_ERROR_TIMED_OUT (and close abortively) when
 *   no byte was read or written for this long; 0 turns it off (the default)
 *
 * Checked every @timeout_ms, so a connection may stay up to twice as long.
 */
void
weft_connection_set_idle_timeout (WeftConnection *self, guint timeout_ms)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (on_own_context (self));
  if (self->closed)
    return;
  if (timeout_ms == 0 && self->ext == NULL)
    return; /* off already */
  ConnExt *ext = ext_get (self);
  if (ext->idle_id != 0)
    weft_context_remove (self->ctx, ext->idle_id);
  ext->idle_id = 0;
  ext->idle_ms = timeout_ms;
  ext->last_activity = g_get_monotonic_time ();
  if (timeout_ms != 0)
    ext->idle_id = weft_context_add_timeout (self->ctx, timeout_ms, idle_check, self, NULL);
}

static gboolean write_check (gpointer data);

static void
arm_write_check (WeftConnection *self)
{
  self->sent_since_check = FALSE;
  self->stalled_checks = 0;
  self->write_id = weft_context_add_timeout (self->ctx, MAX (self->write_ms / 2, 1), write_check,
                                             self, NULL);
}

static gboolean
write_check (gpointer data)
{
  WeftConnection *self = data;
  /* Checked every write_ms / 2 by a progress count, not a clock read per
   * write: three checks in a row with output queued and none taken means
   * the peer took nothing for between 1.5 and 2 x write_ms. */
  if (self->wq_head == NULL)
    {
      self->write_id = 0; /* nothing waits: rearmed by the next flush that leaves some */
      return G_SOURCE_REMOVE;
    }
  if (self->sent_since_check)
    self->stalled_checks = 0;
  else
    self->stalled_checks++;
  self->sent_since_check = FALSE;
  if (self->stalled_checks >= 3)
    {
      self->write_id = 0;
      fail_literal (self, G_IO_ERROR_TIMED_OUT, "write timeout: the peer takes no output");
      return G_SOURCE_REMOVE;
    }
  return G_SOURCE_CONTINUE;
}

/**
 * weft_connection_set_write_timeout:
 * @self: a connection
 * @timeout_ms: fail with %G_IO_ERROR_TIMED_OUT (and close abortively) when
 *   output is queued and the peer took none of it for this long; 0 turns
 *   it off (the default; a graceful close still gives up after 30 s)
 *
 * Sets the write timeout, replacing any earlier one; does nothing on a
 * closed connection. Progress is checked every @timeout_ms / 2 and the
 * connection fails after three checks in a row saw none, so a stalled
 * peer is caught 1.5 to 2 times @timeout_ms after it last took output.
 * Call it on the connection's context.
 */
void
weft_connection_set_write_timeout (WeftConnection *self, guint timeout_ms)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (on_own_context (self));
  if (self->closed)
    return;
  if (self->write_id != 0)
    weft_context_remove (self->ctx, self->write_id);
  self->write_id = 0;
  self->write_ms = timeout_ms;
  if (timeout_ms != 0 && self->wq_head != NULL)
    arm_write_check (self);
}

/* ---- addresses --------------------------------------------------------- */

static GSocketAddress *
address_of (int fd, gboolean peer)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  int r = peer ? getpeername (fd, (struct sockaddr *) &ss, &len)
               : getsockname (fd, (struct sockaddr *) &ss, &len);
  if (r < 0)
    return NULL;
  return g_socket_address_new_from_native (&ss, len);
}

/**
 * weft_connection_get_peer_address:
 * @self: a connection
 *
 * Asks the kernel for the address of the other end (getpeername()); the
 * caller owns the new object. Call it on the connection's context.
 *
 * Returns: (transfer full) (nullable): the peer's address, or %NULL once
 *   closed or if the kernel no longer knows it
 */
GSocketAddress *
weft_connection_get_peer_address (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->closed ? NULL : address_of (self->fd, TRUE);
}

/**
 * weft_connection_get_local_address:
 * @self: a connection
 *
 * Asks the kernel for this end's address (getsockname()); the caller owns
 * the new object. Call it on the connection's context.
 *
 * Returns: (transfer full) (nullable): the local address, or %NULL once
 *   closed
 */
GSocketAddress *
weft_connection_get_local_address (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->closed ? NULL : address_of (self->fd, FALSE);
}

/* Kept here, not by the HTTP layer: only a server writing an access log
 * asks, and an idle connection's state stays 8 bytes smaller. */
const char *
weft__connection_peer_text (WeftConnection *self)
{
  ConnExt *ext = ext_get (self);
  if (ext->peer_text == NULL)
    {
      GSocketAddress *a = weft_connection_get_peer_address (self);
      if (G_IS_INET_SOCKET_ADDRESS (a))
        ext->peer_text = g_inet_address_to_string (
            g_inet_socket_address_get_address (G_INET_SOCKET_ADDRESS (a)));
      else
        ext->peer_text = g_strdup ("-");
      g_clear_object (&a);
    }
  return ext->peer_text;
}

/* ---- TLS --------------------------------------------------------------- */

static void
handshake_finished (WeftConnection *self, GError *error)
{
  ConnExt *ext = self->ext; /* made by weft_connection_start_tls() */
  WeftConnectFunc done = ext->tls_done;
  gpointer data = ext->tls_done_data;
  GDestroyNotify notify = ext->tls_done_notify;
  ext->tls_done = NULL;
  ext->tls_done_notify = NULL;
  if (ext->handshake_id != 0)
    {
      weft_context_remove (self->ctx, ext->handshake_id);
      ext->handshake_id = 0;
    }
  self->handshaking = FALSE;
  self->interest = (GIOCondition) -1; /* force the next update */
  /* The peer's first bytes may have come with its last handshake flight,
   * without an edge of their own. */
  self->drained = FALSE;
  if (error == NULL)
    {
      const char *alpn = weft__tls_get_alpn (tls_session (self));
      const char *sni = weft__tls_get_server_name (tls_session (self));
      ext->alpn = g_strdup (alpn);
      if (sni != NULL)
        {
          g_free (ext->server_name);
          ext->server_name = g_strdup (sni);
        }
      touch (self);
      if (done != NULL)
        done (self, NULL, data);
    }
  else
    {
      if (done != NULL)
        done (NULL, error, data);
    }
  if (notify != NULL)
    notify (data);
  if (error != NULL)
    {
      emit (self, WEFT_CONNECTION_EVENT_ERROR, error);
      g_error_free (error);
      finish_close (self, TRUE);
    }
}

static void
drive_handshake (WeftConnection *self)
{
  GIOCondition want = 0;
  GError *error = NULL;
  int r = weft__tls_handshake (tls_session (self), &want, &error);
  if (r == WEFT_TLS_AGAIN)
    {
      if (want != self->interest)
        {
          self->interest = want;
          weft__context_set_fd_interest (self->ctx, self->fd_id, want, NULL);
        }
      return;
    }
  handshake_finished (self, r == WEFT_TLS_ERROR ? error : NULL);
  if (!self->closed)
    {
      /* Bytes may have arrived with the last handshake flight. */
      if (self->mode != READ_NONE)
        do_reads (self);
      if (!self->closed && !self->in_fd_callback)
        flush (self);
      if (!self->closed)
        update_interest (self);
    }
}

static gboolean
handshake_expired (gpointer data)
{
  WeftConnection *self = data;
  self->ext->handshake_id = 0;
  /* The timer holds no reference, and the failure's callbacks may drop
   * the last one (an outgoing connect's done unrefs the connection it will
   * never hand out) before handshake_finished() has closed it. */
  weft_connection_ref (self);
  if (self->handshaking)
    handshake_finished (self, g_error_new_literal (G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                                                   "TLS handshake timeout"));
  weft_connection_unref (self);
  return G_SOURCE_REMOVE;
}

static void
start_tls_job (gpointer data)
{
  WeftConnection *self = data;
  if (!self->closed && self->handshaking && !self->in_fd_callback)
    {
      self->in_fd_callback = TRUE;
      drive_handshake (self);
      leave_fd_callback (self);
      if (!self->closed && !self->handshaking)
        {
          flush (self);
          update_interest (self);
        }
    }
}

/**
 * weft_connection_start_tls:
 * @self: a connection with nothing read from it yet
 * @config: a server or client configuration
 * @server_name: (nullable): for a client, the name to send (SNI) and to
 *   verify the certificate against
 * @func: (scope notified) (closure user_data) (destroy notify) (nullable):
 *   called on @self's context when the handshake succeeded (with @self) or
 *   failed (with %NULL and the error; @self is then closed)
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data after @func ran
 *
 * Starts TLS on the connection, as server or client depending on @config.
 * Output written meanwhile waits for the handshake; readers see decrypted
 * bytes. The handshake must finish within the configuration's handshake
 * timeout.
 */
void
weft_connection_start_tls (WeftConnection *self, WeftTlsConfig *config,
                           const gchar *server_name, WeftConnectFunc func, gpointer user_data,
                           GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (config != NULL);
  g_return_if_fail (tls_session (self) == NULL);
  g_return_if_fail (on_own_context (self));

  GError *error = NULL;
  if (self->closed)
    {
      error = g_error_new_literal (G_IO_ERROR, G_IO_ERROR_CLOSED, "the connection is closed");
      if (func != NULL)
        func (NULL, error, user_data);
      if (notify != NULL)
        notify (user_data);
      g_error_free (error);
      return;
    }
  gboolean server = weft__tls_config_is_server (config);
  ConnExt *ext = ext_get (self);
  ext->tls = weft__tls_session_new (config, self->fd, server, server_name, &error);
  self->is_tls = TRUE;
  ext->tls_config = weft_tls_config_ref (config);
  ext->server_name = g_strdup (server_name);
  ext->tls_done = func;
  ext->tls_done_data = user_data;
  ext->tls_done_notify = notify;
  self->handshaking = TRUE;
  if (ext->tls == NULL)
    {
      handshake_finished (self, error);
      return;
    }
  guint timeout = weft_tls_config_get_handshake_timeout (config);
  if (timeout != 0)
    ext->handshake_id = weft_context_add_timeout (self->ctx, timeout, handshake_expired, self,
                                                  NULL);
  /* A client speaks first; a server waits for the hello. Either way the
   * first step runs on the context, on a worker. */
  self->interest = server ? G_IO_IN : G_IO_OUT;
  /* From the fd callback this takes effect when it returns. */
  weft__context_set_fd_interest (self->ctx, self->fd_id, self->interest, NULL);
  if (!server)
    weft__context_post_continuation (self->ctx, start_tls_job, weft_connection_ref (self),
                                     (GDestroyNotify) weft_connection_unref);
}

/**
 * weft_connection_is_tls:
 * @self: a connection
 *
 * Tells whether weft_connection_start_tls() was called on @self (directly,
 * by a listener with TLS, or by weft_connection_connect_async() with a
 * configuration). It stays %TRUE while the handshake runs and after it
 * failed. Call it on the connection's context.
 *
 * Returns: %TRUE if TLS was started on @self
 */
gboolean
weft_connection_is_tls (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->is_tls;
}

/**
 * weft_connection_get_alpn_protocol:
 * @self: a connection
 *
 * Gets the application protocol the TLS handshake agreed on (see
 * weft_tls_config_set_alpn_protocols()). The string belongs to the
 * connection. Call it on the connection's context.
 *
 * Returns: (nullable): the protocol ALPN chose (such as "http/1.1"), or
 *   %NULL (no TLS, handshake not finished, or no protocol agreed)
 */
const gchar *
weft_connection_get_alpn_protocol (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->ext != NULL ? self->ext->alpn : NULL;
}

/**
 * weft_connection_get_server_name:
 * @self: a connection
 *
 * Gets the TLS server name (SNI) of the connection. The string belongs to
 * the connection: copy it to keep it. Call it on the connection's context.
 *
 * Returns: (nullable): on a TLS server connection the name the client asked
 *   for (SNI); on a client connection the name given to
 *   weft_connection_start_tls(); otherwise %NULL
 */
const gchar *
weft_connection_get_server_name (WeftConnection *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->ext != NULL ? self->ext->server_name : NULL;
}
