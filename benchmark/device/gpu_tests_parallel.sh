#!/usr/bin/env bash
# Every `gpu`-marked test in SHARDS parallel pytest processes (default 8: the device has 16 CPU
# cores, and most of a kernel test's time is its Triton compiles). The collected test ids are dealt
# round-robin to the shards, so each shard spans many files; Triton's on-disk cache is shared, so a
# kernel variant compiled by one shard is loaded by the others.
#   run(command="bash benchmark/device/gpu_tests_parallel.sh", carry=[".whl"], timeout_s=600)
# Output: $OUT/gpu_shard_K.log per shard and $OUT/gpu_tests_summary.txt. The cap per shard is
# GPU_TESTS_S (default: the call's budget left minus 20 s); pytest gets SIGINT at the cap, so it still
# prints its failures and counts.
set -u
BUDGET_S=${BUDGET_S:-560}
source benchmark/device/common.sh
set -f  # from here on: test ids hold [..], no globbing
shards=${SHARDS:-8}
ids=${OUT:-/tmp}/gpu_test_ids.txt
python3 -m pytest -q -m gpu --collect-only -p no:cacheprovider ${GPU_TEST_PATHS:-test} 2>/dev/null | grep "::" > "$ids"
echo "[$(el)s] collected $(wc -l < "$ids") gpu tests into $shards shards"
cap=${GPU_TESTS_S:-$(( $(left) - 20 ))}
pids=()
for k in $(seq 0 $(( shards - 1 ))); do
  awk -v k="$k" -v n="$shards" '(NR - 1) % n == k' "$ids" > "$ids.$k"
  [ -s "$ids.$k" ] || { echo "no tests ran (empty shard)" > "${OUT:-/tmp}/gpu_shard_$k.log"; continue; }
  # shellcheck disable=SC2046
  timeout -s INT -k 20 "$cap" python3 -m pytest -q -m gpu -rfEs -p no:cacheprovider \
    $(cat "$ids.$k") > "${OUT:-/tmp}/gpu_shard_$k.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "[$(el)s] END gpu_tests_parallel"
for k in $(seq 0 $(( shards - 1 ))); do
  echo "shard $k: $(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped)|no tests ran' "${OUT:-/tmp}/gpu_shard_$k.log" | tail -1)"
done | tee "${OUT:-/tmp}/gpu_tests_summary.txt"
grep -h -E "^(FAILED|ERROR)" $(set +f; echo "${OUT:-/tmp}"/gpu_shard_*.log) | sort | uniq | head -40 | tee -a "${OUT:-/tmp}/gpu_tests_summary.txt"
