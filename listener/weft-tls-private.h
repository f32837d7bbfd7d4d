/* weft-tls-private.h: the TLS session a connection drives (weft-tls.c).
 * The connection owns the socket and the epoll interest; the session only
 * does SSL_* calls on the non-blocking fd and says which readiness it needs
 * next.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "weft-tls.h"

/* Results of the session calls below that do I/O. */
#define WEFT_TLS_AGAIN (-2) /* would block: wait for *want, then call again */
#define WEFT_TLS_ERROR (-1) /* fatal: @error is set; close the connection */

typedef struct _WeftTlsSession WeftTlsSession;

/* The ServerNameList of a ClientHello's server_name extension (RFC 6066
 * §3), @len bytes: its host_name (free it), or NULL if there is none or the
 * list is malformed (OpenSSL's own parse refuses that one later, with the
 * right alert). */
gchar *weft__tls_client_hello_server_name (const unsigned char *p, size_t len);

/* TRUE for a configuration from weft_tls_config_new_server(). */
gboolean weft__tls_config_is_server (WeftTlsConfig *config);

/* A session on @fd (non-blocking, connected). @server_name: for a client,
 * the SNI name and the name verified against the certificate (may be
 * NULL); ignored for a server. */
WeftTlsSession *weft__tls_session_new (WeftTlsConfig *config, int fd, gboolean server,
                                       const char *server_name, GError **error);
void weft__tls_session_free (WeftTlsSession *self);

/* 1: handshake complete. WEFT_TLS_AGAIN: *want is G_IO_IN or G_IO_OUT.
 * WEFT_TLS_ERROR: @error says why (certificate, protocol, peer alert,
 * peer closed). */
int weft__tls_handshake (WeftTlsSession *self, GIOCondition *want, GError **error);

/* > 0: bytes read. 0: the peer closed (close_notify, or TCP EOF; an EOF
 * without close_notify is reported as 0 too, like most servers do).
 * WEFT_TLS_AGAIN with *want set, or WEFT_TLS_ERROR. */
gssize weft__tls_read (WeftTlsSession *self, guint8 *buf, gsize len, GIOCondition *want,
                       GError **error);

/* > 0: bytes of @buf consumed (may be fewer than @len). WEFT_TLS_AGAIN
 * with *want set: call again later with the same bytes (at least the same
 * first bytes; the buffer may move). WEFT_TLS_ERROR. */
gssize weft__tls_write (WeftTlsSession *self, const guint8 *buf, gsize len, GIOCondition *want,
                        GError **error);

/* Sends close_notify, without waiting for the peer's. FALSE: the socket
 * is full, call again once it is writable; TRUE: sent (or none to send). */
gboolean weft__tls_shutdown (WeftTlsSession *self);

/* Negotiated ALPN protocol and the SNI name the client sent (server side);
 * NULL if none. Valid while the session lives. */
const char *weft__tls_get_alpn (WeftTlsSession *self);
const char *weft__tls_get_server_name (WeftTlsSession *self);
