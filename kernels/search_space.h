// The search space of a kernel family for one problem: every config of the
// family's parameters that satisfies its constraints and fits the problem
// and the device, each resolved into what compiling and launching it needs.
//
//   ASSIGN_OR_RETURN(SearchSpace space, ExpandSearchSpace(family, problem));
//   LOG(INFO) << space.total_configs << " configs, " << space.after_constraints
//             << " after constraints, " << space.variants.size() << " valid";
//   for (const Variant& v : space.variants) {
//     CompileRequest request{.source = family.source(),
//                            .name_expression = v.name_expression,
//                            .options = v.compile_options, .arch = "sm_90"};
//     ...launch with v.launch, v.buffers, v.scalars...
//   }
//
// Order: configs are the cartesian product of the params in declaration
// order, each param's values in declaration order, the last param varying
// fastest (nested loops over params[0], params[1], ...). The same family and
// problem always give the same variants in the same order.
//
// Counting: total_configs = product of the value counts; after_constraints
// = configs for which every constraint is non-zero; of those, configs whose
// geometry does not fit the problem or the device are dropped and counted
// by reason in `dropped`, so
//   after_constraints == variants.size() + sum of dropped counts.
//
// How params and the dtype reach the source (macro names):
//   binding DEFINES (or unspecified): one "-D<PARAM>=<value>" per param, in
//     declaration order, e.g. "-DBLOCK=256"; name_expression = kernel_name.
//   binding TEMPLATE_ARGUMENTS: no param macros; name_expression =
//     "kernel_name<v1, v2, ...>" with the values in declaration order.
//   Always, for the problem dtype:
//     -DAUTOTUNE_DTYPE=<C++ type>     float, __half, __nv_bfloat16, double,
//                                     signed char, int, long long,
//                                     unsigned char, __nv_fp8_e4m3,
//                                     __nv_fp8_e5m2 (the source includes
//                                     cuda_fp16.h / cuda_bf16.h / cuda_fp8.h
//                                     as needed; two-word types cannot be
//                                     used in a functional cast: write
//                                     static_cast<AUTOTUNE_DTYPE>(x))
//     -DAUTOTUNE_DTYPE_<NAME>=1       NAME is the upper-cased short dtype
//                                     name: FP32, FP16, BF16, FP64, INT8,
//                                     INT32, INT64, UINT8, FP8E4M3, FP8E5M2
//                                     (for #if in the source)
//     -DAUTOTUNE_DTYPE_BYTES=<n>      element size in bytes
//   compile_options = the family's compile_options, then the macros above.
//   The reference kernel is compiled with the family's compile_options, the
//   dtype macros and -DAUTOTUNE_REFERENCE=1, without param macros: code that
//   needs param macros and shares a source with the reference goes under
//   #ifndef AUTOTUNE_REFERENCE.
//
// Thread-safety: all functions are safe to call concurrently.
#ifndef AUTOTUNE_KERNELS_SEARCH_SPACE_H_
#define AUTOTUNE_KERNELS_SEARCH_SPACE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/autotune.pb.h"
#include "proto/problem.h"

namespace autotune::kernels {

// Families whose parameter space is larger than this are rejected by
// ValidateFamily (family_loader.h).
inline constexpr int64_t kMaxConfigsPerFamily = int64_t{1} << 20;
// A family's CUDA source may hold at most this many bytes (ValidateFamily).
inline constexpr int64_t kMaxSourceBytes = int64_t{1} << 20;
// A family's headers (v1::SourceHeader): how many, and each one's text, at
// most kMaxSourceBytes.
inline constexpr int kMaxSourceHeaders = 64;
// A compiled variant's cubin may hold at most this many bytes; a larger one
// is a COMPILE_ERROR saying so.
inline constexpr int64_t kMaxCubinBytes = int64_t{64} << 20;

// What the search space enforces about the device. The defaults are those
// of sm_90 (H100/H200): 1024 threads per block and 227 KiB of dynamic
// shared memory per block (above 48 KiB the launcher must opt in with
// cudaFuncAttributeMaxDynamicSharedMemorySize).
//
// `arch` is the architecture the variants are compiled for ("sm_90",
// "sm_90a", "sm_100f", ...); constraints see it as the variables `arch` and
// `arch_specific` (expression.h), so a config whose code needs sm_90a is not
// a variant of a job compiled for plain sm_90.
//
// `sm_count` is the device's multiprocessor count, which the launch
// geometry sees as the variable `sm_count` (expression.h); 0 = unknown
// (then kUnknownSmCount).
struct DeviceLimits {
  int64_t max_threads_per_block = 1024;
  int64_t max_dynamic_shared_bytes = 227 * 1024;
  std::string arch = "sm_90";
  int64_t sm_count = 0;
};

// One of the family's buffers, sized for the problem and config.
struct BufferExtent {
  std::string name;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;  // resolved: never UNSPECIFIED
  std::vector<int64_t> shape;               // every extent >= 1
  int64_t elements = 0;                     // product of `shape`
  int64_t bytes = 0;                        // elements * DTypeBytes(dtype)
};

// One of the family's scalar arguments (ScalarArgument.dtype unspecified =
// the problem's dtype). Integer dtypes hold integral values.
struct ScalarValue {
  std::string name;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  double value = 0;
};

// A config resolved for one problem: everything needed to compile and run it.
struct Variant {
  int64_t index = 0;                  // position among all total_configs
  v1::Config config;                  // param name -> value
  std::vector<int64_t> param_values;  // the same values, in params order
  v1::LaunchDims launch;              // as many grid/block values as expressions
  std::vector<BufferExtent> buffers;  // in family.buffers order
  std::vector<ScalarValue> scalars;   // in family.scalars order
  std::string name_expression;        // see the binding notes above
  std::vector<std::string> compile_options;
  double bytes_per_call = 0;
  double flops_per_call = 0;
};

struct SearchSpace {
  int64_t total_configs = 0;
  int64_t after_constraints = 0;
  // Configs rejected by each constraint (the first one that failed),
  // indexed like family.constraints; they sum to total - after_constraints.
  std::vector<int64_t> rejected_by_constraint;
  // Reason -> count for configs that passed the constraints but were
  // dropped, e.g. "launch.block: more threads per block than the device
  // limit (1024)", "buffers[1].shape[0]: not positive",
  // "launch.dynamic_shared_bytes: above the device limit (232448 bytes)".
  // A reason names a field and a kind of failure, never a value, so
  // configs failing the same way share one count.
  std::map<std::string, int64_t> dropped;
  std::vector<Variant> variants;
  // The reference kernel for this problem.
  v1::LaunchDims reference_launch;
  std::string reference_name;  // reference.kernel_name
  std::vector<std::string> reference_compile_options;
};

// Expands `family` (one that passed ValidateFamily) for `problem`.
// INVALID_ARGUMENT from ValidateProblem (proto/problem.h), or when
// limits.arch is not an architecture; INVALID_ARGUMENT naming the field
// and the problem when an expression that does not depend on any param is
// invalid for the problem, since then no config could run, e.g.
//   "buffers[0].shape[0]: 'n - 8' = 0 is not positive (problem n=8 fp32)"
//   "reference.launch.grid[0]: ..."
// An expression that fails for some configs only drops those configs.
absl::StatusOr<SearchSpace> ExpandSearchSpace(const v1::KernelFamily& family,
                                              const v1::Problem& problem,
                                              const DeviceLimits& limits = {});

// Resolves one config (e.g. a cached best config) for `problem`.
// INVALID_ARGUMENT when the config lacks a param, has one the family does
// not, uses a value not listed for its param ("config: BLOCK=96 is not a
// value of the param (64, 128)"), fails a constraint ("config fails
// constraints[0] 'BLOCK * ELEMS <= 4096'") or would be dropped (the reason).
absl::StatusOr<Variant> ResolveConfig(const v1::KernelFamily& family, const v1::Problem& problem,
                                      const v1::Config& config, const DeviceLimits& limits = {});

// ResolveConfig for many problems of one family on one target, the
// family's expressions parsed once (ResolveConfig parses them on every
// call: most of a lookup's cost). Not for concurrent use: one thread at a
// time. `family` must outlive it.
class FamilyConfigResolver {
 public:
  // INVALID_ARGUMENT when an expression of the family does not parse or
  // limits.arch is not an architecture.
  static absl::StatusOr<FamilyConfigResolver> Create(const v1::KernelFamily& family,
                                                     const DeviceLimits& limits = {});
  FamilyConfigResolver(FamilyConfigResolver&&) noexcept;
  FamilyConfigResolver& operator=(FamilyConfigResolver&&) noexcept;
  ~FamilyConfigResolver();

  // As ResolveConfig(family, problem, config, limits).
  absl::StatusOr<Variant> Resolve(const v1::Problem& problem, const v1::Config& config);

 private:
  struct State;
  FamilyConfigResolver();

  const v1::KernelFamily* family_ = nullptr;
  std::unique_ptr<State> state_;
};

// How one config of `family` is compiled for `dtype`: the same name
// expression and options ExpandSearchSpace gives its variant (the binding
// notes above), without evaluating any expression, so it is cheap enough for
// every lookup. INVALID_ARGUMENT as ResolveConfig's for a config that lacks
// a param, has one the family does not, or uses a value not listed.
struct CompileInputs {
  std::string name_expression;
  std::vector<std::string> options;
};
absl::StatusOr<CompileInputs> CompileInputsFor(const v1::KernelFamily& family,
                                               const v1::Config& config, v1::DType dtype);

// How the reference kernel is compiled for `dtype`: its kernel_name, and
// the options of the binding notes above.
CompileInputs ReferenceCompileInputs(const v1::KernelFamily& family, v1::DType dtype);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_SEARCH_SPACE_H_
