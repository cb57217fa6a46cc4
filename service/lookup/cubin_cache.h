// Checked cubins kept in memory for the lookups that send them
// (include_cubin): a start-up's BatchLookup of a thousand kernels reads none
// of their cubins from SQLite and hashes none of them again.
//
//   CubinCache cubins(&store, kMaxCachedCubinBytes);
//   ASSIGN_OR_RETURN(std::shared_ptr<const std::string> cubin, cubins.Get(sha256));
//
// A cubin is read from the store once, which checks it against its sha256
// (a damaged one is DATA_LOSS and is not kept), then kept, the most recently
// used first, up to `max_bytes` in all (one larger than that is served and
// not kept). Cubins are named by their content, so a kept one never goes
// stale. Callers ask only for the binary of an entry they have just read
// from the store, which therefore holds it too; a cubin no entry names any
// more is dropped as others come in.
//
// Thread-safe; the store is read without the lock held.
#ifndef AUTOTUNE_SERVICE_LOOKUP_CUBIN_CACHE_H_
#define AUTOTUNE_SERVICE_LOOKUP_CUBIN_CACHE_H_

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/store.h"

namespace autotune::service {

// The bytes of cubins a daemon keeps in memory for lookups.
inline constexpr size_t kMaxCachedCubinBytes = size_t{256} << 20;

class CubinCache {
 public:
  CubinCache(const cache::Store* store, size_t max_bytes) : store_(store), max_bytes_(max_bytes) {}

  // The cubin `sha256`: kept, or read (and checked) by Store::GetBinary,
  // whose errors it returns.
  absl::StatusOr<std::shared_ptr<const std::string>> Get(const std::string& sha256) const;

  // What is kept now.
  size_t bytes() const;
  size_t size() const;

 private:
  using Kept = std::pair<std::string, std::shared_ptr<const std::string>>;  // sha256, cubin

  const cache::Store* store_;
  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  // Most recently used first; by_sha_ points into it.
  mutable std::list<Kept> kept_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_map<std::string, std::list<Kept>::iterator> by_sha_ ABSL_GUARDED_BY(mu_);
  mutable size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_LOOKUP_CUBIN_CACHE_H_
