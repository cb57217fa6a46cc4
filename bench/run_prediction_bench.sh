#!/usr/bin/env bash
# PREDICTED answers held out, on the GPU machine. The bundled daemon (a
# fresh database) tunes bench/predict_train.manifest; then every problem of
# bench/predict_heldout.manifest (none tuned, none with a NEAREST answer) is
# looked up on this GPU until its family's model is learned, and each answer
# kept; then the held-out problems are tuned themselves, and
# bench/predict_heldout.py scores each answer's config by the problem's own
# screen (the model search screens the winners of tuned problems first, so
# a predicted config is timed there): best median / its median, with the
# family's default config beside it.
#
#   bash bench/run_prediction_bench.sh
#
# Needs bundle/gpu (`bash tests/gpu/run.sh bundle`), nvidia-smi, and python3
# with protobuf and the generated client/python/autotune_client/autotune_pb2.py.
# Writes predict_*.log/json, answers/ and shows/ under $OUT (default
# bundle/gpu/out). Exits non-zero when a warmup or a lookup fails.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=${AUTOTUNE_BUNDLE:-bundle/gpu}
out=${OUT:-$bundle/out}
mkdir -p "$out/answers" "$out/shows"
# shellcheck source=bench/bundled_daemon.sh
source "$repo/bench/bundled_daemon.sh"
daemon_start "$daemon_dir/cache.db" "$out/predict_daemon.log"
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
problems() { python3 "$repo/bench/predict_heldout.py" problems "$1"; }

start=$SECONDS
if ! "${cli[@]}" warmup "$repo/bench/predict_train.manifest" --json >"$out/predict_train.json" \
    2>"$out/predict_train.log"; then
  tail -30 "$out/predict_train.log"
  exit 1
fi
echo "trained: $(problems "$repo/bench/predict_train.manifest" | wc -l) problems tuned in $((SECONDS - start)) s on $device"

# Lookups until no answer says its model is still being learned (60 s at most).
lookup_all() {
  local learning=0 family dims dtype name
  while read -r family dims dtype; do
    name=$family"_"$(tr '=,' '__' <<<"$dims" | tr ' ' '_')
    "${cli[@]}" lookup "$family" --dims "$dims" --dtype "$dtype" --device "$device" --json \
      >"$out/answers/$name.json"
    grep -q "being learned" "$out/answers/$name.json" && learning=$((learning + 1))
  done < <(problems "$repo/bench/predict_heldout.manifest")
  echo "$learning"
}
start=$SECONDS
for _ in $(seq 30); do
  [[ "$(lookup_all)" == 0 ]] && break
  sleep 2
done
echo "looked up: $(grep -l '"PREDICTED"' "$out"/answers/*.json | wc -l) PREDICTED of $(ls "$out/answers" | wc -l) held-out problems ($((SECONDS - start)) s, models learned included)"

start=$SECONDS
if ! "${cli[@]}" warmup "$repo/bench/predict_heldout.manifest" --json >"$out/predict_heldout.json" \
    2>"$out/predict_heldout.log"; then
  tail -30 "$out/predict_heldout.log"
  exit 1
fi
echo "held-out problems tuned in $((SECONDS - start)) s"
while read -r family dims dtype; do
  name=$family"_"$(tr '=,' '__' <<<"$dims")
  "${cli[@]}" show "$family" --dims "$dims" --dtype "$dtype" --device "$device" --json \
    >"$out/shows/$name.json"
done < <(problems "$repo/bench/predict_heldout.manifest")
python3 "$repo/bench/predict_heldout.py" score "$out/answers" "$out/shows" "$out/predict_heldout.json"
