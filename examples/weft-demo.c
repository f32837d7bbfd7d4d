/* weft-demo.c: a line-echo TCP server that shows the Weft engine at work.
 *
 * The main context owns the listening socket, the client table, a 1 s stats
 * timer and the SIGINT/SIGTERM subscriptions. Each client gets a context of
 * its own, so its buffers need no lock: its callbacks never overlap. A client
 * that ends posts a job to the main context, so only the main context ever
 * touches the client table. Try it: weft-demo & nc 127.0.0.1 8080
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <weft.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_PENDING (64 * 1024) /* stop reading a client while this much is unsent */

static struct {
  WeftEngine *engine;
  WeftContext *main_ctx;
  guint listen_id;
  GHashTable *clients;  /* WeftContext* set, owning a ref each; main context only */
  gboolean quitting;    /* main context only */
  sem_t quit;           /* main() sleeps on it (not a GCond: TSan can't see those) */
} demo;

typedef struct {
  WeftContext *ctx;     /* borrowed: the client table holds the reference */
  int fd;
  guint id;
  GIOCondition events;
  gboolean eof;         /* the peer is done sending; close once out is sent */
  GString *in;          /* received, not yet a complete line */
  GString *out;         /* complete lines not yet written back */
} Client;

/* ---- a client, on its own context ---- */
static void
client_free (gpointer data)
{
  Client *c = data;
  close (c->fd);  /* Weft never closes fds; the source is gone, so now we may */
  g_string_free (c->in, TRUE);
  g_string_free (c->out, TRUE);
  g_free (c);
}

/* Returns FALSE at end of stream or on an error. */
static gboolean
client_read (Client *c)
{
  /* Bounded: the fd is re-armed when we return and fires again if data is left. */
  for (int i = 0; i < 16 && c->out->len < MAX_PENDING; i++)
    {
      char buf[4096];
      ssize_t n = read (c->fd, buf, sizeof buf);
      if (n == 0 || (n < 0 && errno != EINTR))
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      if (n < 0)
        continue;
      g_string_append_len (c->in, buf, n);

      /* Move the complete lines (or an over-long partial one) to out. */
      const char *nl = memrchr (c->in->str, '\n', c->in->len);
      gsize take = nl ? (gsize) (nl - c->in->str) + 1 : c->in->len >= MAX_PENDING ? c->in->len : 0;
      g_string_append_len (c->out, c->in->str, take);
      g_string_erase (c->in, 0, take);
    }
  return TRUE;
}

static gboolean
client_flush (Client *c)
{
  while (c->out->len > 0)
    {
      /* MSG_NOSIGNAL: a vanished peer must not SIGPIPE the whole process. */
      ssize_t n = send (c->fd, c->out->str, c->out->len, MSG_NOSIGNAL);
      if (n > 0)
        g_string_erase (c->out, 0, n);
      else if (errno != EINTR)
        return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  return TRUE;
}

/* Posted by an ending client to the main context. @data is a context
 * reference of its own, dropped by the job's destroy notify. */
static void
client_gone (gpointer data)
{
  if (g_hash_table_remove (demo.clients, data))
    printf ("client left (%u connected)\n", g_hash_table_size (demo.clients));
}

static gboolean
on_client (gint fd, GIOCondition condition, gpointer data)
{
  Client *c = data;
  g_autoptr (GError) error = NULL;

  if ((condition & (G_IO_IN | G_IO_HUP | G_IO_ERR)) && !c->eof && !client_read (c))
    {
      c->eof = TRUE;  /* echo an unterminated last line too */
      g_string_append_len (c->out, c->in->str, c->in->len);
    }
  if (!client_flush (c) || (c->eof && c->out->len == 0))
    {
      /* If the main context refuses the job, the unref runs all the same. */
      weft_context_post (demo.main_ctx, client_gone, weft_context_ref (c->ctx),
                         (GDestroyNotify) weft_context_unref);
      return G_SOURCE_REMOVE;  /* client_free runs once we have returned */
    }

  /* Backpressure: while the peer does not read its echo, stop reading it. */
  GIOCondition want = (c->eof || c->out->len >= MAX_PENDING ? 0 : G_IO_IN)
                      | (c->out->len ? G_IO_OUT : 0);
  if (want != c->events && weft_context_modify_fd (c->ctx, c->id, want, &error))
    c->events = want;
  else if (error)
    g_printerr ("modify_fd: %s\n", error->message);
  return G_SOURCE_CONTINUE;
}

/* ---- the main context ---- */
static void
client_start (int fd)
{
  g_autoptr (GError) error = NULL;
  WeftContext *ctx = weft_context_new (demo.engine);
  Client *c = g_new (Client, 1);

  *c = (Client) { ctx, fd, 0, G_IO_IN, FALSE, g_string_new (NULL), g_string_new (NULL) };
  /* Nothing fires before dispatch, so c->id is set before on_client runs. */
  c->id = weft_context_add_fd (ctx, fd, G_IO_IN, on_client, c, client_free, &error);
  if (c->id == 0)  /* client_free has run already */
    {
      g_printerr ("add_fd: %s\n", error->message);
      weft_context_unref (ctx);
      return;
    }
  g_hash_table_add (demo.clients, ctx);
  weft_context_dispatch (ctx);
  printf ("client joined (%u connected)\n", g_hash_table_size (demo.clients));
}

static gboolean
on_accept (gint fd, GIOCondition condition, gpointer data)
{
  for (int i = 0; i < 64; i++)  /* bounded, like client_read */
    {
      int cfd = accept4 (fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (cfd >= 0)
        client_start (cfd);
      else if (errno != EINTR && errno != ECONNABORTED)
        {
          if (errno != EAGAIN && errno != EWOULDBLOCK)
            g_printerr ("accept: %s\n", g_strerror (errno));
          break;
        }
    }
  return G_SOURCE_CONTINUE;
}

static void
begin_quit (const char *why)
{
  if (demo.quitting)
    return;
  demo.quitting = TRUE;
  printf ("%s: shutting down\n", why);
  weft_context_remove (demo.main_ctx, demo.listen_id);  /* stop accepting */
  sem_post (&demo.quit);
}

static gboolean
on_signal (gint signum, gpointer data)
{
  begin_quit (signum == SIGINT ? "SIGINT" : "SIGTERM");
  return G_SOURCE_CONTINUE;
}

static gboolean
on_duration (gpointer data)
{
  begin_quit ("--duration elapsed");
  return G_SOURCE_REMOVE;
}

static gboolean
on_stats (gpointer data)
{
  WeftEngineStats st;
  weft_engine_get_stats (demo.engine, &st);
  printf ("stats: workers=%u sleeping=%u contexts=%" G_GUINT64_FORMAT " jobs=%" G_GUINT64_FORMAT
          " polls=%" G_GUINT64_FORMAT " wakeups=%" G_GUINT64_FORMAT " fd_events=%" G_GUINT64_FORMAT
          " timers=%" G_GUINT64_FORMAT " clients=%u\n", st.n_workers, st.n_sleeping,
          st.n_contexts, st.jobs_run, st.polls, st.wakeups, st.fd_events, st.timers_fired,
          g_hash_table_size (demo.clients));
  return G_SOURCE_CONTINUE;
}

int
main (int argc, char **argv)
{
  gint port = 8080, workers = 0, duration = 0;
  GOptionEntry entries[] = {
    { "port", 'p', 0, G_OPTION_ARG_INT, &port, "Port on 127.0.0.1 (0: any free one)", "PORT" },
    { "workers", 'w', 0, G_OPTION_ARG_INT, &workers, "Worker threads (0: one per CPU)", "N" },
    { "duration", 'd', 0, G_OPTION_ARG_INT, &duration, "Stop after SECONDS (0: at SIGINT/SIGTERM)",
      "SECONDS" },
    { NULL }
  };
  g_autoptr (GOptionContext) options = g_option_context_new ("- Weft line-echo demo");
  g_autoptr (GError) error = NULL;
  struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
  socklen_t len = sizeof addr;
  sigset_t sigs;
  int lfd, one = 1, status = 0;

  setvbuf (stdout, NULL, _IOLBF, 0);  /* lines reach a pipe right away */
  g_option_context_add_main_entries (options, entries, NULL);
  if (!g_option_context_parse (options, &argc, &argv, &error))
    return g_printerr ("%s\n", error->message), 2;
  if (port < 0 || port > 65535 || workers < 0 || duration < 0)
    return g_printerr ("--port takes 0 to 65535; --workers and --duration, values >= 0\n"), 2;
  addr.sin_port = htons (port);
  /* Block before any thread exists: the workers inherit the mask, so the
   * signals reach nothing but the engine's signalfd. */
  sigemptyset (&sigs);
  sigaddset (&sigs, SIGINT);
  sigaddset (&sigs, SIGTERM);
  pthread_sigmask (SIG_BLOCK, &sigs, NULL);

  /* A plain non-blocking socket: Weft only watches fds, it never makes them. */
  lfd = socket (AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0 || setsockopt (lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one)
      || bind (lfd, (struct sockaddr *) &addr, len) || listen (lfd, 128)
      || getsockname (lfd, (struct sockaddr *) &addr, &len))
    g_set_error (&error, WEFT_ERROR, WEFT_ERROR_FAILED, "127.0.0.1:%d: %s", port, g_strerror (errno));
  else
    demo.engine = weft_engine_new (workers, &error);
  if (!demo.engine)
    {
      g_printerr ("%s\n", error->message);
      if (lfd >= 0)
        close (lfd);
      return 1;
    }
  printf ("listening on 127.0.0.1:%u\n", ntohs (addr.sin_port));  /* demo-smoke.py reads this */

  sem_init (&demo.quit, 0, 0);
  demo.clients = g_hash_table_new_full (NULL, NULL, (GDestroyNotify) weft_context_unref, NULL);
  demo.main_ctx = weft_context_new (demo.engine);
  demo.listen_id = weft_context_add_fd (demo.main_ctx, lfd, G_IO_IN, on_accept, NULL, NULL, &error);
  if (!demo.listen_id
      || !weft_context_add_signal (demo.main_ctx, SIGINT, on_signal, NULL, NULL, &error)
      || !weft_context_add_signal (demo.main_ctx, SIGTERM, on_signal, NULL, NULL, &error))
    {
      g_printerr ("%s\n", error->message);
      sem_post (&demo.quit);
      status = 1;
    }
  weft_context_add_timeout (demo.main_ctx, 1000, on_stats, NULL, NULL);
  if (duration > 0)
    weft_context_add_timeout (demo.main_ctx, MIN (duration, G_MAXINT / 1000) * 1000, on_duration,
                              NULL, NULL);
  weft_context_dispatch (demo.main_ctx);  /* from now on callbacks run */
  while (sem_wait (&demo.quit) < 0)  /* EINTR */
    ;

  /* Let queued work (echoes, client_gone jobs) run, then stop the workers. */
  if (!weft_engine_shutdown (demo.engine, 2 * G_USEC_PER_SEC))
    {
      g_printerr ("shutdown: work still queued after 2 s\n");
      status = 1;
    }

  /* No callback runs any more, so this thread may touch what the contexts
   * owned. Destroying a context removes its sources; the client sources'
   * destroy notifies close the client sockets. */
  weft_context_destroy (demo.main_ctx);
  weft_context_unref (demo.main_ctx);
  g_hash_table_destroy (demo.clients);
  weft_engine_unref (demo.engine);
  close (lfd);  /* only now: its source is gone */
  sem_destroy (&demo.quit);
  printf ("bye\n");
  return status;
}
