#!/usr/bin/env bash
# Tuning jobs on the GPU machine, measured end to end with the bundled
# daemon and CLI (bundle/gpu from `bash tests/gpu/run.sh bundle`):
#
#   bash bench/run_tuning_bench.sh fixture [MANIFEST] [RUNS]
#       RUNS cold warmups of MANIFEST (default kernels/builtin/gla_decode.manifest, 1),
#       each on a fresh database, then a rerun on the last one (steady
#       state: everything cached). Prints each run's wall time and report;
#       with RUNS > 1 compares the choices (bench/tuning_compare.py
#       stability). RETUNE=1 adds a --retune of the last database to the
#       comparison. SCREENS=1 keeps each cold run's screens (save_screens)
#       and compares them across the runs (tuning_compare.py screens: how
#       far one variant's screen moves from run to run, and whether each
#       run's choice was screened and a serial candidate in the others). AB=1 then times each choice of the last database
#       against its runner-up, long and interleaved (autotune-bench-ab;
#       AB_FLAGS adds flags), into ab.md and ab.json.
#   bash bench/run_tuning_bench.sh grow [MANIFEST]
#       A family that gains a parameter value: a cold warmup of MANIFEST
#       (default kernels/builtin/gla_decode.manifest), then gla_decode registered
#       again with UNROLL=8 added (a version that differs only in its search
#       space) and warmed up on the same database: only the new variants are
#       screened, the others carried. For comparison a cold warmup of the
#       grown family on a fresh database. Prints the wall times and counts;
#       fails when nothing was carried or the choices of the two grown runs
#       disagree beyond a declared tie (tuning_compare.py stability).
#   bash bench/run_tuning_bench.sh manifests MANIFEST...
#       One cold warmup of each manifest, each on a fresh database; every
#       problem's measurements (`autotune show --json`) are kept under
#       screens/ of the archive, for bench/search_replay.cc.
#   bash bench/run_tuning_bench.sh ahead MANIFEST...
#       Compiling ahead (autotuned --compile-ahead) off and on, side by
#       side: each manifest cold on a fresh database with --compile-ahead 0,
#       then with the default, then off and on again (AHEAD_PASSES times,
#       default 2). Prints each run's wall
#       time, its phases and how many variants were compiled ahead and used.
#   bash bench/run_tuning_bench.sh quality [MANIFEST]
#       An oracle job (every valid variant of each problem, up to 256, timed
#       in one serial phase of up to 20 s) and a normal warmup, each on a
#       fresh database; compares the normal choices with the oracle
#       (tuning_compare.py oracle). Then, with PyTorch on the machine, the
#       contention runs against the same oracle: a foreign load
#       (bench/gpu_load.py, LOAD_SECONDS, default 45) from the start of the
#       job, past its screen (the serial phase must wait for it, and the
#       choices stay within 2 % of the oracle); the load
#       throughout with --force (entries CONTENDED); the load throughout
#       with a short --quiet-wait (the problems fail, naming the load).
#       MANIFEST defaults to bench/oracle.manifest.
#
# Reports (--json, --report-md, --report-csv of each warmup) and daemon logs
# go into one archive, $OUT/tuning-<mode>.tar.gz ($OUT default
# bundle/gpu/out). Exits non-zero when a warmup that should succeed fails or
# a comparison does not hold.
set -euo pipefail
bundle=$(cd "${AUTOTUNE_BUNDLE:-bundle/gpu}" && pwd)
final_out=${OUT:-$bundle/out}
mkdir -p "$final_out"
final_out=$(cd "$final_out" && pwd)
dir=$(mktemp -d)
out=$dir/reports
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
declare -A pids=()
stop_daemon() {
  local name=$1
  if [[ -n "${pids[$name]:-}" ]]; then
    kill "${pids[$name]}" 2>/dev/null || true
    wait "${pids[$name]}" 2>/dev/null || true
    unset "pids[$name]"
  fi
}
cleanup() {
  local name
  for name in "${!pids[@]}"; do stop_daemon "$name"; done
  [[ -n "${load_pid:-}" ]] && kill "$load_pid" 2>/dev/null
  tar -czf "$final_out/tuning-${mode:-none}.tar.gz" -C "$dir" reports 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' TERM

cli() {
  local name=$1
  shift
  "$bundle/autotune" --server "unix://$dir/$name.sock" "$@"
}

# start_daemon NAME [FLAGS...]: a daemon on a fresh database NAME.db, answering before
# this returns. Its HTTP port (loopback, readers without a token) serves the
# admin API that http_get reads.
start_daemon() {
  local name=$1
  shift
  "$bundle/autotuned" --db "$dir/$name.db" --listen "unix://$dir/$name.sock" \
    --kernels none --kernels "$bundle/kernels" --worker "$bundle/autotune-worker" \
    --http-listen 127.0.0.1:0 --anonymous-role reader "$@" >>"$out/$name-daemon.log" 2>&1 &
  pids[$name]=$!
  for _ in $(seq 150); do
    cli "$name" stats >/dev/null 2>&1 && return 0
    if ! kill -0 "${pids[$name]}" 2>/dev/null; then
      echo "daemon $name exited before it answered; its log:" >&2
      tail -20 "$out/$name-daemon.log" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "daemon $name did not answer; its log:" >&2
  tail -20 "$out/$name-daemon.log" >&2
  return 1
}

# http_get NAME PATH: GET PATH on daemon NAME's HTTP port, to stdout.
http_get() {
  local port
  port=$(sed -n 's|.*served on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$out/$1-daemon.log" | tail -1)
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
    "http://127.0.0.1:$port$2"
}

# warmup NAME LABEL MANIFEST [FLAGS...]: one warmup; its job as JSON in
# LABEL.json, its reports in LABEL.md and LABEL.csv, progress in LABEL.log.
# Prints the wall time; returns the CLI's exit status.
warmup() {
  local name=$1 label=$2 manifest=$3
  shift 3
  local start=$SECONDS rc=0
  cli "$name" warmup "$manifest" --json --report-md "$out/$label.md" --report-csv "$out/$label.csv" --report-html "$out/$label.html" \
    "$@" >"$out/$label.json" 2>"$out/$label.log" || rc=$?
  echo "== $label: $manifest ${*:-} -> exit $rc, $((SECONDS - start)) s wall"
  grep -E '^job ' "$out/$label.log" | tail -1 || true
  # The report's summary lines: statuses, search, where the screen's time went, phases.
  sed -n 's/^- \(variants\|search\|screen\|time\): /\1: /p' "$out/$label.md" 2>/dev/null || true
  return $rc
}

show_report() {
  [[ -f "$out/$1.md" ]] && sed -n '1,60p' "$out/$1.md"
}

fixture() {
  local manifest=${1:-$bundle/kernels/gla_decode.manifest} runs=${2:-1} run failed=0
  local jobs=()
  for run in $(seq "$runs"); do
    start_daemon "fixture$run"
    warmup "fixture$run" "fixture-cold-$run" "$manifest" || failed=1
    jobs+=("$out/fixture-cold-$run.json")
    [[ "${SCREENS:-0}" == 1 ]] && { save_screens "fixture$run" "fixture-cold-$run" || failed=1; }
    if ((run == runs)); then
      warmup "fixture$run" "fixture-rerun" "$manifest" || failed=1
      show_report "fixture-cold-$run"
      if [[ "${RETUNE:-0}" == 1 ]]; then
        # Measured again over the last run's entries: the hysteresis keeps
        # them unless beaten beyond the band.
        warmup "fixture$run" "fixture-retune" "$manifest" --retune || failed=1
        jobs+=("$out/fixture-retune.json")
      fi
    fi
    stop_daemon "fixture$run"
  done
  if ((runs > 1)); then
    python3 "$(dirname "$0")/tuning_compare.py" stability "${jobs[@]}" || failed=1
    if [[ "${SCREENS:-0}" == 1 ]]; then
      local screen_dirs=()
      for run in $(seq "$runs"); do screen_dirs+=("$out/screens/fixture-cold-$run"); done
      python3 "$(dirname "$0")/tuning_compare.py" screens "${screen_dirs[@]}" || failed=1
    fi
  fi
  if [[ "${AB:-0}" == 1 ]]; then
    # The last database's choices against their runners-up, long and
    # interleaved, in fresh worker processes (its daemon has stopped).
    echo "== A/B: the choices of fixture$runs against their runners-up"
    local ab_flags=()
    read -r -a ab_flags <<<"${AB_FLAGS:-}"
    "$bundle/autotune-bench-ab" --db "$dir/fixture$runs.db" --worker "$bundle/autotune-worker" \
      --json "$out/ab.json" "${ab_flags[@]}" 2>"$out/ab.log" | tee "$out/ab.md" || failed=1
  fi
  return $failed
}

quality() {
  local manifest=${1:-bench/oracle.manifest} failed=0
  local compare
  compare=$(dirname "$0")/tuning_compare.py
  start_daemon oracle
  warmup oracle oracle "$manifest" --candidates 256 --candidate-band 10 --serial-noise 0.001 --serial-max 20 || failed=1
  start_daemon chosen
  warmup chosen chosen "$manifest" || failed=1
  stop_daemon chosen
  show_report chosen
  python3 "$compare" oracle "$out/chosen.json" --cli "$bundle/autotune --server unix://$dir/oracle.sock" \
    --save "$out/oracle-medians.json" || failed=1
  cp "$out/oracle-medians.json" "$final_out/"

  if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "contention runs skipped: no PyTorch with CUDA here"
    return $failed
  fi
  local load_log=$out/gpu_load.log
  # 1. The load during the screen: the serial phase waits for it.
  start_daemon loaded
  python3 "$(dirname "$0")/gpu_load.py" --seconds "${LOAD_SECONDS:-45}" >"$load_log" 2>&1 &
  load_pid=$!
  for _ in $(seq 100); do grep -q 'gpu_load pid' "$load_log" && break; sleep 0.2; done
  echo "load: $(head -1 "$load_log")"
  warmup loaded contention-screen "$manifest" || failed=1
  wait "$load_pid" || true
  load_pid=
  stop_daemon loaded
  python3 "$compare" contention "$out/contention-screen.json" --expect-waited || failed=1
  python3 "$compare" oracle "$out/contention-screen.json" --medians "$out/oracle-medians.json" ||
    failed=1

  # 2. The load throughout, --force: CONTENDED entries that say what was seen.
  start_daemon forced
  python3 "$(dirname "$0")/gpu_load.py" --seconds 600 >"$load_log" 2>&1 &
  load_pid=$!
  for _ in $(seq 100); do grep -q 'gpu_load pid' "$load_log" && break; sleep 0.2; done
  warmup forced contention-force "$manifest" --force || failed=1
  python3 "$compare" contention "$out/contention-force.json" --expect-contended || failed=1
  stop_daemon forced

  # 3. The load throughout, a short wait and no --force: the problems fail.
  start_daemon waiting
  if warmup waiting contention-wait "$manifest" --quiet-wait 5; then
    echo "contention-wait: the warmup succeeded although the GPU was never quiet" >&2
    failed=1
  else
    echo "contention-wait: $(grep -m1 -o 'not quiet for the serial phase[^;]*' "$out/contention-wait.json" || echo 'no such error')"
  fi
  stop_daemon waiting
  kill "$load_pid" 2>/dev/null || true
  wait "$load_pid" 2>/dev/null || true
  load_pid=
  return $failed
}

grow() {
  local manifest=${1:-$bundle/kernels/gla_decode.manifest} failed=0
  local grown=$dir/grown
  mkdir -p "$grown"
  cp "$bundle/kernels/gla_decode.cu" "$grown/"
  sed 's/^params { name: "UNROLL" values: \[1, 2, 4\] }/params { name: "UNROLL" values: [1, 2, 4, 8] }/' \
    "$bundle/kernels/gla_decode.textproto" >"$grown/gla_decode.textproto"
  grep -q 'values: \[1, 2, 4, 8\]' "$grown/gla_decode.textproto" || {
    echo "grow: the UNROLL line of gla_decode.textproto was not found" >&2
    return 1
  }
  start_daemon grow
  warmup grow grow-before "$manifest" || failed=1
  cli grow register "$grown/gla_decode.textproto" --replace
  warmup grow grow-after "$manifest" || failed=1
  # What the admin page's device panel shows after a real serial phase.
  http_get grow /api/devices >"$out/grow-devices.json" && echo "devices: $(cat "$out/grow-devices.json")"
  stop_daemon grow
  start_daemon grown
  cli grown register "$grown/gla_decode.textproto" --replace
  warmup grown grow-cold "$manifest" || failed=1
  stop_daemon grown
  python3 - "$out/grow-before.json" "$out/grow-after.json" "$out/grow-cold.json" <<'PY' || failed=1
import json, sys
rows = []
for label, path in zip(["before", "after (carried)", "cold (grown)"], sys.argv[1:]):
    job = json.load(open(path))
    c, t = job.get("counts", {}), job.get("timing", {})
    rows.append((label, int(c.get("variants", 0)), int(c.get("measured", 0)),
                 int(c.get("carried", 0)), float(t.get("screen_s", 0)), float(t.get("serial_s", 0)),
                 float(t.get("elapsed_s", 0))))
print(f"{'run':<16} {'variants':>8} {'screened':>8} {'carried':>8} {'screen s':>8} {'serial s':>8} {'total s':>8}")
for r in rows:
    print(f"{r[0]:<16} {r[1]:>8} {r[2]:>8} {r[3]:>8} {r[4]:>8.1f} {r[5]:>8.1f} {r[6]:>8.1f}")
if rows[1][3] == 0:
    sys.exit("grow: the grown family's warmup carried no screen")
PY
  python3 "$(dirname "$0")/tuning_compare.py" stability "$out/grow-after.json" "$out/grow-cold.json" ||
    failed=1
  return $failed
}

# save_screens NAME LABEL: every measurement of each problem that job LABEL
# reported (`autotune show --json`: each variant's screen and the serial
# rounds), gzipped under screens/LABEL/: the data a search strategy is
# replayed against (autotune-search-replay convert).
save_screens() {
  local name=$1 label=$2 family dims dtype
  mkdir -p "$out/screens/$label"
  python3 - "$out/$label.json" >"$dir/$label.problems" <<'PY'
import json, sys
for report in json.load(open(sys.argv[1])).get("reports", []):
    problem = report["problem"]
    dims = ",".join(f"{k}={int(v)}" for k, v in sorted(problem.get("dims", {}).items()))
    print(report["family"], dims, problem["dtype"])
PY
  while read -r family dims dtype; do
    cli "$name" show "$family" --dims "$dims" --dtype "$dtype" --json |
      gzip >"$out/screens/$label/${family}_${dims//[=,]/_}_${dtype}.json.gz"
  done <"$dir/$label.problems"
  echo "screens of $(wc -l <"$dir/$label.problems") problems saved under screens/$label"
}

# One cold warmup of each manifest, then the next, each on a fresh database;
# the screens of every problem are kept (save_screens).
manifests() {
  local manifest failed=0 n=0 label
  for manifest in "$@"; do
    n=$((n + 1))
    label="manifest-$n-$(basename "$manifest" .manifest)"
    start_daemon "manifest$n"
    warmup "manifest$n" "$label" "$manifest" || failed=1
    save_screens "manifest$n" "$label" || failed=1
    stop_daemon "manifest$n"
  done
  return $failed
}

ahead() {
  local manifest failed=0 n=0 label flags pass
  for manifest in "$@"; do
    for pass in $(seq "${AHEAD_PASSES:-2}"); do
      for flags in "--compile-ahead=0" "--compile-ahead=2"; do
        n=$((n + 1))
        label="ahead-$n-$(basename "$manifest" .manifest)-${flags#--compile-ahead=}"
        start_daemon "ahead$n" "$flags"
        warmup "ahead$n" "$label" "$manifest" || failed=1
        grep -h "compiled ahead" "$out/$label.log" "$out/ahead$n-daemon.log" | tail -1 || true
        stop_daemon "ahead$n"
      done
    done
  done
  return $failed
}

mode=${1:-}
case "$mode" in
  fixture) shift; fixture "$@" ;;
  manifests) shift; manifests "$@" ;;
  ahead) shift; ahead "$@" ;;
  quality) shift; quality "$@" ;;
  grow) shift; grow "$@" ;;
  *) echo "usage: bash bench/run_tuning_bench.sh fixture|manifests|ahead|quality|grow [MANIFEST...] [RUNS]" >&2; exit 2 ;;
esac
