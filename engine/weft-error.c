/* weft-error.c: the WEFT_ERROR domain.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdatomic.h>

#include "weft-types.h"

/**
 * weft_error_quark:
 *
 * Gets the error domain of Weft's own errors, whose codes are
 * #WeftError values. Use it through the %WEFT_ERROR macro. Safe from any
 * thread.
 *
 * Returns: the quark of the %WEFT_ERROR domain
 */
GQuark
weft_error_quark (void)
{
  /* Not G_DEFINE_QUARK: its plain static is written by whichever threads
   * first call it together (two posts refused at once: a race TSan saw).
   * g_quark_from_static_string() is thread-safe and gives every caller the
   * same quark. */
  static atomic_uint quark;
  GQuark q = atomic_load_explicit (&quark, memory_order_acquire);
  if (G_UNLIKELY (q == 0))
    {
      q = g_quark_from_static_string ("weft-error-quark");
      atomic_store_explicit (&quark, q, memory_order_release);
    }
  return q;
}
