"""SGLang server flags that sglang-v4 accepts without implementing them: one table.

Users copy their SGLang launch command (``python -m sglang.launch_server ...``); it should start
here unchanged. Every SGLang flag falls in one of four classes:

* a :class:`~sglang_v4.server_args.ServerArgs` field of the same name (``--model-path``,
  ``--tp-size``, ``--mem-fraction-static``, ``--grammar-backend``, ``--cuda-graph-bs``, ...):
  honoured, documented where the field is defined;
* ``IGNORED``: a backend, kernel or tuning selection with no counterpart here (sglang-v4 has one
  attention implementation, one MoE path, one sampler, CUDA graphs instead of ``torch.compile``).
  Accepted; :func:`warn_ignored_sglang_args` logs one warning at start-up naming the flags that
  were set and why they change nothing. They never change behaviour;
* ``UNSUPPORTED``: a feature sglang-v4 does not implement where ignoring it would change results
  or the API (LoRA adapters, multimodal inputs, prefill/decode disaggregation, deterministic
  inference, pipeline parallelism). Accepted by the parser so the error is a clear
  ``ValueError`` from validation naming the flag, not argparse's "unrecognized arguments";
* ``MAPPED``: another SGLang spelling of a behaviour sglang-v4 has; :func:`apply_sglang_semantics`
  sets the ``ServerArgs`` field it means (``--disable-decode-cuda-graph`` ->
  ``disable_cuda_graph``);
* anything else: argparse's "unrecognized arguments" error (typos must not pass silently).

Speculative decoding (``--speculative-algorithm EAGLE`` / ``MTP`` / ``NGRAM`` and its knobs) is
``IGNORED`` on purpose: speculative decoding in SGLang is lossless (the target model verifies
every draft token, so greedy outputs are the same and sampled outputs have the same distribution);
it only changes speed. Refusing it would make every published DeepSeek-V4 recipe fail to start
for a difference in speed alone, so the flags are accepted and the start-up warning says that
decoding runs one token per step.

``--enable-dp-attention`` changes what ``--dp-size`` means in SGLang: the DP ranks split the
attention of one ``--tp-size`` group (the same GPUs), not ``dp_size`` server replicas. With it set,
:func:`apply_sglang_semantics` resets ``dp_size`` to 1 (one server on the ``--tp-size`` GPUs the
SGLang command uses) and the warning says so.

The table also generates the dataclass fields (:data:`SGLangCompatArgs`, a base of ``ServerArgs``)
and the argparse flags, so ``Engine(attention_backend="fa3")`` and ``--attention-backend fa3``
behave the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

IGNORED = "ignored"
UNSUPPORTED = "unsupported"
#: Honoured through another ``ServerArgs`` field (:func:`apply_sglang_semantics` maps it).
MAPPED = "mapped"

#: Why the decode-token estimate flags are ignored.
_NO_DECODE_ESTIMATE = (
    "sglang-v4 admits without a decode-token estimate: pages are taken as tokens arrive and a "
    "shortage retracts the newest request (vLLM's policy)"
)


@dataclass(frozen=True)
class SGLangFlag:
    """One accepted SGLang flag.

    ``flag``: the ``--kebab-case`` name (field name: ``flag[2:]`` with ``-`` -> ``_``);
    ``kind``: :data:`IGNORED` or :data:`UNSUPPORTED`; ``switch``: a ``store_true`` flag (else it
    takes one value, kept as given); ``note``: why (shown in the warning / error);
    ``aliases``: other spellings SGLang accepts.
    """

    flag: str
    kind: str
    note: str
    switch: bool = False
    aliases: tuple[str, ...] = ()

    @property
    def dest(self) -> str:
        """The ``ServerArgs`` / ``Engine`` keyword name."""
        return self.flag[2:].replace("-", "_")


_ATTN = "sglang-v4 has one attention implementation (its DeepSeek-V4 CSA/HCA sparse-attention kernels)"
_MOE = "sglang-v4 has one MoE implementation (its fused routed-expert kernels; EP is --ep-size)"
_COMM = "sglang-v4 has one all-reduce path (torch.distributed / NCCL)"
_COMPILE = "sglang-v4 does not use torch.compile; decode runs in CUDA graphs (--disable-cuda-graph)"
_OVERLAP = "sglang-v4 has no two-batch overlap; overlap scheduling is --disable-overlap-schedule"
_SPEC = (
    "speculative decoding is not implemented: decoding runs one token per step (outputs are "
    "unaffected, speculative decoding is lossless; only speed differs)"
)
_HUB = "sglang-v4 loads a local model directory; hub download options do not apply"
_CACHE = "sglang-v4 keeps its prefix cache in GPU memory only (no hierarchical host tier)"
_LORA = "LoRA adapters are not supported by sglang-v4 (it serves the base DeepSeek-V4 weights only)"
_EPLB = "sglang-v4 places routed experts statically (--ep-size); no expert load balancing"
_OBS = "sglang-v4 has no tracing or metric export beyond /metrics (--enable-metrics) and its logs"
_DEBUG = "a debugging / tuning knob of SGLang's runtime with no counterpart here"
_TOKENIZER = "sglang-v4 tokenizes in its HTTP process (one fast tokenizer)"
_GEMM = "sglang-v4 has one GEMM implementation per format (its Triton / torch kernels)"
_PREFILL_GRAPH = "sglang-v4 sizes its extend / mixed-step CUDA graphs with --cuda-graph-max-extend-tokens"
_CP = "sglang-v4 has no context-parallel prefill: attention runs tensor-parallel on the same --tp-size GPUs"
_HISPARSE = (
    "sglang-v4 keeps the whole compressed KV in GPU memory and its indexer selects from it there "
    "(no host tier for sparse attention)"
)
_PD = "only read with --disaggregation-mode, which sglang-v4 refuses (one server does prefill and decode)"

SGLANG_FLAGS: tuple[SGLangFlag, ...] = (
    # Attention / sampling / kernel backends.
    SGLangFlag("--attention-backend", IGNORED, _ATTN),
    SGLangFlag("--prefill-attention-backend", IGNORED, _ATTN),
    SGLangFlag("--decode-attention-backend", IGNORED, _ATTN),
    SGLangFlag("--nsa-prefill-backend", IGNORED, _ATTN),
    SGLangFlag("--nsa-decode-backend", IGNORED, _ATTN),
    SGLangFlag("--mm-attention-backend", IGNORED, "sglang-v4 serves text-only models"),
    SGLangFlag(
        "--sampling-backend", IGNORED, "sglang-v4 has one sampler (its torch / Triton sampling kernels)"
    ),
    SGLangFlag("--model-impl", IGNORED, "sglang-v4 has one built-in DeepSeek-V4 model implementation"),
    SGLangFlag("--tokenizer-mode", IGNORED, "sglang-v4 always uses the fast tokenizer (tokenizer.json)"),
    # MoE and communication.
    SGLangFlag("--moe-runner-backend", IGNORED, _MOE),
    SGLangFlag("--moe-a2a-backend", IGNORED, _MOE),
    SGLangFlag("--deepep-mode", IGNORED, _MOE),
    SGLangFlag("--deepep-config", IGNORED, _MOE),
    SGLangFlag("--moe-dense-tp-size", IGNORED, _MOE),
    SGLangFlag("--ep-num-redundant-experts", IGNORED, _MOE),
    SGLangFlag("--enable-eplb", IGNORED, _MOE, switch=True),
    SGLangFlag("--disable-shared-experts-fusion", IGNORED, _MOE, switch=True),
    SGLangFlag("--enable-flashinfer-allreduce-fusion", IGNORED, _COMM, switch=True),
    SGLangFlag("--disable-custom-all-reduce", IGNORED, _COMM, switch=True),
    SGLangFlag("--enable-symm-mem", IGNORED, _COMM, switch=True),
    SGLangFlag(
        "--enable-dp-attention",
        IGNORED,
        "sglang-v4 has no DP attention: --dp-size is then read as SGLang's attention-DP degree "
        "inside the --tp-size group and reset to 1 (one server on the same GPUs)",
        switch=True,
    ),
    # Compilation, overlap, CUDA-graph tuning.
    SGLangFlag("--enable-torch-compile", IGNORED, _COMPILE, switch=True),
    SGLangFlag("--torch-compile-max-bs", IGNORED, _COMPILE),
    SGLangFlag("--enable-two-batch-overlap", IGNORED, _OVERLAP, switch=True),
    SGLangFlag("--enable-single-batch-overlap", IGNORED, _OVERLAP, switch=True),
    SGLangFlag("--tbo-token-distribution-threshold", IGNORED, _OVERLAP),
    SGLangFlag(
        "--disable-cuda-graph-padding",
        IGNORED,
        "sglang-v4 always pads to the next captured batch size",
        switch=True,
    ),  # fmt: skip
    SGLangFlag(
        "--enable-mixed-chunk",
        IGNORED,
        "sglang-v4's scheduler already mixes prefill chunks with decodes",
        switch=True,
    ),  # fmt: skip
    SGLangFlag(
        "--schedule-conservativeness",
        IGNORED,
        _NO_DECODE_ESTIMATE,
    ),  # fmt: skip
    # Speculative decoding (see the module docstring for why these are accepted).
    SGLangFlag("--speculative-algorithm", IGNORED, _SPEC),
    SGLangFlag("--speculative-draft-model-path", IGNORED, _SPEC, aliases=("--speculative-draft-model",)),
    SGLangFlag("--speculative-num-steps", IGNORED, _SPEC),
    SGLangFlag("--speculative-eagle-topk", IGNORED, _SPEC),
    SGLangFlag("--speculative-num-draft-tokens", IGNORED, _SPEC),
    SGLangFlag("--speculative-attention-mode", IGNORED, _SPEC),
    SGLangFlag("--speculative-draft-attention-backend", IGNORED, _SPEC),
    SGLangFlag("--speculative-moe-runner-backend", IGNORED, _SPEC),
    # Model download and host-memory cache tiers.
    SGLangFlag("--revision", IGNORED, _HUB),
    SGLangFlag("--download-dir", IGNORED, _HUB),
    SGLangFlag("--enable-hierarchical-cache", IGNORED, _CACHE, switch=True, aliases=("--enable-hicache",)),
    SGLangFlag("--hicache-host-memory-fraction", IGNORED, _CACHE),
    SGLangFlag("--enable-nccl-nvls", IGNORED, _COMM, switch=True),
    SGLangFlag("--enable-cudagraph-gc", IGNORED, _DEBUG, switch=True),
    SGLangFlag("--numa-node", IGNORED, "sglang-v4 does not pin its processes to NUMA nodes"),
    SGLangFlag("--soft-watchdog-timeout", IGNORED, "sglang-v4 has one watchdog (--watchdog-timeout)"),
    SGLangFlag("--detokenizer-worker-num", IGNORED, "sglang-v4 runs one detokenizer process"),
    SGLangFlag(
        "--uvicorn-access-log-exclude-prefixes",
        IGNORED,
        "uvicorn's access lines show only with --log-level debug here, unfiltered (see --log-requests)",
    ),  # fmt: skip
    SGLangFlag("--hicache-ratio", IGNORED, _CACHE),
    SGLangFlag("--hicache-size", IGNORED, _CACHE),
    SGLangFlag("--log-level-http", IGNORED, "sglang-v4's HTTP server logs at --log-level"),
    # Flags of SGLang's DeepSeek-V4 / V3.2 recipes (cookbook launch commands).
    SGLangFlag("--disable-flashinfer-autotune", IGNORED, "sglang-v4 does not use FlashInfer", switch=True),
    SGLangFlag("--flashinfer-mxfp4-moe-precision", IGNORED, _MOE),
    SGLangFlag("--enable-w4a4-mxfp4-megamoe", IGNORED, _MOE, switch=True),
    SGLangFlag("--enforce-shared-experts-fusion", IGNORED, _MOE, switch=True),
    SGLangFlag("--enable-deepep-moe", IGNORED, _MOE, switch=True),
    SGLangFlag("--enable-ep-moe", IGNORED, _MOE + "; set --ep-size to shard whole experts", switch=True),
    SGLangFlag("--enable-flashmla", IGNORED, _ATTN, switch=True),
    SGLangFlag("--triton-attention-num-kv-splits", IGNORED, _ATTN),
    SGLangFlag("--disable-chunked-prefix-cache", IGNORED, _ATTN, switch=True),
    SGLangFlag("--init-expert-location", IGNORED, _EPLB),
    SGLangFlag("--enable-waterfill", IGNORED, _EPLB, switch=True, aliases=("--enable-deepep-waterfill",)),
    SGLangFlag("--eplb-algorithm", IGNORED, _EPLB),
    SGLangFlag("--eplb-rebalance-num-iterations", IGNORED, _EPLB),
    SGLangFlag("--ep-dispatch-algorithm", IGNORED, _EPLB),
    SGLangFlag("--expert-distribution-recorder-mode", IGNORED, _EPLB),
    SGLangFlag(
        "--swa-full-tokens-ratio",
        IGNORED,
        "sglang-v4 sizes its sliding-window and compressed KV pools itself (docs/ARCHITECTURE.md)",
    ),  # fmt: skip
    SGLangFlag("--attn-cp-size", IGNORED, _CP, aliases=("--attention-context-parallel-size",)),
    # The cookbook's CP knob emits these with --attn-cp-size; the DSA / NSA spellings are their
    # older names (SGLang keeps them as deprecated aliases).
    SGLangFlag(
        "--enable-prefill-cp",
        IGNORED,
        _CP,
        switch=True,
        aliases=("--enable-dsa-prefill-context-parallel", "--enable-nsa-prefill-context-parallel"),
    ),
    SGLangFlag("--cp-strategy", IGNORED, _CP, aliases=("--dsa-prefill-cp-mode", "--nsa-prefill-cp-mode")),
    SGLangFlag("--enable-cp-decode-attn-tp", IGNORED, _CP, switch=True),
    SGLangFlag(
        "--enable-dp-lm-head",
        IGNORED,
        "sglang-v4 has no DP attention (see --enable-dp-attention)",
        switch=True,
    ),
    SGLangFlag(
        "--load-balance-method",
        IGNORED,
        "sglang-v4 has no DP attention; --router-policy picks the replica router",
    ),  # fmt: skip
    SGLangFlag("--enable-prefill-delayer", IGNORED, "a DP-attention scheduling knob of SGLang", switch=True),
    SGLangFlag("--prefill-delayer-max-delay-ms", IGNORED, "a DP-attention scheduling knob of SGLang"),
    SGLangFlag("--tokenizer-worker-num", IGNORED, _TOKENIZER),
    SGLangFlag("--enable-tokenizer-batch-encode", IGNORED, _TOKENIZER, switch=True),
    SGLangFlag("--enable-dynamic-batch-tokenizer", IGNORED, _TOKENIZER, switch=True),
    SGLangFlag("--speculative-draft-model-revision", IGNORED, _SPEC),
    SGLangFlag("--speculative-draft-load-format", IGNORED, _SPEC),
    SGLangFlag("--speculative-draft-model-quantization", IGNORED, _SPEC),
    SGLangFlag("--speculative-draft-kv-cache-dtype", IGNORED, _SPEC),
    SGLangFlag("--speculative-draft-window-size", IGNORED, _SPEC),
    SGLangFlag("--speculative-draft-sink-size", IGNORED, _SPEC),
    SGLangFlag("--speculative-dsa-topk-backend", IGNORED, _SPEC),
    SGLangFlag("--speculative-moe-a2a-backend", IGNORED, _SPEC),
    SGLangFlag("--speculative-enable-w4a4-mxfp4-megamoe", IGNORED, _SPEC, switch=True),
    SGLangFlag("--no-speculative-enable-w4a4-mxfp4-megamoe", IGNORED, _SPEC, switch=True),
    SGLangFlag("--speculative-use-rejection-sampling", IGNORED, _SPEC, switch=True),
    SGLangFlag("--speculative-use-block-verification", IGNORED, _SPEC, switch=True),
    SGLangFlag("--speculative-adaptive", IGNORED, _SPEC, switch=True),
    SGLangFlag("--speculative-adaptive-config", IGNORED, _SPEC),
    SGLangFlag("--speculative-dflash-block-size", IGNORED, _SPEC),
    SGLangFlag("--speculative-dspark-sps-table-path", IGNORED, _SPEC),
    SGLangFlag("--speculative-dspark-confidence-sts-path", IGNORED, _SPEC),
    SGLangFlag("--speculative-dspark-align-verify-tokens-to-graph-tier", IGNORED, _SPEC, switch=True),
    SGLangFlag("--speculative-domino-candidate-pool-size", IGNORED, _SPEC),
    SGLangFlag("--speculative-ngram-min-bfs-breadth", IGNORED, _SPEC),
    SGLangFlag("--speculative-ngram-match-type", IGNORED, _SPEC),
    SGLangFlag("--speculative-ngram-max-trie-depth", IGNORED, _SPEC),
    SGLangFlag("--speculative-ngram-capacity", IGNORED, _SPEC),
    SGLangFlag("--speculative-ngram-external-corpus-path", IGNORED, _SPEC),
    SGLangFlag("--speculative-ngram-external-sam-budget", IGNORED, _SPEC),
    SGLangFlag("--speculative-ngram-external-corpus-max-tokens", IGNORED, _SPEC),
    SGLangFlag("--speculative-dspark-block-size", IGNORED, _SPEC),
    SGLangFlag("--speculative-ngram-max-bfs-breadth", IGNORED, _SPEC),
    SGLangFlag("--speculative-token-map", IGNORED, _SPEC),
    SGLangFlag("--speculative-accept-threshold-single", IGNORED, _SPEC),
    SGLangFlag("--speculative-accept-threshold-acc", IGNORED, _SPEC),
    SGLangFlag("--hicache-storage-backend", IGNORED, _CACHE),
    SGLangFlag("--hicache-mem-layout", IGNORED, _CACHE),
    SGLangFlag("--hicache-io-backend", IGNORED, _CACHE),
    SGLangFlag("--hicache-write-policy", IGNORED, _CACHE),
    SGLangFlag("--hicache-storage-prefetch-policy", IGNORED, _CACHE),
    SGLangFlag("--hicache-storage-backend-extra-config", IGNORED, _CACHE),
    SGLangFlag("--enable-lmcache", IGNORED, _CACHE, switch=True),
    SGLangFlag("--enable-hisparse", IGNORED, _HISPARSE, switch=True),
    SGLangFlag("--hisparse-config", IGNORED, _HISPARSE),
    SGLangFlag("--disaggregation-transfer-backend", IGNORED, _PD),
    SGLangFlag("--disaggregation-ib-device", IGNORED, _PD),
    SGLangFlag("--disaggregation-bootstrap-port", IGNORED, _PD),
    SGLangFlag("--disaggregation-decode-enable-radix-cache", IGNORED, _PD, switch=True),
    SGLangFlag("--mooncake-ib-device", IGNORED, _PD),
    SGLangFlag("--elastic-ep-backend", IGNORED, _EPLB),
    SGLangFlag("--model-loader-extra-config", IGNORED, "sglang-v4 has one safetensors loader"),
    SGLangFlag("--weight-loader-disable-mmap", IGNORED, "sglang-v4 has one safetensors loader", switch=True),
    SGLangFlag(
        "--delete-ckpt-after-loading",
        IGNORED,
        "sglang-v4 never deletes checkpoint files",
        switch=True,
    ),  # fmt: skip
    SGLangFlag("--cpu-offload-gb", IGNORED, "sglang-v4 keeps all weights on the device"),
    SGLangFlag("--enable-memory-saver", IGNORED, _DEBUG, switch=True),
    SGLangFlag("--sleep-on-idle", IGNORED, _DEBUG, switch=True),
    SGLangFlag("--enable-nan-detection", IGNORED, _DEBUG, switch=True),
    SGLangFlag("--num-continuous-decode-steps", IGNORED, _DEBUG),
    SGLangFlag("--max-micro-batch-size", IGNORED, _DEBUG),
    SGLangFlag(
        "--num-reserved-decode-tokens",
        IGNORED,
        _NO_DECODE_ESTIMATE,
    ),
    SGLangFlag("--sm-group-num", IGNORED, _DEBUG),
    SGLangFlag("--gc-warning-threshold-secs", IGNORED, _DEBUG),
    SGLangFlag("--warmups", IGNORED, "sglang-v4 runs its own start-up warm-up (--skip-server-warmup)"),
    SGLangFlag("--crash-dump-folder", IGNORED, _DEBUG),
    SGLangFlag("--show-time-cost", IGNORED, _OBS, switch=True),
    SGLangFlag("--enable-request-time-stats-logging", IGNORED, _OBS, switch=True),
    SGLangFlag("--enable-trace", IGNORED, _OBS, switch=True),
    SGLangFlag("--otlp-traces-endpoint", IGNORED, _OBS),
    SGLangFlag("--export-metrics-to-file", IGNORED, _OBS, switch=True),
    SGLangFlag("--collect-tokens-histogram", IGNORED, _OBS, switch=True),
    SGLangFlag("--prompt-tokens-buckets", IGNORED, _OBS),
    SGLangFlag("--generation-tokens-buckets", IGNORED, _OBS),
    SGLangFlag("--tokenizer-metrics-allowed-custom-labels", IGNORED, _OBS),
    SGLangFlag(
        "--enable-metrics-for-all-schedulers", IGNORED, "sglang-v4 has one scheduler per server", switch=True
    ),
    SGLangFlag("--disable-outlines-disk-cache", IGNORED, "sglang-v4 does not use outlines", switch=True),
    # SGLang 0.5.2x spellings: DeepSeek-V4 / DSA kernel selections, GEMM backends, prefill graphs.
    SGLangFlag("--dsv4-attn-backend", IGNORED, _ATTN),
    SGLangFlag("--dsv4-prefill-backend", IGNORED, _ATTN),
    SGLangFlag("--dsa-prefill-backend", IGNORED, _ATTN),
    SGLangFlag("--dsa-decode-backend", IGNORED, _ATTN),
    SGLangFlag("--dsa-topk-backend", IGNORED, _ATTN),
    SGLangFlag("--fp8-gemm-backend", IGNORED, _GEMM),
    SGLangFlag("--fp4-gemm-backend", IGNORED, _GEMM),
    SGLangFlag("--bf16-gemm-backend", IGNORED, _GEMM),
    SGLangFlag("--enable-p2p-check", IGNORED, _COMM, switch=True),
    SGLangFlag("--moe-dp-size", IGNORED, _MOE, aliases=("--moe-data-parallel-size",)),
    SGLangFlag(
        "--radix-eviction-policy", IGNORED, "sglang-v4's radix cache evicts least recently used blocks"
    ),
    SGLangFlag("--cuda-graph-backend-prefill", IGNORED, _PREFILL_GRAPH),
    SGLangFlag("--cuda-graph-max-bs-prefill", IGNORED, _PREFILL_GRAPH),
    SGLangFlag("--disable-prefill-cuda-graph", IGNORED, _PREFILL_GRAPH, switch=True),
    SGLangFlag(
        "--enable-tf32-matmul",
        IGNORED,
        "sglang-v4 never lets float32 matmuls use TF32 (full float32 precision)",
        switch=True,
    ),  # fmt: skip
    SGLangFlag("--gc-threshold", IGNORED, _DEBUG),
    SGLangFlag("--scheduler-recv-interval", IGNORED, _DEBUG),
    SGLangFlag(
        "--strip-thinking-cache",
        IGNORED,
        "only what the radix cache keeps differs (outputs are the same)",
        switch=True,
    ),  # fmt: skip
    # Honoured as another field.
    SGLangFlag(
        "--disable-decode-cuda-graph",
        MAPPED,
        "= --disable-cuda-graph (turns off the decode and the extend graphs)",
        switch=True,
    ),
    SGLangFlag(
        "--cuda-graph-backend-decode", MAPPED, "disabled = --disable-cuda-graph; full / breakable: graphs on"
    ),
    # Not implemented, and ignoring them would change results or the API.
    SGLangFlag(
        "--enable-return-hidden-states",
        UNSUPPORTED,
        "returning hidden states is not supported (requests carrying return_hidden_states are refused)",
        switch=True,
    ),  # fmt: skip
    SGLangFlag(
        "--enable-strict-thinking",
        UNSUPPORTED,
        "token filtering during the thinking phase is not implemented",
        switch=True,
    ),  # fmt: skip
    SGLangFlag(
        "--enable-return-routed-experts",
        UNSUPPORTED,
        "returning the routed experts of each token is not supported",
        switch=True,
    ),  # fmt: skip
    SGLangFlag(
        "--enable-fp32-lm-head",
        UNSUPPORTED,
        "the LM head runs in --dtype (its logits are then cast to float32); a float32 LM head is not implemented",
        switch=True,
    ),  # fmt: skip
    SGLangFlag("--enable-lora", UNSUPPORTED, _LORA, switch=True),
    SGLangFlag("--lora-paths", UNSUPPORTED, _LORA),
    SGLangFlag("--max-lora-rank", UNSUPPORTED, _LORA),
    SGLangFlag("--max-loras-per-batch", UNSUPPORTED, _LORA),
    SGLangFlag("--lora-backend", UNSUPPORTED, _LORA),
    SGLangFlag("--max-loaded-loras", UNSUPPORTED, _LORA),
    SGLangFlag("--lora-target-modules", UNSUPPORTED, _LORA),
    SGLangFlag(
        "--pp-size",
        UNSUPPORTED,
        "pipeline parallelism is not supported: use --tp-size (with --nnodes across nodes)",
        aliases=("--pipeline-parallel-size",),
    ),
    SGLangFlag(
        "--gpu-id-step",
        UNSUPPORTED,
        "ranks use consecutive GPUs from --base-gpu-id; pick them with CUDA_VISIBLE_DEVICES instead",
    ),  # fmt: skip
    SGLangFlag(
        "--enable-custom-logit-processor",
        UNSUPPORTED,
        "custom logit processors are not supported (requests carrying one are refused)",
        switch=True,
    ),  # fmt: skip
    SGLangFlag(
        "--constrained-json-whitespace-pattern",
        UNSUPPORTED,
        "the JSON grammar's whitespace is xgrammar's default and cannot be changed",
    ),  # fmt: skip
    SGLangFlag(
        "--constrained-json-disable-any-whitespace",
        UNSUPPORTED,
        "the JSON grammar's whitespace is xgrammar's default and cannot be changed (bound its runs "
        "with --constrained-json-max-whitespace-cnt)",
        switch=True,
    ),  # fmt: skip
    SGLangFlag(
        "--is-embedding",
        UNSUPPORTED,
        "embedding models are not supported (sglang-v4 serves generation)",
        switch=True,
    ),
    SGLangFlag(
        "--tool-server", UNSUPPORTED, "built-in tool servers are not supported (tools run in the client)"
    ),
    SGLangFlag(
        "--enable-multimodal",
        UNSUPPORTED,
        "multimodal inputs are not supported (DeepSeek-V4 is text-only here)",
        switch=True,
    ),  # fmt: skip
    SGLangFlag(
        "--disaggregation-mode",
        UNSUPPORTED,
        "prefill/decode disaggregation is not supported: run one server that does both (omit the flag or pass null)",
    ),  # fmt: skip
    SGLangFlag(
        "--enable-deterministic-inference",
        UNSUPPORTED,
        "batch-invariant (deterministic) inference is not implemented: results may depend on batch composition",
        switch=True,
    ),  # fmt: skip
)

#: SGLang's ``--cuda-graph-backend-decode`` choices.
CUDA_GRAPH_BACKENDS = ("full", "breakable", "disabled")

#: ``dest`` -> entry.
SGLANG_FLAG_BY_DEST: dict[str, SGLangFlag] = {f.dest: f for f in SGLANG_FLAGS}

#: Values that mean "not set" for an :data:`UNSUPPORTED` flag (SGLang's own defaults).
_UNSET_VALUES: dict[str, tuple[Any, ...]] = {
    "disaggregation_mode": ("null",),
    "pp_size": ("1",),
    "gpu_id_step": ("1",),
}

#: Dataclass base of ``ServerArgs``: one field per table entry, ``None`` (``False`` for switches)
#: by default, so ``ServerArgs`` and ``Engine`` take the same keywords as the CLI.
SGLangCompatArgs = dataclasses.make_dataclass(
    "SGLangCompatArgs",
    [(f.dest, Any, dataclasses.field(default=False if f.switch else None)) for f in SGLANG_FLAGS],
)
SGLangCompatArgs.__doc__ = "The accepted SGLang-only fields (see :data:`SGLANG_FLAGS`)."
SGLangCompatArgs.__module__ = __name__


#: Table entries that take one or more values, as in SGLang.
_LIST_VALUED = frozenset(
    {
        "lora_paths",
        "lora_target_modules",
        "prompt_tokens_buckets",
        "generation_tokens_buckets",
        "tokenizer_metrics_allowed_custom_labels",
        "numa_node",
        "uvicorn_access_log_exclude_prefixes",
    }
)


def _is_set(entry: SGLangFlag, value: Any) -> bool:
    if value is None or value is False:
        return False
    return value not in _UNSET_VALUES.get(entry.dest, ())


def add_sglang_cli_args(parser: argparse.ArgumentParser) -> None:
    """Add every :data:`SGLANG_FLAGS` entry to ``parser`` (a switch as ``store_true``, any other as
    one string value; those of :data:`_LIST_VALUED`, like ``--lora-paths``, take one or more)."""
    group = parser.add_argument_group(
        "SGLang compatibility",
        "SGLang flags accepted so SGLang launch commands start unchanged (see README).",
    )
    for f in SGLANG_FLAGS:
        help_text = f"[{f.kind}] {f.note}"
        if f.switch:
            group.add_argument(f.flag, *f.aliases, dest=f.dest, action="store_true", help=help_text)
        else:
            nargs = "+" if f.dest in _LIST_VALUED else None
            group.add_argument(
                f.flag, *f.aliases, dest=f.dest, type=str, nargs=nargs, default=None, help=help_text
            )


def check_sglang_args(args: Any) -> None:
    """Raise ``ValueError`` for the first set :data:`UNSUPPORTED` flag on ``args`` (a
    ``ServerArgs``): ``"enable_lora (--enable-lora) is not supported: LoRA adapters ..."``."""
    for f in SGLANG_FLAGS:
        value = getattr(args, f.dest)
        if f.kind == UNSUPPORTED and _is_set(f, value):
            raise ValueError(f"{f.dest} ({f.flag} {value!r}) is not supported: {f.note}")


def apply_sglang_semantics(args: Any) -> None:
    """Map the accepted SGLang flags whose meaning reaches a ``ServerArgs`` field, in place:
    ``enable_dp_attention`` with ``dp_size > 1`` -> ``dp_size = 1`` (module docstring);
    ``disable_decode_cuda_graph`` or ``cuda_graph_backend_decode="disabled"`` ->
    ``disable_cuda_graph = True``.

    Raises:
        ValueError: naming ``cuda_graph_backend_decode`` when it is not one of SGLang's choices.
    """
    if args.enable_dp_attention and args.dp_size != 1:
        args.sglang_dp_attention_size = args.dp_size
        args.dp_size = 1
    backend = args.cuda_graph_backend_decode
    if backend is not None and backend not in CUDA_GRAPH_BACKENDS:
        raise ValueError(
            f"cuda_graph_backend_decode must be one of {list(CUDA_GRAPH_BACKENDS)} (got {backend!r})"
        )
    if args.disable_decode_cuda_graph or backend == "disabled":
        args.disable_cuda_graph = True


def ignored_sglang_args(args: Any) -> list[tuple[str, Any, str]]:
    """``(flag, value, note)`` of every :data:`IGNORED` flag set on ``args``, table order."""
    out = []
    for f in SGLANG_FLAGS:
        value = getattr(args, f.dest)
        if f.kind == IGNORED and _is_set(f, value):
            if f.dest == "enable_dp_attention" and getattr(args, "sglang_dp_attention_size", None):
                value = f"dp-size {args.sglang_dp_attention_size} -> 1"
            out.append((f.flag, value, f.note))
    return out


def warn_ignored_sglang_args(args: Any, log: logging.Logger | None = None) -> str | None:
    """Log one warning listing the :data:`IGNORED` flags set on ``args`` and why; return its text
    (``None`` when none is set)."""
    items = ignored_sglang_args(args)
    if not items:
        return None
    lines = [f"  {flag}{'' if value is True else f' {value}'}: {note}" for flag, value, note in items]
    text = "SGLang flags accepted but ignored (behaviour unchanged):\n" + "\n".join(lines)
    (log or logging.getLogger("sglang_v4.server_args")).warning("%s", text)
    return text


#: SGLang environment variables sglang-v4 reads (``SGLANG_V4_*`` are its own and always read).
READ_SGLANG_ENV = frozenset(
    {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "SGLANG_HEALTH_CHECK_TIMEOUT", "SGLANG_TORCH_PROFILER_DIR"}
)


def unread_sglang_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """Sorted names of the ``SGL_*`` / ``SGLANG_*`` variables set in ``environ`` (default
    ``os.environ``) that sglang-v4 does not read: SGLang's kernel, backend and tuning switches
    (``SGL_ENABLE_JIT_DEEPGEMM``, ``SGLANG_ENABLE_SPEC_V2``, ...) copied with a launch command."""
    env = os.environ if environ is None else environ
    return sorted(
        k
        for k in env
        if k.startswith(("SGL_", "SGLANG_")) and not k.startswith("SGLANG_V4_") and k not in READ_SGLANG_ENV
    )


def warn_unread_sglang_env(
    environ: Mapping[str, str] | None = None, log: logging.Logger | None = None
) -> str | None:
    """Log one warning naming the :func:`unread_sglang_env` variables; return its text (``None``
    when there are none)."""
    names = unread_sglang_env(environ)
    if not names:
        return None
    text = (
        f"SGLang environment variables set but not read by sglang-v4 (behaviour unchanged): {', '.join(names)}; "
        f"it reads {', '.join(sorted(READ_SGLANG_ENV))} and its own SGLANG_V4_* variables"
    )
    (log or logging.getLogger("sglang_v4.server_args")).warning("%s", text)
    return text
