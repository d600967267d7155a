#!/usr/bin/env bash
# One device call on a two-GPU machine: two queues of device scripts run side by side, one queue
# pinned to each GPU (CUDA_VISIBLE_DEVICES), after the carried wheels are installed once. Each
# script writes into $OUT/<script name>/ and gets the budget left to its queue.
#   run(command="GPU0='serving_overlap.sh' GPU1='quant.sh longctx.sh' bash benchmark/device/pair.sh",
#       kind="nvidia-h200-x2", carry=[".whl"], timeout_s=600)
# PAIR_BUDGET_S (default 560) bounds each queue; per-script env goes through as usual. A script gets
# the queue's time left minus 25 s as its own BUDGET_S (so it ends by itself and writes its
# report) and is stopped 5 s before the queue's end. The device returns at most 8 files: $OUT ends
# with pair.log, pair.tgz (everything) and each script's *.md reports copied flat.
set -u
PAIR_BUDGET_S=${PAIR_BUDGET_S:-560}
OUT=${OUT:-/tmp/pair_out}
mkdir -p "$OUT"
source benchmark/device/common.sh
export SKIP_WHEELS=1
queue() {
  local gpu=$1; shift
  local t0; t0=$(date +%s)
  for s in "$@"; do
    local left=$(( PAIR_BUDGET_S - ($(date +%s) - T0) ))
    (( left < 30 )) && { echo "[gpu$gpu] SKIP $s (budget)"; continue; }
    mkdir -p "$OUT/${s%.sh}"
    echo "[gpu$gpu +$(( $(date +%s) - t0 ))s] START $s (budget ${left}s)"
    CUDA_VISIBLE_DEVICES=$gpu OUT="$OUT/${s%.sh}" BUDGET_S=$(( left - 25 )) timeout -s INT -k 5 $(( left - 5 )) \
      bash "benchmark/device/$s" > "$OUT/${s%.sh}/stdout.log" 2>&1
    echo "[gpu$gpu +$(( $(date +%s) - t0 ))s] END $s rc=$?"
  done
}
# shellcheck disable=SC2086
queue 0 ${GPU0:-} > "$OUT/gpu0.log" 2>&1 &
# shellcheck disable=SC2086
queue 1 ${GPU1:-} > "$OUT/gpu1.log" 2>&1 &
wait
cat "$OUT/gpu0.log" "$OUT/gpu1.log" > "$OUT/pair.log"
for d in "$OUT"/*/; do echo "== $d"; tail -5 "$d/stdout.log"; done | tee -a "$OUT/pair.log"
tar czf /tmp/pair.tgz -C "$OUT" . && mkdir -p /tmp/pair_full && mv "$OUT"/* /tmp/pair_full/
mv /tmp/pair.tgz "$OUT/pair.tgz" && cp /tmp/pair_full/pair.log "$OUT/"
for f in /tmp/pair_full/*/*.md; do [ -f "$f" ] && cp "$f" "$OUT/$(basename "$(dirname "$f")")-$(basename "$f")"; done
ls -la "$OUT"
