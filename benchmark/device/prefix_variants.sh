#!/usr/bin/env bash
# Device call (issue 12): the sampler benchmark (three runs) and the prefix-cache workloads of
# serving_overlap.sh (8 groups x 8 prompts, 2,048-token system prompt; 8 multi-turn conversations;
# concurrency 16; no warm-up pass) under server-flag variants, each variant with its own radix
# on / off pair. Variants (space-separated, `|` joins the flags of one): $PC_VARIANTS, default
# "default --disable-overlap-schedule". Outputs in $OUT: sampler_run*.json, pc_<i>/ (results,
# summary, server logs), summary.md.
#   run(command="bash benchmark/device/prefix_variants.sh", carry=[".whl"], timeout_s=600)
set -u
BUDGET_S=${BUDGET_S:-560}
OUT=${OUT:-/tmp/prefix_variants_out}
mkdir -p "$OUT"
source benchmark/device/common.sh
make_model_dir
if [ -z "${SKIP_SAMPLER:-}" ]; then
  for i in 1 2 3; do
    step sampler_$i 60 python3 benchmark/bench_sampler.py --device cuda --reps 50 --out "$OUT/sampler_run$i.json"
  done
fi
i=0
for v in ${PC_VARIANTS:-default --disable-overlap-schedule}; do
  i=$((i + 1))
  flags=""; [ "$v" = default ] || flags="${v//|/ }"
  step "prefix_cache_$i ($v)" 200 python3 benchmark/prefix_cache.py --launch \
    --server-args "--model-path /tmp/m --load-format dummy $flags" --server-timeout 120 \
    --gsp-num-groups 8 --gsp-prompts-per-group 8 --gsp-system-prompt-len 2048 \
    --mt-conversations 8 --mt-system-len 2048 --max-concurrency 16 \
    --title "flash-8l-32e bf16, no warm-up pass, server flags: $v" --out-dir "$OUT/pc_$i"
  cat "$OUT/pc_$i/summary.md" >> "$OUT/summary.md" 2>/dev/null
done
