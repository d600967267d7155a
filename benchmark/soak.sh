#!/usr/bin/env bash
# A longer soak of the real server on the embedded model (CPU): test/test_soak.py with more phases.
#   bash benchmark/soak.sh [PHASES] [REQUESTS_PER_PHASE]     (defaults 20 and 260: 5,200 requests)
# Each phase is checked on its own (pools hold only the tree's pages once idle); at the end a sample
# of outputs is compared with a --disable-radix-cache server and RSS growth is bounded from the
# second phase on. The numbers (requests, aborts, retractions, evictions, RSS per phase) are
# printed at the end; the log is also written to ${OUT:-/tmp/soak_out}/soak.log.
set -u
OUT=${OUT:-/tmp/soak_out}
mkdir -p "$OUT"
export SGLANG_V4_SOAK_PHASES=${1:-20} SGLANG_V4_SOAK_REQUESTS_PER_PHASE=${2:-260}
python3 -m pytest -q -s -p no:cacheprovider -m slow test/test_soak.py \
  2>&1 | tee "$OUT/soak.log"
exit "${PIPESTATUS[0]}"
