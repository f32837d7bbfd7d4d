/* weft-types.h: export macros, the error domain and the callback types shared
 * by every Weft module.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(WEFT_INSIDE) && !defined(WEFT_COMPILATION)
#error "Only <weft.h> can be included directly."
#endif

#include <glib.h>
#include <glib-object.h>

G_BEGIN_DECLS

#define WEFT_AVAILABLE_IN_ALL __attribute__ ((visibility ("default"))) extern

/**
 * WEFT_ERROR:
 *
 * Error domain for Weft. Errors in this domain are from the #WeftError
 * enumeration.
 */
#define WEFT_ERROR (weft_error_quark ())

/**
 * WeftError:
 * @WEFT_ERROR_FAILED: a system call failed; the message names it and errno
 * @WEFT_ERROR_CLOSED: the engine or context no longer takes work (stopped,
 *   shutting down or destroyed)
 * @WEFT_ERROR_QUEUE_FULL: the context's queue is at its bound
 *   (see weft_context_set_max_queued())
 * @WEFT_ERROR_INVALID: an argument is valid C but not acceptable at run
 *   time (an fd the kernel cannot poll, a signal that cannot be caught)
 * @WEFT_ERROR_EXISTS: the fd or signal is already watched
 *
 * Error codes of the %WEFT_ERROR domain.
 */
typedef enum {
  WEFT_ERROR_FAILED,
  WEFT_ERROR_CLOSED,
  WEFT_ERROR_QUEUE_FULL,
  WEFT_ERROR_INVALID,
  WEFT_ERROR_EXISTS,
} WeftError;

WEFT_AVAILABLE_IN_ALL
GQuark weft_error_quark (void);

typedef struct _WeftEngine WeftEngine;
typedef struct _WeftContext WeftContext;
typedef struct _WeftJoin WeftJoin;

/**
 * WeftJobFunc:
 * @user_data: the data given when the job was posted
 *
 * A job posted to an engine or a context.
 */
typedef void (*WeftJobFunc) (gpointer user_data);

/**
 * WeftJobSlot: (skip)
 *
 * Room for one queued job inside a structure of your own, for posting
 * without an allocation: weft_context_post_slot() and
 * weft_engine_post_slot(). Zero-fill it before its first post (g_new0(),
 * or `WeftJobSlot slot = { 0 };`).
 *
 * A slot is busy from its post until the job's function starts, or, for a
 * job that is dropped instead, until its destroy notify is called. While
 * busy it must stay valid and must not be posted again (the post fails
 * with a critical warning); once the function or notify has started, the
 * slot is yours again: it may be freed, or posted again, also from that
 * function. One job per slot at a time, so a slot suits a job that is
 * posted over and over with at most one copy queued, such as "there is
 * something to flush" or "wake the reader".
 */
typedef struct {
  /*< private >*/
  /* The layout of the library's job node (a pointer, two 32-bit words,
   * three pointers), so that the sizes agree on 32-bit CPUs too. */
  gpointer priv_p0_;
  guint32 priv_u_[2];
  gpointer priv_p_[3];
} WeftJobSlot;

/**
 * WeftFdFunc:
 * @fd: the watched file descriptor
 * @condition: what the kernel reported (%G_IO_IN, %G_IO_OUT, %G_IO_PRI,
 *   %G_IO_ERR, %G_IO_HUP)
 * @user_data: the data given to weft_context_add_fd()
 *
 * Called on the watching context when @fd is ready.
 *
 * Returns: %G_SOURCE_CONTINUE to be called again at the next readiness (the
 *   fd is re-armed only after this returns), %G_SOURCE_REMOVE to stop
 *   watching.
 */
typedef gboolean (*WeftFdFunc) (gint fd, GIOCondition condition, gpointer user_data);

/**
 * WeftSignalFunc:
 * @signum: the signal that arrived
 * @user_data: the data given to weft_context_add_signal()
 *
 * Called on the subscribing context after @signum arrived at least once
 * since the previous call.
 *
 * Returns: %G_SOURCE_CONTINUE to stay subscribed, %G_SOURCE_REMOVE to stop.
 */
typedef gboolean (*WeftSignalFunc) (gint signum, gpointer user_data);

G_END_DECLS
