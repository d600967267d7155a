"""Triton kernels for the DeepSeek-V4 hot ops (CUDA only).

The submodules import ``triton`` at their own import time, so import them only through
``sgl_kernel_v4.ops.get_op`` (which does so lazily) or after checking that Triton is installed.
This package's ``__init__`` deliberately imports nothing.

Modules: ``attention`` (sparse_attention), ``indexer`` (indexer_topk), ``compressor``
(compress_and_insert), ``rope`` (apply_rope, inv_rope_quant, qnorm_rope_kv_insert), ``norm``
(rms_norm), ``mhc`` (hc_pre, hc_post), ``moe`` (fused_moe), ``fp8_gemm`` (fp8_linear),
``moe_fp4`` (fused_moe_fp4; tiles in ``moe_fp4_tiles``), ``fp8_act_quant`` (act_quant),
``sampling`` (the sampler's finite_limit / scale_by_temperature, called by
``sglang_v4.sampling.logprobs`` on CUDA).
"""
