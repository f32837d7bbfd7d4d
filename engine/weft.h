/* weft.h: the one header applications include.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#define WEFT_INSIDE
#include "weft-types.h"
#include "weft-engine.h"
#include "weft-context.h"
#include "weft-join.h"
#include "weft-coro.h"
#include "weft-gmain.h"
#include "weft-connection.h"
#include "weft-connection-coro.h"
#include "weft-tls.h"
#include "weft-listener.h"
#include "weft-http-server.h"
#undef WEFT_INSIDE
