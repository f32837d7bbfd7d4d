/* parser-portable.h: the request parser built a second time with its
 * portable scan (WEFT_HTTP_PARSER_NO_SIMD) under other names, so that
 * fuzz-http-parser checks the two scans give the same answers.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "weft-http-parser.h"

gssize weft_http_parse_request_portable (const char *buf, gsize len,
                                         const WeftHttpLimits *limits, WeftHttpHead *req,
                                         WeftHttpHeader *headers, gsize max_headers,
                                         guint *status);
const char *weft_http_parser_scan_name_portable (void);
