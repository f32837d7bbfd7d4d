/* echo-event.c: the libevent echo peer for bench/echo-compare. One
 * event_base, one thread, 127.0.0.1:PORT, bufferevents moving the input
 * buffer to the output buffer; reading pauses while more than 1 MiB waits
 * to be written (the same backpressure Weft applies).
 *
 * Usage: echo-event PORT
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIGH_WATER (1 << 20)

static void
on_read (struct bufferevent *bev, void *arg)
{
  (void) arg;
  struct evbuffer *out = bufferevent_get_output (bev);
  evbuffer_add_buffer (out, bufferevent_get_input (bev));
  if (evbuffer_get_length (out) > HIGH_WATER)
    bufferevent_disable (bev, EV_READ);
}

static void
on_write (struct bufferevent *bev, void *arg)
{
  (void) arg;
  /* Called when the output drained below its low water mark (0). */
  bufferevent_enable (bev, EV_READ);
}

static void
on_event (struct bufferevent *bev, short what, void *arg)
{
  (void) arg;
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
    bufferevent_free (bev);
}

static void
on_accept (struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *arg)
{
  (void) sa;
  (void) len;
  (void) arg;
  int one = 1;
  setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct bufferevent *bev = bufferevent_socket_new (evconnlistener_get_base (l), fd,
                                                    BEV_OPT_CLOSE_ON_FREE);
  bufferevent_setcb (bev, on_read, on_write, on_event, NULL);
  bufferevent_enable (bev, EV_READ | EV_WRITE);
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
  struct event_base *base = event_base_new ();
  struct sockaddr_in sin;
  memset (&sin, 0, sizeof sin);
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  sin.sin_port = htons ((unsigned short) atoi (argv[1]));
  struct evconnlistener *l = evconnlistener_new_bind (
      base, on_accept, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 4096,
      (struct sockaddr *) &sin, sizeof sin);
  if (l == NULL)
    {
      perror ("echo-event: bind");
      return 1;
    }
  return event_base_dispatch (base);
}
