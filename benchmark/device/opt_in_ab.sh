#!/usr/bin/env bash
# Device call: the opt-in kernel forms that were compiled for sm_90 and checked under the
# interpreter but never run on a GPU, each first through its GPU tests and then timed against the
# served default in the same run:
#   * FP8 w8a16 word decode (`w8a16_words`, `w8a16_words_fold`) and the FP4 MoE word decode
#     (`fused_dsplit1_words`) at decode sizes;
#   * the indexer's extend scoring with the head sum as a second dot (`keys_wdot*`, `keys_fold`)
#     at 262,144 candidates (bf16 keys, then fp4 keys);
#   * the sparse attention with the key rows on the MMA's M (`keys_on_m`) at 12k and 128k contexts.
#   run(command="bash benchmark/device/opt_in_ab.sh", carry=[".whl"], timeout_s=600)
# PARTS picks a subset ("words indexer attention"); outputs (md / json / logs) land in $OUT.
set -u
BUDGET_S=${BUDGET_S:-580}
OUT=${OUT:-/tmp/opt_in_ab_out}
mkdir -p "$OUT"
source benchmark/device/common.sh
exec > >(tee -a "$OUT/run.log") 2>&1
PARTS=${PARTS:-"words indexer attention"}
for p in $PARTS; do
  case $p in
    words)
      gpu_tests words 150 test/test_kernels_fp8_gemm.py test/test_kernels_moe_fp4.py -k "words or register_decode or decode_every_byte"
      step fp8_ab 150 python3 benchmark/fp8_linear_sweep.py --ab-only --ab-tokens 1,16,64 \
        --ab-variants w8a16,w8a16_words,w8a16_words_fold,w8a16_f16asm --out "$OUT/fp8_words"
      step moe_ab 90 python3 benchmark/moe_fp4_sweep.py --set variants --variants fused_dsplit1,fused_dsplit1_words \
        --out "$OUT/moe_words" ;;
    indexer)
      gpu_tests indexer 90 test/test_kernels_indexer_extend.py -k "wdot or fold"
      S=keys_wdot_pairs/8/128/8/2/4,keys_wdot_pairs/8/128/8/1/4,keys_wdot_pairs/4/128/8/2/4,keys_wdot/8/128/8/2/4,keys_wdot16/8/128/8/2/4,keys_fold/4/128/8/2/4
      step indexer_bf16 100 python3 benchmark/indexer_extend_sweep.py --grid none --keys bf16 --contexts 262144 \
        --waves 4 --settings "$S" --out "$OUT/indexer_bf16"
      step indexer_fp4 100 python3 benchmark/indexer_extend_sweep.py --grid none --keys fp4 --contexts 262144 \
        --waves 4 --settings "$S" --out "$OUT/indexer_fp4" ;;
    attention)
      gpu_tests attn 90 test/test_kernels_attention.py -k "keys_on_m or fp8_pools"
      step qk_once 200 python3 benchmark/attention_extend_sweep.py --qk-once --kinds CSA,HCA \
        --contexts 12288,131072 --calls 10 --out "$OUT/qk_once" ;;
  esac
done
echo "[$(el)s] done"
