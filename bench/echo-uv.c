/* echo-uv.c: the libuv echo peer for bench/echo-compare. One loop, one
 * thread, 127.0.0.1:PORT. Reads into one static 64 KiB buffer (so idle
 * connections hold no read buffer, like Weft), answers with uv_try_write
 * and queues only what the socket did not take, pausing reads meanwhile
 * (the same backpressure Weft applies).
 *
 * Usage: echo-uv PORT
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <uv.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uv_loop_t *loop;
static char scratch[65536];

typedef struct {
  uv_write_t req;
  uv_buf_t buf;
} Pending;

static void on_read (uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void
on_close (uv_handle_t *h)
{
  free (h);
}

static void
on_alloc (uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
  (void) h;
  (void) suggested;
  *buf = uv_buf_init (scratch, sizeof scratch);
}

static void
on_written (uv_write_t *req, int status)
{
  Pending *p = (Pending *) req;
  uv_stream_t *s = req->handle;
  free (p->buf.base);
  free (p);
  if (status < 0)
    {
      if (!uv_is_closing ((uv_handle_t *) s))
        uv_close ((uv_handle_t *) s, on_close);
      return;
    }
  if (uv_stream_get_write_queue_size (s) == 0)
    uv_read_start (s, on_alloc, on_read);
}

static void
on_read (uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
  if (n < 0)
    {
      if (!uv_is_closing ((uv_handle_t *) s))
        uv_close ((uv_handle_t *) s, on_close);
      return;
    }
  if (n == 0)
    return;
  uv_buf_t out = uv_buf_init (buf->base, (unsigned) n);
  int w = uv_try_write (s, &out, 1);
  if (w == n)
    return;
  if (w < 0 && w != UV_EAGAIN)
    {
      uv_close ((uv_handle_t *) s, on_close);
      return;
    }
  size_t done = w > 0 ? (size_t) w : 0;
  Pending *p = malloc (sizeof *p);
  p->buf = uv_buf_init (malloc ((size_t) n - done), (unsigned) ((size_t) n - done));
  memcpy (p->buf.base, buf->base + done, (size_t) n - done);
  uv_read_stop (s);
  uv_write (&p->req, s, &p->buf, 1, on_written);
}

static void
on_connection (uv_stream_t *server, int status)
{
  if (status < 0)
    return;
  uv_tcp_t *c = malloc (sizeof *c);
  uv_tcp_init (loop, c);
  if (uv_accept (server, (uv_stream_t *) c) != 0)
    {
      uv_close ((uv_handle_t *) c, on_close);
      return;
    }
  uv_tcp_nodelay (c, 1);
  uv_read_start ((uv_stream_t *) c, on_alloc, on_read);
}

int
main (int argc, char **argv)
{
  if (argc != 2)
    {
      fprintf (stderr, "usage: %s PORT\n", argv[0]);
      return 2;
    }
  signal (SIGPIPE, SIG_IGN); /* a peer that resets must not kill the server */
  loop = uv_default_loop ();
  uv_tcp_t server;
  struct sockaddr_in addr;
  uv_tcp_init (loop, &server);
  uv_ip4_addr ("127.0.0.1", atoi (argv[1]), &addr);
  int r = uv_tcp_bind (&server, (const struct sockaddr *) &addr, 0);
  if (r == 0)
    r = uv_listen ((uv_stream_t *) &server, 4096, on_connection);
  if (r != 0)
    {
      fprintf (stderr, "echo-uv: %s\n", uv_strerror (r));
      return 1;
    }
  return uv_run (loop, UV_RUN_DEFAULT);
}
