#!/usr/bin/env bash
# Device call 2 (issue 7): the server on flash-8l-32e (dummy bf16 weights) under bench_serving, the test
# matrix and the prefix-cache workloads. Everything lands in $OUT/serving.tgz (the $OUT file-count limit).
#   run(command="bash benchmark/device/serving.sh", carry=[".whl"], timeout_s=600)
set -u
BUDGET_S=${BUDGET_S:-560}
source benchmark/device/common.sh
R=/tmp/r; mkdir -p $R
finish() { cp $R/run.log "$OUT/" 2>/dev/null; tar czf "$OUT/serving.tgz" -C /tmp r; }
trap finish EXIT
exec > >(tee -a $R/run.log) 2>&1
make_model_dir
health() { python3 -c "import requests, sys; sys.exit(requests.get('http://127.0.0.1:30000/health', timeout=5).status_code != 200)" 2>/dev/null; }
SARGS="--model-path /tmp/m --load-format dummy --device ${DEVICE:-cuda} --enable-cache-report"
python3 -m sglang_v4.launch_server $SARGS --port 30000 > $R/server.log 2>&1 &
SPID=$!
for i in $(seq 1 150); do
  health && break
  kill -0 $SPID 2>/dev/null || break
  sleep 1
done
echo "[$(el)s] server healthy: $(health && echo yes || echo no)"
if health; then
  step bench_serving 70 python3 -m sglang_v4.bench_serving --backend sglang --port 30000 \
    --dataset-name random --random-input-len 1024 --random-output-len 256 --random-range-ratio 1.0 \
    --num-prompts 64 --max-concurrency 16 --warmup-requests 2 --seed 1 --output-file $R/bench_serving.jsonl
  step matrix 200 python3 benchmark/matrix.py --port 30000 --batch-sizes 1 8 32 --input-lens 1000 10000 \
    --output-lens 128 512 --prompts-per-concurrency 2 --knee-metric total_throughput \
    --title "H200 flash-8l-32e bf16 (dummy weights)" --out-dir $R/matrix
  step matrix100k 80 python3 benchmark/matrix.py --port 30000 --batch-sizes 1 2 --input-lens 100000 \
    --output-lens 128 --prompts-per-concurrency 1 --knee-metric total_throughput \
    --title "H200 flash-8l-32e bf16 100k" --out-dir $R/matrix100k
  python3 -c "import requests; print(requests.get('http://127.0.0.1:30000/server_info').text)" > $R/server_info.json
fi
kill $SPID; wait $SPID
step prefix_cache 190 python3 benchmark/prefix_cache.py --launch --server-args "$SARGS" --server-timeout 120 \
  --max-concurrency 16 --gsp-num-groups 16 --gsp-system-prompt-len 4096 --mt-conversations 16 --mt-system-len 2048 \
  --title "H200 flash-8l-32e bf16" --out-dir $R/prefix_cache
