"""KV memory planner: bytes per token per layer type, totals, the V3.2 comparison, concurrency.

Usage::

    python -m sglang_v4.tools.kv_planner --preset pro --context-length 1048576
    python -m sglang_v4.tools.kv_planner --model-path DIR --kv-cache-dtype fp8_e4m3 \\
        --enable-fp4-indexer --gpu-memory 1050 --json

What it prints (the arithmetic is in :mod:`sglang_v4.mem_cache.kv_planner` and
:mod:`sglang_v4.mem_cache.kv_spec`; this module only adds the weights and the formatting):

* per layer type (CSA / HCA / sliding): layers, entry bytes, amortised bytes per token per layer,
  sliding-window bytes per request, and the bytes of one request of ``--context-length`` tokens;
* ``total_kv_bytes``: one sequence of that length (entries only, what the published figures count:
  V4-Pro, bf16, 1M tokens = 9.62 GiB), and the paged footprint (page padding, compressor state);
* the DeepSeek-V3.2 comparison at the same length and dtype (83.9 GiB at 1M tokens in bf16,
  derivation in ``mem_cache/kv_planner.py``), and the ratio;
* the page-size classes (37,440 / 8,640 / 1,728 B in fp8 for V4);
* weights: parameters counted from the config (the HF ``DeepseekV4ForCausalLM`` built on the meta
  device, nothing allocated) and their bytes as published: routed experts fp4 e2m1 (0.5 B per
  parameter + one ue8m0 byte per 32), the attention and shared-expert projections fp8 e4m3 with an
  fp32 scale per 128x128 block, everything else (embeddings, lm head, norms, router, mHC,
  compressor and indexer projections) bf16. The MTP head is not counted. This gives 284.3 B
  parameters for V4-Flash and 1.57 T for V4-Pro (published: 284 B and 1.6 T);
* ``max_concurrency``: requests of ``--context-length`` tokens that fit at once in
  ``--gpu-memory`` GiB x ``--mem-fraction`` minus the weights (the KV pools sized by
  :func:`~sglang_v4.mem_cache.kv_planner.plan_kv_pools`, the same code the runtime uses).

``--preset v3.2`` prints the V3.2 model alone (61 MLA layers; weights 671 B parameters in fp8).

Tensor / expert parallel (``--tp-size N [--ep-size M]``, docs/PARALLELISM.md): the per-GPU
account of that layout: the weight bytes one rank holds in the runtime's formats (FP8 linears with
fp32 block scales, FP4 experts, the rest bf16 / fp32; the model built on the meta device for that
rank, ``model_loader.builder.model_weight_bytes``), the KV budget of one GPU
(``--gpu-memory-per-gpu`` x ``--mem-fraction`` minus those weights; every rank holds the same
replicated KV pools, so this budget is the server's), the pools it plans and the requests of
``--context-length`` tokens that fit. E.g.::

    python -m sglang_v4.tools.kv_planner --preset flash --tp-size 2 --ep-size 2 \
        --kv-cache-dtype fp8_e4m3 --enable-fp4-indexer --context-length 8192
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.mem_cache.kv_format import normalize_kv_cache_dtype
from sglang_v4.mem_cache.kv_planner import (
    V32_NUM_LAYERS,
    GiB,
    kv_bytes_for_context,
    plan_kv_pools,
    v32_kv_bytes_per_token,
)
from sglang_v4.mem_cache.kv_spec import build_kv_layout

__all__ = ["load_preset_config", "count_weights", "plan", "per_gpu_plan", "indexer_tradeoff", "main"]

# DeepSeek-V3.2: 671 B parameters (tech report), stored fp8 with fp32 128x128 block scales.
V32_PARAMS = 671_000_000_000
DEFAULT_GPU_MEMORY_GIB = 1050.0  # one node of 8 x 141 GB (H200)
DEFAULT_MEM_FRACTION = 0.9
#: One H200 as torch reports it (143,771 MiB).
DEFAULT_GPU_MEMORY_PER_GPU_GIB = 140.4


# ---------------------------------------------------------------------------------------------
# presets
# ---------------------------------------------------------------------------------------------
def load_preset_config(name: str) -> ModelConfig:
    """``ModelConfig`` of preset ``name`` (``flash`` / ``pro`` / any name
    :func:`~sglang_v4.configs.presets.get_preset` knows).

    Raises:
        ValueError: for an unknown preset.
    """
    return ModelConfig.from_dict(get_preset(name))


# ---------------------------------------------------------------------------------------------
# weights
# ---------------------------------------------------------------------------------------------
def _weight_kind(name: str, ndim: int) -> str:
    if ".mlp.experts." in name and (name.endswith("gate_up_proj") or name.endswith("down_proj")):
        return "fp4"
    if ndim == 2 and name.endswith(".weight"):
        if ".self_attn." in name and ".compressor." not in name and ".indexer." not in name:
            return "fp8"
        if ".mlp.shared_experts." in name:
            return "fp8"
    return "bf16"


def count_weights(model_config: ModelConfig) -> dict[str, Any]:
    """Parameters of the model (HF ``DeepseekV4ForCausalLM`` on the meta device) and their bytes
    in the published storage formats (see the module docstring).

    Returns:
        dict: ``params``, ``bytes``, and per storage kind (``fp4`` / ``fp8`` / ``bf16``)
        ``{"params", "bytes"}``.
    """
    import torch
    from transformers import DeepseekV4ForCausalLM

    with torch.device("meta"):
        model = DeepseekV4ForCausalLM(model_config.hf)
    out: dict[str, Any] = {k: {"params": 0, "bytes": 0} for k in ("fp4", "fp8", "bf16")}
    for name, p in model.named_parameters():
        n = p.numel()
        kind = _weight_kind(name, p.dim())
        if kind == "fp4":
            # e2m1 two per byte + one ue8m0 byte per 32 values along the input dim
            b = -(-n // 2) + -(-n // 32)
        elif kind == "fp8":
            rows, cols = p.shape
            b = n + 4 * (-(-rows // 128)) * (-(-cols // 128))
        else:
            b = 2 * n
        out[kind]["params"] += n
        out[kind]["bytes"] += b
    out["params"] = sum(out[k]["params"] for k in ("fp4", "fp8", "bf16"))
    out["bytes"] = sum(out[k]["bytes"] for k in ("fp4", "fp8", "bf16"))
    return out


def _v32_weight_bytes() -> int:
    return V32_PARAMS + 4 * (V32_PARAMS // (128 * 128))


# ---------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------
def _concurrency(
    model_config: ModelConfig | None, kv_cache_dtype: str, fp4: bool, ctx: int, budget: int
) -> dict:
    if budget <= 0:
        return {"max_concurrency": 0, "plan": None}
    if model_config is None:  # V3.2: no paging model, plain division
        per_req = v32_kv_bytes_per_token(kv_cache_dtype, fp4) * ctx
        return {"max_concurrency": int(budget // per_req), "plan": None}
    try:
        p = plan_kv_pools(model_config, kv_cache_dtype, fp4, budget_bytes=budget, context_length=ctx)
    except ValueError:
        return {"max_concurrency": 0, "plan": None}
    return {"max_concurrency": p.max_concurrency, "plan": p.to_dict()}


def plan(
    model_config: ModelConfig | None,
    kv_cache_dtype: str | None = "bf16",
    fp4_indexer: bool = False,
    context_length: int | None = None,
    gpu_memory_gib: float = DEFAULT_GPU_MEMORY_GIB,
    mem_fraction: float = DEFAULT_MEM_FRACTION,
    model_name: str = "",
) -> dict[str, Any]:
    """The planner's report as a dict (what ``--json`` prints).

    Args:
        model_config: a V4 model, or ``None`` for DeepSeek-V3.2.
        kv_cache_dtype: ``bf16`` / ``fp32`` / ``fp8_e4m3`` / ``auto`` (= bf16).
        fp4_indexer: fp4 indexer keys.
        context_length: tokens per request (default: the model's ``max_position_embeddings``;
            1,048,576 for V3.2 comparisons).
        gpu_memory_gib: GPU memory of the deployment, GiB.
        mem_fraction: fraction of it usable for weights + KV.
        model_name: label.

    Raises:
        ValueError: for a bad dtype, context length, memory or fraction.
    """
    dt = normalize_kv_cache_dtype(kv_cache_dtype)
    if gpu_memory_gib <= 0:
        raise ValueError(f"gpu_memory: must be positive, got {gpu_memory_gib}")
    if not 0 < mem_fraction <= 1:
        raise ValueError(f"mem_fraction: must be in (0, 1], got {mem_fraction}")
    ctx = context_length
    if ctx is None:
        ctx = model_config.context_length if model_config is not None else 1 << 20
    if ctx <= 0:
        raise ValueError(f"context_length: must be positive, got {ctx}")
    v32_total = v32_kv_bytes_per_token(dt, fp4_indexer) * ctx
    v32 = {
        "num_layers": V32_NUM_LAYERS,
        "bytes_per_token": v32_kv_bytes_per_token(dt, fp4_indexer),
        "total_kv_bytes": v32_total,
        "total_kv_gib": v32_total / GiB,
    }
    usable = int(gpu_memory_gib * GiB * mem_fraction)
    out: dict[str, Any] = {
        "model": model_name,
        "kv_cache_dtype": dt,
        "fp4_indexer": bool(fp4_indexer),
        "context_length": ctx,
        "gpu_memory_bytes": int(gpu_memory_gib * GiB),
        "mem_fraction": mem_fraction,
    }
    if model_config is None:
        wbytes = _v32_weight_bytes()
        budget = usable - wbytes
        conc = _concurrency(None, dt, fp4_indexer, ctx, budget)
        per_layer = v32_kv_bytes_per_token(dt, fp4_indexer) // V32_NUM_LAYERS
        out.update(
            {
                "total_kv_bytes": v32_total,
                "total_kv_gib": v32_total / GiB,
                "per_layer_type": {
                    "mla": {
                        "layers": V32_NUM_LAYERS,
                        "bytes_per_token_per_layer": per_layer,
                        "total_bytes": per_layer * V32_NUM_LAYERS * ctx,
                    }
                },
                "v3.2": v32,
                "weights": {"params": V32_PARAMS, "bytes": wbytes},
                "kv_budget_bytes": max(0, budget),
                "max_concurrency": conc["max_concurrency"],
            }
        )
        return out
    kv = kv_bytes_for_context(model_config, dt, fp4_indexer, ctx)
    layout = build_kv_layout(model_config, dt, fp4_indexer)
    blocks = -(-ctx // layout.page_size)
    # as allocated for one running request: its block pages, the 2 window pages covering its last
    # `sliding_window` positions, its fp32 compressor state
    paged = blocks * layout.block_page_bytes + 2 * layout.window_page_bytes + layout.request_state_bytes
    weights = count_weights(model_config)
    budget = usable - weights["bytes"]
    conc = _concurrency(model_config, dt, fp4_indexer, ctx, budget)
    out.update(
        {
            "total_kv_bytes": kv["total_kv_bytes"],
            "total_kv_gib": kv["total_kv_bytes"] / GiB,
            "paged_bytes_per_request": paged,
            "per_layer_type": kv["per_layer_type"],
            "entry_bytes": {
                "main": layout.formats.main.entry_bytes,
                "indexer": layout.formats.indexer.entry_bytes,
            },
            "page_classes": [
                {"page_bytes": c.page_bytes, "kinds": [k.value for k in c.kinds]} for c in layout.classes
            ],
            "block_page_bytes": layout.block_page_bytes,
            "window_page_bytes": layout.window_page_bytes,
            "request_state_bytes": layout.request_state_bytes,
            "v3.2": {
                **v32,
                "ratio_vs_v4": v32_total / kv["total_kv_bytes"] if kv["total_kv_bytes"] else None,
            },
            "weights": weights,
            "kv_budget_bytes": max(0, budget),
            "max_concurrency": conc["max_concurrency"],
            "plan": conc["plan"],
        }
    )
    return out


def per_gpu_plan(
    model_config: ModelConfig,
    tp_size: int,
    ep_size: int = 1,
    kv_cache_dtype: str | None = "bf16",
    fp4_indexer: bool = False,
    context_length: int | None = None,
    gpu_memory_gib: float = DEFAULT_GPU_MEMORY_PER_GPU_GIB,
    mem_fraction: float = DEFAULT_MEM_FRACTION,
) -> dict[str, Any]:
    """Per-GPU weights and KV of a TP / EP layout (module docstring), weights in DeepSeek's
    published format as the runtime holds it (``QuantConfig()``, bf16 activations).

    Returns:
        dict: ``tp_size``, ``ep_size``, ``gpu_memory_bytes``, ``weight_bytes_per_gpu`` (the
        largest rank's), ``weight_bytes_all_gpus``, ``replicated_weight_bytes`` (held by every
        rank), ``kv_budget_bytes_per_gpu``, ``max_concurrency`` and ``plan`` (``KVPlan.to_dict()``
        of one GPU's pools: capacity, pool bytes; ``None`` if nothing fits).

    Raises:
        ValueError: a layout that cannot split the model, or bad sizes.
    """
    import torch

    from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
    from sglang_v4.layers.quantization import QuantConfig
    from sglang_v4.model_loader.builder import model_weight_bytes
    from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

    if gpu_memory_gib <= 0:
        raise ValueError(f"gpu_memory_per_gpu: must be positive, got {gpu_memory_gib}")
    dt = normalize_kv_cache_dtype(kv_cache_dtype)
    ctx = context_length or model_config.context_length
    per_rank = [
        model_weight_bytes(model_config, torch.bfloat16, QuantConfig(), ParallelConfig(tp_size, r, ep_size))
        for r in range(tp_size)
    ]
    with torch.device("meta"):
        m = DeepseekV4ForCausalLM(
            model_config, torch.bfloat16, "meta", QuantConfig(), TPGroup(ParallelConfig(tp_size, 0, ep_size))
        )
    split = set(m.weight_shards())
    replicated = sum(
        t.numel() * t.element_size()
        for k, t in m.state_dict().items()
        if k not in split and not (k.endswith("_scale_inv") and k[: -len("_scale_inv")] in split)
    )
    need = max(per_rank)
    budget = int(gpu_memory_gib * GiB * mem_fraction) - need
    conc = _concurrency(model_config, dt, fp4_indexer, ctx, budget)
    return {
        "tp_size": tp_size,
        "ep_size": ep_size,
        "gpu_memory_bytes": int(gpu_memory_gib * GiB),
        "mem_fraction": mem_fraction,
        "context_length": ctx,
        "weight_bytes_per_gpu": need,
        "weight_bytes_all_gpus": sum(per_rank),
        "replicated_weight_bytes": replicated,
        "kv_budget_bytes_per_gpu": max(0, budget),
        "max_concurrency": conc["max_concurrency"],
        "plan": conc["plan"],
    }


def indexer_tradeoff(
    model_config: ModelConfig, tp_size: int, tokens: int, context_length: int
) -> dict[str, Any]:
    """The two ways to run the lightning indexer under tensor parallelism, in bytes
    (docs/PARALLELISM.md "Why the indexer is replicated").

    Replicated (what the runtime does): every GPU holds and reads the whole indexer ``q_b_proj``
    (FP8, 1 B per weight + an fp32 scale per 128x128 block) and ``weights_proj`` (bf16): ``1 - 1 /
    tp`` of them more than a head split would. Split heads: each CSA layer all-reduces the partial
    scores ``[tokens, context / ratio]`` fp32 before its top-k.

    Returns:
        dict: ``csa_layers``, ``replicated_extra_weight_bytes_per_gpu``,
        ``split_allreduces_per_forward``, ``split_allreduce_bytes_per_layer``,
        ``split_allreduce_bytes_per_forward``.
    """
    c = model_config.hf
    n_csa = len(model_config.csa_layers)
    rows, cols = c.index_n_heads * c.index_head_dim, c.q_lora_rank
    q_b = rows * cols + 4 * (-(-rows // 128)) * (-(-cols // 128))
    weights_proj = 2 * c.index_n_heads * c.hidden_size
    per_layer = tokens * (context_length // model_config.csa_ratio) * 4
    return {
        "csa_layers": n_csa,
        "replicated_extra_weight_bytes_per_gpu": int(n_csa * (q_b + weights_proj) * (1 - 1 / tp_size)),
        "split_allreduces_per_forward": n_csa,
        "split_allreduce_bytes_per_layer": per_layer,
        "split_allreduce_bytes_per_forward": n_csa * per_layer,
    }


def _print_per_gpu(r: dict[str, Any]) -> None:
    p = print
    p("")
    p(f"per GPU at --tp-size {r['tp_size']} --ep-size {r['ep_size']} (weights as the runtime holds them):")
    p(
        f"  weights: {_fmt_bytes(r['weight_bytes_per_gpu'])} per GPU ({_fmt_bytes(r['replicated_weight_bytes'])} replicated)"
    )
    p(
        f"  KV budget: {r['gpu_memory_bytes'] / GiB:,.1f} GiB x {r['mem_fraction']} - weights = "
        f"{_fmt_bytes(r['kv_budget_bytes_per_gpu'])} (the KV pools are replicated: the server's KV)"
    )
    plan = r["plan"]
    if plan is not None:
        p(f"  KV pools: {_fmt_bytes(plan['total_bytes'])}, {plan['kv_capacity_tokens']:,} tokens")
    p(f"  max concurrent requests of {r['context_length']:,} tokens: {r['max_concurrency']}")
    ix = r.get("indexer")
    if ix:
        p(
            f"  indexer replicated: +{ix['replicated_extra_weight_bytes_per_gpu'] / 1e6:.1f} MB per GPU (read every step); "
            f"split by heads instead: {ix['split_allreduces_per_forward']} all-reduces of "
            f"{ix['split_allreduce_bytes_per_layer']:,} B per decode step at batch 1"
        )


def _fmt_bytes(b: float) -> str:
    return f"{b:,.0f} B ({b / GiB:.3f} GiB)"


def _print_text(r: dict[str, Any]) -> None:
    p = print
    p(f"model: {r['model']}   kv cache dtype: {r['kv_cache_dtype']}   fp4 indexer: {r['fp4_indexer']}")
    p(f"context length: {r['context_length']:,} tokens")
    p("")
    p(
        f"{'layer type':<10} {'layers':>6} {'B/token/layer':>14} {'window B/layer':>15} {'bytes @ context':>22}"
    )
    for name, d in r["per_layer_type"].items():
        bpt = d.get("bytes_per_token_per_layer", 0)
        win = d.get("window_bytes_per_layer", 0)
        p(f"{name:<10} {d['layers']:>6} {bpt:>14.3f} {win:>15,} {d['total_bytes']:>22,}")
    p("")
    p(f"total KV for one {r['context_length']:,}-token sequence: {_fmt_bytes(r['total_kv_bytes'])}")
    if "paged_bytes_per_request" in r:
        p(f"  as allocated (page padding + compressor state): {_fmt_bytes(r['paged_bytes_per_request'])}")
        p(f"  entry bytes: main {r['entry_bytes']['main']}, indexer {r['entry_bytes']['indexer']}")
        classes = ", ".join(f"{c['page_bytes']:,} B [{' '.join(c['kinds'])}]" for c in r["page_classes"])
        p(f"  page-size classes: {classes}")
        v = r["v3.2"]
        p(
            f"DeepSeek-V3.2 at the same length and dtype: {_fmt_bytes(v['total_kv_bytes'])} "
            f"({v['ratio_vs_v4']:.2f}x)"
        )
    w = r["weights"]
    p(f"weights: {w['params'] / 1e9:,.1f} B parameters, {_fmt_bytes(w['bytes'])}")
    p(
        f"KV budget: {r['gpu_memory_bytes'] / GiB:,.1f} GiB x {r['mem_fraction']} - weights = "
        f"{_fmt_bytes(r['kv_budget_bytes'])}"
    )
    p(f"max concurrent requests of {r['context_length']:,} tokens: {r['max_concurrency']}")


def _build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m sglang_v4.tools.kv_planner", description="DeepSeek-V4 KV memory planner"
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-path", help="checkpoint directory with config.json")
    src.add_argument("--preset", help="flash | pro | v3.2 (or any name sglang_v4.configs.presets knows)")
    ap.add_argument("--kv-cache-dtype", default="bf16", help="auto | bf16 | fp32 | fp8_e4m3 (default bf16)")
    ap.add_argument("--enable-fp4-indexer", action="store_true", help="fp4 (e2m1) indexer keys")
    ap.add_argument("--context-length", type=int, default=None, help="tokens per request")
    ap.add_argument(
        "--gpu-memory",
        type=float,
        default=DEFAULT_GPU_MEMORY_GIB,
        help=f"GPU memory of the deployment in GiB (default {DEFAULT_GPU_MEMORY_GIB}: 8 x H200)",
    )
    ap.add_argument(
        "--mem-fraction",
        type=float,
        default=DEFAULT_MEM_FRACTION,
        help=f"usable fraction for weights + KV (default {DEFAULT_MEM_FRACTION})",
    )
    ap.add_argument(
        "--tp-size", type=int, default=None, help="also print the per-GPU account of this TP layout"
    )
    ap.add_argument("--ep-size", type=int, default=1, help="expert-parallel shards (with --tp-size)")
    ap.add_argument(
        "--gpu-memory-per-gpu",
        type=float,
        default=DEFAULT_GPU_MEMORY_PER_GPU_GIB,
        help=f"memory of one GPU in GiB for --tp-size (default {DEFAULT_GPU_MEMORY_PER_GPU_GIB}: H200)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 on bad arguments)."""
    ap = _build_parser()
    args = ap.parse_args(argv)
    try:
        if args.preset is not None and args.preset.lower() in ("v3.2", "v32", "deepseek-v3.2"):
            mc, name = None, "DeepSeek-V3.2"
        elif args.preset is not None:
            mc, name = load_preset_config(args.preset.lower()), args.preset.lower()
        else:
            mc, name = ModelConfig.from_pretrained(args.model_path), args.model_path
        report = plan(
            mc,
            args.kv_cache_dtype,
            args.enable_fp4_indexer,
            args.context_length,
            args.gpu_memory,
            args.mem_fraction,
            name,
        )
        if args.tp_size is not None:
            if mc is None:
                raise ValueError("tp_size: the per-GPU account needs a V4 model")
            report["per_gpu"] = per_gpu_plan(
                mc,
                args.tp_size,
                args.ep_size,
                args.kv_cache_dtype,
                args.enable_fp4_indexer,
                args.context_length,
                args.gpu_memory_per_gpu,
                args.mem_fraction,
            )
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report))
    else:
        _print_text(report)
        if "per_gpu" in report:
            _print_per_gpu(report["per_gpu"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
