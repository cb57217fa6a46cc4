#include "service/jobs/compile_phase.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace autotune::service {
namespace {

namespace wv1 = ::autotune::worker::v1;

}  // namespace

CompileEnd CompileOne(const CompileUnit& unit, cache::Store& store, CompilePool& pool,
                      const CompilePhaseOptions& options) {
  CompileEnd end;
  absl::StatusOr<std::optional<cache::CompileRecord>> cached = store.FindCompile(unit.key);
  if (!cached.ok()) {
    end.store_error =
        absl::Status(cached.status().code(),
                     absl::StrCat("cannot read the compile cache: ", cached.status().message()));
    return end;
  }
  if (cached->has_value()) {
    const cache::CompileRecord& record = **cached;
    end.cache_hit = true;
    end.status = record.status;
    end.log = record.log;
    end.binary_sha256 = record.binary_sha256;
    end.lowered_name = record.lowered_name;
    return end;
  }
  wv1::CompileOutcome outcome = pool.Compile(CompileTaskOf(unit), options.timeout);
  if (outcome.status() == wv1::CompileOutcome::OK &&
      static_cast<int64_t>(outcome.cubin().size()) > kernels::kMaxCubinBytes) {
    outcome.set_status(wv1::CompileOutcome::COMPILE_ERROR);
    outcome.set_log(absl::StrCat(outcome.log(), outcome.log().empty() ? "" : "\n", "the cubin is ",
                                 outcome.cubin().size(), " bytes, more than the limit of ",
                                 kernels::kMaxCubinBytes, "; not kept"));
    outcome.clear_cubin();
  }
  end.log = outcome.log();
  switch (outcome.status()) {
    case wv1::CompileOutcome::OK:
    case wv1::CompileOutcome::COMPILE_ERROR: {
      end.status = outcome.status() == wv1::CompileOutcome::OK ? v1::OK : v1::COMPILE_ERROR;
      cache::CompileRecord record;
      record.compile_key = unit.key;
      record.status = end.status;
      record.lowered_name = outcome.lowered_name();
      record.log = outcome.log();
      record.nvrtc_version = pool.nvrtc_version();
      record.arch = unit.arch;
      record.family = unit.record->family.name();
      record.family_hash = unit.record->content_hash;
      absl::StatusOr<std::string> sha256 = store.PutCompile(record, outcome.cubin());
      if (!sha256.ok()) {
        end.status = v1::VARIANT_STATUS_UNSPECIFIED;
        end.store_error = absl::Status(
            sha256.status().code(),
            absl::StrCat("cannot store the compile result: ", sha256.status().message()));
        return end;
      }
      if (end.status == v1::OK) {
        end.binary_sha256 = *std::move(sha256);
        end.lowered_name = outcome.lowered_name();
        if (options.keep_cubins) end.cubin = std::move(*outcome.mutable_cubin());
      }
      break;
    }
    case wv1::CompileOutcome::TIMEOUT:
      end.status = v1::COMPILE_TIMEOUT;
      break;
    default:
      end.status = v1::COMPILE_ERROR;
      break;
  }
  return end;
}

CompileResults RunCompilePhase(
    const std::vector<CompileUnit>& units, cache::Store& store, CompilePool& pool,
    const CompilePhaseOptions& options, const std::atomic<bool>& cancel,
    const std::function<void(const CompileUnit&, const CompileEnd&)>& on_end) {
  absl::Mutex mu;
  CompileResults results;
  std::atomic<size_t> next{0};
  auto loop = [&] {
    while (!cancel) {
      const size_t index = next.fetch_add(1);
      if (index >= units.size()) return;
      CompileEnd end = CompileOne(units[index], store, pool, options);
      on_end(units[index], end);
      absl::MutexLock lock(&mu);
      results[units[index].key] = std::move(end);
    }
  };
  std::vector<std::thread> threads;
  const int parallelism = std::max(1, options.parallelism);
  for (int i = 0; i < parallelism; ++i) threads.emplace_back(loop);
  for (std::thread& thread : threads) thread.join();
  return results;
}

}  // namespace autotune::service
