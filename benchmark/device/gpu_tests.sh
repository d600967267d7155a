#!/usr/bin/env bash
# Every `gpu`-marked test (Triton kernels vs their torch references, CUDA-graph replay vs eager,
# quantized runtime vs HF, sampling on CUDA, the CUDA server), kernels first, the server last.
#   run(command="bash benchmark/device/gpu_tests.sh", carry=[".whl"], timeout_s=600)
# Output: $OUT/pytest_gpu.log (GPU_TESTS_S caps the time, default 240 s).
set -u
BUDGET_S=${BUDGET_S:-560}
source benchmark/device/common.sh
# SIGINT at the cap (not SIGTERM): pytest then still prints its failures and summary.
cap=${GPU_TESTS_S:-240}
(( cap > $(left) - 10 )) && cap=$(( $(left) - 10 ))
echo "[$(el)s] START gpu_tests (<= ${cap}s)"
# the paged KV kernels and the graph path first, then the quantized kernels, then the rest
first="test/test_kernels_attention.py test/test_kernels_indexer.py test/test_kernels_indexer_ties.py
  test/test_kernels_vs_ref.py test/test_gpu_cuda_graph_padding.py test/test_workspace_plan.py
  test/test_kernels_fp8_gemm.py test/test_kernels_moe_fp4.py"
rest=$(ls test/test_kernels_*.py | grep -v -e attention -e indexer -e vs_ref -e fp8_gemm -e moe_fp4)
# shellcheck disable=SC2086
timeout -s INT -k 20 "$cap" python3 -m pytest -q -m gpu -rfEs -p no:cacheprovider --timeout 150 $first $rest \
  test/test_memory_kv_quant.py test/test_quant_gpu.py test/test_sampling_grammar.py test/test_sampling_sampler.py \
  test/test_server_gpu.py > "$OUT/pytest_gpu.log" 2>&1
echo "[$(el)s] END gpu_tests rc=$?"
grep -E "passed|failed|error" "$OUT/pytest_gpu.log" | tail -3
