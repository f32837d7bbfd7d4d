/* parser-portable.c: http/weft-http-parser.c again, with the word-at-a-time
 * scan other CPUs use instead of SSE2, its external names suffixed with
 * _portable (see parser-portable.h).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#define WEFT_HTTP_PARSER_NO_SIMD 1
#define weft_http_limits_init weft_http_limits_init_portable
#define weft_http_parse_request weft_http_parse_request_portable
#define weft_http_head_get_header weft_http_head_get_header_portable
#define weft_http_chunked_init weft_http_chunked_init_portable
#define weft_http_chunked_decode weft_http_chunked_decode_portable
#define weft_http_parser_scan_name weft_http_parser_scan_name_portable
#include "../../http/weft-http-parser.c"
#include "parser-portable.h"
