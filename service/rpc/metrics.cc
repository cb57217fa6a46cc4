#include "service/rpc/metrics.h"

#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "prometheus/collectable.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "proto/autotune.pb.h"

namespace autotune::service {
namespace {

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void AddValue(prometheus::MetricFamily& family, double value,
              std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

}  // namespace

// The values read at scrape time.
class Metrics::Scrape : public prometheus::Collectable {
 public:
  explicit Scrape(Sources sources) : sources_(sources) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    std::vector<prometheus::MetricFamily> families;
    const LookupCounters& counters = sources_.resolver->counters();
    prometheus::MetricFamily lookups = Family(
        "autotune_lookups_total", "Lookups answered since start, by match", MetricType::Counter);
    AddValue(lookups, static_cast<double>(counters.exact.load()), {{"result", "exact"}});
    AddValue(lookups, static_cast<double>(counters.nearest.load()), {{"result", "nearest"}});
    AddValue(lookups, static_cast<double>(counters.predicted.load()), {{"result", "predicted"}});
    AddValue(lookups, static_cast<double>(counters.miss.load()), {{"result", "miss"}});
    families.push_back(std::move(lookups));

    const JobRunner::Totals totals = sources_.jobs->totals();
    prometheus::MetricFamily compile = Family(
        "autotune_compile_seconds_total",
        "Wall seconds of the compile phases of jobs that ended since start", MetricType::Counter);
    AddValue(compile, totals.compile_s);
    families.push_back(std::move(compile));
    prometheus::MetricFamily gpu =
        Family("autotune_gpu_seconds_total",
               "Wall seconds of the screen and serial phases of jobs that ended since start",
               MetricType::Counter);
    AddValue(gpu, totals.gpu_s);
    families.push_back(std::move(gpu));
    prometheus::MetricFamily restarted =
        Family("autotune_workers_restarted_total",
               "Compile and GPU worker processes replaced since start", MetricType::Counter);
    AddValue(restarted, static_cast<double>(totals.workers_replaced));
    families.push_back(std::move(restarted));

    absl::StatusOr<cache::StoreStats> stats = sources_.store->Stats();
    prometheus::MetricFamily up = Family(
        "autotune_database_up", "1 when the database answered this scrape", MetricType::Gauge);
    AddValue(up, stats.ok() ? 1 : 0);
    families.push_back(std::move(up));
    if (!stats.ok()) return families;
    for (const auto& [name, help, value] :
         std::vector<std::tuple<std::string, std::string, int64_t>>{
             {"autotune_cache_entries", "Best entries in the cache", stats->entries},
             {"autotune_cache_binaries", "Cubins in the cache", stats->binaries},
             {"autotune_cache_binary_bytes", "Bytes of the cubins in the cache",
              stats->binary_bytes},
             {"autotune_cache_measurements", "Measurements in the cache", stats->measurements},
             {"autotune_cache_database_bytes", "Bytes of the database file and its WAL",
              stats->database_bytes}}) {
      prometheus::MetricFamily family = Family(name, help, MetricType::Gauge);
      AddValue(family, static_cast<double>(value));
      families.push_back(std::move(family));
    }
    prometheus::MetricFamily jobs =
        Family("autotune_jobs", "Jobs in the database by state", MetricType::Gauge);
    for (const auto& [state, count] : stats->jobs_by_state) {
      AddValue(
          jobs, static_cast<double>(count),
          {{"state", absl::AsciiStrToLower(v1::JobState_Name(static_cast<v1::JobState>(state)))}});
    }
    families.push_back(std::move(jobs));
    prometheus::MetricFamily variants =
        Family("autotune_measurements", "Measurements in the database by variant status",
               MetricType::Gauge);
    for (const auto& [status, count] : stats->measurements_by_status) {
      AddValue(variants, static_cast<double>(count),
               {{"status", v1::VariantStatus_Name(static_cast<v1::VariantStatus>(status))}});
    }
    families.push_back(std::move(variants));
    return families;
  }

 private:
  const Sources sources_;
};

std::unique_ptr<Metrics> Metrics::Create(Sources sources) {
  auto metrics = std::unique_ptr<Metrics>(new Metrics());
  metrics->registry_ = std::make_shared<prometheus::Registry>();
  auto& histograms = prometheus::BuildHistogram()
                         .Name("autotune_lookup_duration_seconds")
                         .Help("Seconds the server took to answer a lookup call")
                         .Register(*metrics->registry_);
  const prometheus::Histogram::BucketBoundaries buckets = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1};
  metrics->lookup_seconds_ = &histograms.Add({{"rpc", "Lookup"}}, buckets);
  metrics->batch_lookup_seconds_ = &histograms.Add({{"rpc", "BatchLookup"}}, buckets);
  metrics->scrape_ = std::make_shared<Scrape>(sources);
  return metrics;
}

std::string Metrics::TextExposition() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<prometheus::MetricFamily> read_now = scrape_->Collect();
  families.insert(families.end(), std::make_move_iterator(read_now.begin()),
                  std::make_move_iterator(read_now.end()));
  return prometheus::TextSerializer().Serialize(families);
}

Metrics::~Metrics() = default;

void Metrics::ObserveLookup(absl::string_view rpc, absl::Duration took) {
  prometheus::Histogram* histogram = rpc == "BatchLookup" ? batch_lookup_seconds_ : lookup_seconds_;
  histogram->Observe(absl::ToDoubleSeconds(took));
}

}  // namespace autotune::service
