// The fault-injection kernel families of tests/faults/ and what every value
// of each family's fault parameter must end in when profiled. The GPU suite
// (tests/gpu/profile_gpu_test.cc) holds the profiler to these statuses; the
// unit test beside this file checks that the descriptors agree with the
// table and keep every config of it (no constraint or device limit of the
// search space removes one) and that every variant compiles.
#ifndef AUTOTUNE_TESTS_FAULTS_FAULT_CASES_H_
#define AUTOTUNE_TESTS_FAULTS_FAULT_CASES_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "proto/autotune.pb.h"

namespace autotune::testing {

struct FaultFamily {
  std::string name;         // the family, and the stem of its .textproto and .cu
  std::string fault_param;  // the tunable that picks the fault
  // Every value of fault_param, with the status a variant using it ends in.
  std::map<int64_t, v1::VariantStatus> expected;
  std::vector<v1::DType> dtypes;  // the family's dtypes, in its order
};

// Names the family in test names and messages.
inline void PrintTo(const FaultFamily& family, std::ostream* os) { *os << family.name; }

inline const std::vector<FaultFamily>& FaultFamilies() {
  static const std::vector<FaultFamily>* const families = new std::vector<FaultFamily>{
      {"fault_hang", "HANG", {{0, v1::OK}, {1, v1::TIMEOUT}}, {v1::FLOAT32}},
      {"fault_oob", "OOB", {{0, v1::OK}, {1, v1::FAULT}}, {v1::FLOAT32}},
      {"fault_race", "SYNC", {{0, v1::WRONG_RESULT}, {1, v1::OK}}, {v1::FLOAT32, v1::FLOAT16}},
      {"fault_unwritten",
       "SKIP",
       {{0, v1::OK}, {1, v1::WRONG_RESULT}, {2, v1::WRONG_RESULT}},
       {v1::FLOAT32, v1::FLOAT16}},
      {"fault_limits",
       "LIMIT",
       {{0, v1::OK}, {1, v1::UNSUPPORTED}, {2, v1::UNSUPPORTED}},
       {v1::FLOAT32}},
  };
  return *families;
}

// Every fault family has one dim, n; the suite runs them at this size.
inline constexpr int64_t kFaultProblemElements = int64_t{1} << 20;

inline v1::Problem FaultProblem(v1::DType dtype, int64_t elements = kFaultProblemElements) {
  v1::Problem problem;
  (*problem.mutable_dims())["n"] = elements;
  problem.set_dtype(dtype);
  return problem;
}

// What a config of `family` must end in; VARIANT_STATUS_UNSPECIFIED when it
// lacks the fault param or uses a value the table does not list.
inline v1::VariantStatus ExpectedStatus(const FaultFamily& family, const v1::Config& config) {
  auto param = config.params().find(family.fault_param);
  if (param == config.params().end()) return v1::VARIANT_STATUS_UNSPECIFIED;
  auto expected = family.expected.find(param->second);
  return expected == family.expected.end() ? v1::VARIANT_STATUS_UNSPECIFIED : expected->second;
}

}  // namespace autotune::testing

#endif  // AUTOTUNE_TESTS_FAULTS_FAULT_CASES_H_
