// Whether this program is built under a sanitizer (.ci/sanitize.sh): GCC
// defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang answers
// __has_feature. For code that must act otherwise there: a sanitizer's
// allocator and shadow memory are its own (no glibc arenas to tune, no
// RLIMIT_DATA that would not count the shadow), and its code runs slower.
#ifndef AUTOTUNE_BASE_SANITIZERS_H_
#define AUTOTUNE_BASE_SANITIZERS_H_

namespace autotune {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizerBuild = true;
#else
inline constexpr bool kAddressSanitizerBuild = false;
#endif
#else
inline constexpr bool kAddressSanitizerBuild = false;
#endif

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizerBuild = true;
#else
inline constexpr bool kThreadSanitizerBuild = false;
#endif
#else
inline constexpr bool kThreadSanitizerBuild = false;
#endif

// ASan or TSan.
inline constexpr bool kSanitizerBuild = kAddressSanitizerBuild || kThreadSanitizerBuild;

}  // namespace autotune

#endif  // AUTOTUNE_BASE_SANITIZERS_H_
