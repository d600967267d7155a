#!/usr/bin/env bash
# Every `gpu`-marked test in SHARDS parallel pytest processes (default 8: the device has 16 CPU
# cores, and most of a kernel test's time is its Triton compiles). The collected test ids are dealt
# round-robin to the shards, so each shard spans many files; Triton's on-disk cache is shared, so a
# kernel variant compiled by one shard is loaded by the others.
#   run(command="bash benchmark/device/gpu_tests_parallel.sh", carry=[".whl"], timeout_s=600)
# Output: $OUT/gpu_shards.log (every shard's log, in order) and $OUT/gpu_tests_summary.txt (a shard cut at the cap names
# the test it was running; a test past GPU_TEST_HANG_S, default 180 s, dumps its stacks into the log). The cap per shard is
# GPU_TESTS_S (default: the call's budget left minus 20 s); pytest gets SIGINT at the cap, so it still
# prints its failures and counts. The shards share the card's memory and none is capped, so a
# memory-heavy test can fail with a CUDA out-of-memory only because other shards hold the card: the
# tests that failed are run again, one process on the otherwise idle card, while at least
# RERUN_MIN_S (default 60) s of the budget are left (RERUN_FAILED=0 turns it off). The summary
# keeps both tallies: the parallel pass's, then the serial rerun's.
set -u
BUDGET_S=${BUDGET_S:-560}
source benchmark/device/common.sh
set -f  # from here on: test ids hold [..], no globbing
shards=${SHARDS:-8}
ids=/tmp/gpu_test_ids.txt  # not in $OUT: the call returns a few files only
python3 -m pytest -q -m gpu --collect-only -p no:cacheprovider ${GPU_TEST_PATHS:-test} 2>/dev/null | grep "::" > "$ids"
echo "[$(el)s] collected $(wc -l < "$ids") gpu tests into $shards shards"
cap=${GPU_TESTS_S:-$(( $(left) - 20 ))}
pids=()
for k in $(seq 0 $(( shards - 1 ))); do
  awk -v k="$k" -v n="$shards" '(NR - 1) % n == k' "$ids" > "$ids.$k"
  [ -s "$ids.$k" ] || { echo "no tests ran (empty shard)" > "${OUT:-/tmp}/gpu_shard_$k.log"; continue; }
  # shellcheck disable=SC2046
  # faulthandler_timeout: a test running longer than GPU_TEST_HANG_S dumps every thread's stack
  # into the shard's log (which test, and where it waits)
  # OMP_NUM_THREADS: the shards share 16 cores; torch's CPU references would otherwise each start
  # one thread per core and contend
  OMP_NUM_THREADS=${GPU_TEST_THREADS:-2} timeout -s INT -k 20 "$cap" python3 -m pytest -q -m gpu -rfEs -p no:cacheprovider \
    -o faulthandler_timeout="${GPU_TEST_HANG_S:-180}" \
    $(cat "$ids.$k") > "${OUT:-/tmp}/gpu_shard_$k.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "[$(el)s] END gpu_tests_parallel"
for k in $(seq 0 $(( shards - 1 ))); do
  log="${OUT:-/tmp}/gpu_shard_$k.log"
  tally=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped)|no tests ran' "$log" | tail -1)
  if [ -z "$tally" ]; then  # cut at the cap: how many results, and the test that was running
    n=$(grep -E '^[.FEsxX]+( +\[ *[0-9]+%\])?$' "$log" | sed -E 's/ +\[.*//' | tr -d '\n' | wc -c)
    tally="cut at the cap after $n results; running: $(sed -n "$(( n + 1 ))p" "$ids.$k")"
  fi
  echo "shard $k: $tally"
done | tee "${OUT:-/tmp}/gpu_tests_summary.txt"
grep -h -E "^(FAILED|ERROR)" $(set +f; echo "${OUT:-/tmp}"/gpu_shard_*.log) | sort | uniq | head -40 | tee -a "${OUT:-/tmp}/gpu_tests_summary.txt"
failed=/tmp/gpu_test_failed.txt
grep -h -E "^(FAILED|ERROR) " $(set +f; echo "${OUT:-/tmp}"/gpu_shard_*.log) | sed -E 's/^(FAILED|ERROR) //; s/ - .*//' | sort -u > "$failed"
if [ "${RERUN_FAILED:-1}" != 0 ] && [ -s "$failed" ] && (( $(left) > ${RERUN_MIN_S:-60} )); then
  echo "[$(el)s] serial rerun of $(wc -l < "$failed") failed tests, one process, the card otherwise idle" | tee -a "${OUT:-/tmp}/gpu_tests_summary.txt"
  # shellcheck disable=SC2046
  timeout -s INT -k 20 $(( $(left) - 15 )) python3 -m pytest -q -m gpu -rfEs -p no:cacheprovider \
    $(cat "$failed") > "${OUT:-/tmp}/gpu_rerun.log" 2>&1
  echo "serial rerun: $(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped)|no tests ran' "${OUT:-/tmp}/gpu_rerun.log" | tail -1)" | tee -a "${OUT:-/tmp}/gpu_tests_summary.txt"
  grep -E "^(FAILED|ERROR)" "${OUT:-/tmp}/gpu_rerun.log" | head -40 | tee -a "${OUT:-/tmp}/gpu_tests_summary.txt"
fi
# one file back instead of SHARDS (a call returns at most 8 files)
for k in $(seq 0 $(( shards - 1 ))); do
  echo "==== shard $k"; cat "${OUT:-/tmp}/gpu_shard_$k.log"; echo; rm -f "${OUT:-/tmp}/gpu_shard_$k.log"
done > "${OUT:-/tmp}/gpu_shards.log"
