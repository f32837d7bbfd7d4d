/* weft-error.c: the WEFT_ERROR domain.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
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
G_DEFINE_QUARK (weft-error-quark, weft_error)
