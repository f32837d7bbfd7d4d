/* test-listener.c: WeftListener on real sockets: address forms, adopted
 * and socket-activated fds, limits, descriptor exhaustion, 1,000
 * concurrent clients, graceful shutdown.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-net-util.h"
#include "weft-connection-private.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/wait.h>

static void
echo_once (int fd)
{
  wt_send_str (fd, "ping");
  char buf[4];
  wt_recv_exactly (fd, buf, 4);
  g_assert_cmpmem (buf, 4, "ping", 4);
}

/* ---- /listener/tcp-port-zero ------------------------------------------- */

static void
accept_echo (WeftListener *listener, WeftConnection *conn, gpointer user_data)
{
  atomic_int *accepted = user_data;
  if (accepted != NULL)
    atomic_fetch_add (accepted, 1);
  wt_echo_setup (conn, NULL);
}

/* @l has one socket, on a port the system chose: starts it, echoes once
 * through it, and checks that this was its first accept. */
static void
assert_serves_one (WeftListener *l, atomic_int *accepted)
{
  GError *error = NULL;
  g_assert_cmpuint (weft_listener_get_n_sockets (l), ==, 1);
  guint16 port = weft_listener_get_port (l, 0);
  g_assert_cmpuint (port, !=, 0);
  g_assert_true (weft_listener_start (l, &error));
  g_assert_no_error (error);
  int fd = wt_connect_tcp (port);
  echo_once (fd);
  close (fd);
  g_assert_cmpint (atomic_load (accepted), ==, 1);
}

static void
test_tcp_port_zero (void)
{
  WeftEngine *engine = wt_engine_new (2);
  atomic_int accepted = 0;
  WeftListener *l = weft_listener_new (engine, accept_echo, &accepted, NULL);
  GError *error = NULL;
  g_assert_true (weft_listener_add_address (l, "127.0.0.1:0", &error));
  g_assert_no_error (error);
  assert_serves_one (l, &accepted);
  g_assert_cmpuint (weft_listener_get_n_accepted (l), ==, 1);
  weft_listener_unref (l);
  weft_engine_unref (engine);
}

/* ---- /listener/unref-refuses-queued ------------------------------------ */

typedef struct {
  WtGate gate;         /* the first call waits here */
  atomic_int calls;    /* the accept function's */
  atomic_int notified; /* the listener's notify */
} Queued;

static void
queued_accept (WeftListener *listener, WeftConnection *conn, gpointer user_data)
{
  Queued *q = user_data;
  if (atomic_fetch_add (&q->calls, 1) == 0)
    wt_gate_wait (&q->gate);
  /* No callbacks, no reference: the listener closes the connection. */
}

static void
queued_notify (gpointer data)
{
  Queued *q = data;
  atomic_fetch_add (&q->notified, 1);
}

/* Two connections wait in the backlog before the listener starts, so one
 * batch accepts both and queues their jobs on the only worker. The first
 * call blocks there while the last reference goes: it was begun and
 * finishes, but the second connection, still queued, is aborted without
 * a call; the notify runs once, after the first call returned. */
static void
test_unref_refuses_queued (void)
{
  WeftEngine *engine = wt_engine_new (1);
  Queued q = { 0 };
  wt_gate_init (&q.gate);
  WeftListener *l = weft_listener_new (engine, queued_accept, &q, queued_notify);
  GError *error = NULL;
  g_assert_true (weft_listener_add_tcp (l, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  guint16 port = weft_listener_get_port (l, 0);
  int fds[2] = { wt_connect_tcp (port), wt_connect_tcp (port) };
  g_assert_true (weft_listener_start (l, &error));
  g_assert_no_error (error);
  WT_WAIT_UNTIL (atomic_load (&q.gate.entered) == 1);
  g_assert_cmpint (atomic_load (&q.gate.entered), ==, 1);
  g_assert_cmpuint (weft_listener_get_n_accepted (l), ==, 2);

  weft_listener_unref (l); /* the last reference, while a call runs */
  g_assert_cmpint (atomic_load (&q.notified), ==, 0);
  wt_gate_open (&q.gate);
  for (guint i = 0; i < 2; i++)
    {
      GByteArray *got = wt_recv_to_eof (fds[i], TRUE, NULL);
      g_assert_cmpuint (got->len, ==, 0);
      g_byte_array_unref (got);
      close (fds[i]);
    }
  WT_WAIT_UNTIL (atomic_load (&q.notified) == 1);
  g_assert_cmpint (atomic_load (&q.notified), ==, 1);
  g_assert_cmpint (atomic_load (&q.calls), ==, 1);
  weft_engine_unref (engine);
  g_assert_cmpint (atomic_load (&q.notified), ==, 1);
  g_assert_cmpint (atomic_load (&q.calls), ==, 1);
  wt_gate_clear (&q.gate);
}

/* ---- /listener/ipv6 ---------------------------------------------------- */

static void
test_ipv6 (void)
{
  int probe = socket (AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
  if (probe < 0 || bind (probe, (struct sockaddr *) &a6, sizeof a6) < 0)
    {
      if (probe >= 0)
        close (probe);
      g_test_skip ("no IPv6 loopback on this machine");
      return;
    }
  close (probe);
  WeftEngine *engine = wt_engine_new (2);
  WeftListener *l = weft_listener_new (engine, accept_echo, NULL, NULL);
  GError *error = NULL;
  g_assert_true (weft_listener_add_address (l, "[::1]:0", &error));
  g_assert_no_error (error);
  guint16 port = weft_listener_get_port (l, 0);
  g_assert_true (weft_listener_start (l, &error));
  int fd = socket (AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  a6.sin6_port = htons (port);
  g_assert_cmpint (connect (fd, (struct sockaddr *) &a6, sizeof a6), ==, 0);
  wt_set_timeouts (fd, 10000);
  echo_once (fd);
  close (fd);

  /* Malformed forms are refused with INVALID_ARGUMENT. */
  const char *bad[] = { "::1:80", "[::1:80", "127.0.0.1", "127.0.0.1:99999", "host:",
                        "127.0.0.1: 80", "127.0.0.1:+80", "127.0.0.1:-0" };
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_assert_false (weft_listener_add_address (l, bad[i], &error));
      g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT);
      g_clear_error (&error);
    }
  weft_listener_unref (l);
  weft_engine_unref (engine);
}

/* ---- /listener/unix ---------------------------------------------------- */

static void
test_unix (void)
{
  WeftEngine *engine = wt_engine_new (2);
  WeftListener *l = weft_listener_new (engine, accept_echo, NULL, NULL);
  GError *error = NULL;
  gchar *dir = g_dir_make_tmp ("weft-unix-XXXXXX", &error);
  g_assert_no_error (error);
  gchar *path = g_build_filename (dir, "sock", NULL);
  gchar *address = g_strconcat ("unix:", path, NULL);
  g_assert_true (weft_listener_add_address (l, address, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (weft_listener_get_port (l, 0), ==, 0);
  g_assert_true (weft_listener_start (l, &error));

  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sun = { .sun_family = AF_UNIX };
  g_strlcpy (sun.sun_path, path, sizeof sun.sun_path);
  g_assert_cmpint (connect (fd, (struct sockaddr *) &sun, sizeof sun), ==, 0);
  wt_set_timeouts (fd, 10000);
  echo_once (fd);
  close (fd);

  /* A regular file in the way is not replaced. */
  gchar *file = g_build_filename (dir, "file", NULL);
  g_assert_true (g_file_set_contents (file, "x", 1, NULL));
  g_assert_false (weft_listener_add_unix (l, file, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);

  weft_listener_unref (l);
  weft_engine_unref (engine);
  /* The socket file goes with the listener (on its context: wait). */
  WT_WAIT_UNTIL (!g_file_test (path, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  unlink (file);
  rmdir (dir);
  g_free (file);
  g_free (address);
  g_free (path);
  g_free (dir);
}

/* ---- /listener/name-address-missing ------------------------------------- */

/* What the fake resolver answers: numeric addresses, in order. */
static const char *const *fake_addresses;

static int
fake_resolve (const char *host, const char *port, const struct addrinfo *hints,
              struct addrinfo **res)
{
  (void) host;
  struct addrinfo *head = NULL, **tail = &head;
  struct addrinfo numeric = *hints;
  numeric.ai_flags |= AI_NUMERICHOST;
  for (guint i = 0; fake_addresses[i] != NULL; i++)
    {
      struct addrinfo *one = NULL;
      g_assert_cmpint (getaddrinfo (fake_addresses[i], port, &numeric, &one), ==, 0);
      *tail = one; /* glibc frees a chain node by node: the joined lists free as one */
      while (*tail != NULL)
        tail = &(*tail)->ai_next;
    }
  *res = head;
  return 0;
}

/* Binds @addresses as the addresses of one name, on @port; returns the
 * result and the number of sockets the listener got. */
static gboolean
add_fake_name (WeftListener *l, const char *const *addresses, guint16 port, GError **error)
{
  fake_addresses = addresses;
  weft__listener_test_resolve = fake_resolve;
  gboolean ok = weft_listener_add_tcp (l, "fake.name", port, error);
  weft__listener_test_resolve = NULL;
  return ok;
}

/* Whether this machine lacks @ip (IPv4): a bind to it fails so. */
static gboolean
address_missing (const char *ip)
{
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET };
  g_assert_cmpint (inet_pton (AF_INET, ip, &a.sin_addr), ==, 1);
  gboolean missing = bind (fd, (struct sockaddr *) &a, sizeof a) < 0 && errno == EADDRNOTAVAIL;
  close (fd);
  return missing;
}

static void
test_name_address_missing (void)
{
  g_test_summary ("A name whose first address this machine does not have (EADDRNOTAVAIL) "
                  "is served on its others; one whose addresses are all missing fails; "
                  "one with an address in use binds none");

  /* Two documentation addresses (RFC 5737) this machine does not have:
   * some VMs put their own interface in one of these networks. */
  const char *candidates[] = { "192.0.2.1", "198.51.100.1", "203.0.113.1", "192.0.2.254" };
  const char *missing[2];
  guint n_missing = 0;
  for (guint i = 0; i < G_N_ELEMENTS (candidates) && n_missing < 2; i++)
    if (address_missing (candidates[i]))
      missing[n_missing++] = candidates[i];
  if (n_missing < 2)
    {
      g_test_skip ("this machine has the documentation addresses tried");
      return;
    }

  WeftEngine *engine = wt_engine_new (1);
  atomic_int accepted = 0;
  WeftListener *l = weft_listener_new (engine, accept_echo, &accepted, NULL);
  GError *error = NULL;

  /* Missing first, then loopback on a port the system picks. */
  const char *const missing_first[] = { missing[0], "127.0.0.1", NULL };
  g_assert_true (add_fake_name (l, missing_first, 0, &error));
  g_assert_no_error (error);
  assert_serves_one (l, &accepted);

  /* Every address missing: the first one's error, no socket. */
  const char *const all_missing[] = { missing[0], missing[1], NULL };
  g_assert_false (add_fake_name (l, all_missing, 0, &error));
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "fake.name"));
  g_clear_error (&error);
  g_assert_cmpuint (weft_listener_get_n_sockets (l), ==, 1);

  /* A free port for loopback, then loopback again (in use by the first):
   * neither stays bound, so the port is free again afterwards. */
  WeftListener *probe = weft_listener_new (engine, accept_echo, NULL, NULL);
  g_assert_true (weft_listener_add_tcp (probe, "127.0.0.2", 0, &error));
  guint16 free_port = weft_listener_get_port (probe, 0);
  weft_listener_unref (probe);
  const char *const in_use[] = { "127.0.0.2", missing[0], "127.0.0.2", NULL };
  g_assert_false (add_fake_name (l, in_use, free_port, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_ADDRESS_IN_USE);
  g_clear_error (&error);
  g_assert_cmpuint (weft_listener_get_n_sockets (l), ==, 1);
  WeftListener *again = weft_listener_new (engine, accept_echo, NULL, NULL);
  g_assert_true (weft_listener_add_tcp (again, "127.0.0.2", free_port, &error));
  g_assert_no_error (error);
  weft_listener_unref (again);

  weft_listener_unref (l);
  weft_engine_unref (engine);
}

/* ---- /listener/address-in-use and /listener/reuse-port ----------------- */

static void
test_address_in_use (void)
{
  WeftEngine *engine = wt_engine_new (1);
  WeftListener *a = weft_listener_new (engine, accept_echo, NULL, NULL);
  WeftListener *b = weft_listener_new (engine, accept_echo, NULL, NULL);
  GError *error = NULL;
  g_assert_true (weft_listener_add_tcp (a, "127.0.0.1", 0, &error));
  guint16 port = weft_listener_get_port (a, 0);
  g_assert_false (weft_listener_add_tcp (b, "127.0.0.1", port, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_ADDRESS_IN_USE);
  g_assert_nonnull (strstr (error->message, "127.0.0.1"));
  g_clear_error (&error);
  /* A privileged port as a normal user, or a name that does not resolve. */
  g_assert_false (weft_listener_add_tcp (b, "no-such-host.invalid", 0, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_clear_error (&error);
  if (geteuid () != 0)
    {
      g_assert_false (weft_listener_add_tcp (b, "127.0.0.1", 1, &error));
      g_assert_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED);
      g_clear_error (&error);
    }
  /* Starting without sockets fails. */
  g_assert_false (weft_listener_start (b, &error));
  g_assert_nonnull (error);
  g_clear_error (&error);
  weft_listener_unref (a);
  weft_listener_unref (b);
  weft_engine_unref (engine);
}

static void
test_reuse_port (void)
{
  WeftEngine *engine = wt_engine_new (2);
  atomic_int na = 0, nb = 0;
  WeftListener *a = weft_listener_new (engine, accept_echo, &na, NULL);
  WeftListener *b = weft_listener_new (engine, accept_echo, &nb, NULL);
  GError *error = NULL;
  weft_listener_set_reuse_port (a, TRUE);
  weft_listener_set_reuse_port (b, TRUE);
  g_assert_true (weft_listener_add_tcp (a, "127.0.0.1", 0, &error));
  guint16 port = weft_listener_get_port (a, 0);
  g_assert_true (weft_listener_add_tcp (b, "127.0.0.1", port, &error));
  g_assert_no_error (error);
  g_assert_true (weft_listener_start (a, NULL));
  g_assert_true (weft_listener_start (b, NULL));
  /* The kernel spreads connections over both by the client's port. */
  for (guint i = 0; i < 64; i++)
    {
      int fd = wt_connect_tcp (port);
      echo_once (fd);
      close (fd);
    }
  g_assert_cmpint (atomic_load (&na) + atomic_load (&nb), ==, 64);
  g_assert_cmpint (atomic_load (&na), >, 0);
  g_assert_cmpint (atomic_load (&nb), >, 0);
  weft_listener_unref (a);
  weft_listener_unref (b);
  weft_engine_unref (engine);
}

/* ---- /listener/adopt-fd and /listener/systemd -------------------------- */

static void
test_adopt_fd (void)
{
  WeftEngine *engine = wt_engine_new (2);
  WeftListener *l = weft_listener_new (engine, accept_echo, NULL, NULL);
  GError *error = NULL;
  guint16 port;
  int lfd = wt_listening_socket (16, &port);
  g_assert_true (weft_listener_add_fd (l, lfd, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (weft_listener_get_port (l, 0), ==, port);

  /* Not a listening socket: refused, and left open. */
  int plain = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  g_assert_false (weft_listener_add_fd (l, plain, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_true (wt_fd_is_open (plain));
  close (plain);

  g_assert_true (weft_listener_start (l, NULL));
  int fd = wt_connect_tcp (port);
  echo_once (fd);
  close (fd);
  weft_listener_unref (l);
  weft_engine_unref (engine);
}

/* Socket activation, in a subprocess (it puts a socket on fd 3 and sets
 * the environment): LISTEN_PID naming this process and LISTEN_FDS=1. */
static void
test_systemd (void)
{
  if (g_test_subprocess ())
    {
      guint16 port;
      int lfd = wt_listening_socket (16, &port);
      if (lfd != 3)
        {
          g_assert_cmpint (dup2 (lfd, 3), ==, 3);
          close (lfd);
        }
      gchar *pid = g_strdup_printf ("%d", (int) getpid ());
      g_setenv ("LISTEN_PID", pid, TRUE);
      g_setenv ("LISTEN_FDS", "1", TRUE);
      WeftEngine *engine = wt_engine_new (2);
      WeftListener *l = weft_listener_new (engine, accept_echo, NULL, NULL);
      GError *error = NULL;
      g_assert_cmpint (weft_listener_add_systemd (l, &error), ==, 1);
      g_assert_no_error (error);
      g_assert_cmpuint (weft_listener_get_port (l, 0), ==, port);
      g_assert_true (weft_listener_start (l, NULL));
      int fd = wt_connect_tcp (port);
      echo_once (fd);
      close (fd);
      /* Meant for another process: nothing adopted. */
      g_setenv ("LISTEN_PID", "1", TRUE);
      g_assert_cmpint (weft_listener_add_systemd (l, &error), ==, 0);
      weft_listener_unref (l);
      weft_engine_unref (engine);
      g_free (pid);
      return;
    }
  g_test_trap_subprocess (NULL, 30 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

/* ---- /listener/max-connections ----------------------------------------- */

static void
test_max_connections (void)
{
  WeftEngine *engine = wt_engine_new (2);
  atomic_int accepted = 0;
  WeftListener *l = weft_listener_new (engine, accept_echo, &accepted, NULL);
  weft_listener_set_max_connections (l, 2);
  GError *error = NULL;
  g_assert_true (weft_listener_add_tcp (l, "127.0.0.1", 0, &error));
  guint16 port = weft_listener_get_port (l, 0);
  g_assert_true (weft_listener_start (l, NULL));

  int a = wt_connect_tcp (port), b = wt_connect_tcp (port);
  echo_once (a);
  echo_once (b);
  /* The third completes the TCP handshake (the kernel's backlog) but is
   * not accepted while two are live. */
  int c = wt_connect_tcp (port);
  wt_send_str (c, "ping");
  wt_quiet_window_ms (200);
  g_assert_cmpint (atomic_load (&accepted), ==, 2);
  g_assert_cmpuint (weft_listener_get_n_connections (l), ==, 2);
  /* One closes: the third is accepted and answered. */
  close (a);
  char buf[4];
  wt_recv_exactly (c, buf, 4);
  g_assert_cmpmem (buf, 4, "ping", 4);
  g_assert_cmpint (atomic_load (&accepted), ==, 3);
  close (b);
  close (c);
  WT_WAIT_UNTIL (weft_listener_get_n_connections (l) == 0);
  g_assert_cmpuint (weft_listener_get_n_connections (l), ==, 0);
  weft_listener_unref (l);
  weft_engine_unref (engine);
}

/* Raising the limit while accepting is paused at it resumes accepting at
 * once (nothing closes here). */
static void
test_max_connections_raised (void)
{
  WeftEngine *engine = wt_engine_new (2);
  atomic_int accepted = 0;
  WeftListener *l = weft_listener_new (engine, accept_echo, &accepted, NULL);
  weft_listener_set_max_connections (l, 1);
  GError *error = NULL;
  g_assert_true (weft_listener_add_tcp (l, "127.0.0.1", 0, &error));
  guint16 port = weft_listener_get_port (l, 0);
  g_assert_true (weft_listener_start (l, NULL));
  int a = wt_connect_tcp (port);
  echo_once (a);
  int b = wt_connect_tcp (port);
  wt_send_str (b, "ping");
  wt_quiet_window_ms (200);
  g_assert_cmpint (atomic_load (&accepted), ==, 1);
  weft_listener_set_max_connections (l, 0); /* no limit now */
  char buf[4];
  wt_recv_exactly (b, buf, 4);
  g_assert_cmpmem (buf, 4, "ping", 4);
  g_assert_cmpint (atomic_load (&accepted), ==, 2);
  close (a);
  close (b);
  WT_WAIT_UNTIL (weft_listener_get_n_connections (l) == 0);
  weft_listener_unref (l);
  weft_engine_unref (engine);
}

/* ---- /listener/emfile -------------------------------------------------- */

static double
cpu_seconds (void)
{
  struct rusage ru;
  getrusage (RUSAGE_SELF, &ru);
  return (double) ru.ru_utime.tv_sec + (double) ru.ru_utime.tv_usec / 1e6 +
         (double) ru.ru_stime.tv_sec + (double) ru.ru_stime.tv_usec / 1e6;
}

/* Over half a second, the process uses less than half a CPU: a listener
 * retrying a failing accept at once would use a whole one. */
static void
assert_not_spinning (void)
{
  double cpu0 = cpu_seconds ();
  gint64 t0 = g_get_monotonic_time ();
  g_usleep (500000);
  double cpu = cpu_seconds () - cpu0;
  double wall = (double) (g_get_monotonic_time () - t0) / 1e6;
  g_assert_cmpfloat (cpu, <, 0.5 * wall);
}

static int
count_open_fds (void)
{
  int n = 0;
  GDir *d = g_dir_open ("/proc/self/fd", 0, NULL);
  while (g_dir_read_name (d) != NULL)
    n++;
  g_dir_close (d);
  return n - 1; /* the GDir's own */
}

/* Out of descriptors (RLIMIT_NOFILE lowered in a subprocess): accept fails
 * with EMFILE; the listener backs off instead of spinning (the process
 * uses well under half a CPU meanwhile), live connections keep echoing,
 * and once descriptors are free again the waiting clients are served. */
static void
test_emfile (void)
{
  if (g_test_subprocess ())
    {
      /* The listener warns about EMFILE: expected here, so not fatal. */
      g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
      WeftEngine *engine = wt_engine_new (2);
      atomic_int accepted = 0;
      WeftListener *l = weft_listener_new (engine, accept_echo, &accepted, NULL);
      GError *error = NULL;
      g_assert_true (weft_listener_add_tcp (l, "127.0.0.1", 0, &error));
      guint16 port = weft_listener_get_port (l, 0);
      g_assert_true (weft_listener_start (l, NULL));

      int live = wt_connect_tcp (port);
      echo_once (live);
      /* Leave room for 4 more descriptors: 2 clients and their 2 server
       * sides; further clients then hit EMFILE in accept. */
      int open_now = count_open_fds ();
      struct rlimit rl;
      getrlimit (RLIMIT_NOFILE, &rl);
      rl.rlim_cur = (rlim_t) open_now + 4;
      g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &rl), ==, 0);
      int clients[2];
      for (guint i = 0; i < 2; i++)
        clients[i] = wt_connect_tcp (port);
      /* Now at the limit. Three more clients come from a forked child,
       * whose descriptors do not count against ours. */
      pid_t child = fork ();
      if (child == 0)
        {
          /* The child has its own descriptor table. */
          struct rlimit big = { 1024, 1024 };
          setrlimit (RLIMIT_NOFILE, &big);
          int extra[3];
          for (guint i = 0; i < 3; i++)
            {
              extra[i] = socket (AF_INET, SOCK_STREAM, 0);
              struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (port),
                                        .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
              if (connect (extra[i], (struct sockaddr *) &sa, sizeof sa) < 0)
                _exit (2);
              struct timeval tv = { 20, 0 };
              setsockopt (extra[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
              send (extra[i], "ping", 4, MSG_NOSIGNAL);
            }
          for (guint i = 0; i < 3; i++)
            {
              char buf[4];
              gsize got = 0;
              while (got < 4)
                {
                  ssize_t n = recv (extra[i], buf + got, 4 - got, 0);
                  if (n <= 0)
                    _exit (3);
                  got += (gsize) n;
                }
              if (memcmp (buf, "ping", 4) != 0)
                _exit (4);
            }
          _exit (0);
        }
      g_assert_cmpint (child, >, 0);
      /* Give accept time to hit EMFILE and the listener time to (not)
       * spin. */
      g_usleep (200000);
      assert_not_spinning ();
      /* The live connection is still served. */
      echo_once (live);
      /* Free descriptors: the waiting clients get served. */
      for (guint i = 0; i < 2; i++)
        close (clients[i]);
      rl.rlim_cur = rl.rlim_max;
      setrlimit (RLIMIT_NOFILE, &rl);
      int status = 0;
      g_assert_cmpint (waitpid (child, &status, 0), ==, child);
      g_assert_true (WIFEXITED (status));
      g_assert_cmpint (WEXITSTATUS (status), ==, 0);
      close (live);
      weft_listener_unref (l);
      weft_engine_unref (engine);
      return;
    }
  g_test_trap_subprocess (NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  /* Said once, not once per retry. */
  g_test_trap_assert_stderr ("*accept: Too many open files; pausing*");
  g_test_trap_assert_stderr_unmatched ("*pausing*pausing*");
}

/* ---- /listener/accept-error ------------------------------------------- */

/* An adopted listening socket that another holder of it shuts down
 * (a service manager's copy): accept fails with EINVAL from then on while
 * epoll keeps reporting it readable and hung up. The listener stops
 * watching that socket: no busy loop, one warning, not one per retry. */
static void
test_accept_error (void)
{
  if (g_test_subprocess ())
    {
      g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
      WeftEngine *engine = wt_engine_new (2);
      WeftListener *l = weft_listener_new (engine, accept_echo, NULL, NULL);
      GError *error = NULL;
      guint16 port;
      int lfd = wt_listening_socket (16, &port);
      int other = dup (lfd);
      g_assert_true (weft_listener_add_fd (l, lfd, &error));
      g_assert_no_error (error);
      g_assert_true (weft_listener_start (l, NULL));
      int fd = wt_connect_tcp (port);
      echo_once (fd);
      g_assert_cmpint (shutdown (other, SHUT_RDWR), ==, 0);
      g_usleep (100000);
      assert_not_spinning ();
      /* The connection accepted before goes on. */
      echo_once (fd);
      close (fd);
      close (other);
      weft_listener_unref (l);
      weft_engine_unref (engine);
      return;
    }
  g_test_trap_subprocess (NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*accept on fd*: Invalid argument; no longer accepting on it*");
  g_test_trap_assert_stderr_unmatched ("*accept:*accept:*");
}

/* ---- /listener/echo-1000 ----------------------------------------------- */

#define N_CLIENTS 1000

/* 1,000 clients connected at once, each sending a distinct message in two
 * pieces and reading its echo, driven by one epoll loop in the test
 * thread. */
static void
test_echo_1000 (void)
{
  rlim_t lim = wt_raise_nofile (2 * N_CLIENTS + 200);
  if (lim < 2 * N_CLIENTS + 100)
    {
      g_test_skip ("RLIMIT_NOFILE too low for 1,000 connections");
      return;
    }
  WtServer srv;
  wt_server_start (&srv, 2, wt_echo_setup, NULL);
  int fds[N_CLIENTS];
  gsize got[N_CLIENTS];
  char msg[N_CLIENTS][16];
  for (guint i = 0; i < N_CLIENTS; i++)
    {
      fds[i] = wt_connect_tcp (srv.port);
      g_snprintf (msg[i], sizeof msg[i], "client-%06u|", i);
      wt_send_all (fds[i], msg[i], 7);
      got[i] = 0;
    }
  for (guint i = 0; i < N_CLIENTS; i++)
    wt_send_all (fds[i], msg[i] + 7, 8);
  int ep = epoll_create1 (EPOLL_CLOEXEC);
  for (guint i = 0; i < N_CLIENTS; i++)
    {
      struct epoll_event ev = { .events = EPOLLIN, .data.u32 = i };
      epoll_ctl (ep, EPOLL_CTL_ADD, fds[i], &ev);
    }
  guint done = 0;
  gint64 deadline = g_get_monotonic_time () + WT_DEADLINE_US;
  while (done < N_CLIENTS && g_get_monotonic_time () < deadline)
    {
      struct epoll_event evs[64];
      int n = epoll_wait (ep, evs, 64, 1000);
      for (int k = 0; k < n; k++)
        {
          guint i = evs[k].data.u32;
          char buf[16];
          ssize_t r = recv (fds[i], buf, sizeof buf - got[i], MSG_DONTWAIT);
          g_assert_cmpint (r, >, 0);
          g_assert_cmpmem (buf, r, msg[i] + got[i], r);
          got[i] += (gsize) r;
          if (got[i] == 15)
            {
              done++;
              epoll_ctl (ep, EPOLL_CTL_DEL, fds[i], NULL);
            }
        }
    }
  g_assert_cmpuint (done, ==, N_CLIENTS);
  g_assert_cmpuint (weft_listener_get_n_connections (srv.listener), ==, N_CLIENTS);
  close (ep);
  for (guint i = 0; i < N_CLIENTS; i++)
    close (fds[i]);
  WT_WAIT_UNTIL (weft_listener_get_n_connections (srv.listener) == 0);
  g_assert_cmpuint (weft_listener_get_n_connections (srv.listener), ==, 0);
  wt_server_stop (&srv);
}

/* ---- /listener/shutdown ------------------------------------------------ */

/* A started echo listener on 127.0.0.1 with one live connection, which
 * has echoed once: its fd in *@live, its port in *@port (if not NULL). */
static WeftListener *
echo_listener_with_one (WeftEngine *engine, int *live, guint16 *port)
{
  WeftListener *l = weft_listener_new (engine, accept_echo, NULL, NULL);
  g_assert_true (weft_listener_add_tcp (l, "127.0.0.1", 0, NULL));
  guint16 p = weft_listener_get_port (l, 0);
  g_assert_true (weft_listener_start (l, NULL));
  *live = wt_connect_tcp (p);
  echo_once (*live);
  if (port != NULL)
    *port = p;
  return l;
}

typedef struct {
  atomic_int done;
  atomic_int drained;
} Done;

static void
on_done (WeftListener *l, gboolean drained, gpointer user_data)
{
  Done *d = user_data;
  atomic_store (&d->drained, drained);
  atomic_store (&d->done, 1);
}

/* Graceful stop with a live connection: new connections are refused at
 * once, the live one keeps working; when it closes the done callback says
 * "drained". Then with a connection that stays: the deadline aborts it
 * and done says "not drained". */
static void
test_shutdown (void)
{
  WeftEngine *engine = wt_engine_new (2);
  int live;
  guint16 port;
  WeftListener *l = echo_listener_with_one (engine, &live, &port);

  Done d = { 0 };
  weft_listener_shutdown (l, 10000, on_done, &d, NULL);
  /* The listening socket closes: connecting is refused. */
  int probe = -1;
  WT_WAIT_UNTIL ((probe = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
                 ({
                   struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (port),
                                             .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
                   int r = connect (probe, (struct sockaddr *) &sa, sizeof sa);
                   close (probe);
                   r < 0 && errno == ECONNREFUSED;
                 }));
  echo_once (live);
  g_assert_cmpint (atomic_load (&d.done), ==, 0);
  close (live);
  WT_WAIT_UNTIL (atomic_load (&d.done) == 1);
  g_assert_cmpint (atomic_load (&d.done), ==, 1);
  g_assert_cmpint (atomic_load (&d.drained), ==, 1);
  weft_listener_unref (l);

  /* Deadline. */
  l = echo_listener_with_one (engine, &live, NULL);
  Done d2 = { 0 };
  gint64 t0 = g_get_monotonic_time ();
  weft_listener_shutdown (l, 200, on_done, &d2, NULL);
  WT_WAIT_UNTIL (atomic_load (&d2.done) == 1);
  g_assert_cmpint (atomic_load (&d2.done), ==, 1);
  g_assert_cmpint (atomic_load (&d2.drained), ==, 0);
  g_assert_cmpint (g_get_monotonic_time () - t0, >=, 200 * 1000);
  gboolean reset;
  GByteArray *rest = wt_recv_to_eof (live, TRUE, &reset);
  g_assert_true (reset);
  g_byte_array_unref (rest);
  close (live);
  weft_listener_unref (l);
  weft_engine_unref (engine);
}

/* ---- /listener/shutdown-during-engine-shutdown ------------------------- */

static void
test_shutdown_during_engine_shutdown (void)
{
  g_test_summary ("weft_listener_shutdown() from an application thread while "
                  "weft_engine_shutdown() drains the engine closes the listening socket and "
                  "reports done: the soft stop refused its job, and neither happened");
  WeftEngine *engine = wt_engine_new (2);
  int live;
  WeftListener *l = echo_listener_with_one (engine, &live, NULL);
  close (live);
  WtSoftStop stop;
  wt_soft_stop_begin (&stop, engine, 500);

  Done d = { 0 };
  weft_listener_shutdown (l, 1000, on_done, &d, NULL);
  WT_WAIT_UNTIL (atomic_load (&d.done) == 1);
  g_assert_cmpint (atomic_load (&d.done), ==, 1);
  g_assert_cmpint (atomic_load (&d.drained), ==, 1);
  g_assert_true (wt_soft_stop_end (&stop));
  weft_listener_unref (l);
  weft_engine_unref (engine);
}

/* ---- /listener/shutdown-racing-last-close ---------------------------- */

static atomic_int closing_held;

static void
hold_closing (void)
{
  atomic_store (&closing_held, 1);
  g_usleep (300 * 1000); /* the shutdown runs meanwhile, on the other worker */
}

/* The last live connection closes while a shutdown starts: the close has
 * read "not stopping" and is about to count itself out when the shutdown
 * looks at the count. Whichever way it falls, done comes, says drained,
 * and comes long before the deadline. (When the two were apart, done never
 * came: the shutdown saw one live connection and armed its deadline, the
 * close saw no shutdown and posted no drained job.) */
static void
test_shutdown_racing_last_close (void)
{
  WeftEngine *engine = wt_engine_new (2);
  int live;
  WeftListener *l = echo_listener_with_one (engine, &live, NULL);
  g_assert_cmpuint (weft_listener_get_n_connections (l), ==, 1);

  atomic_store (&closing_held, 0);
  atomic_store (&weft__listener_test_closing_hook, hold_closing);
  close (live);
  WT_WAIT_UNTIL (atomic_load (&closing_held));
  g_assert_true (atomic_load (&closing_held));
  Done d = { 0 };
  gint64 t0 = g_get_monotonic_time ();
  /* A deadline far past the wait below: a done that only the deadline
   * could bring fails the wait, not a race with the clock. */
  weft_listener_shutdown (l, 60000, on_done, &d, NULL);
  WT_WAIT_UNTIL (atomic_load (&d.done) == 1);
  atomic_store (&weft__listener_test_closing_hook, NULL);
  g_assert_cmpint (atomic_load (&d.done), ==, 1);
  g_assert_cmpint (atomic_load (&d.drained), ==, 1);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 30 * G_USEC_PER_SEC);
  g_assert_cmpuint (weft_listener_get_n_connections (l), ==, 0);
  weft_listener_unref (l);
  weft_engine_unref (engine);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/listener/tcp-port-zero", test_tcp_port_zero);
  g_test_add_func ("/listener/unref-refuses-queued", test_unref_refuses_queued);
  g_test_add_func ("/listener/ipv6", test_ipv6);
  g_test_add_func ("/listener/unix", test_unix);
  g_test_add_func ("/listener/address-in-use", test_address_in_use);
  g_test_add_func ("/listener/name-address-missing", test_name_address_missing);
  g_test_add_func ("/listener/reuse-port", test_reuse_port);
  g_test_add_func ("/listener/adopt-fd", test_adopt_fd);
  g_test_add_func ("/listener/systemd", test_systemd);
  g_test_add_func ("/listener/max-connections", test_max_connections);
  g_test_add_func ("/listener/max-connections-raised", test_max_connections_raised);
  g_test_add_func ("/listener/emfile", test_emfile);
  g_test_add_func ("/listener/accept-error", test_accept_error);
  g_test_add_func ("/listener/echo-1000", test_echo_1000);
  g_test_add_func ("/listener/shutdown", test_shutdown);
  g_test_add_func ("/listener/shutdown-during-engine-shutdown",
                   test_shutdown_during_engine_shutdown);
  g_test_add_func ("/listener/shutdown-racing-last-close", test_shutdown_racing_last_close);
  return g_test_run ();
}
