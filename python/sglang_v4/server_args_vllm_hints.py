"""What to use instead of a ``vllm serve`` flag that ``launch_server`` does not take.

``python -m sglang_v4.launch_server`` speaks SGLang's flags (:mod:`sglang_v4.server_args_cli`,
:mod:`sglang_v4.server_args_compat`). Users also arrive from vLLM's DeepSeek-V4 recipe
(recipes.vllm.ai, the ``vllm-project/recipes`` DeepSeek-V4-Flash / -Pro pages) and vLLM-Ascend's
DeepSeek-V4 tutorials, whose commands carry vLLM-only flags (``--max-model-len``,
``--gpu-memory-utilization``, ``--enable-auto-tool-choice``, ``--block-size``,
``--async-scheduling``, ``--tokenizer``, ...). Those stay refused - a flag that is not SGLang's must
not pass silently, and a guessed mapping could change what is served - but argparse's
"unrecognized arguments" line then says, for each such flag, the flag that does the same here or
that there is none. vLLM's ``--tokenizer`` is not unrecognized but ambiguous to argparse (it is the
start of ``--tokenizer-path``, ``--tokenizer-mode``, ...); that line gets the hint too.

vLLM flags that SGLang also spells (``--tensor-parallel-size``, ``--data-parallel-size``,
``--tokenizer-mode``, ``--served-model-name``, ``--max-logprobs``, ...) are accepted and are not
listed here.
"""

from __future__ import annotations

__all__ = ["VLLM_FLAG_HINTS", "vllm_flag_hints"]

_NO_COMPILE = "no counterpart: sglang-v4 does not use torch.compile (decode runs in CUDA graphs)"
_NO_PD = "no counterpart: prefill/decode disaggregation is not supported (one server does both)"

#: vLLM flag -> what to use here (vLLM's engine-argument names, as its recipes spell them).
VLLM_FLAG_HINTS: dict[str, str] = {
    "--max-model-len": "use --context-length",
    "--gpu-memory-utilization": "use --mem-fraction-static",
    "--max-num-seqs": "use --max-running-requests",
    "--max-num-batched-tokens": "use --chunked-prefill-size / --max-prefill-tokens",
    "--block-size": "use --page-size (a multiple of 128; default 256)",
    "--enable-auto-tool-choice": "not needed: tool calls are parsed by default (--tool-call-parser deepseekv4)",
    "--enable-expert-parallel": "use --ep-size (e.g. equal to --tp-size)",
    "--speculative-config": "use --speculative-algorithm (accepted; decoding runs one token per step)",
    "--enforce-eager": "use --disable-cuda-graph",
    "--max-cudagraph-capture-size": "use --cuda-graph-max-bs",
    "--compilation-config": _NO_COMPILE,
    "--kv-transfer-config": _NO_PD,
    "--distributed-executor-backend": "no counterpart: ranks always run as processes (--tp-size)",
    "--disable-uvicorn-access-log": "not needed: uvicorn's access lines show only with --log-level debug",
    "--no-enable-flashinfer-autotune": "use --disable-flashinfer-autotune (accepted; no FlashInfer here)",
    "--no-disable-hybrid-kv-cache-manager": "not needed: one KV cache manager for the hybrid DeepSeek-V4 KV",
    "--attention-config.use-fp4-indexer-cache": "use --enable-deepseek-v4-fp4-indexer",
    "--enable-sleep-mode": "no counterpart: weights and KV cache stay resident (no memory saver)",
    "--enable-prefix-caching": "not needed: the radix prefix cache is on by default (--disable-radix-cache)",
    "--no-enable-prefix-caching": "use --disable-radix-cache",
    "--tokenizer": "use --tokenizer-path (a local tokenizer directory)",
    "--seed": "use --random-seed",
    "--uvicorn-log-level": "use --log-level",
    "--enable-reasoning": "not needed: reasoning is parsed by default (--reasoning-parser deepseek-v4)",
    "--reasoning-config": "use --reasoning-parser (default deepseek-v4, which splits off <think> ... </think>)",
    "--enable-chunked-prefill": "not needed: chunked prefill is on by default (--chunked-prefill-size; -1 turns it off)",
    "--async-scheduling": "not needed: scheduling overlaps the forward by default (--disable-overlap-schedule turns it off)",
    "--safetensors-load-strategy": "no counterpart: the weight loader has no loading-strategy option",
    # where a chat request's unset sampling parameters come from (vLLM's auto / vllm / a folder)
    "--generation-config": (
        "use --sampling-defaults (model: vLLM's auto, the model's generation_config.json; "
        "openai: vLLM's vllm, the built-in defaults)"
    ),
    "--override-generation-config": (
        "use --preferred-sampling-params with --sampling-defaults openai (otherwise the model's "
        "generation_config.json values win over it on chat requests)"
    ),
    "--hf-overrides": "use --json-model-override-args (a JSON object of config.json keys)",
}


def _key(token: str) -> str:
    """``--attention_config.use_fp4_indexer_cache=True`` -> ``--attention-config.use-fp4-indexer-cache``
    (vLLM reads ``_`` and ``-`` alike in flag names)."""
    return token.split("=", 1)[0].replace("_", "-")


def vllm_flag_hints(message: str) -> str:
    """``message`` (argparse's ``"unrecognized arguments: --max-model-len 4096 ..."``) with a hint
    appended for each vLLM-only flag it names: ``"; vLLM's --max-model-len: use --context-length"``.
    argparse's ``"ambiguous option: --tokenizer could match --tokenizer-path, ..."`` gets the hint of
    the option it names the same way.

    Any other message, or one naming no flag of :data:`VLLM_FLAG_HINTS`, is returned unchanged.
    """
    unrecognized, ambiguous = "unrecognized arguments:", "ambiguous option:"
    if message.startswith(unrecognized):
        tokens = message[len(unrecognized) :].split()
    elif message.startswith(ambiguous):
        tokens = message[len(ambiguous) :].split()[:1]  # the option, before "could match ..."
    else:
        return message
    hints: list[str] = []
    for token in tokens:
        key = _key(token)
        if key in VLLM_FLAG_HINTS and not any(h.startswith(f"vLLM's {key}:") for h in hints):
            hints.append(f"vLLM's {key}: {VLLM_FLAG_HINTS[key]}")
    return "; ".join([message, *hints])
