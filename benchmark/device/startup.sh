#!/usr/bin/env bash
# Server start-up on the GPU with the backend processes prewarmed and not (benchmark/startup_time.py),
# after the CUDA server test; PRESET (default flash-8l-32e) with dummy weights.
#   run(command="BUDGET_S=560 bash benchmark/device/startup.sh", carry=[".whl"], timeout_s=600)
# Output: $OUT/server_gpu.log, $OUT/startup.json
set -u
BUDGET_S=${BUDGET_S:-560}
source benchmark/device/common.sh
make_model_dir
gpu_tests server_gpu 200 test/test_server_gpu.py
step startup $(( $(left) - 5 )) python3 benchmark/startup_time.py --runs "${RUNS:-2}" --warmup-runs 1 \
  -- --model-path /tmp/m --load-format dummy --device cuda > "${OUT:-/tmp}/startup.json"
cat "${OUT:-/tmp}/startup.json"
