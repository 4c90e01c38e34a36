// GRADCOMP_TEST_SANITIZED: defined (1) when the test is compiled with AddressSanitizer (GCC's
// __SANITIZE_ADDRESS__, Clang's __has_feature). A few tests whose inputs are large only to reach
// sizes the optimised build must cover run smaller inputs there; each says which and why.
#pragma once

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GRADCOMP_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GRADCOMP_TEST_SANITIZED)
#define GRADCOMP_TEST_SANITIZED 1
#endif

namespace gradcomp_test {
#if defined(GRADCOMP_TEST_SANITIZED)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
}  // namespace gradcomp_test
