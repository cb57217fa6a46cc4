#include "service/lookup/cubin_cache.h"

namespace autotune::service {

absl::StatusOr<std::shared_ptr<const std::string>> CubinCache::Get(
    const std::string& sha256) const {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = by_sha_.find(sha256); it != by_sha_.end()) {
      kept_.splice(kept_.begin(), kept_, it->second);
      return it->second->second;
    }
  }
  absl::StatusOr<v1::Binary> binary = store_->GetBinary(sha256);
  if (!binary.ok()) return binary.status();
  auto cubin = std::make_shared<const std::string>(std::move(*binary->mutable_cubin()));
  if (cubin->size() > max_bytes_) return cubin;
  absl::MutexLock lock(&mu_);
  if (by_sha_.contains(sha256)) return cubin;  // another call kept it meanwhile
  kept_.emplace_front(sha256, cubin);
  by_sha_.emplace(sha256, kept_.begin());
  bytes_ += cubin->size();
  while (bytes_ > max_bytes_) {
    bytes_ -= kept_.back().second->size();
    by_sha_.erase(kept_.back().first);
    kept_.pop_back();
  }
  return cubin;
}

size_t CubinCache::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

size_t CubinCache::size() const {
  absl::MutexLock lock(&mu_);
  return by_sha_.size();
}

}  // namespace autotune::service
