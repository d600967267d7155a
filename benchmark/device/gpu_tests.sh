#!/usr/bin/env bash
# Every `gpu`-marked test (Triton kernels vs their torch references, CUDA-graph replay vs eager,
# quantized runtime vs HF, sampling on CUDA, the CUDA server), kernels first, the server last.
#   run(command="bash benchmark/device/gpu_tests.sh", carry=[".whl"], timeout_s=600)
# Output: $OUT/pytest_gpu.log (GPU_TESTS_S caps the time, default 240 s).
set -u
BUDGET_S=${BUDGET_S:-560}
source benchmark/device/common.sh
step gpu_tests "${GPU_TESTS_S:-240}" python3 -m pytest -q -m gpu -rfEs -p no:cacheprovider --timeout 150 \
  $(ls test/test_kernels_*.py) test/test_gpu_cuda_graph_padding.py test/test_memory_kv_quant.py \
  test/test_quant_gpu.py test/test_sampling_grammar.py test/test_sampling_sampler.py test/test_server_gpu.py \
  > "$OUT/pytest_gpu.log" 2>&1
grep -E "passed|failed|error" "$OUT/pytest_gpu.log" | tail -3
