/* echo-client.c: the load generator of bench/echo-compare. One thread,
 * epoll, non-blocking sockets to 127.0.0.1:PORT; it prints one line of
 * "key=value" figures that the script turns into RESULT rows.
 *
 *   echo-client rr PORT CONNS SIZE SECONDS
 *       each connection sends SIZE bytes, waits for all of them to come
 *       back, and repeats: round trips per second
 *   echo-client stream PORT CONNS BLOCK SECONDS [tls]
 *       each connection keeps up to 1 MiB in flight in BLOCK-byte writes
 *       and reads everything back: echoed bytes per second
 *   echo-client idle PORT CONNS
 *       opens CONNS connections, one 16-byte round trip on each, prints
 *       "held=CONNS", then holds them until standard input closes
 *   echo-client tls-hs PORT CONNS SECONDS REQUEST
 *       CONNS connections at a time, each: connect, full TLS handshake
 *       (no resumption), send REQUEST, wait for the first response byte,
 *       close: handshakes per second
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IN_FLIGHT (1 << 20)

typedef struct {
  int fd;
  SSL *ssl;
  size_t got;     /* rr: bytes of the current echo received */
  uint64_t sent;  /* stream: bytes written */
  uint64_t recvd; /* stream: bytes read */
  int connecting; /* tls-hs: non-blocking connect in progress */
  int handshaken;
  size_t req_sent;
} Conn;

static int port;
static SSL_CTX *ssl_ctx;

static double
now (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void
die (const char *what)
{
  perror (what);
  exit (1);
}

static int
open_conn (int nonblock_connect)
{
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock_connect ? SOCK_NONBLOCK : 0),
                   0);
  if (fd < 0)
    die ("socket");
  int one = 1;
  setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port),
                            .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
  if (connect (fd, (struct sockaddr *) &sa, sizeof sa) < 0 && errno != EINPROGRESS)
    die ("connect");
  if (!nonblock_connect)
    fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

static void
write_all_nb (int fd, const char *buf, size_t len)
{
  while (len > 0)
    {
      ssize_t n = write (fd, buf, len);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        die ("write (small message did not fit the socket buffer)");
      buf += n;
      len -= (size_t) n;
    }
}

static int
mode_rr (int nconns, size_t size, double seconds)
{
  int ep = epoll_create1 (EPOLL_CLOEXEC);
  Conn *cs = calloc ((size_t) nconns, sizeof *cs);
  char *msg = malloc (size);
  char *buf = malloc (65536);
  memset (msg, 'e', size);
  for (int i = 0; i < nconns; i++)
    {
      cs[i].fd = open_conn (0);
      struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &cs[i] };
      epoll_ctl (ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
    }
  uint64_t rts = 0;
  for (int i = 0; i < nconns; i++)
    write_all_nb (cs[i].fd, msg, size);
  double start = now (), end = start + seconds;
  struct epoll_event evs[256];
  while (now () < end)
    {
      int n = epoll_wait (ep, evs, 256, 100);
      for (int k = 0; k < n; k++)
        {
          Conn *c = evs[k].data.ptr;
          for (;;)
            {
              ssize_t r = read (c->fd, buf, 65536);
              if (r < 0 && errno == EAGAIN)
                break;
              if (r <= 0)
                die ("read (server closed)");
              c->got += (size_t) r;
              while (c->got >= size)
                {
                  c->got -= size;
                  rts++;
                  write_all_nb (c->fd, msg, size);
                }
            }
        }
    }
  double elapsed = now () - start;
  printf ("mode=rr conns=%d size=%zu seconds=%.3f roundtrips=%llu rate=%.1f\n", nconns, size,
          elapsed, (unsigned long long) rts, (double) rts / elapsed);
  return 0;
}

static ssize_t
c_read (Conn *c, char *buf, size_t len)
{
  if (c->ssl == NULL)
    return read (c->fd, buf, len);
  size_t n = 0;
  if (SSL_read_ex (c->ssl, buf, len, &n) == 1)
    return (ssize_t) n;
  int e = SSL_get_error (c->ssl, 0);
  errno = (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) ? EAGAIN : EIO;
  return -1;
}

static ssize_t
c_write (Conn *c, const char *buf, size_t len)
{
  if (c->ssl == NULL)
    return write (c->fd, buf, len);
  size_t n = 0;
  if (SSL_write_ex (c->ssl, buf, len, &n) == 1)
    return (ssize_t) n;
  int e = SSL_get_error (c->ssl, 0);
  errno = (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) ? EAGAIN : EIO;
  return -1;
}

static void
blocking_handshake (Conn *c)
{
  c->ssl = SSL_new (ssl_ctx);
  SSL_set_fd (c->ssl, c->fd);
  SSL_set_mode (c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  for (;;)
    {
      int r = SSL_connect (c->ssl);
      if (r == 1)
        return;
      int e = SSL_get_error (c->ssl, r);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
        {
          ERR_print_errors_fp (stderr);
          exit (1);
        }
      usleep (1000);
    }
}

static int
mode_stream (int nconns, size_t block, double seconds, int tls)
{
  int ep = epoll_create1 (EPOLL_CLOEXEC);
  Conn *cs = calloc ((size_t) nconns, sizeof *cs);
  char *msg = malloc (block);
  char *buf = malloc (1 << 17);
  memset (msg, 's', block);
  for (int i = 0; i < nconns; i++)
    {
      cs[i].fd = open_conn (0);
      if (tls)
        blocking_handshake (&cs[i]);
      struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = &cs[i] };
      epoll_ctl (ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
    }
  double start = now (), end = start + seconds;
  uint64_t total = 0;
  struct epoll_event evs[256];
  while (now () < end)
    {
      int n = epoll_wait (ep, evs, 256, 100);
      for (int k = 0; k < n; k++)
        {
          Conn *c = evs[k].data.ptr;
          for (;;)
            {
              ssize_t r = c_read (c, buf, 1 << 17);
              if (r < 0 && errno == EAGAIN)
                break;
              if (r <= 0)
                die ("read (server closed)");
              c->recvd += (uint64_t) r;
              total += (uint64_t) r;
            }
          while (c->sent - c->recvd < IN_FLIGHT)
            {
              ssize_t w = c_write (c, msg, block);
              if (w < 0 && errno == EAGAIN)
                break;
              if (w <= 0)
                die ("write");
              c->sent += (uint64_t) w;
            }
          struct epoll_event ev = { .events = EPOLLIN | (c->sent - c->recvd < IN_FLIGHT ? EPOLLOUT : 0),
                                    .data.ptr = c };
          epoll_ctl (ep, EPOLL_CTL_MOD, c->fd, &ev);
        }
    }
  double elapsed = now () - start;
  printf ("mode=stream conns=%d block=%zu tls=%d seconds=%.3f bytes=%llu rate=%.1f\n", nconns,
          block, tls, elapsed, (unsigned long long) total, (double) total / elapsed);
  return 0;
}

static int
mode_idle (int nconns)
{
  char buf[16];
  int *fds = calloc ((size_t) nconns, sizeof *fds);
  for (int i = 0; i < nconns; i++)
    {
      fds[i] = open_conn (0);
      fcntl (fds[i], F_SETFL, fcntl (fds[i], F_GETFL) & ~O_NONBLOCK);
      write_all_nb (fds[i], "0123456789abcdef", 16);
      size_t got = 0;
      while (got < 16)
        {
          ssize_t r = read (fds[i], buf, 16 - got);
          if (r <= 0)
            die ("idle: read");
          got += (size_t) r;
        }
    }
  printf ("held=%d\n", nconns);
  fflush (stdout);
  while (read (0, buf, sizeof buf) > 0)
    ;
  for (int i = 0; i < nconns; i++)
    close (fds[i]);
  return 0;
}

/* tls-hs: a state machine per slot; a finished slot starts over. */
static void
hs_start (Conn *c, int ep)
{
  memset (c, 0, sizeof *c);
  c->fd = open_conn (1);
  c->connecting = 1;
  struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = c };
  epoll_ctl (ep, EPOLL_CTL_ADD, c->fd, &ev);
}

static void
hs_rearm (Conn *c, int ep, int want_write)
{
  struct epoll_event ev = { .events = want_write ? EPOLLOUT : EPOLLIN, .data.ptr = c };
  epoll_ctl (ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static int
mode_tls_hs (int nconns, double seconds, const char *request)
{
  int ep = epoll_create1 (EPOLL_CLOEXEC);
  Conn *cs = calloc ((size_t) nconns, sizeof *cs);
  for (int i = 0; i < nconns; i++)
    hs_start (&cs[i], ep);
  uint64_t done = 0, failed = 0;
  size_t reqlen = strlen (request);
  double start = now (), end = start + seconds;
  struct epoll_event evs[256];
  char buf[4096];
  while (now () < end)
    {
      int n = epoll_wait (ep, evs, 256, 100);
      for (int k = 0; k < n; k++)
        {
          Conn *c = evs[k].data.ptr;
          int finished = 0, ok = 0;
          if (c->connecting)
            {
              int err = 0;
              socklen_t l = sizeof err;
              getsockopt (c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
              if (err != 0)
                finished = 1;
              else
                {
                  c->connecting = 0;
                  c->ssl = SSL_new (ssl_ctx);
                  SSL_set_fd (c->ssl, c->fd);
                  SSL_set_connect_state (c->ssl);
                }
            }
          if (!finished && !c->handshaken)
            {
              ERR_clear_error ();
              int r = SSL_do_handshake (c->ssl);
              if (r == 1)
                c->handshaken = 1;
              else
                {
                  int e = SSL_get_error (c->ssl, r);
                  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
                    hs_rearm (c, ep, e == SSL_ERROR_WANT_WRITE);
                  else
                    finished = 1;
                }
            }
          if (!finished && c->handshaken)
            {
              while (c->req_sent < reqlen)
                {
                  size_t w = 0;
                  if (SSL_write_ex (c->ssl, request + c->req_sent, reqlen - c->req_sent, &w) != 1)
                    break;
                  c->req_sent += w;
                }
              size_t r = 0;
              if (c->req_sent == reqlen && SSL_read_ex (c->ssl, buf, sizeof buf, &r) == 1)
                finished = ok = 1;
              else
                {
                  int e = SSL_get_error (c->ssl, 0);
                  if (e == SSL_ERROR_WANT_WRITE)
                    hs_rearm (c, ep, 1);
                  else if (e == SSL_ERROR_WANT_READ || c->req_sent < reqlen)
                    hs_rearm (c, ep, 0);
                  else
                    finished = 1;
                }
            }
          if (finished)
            {
              if (ok)
                done++;
              else
                failed++;
              if (c->ssl != NULL)
                SSL_free (c->ssl);
              close (c->fd);
              hs_start (c, ep);
            }
        }
    }
  double elapsed = now () - start;
  printf ("mode=tls-hs conns=%d seconds=%.3f handshakes=%llu failed=%llu rate=%.1f\n", nconns,
          elapsed, (unsigned long long) done, (unsigned long long) failed,
          (double) done / elapsed);
  return failed > done / 100 ? 1 : 0;
}

int
main (int argc, char **argv)
{
  if (argc < 4)
    {
      fprintf (stderr, "usage: see the comment at the top of echo-client.c\n");
      return 2;
    }
  const char *mode = argv[1];
  port = atoi (argv[2]);
  int conns = atoi (argv[3]);
  ssl_ctx = SSL_CTX_new (TLS_client_method ());
  SSL_CTX_set_verify (ssl_ctx, SSL_VERIFY_NONE, NULL);
  SSL_CTX_set_session_cache_mode (ssl_ctx, SSL_SESS_CACHE_OFF);
  if (strcmp (mode, "rr") == 0 && argc == 6)
    return mode_rr (conns, (size_t) atol (argv[4]), atof (argv[5]));
  if (strcmp (mode, "stream") == 0 && argc >= 6)
    return mode_stream (conns, (size_t) atol (argv[4]), atof (argv[5]),
                        argc > 6 && strcmp (argv[6], "tls") == 0);
  if (strcmp (mode, "idle") == 0)
    return mode_idle (conns);
  if (strcmp (mode, "tls-hs") == 0 && argc == 6)
    return mode_tls_hs (conns, atof (argv[4]), argv[5]);
  fprintf (stderr, "echo-client: bad arguments\n");
  return 2;
}
