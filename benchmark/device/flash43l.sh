#!/usr/bin/env bash
# Device call (issue 13): the flash-43l preset (V4-Flash's 43 layers, 160 experts) on one H200 with
# FP8 + FP4 dummy weights, fp8 KV + fp4 indexer keys, served: weight / KV bytes and KV capacity
# (the server log), bench_serving random 1024 in / 1024 out at concurrency 1 and 16, the decode
# ms/step of the scheduler log at batch 1, and tp_report.py rows next to SGLang's published
# V4-Flash H200 figures (TP 4, FP8).
#   run(command="bash benchmark/device/flash43l.sh", carry=[".whl"], timeout_s=600)
# Outputs in $OUT: flash43l_results.md, bench.jsonl, server.log (tail), run.log.
set -u
BUDGET_S=${BUDGET_S:-540}
OUT=${OUT:-/tmp/flash43l_out}
mkdir -p "$OUT"
source benchmark/device/common.sh
R=/tmp/f43; rm -rf $R; mkdir -p $R
finish() {
  cp $R/flash43l_results.md $R/bench.jsonl $R/run.log "$OUT/" 2>/dev/null
  tail -c 2000000 $R/server.log > "$OUT/server.log" 2>/dev/null
}
trap finish EXIT
exec > >(tee -a $R/run.log) 2>&1
export PRESET=flash-43l
ISL=${ISL:-1024} OSL=${OSL:-1024} CONCS=${CONCS:-"1 16"}
make_model_dir
health() { python3 -c "import requests, sys; sys.exit(requests.get('http://127.0.0.1:30000/health', timeout=5).status_code != 200)" 2>/dev/null; }
python3 -m sglang_v4.launch_server --model-path /tmp/m --load-format dummy --kv-cache-dtype fp8_e4m3 \
  --enable-fp4-indexer --enable-cache-report --decode-log-interval 4 --watchdog-timeout 600 --port 30000 \
  ${SERVER_EXTRA:-} >> $R/server.log 2>&1 &
SPID=$!
wait_s=$(( $(left) - 120 )); (( wait_s > 300 )) && wait_s=300
for i in $(seq 1 $wait_s); do health && break; kill -0 $SPID 2>/dev/null || break; sleep 1; done
echo "[$(el)s] server healthy: $(health && echo yes || echo no)"
grep -E "Weights:|weights .* KV pools|KV pool \(|max_total" $R/server.log | tail -6
if health; then
  for c in $CONCS; do
    step "bench_c$c" $(( c == 1 ? 60 : 150 )) python3 -m sglang_v4.bench_serving --backend sglang --port 30000 \
      --dataset-name random --random-input-len $ISL --random-output-len $OSL --random-range-ratio 1.0 \
      --num-prompts $c --max-concurrency $c --warmup-requests 1 --flush-cache --seed 1 --tag c$c \
      --output-file $R/bench.jsonl --disable-tqdm
  done
fi
kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
python3 benchmark/tp_report.py $R --gpus 1 --preset flash-43l --tp-size 1 --ep-size 1 \
  --title "flash-43l (43 layers, 160 experts) on one H200, FP8 + FP4 dummy weights, fp8 KV + fp4 indexer, ${ISL} in / ${OSL} out" \
  > $R/flash43l_results.md
cat $R/flash43l_results.md
echo "[$(el)s] done"
