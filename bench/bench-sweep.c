/* bench-sweep: how long the HTTP server's keep-alive sweep keeps the
 * engine's context-list lock (ctx_lock) from others, with many idle
 * keep-alive connections.
 *
 * A child process opens NCONN (default 10,000) connections to an HTTP
 * server in this process, sends one request on each, reads the answer and
 * holds them idle. The keep-alive and header timeouts are 10 minutes, so
 * nothing expires and the server's own sweep does not tick. Then the main
 * thread runs the sweep's walk (weft__listener_live_connections_where()
 * with a filter that reads the HttpConn's idle time, as the sweep's does)
 * ROUNDS times, while a probe thread makes and destroys contexts in a loop
 * (weft_context_new() and the free each take ctx_lock once, as an accept
 * and a connection's teardown do). Per walk we take its duration and the
 * longest new+destroy of the probe that overlapped it: a probe that waits
 * for the lock waits up to one hold. Figures: medians over the walks. The
 * walker (main thread) runs on CPU 0, the probe on CPU 1.
 *
 *   build-release/bench/bench-sweep [NCONN] [ROUNDS]
 */
#include <sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "weft-bench.h"
#include "weft-connection-private.h"
#include "weft-context-private.h"
#include "weft-http-private.h"
#include <weft.h>

static void
answer (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_respond (request, 200, "text/plain", (const guint8 *) "ok", 2);
}

/* The child: NCONN idle keep-alive connections, each with one answered
 * request; one byte on @ready when done, then holds until @hold closes. */
static void
client (guint16 port, guint nconn, int ready, int hold)
{
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (port),
                            .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
  const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  for (guint i = 0; i < nconn; i++)
    {
      int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0 || connect (fd, (struct sockaddr *) &sa, sizeof sa) < 0)
        wb_die ("client connect %u: %s", i, strerror (errno));
      if (write (fd, req, sizeof req - 1) != (ssize_t) (sizeof req - 1))
        wb_die ("client write");
      char buf[512];
      gsize got = 0;
      while (got < 4 || memcmp (buf + got - 2, "ok", 2) != 0)
        {
          ssize_t n = read (fd, buf + got, sizeof buf - got);
          if (n <= 0)
            wb_die ("client read %u", i);
          got += (gsize) n;
        }
    }
  char c = 1;
  if (write (ready, &c, 1) != 1)
    wb_die ("ready");
  (void) !read (hold, &c, 1);
  _exit (0);
}

static atomic_bool probing = TRUE;
static _Atomic uint64_t walk_start, walk_end; /* 0 when no walk runs */
static _Atomic uint64_t walk_stall;           /* the longest probe in the current walk */
static WeftEngine *engine;

/* The walker and the probe on CPUs of their own (where there are two):
 * sharing one, the probe would wait for the CPU, not for the lock. */
static void
pin_to_cpu (int cpu)
{
  cpu_set_t set;
  CPU_ZERO (&set);
  CPU_SET (cpu, &set);
  if (sysconf (_SC_NPROCESSORS_ONLN) > 1)
    pthread_setaffinity_np (pthread_self (), sizeof set, &set);
}

static void *
probe (void *data)
{
  pin_to_cpu (1);
  while (atomic_load (&probing))
    {
      uint64_t t0 = wb_now_ns ();
      WeftContext *ctx = weft_context_new (engine);
      weft_context_destroy (ctx);
      weft_context_unref (ctx);
      uint64_t t1 = wb_now_ns ();
      uint64_t ws = atomic_load (&walk_start), we = atomic_load (&walk_end);
      /* Overlaps the walk running now (or the one just ended). */
      if (ws != 0 && t1 >= ws && (we == 0 || t0 <= we) && t1 - t0 > atomic_load (&walk_stall))
        atomic_store (&walk_stall, t1 - t0);
    }
  return NULL;
}

typedef struct {
  gint64 now;
  gint64 limit;
} At;

/* The sweep's filter: idle past the limit (never, here). */
static gboolean
idle_expired (WeftConnection *conn, gpointer data)
{
  At *at = data;
  HttpConn *hc = weft__connection_get_data (conn);
  if (hc == NULL)
    return FALSE;
  gint64 since = atomic_load_explicit (&hc->idle_since, memory_order_relaxed);
  return since != 0 && at->now - since >= at->limit;
}

static int
cmp_u64 (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
  return x < y ? -1 : x > y;
}

int
main (int argc, char **argv)
{
  guint nconn = argc > 1 ? (guint) atoi (argv[1]) : 10000;
  guint rounds = argc > 2 ? (guint) atoi (argv[2]) : 21;
  if (nconn == 0 || rounds == 0)
    wb_die ("usage: bench-sweep [NCONN] [ROUNDS]");
  alarm (85); /* a hung library fails the run */
  struct rlimit rl;
  getrlimit (RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit (RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < nconn + 100)
    wb_die ("RLIMIT_NOFILE %lu is too low for %u connections", (unsigned long) rl.rlim_cur, nconn);

  GError *error = NULL;
  engine = weft_engine_new (2, &error);
  if (engine == NULL)
    wb_die ("%s", error->message);
  WeftHttpServer *server = weft_http_server_new (engine);
  weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS, 600000);
  weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS, 600000);
  weft_http_server_add_handler (server, "GET", "/", answer, NULL, NULL);
  WeftListener *listener = weft_http_server_get_listener (server);
  if (!weft_listener_add_tcp (listener, "127.0.0.1", 0, &error) ||
      !weft_http_server_start (server, &error))
    wb_die ("%s", error->message);
  guint16 port = weft_listener_get_port (listener, 0);

  int ready[2], hold[2];
  if (pipe (ready) < 0 || pipe (hold) < 0)
    wb_die ("pipe");
  pid_t pid = fork ();
  if (pid == 0)
    {
      close (ready[0]);
      close (hold[1]);
      client (port, nconn, ready[1], hold[0]);
    }
  close (ready[1]);
  close (hold[0]);
  char c;
  if (read (ready[0], &c, 1) != 1)
    wb_die ("the client failed");
  while (weft_listener_get_n_connections (listener) < nconn)
    usleep (1000);

  pin_to_cpu (0);
  pthread_t th;
  pthread_create (&th, NULL, probe, NULL);
  uint64_t *walk = g_new (uint64_t, rounds), *stall = g_new (uint64_t, rounds);
  for (guint r = 0; r < rounds; r++)
    {
      usleep (20000);
      At at = { g_get_monotonic_time (), 600000 * (gint64) 1000 };
      atomic_store (&walk_stall, 0);
      atomic_store (&walk_end, 0);
      uint64_t t0 = wb_now_ns ();
      atomic_store (&walk_start, t0);
      GPtrArray *expired = weft__listener_live_connections_where (listener, idle_expired, &at);
      uint64_t t1 = wb_now_ns ();
      atomic_store (&walk_end, t1);
      usleep (2000); /* a probe waiting at the walk's end finishes */
      atomic_store (&walk_start, 0);
      if (expired->len != 0)
        wb_die ("%u connections expired", expired->len);
      g_ptr_array_unref (expired);
      walk[r] = t1 - t0;
      stall[r] = atomic_load (&walk_stall);
    }
  atomic_store (&probing, FALSE);
  pthread_join (th, NULL);
  qsort (walk, rounds, sizeof *walk, cmp_u64);
  qsort (stall, rounds, sizeof *stall, cmp_u64);
  printf ("connections %u, walks %u\n", weft_listener_get_n_connections (listener), rounds);
  printf ("walk: median %.1f us (min %.1f, max %.1f)\n", walk[rounds / 2] / 1e3, walk[0] / 1e3,
          walk[rounds - 1] / 1e3);
  printf ("longest context new+destroy during a walk: median %.1f us (min %.1f, max %.1f)\n",
          stall[rounds / 2] / 1e3, stall[0] / 1e3, stall[rounds - 1] / 1e3);

  close (hold[1]);
  waitpid (pid, NULL, 0);
  weft_http_server_unref (server);
  weft_engine_unref (engine);
  g_free (walk);
  g_free (stall);
  return 0;
}
