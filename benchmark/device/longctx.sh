#!/usr/bin/env bash
# Long context on one GPU (ONE device call, ~240 s): the gpu-marked tests of the paged KV kernels
# and graphs, then benchmark/longctx.py (fused indexer top-k at 256K candidates vs torch.topk; the
# flash-8l-32e context sweep 4k..1M in fp8 KV + fp4 indexer and in bf16 KV: TTFT, TPOT at bs 1 and 8,
# KV bytes, x roofline, prefix-hit TTFT; the 1,048,575-token request).
#   run(command="bash benchmark/device/longctx.sh", carry=[".whl"], timeout_s=300)
# Dry mode on a CPU box (tiny preset, small contexts, Triton kernels interpreted; a few minutes):
#   DRY=1 bash benchmark/device/longctx.sh
# Outputs in $OUT: pytest_longctx.log, longctx.{json,md}, longctx.log.
set -u
BUDGET_S=${BUDGET_S:-240}
if [ -n "${DRY:-}" ]; then
  BUDGET_S=${DRY_BUDGET_S:-700}  # interpreted kernels on a shared CPU: minutes
  export SKIP_WHEELS=1 TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""
  OUT=${OUT:-$(mktemp -d)}
fi
source benchmark/device/common.sh
KERNEL_TESTS="test/test_kernels_attention.py test/test_kernels_indexer.py test/test_kernels_indexer_ties.py
  test/test_kernels_vs_ref.py test/test_gpu_cuda_graph_padding.py test/test_workspace_plan.py"
if [ -n "${DRY:-}" ]; then
  # interpreted kernels: the fast subset only (the full files are the CPU CI's job)
  step kernel_tests 200 python3 -m pytest -q -x -rfE -p no:cacheprovider test/test_kernels_indexer.py \
    -k quantized_keys > "$OUT/pytest_longctx.log" 2>&1
  step longctx 400 python3 benchmark/longctx.py --dry --out "$OUT" --budget-s 380 2>&1 | tee "$OUT/longctx.log"
else
  step kernel_tests "${KERNEL_TESTS_S:-60}" python3 -m pytest -q -m gpu -rfEs -p no:cacheprovider --timeout 60 \
    $KERNEL_TESTS > "$OUT/pytest_longctx.log" 2>&1
  step longctx "$(( $(left) - 5 ))" python3 benchmark/longctx.py --out "$OUT" --budget-s $(( $(left) - 20 )) \
    2>&1 | tee "$OUT/longctx.log"
fi
grep -E "passed|failed|error" "$OUT/pytest_longctx.log" | tail -3
echo "outputs in $OUT"
