/* weft-sys.h: the hot path's socket and poll system calls, without glibc's
 * cancellation wrappers.
 *
 * read(), send(), epoll_wait() and the like are pthread cancellation
 * points: in a process with more than one thread, glibc brackets each
 * call with __pthread_enable_asynccancel() / _disable_, two atomic
 * compare-and-swaps on the thread's cancel word. Weft never cancels a
 * thread (nor does GLib), and a server makes two or three such calls per
 * request, so these go straight to the kernel through syscall(3), which is
 * no cancellation point. Same arguments, results and errno as the libc
 * calls they stand for.
 *
 * Under ASan and TSan the libc calls stay: their interceptors check the
 * buffers and model the happens-before an fd carries.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "weft-sanitizers.h"

#if defined(__linux__) && !defined(WEFT_ASAN) && !defined(WEFT_TSAN)

static inline ssize_t
weft__sys_read (int fd, void *buf, size_t len)
{
  return syscall (SYS_read, fd, buf, len);
}

static inline ssize_t
weft__sys_write (int fd, const void *buf, size_t len)
{
  return syscall (SYS_write, fd, buf, len);
}

static inline ssize_t
weft__sys_send (int fd, const void *buf, size_t len, int flags)
{
  return syscall (SYS_sendto, fd, buf, len, flags, NULL, 0);
}

static inline ssize_t
weft__sys_sendmsg (int fd, const struct msghdr *msg, int flags)
{
  return syscall (SYS_sendmsg, fd, msg, flags);
}

static inline ssize_t
weft__sys_recv (int fd, void *buf, size_t len, int flags)
{
  return syscall (SYS_recvfrom, fd, buf, len, flags, NULL, NULL);
}

/* aarch64 has no epoll_wait system call; epoll_pwait without a mask is
 * the same call everywhere. The last argument is the kernel's sigset
 * size, unused with a NULL mask. */
static inline int
weft__sys_epoll_wait (int epfd, struct epoll_event *ev, int max, int timeout_ms)
{
  return (int) syscall (SYS_epoll_pwait, epfd, ev, max, timeout_ms, NULL, 8);
}

#else

#define weft__sys_read read
#define weft__sys_write write
#define weft__sys_send send
#define weft__sys_sendmsg sendmsg
#define weft__sys_recv recv
#define weft__sys_epoll_wait epoll_wait

#endif
