#!/usr/bin/env bash
# Device call (issue 7): the prefix-cache on/off comparison alone, with --jit-warmup (each server runs
# each workload once on other prompts before the measured run). Outputs in $OUT.
#   run(command="bash benchmark/device/prefix_cache.sh", carry=[".whl"], timeout_s=270)
set -u
BUDGET_S=${BUDGET_S:-250}
source benchmark/device/common.sh
make_model_dir
step prefix_cache 235 python3 benchmark/prefix_cache.py --launch --jit-warmup \
  --server-args "--model-path /tmp/m --load-format dummy --device ${DEVICE:-cuda} --enable-cache-report" \
  --server-timeout 100 --max-concurrency 16 --gsp-num-groups 16 --gsp-system-prompt-len 4096 \
  --mt-conversations 16 --mt-system-len 2048 --title "H200 flash-8l-32e bf16, JIT warm-up" --out-dir "$OUT"
