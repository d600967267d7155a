#!/usr/bin/env bash
# Device call (multi-GPU run): full V4-Flash shapes (43 layers, 256 experts) on 2 x H200 with
# --tp-size 2 --ep-size 2, FP8 + FP4 weights (--load-format dummy), fp8 KV + fp4 indexer keys:
#   1. cross-check TP 2 vs one GPU at reduced depth (benchmark/tp_check.py, flash cut to 4 layers),
#      with bf16 KV (decode CUDA graphs capturing the NCCL collectives) and with fp8 KV;
#   2. the server: weight and KV bytes per GPU (its log), then bench_serving random 8192 in / 1024
#      out at concurrency 1, 16, 64 (decode ms/step at bs 1 from the scheduler log during c=1);
#   3. the prefix-cache workload (generated shared prefix) with the radix cache on, then off;
#   4. tp2_results.md: RESULTS.md rows next to SGLang's published H200 figures (benchmark/tp_report.py).
# One call, within BUDGET_S (default 390 s; every step is cut at the budget, the server's start-up
# wait too; the prefix-cache-off server only starts with 120 s left):
#   run(command="bash benchmark/device/tp2.sh", kind="nvidia-h200-x2", carry=[".whl"], timeout_s=480)
# Outputs in $OUT: tp2_results.md, tp_check.json, tp_check_fp8kv.json, bench.jsonl, server.log (tail),
# run.log, tp2.tgz.
# CPU dry run of the same script (tiny preset, --device cpu, TP 2, small cells; ~2 min on 2
# cores, its budget defaults to 900 s):
#   DRY=1 SKIP_WHEELS=1 OUT=/tmp/tp2 bash benchmark/device/tp2.sh
set -u
[ -n "${DRY:-}" ] && BUDGET_S=${BUDGET_S:-900}
BUDGET_S=${BUDGET_S:-390}
CHECK_S=70 CHECK2_S=50
OUT=${OUT:-/tmp/tp2_out}
mkdir -p "$OUT"
source benchmark/device/common.sh
R=/tmp/tp2r; rm -rf $R; mkdir -p $R
finish() {
  cp $R/tp2_results.md $R/tp_check.json $R/tp_check_fp8kv.json $R/bench.jsonl $R/run.log "$OUT/" 2>/dev/null
  tail -c 2000000 $R/server.log > "$OUT/server.log" 2>/dev/null
  tar czf "$OUT/tp2.tgz" -C /tmp tp2r 2>/dev/null
}
trap finish EXIT
exec > >(tee -a $R/run.log) 2>&1
if [ -n "${DRY:-}" ]; then
  export PRESET=tiny DEVICE=cpu ISL=128 OSL=8 CONCS="1 2" GSP="--gsp-num-groups 2 --gsp-prompts-per-group 2 --gsp-system-prompt-len 300 --gsp-question-len 16 --gsp-output-len 4"
  CHECK="--preset tiny --layers 0 --device cpu --prompts 2 --prompt-len 64 --new-tokens 4"
  # fp32 everywhere: TP 2 differs from one rank by summation order only (~5e-6). With fp8 KV a
  # difference that small can move a KV entry across an fp8 rounding step (3 mantissa bits), so
  # that check's bound is looser (measured on the CPU: 2e-4 with fp8 KV, 5e-6 with fp4 indexer
  # keys alone).
  LP_FP32="--max-lp-diff 1e-4" LP_FP8="--max-lp-diff 2e-3"
  SERVER_EXTRA="--page-size 128"
  CHECK_S=200 CHECK2_S=200  # CPU: each check is ~2 min
  TITLE="DRY RUN: tiny TP 2 / EP 2 (fp32 weights), fp8 KV + fp4 indexer, CPU"
else
  export PRESET=flash DEVICE=cuda ISL=8192 OSL=1024 CONCS="1 16 64" GSP="--gsp-num-groups 8 --gsp-prompts-per-group 4 --gsp-system-prompt-len 4096 --gsp-question-len 128 --gsp-output-len 64"
  CHECK="--preset flash --layers 4 --device cuda --prompts 2 --prompt-len 512 --new-tokens 16"
  SERVER_EXTRA=""
  TITLE="V4-Flash (43 layers, 256 experts) TP 2 / EP 2 on 2 x H200, FP8 + FP4 dummy weights, fp8 KV + fp4 indexer"
fi
echo "[$(el)s] PRESET=$PRESET DEVICE=$DEVICE ISL=$ISL OSL=$OSL CONCS=$CONCS"
make_model_dir
# bf16 KV: decode under CUDA graphs with the NCCL all-reduces captured; then fp8 KV + fp4 indexer
step tp_check $CHECK_S python3 benchmark/tp_check.py $CHECK ${LP_FP32:-} --tp-size 2 --ep-size 2 --out $R/tp_check.json
step tp_check_fp8kv $CHECK2_S python3 benchmark/tp_check.py $CHECK ${LP_FP8:-} --kv-cache-dtype fp8_e4m3 --enable-fp4-indexer \
  --tp-size 2 --ep-size 2 --out $R/tp_check_fp8kv.json
SARGS="--model-path /tmp/m --load-format dummy --device $DEVICE --tp-size 2 --ep-size 2 --kv-cache-dtype fp8_e4m3 \
--enable-fp4-indexer --enable-cache-report --decode-log-interval 4 --watchdog-timeout 600 $SERVER_EXTRA"
# A free port, not 30000: on a CPU machine that is where a quick-start server usually runs, and the
# benchmarks would measure it instead of this script's TP 2 server.
PORT=${PORT:-$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")}
# healthy = this script's server answers (its process alive), not whatever else holds the port
health() { kill -0 "${SPID:-none}" 2>/dev/null && python3 -c "import requests, sys; sys.exit(requests.get('http://127.0.0.1:$PORT/health', timeout=5).status_code != 200)" 2>/dev/null; }
start_server() {  # extra flags...
  python3 -m sglang_v4.launch_server $SARGS "$@" --port $PORT >> $R/server.log 2>&1 &
  SPID=$!
  local i
  local wait_s=$(( $(left) - 40 )); (( wait_s > ${SERVER_WAIT_S:-240} )) && wait_s=${SERVER_WAIT_S:-240}
  for i in $(seq 1 $wait_s); do
    health && break
    kill -0 $SPID 2>/dev/null || break
    sleep 1
  done
  echo "[$(el)s] server healthy: $(health && echo yes || echo no)"
  grep -E "Weights:|weights .* KV pools|KV pool \(" $R/server.log | tail -6
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv
}
stop_server() { kill $SPID 2>/dev/null; wait $SPID 2>/dev/null; }
start_server
if health; then
  for c in $CONCS; do
    n=$c  # one wave per cell: the budget of one call
    step "bench_c$c" $(( c == 1 ? 50 : 90 )) python3 -m sglang_v4.bench_serving --backend sglang --port $PORT \
      --dataset-name random --random-input-len $ISL --random-output-len $OSL --random-range-ratio 1.0 \
      --num-prompts $n --max-concurrency $c --warmup-requests 1 --flush-cache --seed 1 --tag c$c \
      --output-file $R/bench.jsonl --disable-tqdm
  done
  step gsp_on 40 python3 -m sglang_v4.bench_serving --backend sglang --port $PORT --dataset-name generated-shared-prefix \
    $GSP --max-concurrency 16 --warmup-requests 1 --flush-cache --seed 1 --tag gsp-on --output-file $R/bench.jsonl --disable-tqdm
fi
stop_server
if (( $(left) > 120 )); then
  start_server --disable-radix-cache
  health && step gsp_off 40 python3 -m sglang_v4.bench_serving --backend sglang --port $PORT \
    --dataset-name generated-shared-prefix $GSP --max-concurrency 16 --warmup-requests 1 --seed 1 --tag gsp-off \
    --output-file $R/bench.jsonl --disable-tqdm
  stop_server
fi
python3 benchmark/tp_report.py $R --gpus 2 --preset $PRESET --tp-size 2 --ep-size 2 \
  --title "$TITLE" > $R/tp2_results.md
cat $R/tp2_results.md
echo "[$(el)s] done"
