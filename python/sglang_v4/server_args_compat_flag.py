"""One accepted SGLang server flag (:class:`SGLangFlag`), its classes and the shared reasons.

The tables of :mod:`sglang_v4.server_args_compat_kernels`, :mod:`sglang_v4.server_args_compat_runtime`
and :mod:`sglang_v4.server_args_compat_refused` are made of these entries;
:mod:`sglang_v4.server_args_compat` turns them into argparse flags and ``ServerArgs`` fields.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

IGNORED = "ignored"
UNSUPPORTED = "unsupported"
#: Honoured through another ``ServerArgs`` field (``apply_sglang_semantics`` maps it), or already
#: the behaviour here.
MAPPED = "mapped"


def json_value(text: str) -> Any:
    """argparse type of SGLang's JSON-valued flags (``--extra-metric-labels '{"a": "b"}'``).

    Raises:
        argparse.ArgumentTypeError: ``text`` is not JSON.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e}): {text!r}") from None


def json_object(text: str) -> dict[str, Any]:
    """argparse type of a flag that takes a JSON object (``--cuda-graph-config``).

    Raises:
        argparse.ArgumentTypeError: ``text`` is not a JSON object.
    """
    value = json_value(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}: {text!r}")
    return value


def nullable_str(text: str) -> str | None:
    """argparse type of SGLang's nullable path flags: ``""`` and ``"None"`` mean unset."""
    return None if not text or text == "None" else text


@dataclass(frozen=True)
class SGLangFlag:
    """One accepted SGLang flag, parsed as SGLang 0.5.23 parses it.

    ``flag``: the ``--kebab-case`` name (field name: ``flag[2:]`` with ``-`` -> ``_``);
    ``kind``: :data:`IGNORED`, :data:`UNSUPPORTED` or :data:`MAPPED`; ``note``: why (shown in the
    start-up warning / the error); ``switch``: takes no value (``store_true``; with ``negatable``
    also ``--no-<name>``, argparse's ``BooleanOptionalAction``); otherwise the flag takes a value
    converted by ``type`` (``nargs`` and ``choices`` as in SGLang); ``default``: SGLang's default,
    a value that means "not set" (passing it changes nothing in SGLang either); ``const``: the value
    of a ``nargs="?"`` flag given without one; ``aliases``: other spellings SGLang accepts.
    """

    flag: str
    kind: str
    note: str
    switch: bool = False
    aliases: tuple[str, ...] = ()
    type: Callable[[str], Any] = str
    nargs: str | None = None
    choices: tuple[Any, ...] | None = None
    default: Any = None
    negatable: bool = False
    const: Any = None

    @property
    def dest(self) -> str:
        """The ``ServerArgs`` / ``Engine`` keyword name."""
        return self.flag[2:].replace("-", "_")


# Why IGNORED flags change nothing (shown in the start-up warning).
ATTN = "sglang-v4 has one attention implementation (its DeepSeek-V4 CSA/HCA sparse-attention kernels)"
MOE = "sglang-v4 has one MoE implementation (its fused routed-expert kernels; EP is --ep-size)"
COMM = "sglang-v4 has one all-reduce path (torch.distributed / NCCL)"
COMPILE = "sglang-v4 does not use torch.compile; decode runs in CUDA graphs (--disable-cuda-graph)"
OVERLAP = "sglang-v4 has no two-batch overlap; overlap scheduling is --disable-overlap-schedule"
SPEC = (
    "speculative decoding is not implemented: decoding runs one token per step (outputs are "
    "unaffected, speculative decoding is lossless; only speed differs)"
)
HUB = "sglang-v4 loads a local model directory; hub download options do not apply"
CACHE = "sglang-v4 keeps its prefix cache in GPU memory only (no hierarchical host tier)"
LORA = "LoRA adapters are not supported by sglang-v4 (it serves the base DeepSeek-V4 weights only)"
EPLB = "sglang-v4 places routed experts statically (--ep-size); no expert load balancing"
OBS = "sglang-v4 has no tracing or metric export beyond /metrics (--enable-metrics) and its logs"
DEBUG = "a debugging / tuning knob of SGLang's runtime with no counterpart here"
TOKENIZER = "sglang-v4 tokenizes in its HTTP process (one fast tokenizer)"
GEMM = "sglang-v4 has one GEMM implementation per format (its Triton / torch kernels)"
PREFILL_GRAPH = "sglang-v4 sizes its extend / mixed-step CUDA graphs with --cuda-graph-max-extend-tokens"
CP = "sglang-v4 has no context-parallel prefill: attention runs tensor-parallel on the same --tp-size GPUs"
HISPARSE = (
    "sglang-v4 keeps the whole compressed KV in GPU memory and its indexer selects from it there "
    "(no host tier for sparse attention)"
)
PD = "only read with --disaggregation-mode, which sglang-v4 refuses (one server does prefill and decode)"
NO_DECODE_ESTIMATE = (
    "sglang-v4 admits without a decode-token estimate: pages are taken as tokens arrive and a "
    "shortage retracts the newest request (vLLM's policy)"
)
DP_ATTN = "sglang-v4 has no DP attention: attention runs tensor-parallel on the --tp-size GPUs"
DP_SCHED = "a DP-attention scheduling knob of SGLang"
SCHED = (
    "sglang-v4's scheduler batches by --max-running-requests, --max-prefill-tokens and "
    "--chunked-prefill-size (the order of work changes, outputs do not)"
)
FUSION = "a kernel-fusion choice of SGLang's; sglang-v4 runs its own DeepSeek-V4 kernels"
PLATFORM = "a kernel of another platform (Ascend NPU, AMD ROCm or Apple MLX); sglang-v4 runs on CUDA or CPU"
POOLS = "sglang-v4 sizes its sliding-window and compressed KV pools itself (docs/ARCHITECTURE.md)"
PP = "only read with --pp-size, which sglang-v4 refuses (no pipeline parallelism)"
PORTS = "sglang-v4 picks its internal ports itself (only --port and --dist-init-addr are set by hand)"
LOADER = "sglang-v4 has one safetensors loader"
OFFLOAD = "sglang-v4 keeps all weights on the device"
EVICT = "sglang-v4's radix cache evicts least recently used blocks"
NO_FLASHINFER = "sglang-v4 does not use FlashInfer"
MM = (
    "sglang-v4 serves text only (multimodal inputs are refused): this multimodal-processing knob "
    "has nothing to act on"
)
MAMBA = "only read for Mamba / linear-attention layers; DeepSeek-V4 has none"
OTHER_MODEL = "only read for another model family's layers; DeepSeek-V4 has none"
EPD = "only read with --encoder-only / --language-only (encoder disaggregation), which sglang-v4 refuses"
GRPC = "only read with gRPC serving (--grpc-port / --smg-grpc-mode), which sglang-v4 refuses"
HTTP2 = "only read with --enable-http2, which sglang-v4 refuses (it serves HTTP/1.1)"
DLLM = "only read with --dllm-algorithm, which sglang-v4 refuses"
KT = "only read with --kt-weight-path, which sglang-v4 refuses (no CPU expert offload)"
REMOTE_LOAD = "only read when loading weights from another instance, which sglang-v4 does not do (one safetensors loader)"
WEIGHT_BACKUP = (
    "only read by release_memory_occupation / resume_memory_occupation, which sglang-v4 refuses "
    "(weights stay on the device)"
)
SWA_REPLAY = (
    "sglang-v4's radix cache restores the exact sliding-window state of a cached prefix (results as "
    "with a full prefill; no bounded replay)"
)
