/* weft-poll-epoll.c: the Linux poller behind weft-engine-private.h's
 * weft__poll_* (epoll, eventfd). Another kernel gets a file of its own;
 * the engine has no #ifdef for it.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "weft-engine-private.h"
#include "weft-sys.h"

int
weft__poll_create (void)
{
  int fd = epoll_create1 (EPOLL_CLOEXEC);
  return fd < 0 ? -errno : fd;
}

static int
ctl (int pfd, int op, int fd, guint32 events, guint64 key, gboolean oneshot)
{
  struct epoll_event ev = { .events = events | (oneshot ? EPOLLONESHOT : 0), .data.u64 = key };
  return epoll_ctl (pfd, op, fd, &ev) < 0 ? -errno : 0;
}

int
weft__poll_add (int pfd, int fd, guint32 events, guint64 key, gboolean oneshot)
{
  return ctl (pfd, EPOLL_CTL_ADD, fd, events, key, oneshot);
}

int
weft__poll_modify (int pfd, int fd, guint32 events, guint64 key, gboolean oneshot)
{
  return ctl (pfd, EPOLL_CTL_MOD, fd, events, key, oneshot);
}

int
weft__poll_remove (int pfd, int fd)
{
  return epoll_ctl (pfd, EPOLL_CTL_DEL, fd, NULL) < 0 ? -errno : 0;
}

int
weft__poll_wait (int pfd, WeftPollEvent *events, int max, int timeout_ms)
{
  struct epoll_event ev[WEFT_POLL_BATCH];
  if (max > WEFT_POLL_BATCH)
    max = WEFT_POLL_BATCH;
  int n;
  do
    n = weft__sys_epoll_wait (pfd, ev, max, timeout_ms);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return -errno;
  for (int i = 0; i < n; i++)
    {
      events[i].key = ev[i].data.u64;
      events[i].events = ev[i].events;
    }
  return n;
}

guint32
weft__poll_events_from_condition (GIOCondition cond)
{
  guint32 e = 0;
  if (cond & G_IO_IN)
    e |= EPOLLIN | EPOLLRDHUP;
  if (cond & G_IO_OUT)
    e |= EPOLLOUT;
  if (cond & G_IO_PRI)
    e |= EPOLLPRI;
  if (cond & WEFT__IO_RDHUP)
    e |= EPOLLRDHUP;
  return e;
}

/* Linux gives the five readiness bits GLib's values (both follow poll(2)),
 * so a readiness converts with a mask instead of a test per bit: once per
 * fd callback. */
G_STATIC_ASSERT ((guint) EPOLLIN == G_IO_IN && (guint) EPOLLPRI == G_IO_PRI &&
                 (guint) EPOLLOUT == G_IO_OUT && (guint) EPOLLERR == G_IO_ERR &&
                 (guint) EPOLLHUP == G_IO_HUP);

GIOCondition
weft__poll_condition_from_events (guint32 events)
{
  GIOCondition c = events & (EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLERR | EPOLLHUP);
  if (events & EPOLLRDHUP)
    c |= G_IO_IN | WEFT__IO_RDHUP; /* internal; edge-triggered owners need to know */
  return c;
}

int
weft__eventfd_new (void)
{
  int fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  return fd < 0 ? -errno : fd;
}

void
weft__eventfd_signal (int fd)
{
  uint64_t one = 1;
  ssize_t r;
  do
    r = weft__sys_write (fd, &one, sizeof one);
  while (r < 0 && errno == EINTR);
  /* EAGAIN means the counter is saturated: a wake is pending anyway. */
}
