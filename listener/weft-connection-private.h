/* weft-connection-private.h: what the listener and the connect code use of
 * a connection.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "weft-context-private.h"
#include "weft-connection.h"
#include "weft-listener.h"
#include "weft-tls-private.h"

/* Writes shorter than this are copied into the write queue, where small
 * ones share chunks (weft_connection_write_bytes() copies them too);
 * longer ones are queued by reference. Callers that hold bytes of their
 * own decide copy or hand-over by it (the HTTP answer's head). */
#define WEFT_CONNECTION_SMALL_COPY 1024

/* The listener that accepted the connection: once the socket is closed,
 * after the CLOSED event, on the connection's context, it is told with
 * weft__listener_connection_closed() (it counts live connections). */
void weft__connection_set_close_listener (WeftConnection *self, WeftListener *listener);
void weft__listener_connection_closed (WeftListener *self, WeftConnection *conn);
/* The connections @self accepted that are not freed yet (closed ones too),
 * each with a reference (the array's free function drops it). Any thread;
 * the answer is a snapshot: a connection accepted meanwhile may be missing. */
GPtrArray *weft__listener_live_connections (WeftListener *self);
/* Decides whether a connection is collected. It runs under the engine's
 * context list lock, before the connection is referenced (its memory stays
 * while its context is listed), so it may read only atomics of it and must
 * not call back into the engine. */
typedef gboolean (*WeftConnectionFilter) (WeftConnection *conn, gpointer data);
/* The same, only the connections @keep accepts: a periodic sweep that
 * wants a few of many connections neither references every one nor
 * grows an array as large as them all. */
GPtrArray *weft__listener_live_connections_where (WeftListener *self, WeftConnectionFilter keep,
                                                  gpointer data);
/* For weft__engine_foreach_tail(): the connection in @tail with a new
 * reference if @listener accepted it, @keep (if not NULL) accepts it and
 * its last reference is not gone. */
WeftConnection *weft__connection_ref_tail (gpointer tail, WeftListener *listener,
                                           WeftConnectionFilter keep, gpointer data);
/* Tests only (NULL otherwise): called by a closing connection between
 * reading the listener's stopping flag and counting itself out, so a test
 * can hold that point while a shutdown runs. */
extern void (*_Atomic weft__listener_test_closing_hook) (void);
/* Tests only: weft_listener_add_tcp() resolves names with this instead of
 * getaddrinfo() when set (weft-listener.c). */
struct addrinfo;
extern int (*weft__listener_test_resolve) (const char *host, const char *port,
                                           const struct addrinfo *hints, struct addrinfo **res);
/* TRUE if the application installed a read or event callback. */
gboolean weft__connection_has_callbacks (WeftConnection *self);
/* Makes a connection for an accepted or connected socket; @fd must be
 * non-blocking. Takes the fd even on failure (closes it). */
WeftConnection *weft__connection_new (WeftContext *ctx, int fd, GError **error);
/* The same, in the tail of @ctx (from weft__context_new_with_tail() with
 * weft__connection_tail_size (@data_size) bytes), followed by @data_size
 * zeroed bytes for the connection's owner (weft__connection_get_data()):
 * one allocation for the context, the connection, its fd source and the
 * owner's state, which idle connections are counted by. */
gsize weft__connection_tail_size (gsize data_size);
WeftConnection *weft__connection_new_in_tail (WeftContext *ctx, int fd, gsize data_size,
                                              GError **error);
/* The peer's IP address as text ("-" if it has none, or once closed),
 * found on the first call and kept. On the connection's context. */
const char *weft__connection_peer_text (WeftConnection *self);
/* The owner's data of a connection made in a context's tail, or NULL. Lives
 * as long as the connection's memory: hold a reference while using it. */
gpointer weft__connection_get_data (WeftConnection *self);
/* Zeroed bytes the listener puts after each connection it accepts, for the
 * owner of the listener (the HTTP server's per-connection state). Set
 * before the listener starts. */
void weft__listener_set_connection_data_size (WeftListener *self, gsize size);

/* An internal observer of the connection's events (coroutine I/O): called
 * on the connection's context before the application's event callback,
 * and for PEER_CLOSED even when there is none. */
typedef void (*WeftConnectionWaitHook) (WeftConnection *conn, WeftConnectionEvent event,
                                        const GError *error, gpointer data);

/* Set once; @data_free runs when the connection is freed. */
void weft__connection_set_wait_hook (WeftConnection *self, WeftConnectionWaitHook hook,
                                     gpointer data, GDestroyNotify data_free);
gpointer weft__connection_get_wait_hook_data (WeftConnection *self);
gboolean weft__connection_peer_closed (WeftConnection *self);
/* weft_connection_send_file() without the dup: the connection takes @fd
 * (and closes it even when it returns FALSE, on a closed connection), so
 * a file answer needs no second descriptor. Call on the context. */
gboolean weft__connection_send_file_take (WeftConnection *self, int fd, guint64 offset,
                                          guint64 length);
/* Hands bytes kept from before to the reader just installed, now. */
void weft__connection_deliver_now (WeftConnection *self);
/* Writes made while corked wait in the queue; uncorking flushes them
 * with one system call (as an fd callback's writes are when it returns). */
void weft__connection_cork (WeftConnection *self);
void weft__connection_uncork (WeftConnection *self);
/* Graceful close that lingers: once the output is sent, shuts the write
 * side and reads and drops input for up to @linger_ms or @max_discard
 * bytes, then closes, so unread input does not turn the close into a
 * reset that could destroy the last answer in flight (HTTP errors sent
 * while a request body still arrives). Unless @always, it lingers only if
 * input is waiting when the output is gone. */
void weft__connection_close_lingering (WeftConnection *self, guint linger_ms,
                                       guint64 max_discard, gboolean always);
