// The client's local cache files (client/local_cache.h): an answer file and
// a cubin file holding whatever a disk, an editor or another program left.
#include <cstdint>
#include <fstream>
#include <string>

#include "client/local_cache.h"
#include "tests/reliability/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const autotune::client::LocalCache* cache = [] {
    auto opened = autotune::client::LocalCache::Open(autotune::fuzz::FuzzDirectory() + "/cache");
    return opened.ok() ? new autotune::client::LocalCache(*std::move(opened)) : nullptr;
  }();
  if (cache == nullptr) return 0;
  autotune::v1::LookupRequest request;
  request.set_family("k");
  (*request.mutable_problem()->mutable_dims())["n"] = 1;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::ofstream(cache->AnswerPath(request), std::ios::binary | std::ios::trunc) << bytes;
  cache->GetAnswer(request).IgnoreError();
  const std::string sha256(64, 'a');
  std::ofstream(cache->CubinPath(sha256), std::ios::binary | std::ios::trunc) << bytes;
  cache->GetCubin(sha256).IgnoreError();
  return 0;
}
