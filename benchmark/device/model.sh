#!/usr/bin/env bash
# Device call 1 (issue 6): whole-model GPU benchmark + end-to-end GPU correctness + the GPU tests of the
# CUDA runner and the CUDA server.
#   run(command="bash benchmark/device/model.sh", carry=[".whl"], timeout_s=600)
# Outputs in $OUT: model_bench.{json,md}, correctness.{json,log}, profile.txt, pytest_gpu.log, run.log,
# pytest_server_gpu.log.
set -u
BUDGET_S=${BUDGET_S:-565}
source benchmark/device/common.sh
python3 benchmark/bench_model.py --out "$OUT" --budget-s $(( $(left) - 110 )) 2>&1 | tee "$OUT/run.log"
# the CUDA server test (tiny default model, bf16, graphs captured at start-up)
step test_server_gpu 100 python3 -m pytest -q -p no:cacheprovider -m gpu test/test_server_gpu.py \
  > "$OUT/pytest_server_gpu.log" 2>&1
tail -3 "$OUT/pytest_server_gpu.log"
