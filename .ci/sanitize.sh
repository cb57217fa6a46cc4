#!/usr/bin/env bash
# Builds with clang-14 under a sanitizer and runs the tests there.
#
#   .ci/sanitize.sh [address]  AddressSanitizer + UndefinedBehaviorSanitizer
#                                 (LeakSanitizer on) in build-asan/: every
#                                 test but the NVRTC compile sweeps of the
#                                 built-in families and the longest waits
#                                 (see below). The same
#                                 tree holds the fuzz targets
#                                 (.ci/fuzz.sh).
#   .ci/sanitize.sh thread     ThreadSanitizer in build-tsan/: the tests
#                                 labelled tsan (ctest -L tsan), built by the
#                                 target tsan_tests: the binaries of the
#                                 concurrent parts that run without an
#                                 in-process gRPC server (the store under
#                                 concurrent readers and writers, the lookup
#                                 resolver, the compile and profile pools, the
#                                 job runner, tune-on-miss, the local cache).
#                                 Debian's Abseil is not built with TSan:
#                                 tests/tsan/absl_sync_annotations.cc makes
#                                 its locks visible; gRPC's are not, hence
#                                 the choice of binaries.
#
# Both trees are clang builds with warnings as errors and -Wthread-safety, so
# building them checks the lock annotations of every unit they hold. They
# leave out what no test runs there (-DAUTOTUNE_EXTRAS=OFF: the benchmarks,
# the GPU suite, the client example), compile at -O1 with line tables only
# (enough for the sanitizers' stack traces) and link with lld. The web pages
# reuse build/'s node_modules when that tree has them.
#
# The daemons, workers and commands the tests start are sanitized builds
# too, so a report in any of them fails its test. Each sanitizer stops the
# program at its first report. Reports in code that is not ours are
# suppressed in .ci/sanitizer-suppressions/, each with its reason.
#
# Environment: SANITIZE_STEP=build|test runs only that half (.ci/test.sh
# times them apart); both by default. CTEST_JOBS as in .ci/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode=${1:-address}
step=${SANITIZE_STEP:-all}
suppressions=$PWD/.ci/sanitizer-suppressions
case "$mode" in
  address)
    dir=build-asan
    configure=(-DAUTOTUNE_FUZZ=ON)
    targets=(all)
    # Left out: downstream_find_package (a project built without the
    # sanitizer cannot link archives built with it); the compile sweeps and
    # compile checks of the built-in families and the example family, which
    # check the kernel sources through NVRTC, a library no sanitizer sees,
    # with a few lines of our code around it that the Release tests run too
    # (the cubin reader under the checks runs here in
    # kernels_family_check_test); and gemm_bf16's expansion of its whole space
    # for each default problem (7,296 configs each, now 7,622, through muparser: 99 and
    # 96 s under ASan at 67b158c, 195 of the step's 1,835 CPU seconds; the
    # same code runs here for the other families and in kernels_test), as in
    # `autotune plan`'s tests of whole manifests (153 and 31 s under ASan at
    # 0d5211f; the plan's other tests run here).
    # Also left out, run by the Release tests only: the longest waits and
    # choreographies, whose daemon code the other tests here drive too
    # (98, 88, 70, 62, 60, 43 and 40 s here at 47de23c, a fifth of the
    # step's 2,469 test-seconds): a job resumed after a crash
    # (the resume tests after kills stay), a compile past its deadline,
    # `tune --local` end to end, the Python client's tests (the same RPCs
    # as the C++ end-to-end tests) and the two Chromium pages (the HTTP API
    # is fuzzed and tested here). And the refusals of oversized requests,
    # whose cost is parsing and counting megabytes in code the other tests
    # here run on small inputs (112, 34, 33 and 27 s here at 78b5ed4): a
    # manifest of a million problems, the problem limit by arithmetic, a
    # job of millions of values, a BatchLookup of 100,000 misses. And the
    # daemon killed over and over on four databases (CrashShardTest: 351 of
    # the step's 3,014 test-seconds at fbc7f6e, 24 kills): the Release
    # tests kill it 100 times; here the workers killed mid-compile and
    # mid-measurement (CrashTest) and the resumes after a kill stay.
    select=(-E '^(downstream_find_package|kernels\.Builtin/BuiltinFamilyTest\.((EveryDistinctVariantCompilesForItsManifestsArch|PassesTheCompileCheckOfRegister)/.*|(EveryDefaultProblemHasEnoughValidConfigs|TheDefaultConfigIsValidForEveryDefaultProblem)/gemm_bf16 .*)|kernels\.GemmBf16Test\.TheWgmmaPathIsOnlyForSm90aAndCompilesThere|client\.ModelPlanTest\.(EveryWrittenManifestLoadsAndExpandsToItsProblems|NothingLeftIsAnError)|docs\.ExampleFamilyTest\.EveryVariantTheManifestPlansCompiles|python_client|reliability\.FourDaemons/CrashShardTest\..*|e2e\.CostSecurityTest\.(AManifestOfAMillionProblemsIsRefusedByItsCount|ABatchOfAHundredThousandMissesStopsAtItsCpuBudget)|JobPlanTest\.TheProblemLimitIsKeptByArithmeticShardedOrNot|reliability\.HostileRpcTest\.AJobOfMillionsOfProblemsOrValuesIsRefusedAtOnce|e2e\.ResumeEndToEndTest\.AJobCutShortByACrashIsFinishedAfterTheRestart|e2e\.WarmupEndToEndTest\.(ACompilePastItsDeadlineIsATimeoutAndIsNotCached|TuneLocalTunesTheFamiliesOfAFolderOnAPrivateDaemon)|e2e\.WebEndToEndTest\.(TheReportAndTheAdminPageRenderInChromium|TheAdminPageFollowsARunningJob))$')
    ;;
  thread)
    dir=build-tsan
    configure=(-DAUTOTUNE_SANITIZE=thread)
    targets=(tsan_tests)
    # Left out: a 64 MiB cubin refused at the compile cache's limit, one
    # unit in one thread, whose cost is copying megabytes (70 of the step's
    # 791 test-seconds at a8dc8ff); the Release and ASan tests run it.
    select=(-L '^tsan$' -E '^CompilePhaseTest\.ACubinOverTheLimitIsACompileErrorSayingSoAndIsNotKept$')
    ;;
  *)
    echo "usage: .ci/sanitize.sh [address|thread]" >&2
    exit 2
    ;;
esac

if [[ "$step" != test ]]; then
  mkdir -p "$dir"
  node_modules=()
  if [[ -d build/web/npm/node_modules/d3 ]]; then
    node_modules=(-DAUTOTUNE_NODE_MODULES="$PWD/build/web/npm/node_modules")
  fi
  # CMake takes CMAKE_GENERATOR only for a new tree; an existing one keeps its own.
  command -v ninja >/dev/null 2>&1 && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld \
    -DAUTOTUNE_EXTRAS=OFF "${node_modules[@]}" "${configure[@]}" > "$dir/configure.log"
  cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}"
fi
[[ "$step" == build ]] && exit 0

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$suppressions/lsan.txt:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$suppressions/tsan.txt"
ctest --test-dir "$dir" --output-on-failure -j"${CTEST_JOBS:-4}" --timeout 600 -LE gpu "${select[@]}"
