#!/usr/bin/env bash
# Device call: the decode-kernel sweeps of one H200, each against the old default in the same run
# and the copy roofline measured by the script itself: FP4 MoE pair-mode variants, FP8 w8a16 tiles,
# attention split counts, mHC pre/post, indexer top-k at short contexts; FP8 w8a8_fused vs w8a16 at 1-64 tokens.
#   run(command="bash benchmark/device/decode_sweeps.sh", carry=[".whl"], timeout_s=600)
# Outputs in $OUT: each sweep's md, sweeps.tgz (md + json of all), run.log. SWEEPS picks a subset.
set -u
BUDGET_S=${BUDGET_S:-550}
OUT=${OUT:-/tmp/decode_sweeps_out}
mkdir -p "$OUT"
W=/tmp/sweeps; rm -rf $W; mkdir -p $W
finish() { cp $W/*/*.md "$OUT/" 2>/dev/null; tar czf "$OUT/sweeps.tgz" -C $W . 2>/dev/null; }
trap finish EXIT
source benchmark/device/common.sh
exec > >(tee -a "$OUT/run.log") 2>&1
SWEEPS=${SWEEPS:-"moe_fp4 mhc fp8_linear attention_split indexer_short"}
for s in $SWEEPS; do
  case $s in
    moe_fp4) step moe_fp4 240 python3 benchmark/moe_fp4_sweep.py --out $W/moe_fp4 ;;
    fp8_linear) step fp8_linear 200 python3 benchmark/fp8_linear_sweep.py --out $W/fp8_linear ;;
    attention_split) step attention_split 90 python3 benchmark/attention_split_sweep.py --out $W/attention_split ;;
    mhc) step mhc 80 python3 benchmark/mhc_sweep.py --out $W/mhc ;;
    indexer_short) step indexer_short 80 python3 benchmark/indexer_short_sweep.py --out $W/indexer_short ;;
  esac
done
echo "[$(el)s] done"
