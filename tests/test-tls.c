/* test-tls.c: TLS on connections and listeners (OpenSSL 3), with real
 * clients: openssl s_client, Python's ssl module, and Weft's own client.
 * Certificates come from a private CA made at test time
 * (weft-tls-util.h).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-net-util.h"
#include "weft-tls-util.h"
#include "weft-tls-private.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

typedef struct {
  gchar *dir;
  WtCert *ca;
  WtCert *localhost; /* DNS:localhost, IP:127.0.0.1 */
  WtCert *b_test;    /* DNS:b.test */
  WtCert *expired;   /* DNS:localhost, expired yesterday */
} Certs;

static Certs certs;

static const gchar *const http11[] = { "http/1.1", NULL };

static WeftTlsConfig *
server_config (WtCert *cert)
{
  GError *error = NULL;
  WeftTlsConfig *config = weft_tls_config_new_server (&error);
  g_assert_no_error (error);
  g_assert_true (weft_tls_config_set_certificate_pem (config, cert->cert_pem, cert->key_pem,
                                                      &error));
  g_assert_no_error (error);
  g_assert_true (weft_tls_config_set_alpn_protocols (config, http11, &error));
  g_assert_no_error (error);
  return config;
}

static WeftTlsConfig *
client_config (void)
{
  GError *error = NULL;
  WeftTlsConfig *config = weft_tls_config_new_client (&error);
  g_assert_no_error (error);
  g_assert_true (weft_tls_config_set_ca_file (config, certs.ca->cert_file, &error));
  g_assert_no_error (error);
  g_assert_true (weft_tls_config_set_alpn_protocols (config, http11, &error));
  g_assert_no_error (error);
  return config;
}

/* wt_server_start() with TLS on the listener. */
static void
tls_server_start (WtServer *s, WeftTlsConfig *config, WtSetupFunc setup, gpointer test_data)
{
  GError *error = NULL;
  memset (s, 0, sizeof *s);
  s->engine = wt_engine_new (2);
  s->setup = setup;
  s->test_data = test_data;
  s->listener = weft_listener_new (s->engine, wt_server_accept, s, NULL);
  weft_listener_set_tls (s->listener, config);
  g_assert_true (weft_listener_add_tcp (s->listener, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  s->port = weft_listener_get_port (s->listener, 0);
  g_assert_true (weft_listener_start (s->listener, &error));
  g_assert_no_error (error);
}

/* Says what the handshake agreed, then closes gracefully (close_notify). */
static void
greet_setup (WeftConnection *conn, gpointer test_data)
{
  g_assert_true (weft_connection_is_tls (conn));
  gchar *line = g_strdup_printf ("weft-hello alpn=%s sni=%s\n",
                                 weft_connection_get_alpn_protocol (conn),
                                 weft_connection_get_server_name (conn));
  weft_connection_write (conn, (const guint8 *) line, strlen (line));
  g_free (line);
  weft_connection_close (conn);
}

/* Runs a client program with no input; returns its exit status, and its
 * stdout and stderr joined in *out. */
static gboolean
run_client (const char *const *argv, gchar **out)
{
  gchar *o = NULL, *e = NULL;
  gint status = 0;
  GError *error = NULL;
  g_spawn_sync (NULL, (gchar **) argv, NULL, G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL, &o, &e,
                &status, &error);
  g_assert_no_error (error);
  *out = g_strconcat (o, "\n--- stderr ---\n", e, NULL);
  g_free (o);
  g_free (e);
  return g_spawn_check_wait_status (status, NULL);
}

static const char *
need_env (const char *var, const char *what)
{
  const char *v = g_getenv (var);
  if (v == NULL)
    g_test_skip_printf ("%s not found", what);
  return v;
}

/* ---- /tls/config-errors ------------------------------------------------ */

static void
test_config_errors (void)
{
  GError *error = NULL;
  WeftTlsConfig *config = weft_tls_config_new_server (&error);
  g_assert_no_error (error);

  g_assert_false (weft_tls_config_set_certificate_pem (config, "not a certificate",
                                                       certs.localhost->key_pem, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
  g_clear_error (&error);

  /* A key that belongs to another certificate. */
  g_assert_false (weft_tls_config_set_certificate_pem (config, certs.localhost->cert_pem,
                                                       certs.b_test->key_pem, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
  g_assert_nonnull (strstr (error->message, "does not match"));
  g_clear_error (&error);

  g_assert_false (weft_tls_config_set_certificate_files (config, "/nonexistent/cert.pem",
                                                         certs.localhost->key_file, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
  g_assert_nonnull (strstr (error->message, "/nonexistent/cert.pem"));
  g_clear_error (&error);

  g_assert_true (weft_tls_config_set_certificate_files (config, certs.localhost->cert_file,
                                                        certs.localhost->key_file, &error));
  g_assert_no_error (error);

  gchar *long_name = g_strnfill (256, 'x');
  const gchar *bad[] = { "http/1.1", long_name, NULL };
  g_assert_false (weft_tls_config_set_alpn_protocols (config, bad, &error));
  g_assert_error (error, WEFT_ERROR, WEFT_ERROR_INVALID);
  g_clear_error (&error);
  g_free (long_name);

  g_assert_false (weft_tls_config_set_ca_file (config, "/nonexistent/ca.pem", &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
  g_clear_error (&error);

  g_assert_cmpuint (weft_tls_config_get_handshake_timeout (config), ==, 10000);
  weft_tls_config_unref (config);
}

/* ---- /tls/s-client ----------------------------------------------------- */

/* openssl s_client verifies the chain against our CA, offers h2 and
 * http/1.1 (the server picks http/1.1), sends SNI; the server's greeting
 * reports what it saw. Then again forced to TLS 1.2. */
static void
test_s_client (void)
{
  const char *openssl = need_env ("WEFT_TEST_OPENSSL", "openssl");
  if (openssl == NULL)
    return;
  WeftTlsConfig *config = server_config (certs.localhost);
  WtServer srv;
  tls_server_start (&srv, config, greet_setup, NULL);
  gchar *connect = g_strdup_printf ("127.0.0.1:%u", srv.port);

  for (int v = 0; v < 2; v++)
    {
      const char *argv[] = { openssl, "s_client", "-connect", connect, "-servername", "localhost",
                             "-alpn", "h2,http/1.1", "-CAfile", certs.ca->cert_file,
                             "-verify_return_error", "-ign_eof",
                             v == 0 ? "-tls1_3" : "-tls1_2", NULL };
      gchar *out = NULL;
      gboolean ok = run_client (argv, &out);
      if (!ok || strstr (out, "weft-hello alpn=http/1.1 sni=localhost\n") == NULL
          || strstr (out, "Verify return code: 0 (ok)") == NULL
          || strstr (out, v == 0 ? "TLSv1.3" : "TLSv1.2") == NULL)
        g_error ("s_client output:\n%s", out);
      g_free (out);
    }
  g_assert_cmpuint (weft_listener_get_n_tls_failed (srv.listener), ==, 0);
  g_free (connect);
  wt_server_stop (&srv);
  weft_tls_config_unref (config);
}

/* ---- /tls/curl --------------------------------------------------------- */

/* A minimal HTTP/1.1 responder on the TLS listener, for curl: one request
 * head, one response, close. */
static gsize
http_head (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  const char *response = "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\n"
                         "hello weft\n";
  weft_connection_write (conn, (const guint8 *) response, strlen (response));
  weft_connection_close (conn);
  return len;
}

static void
http_setup (WeftConnection *conn, gpointer test_data)
{
  /* ALPN agreed on http/1.1, as curl offered it. */
  if (g_strcmp0 (weft_connection_get_alpn_protocol (conn), "http/1.1") != 0)
    {
      weft_connection_abort (conn);
      return;
    }
  weft_connection_read_until (conn, (const guint8 *) "\r\n\r\n", 4, 8192, http_head, NULL,
                              NULL);
}

/* curl verifies the certificate against the CA and the name, negotiates
 * http/1.1 by ALPN and reads the response; then again over TLS 1.2. */
static void
test_curl (void)
{
  const char *curl = need_env ("WEFT_TEST_CURL", "curl");
  if (curl == NULL)
    return;
  WeftTlsConfig *config = server_config (certs.localhost);
  WtServer srv;
  tls_server_start (&srv, config, http_setup, NULL);
  gchar *resolve = g_strdup_printf ("localhost:%u:127.0.0.1", srv.port);
  gchar *url = g_strdup_printf ("https://localhost:%u/", srv.port);
  for (int v = 0; v < 2; v++)
    {
      const char *argv[] = { curl, "-sS", "--http1.1", "--cacert", certs.ca->cert_file,
                             "--resolve", resolve, "-w", "|%{http_code}|%{ssl_verify_result}",
                             v == 0 ? "--tlsv1.3" : "--tls-max", v == 0 ? url : "1.2",
                             v == 0 ? NULL : url, NULL };
      gchar *out = NULL;
      gboolean ok = run_client (argv, &out);
      if (!ok || !g_str_has_prefix (out, "hello weft\n|200|0"))
        g_error ("curl output:\n%s", out);
      g_free (out);
    }
  g_assert_cmpuint (weft_listener_get_n_tls_failed (srv.listener), ==, 0);
  g_free (resolve);
  g_free (url);
  wt_server_stop (&srv);
  weft_tls_config_unref (config);
}

/* ---- Python ssl client ------------------------------------------------- */

static const char *python_client =
    "import socket, ssl, sys\n"
    "port, cafile, name, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]\n"
    "ctx = ssl.create_default_context(cafile=cafile)\n"
    "ctx.set_alpn_protocols(['http/1.1'])\n"
    "if len(sys.argv) > 6:\n"
    "    ctx.load_cert_chain(sys.argv[5], sys.argv[6])\n"
    "def connect(session=None):\n"
    "    raw = socket.create_connection(('127.0.0.1', port), timeout=10)\n"
    "    return ctx.wrap_socket(raw, server_hostname=name, session=session)\n"
    "if mode == 'echo':\n"
    "    s = connect()\n"
    "    data = bytes(range(256)) * 4096\n"
    "    got = bytearray()\n"
    "    for off in range(0, len(data), 65536):\n"
    "        s.sendall(data[off:off + 65536])\n"
    "        while len(got) < off + 65536:\n"
    "            chunk = s.recv(65536)\n"
    "            assert chunk, 'eof after %d bytes' % len(got)\n"
    "            got += chunk\n"
    "    assert bytes(got) == data\n"
    "    session = s.session\n"
    "    print('alpn', s.selected_alpn_protocol(), s.version())\n"
    "    s.close()\n"
    "    s = connect(session)\n"
    "    s.sendall(b'again')\n"
    "    assert s.recv(5) == b'again'\n"
    "    print('reused', s.session_reused)\n"
    "elif mode.split(':')[0] in ('resume', 'resume12'):\n"
    "    # resume[12]:NAME2: a ticket from a handshake to NAME, then a\n"
    "    # connection to NAME2 offering it.\n"
    "    kind, name2 = mode.split(':')\n"
    "    if kind == 'resume12':\n"
    "        ctx.maximum_version = ssl.TLSVersion.TLSv1_2\n"
    "    s = connect()\n"
    "    s.recv(200)  # the greeting; a TLS 1.3 ticket comes before it\n"
    "    session = s.session\n"
    "    s.close()\n"
    "    print('ticket', session.has_ticket)\n"
    "    try:\n"
    "        raw = socket.create_connection(('127.0.0.1', port), timeout=10)\n"
    "        s = ctx.wrap_socket(raw, server_hostname=name2, session=session)\n"
    "        line = s.recv(200).decode().strip()\n"
    "        print('second', 'resumed' if s.session_reused else 'full', line or 'eof')\n"
    "    except (ssl.SSLError, OSError) as e:\n"
    "        print('second failed', e)\n"
    "elif mode == 'badrecord':\n"
    "    import os\n"
    "    s = connect()\n"
    "    s.sendall(b'ping')\n"
    "    assert s.recv(4) == b'ping'\n"
    "    # An application-data record that cannot decrypt, past the SSL layer.\n"
    "    os.write(s.fileno(), b'\\x17\\x03\\x03\\x00\\x40' + b'\\xaa' * 64)\n"
    "    try:\n"
    "        print('closed' if s.recv(100) == b'' else 'data')\n"
    "    except (ssl.SSLError, OSError) as e:\n"
    "        print('closed', type(e).__name__)\n"
    "elif mode == 'cn':\n"
    "    s = connect()\n"
    "    print('cn', dict(x[0] for x in s.getpeercert()['subject'])['commonName'],\n"
    "          s.selected_alpn_protocol())\n"
    "elif mode == 'fail':\n"
    "    try:\n"
    "        connect().recv(1)\n"
    "        print('connected')\n"
    "    except ssl.SSLError as e:\n"
    "        print('failed', e)\n";

/* @client: a certificate to present, or NULL. */
static gchar *
run_python_as (guint16 port, const char *name, const char *mode, WtCert *client)
{
  const char *python = g_getenv ("WEFT_TEST_PYTHON");
  gchar *port_s = g_strdup_printf ("%u", port);
  const char *argv[] = { python, "-c", python_client, port_s, certs.ca->cert_file, name, mode,
                         client != NULL ? client->cert_file : NULL,
                         client != NULL ? client->key_file : NULL, NULL };
  gchar *out = NULL;
  if (!run_client (argv, &out))
    g_error ("python client failed:\n%s", out);
  g_free (port_s);
  return out;
}

static gchar *
run_python (guint16 port, const char *name, const char *mode)
{
  return run_python_as (port, name, mode, NULL);
}

/* 1 MiB echoed through TLS in 64 KiB steps (Python's SSL socket cannot
 * read and write from two threads at once; /tls/weft-client does the
 * simultaneous case), then a second connection resumes with the session
 * ticket. */
static void
test_python_echo (void)
{
  if (need_env ("WEFT_TEST_PYTHON", "python3") == NULL)
    return;
  WeftTlsConfig *config = server_config (certs.localhost);
  WtServer srv;
  tls_server_start (&srv, config, wt_echo_setup, NULL);
  gchar *out = run_python (srv.port, "localhost", "echo");
  if (strstr (out, "alpn http/1.1 TLSv1.3\n") == NULL || strstr (out, "reused True\n") == NULL)
    g_error ("python output:\n%s", out);
  g_free (out);

  /* Without tickets the second connection does a full handshake. */
  weft_tls_config_set_session_tickets (config, FALSE);
  WtServer srv2;
  tls_server_start (&srv2, config, wt_echo_setup, NULL);
  out = run_python (srv2.port, "localhost", "echo");
  if (strstr (out, "reused False\n") == NULL)
    g_error ("python output:\n%s", out);
  g_free (out);
  wt_server_stop (&srv2);
  wt_server_stop (&srv);
  weft_tls_config_unref (config);
}

/* ---- resumption with client certificates ------------------------------ */

/* Runs the Python client's resume mode and fails unless its output holds
 * @want. */
static void
expect_resume (guint16 port, const char *name, const char *mode, WtCert *client,
               const char *want)
{
  gchar *out = run_python_as (port, name, mode, client);
  if (strstr (out, "ticket True\n") == NULL || strstr (out, want) == NULL)
    g_error ("python %s (expected '%s'):\n%s", mode, want, out);
  g_free (out);
}

/* A server that requires client certificates resumes its clients'
 * sessions, with TLS 1.3 and 1.2 (it refused every resumption with an
 * internal_error alert: no session id context was set). */
static void
test_client_cert_resumption (void)
{
  if (need_env ("WEFT_TEST_PYTHON", "python3") == NULL)
    return;
  GError *error = NULL;
  WeftTlsConfig *config = server_config (certs.localhost);
  g_assert_true (weft_tls_config_set_ca_file (config, certs.ca->cert_file, &error));
  g_assert_no_error (error);
  weft_tls_config_set_verify_peer (config, TRUE);
  WtServer srv;
  tls_server_start (&srv, config, greet_setup, NULL);
  expect_resume (srv.port, "localhost", "resume:localhost", certs.localhost,
                 "second resumed weft-hello alpn=http/1.1 sni=localhost\n");
  expect_resume (srv.port, "localhost", "resume12:localhost", certs.localhost,
                 "second resumed weft-hello alpn=http/1.1 sni=localhost\n");
  g_assert_cmpuint (weft_listener_get_n_tls_failed (srv.listener), ==, 0);
  wt_server_stop (&srv);
  weft_tls_config_unref (config);
}

/* ---- /tls/weft-client -------------------------------------------------- */

static void
small_socket_buffers (WeftConnection *conn)
{
  int fd = weft_connection_get_fd (conn);
  int size = 64 * 1024;
  g_assert_cmpint (setsockopt (fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size), ==, 0);
  g_assert_cmpint (setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size), ==, 0);
}

/* Writes echoed while the server's write queue was above its high water
 * mark, that is while the server had stopped reading. */
static atomic_int echo_blocked_writes;

static gsize
echo_count_blocked (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  weft_connection_write (conn, data, len);
  if (weft_connection_is_write_blocked (conn))
    atomic_fetch_add (&echo_blocked_writes, 1);
  return len;
}

/* An echo server with small socket buffers and a high water mark below a
 * TLS record (16 KiB): a full record's echo, queued inside the read
 * callback, crosses it whatever the speed of either side, so every such
 * read pauses reading until the queue drains. */
static void
echo_small_setup (WeftConnection *conn, gpointer test_data)
{
  small_socket_buffers (conn);
  weft_connection_set_write_watermarks (conn, 4 * 1024, 1024);
  weft_connection_start_reading (conn, echo_count_blocked, NULL, NULL);
}

typedef struct {
  WeftTlsConfig *config;
  GByteArray *want;
  GByteArray *got;
  gchar *alpn;
  gchar *error;
  atomic_int done; /* 1: connect finished (either way); 2: all echoed */
} Client;

static gsize
client_read (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  Client *c = user_data;
  g_byte_array_append (c->got, data, (guint) len);
  if (c->got->len >= c->want->len)
    {
      weft_connection_close (conn);
      atomic_store (&c->done, 2);
    }
  return len;
}

static void
client_connected (WeftConnection *conn, const GError *error, gpointer user_data)
{
  Client *c = user_data;
  if (conn == NULL)
    {
      c->error = g_strdup (error->message);
      atomic_store (&c->done, 1);
      return;
    }
  g_assert_true (weft_connection_is_tls (conn));
  c->alpn = g_strdup (weft_connection_get_alpn_protocol (conn));
  if (c->want != NULL)
    {
      /* Small kernel buffers make the two ends' flow control decide the
       * outcome instead of TCP autotuning. The client queues its whole
       * payload at once and must go on reading meanwhile: with the default
       * high water mark it would stop reading while the echo server, its
       * own queue full, stops reading too, a deadlock once the buffers in
       * between fill (seen once in CI with the default buffers). */
      small_socket_buffers (conn);
      weft_connection_set_write_watermarks (conn, G_MAXSIZE, G_MAXSIZE);
      weft_connection_start_reading (conn, client_read, c, NULL);
      weft_connection_write (conn, c->want->data, c->want->len);
    }
  else
    weft_connection_close (conn);
  atomic_store (&c->done, 1);
}

/* Connects with Weft's TLS client to @host:@port; returns the error
 * message or NULL. With @echo_len > 0, sends that many bytes in one write
 * and waits for them to come back. */
static gchar *
weft_client (WeftEngine *engine, const char *host, guint16 port, gsize echo_len, gchar **alpn)
{
  WeftContext *ctx = weft_context_new (engine);
  weft_context_dispatch (ctx);
  Client c = { 0 };
  c.config = client_config ();
  if (echo_len > 0)
    {
      c.want = g_byte_array_sized_new ((guint) echo_len);
      for (gsize i = 0; i < echo_len; i++)
        {
          guint8 b = (guint8) (i * 7 + i / 251);
          g_byte_array_append (c.want, &b, 1);
        }
      c.got = g_byte_array_new ();
    }
  weft_connection_connect_async (ctx, host, port, 5000, c.config, client_connected, &c, NULL);
  /* c.error and c.alpn are written before c.done: read them after. */
  WT_WAIT_UNTIL (atomic_load (&c.done) >= 1);
  g_assert_cmpint (atomic_load (&c.done), >=, 1);
  if (c.error == NULL && echo_len > 0)
    {
      WT_WAIT_UNTIL (atomic_load (&c.done) == 2);
      g_assert_cmpint (atomic_load (&c.done), ==, 2);
      g_assert_cmpmem (c.got->data, c.got->len, c.want->data, c.want->len);
    }
  g_assert_cmpint (atomic_load (&c.done), >=, 1);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
  if (c.want != NULL)
    {
      g_byte_array_unref (c.want);
      g_byte_array_unref (c.got);
    }
  weft_tls_config_unref (c.config);
  if (alpn != NULL)
    *alpn = c.alpn;
  else
    g_free (c.alpn);
  return c.error;
}

/* Weft's client to Weft's server: 8 MiB in one write (partial TLS writes,
 * the write queue and the server's watermarks all take part), echoed back
 * intact; ALPN agreed on both sides. */
static void
test_weft_client (void)
{
  WeftTlsConfig *config = server_config (certs.localhost);
  WtServer srv;
  tls_server_start (&srv, config, echo_small_setup, NULL);
  atomic_store (&echo_blocked_writes, 0);
  gchar *alpn = NULL;
  gchar *error = weft_client (srv.engine, "localhost", srv.port, 8 << 20, &alpn);
  g_assert_cmpstr (error, ==, NULL);
  g_assert_cmpstr (alpn, ==, "http/1.1");
  g_free (alpn);
  /* The server stopped reading at its high water mark and resumed. */
  g_assert_cmpint (atomic_load (&echo_blocked_writes), >, 0);
  /* By address: checked against the certificate's IP entry. */
  error = weft_client (srv.engine, "127.0.0.1", srv.port, 1000, NULL);
  g_assert_cmpstr (error, ==, NULL);
  wt_server_stop (&srv);
  weft_tls_config_unref (config);
}

/* ---- /tls/http-server-gone-in-handshake ------------------------------- */

static void
hello_tls (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_respond (request, 200, "text/plain", (const guint8 *) "Hello, TLS!", 11);
}

/* An HTTPS server on @engine answering GET / with hello_tls(), started on
 * a free port (*port); @header_timeout_ms 0 keeps the default. */
static WeftHttpServer *
https_server_start (WeftEngine *engine, WeftTlsConfig *config, guint header_timeout_ms,
                    guint16 *port)
{
  WeftHttpServer *server = weft_http_server_new (engine);
  if (header_timeout_ms != 0)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS, header_timeout_ms);
  weft_http_server_add_handler (server, "GET", "/", hello_tls, NULL, NULL);
  WeftListener *listener = weft_http_server_get_listener (server);
  weft_listener_set_tls (listener, config);
  GError *error = NULL;
  g_assert_true (weft_listener_add_tcp (listener, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  g_assert_true (weft_http_server_start (server, &error));
  g_assert_no_error (error);
  *port = weft_listener_get_port (listener, 0);
  return server;
}

typedef struct {
  GByteArray *got;  /* what the server answered (on the client's context) */
  gboolean shook;   /* the client's handshake succeeded */
  atomic_int state; /* 1: handshake over, 2: connection closed */
} Gone;

static gsize
gone_read (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  Gone *g = user_data;
  g_byte_array_append (g->got, data, (guint) len);
  return len;
}

static void
gone_event (WeftConnection *conn, WeftConnectionEvent event, const GError *error,
            gpointer user_data)
{
  Gone *g = user_data;
  if (event == WEFT_CONNECTION_EVENT_PEER_CLOSED)
    weft_connection_close (conn);
  else if (event == WEFT_CONNECTION_EVENT_CLOSED)
    atomic_store (&g->state, 2);
}

static void
gone_connected (WeftConnection *conn, const GError *error, gpointer user_data)
{
  Gone *g = user_data;
  if (conn == NULL)
    {
      /* The server may close before the client's handshake completes. */
      atomic_store (&g->state, 2);
      return;
    }
  g->shook = TRUE;
  weft_connection_set_event_func (conn, gone_event, g, NULL);
  weft_connection_start_reading (conn, gone_read, g, NULL);
  const char *req = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
  weft_connection_write (conn, (const guint8 *) req, strlen (req));
  atomic_store (&g->state, 1);
}

/* The HTTPS server's last reference goes while a connection it accepted
 * is in its TLS handshake: the handshake ends after the server is gone,
 * and the connection must be refused (not served) without touching the
 * freed server (ASan, TSan and valgrind see it if it is; first seen as a
 * TSan report in /http-stream/answer-races-drop, where a plain accept job
 * queued before the last unref raced the same way). */
static void
test_http_server_gone_in_handshake (void)
{
  WeftTlsConfig *config = server_config (certs.localhost);
  WeftEngine *engine = wt_engine_new (2);
  guint16 port;
  WeftHttpServer *server = https_server_start (engine, config, 0, &port);
  WeftListener *listener = weft_http_server_get_listener (server);
  GError *error = NULL;

  /* TCP only: the server accepts and waits for a ClientHello. */
  int fd = wt_connect_tcp (port);
  WT_WAIT_UNTIL (weft_listener_get_n_accepted (listener) == 1);
  g_assert_cmpuint (weft_listener_get_n_accepted (listener), ==, 1);
  weft_http_server_unref (server); /* the last reference: nothing served yet */

  /* Now the handshake and a request, by Weft's client on that socket. */
  WeftTlsConfig *cconfig = client_config ();
  WeftContext *ctx = weft_context_new (engine);
  WeftConnection *conn = weft_connection_new (ctx, fd, &error);
  g_assert_no_error (error);
  Gone g = { .got = g_byte_array_new () };
  weft_connection_start_tls (conn, cconfig, "localhost", gone_connected, &g, NULL);
  weft_context_dispatch (ctx);
  WT_WAIT_UNTIL (atomic_load (&g.state) == 2);
  g_assert_cmpint (atomic_load (&g.state), ==, 2);
  g_test_message ("client handshake %s", g.shook ? "done" : "cut off");
  g_assert_cmpuint (g.got->len, ==, 0);
  g_byte_array_unref (g.got);
  weft_connection_unref (conn);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
  weft_tls_config_unref (cconfig);
  weft_engine_unref (engine);
  weft_tls_config_unref (config);
}

/* ---- /tls/listener-unref-in-handshake ---------------------------------- */

typedef struct {
  atomic_int calls;    /* the accept function's */
  atomic_int notified; /* the listener's notify */
} Refused;

static void
refused_accept (WeftListener *listener, WeftConnection *conn, gpointer user_data)
{
  Refused *r = user_data;
  atomic_fetch_add (&r->calls, 1);
}

static void
refused_notify (gpointer data)
{
  Refused *r = data;
  atomic_fetch_add (&r->notified, 1);
}

/* A plain TLS listener's last reference goes while a connection it
 * accepted is in its handshake; the client then completes it. The
 * accept function must not run (its data may be gone), the connection is
 * closed, and the notify runs once. */
static void
test_listener_unref_in_handshake (void)
{
  WeftTlsConfig *config = server_config (certs.localhost);
  WeftEngine *engine = wt_engine_new (2);
  Refused r = { 0 };
  WeftListener *listener = weft_listener_new (engine, refused_accept, &r, refused_notify);
  weft_listener_set_tls (listener, config);
  GError *error = NULL;
  g_assert_true (weft_listener_add_tcp (listener, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  g_assert_true (weft_listener_start (listener, &error));
  g_assert_no_error (error);
  guint16 port = weft_listener_get_port (listener, 0);

  /* TCP only: the server accepts and waits for a ClientHello. */
  int fd = wt_connect_tcp (port);
  WT_WAIT_UNTIL (weft_listener_get_n_accepted (listener) == 1);
  g_assert_cmpuint (weft_listener_get_n_accepted (listener), ==, 1);
  weft_listener_unref (listener); /* the last reference */
  g_assert_cmpint (atomic_load (&r.notified), ==, 0); /* a connection is live */

  WeftTlsConfig *cconfig = client_config ();
  WeftContext *ctx = weft_context_new (engine);
  WeftConnection *conn = weft_connection_new (ctx, fd, &error);
  g_assert_no_error (error);
  Gone g = { .got = g_byte_array_new () };
  weft_connection_start_tls (conn, cconfig, "localhost", gone_connected, &g, NULL);
  weft_context_dispatch (ctx);
  WT_WAIT_UNTIL (atomic_load (&g.state) == 2);
  g_assert_cmpint (atomic_load (&g.state), ==, 2);
  g_test_message ("client handshake %s", g.shook ? "done" : "cut off");
  g_assert_cmpuint (g.got->len, ==, 0);
  WT_WAIT_UNTIL (atomic_load (&r.notified) == 1);
  g_assert_cmpint (atomic_load (&r.notified), ==, 1);
  g_assert_cmpint (atomic_load (&r.calls), ==, 0);

  g_byte_array_unref (g.got);
  weft_connection_unref (conn);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
  weft_tls_config_unref (cconfig);
  weft_engine_unref (engine);
  g_assert_cmpint (atomic_load (&r.notified), ==, 1);
  g_assert_cmpint (atomic_load (&r.calls), ==, 0);
  weft_tls_config_unref (config);
}

/* ---- /tls/expired-cert ------------------------------------------------- */

/* A server with an expired certificate: both Weft's client and Python's
 * refuse it, naming the reason; the server logs its side of the failed
 * handshakes and serves a client that does not verify. */
static void
test_expired_cert (void)
{
  WeftTlsConfig *config = server_config (certs.expired);
  WtServer srv;
  tls_server_start (&srv, config, wt_echo_setup, NULL);

  gchar *error = weft_client (srv.engine, "localhost", srv.port, 0, NULL);
  g_assert_nonnull (error);
  if (strstr (error, "certificate has expired") == NULL)
    g_error ("unexpected error: %s", error);
  g_free (error);

  if (g_getenv ("WEFT_TEST_PYTHON") != NULL)
    {
      gchar *out = run_python (srv.port, "localhost", "fail");
      if (strstr (out, "failed") == NULL || strstr (out, "certificate has expired") == NULL)
        g_error ("python output:\n%s", out);
      g_free (out);
    }
  WT_WAIT_UNTIL (weft_listener_get_n_tls_failed (srv.listener) >= 1);
  g_assert_cmpuint (weft_listener_get_n_tls_failed (srv.listener), >=, 1);

  /* Nothing else harmed: a client that skips verification gets through. */
  WeftContext *ctx = weft_context_new (srv.engine);
  weft_context_dispatch (ctx);
  Client c = { 0 };
  c.config = client_config ();
  weft_tls_config_set_verify_peer (c.config, FALSE);
  weft_connection_connect_async (ctx, "localhost", srv.port, 5000, c.config, client_connected,
                                 &c, NULL);
  WT_WAIT_UNTIL (atomic_load (&c.done) == 1);
  g_assert_cmpstr (c.error, ==, NULL);
  g_assert_cmpstr (c.alpn, ==, "http/1.1");
  g_free (c.alpn);
  weft_tls_config_unref (c.config);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
  wt_server_stop (&srv);
  weft_tls_config_unref (config);
}

/* ---- SNI --------------------------------------------------------------- */

typedef struct {
  WeftTlsConfig *localhost;
  WeftTlsConfig *b_test;
  atomic_int calls;
} Sni;

static WeftTlsConfig *
choose (WeftTlsConfig *config, const gchar *server_name, gpointer user_data)
{
  Sni *sni = user_data;
  atomic_fetch_add (&sni->calls, 1);
  if (g_strcmp0 (server_name, "localhost") == 0)
    return config;
  if (g_strcmp0 (server_name, "b.test") == 0)
    return sni->b_test;
  return NULL;
}

/* The SNI callback picks b.test's certificate for b.test (Python verifies
 * it against that name) and refuses an unknown name with an
 * unrecognized_name alert (s_client reports it); a name the server does
 * not know but does not refuse gets the default certificate, which Weft's
 * client rejects as the wrong name. */
static void
test_sni (void)
{
  Sni sni = { 0 };
  GError *error = NULL;
  sni.localhost = server_config (certs.localhost);
  /* b.test: a certificate, no ALPN list of its own, and client
   * certificates required. */
  sni.b_test = weft_tls_config_new_server (&error);
  g_assert_no_error (error);
  g_assert_true (weft_tls_config_set_certificate_pem (sni.b_test, certs.b_test->cert_pem,
                                                      certs.b_test->key_pem, &error));
  g_assert_true (weft_tls_config_set_ca_file (sni.b_test, certs.ca->cert_file, &error));
  g_assert_no_error (error);
  weft_tls_config_set_verify_peer (sni.b_test, TRUE);
  weft_tls_config_set_sni_func (sni.localhost, choose, &sni, NULL);
  WtServer srv;
  tls_server_start (&srv, sni.localhost, greet_setup, NULL);

  if (g_getenv ("WEFT_TEST_PYTHON") != NULL)
    {
      /* b.test's certificate, the default configuration's ALPN. */
      gchar *out = run_python_as (srv.port, "b.test", "cn", certs.localhost);
      if (strstr (out, "cn b.test http/1.1\n") == NULL)
        g_error ("python output:\n%s", out);
      g_free (out);
      /* b.test requires a client certificate even though the default
       * configuration does not. */
      out = run_python (srv.port, "b.test", "fail");
      if (strstr (out, "failed") == NULL)
        g_error ("python output (a client without certificate got through):\n%s", out);
      g_free (out);
      out = run_python (srv.port, "localhost", "cn");
      if (strstr (out, "cn localhost http/1.1\n") == NULL)
        g_error ("python output:\n%s", out);
      g_free (out);
      /* A ticket from the default configuration (no client certificate)
       * offered to b.test does not skip b.test's certificate: refused
       * without one (TLS 1.3 resumed it, TLS 1.2 resumed it under the old
       * name), a full handshake with one. */
      expect_resume (srv.port, "localhost", "resume:b.test", NULL, "second failed");
      expect_resume (srv.port, "localhost", "resume12:b.test", NULL, "second failed");
      expect_resume (srv.port, "localhost", "resume:b.test", certs.localhost,
                     "second full weft-hello alpn=http/1.1 sni=b.test\n");
      expect_resume (srv.port, "localhost", "resume12:b.test", certs.localhost,
                     "second full weft-hello alpn=http/1.1 sni=b.test\n");
      /* Within one configuration resumption still works. */
      expect_resume (srv.port, "b.test", "resume:b.test", certs.localhost,
                     "second resumed weft-hello alpn=http/1.1 sni=b.test\n");
      expect_resume (srv.port, "localhost", "resume:localhost", NULL,
                     "second resumed weft-hello alpn=http/1.1 sni=localhost\n");
    }

  const char *openssl = g_getenv ("WEFT_TEST_OPENSSL");
  if (openssl != NULL)
    {
      gchar *connect = g_strdup_printf ("127.0.0.1:%u", srv.port);
      const char *argv[] = { openssl, "s_client", "-connect", connect, "-servername",
                             "wrong.test", "-CAfile", certs.ca->cert_file, "-ign_eof", NULL };
      gchar *out = NULL;
      gboolean ok = run_client (argv, &out);
      if (ok || strstr (out, "unrecognized name") == NULL)
        g_error ("s_client should fail with unrecognized name:\n%s", out);
      g_free (out);
      g_free (connect);
    }
  /* Weft's client sends SNI too (a name, not an address). */
  gchar *err = weft_client (srv.engine, "localhost", srv.port, 0, NULL);
  g_assert_cmpstr (err, ==, NULL);
  g_assert_cmpint (atomic_load (&sni.calls), >=, 1);
  WT_WAIT_UNTIL (weft_listener_get_n_tls_failed (srv.listener) >= (openssl != NULL ? 1 : 0));
  wt_server_stop (&srv);

  /* No SNI function: b.test's server answers "localhost" with its only
   * certificate, and the client refuses the mismatch. */
  WeftTlsConfig *b_only = server_config (certs.b_test);
  WtServer srv2;
  tls_server_start (&srv2, b_only, wt_echo_setup, NULL);
  gchar *message = weft_client (srv2.engine, "localhost", srv2.port, 0, NULL);
  g_assert_nonnull (message);
  if (strstr (message, "mismatch") == NULL)
    g_error ("unexpected error: %s", message);
  g_free (message);
  wt_server_stop (&srv2);
  weft_tls_config_unref (b_only);
  weft_tls_config_unref (sni.localhost);
  weft_tls_config_unref (sni.b_test);
}

/* ---- /tls/client-hello-server-name ------------------------------------- */

/* The SNI function sees only a name OpenSSL accepts too: one host_name
 * entry filling the list exactly, 1 to 255 bytes, no NUL. (Trailing
 * entries or bytes, and a name length one short, used to reach it.) */
static void
test_client_hello_server_name (void)
{
  static const struct {
    const char *bytes; /* the extension's body */
    gsize len;
    const char *want;  /* NULL: refused */
  } cases[] = {
#define C(b, w) { b, sizeof b - 1, w }
    C ("\x00\x09\x00\x00\x06" "a.test", "a.test"),
    C ("\x00\x09\x00\x00\x05" "a.test", NULL),                /* name one short */
    C ("\x00\x09\x00\x00\x07" "a.test", NULL),                /* one long */
    C ("\x00\x0a\x00\x00\x06" "a.test" "x", NULL),            /* a trailing byte */
    C ("\x00\x12\x00\x00\x06" "a.test" "\x00\x00\x06" "b.test", NULL), /* two names */
    C ("\x00\x12\x00\x00\x06" "a.test" "\x01\x00\x06" "b.test", NULL), /* then type 1 */
    C ("\x00\x09\x01\x00\x06" "a.test", NULL),                /* not a host_name */
    C ("\x00\x03\x00\x00\x00", NULL),                         /* empty name */
    C ("\x00\x09\x00\x00\x06" "a.\0est", NULL),              /* a NUL inside */
    C ("\x00\x08\x00\x00\x06" "a.test", NULL),                /* list length short */
    C ("\x00\x00", NULL),                                       /* empty list */
    C ("\x00", NULL),
    C ("", NULL),
#undef C
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      gchar *got = weft__tls_client_hello_server_name ((const unsigned char *) cases[i].bytes,
                                                       cases[i].len);
      if (g_strcmp0 (got, cases[i].want) != 0)
        g_error ("case %" G_GSIZE_FORMAT ": got %s, want %s", i, got ? got : "NULL",
                 cases[i].want ? cases[i].want : "NULL");
      g_free (got);
    }
  /* 255 bytes is the longest name, 256 too long. */
  guint8 ext[2 + 3 + 256];
  for (gsize n = 255; n <= 256; n++)
    {
      gsize list = 3 + n;
      ext[0] = (guint8) (list >> 8);
      ext[1] = (guint8) list;
      ext[2] = 0;
      ext[3] = (guint8) (n >> 8);
      ext[4] = (guint8) n;
      memset (ext + 5, 'a', n);
      gchar *got = weft__tls_client_hello_server_name (ext, 2 + list);
      if (n == 255)
        g_assert_cmpuint (strlen (got), ==, 255);
      else
        g_assert_null (got);
      g_free (got);
    }
}

/* ---- /tls/bad-client-hello --------------------------------------------- */

/* Sends @data (then half-closes if @shut) and expects the server to close
 * the connection (EOF or reset), with whatever alert it sends first. */
static void
expect_closed (guint16 port, const void *data, gsize len, gboolean shut)
{
  int fd = wt_connect_tcp (port);
  wt_send_all (fd, data, len);
  if (shut)
    shutdown (fd, SHUT_WR);
  GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
  /* Anything sent back is a TLS alert record (type 21), never data. */
  if (got->len > 0)
    g_assert_cmpuint (got->data[0], ==, 21);
  g_byte_array_unref (got);
  close (fd);
}

/* Plain HTTP, random bytes, a truncated ClientHello and an oversized
 * record each close only their own connection, counted as failed
 * handshakes; a bad record after a good handshake closes its connection;
 * the server keeps serving. */
static void
test_bad_client_hello (void)
{
  WeftTlsConfig *config = server_config (certs.localhost);
  WtServer srv;
  tls_server_start (&srv, config, wt_echo_setup, NULL);

  const char *http = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
  expect_closed (srv.port, http, strlen (http), FALSE);

  guint8 noise[1024];
  for (gsize i = 0; i < sizeof noise; i++)
    noise[i] = (guint8) g_random_int ();
  noise[0] = 0x16; /* looks like a handshake record, then garbage */
  expect_closed (srv.port, noise, sizeof noise, FALSE);

  /* Handshake record header announcing 512 bytes, 10 sent, then EOF. */
  const guint8 truncated[] = { 0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03,
                               0x03, 0, 0, 0, 0 };
  expect_closed (srv.port, truncated, sizeof truncated, TRUE);

  /* A record longer than TLS allows (2^14 + 2048). */
  const guint8 huge[] = { 0x16, 0x03, 0x01, 0xff, 0xff, 0x01 };
  expect_closed (srv.port, huge, sizeof huge, FALSE);

  /* A record that fails to decrypt after a good handshake. */
  if (g_getenv ("WEFT_TEST_PYTHON") != NULL)
    {
      gchar *out = run_python (srv.port, "localhost", "badrecord");
      if (!g_str_has_prefix (out, "closed"))
        g_error ("python output:\n%s", out);
      g_free (out);
    }

  WT_WAIT_UNTIL (weft_listener_get_n_tls_failed (srv.listener) == 4);
  g_assert_cmpuint (weft_listener_get_n_tls_failed (srv.listener), ==, 4);
  WT_WAIT_UNTIL (weft_listener_get_n_connections (srv.listener) == 0);
  g_assert_cmpuint (weft_listener_get_n_connections (srv.listener), ==, 0);

  gchar *error = weft_client (srv.engine, "localhost", srv.port, 100000, NULL);
  g_assert_cmpstr (error, ==, NULL);
  wt_server_stop (&srv);
  weft_tls_config_unref (config);
}

/* ---- /tls/handshake-timeout -------------------------------------------- */

/* A client that connects and says nothing is closed after the handshake
 * timeout, not held forever. */
static void
test_handshake_timeout (void)
{
  WeftTlsConfig *config = server_config (certs.localhost);
  weft_tls_config_set_handshake_timeout (config, 300);
  WtServer srv;
  tls_server_start (&srv, config, wt_echo_setup, NULL);
  int fd = wt_connect_tcp (srv.port);
  gint64 start = g_get_monotonic_time ();
  GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
  gint64 elapsed = g_get_monotonic_time () - start;
  g_assert_cmpuint (got->len, ==, 0);
  g_byte_array_unref (got);
  close (fd);
  g_assert_cmpint (elapsed, >=, 250 * 1000);
  g_assert_cmpint (elapsed, <, 5 * G_USEC_PER_SEC);
  WT_WAIT_UNTIL (weft_listener_get_n_tls_failed (srv.listener) == 1);
  g_assert_cmpuint (weft_listener_get_n_tls_failed (srv.listener), ==, 1);
  wt_server_stop (&srv);
  weft_tls_config_unref (config);
}

/* ---- /tls/connect-deadline-mid-handshake ------------------------------- */

typedef struct {
  atomic_int done;
  atomic_int code;
  atomic_int got_conn;
  atomic_int notified;
} DeadlineConnect;

static void
deadline_notify (gpointer user_data)
{
  DeadlineConnect *d = user_data;
  atomic_fetch_add (&d->notified, 1);
}

static void
deadline_connected (WeftConnection *conn, const GError *error, gpointer user_data)
{
  DeadlineConnect *d = user_data;
  atomic_store (&d->got_conn, conn != NULL);
  atomic_store (&d->code, error != NULL && error->domain == G_IO_ERROR ? error->code : -1);
  atomic_store (&d->done, 1);
}

/* weft_connection_connect_async() with TLS to a server that takes the TCP
 * connection and never answers the ClientHello, ended by the connect's
 * deadline (@deadline_ms) or by the client configuration's handshake
 * timeout (@handshake_ms, 0 for the default): the callback says TIMED_OUT
 * once with no connection, the notify runs once, and the connection it
 * never handed out is closed then, not left open until its context goes
 * (the server sees the ClientHello, then the end). */
static void
expect_stalled_handshake_times_out (guint deadline_ms, guint handshake_ms)
{
  guint16 port;
  int lfd = wt_listening_socket (4, &port);

  WeftEngine *engine = wt_engine_new (2);
  WeftContext *ctx = weft_context_new (engine);
  weft_context_dispatch (ctx);
  WeftTlsConfig *cc = client_config ();
  if (handshake_ms != 0)
    weft_tls_config_set_handshake_timeout (cc, handshake_ms);
  DeadlineConnect d = { 0 };
  weft_connection_connect_async (ctx, "127.0.0.1", port, deadline_ms, cc, deadline_connected,
                                 &d, deadline_notify);
  int sfd = accept4 (lfd, NULL, NULL, SOCK_CLOEXEC);
  g_assert_cmpint (sfd, >=, 0);
  WT_WAIT_UNTIL (atomic_load (&d.notified) == 1);
  g_assert_cmpint (atomic_load (&d.done), ==, 1);
  g_assert_cmpint (atomic_load (&d.got_conn), ==, 0);
  g_assert_cmpint (atomic_load (&d.code), ==, G_IO_ERROR_TIMED_OUT);

  /* Well within the receive timeout (a timeout fails the assertion inside
   * wt_recv_to_eof). */
  wt_set_timeouts (sfd, 5000);
  gboolean reset = FALSE;
  g_byte_array_unref (wt_recv_to_eof (sfd, TRUE, &reset));
  close (sfd);

  close (lfd);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
  weft_tls_config_unref (cc);
  weft_engine_unref (engine);
  g_assert_cmpint (atomic_load (&d.notified), ==, 1);
}

/* The connect's deadline passes in the handshake. 2 s: long enough for the
 * resolver and the connect to come before it even under Valgrind, so there
 * is always a connection to watch. */
static void
test_connect_deadline_mid_handshake (void)
{
  expect_stalled_handshake_times_out (2000, 0);
}

/* No connect deadline: the handshake timeout ends it. (The timeout fired
 * with no reference of its own, and the connect's done callback dropped the
 * last one while the failure was still being handled: a use-after-free
 * that ASan reports.) */
static void
test_connect_handshake_timeout (void)
{
  expect_stalled_handshake_times_out (0, 200);
}

/* The same connect, its context destroyed from another thread while the
 * handshake waits (before its deadline): the connection closes with the
 * context, the callback hears of it once (or not at all) and the notify
 * runs once, with no critical from calls made off the context. */
static void
test_connect_destroyed_mid_handshake (void)
{
  guint16 port;
  int lfd = wt_listening_socket (4, &port);

  WeftEngine *engine = wt_engine_new (2);
  WeftContext *ctx = weft_context_new (engine);
  weft_context_dispatch (ctx);
  WeftTlsConfig *cc = client_config ();
  DeadlineConnect d = { 0 };
  weft_connection_connect_async (ctx, "127.0.0.1", port, 60000, cc,
                                 deadline_connected, &d, deadline_notify);
  int sfd = accept4 (lfd, NULL, NULL, SOCK_CLOEXEC); /* no deadline to beat */
  g_assert_cmpint (sfd, >=, 0);
  /* The ClientHello has come: the handshake waits for an answer. */
  wt_set_timeouts (sfd, 5000);
  char hello[5];
  wt_recv_exactly (sfd, hello, sizeof hello);
  g_assert_cmpint (hello[0], ==, 0x16); /* a TLS handshake record */

  weft_context_destroy (ctx);
  WT_WAIT_UNTIL (atomic_load (&d.notified) == 1);
  g_assert_cmpint (atomic_load (&d.notified), ==, 1);
  g_assert_cmpint (atomic_load (&d.got_conn), ==, 0);
  gboolean reset = FALSE;
  g_byte_array_unref (wt_recv_to_eof (sfd, TRUE, &reset));

  close (sfd);
  close (lfd);
  weft_context_unref (ctx);
  weft_tls_config_unref (cc);
  weft_engine_unref (engine);
  g_assert_cmpint (atomic_load (&d.notified), ==, 1);
}

/* ---- /tls/many-handshakes ---------------------------------------------- */

/* Concurrent handshakes on every worker: 200 Weft clients on one engine
 * against a TLS echo server on another, each echoing 1 KiB. The load is
 * under test here, not the timeouts: under Valgrind, which runs one thread
 * at a time, the 200 handshakes take 10 to 15 s in all and most end near
 * the end of the batch, past the 10 s default handshake timeout that runs
 * from each accept. The timeouts and the wait only bound a hang. */
static void
test_many_handshakes (void)
{
  const guint limit_ms = 6 * WT_DEADLINE_US / 1000;
  WeftTlsConfig *config = server_config (certs.localhost);
  weft_tls_config_set_handshake_timeout (config, limit_ms);
  WtServer srv;
  tls_server_start (&srv, config, wt_echo_setup, NULL);
  WeftEngine *engine = wt_engine_new (2);
  enum { N = 200 };
  WeftContext *ctxs[N];
  Client *cs = g_new0 (Client, N);
  WeftTlsConfig *cc = client_config ();
  weft_tls_config_set_handshake_timeout (cc, limit_ms);
  for (int i = 0; i < N; i++)
    {
      ctxs[i] = weft_context_new (engine);
      weft_context_dispatch (ctxs[i]);
      cs[i].want = g_byte_array_new ();
      g_byte_array_set_size (cs[i].want, 1024);
      memset (cs[i].want->data, 'a' + i % 26, 1024);
      cs[i].got = g_byte_array_new ();
      weft_connection_connect_async (ctxs[i], "localhost", srv.port, limit_ms, cc,
                                     client_connected, &cs[i], NULL);
    }
  gint64 end = g_get_monotonic_time () + (gint64) limit_ms * 1000; /* for the whole batch */
  for (int i = 0; i < N; i++)
    {
      while (atomic_load (&cs[i].done) < 1 && g_get_monotonic_time () < end)
        g_usleep (1000);
      g_assert_cmpint (atomic_load (&cs[i].done), >=, 1);
      g_assert_cmpstr (cs[i].error, ==, NULL);
      while (atomic_load (&cs[i].done) < 2 && g_get_monotonic_time () < end)
        g_usleep (1000);
      g_assert_cmpint (atomic_load (&cs[i].done), ==, 2);
      g_assert_cmpmem (cs[i].got->data, cs[i].got->len, cs[i].want->data, cs[i].want->len);
    }
  for (int i = 0; i < N; i++)
    {
      weft_context_destroy (ctxs[i]);
      weft_context_unref (ctxs[i]);
      g_byte_array_unref (cs[i].want);
      g_byte_array_unref (cs[i].got);
      g_free (cs[i].alpn);
    }
  g_free (cs);
  weft_tls_config_unref (cc);
  weft_engine_unref (engine);
  g_assert_cmpuint (weft_listener_get_n_tls_failed (srv.listener), ==, 0);
  wt_server_stop (&srv);
  weft_tls_config_unref (config);
}

/* ---- /tls/https-hostile ------------------------------------------------- */

/* A blocking OpenSSL client connected to 127.0.0.1:@port (name checked). */
static SSL *
ossl_connect (SSL_CTX *cctx, guint16 port)
{
  int fd = wt_connect_tcp (port);
  SSL *ssl = SSL_new (cctx);
  SSL_set_fd (ssl, fd);
  SSL_set_tlsext_host_name (ssl, "localhost");
  SSL_set1_host (ssl, "localhost");
  if (SSL_connect (ssl) != 1)
    g_error ("TLS handshake with the HTTPS server failed");
  return ssl;
}

static void
ossl_close (SSL *ssl)
{
  int fd = SSL_get_fd (ssl);
  SSL_free (ssl);
  close (fd);
}

static SSL_CTX *
ossl_client_ctx (int max_version)
{
  SSL_CTX *cctx = SSL_CTX_new (TLS_client_method ());
  g_assert_nonnull (cctx);
  if (max_version != 0)
    SSL_CTX_set_max_proto_version (cctx, max_version);
  SSL_CTX_set_verify (cctx, SSL_VERIFY_PEER, NULL);
  g_assert_cmpint (SSL_CTX_load_verify_locations (cctx, certs.ca->cert_file, NULL), ==, 1);
  return cctx;
}

/* GET / on @ssl; TRUE if the whole answer is 200 "Hello, TLS!". */
static gboolean
ossl_get (SSL *ssl)
{
  static const char req[] = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
  if (SSL_write (ssl, req, sizeof req - 1) != (int) sizeof req - 1)
    return FALSE;
  GString *in = g_string_new (NULL);
  char buf[4096];
  const char *end;
  gboolean ok = FALSE;
  while ((end = strstr (in->str, "\r\n\r\n")) == NULL)
    {
      int n = SSL_read (ssl, buf, sizeof buf);
      if (n <= 0)
        goto out;
      g_string_append_len (in, buf, n);
    }
  gsize head_len = (gsize) (end - in->str) + 4;
  while (in->len < head_len + 11)
    {
      int n = SSL_read (ssl, buf, sizeof buf);
      if (n <= 0)
        goto out;
      g_string_append_len (in, buf, n);
    }
  ok = g_str_has_prefix (in->str, "HTTP/1.1 200 ") && in->len == head_len + 11 &&
       strcmp (in->str + head_len, "Hello, TLS!") == 0;
out:
  g_string_free (in, TRUE);
  return ok;
}

typedef struct {
  guint16 port;
  atomic_bool stop;
  atomic_uint ok;
  atomic_uint failed;
} Bystander;

/* A well-behaved HTTPS client on one keep-alive connection, all along. */
static gpointer
bystander_thread (gpointer data)
{
  Bystander *b = data;
  SSL_CTX *cctx = ossl_client_ctx (0);
  SSL *ssl = ossl_connect (cctx, b->port);
  while (!atomic_load (&b->stop))
    {
      if (ossl_get (ssl))
        atomic_fetch_add (&b->ok, 1);
      else
        {
          atomic_fetch_add (&b->failed, 1);
          break;
        }
    }
  ossl_close (ssl);
  SSL_CTX_free (cctx);
  return NULL;
}

/* Hostile TLS input against the HTTP server over TLS: plain HTTP, a
 * ClientHello cut off and left hanging (the handshake timeout), a
 * renegotiation attempt (refused: no renegotiation at all), a bad record
 * after the handshake, and a TLS client that stops in the middle of its
 * request (the header timeout, answered 408 over TLS). Each closes only
 * its own connection; a client alongside keeps getting its answers. */
static void
test_https_hostile (void)
{
  WeftTlsConfig *config = server_config (certs.localhost);
  weft_tls_config_set_handshake_timeout (config, 300);
  WeftEngine *engine = wt_engine_new (2);
  guint16 port;
  WeftHttpServer *server = https_server_start (engine, config, 300, &port);
  WeftListener *listener = weft_http_server_get_listener (server);

  Bystander b = { .port = port };
  GThread *bt = g_thread_new ("bystander", bystander_thread, &b);
  WT_WAIT_UNTIL (atomic_load (&b.ok) > 0 || atomic_load (&b.failed) > 0);
  g_assert_cmpuint (atomic_load (&b.failed), ==, 0);
  g_assert_cmpuint (atomic_load (&b.ok), >, 0);
  guint mark = atomic_load (&b.ok);

  /* Plain HTTP to the TLS port. */
  const char *http = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
  expect_closed (port, http, strlen (http), FALSE);

  /* A ClientHello record announcing 512 bytes, 10 sent, then silence:
   * the handshake timeout ends it. */
  const guint8 part[] = { 0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03,
                          0x03, 0, 0, 0, 0 };
  expect_closed (port, part, sizeof part, FALSE);

  /* Renegotiation (TLS 1.2; TLS 1.3 has none): refused. */
  SSL_CTX *cctx12 = ossl_client_ctx (TLS1_2_VERSION);
  SSL *ssl = ossl_connect (cctx12, port);
  g_assert_true (ossl_get (ssl));
  g_assert_cmpint (SSL_renegotiate (ssl), ==, 1);
  int r = SSL_do_handshake (ssl);
  g_test_message ("renegotiation refused: %s", ERR_reason_error_string (ERR_peek_last_error ()));
  g_assert_cmpint (r, !=, 1);
  ossl_close (ssl);

  /* A record that is not TLS after a good handshake. */
  SSL_CTX *cctx = ossl_client_ctx (0);
  ssl = ossl_connect (cctx, port);
  g_assert_true (ossl_get (ssl));
  int fd = SSL_get_fd (ssl);
  wt_send_all (fd, http, strlen (http));
  /* Closed (after an alert: in TLS 1.3 an encrypted record, opaque here). */
  GByteArray *got = wt_recv_to_eof (fd, TRUE, NULL);
  g_assert_cmpuint (got->len, <, 256);
  g_byte_array_unref (got);
  ossl_close (ssl);

  /* Half a request over TLS, then silence: 408, then the close. */
  ssl = ossl_connect (cctx, port);
  static const char half[] = "GET / HTTP/1.1\r\nHost: loc";
  g_assert_cmpint (SSL_write (ssl, half, sizeof half - 1), ==, (int) sizeof half - 1);
  char buf[512];
  int n = SSL_read (ssl, buf, sizeof buf - 1);
  g_assert_cmpint (n, >, 0);
  buf[n] = '\0';
  g_assert_true (g_str_has_prefix (buf, "HTTP/1.1 408 "));
  ossl_close (ssl);

  /* The bystander was served after all of it, and nothing failed. */
  WT_WAIT_UNTIL (atomic_load (&b.ok) > mark + 10 || atomic_load (&b.failed) > 0);
  atomic_store (&b.stop, TRUE);
  g_thread_join (bt);
  g_assert_cmpuint (atomic_load (&b.failed), ==, 0);
  g_assert_cmpuint (atomic_load (&b.ok), >, mark + 10);
  /* Plain HTTP and the cut ClientHello failed their handshakes. */
  g_assert_cmpuint (weft_listener_get_n_tls_failed (listener), >=, 2);
  WT_WAIT_UNTIL (weft_listener_get_n_connections (listener) == 0);
  g_assert_cmpuint (weft_listener_get_n_connections (listener), ==, 0);

  SSL_CTX_free (cctx);
  SSL_CTX_free (cctx12);
  weft_http_server_unref (server);
  weft_engine_unref (engine);
  weft_tls_config_unref (config);
}

/* ---- /tls/file-send-keeps-read-data ------------------------------------ */

/* Two connections on one context: a plain one whose read function writes
 * to a TLS one that has a file part queued (its peer reads nothing). */
typedef struct {
  WeftConnection *tls;  /* the TLS client, once connected (our reference) */
  WeftConnection *plain;
  int file;
  atomic_int ready;     /* 1: the file is queued on the TLS connection */
  atomic_int checked;   /* 1: the read bytes stayed intact; 2: they changed */
  atomic_int closed;
} Clobber;

static void
clobber_peer_event (WeftConnection *conn, WeftConnectionEvent event, const GError *error,
                    gpointer user_data)
{
}

static void
clobber_peer_setup (WeftConnection *conn, gpointer test_data)
{
  /* Reads nothing (an event function keeps it): the file stays queued
   * on the other side. */
  weft_connection_set_event_func (conn, clobber_peer_event, NULL, NULL);
}

static void
clobber_connected (WeftConnection *conn, const GError *error, gpointer user_data)
{
  Clobber *c = user_data;
  g_assert_no_error (error);
  c->tls = weft_connection_ref (conn);
  g_assert_true (weft_connection_send_file (conn, c->file, 0, 32 * 1024 * 1024, NULL));
  atomic_store (&c->ready, 1);
}

static gsize
clobber_read (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  Clobber *c = user_data;
  guint8 *copy = g_memdup2 (data, len);
  /* Flushes the TLS connection at once (not in its own fd callback):
   * its file part is read from the file, and encrypted. */
  weft_connection_write (c->tls, (const guint8 *) "x", 1);
  atomic_store (&c->checked, memcmp (copy, data, len) == 0 ? 1 : 2);
  g_free (copy);
  return len;
}

static void
clobber_close (gpointer data)
{
  Clobber *c = data;
  weft_connection_abort (c->tls);
  weft_connection_abort (c->plain);
  atomic_store (&c->closed, 1);
}

/* WeftConnectionReadFunc's @data stays valid until the callback returns.
 * A TLS connection reads the file parts it sends into a buffer before
 * encrypting them; that buffer was the thread's read scratch buffer,
 * which holds the bytes a read function on the same thread is looking
 * at: a write from it to such a connection overwrote them with the
 * file's (here zeros). */
static void
test_file_send_keeps_read_data (void)
{
  WtServer srv;
  WeftTlsConfig *config = server_config (certs.localhost);
  tls_server_start (&srv, config, clobber_peer_setup, NULL);
  WeftTlsConfig *cconfig = client_config ();
  GError *error = NULL;

  Clobber c = { 0 };
  gchar *path = g_build_filename (certs.dir, "zeros.bin", NULL);
  c.file = open (path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  g_assert_cmpint (c.file, >=, 0);
  g_assert_cmpint (ftruncate (c.file, 32 * 1024 * 1024), ==, 0);
  g_unlink (path);
  g_free (path);

  int sv[2];
  wt_socketpair (sv);
  WeftContext *ctx = weft_context_new (srv.engine);
  c.plain = weft_connection_new (ctx, sv[0], &error);
  g_assert_no_error (error);
  weft_connection_start_reading (c.plain, clobber_read, &c, NULL);
  weft_context_dispatch (ctx);
  weft_connection_connect_async (ctx, "localhost", srv.port, 5000, cconfig, clobber_connected,
                                 &c, NULL);
  WT_WAIT_UNTIL (atomic_load (&c.ready) == 1);
  g_assert_cmpint (atomic_load (&c.ready), ==, 1);

  static const char msg[] = "these bytes are the read function's";
  wt_send_all (sv[1], msg, sizeof msg - 1);
  WT_WAIT_UNTIL (atomic_load (&c.checked) != 0);
  g_assert_cmpint (atomic_load (&c.checked), ==, 1);

  weft_context_post (ctx, clobber_close, &c, NULL);
  WT_WAIT_UNTIL (atomic_load (&c.closed) == 1);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
  weft_connection_unref (c.tls);
  weft_connection_unref (c.plain);
  close (sv[1]);
  close (c.file);
  weft_tls_config_unref (cconfig);
  wt_server_stop (&srv);
  weft_tls_config_unref (config);
}

/* ---- /tls/close-notify-when-full ---------------------------------------- */

typedef struct {
  WeftConnection *conn;
  atomic_int ready;   /* the handshake is done */
  atomic_int closed;  /* CLOSED came */
  atomic_int close_called; /* the close was asked for, its flush tried */
} Notify;

static void
notify_event (WeftConnection *conn, WeftConnectionEvent event, const GError *error,
              gpointer user_data)
{
  Notify *n = user_data;
  if (event == WEFT_CONNECTION_EVENT_CLOSED)
    atomic_store (&n->closed, 1);
}

static void
notify_handshaken (WeftConnection *conn, const GError *error, gpointer user_data)
{
  Notify *n = user_data;
  g_assert_no_error (error);
  weft_connection_set_event_func (conn, notify_event, n, NULL);
  weft_connection_write (conn, (const guint8 *) "hello", 5);
  atomic_store (&n->ready, 1);
}

static void
notify_answer_and_close (gpointer data)
{
  Notify *n = data;
  static guint8 answer[6000];
  memset (answer, 'a', sizeof answer);
  weft_connection_write (n->conn, answer, sizeof answer);
  weft_connection_close (n->conn); /* (a job, not a callback: it flushes now) */
  atomic_store (&n->close_called, 1);
}

/* weft_connection_close() promises a close_notify before the close. It was
 * sent once, when the output was gone, whether or not the socket took it:
 * with the socket full (a client that reads slowly; here a small send
 * buffer, 6000 bytes of answer and a client that reads only after the
 * close), the close_notify was lost, or cut short, and the client saw its
 * data end without one: a truncation, to TLS ("unexpected eof while
 * reading" from OpenSSL's SSL_read). */
static void
test_close_notify_when_full (void)
{
  GError *error = NULL;
  signal (SIGPIPE, SIG_IGN); /* (the client's alert after a cut: its write fails) */
  WeftEngine *engine = wt_engine_new (1);
  WeftTlsConfig *config = server_config (certs.localhost);
  int sv[2];
  wt_socketpair (sv);
  g_assert_cmpint (fcntl (sv[1], F_SETFL, 0), ==, 0); /* the client blocks */
  int small = 4096;
  g_assert_cmpint (setsockopt (sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), ==, 0);

  Notify n = { 0 };
  WeftContext *ctx = weft_context_new (engine);
  n.conn = weft_connection_new (ctx, sv[0], &error);
  g_assert_no_error (error);
  weft_connection_start_tls (n.conn, config, NULL, notify_handshaken, &n, NULL);
  weft_context_dispatch (ctx);

  SSL_CTX *cctx = ossl_client_ctx (0);
  SSL *ssl = SSL_new (cctx);
  SSL_set_fd (ssl, sv[1]);
  SSL_set_tlsext_host_name (ssl, "localhost");
  g_assert_cmpint (SSL_connect (ssl), ==, 1);
  char buf[8192];
  g_assert_cmpint (SSL_read (ssl, buf, sizeof buf), ==, 5); /* (and the tickets) */
  WT_WAIT_UNTIL (atomic_load (&n.ready) == 1);

  weft_context_post (ctx, notify_answer_and_close, &n, NULL);
  /* The close_notify waits for room in the socket (the client reads only
   * once the close has been tried): it must not be dropped meanwhile. */
  WT_WAIT_UNTIL (atomic_load (&n.close_called) == 1);
  g_assert_cmpint (atomic_load (&n.close_called), ==, 1);
  gsize got = 0;
  int r;
  while ((r = SSL_read (ssl, buf, sizeof buf)) > 0)
    got += (gsize) r;
  g_assert_cmpuint (got, ==, 6000);
  g_assert_cmpint (SSL_get_error (ssl, r), ==, SSL_ERROR_ZERO_RETURN);
  WT_WAIT_UNTIL (atomic_load (&n.closed) == 1);
  g_assert_cmpint (atomic_load (&n.closed), ==, 1);

  SSL_free (ssl);
  SSL_CTX_free (cctx);
  close (sv[1]);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
  weft_connection_unref (n.conn);
  weft_engine_unref (engine);
  weft_tls_config_unref (config);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  certs.dir = g_dir_make_tmp ("weft-tls-XXXXXX", NULL);
  g_assert_nonnull (certs.dir);
  const long day = 24 * 3600;
  certs.ca = wt_cert_new (certs.dir, "weft-test-ca", NULL, -day, 2 * day, NULL, TRUE);
  certs.localhost = wt_cert_new (certs.dir, "localhost", "DNS:localhost,IP:127.0.0.1", -day,
                                 2 * day, certs.ca, FALSE);
  certs.b_test = wt_cert_new (certs.dir, "b.test", "DNS:b.test", -day, 2 * day, certs.ca,
                              FALSE);
  certs.expired = wt_cert_new (certs.dir, "expired", "DNS:localhost", -2 * day, -day,
                               certs.ca, FALSE);

  g_test_add_func ("/tls/config-errors", test_config_errors);
  g_test_add_func ("/tls/s-client", test_s_client);
  g_test_add_func ("/tls/curl", test_curl);
  g_test_add_func ("/tls/python-echo", test_python_echo);
  g_test_add_func ("/tls/client-cert-resumption", test_client_cert_resumption);
  g_test_add_func ("/tls/weft-client", test_weft_client);
  g_test_add_func ("/tls/http-server-gone-in-handshake", test_http_server_gone_in_handshake);
  g_test_add_func ("/tls/listener-unref-in-handshake", test_listener_unref_in_handshake);
  g_test_add_func ("/tls/expired-cert", test_expired_cert);
  g_test_add_func ("/tls/sni", test_sni);
  g_test_add_func ("/tls/client-hello-server-name", test_client_hello_server_name);
  g_test_add_func ("/tls/bad-client-hello", test_bad_client_hello);
  g_test_add_func ("/tls/handshake-timeout", test_handshake_timeout);
  g_test_add_func ("/tls/connect-deadline-mid-handshake", test_connect_deadline_mid_handshake);
  g_test_add_func ("/tls/connect-handshake-timeout", test_connect_handshake_timeout);
  g_test_add_func ("/tls/connect-destroyed-mid-handshake", test_connect_destroyed_mid_handshake);
  g_test_add_func ("/tls/many-handshakes", test_many_handshakes);
  g_test_add_func ("/tls/https-hostile", test_https_hostile);
  g_test_add_func ("/tls/file-send-keeps-read-data", test_file_send_keeps_read_data);
  g_test_add_func ("/tls/close-notify-when-full", test_close_notify_when_full);
  int r = g_test_run ();

  wt_cert_free (certs.expired);
  wt_cert_free (certs.b_test);
  wt_cert_free (certs.localhost);
  wt_cert_free (certs.ca);
  g_rmdir (certs.dir);
  g_free (certs.dir);
  return r;
}
