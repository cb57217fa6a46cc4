// The daemon's Prometheus metrics, kept with prometheus-cpp and served at
// GET /metrics on the daemon's HTTP port (`--http-listen`, service/rpc/http_server.h):
//
//   autotune_lookups_total{result="exact|nearest|miss"}   lookups answered, since start
//   autotune_lookup_duration_seconds{rpc="Lookup|BatchLookup"}   histogram, per call
//   autotune_cache_entries, autotune_cache_binaries, autotune_cache_binary_bytes,
//   autotune_cache_database_bytes, autotune_cache_measurements      what the database holds
//   autotune_jobs{state}                  jobs in the database by state
//   autotune_measurements{status}         measurements in the database by variant status
//   autotune_compile_seconds_total        wall seconds of the compile phases of jobs that
//                                         ended since start
//   autotune_gpu_seconds_total            the same of their screen and serial phases
//   autotune_workers_restarted_total      compile and GPU workers replaced since start
//   autotune_database_up                  1 when the database answered this scrape, else 0
//
// Every value but the histogram is read when a scrape comes, from the
// objects that hold it; a database that does not answer sets
// autotune_database_up 0 and leaves the database's gauges out. /metrics
// asks for no role (scrapers present none): bind the HTTP port where only
// the monitoring system and the admins reach it (a loopback or
// cluster-internal address).
#ifndef AUTOTUNE_SERVICE_RPC_METRICS_H_
#define AUTOTUNE_SERVICE_RPC_METRICS_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cache/store.h"
#include "service/jobs/job_runner.h"
#include "service/lookup/lookup_resolver.h"

namespace prometheus {
class Registry;
class Histogram;
}  // namespace prometheus

namespace autotune::service {

class Metrics {
 public:
  struct Sources {
    const LookupResolver* resolver = nullptr;
    const cache::Store* store = nullptr;
    JobRunner* jobs = nullptr;
  };
  static std::unique_ptr<Metrics> Create(Sources sources);
  ~Metrics();

  // Every metric in Prometheus' text format, the read-at-scrape values read
  // now. Thread-safe.
  std::string TextExposition() const;

  // One Lookup or BatchLookup call, as the server saw it.
  void ObserveLookup(absl::string_view rpc, absl::Duration took);

 private:
  class Scrape;
  Metrics() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<Scrape> scrape_;
  prometheus::Histogram* lookup_seconds_ = nullptr;
  prometheus::Histogram* batch_lookup_seconds_ = nullptr;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_METRICS_H_
