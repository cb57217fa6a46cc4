// The random numbers of the searches (search.h): SplitMix64 (Steele, Lea
// and Flood, "Fast splittable pseudorandom number generators", 2014), a
// 64-bit generator whose output is fixed by its seed on every platform,
// unlike std:: distributions, whose output the standard leaves to the
// library.
#ifndef AUTOTUNE_SERVICE_JOBS_SEARCH_RANDOM_H_
#define AUTOTUNE_SERVICE_JOBS_SEARCH_RANDOM_H_

#include <cstdint>

namespace autotune::service {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n), n > 0: values below 2^64 mod n are drawn again so
  // that every remainder is equally likely.
  uint64_t Below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t x = Next();
      if (x >= threshold) return x % n;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_SEARCH_RANDOM_H_
