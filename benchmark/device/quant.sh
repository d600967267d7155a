#!/usr/bin/env bash
# Device call (FP8 / FP4 weights): the quantization GPU tests, FP8 GEMM and FP4 MoE kernel timings
# vs bf16 and the copy-bandwidth roofline, flash-8l-32e bf16 vs FP8/FP4 decode / prefill, flash-43l
# decode / prefill, runtime-vs-HF accuracy on dequantized weights, a decode tile sweep.
#   run(command="bash benchmark/device/quant.sh", carry=[".whl"], timeout_s=600)
# Quick mode (about 3 minutes: the FP8 tests that failed on the first H200 run, the packed-register
# decode checks, every FP8 projection at bs 1, the FP4 MoE at bs 1..8192, the q_b / o_b crossover):
#   run(command="QUANT_ARGS=--quick BUDGET_S=190 bash benchmark/device/quant.sh", carry=[".whl"], timeout_s=240)
# Outputs in $OUT: quant_bench.{md,json}, pytest_quant_gpu.log, run.log.
# CPU check of the driver first (a few minutes, no GPU):
#   python benchmark/bench_quant.py --out /tmp/q --device cpu --dry-run [--quick]
set -u
BUDGET_S=${BUDGET_S:-480}
source benchmark/device/common.sh
# The driver plans its phases within --budget-s and saves the report after each one; the hard stop
# (SIGINT, so the report of the finished phases stays) keeps the call within BUDGET_S regardless.
timeout -s INT -k 10 $(( $(left) - 8 )) \
  python3 benchmark/bench_quant.py --out "$OUT" --budget-s $(( $(left) - 20 )) ${QUANT_ARGS:-} 2>&1 | tee "$OUT/run.log"
tail -40 "$OUT/quant_bench.md"
