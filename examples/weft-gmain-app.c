/* weft-gmain-app.c: a GLib application (one GMainLoop, one thread) that
 * embeds a Weft HTTP server on a bridged engine. docs/tutorial-gtk-app.md
 * walks through it.
 *
 *   GET  /state    the application's state as JSON
 *   POST /note     replaces the note (the body)
 *   GET  /digest   SHA-256 of the note, computed on a worker engine; the
 *                  result is handed back to the main thread with
 *                  weft_main_context_post
 *
 * ./weft-gmain-app [port]   (default 8080; 0 picks a free one). Ctrl-C
 * shuts the server down gracefully and leaves the loop.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <glib-unix.h>
#include <stdlib.h>
#include <weft.h>

/* The application's state. Only the main thread touches it: the GLib
 * timeout, the signal handler and the HTTP handlers all run there. */
typedef struct {
  GMainLoop *loop;
  WeftHttpServer *server;
  WeftEngine *workers;      /* for CPU-heavy work off the main thread */
  guint64 ticks;
  guint64 requests;
  gchar *note;
  gchar *last_digest;
} App;

static gboolean
on_tick (gpointer data)
{
  App *app = data;
  app->ticks++;
  return G_SOURCE_CONTINUE;
}

static void
get_state (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  App *app = data;
  app->requests++;
  gchar *json = g_strdup_printf ("{\"ticks\": %" G_GUINT64_FORMAT ", \"requests\": %"
                                 G_GUINT64_FORMAT ", \"note_bytes\": %zu, \"last_digest\": \"%s\"}\n",
                                 app->ticks, app->requests, strlen (app->note),
                                 app->last_digest != NULL ? app->last_digest : "");
  weft_http_request_respond (req, 200, "application/json", (const guint8 *) json, strlen (json));
  g_free (json);
}

static void
post_note (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  App *app = data;
  gsize len;
  const char *body = g_bytes_get_data (weft_http_request_get_body (req), &len);
  app->requests++;
  g_free (app->note);
  app->note = g_strndup (body != NULL ? body : "", len);
  weft_http_request_respond (req, 204, NULL, NULL, 0);
}

/* /digest: the work goes to a worker, the answer to the client from there,
 * and the result back to the main thread. */
typedef struct {
  App *app;
  WeftHttpRequest *req;
  gchar *text;
} Digest;

static void
digest_free (gpointer data)
{
  Digest *d = data;
  weft_http_request_unref (d->req);
  g_free (d->text);
  g_free (d);
}

typedef struct {
  App *app;
  gchar *digest;
} DigestResult;

static void
digest_result_free (gpointer data)
{
  DigestResult *r = data;
  g_free (r->digest);
  g_free (r);
}

static void
digest_apply (gpointer data) /* main thread */
{
  DigestResult *r = data;
  g_free (r->app->last_digest);
  r->app->last_digest = g_steal_pointer (&r->digest);
}

static void
digest_compute (gpointer data) /* a worker of app->workers */
{
  Digest *d = data;
  DigestResult *r = g_new0 (DigestResult, 1);
  r->app = d->app;
  r->digest = g_compute_checksum_for_string (G_CHECKSUM_SHA256, d->text, -1);
  weft_http_request_respond (d->req, 200, "text/plain", (const guint8 *) r->digest,
                             strlen (r->digest));
  /* digest_apply runs on the main thread, then digest_result_free; if
   * the main loop has ended, the next iteration runs them. */
  weft_main_context_post (NULL, digest_apply, r, digest_result_free);
}

static void
get_digest (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  App *app = data;
  Digest *d = g_new0 (Digest, 1);
  app->requests++;
  d->app = app;
  d->req = weft_http_request_ref (req);
  d->text = g_strdup (app->note);
  /* digest_free runs after digest_compute, or if the job is dropped. */
  weft_engine_post (app->workers, digest_compute, d, digest_free);
}

static void
on_server_down (WeftListener *listener, gboolean drained, gpointer data)
{
  App *app = data;
  g_main_loop_quit (app->loop);
}

static gboolean
on_signal (gpointer data)
{
  App *app = data;
  g_print ("shutting down\n");
  /* Graceful: stop accepting, finish what is in flight, then quit. */
  weft_http_server_shutdown (app->server, 5000, on_server_down, app, NULL);
  return G_SOURCE_REMOVE;
}

int
main (int argc, char **argv)
{
  GError *error = NULL;
  App app = { 0 };
  guint port = argc > 1 ? (guint) atoi (argv[1]) : 8080;

  app.loop = g_main_loop_new (NULL, FALSE);
  app.note = g_strdup ("hello");
  WeftEngine *engine = weft_engine_new_for_main_context (NULL, &error);
  if (engine == NULL)
    g_error ("%s", error->message);
  app.workers = weft_engine_new (2, &error);
  if (app.workers == NULL)
    g_error ("%s", error->message);

  app.server = weft_http_server_new (engine);
  weft_http_server_add_handler (app.server, "GET", "/state", get_state, &app, NULL);
  weft_http_server_add_handler (app.server, "POST", "/note", post_note, &app, NULL);
  weft_http_server_add_handler (app.server, "GET", "/digest", get_digest, &app, NULL);
  WeftListener *listener = weft_http_server_get_listener (app.server);
  if (!weft_listener_add_tcp (listener, "127.0.0.1", (guint16) port, &error) ||
      !weft_http_server_start (app.server, &error))
    g_error ("%s", error->message);
  g_print ("listening on http://127.0.0.1:%u/state\n", weft_listener_get_port (listener, 0));

  g_timeout_add (100, on_tick, &app);
  g_unix_signal_add (SIGINT, on_signal, &app);
  g_unix_signal_add (SIGTERM, on_signal, &app);
  g_main_loop_run (app.loop);

  weft_http_server_unref (app.server);
  weft_engine_unref (engine);
  weft_engine_unref (app.workers); /* after: its jobs may still answer requests */
  /* Digests posted back but not yet applied: run them (and their frees). */
  while (g_main_context_iteration (NULL, FALSE))
    ;
  g_main_loop_unref (app.loop);
  g_free (app.note);
  g_free (app.last_digest);
  return 0;
}
