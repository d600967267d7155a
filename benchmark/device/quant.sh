#!/usr/bin/env bash
# Device call (FP8 / FP4 weights): the quantization GPU tests, FP8 GEMM and FP4 MoE kernel timings
# vs bf16 and the copy-bandwidth roofline, flash-8l-32e bf16 vs FP8/FP4 decode / prefill, flash-43l
# decode / prefill, runtime-vs-HF accuracy on dequantized weights, a decode tile sweep.
#   run(command="bash benchmark/device/quant.sh", carry=[".whl"], timeout_s=600)
# Outputs in $OUT: quant_bench.{md,json}, pytest_quant_gpu.log, run.log.
# CPU check of the driver first (a few minutes, no GPU):
#   python benchmark/bench_quant.py --out /tmp/q --device cpu --dry-run
set -u
BUDGET_S=${BUDGET_S:-480}
source benchmark/device/common.sh
python3 benchmark/bench_quant.py --out "$OUT" --budget-s $(( $(left) - 20 )) ${QUANT_ARGS:-} 2>&1 | tee "$OUT/run.log"
tail -40 "$OUT/quant_bench.md"
