// For fuzz targets that answer over a real store: one, in the process's
// private folder (fuzz_file.h), opened on first use.
#ifndef AUTOTUNE_TESTS_RELIABILITY_FUZZ_FUZZ_STORE_H_
#define AUTOTUNE_TESTS_RELIABILITY_FUZZ_FUZZ_STORE_H_

#include <cstdlib>
#include <memory>

#include "cache/store.h"
#include "tests/reliability/fuzz/fuzz_file.h"

namespace autotune::fuzz {

// The store at FuzzDirectory()/cache.db; aborts when it cannot be opened.
inline std::unique_ptr<cache::Store> OpenFuzzStore() {
  cache::StoreOptions options;
  options.path = FuzzDirectory() + "/cache.db";
  absl::StatusOr<std::unique_ptr<cache::Store>> store = cache::Store::Open(options);
  if (!store.ok()) std::abort();
  return *std::move(store);
}

}  // namespace autotune::fuzz

#endif  // AUTOTUNE_TESTS_RELIABILITY_FUZZ_FUZZ_STORE_H_
