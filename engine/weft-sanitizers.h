/* weft-sanitizers.h: which sanitizer this file is built under, for the
 * code that must tell it things (coroutine stack switches) or step aside
 * for it (object caches that would hide a use after free). GCC defines
 * __SANITIZE_*__; clang (before 17) only answers __has_feature.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define WEFT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define WEFT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TSAN 1
#endif
#endif
