/* weft-tls.c: TLS configurations and sessions on OpenSSL 3.
 *
 * A WeftTlsConfig wraps one SSL_CTX shared by many connections; a session
 * wraps one SSL on a connection's non-blocking socket. The connection
 * (weft-connection.c) owns the fd and the epoll interest and drives the
 * session from its context; this file only makes SSL_* calls and turns
 * their results into "done", "again, waiting for IN/OUT" or a GError.
 *
 * OpenSSL's error queue is per thread and workers run many connections, so
 * every call clears it first and drains it into the GError after a failure:
 * a stale error from another connection must never be blamed on this one.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-tls-private.h"

#include <pthread.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <errno.h>
#include <string.h>

#define DEFAULT_HANDSHAKE_TIMEOUT_MS 10000

struct _WeftTlsConfig
{
  gint ref_count;
  gboolean server;
  SSL_CTX *ctx;
  guint handshake_timeout_ms;
  guint8 *alpn;       /* wire format: length-prefixed names */
  guint alpn_len;
  WeftTlsSniFunc sni_func;
  gpointer sni_data;
  GDestroyNotify sni_notify;
  /* Random, per server configuration: its session id context, and the
   * mark its tickets carry, so that a session resumes only under the
   * configuration that made it (with its client-certificate policy). */
  guint8 id[16];
};

struct _WeftTlsSession
{
  SSL *ssl;
  WeftTlsConfig *config; /* ref: the SSL_CTX callbacks read it */
  gchar *server_name;    /* SNI the client sent (server side) */
  gchar *alpn;           /* negotiated protocol, NUL-terminated copy */
  WeftTlsConfig *sni_config; /* ref: the configuration SNI switched to */
  gboolean sni_done;     /* the ClientHello's name was looked at */
  gboolean handshake_done;
  gboolean notify_pending; /* the close_notify waits in OpenSSL for room */
};

G_DEFINE_BOXED_TYPE (WeftTlsConfig, weft_tls_config, weft_tls_config_ref, weft_tls_config_unref)
G_DEFINE_ENUM_TYPE (WeftTlsVersion, weft_tls_version,
                    G_DEFINE_ENUM_VALUE (WEFT_TLS_VERSION_1_2, "1-2"),
                    G_DEFINE_ENUM_VALUE (WEFT_TLS_VERSION_1_3, "1-3"))

/* ex_data slot for SSL -> WeftTlsSession, used by the SNI callback. */
static int session_index = -1;

static void
init_once (void)
{
  OPENSSL_init_ssl (OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL);
  session_index = SSL_get_ex_new_index (0, NULL, NULL, NULL, NULL);
}

/* pthread_once, not g_once(): TSan cannot see the flag g_once's fast path
 * reads (GLib is not instrumented), so session_index looked raced. */
static void
ensure_init (void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once (&once, init_once);
}

/* Sets @error from OpenSSL's queue (all of it, oldest first) after @what
 * failed, and empties the queue. */
static void
set_ssl_error (GError **error, gint domain_code, const char *what)
{
  GString *s = g_string_new (what);
  unsigned long e;
  gboolean first = TRUE;
  char buf[256];
  while ((e = ERR_get_error ()) != 0)
    {
      ERR_error_string_n (e, buf, sizeof buf);
      g_string_append (s, first ? ": " : "; ");
      g_string_append (s, buf);
      first = FALSE;
    }
  g_set_error_literal (error, G_IO_ERROR, domain_code, s->str);
  g_string_free (s, TRUE);
}

/* ---- configuration ----------------------------------------------------- */

static int
alpn_select (SSL *ssl, const unsigned char **out, unsigned char *outlen,
             const unsigned char *in, unsigned int inlen, void *arg)
{
  /* After an SNI switch OpenSSL calls the chosen context's callback: look
   * the configurations up from the session, not from @arg. The chosen
   * configuration's list applies if it has one, else the default's. */
  WeftTlsSession *session = SSL_get_ex_data (ssl, session_index);
  WeftTlsConfig *config = arg;
  if (session != NULL)
    config = session->sni_config != NULL && session->sni_config->alpn != NULL
                 ? session->sni_config
                 : session->config;
  if (config->alpn == NULL)
    return SSL_TLSEXT_ERR_NOACK;
  /* Our preference order wins. SSL_select_next_proto wants non-const
   * output; it only points into one of the two lists. */
  unsigned char *chosen = NULL;
  if (SSL_select_next_proto (&chosen, outlen, config->alpn, config->alpn_len, in, inlen)
      != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL; /* RFC 7301 §3.2: no_application_protocol */
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

gchar *
weft__tls_client_hello_server_name (const unsigned char *p, size_t len)
{
  if (len < 2 || (size_t) ((p[0] << 8) | p[1]) != len - 2)
    return NULL;
  p += 2;
  len -= 2;
  if (len < 3 || p[0] != TLSEXT_NAMETYPE_host_name)
    return NULL;
  size_t n = (size_t) ((p[1] << 8) | p[2]);
  /* One entry filling the list exactly, as OpenSSL's own parse wants. */
  if (n == 0 || n > TLSEXT_MAXLEN_host_name || n != len - 3 || memchr (p + 3, 0, n) != NULL)
    return NULL;
  return g_strndup ((const char *) p + 3, n);
}

/* The SNI switch, at the start of the ClientHello's processing: before
 * OpenSSL looks at a session ticket, so the ticket is judged by the
 * chosen configuration (see ticket_decrypted()) and a resumption cannot
 * skip the client certificate the chosen configuration requires. The
 * servername callback, later, would be too late for that. */
static int
client_hello_cb (SSL *ssl, int *alert, void *arg)
{
  WeftTlsConfig *config = arg;
  WeftTlsSession *session = SSL_get_ex_data (ssl, session_index);
  /* Once per connection: a second ClientHello (after a HelloRetryRequest)
   * comes to the chosen configuration's callback. */
  if (session == NULL || session->sni_done)
    return SSL_CLIENT_HELLO_SUCCESS;
  session->sni_done = TRUE;
  const unsigned char *ext = NULL;
  size_t ext_len = 0;
  if (!SSL_client_hello_get0_ext (ssl, TLSEXT_TYPE_server_name, &ext, &ext_len))
    return SSL_CLIENT_HELLO_SUCCESS;
  /* The name this client sent (for a TLS 1.2 resumption OpenSSL reports
   * the session's first one instead). */
  g_free (session->server_name);
  session->server_name = weft__tls_client_hello_server_name (ext, ext_len);
  if (config->sni_func == NULL || session->server_name == NULL)
    return SSL_CLIENT_HELLO_SUCCESS;
  WeftTlsConfig *chosen = config->sni_func (config, session->server_name, config->sni_data);
  if (chosen == NULL)
    {
      *alert = SSL_AD_UNRECOGNIZED_NAME;
      return SSL_CLIENT_HELLO_ERROR;
    }
  if (chosen != config)
    {
      if (!chosen->server)
        {
          g_critical ("WeftTlsSniFunc returned a client configuration");
          *alert = SSL_AD_INTERNAL_ERROR;
          return SSL_CLIENT_HELLO_ERROR;
        }
      /* Takes the certificate, key and session id context of @chosen.
       * OpenSSL leaves the session's protocol settings (versions, options,
       * tickets) those of @config; the client-certificate policy must
       * follow @chosen, or a name that requires client certificates could
       * be reached without one through the default configuration. */
      if (SSL_set_SSL_CTX (ssl, chosen->ctx) == NULL)
        {
          *alert = SSL_AD_INTERNAL_ERROR;
          return SSL_CLIENT_HELLO_ERROR;
        }
      SSL_set_verify (ssl, SSL_CTX_get_verify_mode (chosen->ctx),
                      SSL_CTX_get_verify_callback (chosen->ctx));
      SSL_set_verify_depth (ssl, SSL_CTX_get_verify_depth (chosen->ctx));
      session->sni_config = weft_tls_config_ref (chosen);
    }
  return SSL_CLIENT_HELLO_SUCCESS;
}

/* Acknowledges the name (an empty server_name extension back, and the
 * name kept in the new session); client_hello_cb() has used it. */
static int
servername_cb (SSL *ssl, int *alert, void *arg)
{
  return SSL_TLSEXT_ERR_OK;
}

/* The configuration a connection's handshake is under: the one SNI chose,
 * else the listener's. */
static WeftTlsConfig *
current_config (SSL *ssl, WeftTlsConfig *fallback)
{
  WeftTlsSession *session = SSL_get_ex_data (ssl, session_index);
  if (session == NULL)
    return fallback;
  return session->sni_config != NULL ? session->sni_config : session->config;
}

/* OpenSSL calls the ticket callbacks of the listener's configuration (the
 * SSL's first SSL_CTX) whatever SNI chose: each ticket carries the id of
 * the configuration it was issued under. */
static int
ticket_generate (SSL *ssl, void *arg)
{
  WeftTlsConfig *config = current_config (ssl, arg);
  return SSL_SESSION_set1_ticket_appdata (SSL_get_session (ssl), config->id, sizeof config->id);
}

/* A ticket is used only under the configuration that issued it; any other
 * gets a full handshake (and a new ticket), as an undecryptable one does. */
static SSL_TICKET_RETURN
ticket_decrypted (SSL *ssl, SSL_SESSION *ss, const unsigned char *keyname, size_t keyname_len,
                  SSL_TICKET_STATUS status, void *arg)
{
  switch (status)
    {
    case SSL_TICKET_FATAL_ERR_MALLOC:
    case SSL_TICKET_FATAL_ERR_OTHER:
      return SSL_TICKET_RETURN_ABORT;
    case SSL_TICKET_NONE:
      return SSL_TICKET_RETURN_IGNORE;
    case SSL_TICKET_SUCCESS:
    case SSL_TICKET_SUCCESS_RENEW:
      break;
    default: /* SSL_TICKET_EMPTY, SSL_TICKET_NO_DECRYPT */
      return SSL_TICKET_RETURN_IGNORE_RENEW;
    }
  WeftTlsConfig *config = current_config (ssl, arg);
  void *mark = NULL;
  size_t mark_len = 0;
  if (ss == NULL || !SSL_SESSION_get0_ticket_appdata (ss, &mark, &mark_len) ||
      mark_len != sizeof config->id || memcmp (mark, config->id, sizeof config->id) != 0)
    return SSL_TICKET_RETURN_IGNORE_RENEW;
  return status == SSL_TICKET_SUCCESS ? SSL_TICKET_RETURN_USE : SSL_TICKET_RETURN_USE_RENEW;
}

static WeftTlsConfig *
config_new (gboolean server, GError **error)
{
  ensure_init ();
  ERR_clear_error ();
  SSL_CTX *ctx = SSL_CTX_new (server ? TLS_server_method () : TLS_client_method ());
  if (ctx == NULL)
    {
      set_ssl_error (error, G_IO_ERROR_FAILED, "SSL_CTX_new");
      return NULL;
    }
  WeftTlsConfig *self = g_new0 (WeftTlsConfig, 1);
  self->ref_count = 1;
  self->server = server;
  self->ctx = ctx;
  self->handshake_timeout_ms = DEFAULT_HANDSHAKE_TIMEOUT_MS;

  SSL_CTX_set_min_proto_version (ctx, TLS1_2_VERSION);
  /* Renegotiation is a DoS lever and nobody needs it; an EOF without
   * close_notify is an ordinary end (the contract of weft__tls_read);
   * the protocol above (HTTP framing) detects truncation. */
  SSL_CTX_set_options (ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF
                              | SSL_OP_NO_COMPRESSION);
  /* The connection retries a write with the same first bytes, possibly
   * moved; idle sessions give their buffers back (idle memory). */
  SSL_CTX_set_mode (ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
                           | SSL_MODE_RELEASE_BUFFERS);
  if (server)
    {
      SSL_CTX_set_options (ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
      /* Resumption by stateless tickets only: a server-side session cache
       * is one more lock every handshake takes, and memory to bound. */
      SSL_CTX_set_session_cache_mode (ctx, SSL_SESS_CACHE_OFF);
      SSL_CTX_set_num_tickets (ctx, 1);
      /* Without a session id context OpenSSL refuses every resumption
       * with a fatal alert once client certificates are verified. */
      if (RAND_bytes (self->id, sizeof self->id) != 1 ||
          SSL_CTX_set_session_id_context (ctx, self->id, sizeof self->id) != 1 ||
          SSL_CTX_set_session_ticket_cb (ctx, ticket_generate, ticket_decrypted, self) != 1)
        {
          set_ssl_error (error, G_IO_ERROR_FAILED, "session id context");
          SSL_CTX_free (ctx);
          g_free (self);
          return NULL;
        }
      SSL_CTX_set_client_hello_cb (ctx, client_hello_cb, self);
      SSL_CTX_set_tlsext_servername_callback (ctx, servername_cb);
      SSL_CTX_set_alpn_select_cb (ctx, alpn_select, self);
    }
  else
    {
      SSL_CTX_set_verify (ctx, SSL_VERIFY_PEER, NULL);
      if (SSL_CTX_set_default_verify_paths (ctx) != 1)
        ERR_clear_error (); /* no system store: verification needs a CA file */
    }
  return self;
}

/**
 * weft_tls_config_new_server:
 * @error: return location for a #GError
 *
 * Creates a server configuration: TLS 1.2 minimum, no renegotiation,
 * session tickets on, a 10 s handshake timeout. Set a certificate with
 * weft_tls_config_set_certificate_files() or
 * weft_tls_config_set_certificate_pem() before the first handshake.
 *
 * A configuration is set up on one thread, then shared read-only by any
 * number of connections on any threads: do not change it once handshakes
 * use it.
 *
 * Returns: (transfer full) (nullable): a new configuration, or %NULL if
 *   OpenSSL failed
 */
WeftTlsConfig *
weft_tls_config_new_server (GError **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  return config_new (TRUE, error);
}

/**
 * weft_tls_config_new_client:
 * @error: return location for a #GError
 *
 * Creates a client configuration: TLS 1.2 minimum, the server's
 * certificate verified against the system's trust store (see
 * weft_tls_config_set_ca_file()) and against the name given to
 * weft_connection_start_tls() or weft_connection_connect_async().
 *
 * Returns: (transfer full) (nullable): a new configuration, or %NULL if
 *   OpenSSL failed
 */
WeftTlsConfig *
weft_tls_config_new_client (GError **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  return config_new (FALSE, error);
}

/**
 * weft_tls_config_ref:
 * @self: a configuration
 *
 * Takes a reference on @self; drop it with weft_tls_config_unref().
 * Listeners and connections using the configuration take their own. Any
 * thread.
 *
 * Returns: (transfer full): @self
 */
WeftTlsConfig *
weft_tls_config_ref (WeftTlsConfig *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_atomic_int_inc (&self->ref_count);
  return self;
}

/**
 * weft_tls_config_unref:
 * @self: (transfer full) (nullable): a configuration
 *
 * Drops a reference; sessions keep their own.
 */
void
weft_tls_config_unref (WeftTlsConfig *self)
{
  if (self == NULL)
    return;
  if (!g_atomic_int_dec_and_test (&self->ref_count))
    return;
  if (self->sni_notify != NULL)
    self->sni_notify (self->sni_data);
  SSL_CTX_free (self->ctx);
  g_free (self->alpn);
  g_free (self);
}

gboolean
weft__tls_config_is_server (WeftTlsConfig *config)
{
  return config->server;
}

#define MISMATCH "the private key does not match the certificate"

/* OpenSSL checks the pair when the key is set: tell that failure apart
 * from an unreadable key. */
static gboolean
key_mismatch (void)
{
  return ERR_GET_REASON (ERR_peek_last_error ()) == X509_R_KEY_VALUES_MISMATCH;
}

static gboolean
check_key (WeftTlsConfig *self, GError **error)
{
  if (SSL_CTX_check_private_key (self->ctx) != 1)
    {
      set_ssl_error (error, G_IO_ERROR_INVALID_DATA, MISMATCH);
      return FALSE;
    }
  return TRUE;
}

/**
 * weft_tls_config_set_certificate_files:
 * @self: a configuration
 * @cert_file: (type filename): a PEM file: the certificate, then any
 *   intermediate certificates
 * @key_file: (type filename): a PEM file with the matching private key
 * @error: return location for a #GError
 *
 * Sets the certificate chain and key to present (a server's, or a client
 * certificate).
 *
 * Returns: %TRUE on success; %FALSE with @error set if a file cannot be
 *   read, is not PEM, or the key does not match
 */
gboolean
weft_tls_config_set_certificate_files (WeftTlsConfig *self, const gchar *cert_file,
                                       const gchar *key_file, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (cert_file != NULL, FALSE);
  g_return_val_if_fail (key_file != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  ERR_clear_error ();
  if (SSL_CTX_use_certificate_chain_file (self->ctx, cert_file) != 1)
    {
      g_autofree char *what = g_strdup_printf ("cannot load certificate %s", cert_file);
      set_ssl_error (error, G_IO_ERROR_INVALID_DATA, what);
      return FALSE;
    }
  if (SSL_CTX_use_PrivateKey_file (self->ctx, key_file, SSL_FILETYPE_PEM) != 1)
    {
      g_autofree char *what = key_mismatch ()
                                  ? g_strdup (MISMATCH)
                                  : g_strdup_printf ("cannot load private key %s", key_file);
      set_ssl_error (error, G_IO_ERROR_INVALID_DATA, what);
      return FALSE;
    }
  return check_key (self, error);
}

/**
 * weft_tls_config_set_certificate_pem:
 * @self: a configuration
 * @cert_pem: PEM text: the certificate, then any intermediates
 * @key_pem: PEM text of the matching private key
 * @error: return location for a #GError
 *
 * Like weft_tls_config_set_certificate_files(), from memory.
 *
 * Returns: %TRUE on success; %FALSE with @error set
 */
gboolean
weft_tls_config_set_certificate_pem (WeftTlsConfig *self, const gchar *cert_pem,
                                     const gchar *key_pem, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (cert_pem != NULL, FALSE);
  g_return_val_if_fail (key_pem != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  ERR_clear_error ();
  gboolean ok = FALSE;
  BIO *cbio = BIO_new_mem_buf (cert_pem, -1);
  BIO *kbio = BIO_new_mem_buf (key_pem, -1);
  X509 *leaf = NULL;
  EVP_PKEY *key = NULL;
  if (cbio == NULL || kbio == NULL)
    {
      set_ssl_error (error, G_IO_ERROR_FAILED, "BIO_new_mem_buf");
      goto out;
    }
  leaf = PEM_read_bio_X509 (cbio, NULL, NULL, NULL);
  if (leaf == NULL || SSL_CTX_use_certificate (self->ctx, leaf) != 1)
    {
      set_ssl_error (error, G_IO_ERROR_INVALID_DATA, "cannot load the certificate PEM");
      goto out;
    }
  SSL_CTX_clear_chain_certs (self->ctx);
  for (;;)
    {
      X509 *extra = PEM_read_bio_X509 (cbio, NULL, NULL, NULL);
      if (extra == NULL)
        {
          /* The end of the text: expected, not an error. */
          unsigned long e = ERR_peek_last_error ();
          if (ERR_GET_LIB (e) == ERR_LIB_PEM && ERR_GET_REASON (e) == PEM_R_NO_START_LINE)
            ERR_clear_error ();
          else if (e != 0)
            {
              set_ssl_error (error, G_IO_ERROR_INVALID_DATA,
                             "cannot load an intermediate certificate");
              goto out;
            }
          break;
        }
      if (SSL_CTX_add0_chain_cert (self->ctx, extra) != 1)
        {
          X509_free (extra);
          set_ssl_error (error, G_IO_ERROR_FAILED, "SSL_CTX_add0_chain_cert");
          goto out;
        }
    }
  key = PEM_read_bio_PrivateKey (kbio, NULL, NULL, NULL);
  if (key == NULL || SSL_CTX_use_PrivateKey (self->ctx, key) != 1)
    {
      set_ssl_error (error, G_IO_ERROR_INVALID_DATA,
                     key_mismatch () ? MISMATCH : "cannot load the private key PEM");
      goto out;
    }
  ok = check_key (self, error);
out:
  X509_free (leaf);
  EVP_PKEY_free (key);
  BIO_free (cbio);
  BIO_free (kbio);
  return ok;
}

/**
 * weft_tls_config_set_min_version:
 * @self: a configuration
 * @version: the oldest protocol version to accept
 * @error: return location for a #GError
 *
 * The default is TLS 1.2; older versions cannot be enabled.
 *
 * Returns: %TRUE on success
 */
gboolean
weft_tls_config_set_min_version (WeftTlsConfig *self, WeftTlsVersion version, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (version == WEFT_TLS_VERSION_1_2 || version == WEFT_TLS_VERSION_1_3,
                        FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  ERR_clear_error ();
  int v = version == WEFT_TLS_VERSION_1_3 ? TLS1_3_VERSION : TLS1_2_VERSION;
  if (SSL_CTX_set_min_proto_version (self->ctx, v) != 1)
    {
      set_ssl_error (error, G_IO_ERROR_NOT_SUPPORTED, "SSL_CTX_set_min_proto_version");
      return FALSE;
    }
  return TRUE;
}

/**
 * weft_tls_config_set_alpn_protocols:
 * @self: a configuration
 * @protocols: (array zero-terminated=1) (nullable): protocol names in order
 *   of preference, such as "http/1.1"; %NULL or empty to turn ALPN off
 * @error: return location for a #GError
 *
 * A server picks the first of its protocols the client offers and refuses
 * the handshake (no_application_protocol) if the client offers ALPN but
 * none of them; a client offers these. The outcome is
 * weft_connection_get_alpn_protocol().
 *
 * Returns: %TRUE on success; %FALSE if a name is empty or longer than 255
 *   bytes
 */
gboolean
weft_tls_config_set_alpn_protocols (WeftTlsConfig *self, const gchar *const *protocols,
                                    GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  GByteArray *wire = g_byte_array_new ();
  for (gsize i = 0; protocols != NULL && protocols[i] != NULL; i++)
    {
      gsize n = strlen (protocols[i]);
      if (n == 0 || n > 255)
        {
          g_set_error (error, WEFT_ERROR, WEFT_ERROR_INVALID,
                       "ALPN protocol name of %" G_GSIZE_FORMAT " bytes (1 to 255 allowed)", n);
          g_byte_array_unref (wire);
          return FALSE;
        }
      guint8 len = (guint8) n;
      g_byte_array_append (wire, &len, 1);
      g_byte_array_append (wire, (const guint8 *) protocols[i], (guint) n);
    }
  if (!self->server)
    {
      ERR_clear_error ();
      /* An empty list turns the offer off. 0 means success here. */
      if (SSL_CTX_set_alpn_protos (self->ctx, wire->len > 0 ? wire->data : NULL, wire->len) != 0)
        {
          set_ssl_error (error, G_IO_ERROR_FAILED, "SSL_CTX_set_alpn_protos");
          g_byte_array_unref (wire);
          return FALSE;
        }
    }
  g_free (self->alpn);
  self->alpn_len = wire->len;
  self->alpn = wire->len > 0 ? g_byte_array_free (wire, FALSE) : (g_byte_array_free (wire, TRUE), NULL);
  return TRUE;
}

/**
 * weft_tls_config_set_sni_func:
 * @self: a server configuration
 * @func: (scope notified) (closure user_data) (destroy notify) (nullable):
 *   chooses a configuration by server name
 * @user_data: data for @func
 * @notify: (nullable): frees @user_data when the configuration dies or the
 *   function is replaced
 *
 * Serves several names with different certificates: @func runs during
 * each handshake whose client sent a server name. Without a function every
 * client gets this configuration's certificate.
 *
 * From the configuration @func returns, a handshake takes the certificate
 * and key, the peer verification policy (weft_tls_config_set_verify_peer()
 * and the CA file) and the ALPN list if it has one (else this one's). The
 * protocol versions, session tickets and the handshake timeout stay this
 * configuration's: the client has already been answered on those.
 *
 * @func runs as the ClientHello arrives, before a session ticket is looked
 * at: a ticket resumes only under the configuration that issued it, so a
 * session from another name never skips the chosen configuration's client
 * certificate.
 */
void
weft_tls_config_set_sni_func (WeftTlsConfig *self, WeftTlsSniFunc func, gpointer user_data,
                              GDestroyNotify notify)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (self->server);
  if (self->sni_notify != NULL)
    self->sni_notify (self->sni_data);
  self->sni_func = func;
  self->sni_data = user_data;
  self->sni_notify = notify;
}

/**
 * weft_tls_config_set_session_tickets:
 * @self: a server configuration
 * @enabled: whether to issue session tickets
 *
 * Session tickets (on by default) let a returning client resume without a
 * full handshake; the server keeps no state for them. The ticket key is
 * random per configuration, so tickets do not survive a restart and are
 * not shared between processes.
 */
void
weft_tls_config_set_session_tickets (WeftTlsConfig *self, gboolean enabled)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (self->server);
  if (enabled)
    {
      SSL_CTX_clear_options (self->ctx, SSL_OP_NO_TICKET);
      SSL_CTX_set_num_tickets (self->ctx, 1);
    }
  else
    {
      SSL_CTX_set_options (self->ctx, SSL_OP_NO_TICKET);
      SSL_CTX_set_num_tickets (self->ctx, 0);
    }
}

/**
 * weft_tls_config_set_ca_file:
 * @self: a configuration
 * @ca_file: (type filename): PEM file of trusted certificates
 * @error: return location for a #GError
 *
 * Adds trust anchors: for a client, to verify servers; for a server with
 * weft_tls_config_set_verify_peer(), to verify client certificates.
 *
 * Returns: %TRUE on success
 */
gboolean
weft_tls_config_set_ca_file (WeftTlsConfig *self, const gchar *ca_file, GError **error)
{
  g_return_val_if_fail (self != NULL, FALSE);
  g_return_val_if_fail (ca_file != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  ERR_clear_error ();
  if (SSL_CTX_load_verify_locations (self->ctx, ca_file, NULL) != 1)
    {
      g_autofree char *what = g_strdup_printf ("cannot load CA file %s", ca_file);
      set_ssl_error (error, G_IO_ERROR_INVALID_DATA, what);
      return FALSE;
    }
  return TRUE;
}

/**
 * weft_tls_config_set_verify_peer:
 * @self: a configuration
 * @verify: whether to verify the peer's certificate
 *
 * A client verifies the server by default; turning that off accepts any
 * certificate (tests only). A server does not ask for client certificates
 * by default; turning this on requires one that chains to the CA file.
 */
void
weft_tls_config_set_verify_peer (WeftTlsConfig *self, gboolean verify)
{
  g_return_if_fail (self != NULL);
  int mode = SSL_VERIFY_NONE;
  if (verify)
    mode = self->server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER;
  SSL_CTX_set_verify (self->ctx, mode, NULL);
}

/**
 * weft_tls_config_set_handshake_timeout:
 * @self: a configuration
 * @timeout_ms: the longest a handshake may take, in milliseconds; 0 for
 *   no limit (not advisable on a server: idle half-open handshakes hold
 *   connections)
 *
 * The default is 10 seconds.
 */
void
weft_tls_config_set_handshake_timeout (WeftTlsConfig *self, guint timeout_ms)
{
  g_return_if_fail (self != NULL);
  self->handshake_timeout_ms = timeout_ms;
}

/**
 * weft_tls_config_get_handshake_timeout:
 * @self: a configuration
 *
 * Gets the longest a handshake with this configuration may take, as set
 * with weft_tls_config_set_handshake_timeout() (default 10 s); a
 * handshake still running then fails and its connection is closed.
 *
 * Returns: the handshake timeout in milliseconds, 0 for none
 */
guint
weft_tls_config_get_handshake_timeout (WeftTlsConfig *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->handshake_timeout_ms;
}

/* ---- sessions ---------------------------------------------------------- */

WeftTlsSession *
weft__tls_session_new (WeftTlsConfig *config, int fd, gboolean server, const char *server_name,
                       GError **error)
{
  ERR_clear_error ();
  SSL *ssl = SSL_new (config->ctx);
  if (ssl == NULL)
    {
      set_ssl_error (error, G_IO_ERROR_FAILED, "SSL_new");
      return NULL;
    }
  WeftTlsSession *self = g_new0 (WeftTlsSession, 1);
  self->ssl = ssl;
  self->config = weft_tls_config_ref (config);
  SSL_set_ex_data (ssl, session_index, self);
  if (SSL_set_fd (ssl, fd) != 1)
    {
      set_ssl_error (error, G_IO_ERROR_FAILED, "SSL_set_fd");
      weft__tls_session_free (self);
      return NULL;
    }
  if (server)
    SSL_set_accept_state (ssl);
  else
    {
      SSL_set_connect_state (ssl);
      if (server_name != NULL && *server_name != '\0')
        {
          gboolean ip = g_hostname_is_ip_address (server_name);
          /* SNI carries names only (RFC 6066 §3); an address is checked
           * against the certificate's IP entries instead. */
          gboolean ok = ip ? X509_VERIFY_PARAM_set1_ip_asc (SSL_get0_param (ssl), server_name) == 1
                           : (SSL_set_tlsext_host_name (ssl, server_name) == 1
                              && SSL_set1_host (ssl, server_name) == 1);
          if (!ok)
            {
              set_ssl_error (error, G_IO_ERROR_INVALID_ARGUMENT, "bad TLS server name");
              weft__tls_session_free (self);
              return NULL;
            }
        }
    }
  return self;
}

void
weft__tls_session_free (WeftTlsSession *self)
{
  if (self == NULL)
    return;
  SSL_free (self->ssl);
  weft_tls_config_unref (self->config);
  if (self->sni_config != NULL)
    weft_tls_config_unref (self->sni_config);
  g_free (self->server_name);
  g_free (self->alpn);
  g_free (self);
}

/* Turns a failed SSL_* call into AGAIN (with *want) or ERROR (with
 * @error); ZERO_RETURN is the caller's business and reported as 0. */
static int
classify (WeftTlsSession *self, int ret, const char *what, GIOCondition *want, GError **error)
{
  int saved_errno = errno;
  int code = SSL_get_error (self->ssl, ret);
  switch (code)
    {
    case SSL_ERROR_WANT_READ:
      *want = G_IO_IN;
      return WEFT_TLS_AGAIN;
    case SSL_ERROR_WANT_WRITE:
      *want = G_IO_OUT;
      return WEFT_TLS_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
      return 0;
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error () != 0)
        break;
      if (saved_errno == 0 || saved_errno == ECONNRESET || saved_errno == EPIPE)
        {
          /* Only reachable before the handshake is done (afterwards
           * IGNORE_UNEXPECTED_EOF turns an EOF into ZERO_RETURN). */
          g_set_error (error, G_IO_ERROR,
                       saved_errno == 0 ? G_IO_ERROR_CONNECTION_CLOSED
                                        : g_io_error_from_errno (saved_errno),
                       "%s: the peer closed the connection%s%s", what,
                       saved_errno != 0 ? ": " : "",
                       saved_errno != 0 ? g_strerror (saved_errno) : "");
          return WEFT_TLS_ERROR;
        }
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "%s: %s", what,
                   g_strerror (saved_errno));
      return WEFT_TLS_ERROR;
    default:
      break;
    }
  /* A protocol or certificate error. Name the certificate problem plainly:
   * "certificate has expired" says more than the queue's generic line. */
  long verify = SSL_get_verify_result (self->ssl);
  if (verify != X509_V_OK)
    {
      g_autofree char *what2 = g_strdup_printf ("%s: certificate verification failed: %s",
                                                what, X509_verify_cert_error_string (verify));
      set_ssl_error (error, G_IO_ERROR_FAILED, what2);
    }
  else
    set_ssl_error (error, G_IO_ERROR_FAILED, what);
  return WEFT_TLS_ERROR;
}

int
weft__tls_handshake (WeftTlsSession *self, GIOCondition *want, GError **error)
{
  ERR_clear_error ();
  errno = 0;
  int r = SSL_do_handshake (self->ssl);
  if (r == 1)
    {
      self->handshake_done = TRUE;
      return 1;
    }
  int c = classify (self, r, "TLS handshake", want, error);
  if (c == 0)
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                           "TLS handshake: the peer closed the connection");
      return WEFT_TLS_ERROR;
    }
  return c;
}

gssize
weft__tls_read (WeftTlsSession *self, guint8 *buf, gsize len, GIOCondition *want, GError **error)
{
  ERR_clear_error ();
  errno = 0;
  size_t n = 0;
  int r = SSL_read_ex (self->ssl, buf, len, &n);
  if (r == 1)
    return (gssize) n;
  return classify (self, r, "TLS read", want, error);
}

gssize
weft__tls_write (WeftTlsSession *self, const guint8 *buf, gsize len, GIOCondition *want,
                 GError **error)
{
  ERR_clear_error ();
  errno = 0;
  size_t n = 0;
  int r = SSL_write_ex (self->ssl, buf, len, &n);
  if (r == 1)
    return (gssize) n;
  int c = classify (self, r, "TLS write", want, error);
  if (c == 0)
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE,
                           "TLS write: the peer closed the connection");
      return WEFT_TLS_ERROR;
    }
  return c;
}

gboolean
weft__tls_shutdown (WeftTlsSession *self)
{
  if (!self->handshake_done || SSL_in_init (self->ssl))
    return TRUE;
  /* Once sent, never again: a further SSL_shutdown() would read the
   * socket for the peer's close_notify, taking a half-closed connection's
   * input. */
  if ((SSL_get_shutdown (self->ssl) & SSL_SENT_SHUTDOWN) && !self->notify_pending)
    return TRUE;
  ERR_clear_error ();
  /* We do not wait for the peer's close_notify: the connection closes or
   * half-closes next. A full socket leaves ours (or its tail) buffered;
   * the call made again once the socket is writable sends the rest. */
  int r = SSL_shutdown (self->ssl);
  self->notify_pending = r < 0 && SSL_get_error (self->ssl, r) == SSL_ERROR_WANT_WRITE;
  ERR_clear_error ();
  return !self->notify_pending;
}

const char *
weft__tls_get_alpn (WeftTlsSession *self)
{
  const unsigned char *p = NULL;
  unsigned int n = 0;
  SSL_get0_alpn_selected (self->ssl, &p, &n);
  if (p == NULL || n == 0)
    return NULL;
  /* Not NUL-terminated: keep a copy for the session's life. */
  if (self->alpn == NULL)
    self->alpn = g_strndup ((const char *) p, n);
  return self->alpn;
}

const char *
weft__tls_get_server_name (WeftTlsSession *self)
{
  return self->server_name;
}
