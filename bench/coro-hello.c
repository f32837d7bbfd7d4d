/* coro-hello.c: the HTTP hello contract of ../shared/bench/peers served the
 * way its State Threads peer serves it: one coroutine per connection, which
 * reads what arrived, counts complete requests (CRLFCRLF, the match state
 * kept across reads) and answers each with the fixed hello response, all
 * answers of one read in one write. It measures Weft's coroutine
 * connections (weft_connection_coro_*), not its HTTP module: it parses no
 * more than the peer does.
 *
 * Usage: coro-hello [--port N] [--workers N] [--stack BYTES]
 * Defaults: 127.0.0.1:8080, 1 worker, the default coroutine stack.
 * Stops on SIGINT or SIGTERM.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <weft.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define RESP "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!"
#define RESP_LEN (sizeof RESP - 1)
#define RESP_REPEAT 1024

static guint8 answers[RESP_REPEAT * RESP_LEN];
static gsize stack_size;

/* Complete "\r\n\r\n" in @p, with the match state carried in *@state. */
static guint
count_requests (const guint8 *p, gsize len, guint *state)
{
  static const char want[4] = { '\r', '\n', '\r', '\n' };
  guint n = 0, s = *state;
  for (gsize i = 0; i < len; i++)
    {
      if (p[i] == (guint8) want[s])
        s++;
      else
        s = p[i] == '\r' ? 1 : 0;
      if (s == 4)
        {
          n++;
          s = 0;
        }
    }
  *state = s;
  return n;
}

static gpointer
serve (gpointer data)
{
  WeftConnection *conn = data;
  guint state = 0;
  for (;;)
    {
      GBytes *in = weft_connection_coro_read (conn, 64 * 1024, -1, NULL);
      if (in == NULL)
        break;
      gsize len = 0;
      const guint8 *p = g_bytes_get_data (in, &len);
      guint n = count_requests (p, len, &state);
      g_bytes_unref (in);
      while (n > 0)
        {
          guint k = MIN (n, RESP_REPEAT);
          if (!weft_connection_coro_write (conn, answers, k * RESP_LEN, -1, NULL))
            goto out;
          n -= k;
        }
    }
out:
  weft_connection_close (conn);
  return NULL;
}

static void
accepted (WeftListener *listener, WeftConnection *conn, gpointer user_data)
{
  WeftCoro *c = weft_connection_coro_spawn (conn, serve, weft_connection_ref (conn),
                                            (GDestroyNotify) weft_connection_unref, stack_size);
  if (c != NULL)
    weft_coro_unref (c);
}

int
main (int argc, char **argv)
{
  gint port = 8080, workers = 1, stack = 0;
  GOptionEntry entries[] = {
    { "port", 'p', 0, G_OPTION_ARG_INT, &port, "Port (0: any free one)", "N" },
    { "workers", 'w', 0, G_OPTION_ARG_INT, &workers, "Worker threads (0: one per CPU)", "N" },
    { "stack", 's', 0, G_OPTION_ARG_INT, &stack, "Coroutine stack bytes (0: default)", "N" },
    { NULL }
  };
  GError *error = NULL;
  GOptionContext *octx = g_option_context_new ("- coroutine-per-connection hello server");
  g_option_context_add_main_entries (octx, entries, NULL);
  if (!g_option_context_parse (octx, &argc, &argv, &error) || port < 0 || port > 65535 ||
      workers < 0 || stack < 0)
    {
      g_printerr ("coro-hello: %s\n", error != NULL ? error->message : "bad arguments");
      return 2;
    }
  g_option_context_free (octx);
  stack_size = (gsize) stack;
  for (guint i = 0; i < RESP_REPEAT; i++)
    memcpy (answers + i * RESP_LEN, RESP, RESP_LEN);

  sigset_t set;
  sigemptyset (&set);
  sigaddset (&set, SIGINT);
  sigaddset (&set, SIGTERM);
  pthread_sigmask (SIG_BLOCK, &set, NULL);
  signal (SIGPIPE, SIG_IGN);

  WeftEngine *engine = weft_engine_new ((guint) workers, &error);
  if (engine == NULL)
    {
      g_printerr ("coro-hello: %s\n", error->message);
      return 1;
    }
  WeftListener *listener = weft_listener_new (engine, accepted, NULL, NULL);
  weft_listener_set_backlog (listener, 4096);
  if (!weft_listener_add_tcp (listener, "127.0.0.1", (guint16) port, &error) ||
      !weft_listener_start (listener, &error))
    {
      g_printerr ("coro-hello: %s\n", error->message);
      return 1;
    }
  printf ("coro-hello: http://127.0.0.1:%u/\n", weft_listener_get_port (listener, 0));
  fflush (stdout);

  int sig = 0;
  sigwait (&set, &sig);
  weft_listener_unref (listener);
  weft_engine_unref (engine);
  return 0;
}
