/* soup-bridge-app.c: one GLib thread, two roles, the way a GNOME
 * application would combine them: a Weft HTTP server on a bridged engine
 * (weft_engine_new_for_main_context) and a libsoup client (SoupSession,
 * asynchronous) on the same GMainContext. The client fetches from the
 * server; both run on the main loop, with no thread of their own and no
 * lock, and neither blocks the other.
 *
 *   GET  /count    answers the number of requests served so far
 *   POST /upper    answers the body in upper case
 *
 * ./soup-bridge-app [--rounds N]: runs N rounds (default 20) of one GET and
 * one POST through the libsoup client, checks every answer, checks that
 * every handler ran on the main thread, and exits 0 (1 on a wrong answer).
 *
 * libsoup is used by the examples only.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <libsoup/soup.h>
#include <string.h>
#include <weft.h>

typedef struct {
  GMainLoop *loop;
  GThread *main_thread;
  SoupSession *session;
  guint16 port;
  guint served;
  guint rounds, round;
  gboolean failed;
} App;

/* ---- the server (Weft, on the main loop) -------------------------------- */

static void
count (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  App *app = data;
  if (g_thread_self () != app->main_thread)
    app->failed = TRUE; /* never: a bridged engine calls back on this thread */
  gchar *text = g_strdup_printf ("%u", ++app->served);
  weft_http_request_respond (req, 200, "text/plain", (const guint8 *) text, strlen (text));
  g_free (text);
}

static void
upper (WeftHttpServer *server, WeftHttpRequest *req, gpointer data)
{
  App *app = data;
  if (g_thread_self () != app->main_thread)
    app->failed = TRUE;
  app->served++;
  gsize len = 0;
  const char *body = g_bytes_get_data (weft_http_request_get_body (req), &len);
  gchar *up = g_ascii_strup (body != NULL ? body : "", (gssize) len);
  weft_http_request_respond (req, 200, "text/plain", (const guint8 *) up, len);
  g_free (up);
}

/* ---- the client (libsoup, on the same loop) ----------------------------- */

static void next_round (App *app);

static void
check (App *app, SoupMessage *msg, GAsyncResult *res, const char *want)
{
  GError *error = NULL;
  GBytes *body = soup_session_send_and_read_finish (app->session, res, &error);
  if (body == NULL)
    {
      g_printerr ("soup-bridge-app: %s\n", error->message);
      g_error_free (error);
      app->failed = TRUE;
      return;
    }
  gsize len = 0;
  const char *got = g_bytes_get_data (body, &len);
  if (soup_message_get_status (msg) != 200 || len != strlen (want) || memcmp (got, want, len) != 0)
    {
      g_printerr ("soup-bridge-app: round %u: got %u \"%.*s\", want \"%s\"\n", app->round,
                  soup_message_get_status (msg), (int) len, got, want);
      app->failed = TRUE;
    }
  g_bytes_unref (body);
}

static void
on_upper (GObject *source, GAsyncResult *res, gpointer data)
{
  App *app = data;
  SoupMessage *msg = soup_session_get_async_result_message (app->session, res);
  gchar *want = g_strdup_printf ("ROUND %u", app->round);
  check (app, msg, res, want);
  g_free (want);
  app->round++;
  next_round (app);
}

static void
on_count (GObject *source, GAsyncResult *res, gpointer data)
{
  App *app = data;
  SoupMessage *msg = soup_session_get_async_result_message (app->session, res);
  /* Two requests a round: this GET is the (2 * round + 1)th. */
  gchar *want = g_strdup_printf ("%u", 2 * app->round + 1);
  check (app, msg, res, want);
  g_free (want);
  gchar *url = g_strdup_printf ("http://127.0.0.1:%u/upper", app->port);
  SoupMessage *post = soup_message_new (SOUP_METHOD_POST, url);
  gchar *text = g_strdup_printf ("round %u", app->round);
  GBytes *b = g_bytes_new_take (text, strlen (text));
  soup_message_set_request_body_from_bytes (post, "text/plain", b);
  g_bytes_unref (b);
  soup_session_send_and_read_async (app->session, post, G_PRIORITY_DEFAULT, NULL, on_upper, app);
  g_object_unref (post);
  g_free (url);
}

static void
next_round (App *app)
{
  if (app->failed || app->round == app->rounds)
    {
      g_main_loop_quit (app->loop);
      return;
    }
  gchar *url = g_strdup_printf ("http://127.0.0.1:%u/count", app->port);
  SoupMessage *msg = soup_message_new (SOUP_METHOD_GET, url);
  soup_session_send_and_read_async (app->session, msg, G_PRIORITY_DEFAULT, NULL, on_count, app);
  g_object_unref (msg);
  g_free (url);
}

static gboolean
give_up (gpointer data)
{
  App *app = data;
  g_printerr ("soup-bridge-app: timed out in round %u\n", app->round);
  app->failed = TRUE;
  g_main_loop_quit (app->loop);
  return G_SOURCE_REMOVE;
}

static void
on_server_down (WeftListener *listener, gboolean drained, gpointer data)
{
  g_main_loop_quit (data);
}

int
main (int argc, char **argv)
{
  gint rounds = 20;
  GOptionEntry entries[] = {
    { "rounds", 'n', 0, G_OPTION_ARG_INT, &rounds, "Rounds of GET + POST (20)", "N" },
    { NULL }
  };
  GError *error = NULL;
  GOptionContext *octx = g_option_context_new ("- a Weft server and a libsoup client on one loop");
  g_option_context_add_main_entries (octx, entries, NULL);
  if (!g_option_context_parse (octx, &argc, &argv, &error) || rounds < 1)
    {
      g_printerr ("soup-bridge-app: %s\n", error != NULL ? error->message : "bad arguments");
      return 2;
    }
  g_option_context_free (octx);

  App app = { 0 };
  app.loop = g_main_loop_new (NULL, FALSE);
  app.main_thread = g_thread_self ();
  app.rounds = (guint) rounds;

  WeftEngine *engine = weft_engine_new_for_main_context (NULL, &error);
  if (engine == NULL)
    g_error ("%s", error->message);
  WeftHttpServer *server = weft_http_server_new (engine);
  weft_http_server_add_handler (server, "GET", "/count", count, &app, NULL);
  weft_http_server_add_handler (server, "POST", "/upper", upper, &app, NULL);
  WeftListener *listener = weft_http_server_get_listener (server);
  if (!weft_listener_add_tcp (listener, "127.0.0.1", 0, &error) ||
      !weft_http_server_start (server, &error))
    g_error ("%s", error->message);
  app.port = weft_listener_get_port (listener, 0);

  app.session = soup_session_new_with_options ("timeout", 10, NULL);
  guint guard = g_timeout_add_seconds (30, give_up, &app);
  next_round (&app);
  g_main_loop_run (app.loop);
  g_source_remove (guard);
  g_object_unref (app.session);

  /* Graceful stop, on the same loop. */
  weft_http_server_shutdown (server, 2000, on_server_down, app.loop, NULL);
  g_main_loop_run (app.loop);
  weft_http_server_unref (server);
  weft_engine_unref (engine);
  g_main_loop_unref (app.loop);

  if (app.failed)
    return 1;
  g_print ("soup-bridge-app: %u rounds, %u requests served on the main thread\n", app.rounds,
           app.served);
  return 0;
}
