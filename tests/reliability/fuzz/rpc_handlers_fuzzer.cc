// What the gRPC handlers hand the daemon's core, from any caller: the first
// byte picks the call, the rest is its request as protobuf bytes, answered
// by the same objects the service uses (service/lookup/), over a real
// store in a private folder:
//   0 Import (CacheAdmin::Import, as a tuner: families may not change)
//   1 Import as an admin     2 BatchLookup     3 GetBinaries
//   4 RegisterKernel         5 Invalidate      6 ListEntries
//   7 GetEntry
// Malformed bytes are a request that does not parse: nothing to do.
#include <cstdint>
#include <memory>
#include <string>

#include "cache/store.h"
#include "proto/autotune.pb.h"
#include "service/lookup/cache_admin.h"
#include "service/lookup/lookup_resolver.h"
#include "tests/reliability/fuzz/fuzz_store.h"

namespace {

struct Core {
  std::unique_ptr<autotune::cache::Store> store;
  std::unique_ptr<autotune::service::CacheAdmin> admin;
  std::unique_ptr<autotune::service::LookupResolver> resolver;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autotune;
  static Core* core = [] {
    auto* c = new Core;
    c->store = fuzz::OpenFuzzStore();
    c->admin = std::make_unique<service::CacheAdmin>(c->store.get());
    c->resolver = std::make_unique<service::LookupResolver>(c->store.get());
    return c;
  }();
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 8) {
    case 0:
    case 1: {
      v1::CacheBundle bundle;
      if (!bundle.ParseFromString(bytes)) return 0;
      core->admin
          ->Import(bundle, cache::Store::Merge::kKeepExisting,
                   data[0] % 8 == 0 ? "adding or replacing a family needs the admin role" : "")
          .IgnoreError();
      break;
    }
    case 2: {
      v1::BatchLookupRequest request;
      if (request.ParseFromString(bytes)) core->resolver->BatchLookup(request).IgnoreError();
      break;
    }
    case 3: {
      v1::GetBinariesRequest request;
      if (request.ParseFromString(bytes)) core->resolver->GetBinaries(request).IgnoreError();
      break;
    }
    case 4: {
      v1::RegisterKernelRequest request;
      if (request.ParseFromString(bytes)) core->admin->RegisterKernel(request).IgnoreError();
      break;
    }
    case 5: {
      v1::InvalidateRequest request;
      if (request.ParseFromString(bytes)) core->admin->Invalidate(request).IgnoreError();
      break;
    }
    case 6: {
      v1::ListEntriesRequest request;
      if (request.ParseFromString(bytes)) core->admin->ListEntries(request).IgnoreError();
      break;
    }
    default: {
      v1::GetEntryRequest request;
      if (request.ParseFromString(bytes)) core->admin->GetEntry(request).IgnoreError();
      break;
    }
  }
  return 0;
}
