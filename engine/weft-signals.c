/* weft-signals.c: signals delivered as context callbacks through one
 * signalfd per engine (the Nunc Stans way: a signal is just another job).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <errno.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "weft-context-private.h"

/* The engine that reads each signal, process-wide. A signal sent to the
 * process is pending once and the first signalfd read takes it: two
 * engines reading one signal would each get a share of its arrivals. */
static WeftMutex owners_lock = PTHREAD_MUTEX_INITIALIZER;
static WeftEngine *owners[65]; /* HOLDS: owners_lock */

/* HOLDS: self->signal_lock. The signals some source of @self watches. */
static void
watched_mask (WeftEngine *self, sigset_t *mask)
{
  sigemptyset (mask);
  for (int s = 1; s < (int) G_N_ELEMENTS (self->signal_subs); s++)
    if (self->signal_subs[s] != NULL && self->signal_subs[s]->len > 0)
      sigaddset (mask, s);
}

void
weft__signals_init (WeftEngine *self)
{
  weft__mutex_init (&self->signal_lock);
  self->signal_fd = -1;
}

void
weft__signals_fini (WeftEngine *self)
{
  for (guint i = 0; i < G_N_ELEMENTS (self->signal_subs); i++)
    if (self->signal_subs[i] != NULL)
      {
        g_assert (self->signal_subs[i]->len == 0);
        g_ptr_array_unref (self->signal_subs[i]);
      }
  if (self->signal_fd >= 0)
    close (self->signal_fd);
  weft__mutex_clear (&self->signal_lock);
}

gboolean
weft__signals_subscribe (WeftEngine *self, WeftSignalSource *src, GError **error)
{
  sigset_t mask;
  gboolean ok = TRUE;

  weft__mutex_lock (&self->signal_lock);
  GPtrArray *subs = self->signal_subs[src->signum];
  for (guint i = 0; subs != NULL && i < subs->len; i++)
    if (((WeftSignalSource *) subs->pdata[i])->base.ctx == src->base.ctx)
      {
        weft__mutex_unlock (&self->signal_lock);
        g_set_error (error, WEFT_ERROR, WEFT_ERROR_EXISTS,
                     "signal %d is already watched by this context", src->signum);
        return FALSE;
      }
  weft__mutex_lock (&owners_lock);
  if (owners[src->signum] != NULL && owners[src->signum] != self)
    {
      weft__mutex_unlock (&owners_lock);
      weft__mutex_unlock (&self->signal_lock);
      g_set_error (error, WEFT_ERROR, WEFT_ERROR_EXISTS,
                   "signal %d is already watched by another engine", src->signum);
      return FALSE;
    }
  watched_mask (self, &mask);
  sigaddset (&mask, src->signum);

  /* The calling thread stops taking the signal itself; workers block every
   * asynchronous signal from birth. */
  pthread_sigmask (SIG_BLOCK, &mask, NULL);

  int fd = signalfd (self->signal_fd, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0)
    {
      int e = errno;
      g_set_error (error, WEFT_ERROR, WEFT_ERROR_FAILED, "signalfd: %s", g_strerror (e));
      ok = FALSE;
    }
  else if (self->signal_fd < 0)
    {
      int r = weft__poll_add (self->pfd, fd, EPOLLIN | EPOLLET, WEFT_KEY_SIGNAL, FALSE);
      if (r < 0)
        {
          g_set_error (error, WEFT_ERROR, WEFT_ERROR_FAILED, "epoll_ctl (signalfd): %s",
                       g_strerror (-r));
          close (fd);
          ok = FALSE;
        }
      else
        self->signal_fd = fd;
    }
  if (ok)
    {
      if (self->signal_subs[src->signum] == NULL)
        self->signal_subs[src->signum] = g_ptr_array_new ();
      g_ptr_array_add (self->signal_subs[src->signum], src);
      owners[src->signum] = self;
    }
  weft__mutex_unlock (&owners_lock);
  weft__mutex_unlock (&self->signal_lock);
  return ok;
}

void
weft__signals_unsubscribe (WeftEngine *self, WeftSignalSource *src)
{
  /* Once this returns, weft__signals_read() cannot raise @src again: it
   * raises under the same lock. The signal stays blocked: unblocking could
   * kill the process with the default action of a signal still pending. */
  weft__mutex_lock (&self->signal_lock);
  GPtrArray *subs = self->signal_subs[src->signum];
  g_ptr_array_remove_fast (subs, src);
  if (subs->len == 0)
    {
      /* The last one: stop reading the signal, so that arrivals stay
       * pending for whoever watches it next (another engine, or the
       * application's own sigwait()) instead of being read and dropped. */
      sigset_t mask;
      watched_mask (self, &mask);
      (void) signalfd (self->signal_fd, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
      weft__mutex_lock (&owners_lock);
      owners[src->signum] = NULL;
      weft__mutex_unlock (&owners_lock);
    }
  weft__mutex_unlock (&self->signal_lock);
}

void
weft__signals_read (WeftEngine *self, WeftContext **local)
{
  struct signalfd_siginfo info[16];

  for (;;)
    {
      weft__mutex_lock (&self->signal_lock);
      ssize_t r = self->signal_fd >= 0 ? read (self->signal_fd, info, sizeof info) : -1;
      int e = errno;
      if (r > 0)
        for (size_t i = 0; i < (size_t) r / sizeof info[0]; i++)
          {
            guint s = info[i].ssi_signo;
            GPtrArray *subs = s < G_N_ELEMENTS (self->signal_subs) ? self->signal_subs[s] : NULL;
            for (guint k = 0; subs != NULL && k < subs->len; k++)
              weft__signal_source_raise (subs->pdata[k], local);
          }
      weft__mutex_unlock (&self->signal_lock);
      if (r < 0 && e == EINTR)
        continue;
      if (r <= 0)
        break;
    }
}
