#!/usr/bin/env bash
# Device call (issue 12): the serving loop at device speed in one call of <= ~8 min on one H200:
# bench_serving TPOT at concurrency 1/16/32 (1k in, 512 out) next to the model runner's ms/step at
# the same batch sizes, the 10k-input concurrency-32 cell (p50/p99 TPOT), TTFT of the first 16
# requests after ready vs steady state, Triton compiles after ready, overlap scheduling on and off,
# and the prefix-cache workloads (radix cache on/off, no JIT warm-up pass). flash-8l-32e, dummy bf16.
#   run(command="bash benchmark/device/serving_overlap.sh", carry=[".whl"], timeout_s=600)
# Outputs in $OUT: summary.md, results.json, so.tgz (server logs, per-phase logs). Dry run on CPU
# (tiny sizes, embedded model, no wheels): DRY=1 SKIP_WHEELS=1 OUT=/tmp/so bash benchmark/device/serving_overlap.sh
set -u
BUDGET_S=${BUDGET_S:-480}
OUT=${OUT:-/tmp/serving_overlap_out}
mkdir -p "$OUT"
R=/tmp/so; rm -rf $R; mkdir -p $R
if [ -n "${DRY:-}" ]; then
  export SKIP_WHEELS=1
fi
source benchmark/device/common.sh
finish() { cp $R/summary.md $R/results.json "$OUT/" 2>/dev/null; tar czf "$OUT/so.tgz" -C /tmp so; }
trap finish EXIT
if [ -n "${DRY:-}" ]; then
  python3 benchmark/serving_overlap.py --dry --out $R --budget-s $(( $(left) - 15 )) ${SO_ARGS:-} 2>&1 | tee $R/run.log
else
  make_model_dir
  python3 benchmark/serving_overlap.py --out $R --model-path /tmp/m --budget-s $(( $(left) - 15 )) ${SO_ARGS:-} 2>&1 | tee $R/run.log
fi
