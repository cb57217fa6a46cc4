// Checked cubins kept in memory for the calls that send them (lookups with
// include_cubin, GetBinaries): a start-up's thousand cubins are read from
// SQLite and hashed once, not at every start.
//
//   CubinCache cubins(&store, kMaxCachedCubinBytes);
//   ASSIGN_OR_RETURN(std::shared_ptr<const std::string> cubin, cubins.Get(sha256));
//
// A cubin is read from the store once, which checks it against its sha256
// (a damaged one is DATA_LOSS and is not kept), then kept, the most recently
// used first, up to `max_bytes` in all (one larger than that is served and
// not kept). Cubins are named by their content, so a kept one never goes
// stale. Lookups ask for the binary of an entry they have just read from
// the store; GetBinaries for any sha256 a client names, and one the store
// lacks is NOT_FOUND and not kept. A kept cubin that the store has since
// dropped (garbage collected) is still served until others push it out.
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
