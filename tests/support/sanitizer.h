// TS_UNDER_ASAN: 1 in an AddressSanitizer build (tests that cannot run
// there skip, saying why), else 0.
#pragma once

// gcc defines __SANITIZE_ADDRESS__; clang answers __has_feature instead.
#if defined(__SANITIZE_ADDRESS__)
#define TS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_UNDER_ASAN 1
#endif
#endif
#ifndef TS_UNDER_ASAN
#define TS_UNDER_ASAN 0
#endif
