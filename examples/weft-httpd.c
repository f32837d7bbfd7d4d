/* weft-httpd.c: a small web server on Weft: serves a directory (by
 * default docs/ of the current directory) with a JSON status page.
 *
 * Usage: weft-httpd [--listen ADDR] [--root DIR] [--workers N]
 *                   [--cert FILE --key FILE] [--max-body BYTES]
 *                   [--max-connections N] [--header-timeout-ms MS]
 *                   [--keepalive-timeout-ms MS] [--access-log FILE|-]
 * Defaults: 127.0.0.1:8080, docs, one worker per CPU. With --cert and
 * --key the server speaks HTTPS (ALPN http/1.1). GET /_weft/status answers
 * the engine's and the server's counters as JSON (weft_http_server_get_
 * status_json()); GET /_weft/events streams them once a second as
 * server-sent events. SIGINT or SIGTERM stops
 * accepting, lets requests in flight finish (5 s at most) and exits 0.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <weft.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static WeftEngine *engine;

static void
status (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  gchar *json = weft_http_server_get_status_json (server);
  weft_http_request_add_response_header (request, "Cache-Control", "no-store");
  weft_http_request_respond (request, 200, "application/json", (const guint8 *) json,
                             strlen (json));
  g_free (json);
}

/* /_weft/events: the status as server-sent events, one a second, from a
 * timer on the connection's own context, until the client goes away. */
typedef struct {
  WeftHttpServer *server;
  WeftHttpRequest *request;
} Events;

static gboolean
send_event (gpointer data)
{
  Events *ev = data;
  gchar *json = weft_http_server_get_status_json (ev->server);
  g_strdelimit (json, "\n", ' ');
  gchar *event = g_strdup_printf ("event: status\ndata: %s\n\n", json);
  gboolean sent = weft_http_request_write (ev->request, (const guint8 *) event, strlen (event));
  g_free (event);
  g_free (json);
  return sent ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

static void
events_free (gpointer data)
{
  Events *ev = data;
  weft_http_request_unref (ev->request);
  g_free (ev);
}

static void
events (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_add_response_header (request, "Cache-Control", "no-store");
  weft_http_request_respond_stream (request, 200, "text/event-stream", NULL, NULL, NULL);
  Events *ev = g_new (Events, 1);
  ev->server = server;
  ev->request = weft_http_request_ref (request);
  send_event (ev);
  weft_context_add_timeout (weft_context_get_current (), 1000, send_event, ev, events_free);
}

static int done_pipe[2];

static void
on_drained (WeftListener *listener, gboolean drained, gpointer user_data)
{
  char c = drained ? 'y' : 'n';
  if (write (done_pipe[1], &c, 1) < 0)
    perror ("weft-httpd: write");
}

int
main (int argc, char **argv)
{
  gchar *listen = NULL, *root = NULL, *cert = NULL, *key = NULL;
  gchar *access_log = NULL;
  gint workers = 0, max_conns = 0, header_timeout = -1, keepalive = -1;
  gint64 max_body = 0;
  GOptionEntry entries[] = {
    { "listen", 'l', 0, G_OPTION_ARG_STRING, &listen,
      "Address: host:port, [v6]:port or unix:/path (127.0.0.1:8080)", "ADDR" },
    { "root", 'r', 0, G_OPTION_ARG_FILENAME, &root, "Directory to serve (docs)", "DIR" },
    { "workers", 'w', 0, G_OPTION_ARG_INT, &workers, "Worker threads (0: one per CPU)", "N" },
    { "cert", 0, 0, G_OPTION_ARG_FILENAME, &cert, "PEM certificate chain: serve HTTPS", "FILE" },
    { "key", 0, 0, G_OPTION_ARG_FILENAME, &key, "PEM private key for --cert", "FILE" },
    { "max-body", 0, 0, G_OPTION_ARG_INT64, &max_body, "Largest request body (8 MiB)", "BYTES" },
    { "max-connections", 'm', 0, G_OPTION_ARG_INT, &max_conns,
      "Pause accepting at this many connections (16384)", "N" },
    { "header-timeout-ms", 0, 0, G_OPTION_ARG_INT, &header_timeout,
      "Time a request head may take, 0 for none (20000)", "MS" },
    { "keepalive-timeout-ms", 0, 0, G_OPTION_ARG_INT, &keepalive,
      "Time an idle connection is kept, 0 for ever (30000)", "MS" },
    /* The names before they matched bench-server's. */
    { "header-timeout", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &header_timeout, NULL, "MS" },
    { "keepalive-timeout", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &keepalive, NULL, "MS" },
    { "access-log", 0, 0, G_OPTION_ARG_FILENAME, &access_log,
      "Log each request to FILE (- for standard error)", "FILE" },
    { NULL }
  };
  GError *error = NULL;
  GOptionContext *opts = g_option_context_new ("- serve a directory over HTTP/1.1");
  g_option_context_add_main_entries (opts, entries, NULL);
  if (!g_option_context_parse (opts, &argc, &argv, &error))
    {
      g_printerr ("weft-httpd: %s\n", error->message);
      return 2;
    }
  g_option_context_free (opts);
  if ((cert == NULL) != (key == NULL) || workers < 0 || max_conns < 0 || max_body < 0)
    {
      g_printerr ("weft-httpd: --cert and --key go together; counts must not be negative\n");
      return 2;
    }

  sigset_t set;
  sigemptyset (&set);
  sigaddset (&set, SIGINT);
  sigaddset (&set, SIGTERM);
  pthread_sigmask (SIG_BLOCK, &set, NULL);
  signal (SIGPIPE, SIG_IGN);
  if (pipe (done_pipe) != 0)
    return 1;

  engine = weft_engine_new ((guint) workers, &error);
  if (engine == NULL)
    {
      g_printerr ("weft-httpd: %s\n", error->message);
      return 1;
    }
  WeftHttpServer *server = weft_http_server_new (engine);
  WeftListener *listener = weft_http_server_get_listener (server);
  if (max_body > 0)
    weft_http_server_set_max_body (server, (guint64) max_body);
  if (max_conns > 0)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_MAX_CONNECTIONS, (guint64) max_conns);
  if (header_timeout >= 0)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS, (guint64) header_timeout);
  if (keepalive >= 0)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS, (guint64) keepalive);
  if (access_log != NULL && !weft_http_server_set_access_log (server, access_log, &error))
    {
      g_printerr ("weft-httpd: %s\n", error->message);
      return 1;
    }
  weft_http_server_add_handler (server, "GET", "/_weft/status", status, NULL, NULL);
  weft_http_server_add_handler (server, "GET", "/_weft/events", events, NULL, NULL);
  if (!weft_http_server_add_directory (server, "/", root != NULL ? root : "docs", &error))
    {
      g_printerr ("weft-httpd: %s\n", error->message);
      return 1;
    }
  if (cert != NULL)
    {
      WeftTlsConfig *tls = weft_tls_config_new_server (&error);
      const gchar *alpn[] = { "http/1.1", NULL };
      if (tls == NULL || !weft_tls_config_set_certificate_files (tls, cert, key, &error) ||
          !weft_tls_config_set_alpn_protocols (tls, alpn, &error))
        {
          g_printerr ("weft-httpd: %s\n", error->message);
          return 1;
        }
      weft_listener_set_tls (listener, tls);
      weft_tls_config_unref (tls);
    }
  if (!weft_listener_add_address (listener, listen != NULL ? listen : "127.0.0.1:8080", &error) ||
      !weft_http_server_start (server, &error))
    {
      g_printerr ("weft-httpd: %s\n", error->message);
      return 1;
    }
  printf ("weft-httpd: serving %s on %s (port %u; status: /_weft/status; Ctrl-C stops)\n",
          root != NULL ? root : "docs", listen != NULL ? listen : "127.0.0.1:8080",
          weft_listener_get_port (listener, 0));
  fflush (stdout);

  int sig = 0;
  sigwait (&set, &sig);
  weft_http_server_shutdown (server, 5000, on_drained, NULL, NULL);
  char c = 0;
  if (read (done_pipe[0], &c, 1) != 1)
    c = '?';
  printf ("weft-httpd: stopped (%s)\n", c == 'y' ? "all requests finished" : "some cut off");
  weft_http_server_unref (server);
  weft_engine_unref (engine);
  g_free (listen);
  g_free (root);
  g_free (cert);
  g_free (key);
  g_free (access_log);
  return 0;
}
