/* weft-tls.h: TLS settings (OpenSSL 3) shared by many connections.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include "weft-types.h"
#include "weft-connection.h"

G_BEGIN_DECLS

#define WEFT_TYPE_TLS_CONFIG (weft_tls_config_get_type ())
#define WEFT_TYPE_TLS_VERSION (weft_tls_version_get_type ())

/**
 * WeftTlsVersion:
 * @WEFT_TLS_VERSION_1_2: TLS 1.2
 * @WEFT_TLS_VERSION_1_3: TLS 1.3
 *
 * A protocol version, for weft_tls_config_set_min_version().
 */
typedef enum {
  WEFT_TLS_VERSION_1_2,
  WEFT_TLS_VERSION_1_3,
} WeftTlsVersion;

/**
 * WeftTlsSniFunc:
 * @config: the server configuration the handshake started with
 * @server_name: the name the client asked for
 * @user_data: the data given with the callback
 *
 * Chooses the certificate for a client's server name. Runs during the
 * handshake, on the connection's context (so on any worker, concurrently
 * with other handshakes: it must be thread safe).
 *
 * Returns: (transfer none) (nullable): the configuration whose certificate
 *   to present, @config to keep the default, or %NULL to refuse the
 *   handshake (unrecognized_name alert)
 */
typedef WeftTlsConfig *(*WeftTlsSniFunc) (WeftTlsConfig *config, const gchar *server_name,
                                          gpointer user_data);

WEFT_AVAILABLE_IN_ALL
GType weft_tls_config_get_type (void) G_GNUC_CONST;
WEFT_AVAILABLE_IN_ALL
GType weft_tls_version_get_type (void) G_GNUC_CONST;

WEFT_AVAILABLE_IN_ALL
WeftTlsConfig *weft_tls_config_new_server (GError **error);
WEFT_AVAILABLE_IN_ALL
WeftTlsConfig *weft_tls_config_new_client (GError **error);
WEFT_AVAILABLE_IN_ALL
WeftTlsConfig *weft_tls_config_ref (WeftTlsConfig *self);
WEFT_AVAILABLE_IN_ALL
void weft_tls_config_unref (WeftTlsConfig *self);

WEFT_AVAILABLE_IN_ALL
gboolean weft_tls_config_set_certificate_files (WeftTlsConfig *self, const gchar *cert_file,
                                                const gchar *key_file, GError **error);
WEFT_AVAILABLE_IN_ALL
gboolean weft_tls_config_set_certificate_pem (WeftTlsConfig *self, const gchar *cert_pem,
                                              const gchar *key_pem, GError **error);
WEFT_AVAILABLE_IN_ALL
gboolean weft_tls_config_set_min_version (WeftTlsConfig *self, WeftTlsVersion version,
                                          GError **error);
WEFT_AVAILABLE_IN_ALL
gboolean weft_tls_config_set_alpn_protocols (WeftTlsConfig *self,
                                             const gchar *const *protocols, GError **error);
WEFT_AVAILABLE_IN_ALL
void weft_tls_config_set_sni_func (WeftTlsConfig *self, WeftTlsSniFunc func,
                                   gpointer user_data, GDestroyNotify notify);
WEFT_AVAILABLE_IN_ALL
void weft_tls_config_set_session_tickets (WeftTlsConfig *self, gboolean enabled);
WEFT_AVAILABLE_IN_ALL
gboolean weft_tls_config_set_ca_file (WeftTlsConfig *self, const gchar *ca_file,
                                      GError **error);
WEFT_AVAILABLE_IN_ALL
void weft_tls_config_set_verify_peer (WeftTlsConfig *self, gboolean verify);
WEFT_AVAILABLE_IN_ALL
void weft_tls_config_set_handshake_timeout (WeftTlsConfig *self, guint timeout_ms);
WEFT_AVAILABLE_IN_ALL
guint weft_tls_config_get_handshake_timeout (WeftTlsConfig *self);

WEFT_AVAILABLE_IN_ALL
void weft_connection_start_tls (WeftConnection *self, WeftTlsConfig *config,
                                const gchar *server_name, WeftConnectFunc func,
                                gpointer user_data, GDestroyNotify notify);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (WeftTlsConfig, weft_tls_config_unref)

G_END_DECLS
