/* bench-server.c: the benchmark contract of ../shared/bench/peers.
 *
 *   GET / (and HEAD /)     200 "Hello, World!" as text/plain (13 bytes)
 *   POST /echo, PUT /echo  200 with exactly the request body
 *   anything else          404
 *
 * Usage: bench-server [--port N] [--workers N] [--host ADDR] [--coro] [--main-context]
 *                     [--drain-ms MS] [--max-body BYTES] [--header-timeout-ms MS]
 *                     [--body-timeout-ms MS] [--keepalive-timeout-ms MS]
 * Defaults: 127.0.0.1, port 8080 (0: any free port, printed), 1 worker;
 * the limits and timeouts are the library's defaults unless given (the
 * conformance probe, tests/http-conformance.py, shortens the timeouts so
 * that it runs in seconds).
 * --main-context: no worker threads; the engine runs from a GMainLoop on
 * the main thread (the GLib bridge, as a GTK application would run it).
 * SIGINT or SIGTERM drains: stops accepting, finishes the requests begun
 * (--drain-ms, 5000 by default, at most), prints how many requests it
 * took and whether all finished ("bench-server: stopped: N requests, all
 * finished" or "..., cut off"), and exits 0. tests/test-drain.c relies on
 * that line.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <weft.h>

#include <glib-unix.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>

static void
hello (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  static const char body[] = "Hello, World!";
  weft_http_request_respond (request, 200, "text/plain", (const guint8 *) body,
                             sizeof body - 1);
}

static void
echo (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_respond_bytes (request, 200, "application/octet-stream",
                                   weft_http_request_get_body (request));
}

/* The contract says "anything else 404", also for other methods on / and
 * /echo (the library's own answer there would be 405 with Allow). */
static void
not_found (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  static const char body[] = "404 Not Found\n";
  weft_http_request_respond (request, 404, "text/plain", (const guint8 *) body, sizeof body - 1);
}

static gboolean
quit_loop (gpointer loop)
{
  g_main_loop_quit (loop);
  return G_SOURCE_REMOVE;
}

/* The end of the drain, from whichever thread ends it. */
static pthread_mutex_t drain_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t drain_cond = PTHREAD_COND_INITIALIZER;
static int drain_state; /* 0: draining, 1: all finished, 2: cut off; HOLDS: drain_lock */

static void
on_drained (WeftListener *listener, gboolean drained, gpointer user_data)
{
  pthread_mutex_lock (&drain_lock);
  drain_state = drained ? 1 : 2;
  pthread_cond_broadcast (&drain_cond);
  pthread_mutex_unlock (&drain_lock);
}

static int
drain_result (void)
{
  pthread_mutex_lock (&drain_lock);
  int state = drain_state;
  pthread_mutex_unlock (&drain_lock);
  return state;
}

int
main (int argc, char **argv)
{
  gint port = 8080, workers = 1, drain_ms = 5000;
  gboolean coro = FALSE, main_context = FALSE;
  gchar *host = NULL;
  /* -1: not given, the library's default stays. */
  gint64 max_body = -1, header_ms = -1, body_ms = -1, keepalive_ms = -1;
  GOptionEntry entries[] = {
    { "port", 'p', 0, G_OPTION_ARG_INT, &port, "Port (0: any free one)", "N" },
    { "workers", 'w', 0, G_OPTION_ARG_INT, &workers, "Worker threads (0: one per CPU)", "N" },
    { "host", 'H', 0, G_OPTION_ARG_STRING, &host, "Address to bind (127.0.0.1)", "ADDR" },
    { "coro", 0, 0, G_OPTION_ARG_NONE, &coro,
      "Run the handlers as coroutines (WEFT_HTTP_HANDLER_COROUTINE)", NULL },
    { "main-context", 0, 0, G_OPTION_ARG_NONE, &main_context,
      "No workers: run the engine from a GMainLoop on this thread", NULL },
    { "drain-ms", 0, 0, G_OPTION_ARG_INT, &drain_ms,
      "On SIGINT/SIGTERM, how long requests begun may take to finish (5000)", "MS" },
    { "max-body", 0, 0, G_OPTION_ARG_INT64, &max_body,
      "Largest request body, in bytes; larger: 413 (8 MiB)", "BYTES" },
    { "header-timeout-ms", 0, 0, G_OPTION_ARG_INT64, &header_ms,
      "Time allowed for a request head (20000; 0: none)", "MS" },
    { "body-timeout-ms", 0, 0, G_OPTION_ARG_INT64, &body_ms,
      "Time allowed without a body byte (20000; 0: none)", "MS" },
    { "keepalive-timeout-ms", 0, 0, G_OPTION_ARG_INT64, &keepalive_ms,
      "How long an idle connection is kept (30000; 0: for ever)", "MS" },
    { NULL }
  };
  GError *error = NULL;
  GOptionContext *octx = g_option_context_new ("- the HTTP benchmark server");
  g_option_context_add_main_entries (octx, entries, NULL);
  if (!g_option_context_parse (octx, &argc, &argv, &error) || port < 0 || port > 65535 ||
      workers < 0 || drain_ms < 0 || max_body < -1 || header_ms < -1 || header_ms > G_MAXUINT ||
      body_ms < -1 || body_ms > G_MAXUINT || keepalive_ms < -1 || keepalive_ms > G_MAXUINT)
    {
      g_printerr ("bench-server: %s\n", error != NULL ? error->message : "bad arguments");
      return 2;
    }
  g_option_context_free (octx);

  /* Block the stop signals before any thread starts, then wait for them
   * (with a GMainLoop: GLib's signal sources). */
  sigset_t set;
  sigemptyset (&set);
  sigaddset (&set, SIGINT);
  sigaddset (&set, SIGTERM);
  if (!main_context)
    pthread_sigmask (SIG_BLOCK, &set, NULL);
  signal (SIGPIPE, SIG_IGN);

  WeftEngine *engine = main_context ? weft_engine_new_for_main_context (NULL, &error)
                                    : weft_engine_new ((guint) workers, &error);
  if (engine == NULL)
    {
      g_printerr ("bench-server: %s\n", error->message);
      return 1;
    }
  WeftHttpServer *server = weft_http_server_new (engine);
  if (max_body >= 0)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_MAX_BODY_BYTES, (guint64) max_body);
  if (header_ms >= 0)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS, (guint64) header_ms);
  if (body_ms >= 0)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_BODY_TIMEOUT_MS, (guint64) body_ms);
  if (keepalive_ms >= 0)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS,
                                (guint64) keepalive_ms);
  WeftHttpHandlerFlags flags = coro ? WEFT_HTTP_HANDLER_COROUTINE : WEFT_HTTP_HANDLER_DEFAULT;
  weft_http_server_add_handler_full (server, "GET", "/", flags, hello, NULL, NULL);
  weft_http_server_add_handler_full (server, "POST", "/echo", flags, echo, NULL, NULL);
  weft_http_server_add_handler_full (server, "PUT", "/echo", flags, echo, NULL, NULL);
  weft_http_server_add_handler_full (server, NULL, "/*", flags, not_found, NULL, NULL);
  WeftListener *listener = weft_http_server_get_listener (server);
  weft_listener_set_backlog (listener, 4096);
  if (!weft_listener_add_tcp (listener, host != NULL ? host : "127.0.0.1", (guint16) port,
                              &error) ||
      !weft_http_server_start (server, &error))
    {
      g_printerr ("bench-server: %s\n", error->message);
      return 1;
    }
  printf ("bench-server: http://%s:%u/\n", host != NULL ? host : "127.0.0.1",
          weft_listener_get_port (listener, 0));
  fflush (stdout);

  if (main_context)
    {
      GMainLoop *loop = g_main_loop_new (NULL, FALSE);
      g_unix_signal_add (SIGINT, quit_loop, loop);
      g_unix_signal_add (SIGTERM, quit_loop, loop);
      g_main_loop_run (loop);
      g_main_loop_unref (loop);
      /* The drain's callbacks run on this thread too: iterate until done. */
      weft_http_server_shutdown (server, (guint) drain_ms, on_drained, NULL, NULL);
      while (drain_result () == 0)
        g_main_context_iteration (NULL, TRUE);
    }
  else
    {
      int sig = 0;
      sigwait (&set, &sig);
      weft_http_server_shutdown (server, (guint) drain_ms, on_drained, NULL, NULL);
      pthread_mutex_lock (&drain_lock);
      while (drain_state == 0)
        pthread_cond_wait (&drain_cond, &drain_lock);
      pthread_mutex_unlock (&drain_lock);
    }
  printf ("bench-server: stopped: %" G_GUINT64_FORMAT " requests, %s\n",
          weft_http_server_get_n_requests (server),
          drain_result () == 1 ? "all finished" : "cut off");
  fflush (stdout);
  weft_http_server_unref (server);
  weft_engine_unref (engine);
  g_free (host);
  return 0;
}
