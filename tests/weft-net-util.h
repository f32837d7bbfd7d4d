/* weft-net-util.h: blocking test clients on 127.0.0.1, and a server
 * fixture: an engine with a listener whose per-connection setup each test
 * chooses.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "weft-test-util.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

/* ---- blocking clients -------------------------------------------------- */

static inline void
wt_set_timeouts (int fd, guint ms)
{
  struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
  setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* A blocking client socket connected to 127.0.0.1:@port, with 10 s
 * timeouts so a broken server fails the test instead of hanging it, and a
 * receive buffer of @rcvbuf bytes set before connecting (0: the system's,
 * autotuned). -1 if the connection was refused (no listener any more);
 * any other failure fails the test. */
static inline int
wt_try_connect_tcp (guint16 port, int rcvbuf)
{
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  g_assert_cmpint (fd, >=, 0);
  if (rcvbuf > 0)
    g_assert_cmpint (setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf), ==, 0);
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (port),
                            .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
  if (connect (fd, (struct sockaddr *) &sa, sizeof sa) != 0)
    {
      g_assert_cmpint (errno, ==, ECONNREFUSED);
      close (fd);
      return -1;
    }
  wt_set_timeouts (fd, WT_DEADLINE_US / 1000);
  return fd;
}

/* A listening TCP socket on 127.0.0.1 with @backlog, on a free port
 * (*@port), accepted from by the test itself (or never). */
static inline int
wt_listening_socket (int backlog, guint16 *port)
{
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  g_assert_cmpint (fd, >=, 0);
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
  socklen_t len = sizeof sa;
  g_assert_cmpint (bind (fd, (struct sockaddr *) &sa, sizeof sa), ==, 0);
  g_assert_cmpint (listen (fd, backlog), ==, 0);
  g_assert_cmpint (getsockname (fd, (struct sockaddr *) &sa, &len), ==, 0);
  *port = ntohs (sa.sin_port);
  return fd;
}

/* wt_try_connect_tcp() with the system's buffers, which must connect. */
static inline int
wt_connect_tcp (guint16 port)
{
  int fd = wt_try_connect_tcp (port, 0);
  g_assert_cmpint (fd, >=, 0);
  return fd;
}

static inline void
wt_send_all (int fd, const void *data, gsize len)
{
  const char *p = data;
  while (len > 0)
    {
      ssize_t n = send (fd, p, len, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR)
        continue;
      g_assert_cmpint (n, >, 0);
      p += n;
      len -= (gsize) n;
    }
}

static inline void
wt_send_str (int fd, const char *s)
{
  wt_send_all (fd, s, strlen (s));
}

/* Reads exactly @len bytes (asserts they come). */
static inline void
wt_recv_exactly (int fd, void *buf, gsize len)
{
  char *p = buf;
  while (len > 0)
    {
      ssize_t n = recv (fd, p, len, 0);
      if (n < 0 && errno == EINTR)
        continue;
      g_assert_cmpint (n, >, 0);
      p += n;
      len -= (gsize) n;
    }
}

/* Reads until end of file; returns what came. Asserts no error unless
 * @allow_reset, in which case *reset tells whether the stream ended with
 * ECONNRESET. */
/* Reads and drops at least @len bytes (fails on EOF, an error or the
 * receive timeout). */
static inline void
wt_recv_discard (int fd, gsize len)
{
  char buf[16384];
  gsize got = 0;
  while (got < len)
    {
      ssize_t n = recv (fd, buf, sizeof buf, 0);
      g_assert_cmpint (n, >, 0);
      got += (gsize) n;
    }
}

static inline GByteArray *
wt_recv_to_eof (int fd, gboolean allow_reset, gboolean *reset)
{
  GByteArray *all = g_byte_array_new ();
  char buf[65536];
  if (reset != NULL)
    *reset = FALSE;
  for (;;)
    {
      ssize_t n = recv (fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && allow_reset && errno == ECONNRESET)
        {
          if (reset != NULL)
            *reset = TRUE;
          break;
        }
      g_assert_cmpint (n, >=, 0);
      if (n == 0)
        break;
      g_byte_array_append (all, (guint8 *) buf, (guint) n);
    }
  return all;
}

/* Raises the soft RLIMIT_NOFILE to at least @want (within the hard limit);
 * returns the soft limit now in force. */
static inline rlim_t
wt_raise_nofile (rlim_t want)
{
  struct rlimit rl;
  g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &rl), ==, 0);
  if (rl.rlim_cur < want)
    {
      rl.rlim_cur = MIN (want, rl.rlim_max);
      setrlimit (RLIMIT_NOFILE, &rl);
      getrlimit (RLIMIT_NOFILE, &rl);
    }
  return rl.rlim_cur;
}

/* ---- server fixture ---------------------------------------------------- */

typedef void (*WtSetupFunc) (WeftConnection *conn, gpointer test_data);

typedef struct {
  WeftEngine *engine;
  WeftListener *listener;
  guint16 port;
  WtSetupFunc setup;
  gpointer test_data;
  atomic_int accepted;
  atomic_int closed;        /* CLOSED events seen by wt_server's event func */
} WtServer;

static inline void
wt_server_accept (WeftListener *listener, WeftConnection *conn, gpointer user_data)
{
  WtServer *s = user_data;
  atomic_fetch_add (&s->accepted, 1);
  s->setup (conn, s->test_data);
}

/* A listener on 127.0.0.1 (port chosen by the system) that calls @setup
 * on each accepted connection's context. */
static inline void
wt_server_start (WtServer *s, guint n_workers, WtSetupFunc setup, gpointer test_data)
{
  GError *error = NULL;
  memset (s, 0, sizeof *s);
  s->engine = wt_engine_new (n_workers);
  s->setup = setup;
  s->test_data = test_data;
  s->listener = weft_listener_new (s->engine, wt_server_accept, s, NULL);
  g_assert_true (weft_listener_add_tcp (s->listener, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  s->port = weft_listener_get_port (s->listener, 0);
  g_assert_cmpuint (s->port, !=, 0);
  g_assert_true (weft_listener_start (s->listener, &error));
  g_assert_no_error (error);
}

static inline void
wt_server_stop (WtServer *s)
{
  weft_listener_unref (s->listener);
  weft_engine_unref (s->engine);
}

/* ---- an echo connection ------------------------------------------------ */

static inline gsize
wt_echo_read (WeftConnection *conn, const guint8 *data, gsize len, gpointer user_data)
{
  weft_connection_write (conn, data, len);
  return len;
}

static inline void
wt_echo_setup (WeftConnection *conn, gpointer test_data)
{
  weft_connection_start_reading (conn, wt_echo_read, NULL, NULL);
}
