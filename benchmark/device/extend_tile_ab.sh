#!/usr/bin/env bash
# Device calls for the kernel defaults adopted from opt_in_ab.sh (the bf16 extend attention tile
# with the key rows on the MMA's M; the FP8 / FP4 word decodes at decode sizes). PARTS, in order:
#   tests: the gpu tests of the changed kernels and of the model paths over them, in parallel
#     shards (gpu_tests_parallel.sh over GPU_TEST_PATHS, at most TESTS_S seconds);
#   ab: the bf16-KV prefill of flash-8l-32e (dummy weights) at CTX (131,072) tokens with the extend
#     tile of before (SGLANG_V4_ATTN_EXTEND_KEYS_ON_M=0) and then the new default, each in its own
#     process (the variable is read once): TTFT, its FLOP roofline, TPOT;
#   m1: the 1,000,000-token request with the new default (issue 18's TTFT against its roofline).
#   run(command="PARTS='tests ab' bash benchmark/device/extend_tile_ab.sh", carry=[".whl"], timeout_s=600)
#   run(command="PARTS=m1 bash benchmark/device/extend_tile_ab.sh", carry=[".whl"], timeout_s=600)
# Outputs in $OUT: gpu_shards.log, km0/, km4/, m1/ (longctx.{json,md}) and their logs.
set -u
BUDGET_S=${BUDGET_S:-560}
OUT=${OUT:-/tmp/extend_tile_ab_out}
mkdir -p "$OUT"
source benchmark/device/common.sh
export SKIP_WHEELS=1
exec > >(tee -a "$OUT/run.log") 2>&1
CTX=${CTX:-131072}
for p in ${PARTS:-tests ab}; do
  case $p in
    tests)
      GPU_TEST_PATHS=${GPU_TEST_PATHS:-"test/test_kernels_attention.py test/test_kernels_attention_prefix.py
        test/test_kernels_attention_splits.py test/test_kernels_fp8_gemm.py test/test_kernels_moe_fp4.py
        test/test_kernels_moe_fp4_fp8.py test/test_kernels_vs_ref.py test/test_gpu_dense_prefix_model.py
        test/test_quant_gpu.py test/test_model_config_variants.py test/test_cuda_graph_extend.py"} \
        SHARDS=${SHARDS:-12} GPU_TESTS_S=${TESTS_S:-230} BUDGET_S=$(left) OUT=$OUT \
        bash benchmark/device/gpu_tests_parallel.sh | tail -8 ;;
    ab)
      for km in 0 4; do
        mkdir -p "$OUT/km$km"
        SGLANG_V4_ATTN_EXTEND_KEYS_ON_M=$km step "ab_km$km" 140 python3 benchmark/longctx.py --skip-topk \
          --configs bf16 --contexts "$CTX" --decode-steps 8 --budget-s 130 --out "$OUT/km$km" > "$OUT/km$km.log" 2>&1
        grep -E "^\|" "$OUT/km$km/longctx.md" 2>/dev/null | head -4
      done ;;
    m1)
      mkdir -p "$OUT/m1"
      step m1 "$(( $(left) - 5 ))" python3 benchmark/longctx.py --skip-topk --configs bf16 --contexts 1000000 \
        --decode-steps 8 --budget-s $(( $(left) - 20 )) --out "$OUT/m1" > "$OUT/m1.log" 2>&1
      grep -E "^\|" "$OUT/m1/longctx.md" 2>/dev/null | head -6 ;;
  esac
done
echo "[$(el)s] done"
