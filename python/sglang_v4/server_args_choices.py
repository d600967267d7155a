"""SGLang 0.5.23's ``choices`` of the flags whose values this launcher checks only after parsing.

SGLang's argparse refuses a value outside a flag's choices with exit code 2 (``argument --dtype:
invalid choice: 'bfloat6' (choose from ...)``) before anything starts. The flags below take free
text in :mod:`sglang_v4.server_args_cli` and :mod:`sglang_v4.server_args_compat` (their values are
then checked, mapped or ignored); :func:`add_sglang_choices` gives them SGLang's lists, so a typo
is refused here as there, while every value SGLang accepts still parses and keeps its meaning here
(served, logged as ignored, or refused by ``ServerArgs`` with a line naming the flag).
:func:`check_choice_fields` applies the same lists (and the compatibility table's own) to the
fields of a ``ServerArgs`` built from keywords (``Engine(attention_backend=...)``), which never
pass through the parser.

The lists are those of the installed SGLang 0.5.23 parser after its registries are filled
(attention backends, quantization methods, reasoning / tool-call parsers are extended at import
time), in SGLang's order.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from sglang_v4.server_args_compat import CUDA_GRAPH_BACKENDS

#: ``--load-format`` / ``--speculative-draft-load-format``.
SGLANG_LOAD_FORMATS = (
    "auto",
    "pt",
    "safetensors",
    "instanttensor",
    "npcache",
    "dummy",
    "sharded_state",
    "presharded",
    "gguf",
    "expert_pack",
    "bitsandbytes",
    "mistral",
    "layered",
    "flash_rl",
    "remote",
    "remote_instance",
    "fastsafetensors",
    "private",
    "runai_streamer",
)
#: ``--quantization`` / ``--speculative-draft-model-quantization``.
SGLANG_QUANTIZATION_METHODS = (
    "awq",
    "fp8",
    "mxfp8",
    "gptq",
    "gptq_marlin",
    "awq_marlin",
    "bitsandbytes",
    "gguf",
    "modelopt",
    "modelopt_fp8",
    "modelopt_fp4",
    "nvfp4_online",
    "modelopt_mixed",
    "petit_nvfp4",
    "w8a8_int8",
    "w8a8_fp8",
    "moe_wna16",
    "w4afp8",
    "mxfp4",
    "auto-round",
    "auto-round-int8",
    "compressed-tensors",
    "modelslim",
    "mxfp_w4a8",
    "quark",
    "quark_int4fp8_moe",
    "quark_mxfp4",
    "mlx_q4",
    "mlx_q8",
    "unquant",
    "humming",
)
#: ``--attention-backend`` and its ``--decode-`` / ``--prefill-`` forms.
SGLANG_ATTENTION_BACKENDS = (
    "triton",
    "torch_native",
    "flex_attention",
    "dsa",
    "nsa",
    "qsa",
    "dsv4",
    "compressed",
    "fa3",
    "fa4",
    "flashinfer",
    "llada2_cfg_flashinfer",
    "flashmla",
    "trtllm_mla",
    "cutedsl_mla",
    "tokenspeed_mla",
    "trtllm_mha",
    "hpc_ops",
    "minicpm_flashattn",
    "minicpm_flashinfer",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
)
#: ``--dsa-topk-backend`` / ``--speculative-dsa-topk-backend``.
SGLANG_DSA_TOPK_BACKENDS = ("sgl-kernel", "torch", "flashinfer")

#: ``--moe-runner-backend`` / ``--speculative-moe-runner-backend``.
SGLANG_MOE_RUNNER_BACKENDS = (
    "auto",
    "deep_gemm",
    "triton",
    "triton_kernel",
    "flashinfer_trtllm",
    "experimental_sgl_trtllm",
    "flashinfer_trtllm_routed",
    "flashinfer_cutlass",
    "flashinfer_mxfp4",
    "flashinfer_cutedsl",
    "flashinfer_megamoe",
    "cutlass",
    "aiter",
    "marlin",
    "humming",
    "experimental_sgl_marlin",
    "lora_cutedsl",
    "lora_triton",
    "lora_marlin",
    "hpc_ops",
    "megamoe",
    "intel_xpu",
)

#: Flag -> SGLang 0.5.23's choices, for the flags that have none in the tables of this package.
SGLANG_CHOICES: dict[str, tuple[Any, ...]] = {
    "--tokenizer-mode": ("auto", "slow"),
    "--load-format": SGLANG_LOAD_FORMATS,
    "--speculative-draft-load-format": SGLANG_LOAD_FORMATS,
    "--dtype": ("auto", "half", "float16", "bfloat16", "float", "float32"),
    "--quantization": SGLANG_QUANTIZATION_METHODS,
    "--speculative-draft-model-quantization": SGLANG_QUANTIZATION_METHODS,
    "--kv-cache-dtype": (
        "auto",
        "fp8_e5m2",
        "fp8_e4m3",
        "mxfp8",
        "bf16",
        "bfloat16",
        "nvfp4",
        "fp4_mx_block16",
    ),
    "--schedule-policy": (
        "lpm",
        "random",
        "fcfs",
        "dfs-weight",
        "lof",
        "priority",
        "routing-key",
        "hrrn",
        "shortest-prefill-first",
    ),
    "--load-balance-method": (
        "auto",
        "round_robin",
        "follow_bootstrap_room",
        "total_requests",
        "total_tokens",
    ),
    "--cp-strategy": ("zigzag", "interleave"),
    "--sampling-defaults": ("openai", "model"),
    "--log-requests-level": (0, 1, 2, 3),
    "--log-requests-format": ("text", "json"),
    "--attention-backend": SGLANG_ATTENTION_BACKENDS,
    "--decode-attention-backend": SGLANG_ATTENTION_BACKENDS,
    "--prefill-attention-backend": SGLANG_ATTENTION_BACKENDS,
    "--grammar-backend": ("xgrammar", "outlines", "llguidance", "none"),
    "--mm-attention-backend": (
        "sdpa",
        "fa3",
        "fa4",
        "triton_attn",
        "ascend_attn",
        "aiter_attn",
        "flashinfer_cudnn",
        "amx_attn",
        "xpu_attn",
    ),
    "--fp8-gemm-backend": (
        "auto",
        "deep_gemm",
        "flashinfer_trtllm",
        "flashinfer_cutlass",
        "flashinfer_deepgemm",
        "flashinfer_cutedsl",
        "cutlass",
        "triton",
        "aiter",
    ),
    "--fp4-gemm-backend": (
        "auto",
        "flashinfer_cudnn",
        "flashinfer_cutedsl",
        "flashinfer_cutlass",
        "flashinfer_trtllm",
        "marlin",
    ),
    "--bf16-gemm-backend": ("auto", "cutedsl", "gemv", "torch"),
    "--dsa-prefill-backend": (
        "flashmla_sparse",
        "flashmla_sparse_q8",
        "flashmla_kv",
        "flashmla_auto",
        "flashinfer_sparse_mla",
        "triton_sparse_mla",
        "fa3",
        "tilelang",
        "triton",
        "aiter",
        "trtllm",
        "intel_xpu",
    ),
    "--dsv4-prefill-backend": ("auto", "flashmla_sparse", "flashmla_sparse_q8"),
    "--dsa-decode-backend": (
        "flashmla_sparse",
        "flashmla_sparse_q8",
        "flashmla_kv",
        "flashmla_auto",
        "flashinfer_sparse_mla",
        "fa3",
        "tilelang",
        "triton",
        "aiter",
        "trtllm",
        "intel_xpu",
    ),
    "--dsa-topk-backend": SGLANG_DSA_TOPK_BACKENDS,
    "--speculative-dsa-topk-backend": SGLANG_DSA_TOPK_BACKENDS,
    "--cuda-graph-backend-decode": CUDA_GRAPH_BACKENDS,
    "--cuda-graph-backend-prefill": CUDA_GRAPH_BACKENDS,
    "--speculative-attention-mode": ("prefill", "decode"),
    "--speculative-draft-kv-cache-dtype": ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"),
    "--speculative-moe-runner-backend": SGLANG_MOE_RUNNER_BACKENDS,
    "--moe-runner-backend": SGLANG_MOE_RUNNER_BACKENDS,
    "--speculative-moe-a2a-backend": (
        "none",
        "deepep",
        "mooncake",
        "nixl",
        "mori",
        "ascend_fuseep",
        "flashinfer",
        "megamoe",
        "deepep_v2",
        "pplx",
        "ascend_tp",
    ),
    "--speculative-ngram-match-type": ("BFS", "PROB"),
    "--moe-a2a-backend": (
        "none",
        "deepep",
        "mooncake",
        "nixl",
        "mori",
        "ascend_fuseep",
        "flashinfer",
        "megamoe",
        "deepep_v2",
        "pplx",
        "ascend_tp",
        "flashinfer_megamoe",
    ),
    "--flashinfer-mxfp4-moe-precision": ("default", "bf16", "fp8"),
    "--deepep-mode": ("auto", "normal", "low_latency"),
    "--ep-dispatch-algorithm": ("static", "dynamic", "fake", "lp"),
    "--expert-distribution-recorder-mode": ("stat", "stat_approx", "per_pass", "per_token"),
    "--elastic-ep-backend": ("none", "mooncake", "nixl"),
    "--hicache-write-policy": ("write_back", "write_through", "write_through_selective"),
    "--hicache-io-backend": ("direct", "kernel", "kernel_ascend"),
    "--hicache-mem-layout": (
        "layer_first",
        "page_first",
        "page_first_direct",
        "page_first_kv_split",
        "page_head",
    ),
    "--hicache-storage-backend": (
        "file",
        "sim",
        "mooncake",
        "npu_memcache",
        "hf3fs",
        "nixl",
        "aibrix",
        "dynamic",
        "eic",
        "simm",
        "mori",
        "shm",
        "tensorcast",
        "seaweedfs",
    ),
    "--hicache-storage-prefetch-policy": ("best_effort", "wait_complete", "timeout"),
    "--lora-target-modules": (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "q_a_proj",
        "kv_a_proj_with_mqa",
        "q_b_proj",
        "kv_b_proj",
        "wq_b",
        "wk",
        "weights_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "qkv_proj",
        "gate_up_proj",
        "embed_tokens",
        "lm_head",
        "qkvr",
        "wo_ud",
        "all",
    ),
    "--lora-backend": ("triton", "csgmv", "ascend", "torch_native", "triton_v2"),
    "--disaggregation-mode": ("null", "prefill", "decode"),
    "--disaggregation-transfer-backend": ("mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"),
    "--dsv4-attn-backend": ("auto", "flashmla", "flashmla_mega", "trtllm"),
    "--sampling-backend": ("intel_xpu", "ascend", "pytorch", "flashinfer"),
    "--reasoning-parser": (
        "auto",
        "apertus2509",
        "beam",
        "deepseek-r1",
        "deepseek-v3",
        "deepseek-v4",
        "deepseek-v41",
        "dots",
        "glm45",
        "ling3",
        "hunyuan",
        "gpt-oss",
        "k2_horizon",
        "kimi",
        "kimi_k2",
        "kimi_k3",
        "mimo",
        "muse",
        "poolside_v1",
        "qwen3",
        "qwen3-thinking",
        "minimax",
        "minimax-append-think",
        "minimax-m3",
        "nanbeige",
        "step3",
        "step3p5",
        "mistral",
        "nemotron_3",
        "granite_thinking_parser",
        "interns1",
        "gemma4",
        "inkling",
        "iquest_q1",
        "cohere_command4",
        "gigachat35",
        "response_template",
    ),
    "--tool-call-parser": (
        "auto",
        "apertus2509",
        "beam",
        "cohere_command4",
        "deepseekv3",
        "deepseekv31",
        "deepseekv32",
        "deepseekv4",
        "deepseekv41",
        "dots",
        "glm",
        "glm45",
        "glm47",
        "gpt-oss",
        "k2_horizon",
        "kimi_k2",
        "kimi_k3",
        "lfm2",
        "ling3",
        "llama3",
        "mimo",
        "minicpm5",
        "mistral",
        "muse",
        "poolside_v1",
        "pythonic",
        "qwen",
        "qwen25",
        "qwen3_coder",
        "spark25",
        "step3",
        "step3p5",
        "minimax-m2",
        "minimax-m3",
        "nanbeige",
        "trinity",
        "interns1",
        "hermes",
        "hunyuan",
        "gigachat3",
        "gigachat35",
        "gemma4",
        "inkling",
        "iquest_q1",
        "response_template",
    ),
}

#: Values accepted here beyond SGLang's choices: vLLM's spellings from vLLM's DeepSeek-V4 recipe
#: (``--tokenizer-mode deepseek_v4`` is ignored like every tokenizer mode; the parser names select
#: the DeepSeek-V4 parsers), ``--quantization none`` (dequantize the checkpoint to ``--dtype``) and
#: the values of ``--cp-strategy``'s older spellings ``--dsa-prefill-cp-mode`` /
#: ``--nsa-prefill-cp-mode`` in SGLang's DeepSeek cookbook (SGLang's former names of ``zigzag`` /
#: ``interleave``; ignored like every context-parallel strategy).
EXTRA_CHOICES: dict[str, tuple[Any, ...]] = {
    "--tokenizer-mode": ("deepseek_v4",),
    "--reasoning-parser": ("deepseek_v4", "deepseekv4", "deepseek_r1"),
    "--tool-call-parser": ("deepseek_v4", "deepseek-v4"),
    "--quantization": ("none",),
    "--cp-strategy": ("in-seq-split", "round-robin-split"),
}


def add_sglang_choices(parser: argparse.ArgumentParser) -> None:
    """Give every flag of ``parser`` named in :data:`SGLANG_CHOICES` (by any of its spellings) and
    without ``choices`` of its own SGLang's choices plus its :data:`EXTRA_CHOICES`, in place; a
    value outside them then exits with code 2 and argparse's ``argument --flag: invalid choice``
    line, which lists the choices."""
    for action in parser._actions:
        if action.choices is not None:
            continue
        for name in action.option_strings:
            if name in SGLANG_CHOICES:
                action.choices = (*SGLANG_CHOICES[name], *EXTRA_CHOICES.get(name, ()))
                break


@functools.cache
def _choice_fields() -> dict[str, tuple[str, tuple[Any, ...], Any]]:
    """``dest`` -> ``(flag, choices, argparse default)`` of every flag the launcher's parser limits
    to a list of values (SGLang's lists, the compatibility table's own) whose ``dest`` is a
    ``ServerArgs`` field (built once from the parser itself, so the two cannot drift)."""
    from sglang_v4.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    fields = ServerArgs.__dataclass_fields__
    return {
        a.dest: (a.option_strings[0], tuple(a.choices), a.default)
        for a in parser._actions
        if a.choices is not None and a.option_strings and a.dest in fields
    }


def check_choice_fields(args: Any) -> None:
    """Refuse a ``ServerArgs`` field (``Engine(**kwargs)``, ``ServerArgs(...)``) holding a value
    its flag's parser would refuse, so a keyword gets the check the command line gets (argparse's
    exit code 2, ``invalid choice``). Unset values (``None``, the field's default) pass, as argparse
    checks only given values; a list-valued flag (``nargs``) has each element checked.

    Raises:
        ValueError: ``"<field> (--flag) must be one of [...] (got <value>)"`` for the first such
            field, in the parser's order.
    """
    fields = type(args).__dataclass_fields__
    for dest, (flag, choices, parser_default) in _choice_fields().items():
        value = getattr(args, dest)
        if value is None or value is False or value == parser_default or value == fields[dest].default:
            continue
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, bool) or v not in choices:
                raise ValueError(f"{dest} ({flag}) must be one of {list(choices)} (got {v!r})")
