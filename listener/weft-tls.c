/* weft-tls.c: NOT IMPLEMENTED YET. Every entry point fails with
 * WEFT_ERROR_FAILED ("TLS is not implemented yet"); plain TCP works. The
 * OpenSSL layer is the next step of issue 3 (see the issue notes).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-tls-private.h"

#define NOT_YET "TLS is not implemented yet"

gboolean weft__tls_config_is_server (WeftTlsConfig *c) { return TRUE; }
WeftTlsSession *weft__tls_session_new (WeftTlsConfig *config, int fd, gboolean server,
                                       const char *server_name, GError **error)
{ g_set_error_literal (error, WEFT_ERROR, WEFT_ERROR_FAILED, NOT_YET); return NULL; }
void weft__tls_session_free (WeftTlsSession *self) {}
int weft__tls_handshake (WeftTlsSession *self, GIOCondition *want, GError **error)
{ g_set_error_literal (error, WEFT_ERROR, WEFT_ERROR_FAILED, NOT_YET); return WEFT_TLS_ERROR; }
gssize weft__tls_read (WeftTlsSession *self, guint8 *buf, gsize len, GIOCondition *want,
                       GError **error)
{ g_set_error_literal (error, WEFT_ERROR, WEFT_ERROR_FAILED, NOT_YET); return WEFT_TLS_ERROR; }
gssize weft__tls_write (WeftTlsSession *self, const guint8 *buf, gsize len, GIOCondition *want,
                        GError **error)
{ g_set_error_literal (error, WEFT_ERROR, WEFT_ERROR_FAILED, NOT_YET); return WEFT_TLS_ERROR; }
gboolean weft__tls_has_pending (WeftTlsSession *self) { return FALSE; }
void weft__tls_shutdown (WeftTlsSession *self) {}
const char *weft__tls_get_alpn (WeftTlsSession *self) { return NULL; }
const char *weft__tls_get_server_name (WeftTlsSession *self) { return NULL; }
WeftTlsConfig *weft_tls_config_ref (WeftTlsConfig *self) { return self; }
void weft_tls_config_unref (WeftTlsConfig *self) {}
guint weft_tls_config_get_handshake_timeout (WeftTlsConfig *self) { return 0; }
WeftTlsConfig *weft_tls_config_new_server (GError **error)
{ g_set_error_literal (error, WEFT_ERROR, WEFT_ERROR_FAILED, NOT_YET); return NULL; }
gboolean weft_tls_config_set_certificate_files (WeftTlsConfig *self, const gchar *c,
                                                const gchar *k, GError **error)
{ g_set_error_literal (error, WEFT_ERROR, WEFT_ERROR_FAILED, NOT_YET); return FALSE; }
