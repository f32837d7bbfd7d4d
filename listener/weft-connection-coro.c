/* weft-connection-coro.c: a connection driven from a coroutine.
 *
 * The calls install the connection's ordinary one-shot readers, with the
 * connection's own state (CoroIo, one per connection, made on first use)
 * as their data, and suspend the calling coroutine until the reader has
 * the bytes or an event ends the wait. Everything runs on the connection's
 * context (the coroutine must run there), so CoroIo needs no lock; only
 * the wake-up itself is the coroutines' thread-safe one.
 *
 * The bytes a reader took are kept in CoroIo, not on the coroutine's
 * stack: a wait's timeout and the bytes may race (both are jobs of the
 * context), and bytes taken from the connection must never be lost, so a
 * read that has bytes returns them whatever ended its wait. Nothing of
 * the connection points into a coroutine's stack, so a coroutine
 * abandoned with its context leaves nothing dangling.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-connection-coro.h"
#include "weft-connection-private.h"
#include "weft-coro-private.h"

#include <string.h>

typedef struct {
  WeftCoro *reader;   /* (owned) (nullable) suspended in a read */
  WeftCoro *writer;   /* (owned) (nullable) suspended until output drains */
  GBytes *in;         /* (owned) (nullable) what the read's reader took */
  gsize raw_max;      /* a plain read takes at most this much */
  GError *error;      /* (owned) (nullable) the connection's ERROR event */
  gboolean peer_closed;
} CoroIo;

typedef enum {
  KIND_SOME,
  KIND_EXACTLY,
  KIND_UNTIL,
} ReadKind;

static void
wake (WeftCoro *c)
{
  if (c != NULL)
    weft__coro_wake (c, WEFT_CORO_WAKE_EVENT);
}

static void
io_hook (WeftConnection *conn, WeftConnectionEvent event, const GError *error, gpointer data)
{
  CoroIo *io = data;
  switch (event)
    {
    case WEFT_CONNECTION_EVENT_ERROR:
      if (io->error == NULL && error != NULL)
        io->error = g_error_copy (error);
      wake (io->reader);
      wake (io->writer);
      break;
    case WEFT_CONNECTION_EVENT_PEER_CLOSED:
      io->peer_closed = TRUE;
      wake (io->reader);
      break;
    case WEFT_CONNECTION_EVENT_CLOSED:
      wake (io->reader);
      wake (io->writer);
      break;
    case WEFT_CONNECTION_EVENT_DRAINED:
      wake (io->writer);
      break;
    }
}

static void
io_free (gpointer data)
{
  CoroIo *io = data;
  /* A coroutine abandoned with its context while it waited. */
  g_clear_pointer (&io->reader, weft_coro_unref);
  g_clear_pointer (&io->writer, weft_coro_unref);
  g_clear_pointer (&io->in, g_bytes_unref);
  g_clear_error (&io->error);
  g_free (io);
}

static CoroIo *
get_io (WeftConnection *conn)
{
  CoroIo *io = weft__connection_get_wait_hook_data (conn);
  if (io == NULL)
    {
      io = g_new0 (CoroIo, 1);
      weft__connection_set_wait_hook (conn, io_hook, io, io_free);
    }
  return io;
}

/* The calling coroutine, if it runs on @conn's context. */
static WeftCoro *
check_caller (WeftConnection *conn, const char *func)
{
  WeftCoro *c = weft__coro_current ();
  if (c == NULL)
    {
      g_critical ("%s: not called from a coroutine", func);
      return NULL;
    }
  if (weft_coro_get_context (c) != weft_connection_get_context (conn))
    {
      g_critical ("%s: the coroutine does not run on the connection's context", func);
      return NULL;
    }
  return c;
}

/* Why the connection can do no more: its error, or a plain one. */
static void
set_ended_error (CoroIo *io, WeftConnection *conn, GError **error)
{
  if (io->error != NULL)
    g_propagate_error (error, g_error_copy (io->error));
  else if (io->peer_closed)
    g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                         "the peer closed the connection");
  else if (weft_connection_is_closed (conn))
    g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CLOSED, "the connection is closed");
  else
    g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                         "the peer closed the connection");
}

static gsize
on_bytes (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  CoroIo *io = user_data;
  gsize take = len;
  if (io->raw_max != 0)
    {
      /* A plain read is one-shot too: the rest stays for the next one. */
      take = MIN (len, io->raw_max);
      io->raw_max = 0;
      weft_connection_stop_reading (conn);
    }
  g_assert (io->in == NULL);
  io->in = g_bytes_new (data, take);
  wake (io->reader);
  return take;
}

/* Suspends @c, registered in *@slot, until a wake, a timeout or an
 * interrupt. Returns 0, -ETIMEDOUT or -EINTR. */
static gint
suspend (WeftCoro *c, WeftCoro **slot, gint timeout_ms)
{
  if (!weft__coro_prepare_wait (c))
    return -EINTR;
  *slot = weft_coro_ref (c);
  gint reason = weft__coro_wait (c, timeout_ms);
  g_clear_pointer (slot, weft_coro_unref);
  return weft__coro_reason_to_errno (reason);
}

static void
set_wait_error (gint r, GError **error)
{
  if (r == -ETIMEDOUT)
    g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                         "timed out waiting for the peer");
  else
    g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CANCELLED,
                         "the coroutine was interrupted");
}

/**
 * weft_connection_coro_spawn:
 * @self: a connection
 * @func: (scope notified) (closure user_data) (destroy notify): the body
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data once the coroutine has ended (or
 *   was abandoned with the connection's context)
 * @stack_size: the stack's size in bytes, or 0 for
 *   %WEFT_CORO_DEFAULT_STACK
 *
 * Starts a coroutine on @self's context, as weft_coro_spawn() does, that
 * drives @self with weft_connection_coro_read() and friends. From now on
 * @self is not closed for you when the peer closes its side: the
 * coroutine reads what arrived before, then sees
 * %G_IO_ERROR_CONNECTION_CLOSED and closes @self (weft_connection_close()).
 * A listener's callback may call this and return: the connection counts
 * as served. Call it on @self's context (a listener callback is).
 *
 * Returns: (transfer full) (nullable): the coroutine (unref it when
 *   done), or %NULL as weft_coro_spawn() says
 */
WeftCoro *
weft_connection_coro_spawn (WeftConnection *self, WeftCoroFunc func, gpointer user_data,
                            GDestroyNotify notify, gsize stack_size)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (func != NULL, NULL);
  if (!weft_connection_is_closed (self))
    get_io (self);
  return weft_coro_spawn (weft_connection_get_context (self), func, user_data, notify,
                          stack_size);
}

static GBytes *
coro_read (WeftConnection *conn, ReadKind kind, gsize n, const guint8 *delim, gsize delim_len,
           gint timeout_ms, GError **error, const char *func)
{
  WeftCoro *c = check_caller (conn, func);
  if (c == NULL)
    return NULL;
  CoroIo *io = get_io (conn);
  if (io->reader != NULL)
    {
      g_critical ("%s: another coroutine is reading this connection", func);
      return NULL;
    }
  if (weft_connection_is_closed (conn))
    {
      set_ended_error (io, conn, error);
      return NULL;
    }

  g_clear_pointer (&io->in, g_bytes_unref);
  io->raw_max = 0;
  switch (kind)
    {
    case KIND_SOME:
      io->raw_max = n;
      weft_connection_start_reading (conn, on_bytes, io, NULL);
      break;
    case KIND_EXACTLY:
      weft_connection_read_exactly (conn, n, on_bytes, io, NULL);
      break;
    case KIND_UNTIL:
      weft_connection_read_until (conn, delim, delim_len, n, on_bytes, io, NULL);
      break;
    }
  weft__connection_deliver_now (conn);

  gint r = 0;
  while (io->in == NULL)
    {
      if (weft_connection_is_closed (conn) || weft__connection_peer_closed (conn))
        {
          /* (A closed connection has dropped the reader already.) */
          if (!weft_connection_is_closed (conn))
            weft_connection_stop_reading (conn);
          set_ended_error (io, conn, error);
          return NULL;
        }
      r = suspend (c, &io->reader, timeout_ms);
      if (r < 0 && io->in == NULL)
        {
          if (!weft_connection_is_closed (conn))
            weft_connection_stop_reading (conn);
          set_wait_error (r, error);
          return NULL;
        }
    }
  io->raw_max = 0;
  GBytes *bytes = io->in;
  io->in = NULL;
  return bytes;
}

/**
 * weft_connection_coro_read:
 * @self: a connection
 * @max_len: at most this many bytes (> 0)
 * @timeout_ms: milliseconds to wait for bytes, or -1 for no limit
 * @error: return location for a #GError
 *
 * From a coroutine running on @self's context: returns the bytes that have
 * arrived (at least one, at most @max_len), suspending the coroutine until
 * some do. Bytes beyond @max_len stay for the next read.
 *
 * The reads of this family install @self's one-shot reader for the time
 * they wait: do not mix them with weft_connection_start_reading() and
 * friends while a coroutine reads. Errors: %G_IO_ERROR_CONNECTION_CLOSED
 * when the peer has closed its side (end of file), %G_IO_ERROR_TIMED_OUT,
 * %G_IO_ERROR_CANCELLED when weft_coro_interrupt() ended the wait,
 * %G_IO_ERROR_CLOSED once @self is closed, or the error that failed the
 * connection. A timeout or an interrupt leaves the connection as it was.
 *
 * Returns: (transfer full) (nullable): the bytes, or %NULL with @error set
 */
GBytes *
weft_connection_coro_read (WeftConnection *self, gsize max_len, gint timeout_ms, GError **error)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (max_len > 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  return coro_read (self, KIND_SOME, max_len, NULL, 0, timeout_ms, error, G_STRFUNC);
}

/**
 * weft_connection_coro_read_exactly:
 * @self: a connection
 * @n: how many bytes (> 0, at most the connection's maximum read buffer)
 * @timeout_ms: milliseconds to wait for all of them, or -1 for no limit
 * @error: return location for a #GError
 *
 * From a coroutine running on @self's context: suspends the coroutine
 * until exactly @n bytes have arrived and returns them. If the peer
 * closes before, the bytes that did arrive stay unread and the call fails
 * with %G_IO_ERROR_CONNECTION_CLOSED. Errors as weft_connection_coro_read().
 *
 * Returns: (transfer full) (nullable): @n bytes, or %NULL with @error set
 */
GBytes *
weft_connection_coro_read_exactly (WeftConnection *self, gsize n, gint timeout_ms,
                                   GError **error)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (n > 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  return coro_read (self, KIND_EXACTLY, n, NULL, 0, timeout_ms, error, G_STRFUNC);
}

/**
 * weft_connection_coro_read_until:
 * @self: a connection
 * @delimiter: (array length=delimiter_len): the bytes that end the read
 * @delimiter_len: their number (> 0)
 * @max_len: the most bytes to wait for without the delimiter (0: the
 *   connection's maximum read buffer); past it the connection fails with
 *   %G_IO_ERROR_MESSAGE_TOO_LARGE
 * @timeout_ms: milliseconds to wait, or -1 for no limit
 * @error: return location for a #GError
 *
 * From a coroutine running on @self's context: suspends the coroutine
 * until @delimiter has arrived and returns the bytes up to and including
 * it. Errors as weft_connection_coro_read().
 *
 * Returns: (transfer full) (nullable): the bytes, or %NULL with @error set
 */
GBytes *
weft_connection_coro_read_until (WeftConnection *self, const guint8 *delimiter,
                                 gsize delimiter_len, gsize max_len, gint timeout_ms,
                                 GError **error)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (delimiter != NULL && delimiter_len > 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  return coro_read (self, KIND_UNTIL, max_len, delimiter, delimiter_len, timeout_ms, error,
                    G_STRFUNC);
}

/**
 * weft_connection_coro_read_line:
 * @self: a connection
 * @max_len: the longest line accepted, its end included (0: the
 *   connection's maximum read buffer); a longer one fails the connection
 *   with %G_IO_ERROR_MESSAGE_TOO_LARGE
 * @timeout_ms: milliseconds to wait, or -1 for no limit
 * @length: (out) (optional): the line's length, without its end
 * @error: return location for a #GError
 *
 * From a coroutine running on @self's context: suspends the coroutine
 * until a line ending in "\n" has arrived, and returns it without the
 * "\n" and without a "\r" before it, NUL-terminated (a NUL inside the line
 * is kept; @length tells the whole length). Errors as
 * weft_connection_coro_read().
 *
 * Returns: (transfer full) (nullable): the line, or %NULL with @error set
 */
gchar *
weft_connection_coro_read_line (WeftConnection *self, gsize max_len, gint timeout_ms,
                                gsize *length, GError **error)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  if (length != NULL)
    *length = 0;
  GBytes *bytes = coro_read (self, KIND_UNTIL, max_len, (const guint8 *) "\n", 1, timeout_ms,
                             error, G_STRFUNC);
  if (bytes == NULL)
    return NULL;
  gsize len = 0;
  const char *data = g_bytes_get_data (bytes, &len);
  len--; /* the "\n" */
  if (len > 0 && data[len - 1] == '\r')
    len--;
  gchar *line = g_malloc (len + 1);
  memcpy (line, data, len);
  line[len] = '\0';
  g_bytes_unref (bytes);
  if (length != NULL)
    *length = len;
  return line;
}

/**
 * weft_connection_coro_write:
 * @self: a connection
 * @data: (array length=len): the bytes
 * @len: their number
 * @timeout_ms: milliseconds to wait for the peer to take enough of the
 *   output, or -1 for no limit
 * @error: return location for a #GError
 *
 * From a coroutine running on @self's context: queues @data as
 * weft_connection_write() does and, while the output queued is above the
 * high water mark (weft_connection_set_write_watermarks()), suspends the
 * coroutine until the peer has taken it down to the low mark. So a
 * coroutine that writes in a loop never queues much more than the high
 * mark. On a timeout @data stays queued: the connection is as it was.
 * Errors: %G_IO_ERROR_CLOSED (or the connection's error) if @self is
 * closed, closing or shut down for writing, %G_IO_ERROR_TIMED_OUT,
 * %G_IO_ERROR_CANCELLED.
 *
 * Returns: %TRUE once @data is queued and the queue is below the high mark
 */
gboolean
weft_connection_coro_write (WeftConnection *self, const guint8 *data, gsize len,
                            gint timeout_ms, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (data != NULL || len == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  WeftCoro *c = check_caller (self, G_STRFUNC);
  if (c == NULL)
    return FALSE;
  CoroIo *io = get_io (self);
  if (io->writer != NULL)
    {
      g_critical ("%s: another coroutine is writing this connection", G_STRFUNC);
      return FALSE;
    }
  if (!weft_connection_write (self, data, len))
    {
      if (io->error == NULL && !weft_connection_is_closed (self))
        g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CLOSED,
                             "the connection is closing or shut down for writing");
      else
        set_ended_error (io, self, error);
      return FALSE;
    }
  while (!weft_connection_is_closed (self) && weft_connection_is_write_blocked (self))
    {
      gint r = suspend (c, &io->writer, timeout_ms);
      if (r < 0)
        {
          set_wait_error (r, error);
          return FALSE;
        }
    }
  if (weft_connection_is_closed (self))
    {
      set_ended_error (io, self, error);
      return FALSE;
    }
  return TRUE;
}
