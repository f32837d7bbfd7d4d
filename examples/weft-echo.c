/* weft-echo.c: a TCP and TLS echo server on WeftListener.
 *
 *   weft-echo [--listen ADDR]... [--tls-listen ADDR --cert FILE --key FILE]
 *             [--workers N] [--max-connections N] [--idle-timeout MS]
 *
 * Every accepted connection gets its own context; bytes are written back
 * as they arrive. The write queue's high water mark pauses reading, so a
 * client that sends without reading cannot make the server buffer more
 * than that. SIGINT/SIGTERM stop accepting and give live connections 5 s.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <weft.h>

static gsize
echo_read (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  weft_connection_write (conn, data, len);
  return len;
}

static void
echo_event (WeftConnection *conn, WeftConnectionEvent event, const GError *error,
            gpointer user_data)
{
  if (event == WEFT_CONNECTION_EVENT_PEER_CLOSED)
    weft_connection_close (conn); /* after what is queued */
  else if (event == WEFT_CONNECTION_EVENT_ERROR && g_getenv ("WEFT_ECHO_VERBOSE"))
    g_printerr ("connection error: %s\n", error->message);
}

static guint idle_timeout_ms;

static void
on_accept (WeftListener *listener, WeftConnection *conn, gpointer user_data)
{
  int one = 1;
  /* Echo is request/response: do not let Nagle hold back small replies. */
  setsockopt (weft_connection_get_fd (conn), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  weft_connection_set_event_func (conn, echo_event, NULL, NULL);
  weft_connection_start_reading (conn, echo_read, NULL, NULL);
  if (idle_timeout_ms != 0)
    weft_connection_set_idle_timeout (conn, idle_timeout_ms);
}

typedef struct {
  GMutex lock;
  GCond cond;
  guint pending;        /* listeners not yet drained */
  gboolean stop;
} Main;

static void
on_drained (WeftListener *listener, gboolean drained, gpointer user_data)
{
  Main *m = user_data;
  g_mutex_lock (&m->lock);
  m->pending--;
  g_cond_signal (&m->cond);
  g_mutex_unlock (&m->lock);
}

static gboolean
on_signal (gint signum, gpointer user_data)
{
  Main *m = user_data;
  g_mutex_lock (&m->lock);
  m->stop = TRUE;
  g_cond_signal (&m->cond);
  g_mutex_unlock (&m->lock);
  return G_SOURCE_REMOVE;
}

int
main (int argc, char **argv)
{
  gchar **listen = NULL, **tls_listen = NULL;
  gchar *cert = NULL, *key = NULL;
  gint workers = 0, max_conns = 0, idle = 0;
  GOptionEntry entries[] = {
    { "listen", 'l', 0, G_OPTION_ARG_STRING_ARRAY, &listen,
      "Plain TCP address (host:port, [v6]:port, unix:/path); default 127.0.0.1:7000", "ADDR" },
    { "tls-listen", 's', 0, G_OPTION_ARG_STRING_ARRAY, &tls_listen, "TLS address", "ADDR" },
    { "cert", 0, 0, G_OPTION_ARG_FILENAME, &cert, "PEM certificate (chain) for TLS", "FILE" },
    { "key", 0, 0, G_OPTION_ARG_FILENAME, &key, "PEM private key for TLS", "FILE" },
    { "workers", 'w', 0, G_OPTION_ARG_INT, &workers, "Worker threads (0: one per CPU)", "N" },
    { "max-connections", 'm', 0, G_OPTION_ARG_INT, &max_conns,
      "Pause accepting at this many live connections (0: no limit)", "N" },
    { "idle-timeout", 'i', 0, G_OPTION_ARG_INT, &idle, "Close idle connections (ms)", "MS" },
    { NULL }
  };
  GError *error = NULL;
  GOptionContext *opts = g_option_context_new ("- echo server on Weft");
  g_option_context_add_main_entries (opts, entries, NULL);
  if (!g_option_context_parse (opts, &argc, &argv, &error))
    {
      g_printerr ("%s\n", error->message);
      return 2;
    }
  g_option_context_free (opts);
  if (tls_listen != NULL && (cert == NULL || key == NULL))
    {
      g_printerr ("--tls-listen needs --cert and --key\n");
      return 2;
    }
  idle_timeout_ms = (guint) MAX (idle, 0);

  /* Signals go to a signalfd: keep them from killing the process first. */
  sigset_t set;
  sigemptyset (&set);
  sigaddset (&set, SIGINT);
  sigaddset (&set, SIGTERM);
  sigaddset (&set, SIGPIPE);
  pthread_sigmask (SIG_BLOCK, &set, NULL);

  WeftEngine *engine = weft_engine_new ((guint) MAX (workers, 0), &error);
  if (engine == NULL)
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  Main m = { 0 };
  g_mutex_init (&m.lock);
  g_cond_init (&m.cond);
  WeftContext *ctl = weft_context_new (engine);
  weft_context_add_signal (ctl, SIGINT, on_signal, &m, NULL, NULL);
  weft_context_add_signal (ctl, SIGTERM, on_signal, &m, NULL, NULL);
  weft_context_dispatch (ctl);

  WeftListener *plain = NULL, *secure = NULL;
  const gchar *default_listen[] = { "127.0.0.1:7000", NULL };
  if (listen != NULL || tls_listen == NULL)
    {
      plain = weft_listener_new (engine, on_accept, NULL, NULL);
      if (max_conns > 0)
        weft_listener_set_max_connections (plain, (guint) max_conns);
      for (gchar **a = listen ? listen : (gchar **) default_listen; *a != NULL; a++)
        if (!weft_listener_add_address (plain, *a, &error))
          {
            g_printerr ("%s\n", error->message);
            return 1;
          }
    }
  if (tls_listen != NULL)
    {
      WeftTlsConfig *tls = weft_tls_config_new_server (&error);
      if (tls == NULL || !weft_tls_config_set_certificate_files (tls, cert, key, &error))
        {
          g_printerr ("%s\n", error->message);
          return 1;
        }
      secure = weft_listener_new (engine, on_accept, NULL, NULL);
      weft_listener_set_tls (secure, tls);
      weft_tls_config_unref (tls);
      if (max_conns > 0)
        weft_listener_set_max_connections (secure, (guint) max_conns);
      for (gchar **a = tls_listen; *a != NULL; a++)
        if (!weft_listener_add_address (secure, *a, &error))
          {
            g_printerr ("%s\n", error->message);
            return 1;
          }
    }
  WeftListener *all[] = { plain, secure };
  for (guint i = 0; i < 2; i++)
    if (all[i] != NULL)
      {
        if (!weft_listener_start (all[i], &error))
          {
            g_printerr ("%s\n", error->message);
            return 1;
          }
        for (guint k = 0; k < weft_listener_get_n_sockets (all[i]); k++)
          printf ("weft-echo: %s on port %u\n", i == 0 ? "tcp" : "tls",
                  weft_listener_get_port (all[i], k));
      }
  fflush (stdout);

  g_mutex_lock (&m.lock);
  while (!m.stop)
    g_cond_wait (&m.cond, &m.lock);
  for (guint i = 0; i < 2; i++)
    if (all[i] != NULL)
      {
        m.pending++;
        weft_listener_shutdown (all[i], 5000, on_drained, &m, NULL);
      }
  while (m.pending > 0)
    g_cond_wait (&m.cond, &m.lock);
  g_mutex_unlock (&m.lock);

  for (guint i = 0; i < 2; i++)
    if (all[i] != NULL)
      weft_listener_unref (all[i]);
  weft_context_destroy (ctl);
  weft_context_unref (ctl);
  weft_engine_unref (engine);
  g_strfreev (listen);
  g_strfreev (tls_listen);
  g_free (cert);
  g_free (key);
  return 0;
}
