#!/usr/bin/env bash
# autotune-search-replay end to end on a small problem (bench/testdata/search):
# `autotune show --json` output converted to a screens file, then searches
# whose outcome is known run over it.
#
#   bash bench/search_replay_test.sh REPLAY_BINARY TESTDATA_DIR
set -euo pipefail
replay=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Seven screened configs (a serial measurement is not a screen): the best
# is BLOCK=64 ELEMS=2 at 10.0 µs (the faster WRONG_RESULT one does not count),
# BLOCK=512 is within 1%, the default BLOCK=256 ELEMS=1 8% behind.
"$replay" convert "$data/show.json" --default "BLOCK=256,ELEMS=1" >"$work/axpy.tsv"
diff -u "$data/axpy.tsv" "$work/axpy.tsv"

# Exhaustive measures everything: every run ends at the best.
"$replay" run "$work/axpy.tsv" --search exhaustive --seeds 2 --floor-within-1pct 1 >"$work/out"
grep -q "exhaustive .* 2/2 @" "$work/out" || { cat "$work/out"; exit 1; }

# Random with a budget of one measures only the default, 8% behind: no run
# reaches 1%, so any floor fails, and the gap is printed.
if "$replay" run "$work/axpy.tsv" --search random --max-variants 1 --seeds 3 \
    --floor-within-1pct 0.5 >"$work/out"; then
  echo "a search below its floor passed"; exit 1
fi
grep -q "0/3 .* 8.00%" "$work/out" || { cat "$work/out"; exit 1; }

# Each run's screen with its own noise, and the choice an error-free serial
# phase makes from the candidates that screen picks: with no noise every run
# chooses the best; with noise far above the gaps (8-20% between most
# configs here) and a single candidate, the runs disagree, which the floor
# on "same or tie" catches.
"$replay" run "$work/axpy.tsv" --search exhaustive --seeds 4 --noise 0 --floor-stable 1 \
  >"$work/out" || { cat "$work/out"; exit 1; }
grep -q " 4/4 *0.00% *0.00%$" "$work/out" || { cat "$work/out"; exit 1; }
if "$replay" run "$work/axpy.tsv" --search exhaustive --seeds 8 --noise 1 \
    --serial-candidates 1 --floor-stable 1 >"$work/out" 2>"$work/err"; then
  echo "runs that chose differently passed the stability floor"; cat "$work/out"; exit 1
fi
grep -q "same config or a tie fell below" "$work/err" || { cat "$work/err"; exit 1; }

# The floor on the model's quality, over real exhaustive screens of the
# GEMM family (five shapes, all 7,296 configs of each, on an H100): with 5%
# of the space, at least 6 of 8 seeds end within 1% of the exhaustive best at
# every shape. Set from 256 seeds a shape (bench/RESULTS.md: 256 of 256
# within 1% at every shape since the coverage round, whose 95% intervals
# reach down to 98.5%): a change that leaves the search as good as it is,
# but draws other proposals, fails this less than once in 1,000 (8.5e-4
# over the five shapes at the low ends of the intervals); 7 of 8 would fail
# about once in 35.
"$replay" run "$data"/gemm_bf16_*.tsv --search model --fraction 0.05 --seeds 8 \
  --floor-within-1pct 0.75 >"$work/out" || { cat "$work/out"; exit 1; }
cat "$work/out"

# A plateau that single steps cannot leave (seed 198 at M=256: the model
# settles on the WGMMA=0 path, WN=4, 37.6% from the best, and the best's
# counterpart on the TMA path needs WN=1 too): the coverage round before the
# search stops moves the best to every other value of each parameter, the
# fewest other parameters changed, and the search ends at the best.
"$replay" run "$data"/gemm_bf16_K_4096_M_256_N_4096.tsv --search model --fraction 0.05 \
  --first-seed 198 --seeds 1 --floor-within-1pct 1 >"$work/out" || { cat "$work/out"; exit 1; }

# With the launch features (blocks, waves, ... from the family's launch
# expressions) the model still ends within 1% (RESULTS.md: no gain, so jobs
# do not pass them; the replay keeps the option to measure them again).
"$replay" run "$data"/gemm_bf16_K_4096_M_16_N_4096.tsv --search model --fraction 0.05 --seeds 2 \
  --derived-sms 132 --floor-within-1pct 0.5 >"$work/out" || { cat "$work/out"; exit 1; }

# The small built-in spaces, real H200 screens too (rmsnorm and softmax: 48
# to 62 variants a problem; gla_decode: 93 to 103): with half the space the
# model ends within 1% of the exhaustive best in at least 4 of 8 seeds of
# every problem (exhaustive stays their default: at 30% the model's first
# random sample is most of the budget).
"$replay" run "$data"/rmsnorm/*.tsv "$data"/softmax/*.tsv "$data"/gla_decode/*.tsv \
  --search model --fraction 0.5 --seeds 8 --floor-within-1pct 0.5 >"$work/out" ||
  { cat "$work/out"; exit 1; }

# Bad input is refused, naming it.
printf 'BLOCK\tELEMS\tstatus\tmedian_us\n64\tx\tOK\t1.0\n' >"$work/bad.tsv"
if "$replay" run "$work/bad.tsv" 2>"$work/err"; then echo "a bad file passed"; exit 1; fi
grep -q "bad.tsv:2: 'x'" "$work/err" || { cat "$work/err"; exit 1; }
echo "search replay: ok"
