"""KV pool planner: bytes per token of each KV kind, the published totals, and pool sizing.

The runtime calls :func:`plan_kv_pools` at start-up to size its pools; the memory planner CLI
(``python -m sglang_v4.tools.kv_planner``) prints the same numbers. Everything here is arithmetic on
the spec objects of :func:`~sglang_v4.mem_cache.kv_spec.build_kv_layout`.

KV bytes per token
------------------
A CSA layer stores one main entry and one indexer entry per ``m = 4`` tokens, an HCA layer one main
entry per ``m' = 128`` tokens, and every layer keeps the last ``sliding_window = 128`` raw main
entries of a request. For V4-Pro (30 CSA + 31 HCA layers) in bf16 at 1,048,576 tokens::

    CSA   30 x 2^18 x (1024 + 256)  = 10,066,329,600 B
    HCA   31 x 2^13 x 1024          =    260,046,848 B
    SWA   61 x 128 x 1024           =      7,995,392 B
    total                           = 10,334,371,840 B = 9.62 GiB

DeepSeek-V3.2 (MLA, 61 layers) stores per token and layer the 576-d latent (kv_lora_rank 512 +
rope 64) and the 128-d lightning-indexer key; with both counted at bf16 (the same dtype as the V4
figure): ``61 x (576 + 128) x 2 = 85,888 B/token``, i.e. 83.875 GiB at 2^20 tokens -- the
published "83.9 GiB", 8.7x V4-Pro's 9.62 GiB. (Counting V3.2's indexer keys in their fp8 cache
format, 132 B, instead gives 76.5 GiB; :func:`v32_kv_bytes_per_token` does either.)

Units the planner counts
------------------------
A *block page* is one 256-token block of every block kind (CSA main + CSA indexer per CSA layer,
HCA per HCA layer); a *window page* is ``sliding_window`` raw positions of every layer plus the CSA
overlap snapshots (a request holds up to 2 while decoding, a cached resume point 1); a *request
slot* is one running request's live fp32 compressor state. Fragmentation is the size-class padding
inside the planned pages (``KVPlan.fragmentation_bytes``); the pools really allocate it
(``DSV4KVPool(padded=True)`` gives every quantized page its class size as stride).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache.kv_format import FP4_BLOCK, float_bytes, normalize_kv_cache_dtype
from sglang_v4.mem_cache.kv_spec import KVKind, KVLayout, PageSpace, build_kv_layout

__all__ = [
    "GiB",
    "V32_NUM_LAYERS",
    "KVPlan",
    "kv_bytes_for_context",
    "v32_kv_bytes_per_token",
    "plan_kv_pools",
]

GiB = 1 << 30

# DeepSeek-V3.2 (MLA + lightning indexer): 61 layers, kv_lora_rank 512 + rope 64, indexer 128-d.
V32_NUM_LAYERS = 61
V32_KV_LORA_RANK = 512
V32_ROPE_DIM = 64
V32_INDEX_HEAD_DIM = 128


def kv_bytes_for_context(
    model_config: ModelConfig, kv_cache_dtype: str | None, fp4_indexer: bool, context_length: int
) -> dict[str, Any]:
    """Exact KV bytes (entries only, no page padding, no compressor state) of one sequence.

    Per block kind ``floor(L / tokens_per_entry)`` entries per layer (``floor(L / 4)`` CSA main
    + indexer entries per CSA layer, ``floor(L / 128)`` HCA entries per HCA layer), and
    ``min(L, sliding_window)`` SWA entries per layer.

    Returns:
        dict with ``total_kv_bytes``, ``compressed_bytes``, ``window_bytes`` and
        ``per_layer_type`` ({"csa", "hca", "sliding"} -> layers, entry bytes, bytes per token per
        layer (amortised), window bytes per layer, bytes for this context).

    Raises:
        ValueError: if ``context_length`` is negative.
    """
    if context_length < 0:
        raise ValueError(f"context_length: must be >= 0, got {context_length}")
    lay = build_kv_layout(model_config, kv_cache_dtype, fp4_indexer)
    main = lay.formats.main.entry_bytes
    indexer = lay.formats.indexer.entry_bytes

    def compressed(kind: KVKind) -> int:
        spec = lay.kinds.get(kind)
        if spec is None:
            return 0
        return spec.num_layers * (context_length // spec.tokens_per_entry) * spec.row_bytes

    swa_per_layer = min(context_length, lay.sliding_window) * main
    csa = compressed(KVKind.CSA_MAIN) + compressed(KVKind.CSA_INDEXER)
    hca = compressed(KVKind.HCA)
    swa = model_config.num_layers * swa_per_layer
    n_csa, n_hca = len(model_config.csa_layers), len(model_config.hca_layers)
    m, mp = lay.csa_ratio, lay.hca_ratio
    per = {
        "csa": {
            "layers": n_csa,
            "compress_ratio": m,
            "main_entry_bytes": main,
            "indexer_entry_bytes": indexer,
            "bytes_per_token_per_layer": (main + indexer) / m,
            "window_bytes_per_layer": swa_per_layer,
            "compressed_bytes": csa,
            "total_bytes": csa + n_csa * swa_per_layer,
        },
        "hca": {
            "layers": n_hca,
            "compress_ratio": mp,
            "main_entry_bytes": main,
            "bytes_per_token_per_layer": main / mp,
            "window_bytes_per_layer": swa_per_layer,
            "compressed_bytes": hca,
            "total_bytes": hca + n_hca * swa_per_layer,
        },
        "sliding": {
            "layers": len(model_config.sliding_layers),
            "main_entry_bytes": main,
            "bytes_per_token_per_layer": 0.0,
            "window_bytes_per_layer": swa_per_layer,
            "compressed_bytes": 0,
            "total_bytes": len(model_config.sliding_layers) * swa_per_layer,
        },
    }
    return {
        "context_length": context_length,
        "total_kv_bytes": csa + hca + swa,
        "compressed_bytes": csa + hca,
        "window_bytes": swa,
        "per_layer_type": per,
    }


def v32_kv_bytes_per_token(kv_cache_dtype: str | None = "bf16", fp4_indexer: bool = False) -> int:
    """DeepSeek-V3.2 KV bytes per token (all 61 layers): MLA latent + lightning-indexer key.

    bf16 / fp32: ``(576 + 128) * 2`` (or ``* 4``) per layer. fp8: the V3.2 ``fp8_ds_mla`` entry
    (512 e4m3 + 4 fp32 scales + 64 bf16 rope = 656 B) plus the fp8 indexer key (132 B) or, with
    ``fp4_indexer``, the fp4 key (68 B).
    """
    dt = normalize_kv_cache_dtype(kv_cache_dtype)
    if dt == "fp8_e4m3":
        latent = V32_KV_LORA_RANK + 4 * (V32_KV_LORA_RANK // 128) + 2 * V32_ROPE_DIM
        index = V32_INDEX_HEAD_DIM + 4
    else:
        fb = float_bytes(dt)
        latent = (V32_KV_LORA_RANK + V32_ROPE_DIM) * fb
        index = V32_INDEX_HEAD_DIM * fb
    if fp4_indexer:
        index = V32_INDEX_HEAD_DIM // 2 + V32_INDEX_HEAD_DIM // FP4_BLOCK
    return V32_NUM_LAYERS * (latent + index)


@dataclass
class KVPlan:
    """Result of :func:`plan_kv_pools`: what to allocate and what it buys.

    Attributes:
        kv_cache_dtype / fp4_indexer / page_size: inputs.
        entry_bytes: main / indexer entry bytes.
        bytes_per_token_per_layer: amortised compressed bytes per token per layer type
            (``csa``: (main + indexer) / 4, ``hca``: main / 128, ``sliding``: 0) plus
            ``window_bytes_per_layer`` (sliding window of one request, every layer).
        classes: the page-size classes (bytes, kinds, number of pages to allocate).
        block_page_bytes / window_page_bytes / request_state_bytes: unit sizes (all layers; a
            window page includes its fp32 overlap snapshot, a request slot is fp32 state only).
        num_block_pages / num_window_pages / num_request_slots: how many to allocate (usable;
            the pools add the reserved dummy page 0 themselves).
        kv_capacity_tokens: ``num_block_pages * page_size``.
        context_length: the context concurrency was planned for.
        max_context: longest single request the pools can hold, capped by ``context_length`` (the
            serving context: a server refuses longer requests; the model's context by default).
        max_concurrency: requests of ``context_length`` tokens that fit at once.
        total_bytes: bytes of all planned (usable) pages and slots; budget_bytes: the budget
            (or None).
        dummy_bytes: bytes of the reserved id 0 of each page-id space (one block page, one
            window page, one request slot) that the pools allocate on top of the planned units;
            ``allocated_bytes = total_bytes + dummy_bytes`` is what ``DSV4KVPool`` holds, and
            what a budget has to cover.
        state_bytes: fp32 compressor state planned (window snapshots + request slots).
        fragmentation_bytes: padding inside the planned pages (allocated but unusable);
            fragmentation_ratio: ``fragmentation_bytes / total_bytes``.
        window_pages_per_request / window_pages_per_block / extra_window_pages: the window-page
            policy the plan was made with (see :func:`plan_kv_pools`).
    """

    kv_cache_dtype: str
    fp4_indexer: bool
    page_size: int
    entry_bytes: dict[str, int]
    bytes_per_token_per_layer: dict[str, float]
    classes: list[dict[str, Any]]
    block_page_bytes: int
    window_page_bytes: int
    request_state_bytes: int
    num_block_pages: int
    num_window_pages: int
    num_request_slots: int
    kv_capacity_tokens: int
    context_length: int
    max_context: int
    max_concurrency: int
    total_bytes: int
    budget_bytes: int | None
    state_bytes: int
    fragmentation_bytes: int
    fragmentation_ratio: float
    layout: KVLayout = field(repr=False)
    window_pages_per_request: int = 3
    window_pages_per_block: float = 0.0
    extra_window_pages: int = 0
    dummy_bytes: int = 0

    @property
    def allocated_bytes(self) -> int:
        """Bytes the pools hold: the planned units plus the reserved page 0 of each space."""
        return self.total_bytes + self.dummy_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (the layout included as ``layout``)."""
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "layout"}
        d["layout"] = self.layout.to_dict()
        d["allocated_bytes"] = self.allocated_bytes
        return d

    def capacity_warning(self) -> str | None:
        """The start-up warning of a pool that cannot hold one request of ``context_length``
        tokens (SGLang 0.5.23 warns at that point too: not an error, a deployment that never sends
        full-length requests may want a small pool), naming both counts, what happens to longer
        requests and the flags that change it; ``None`` when one full-length request fits."""
        if self.kv_capacity_tokens >= self.context_length:
            return None
        return (
            f"KV pool holds {self.kv_capacity_tokens} tokens, fewer than the context length "
            f"{self.context_length}: one full-length request cannot fit. A prompt of more than "
            f"{self.kv_capacity_tokens - 1} tokens, or a prompt plus max_new_tokens over "
            f"{self.kv_capacity_tokens}, is refused (400); a request without max_new_tokens stops at "
            f"{self.kv_capacity_tokens} tokens. Raise --max-total-tokens (or --mem-fraction-static "
            "on CUDA) or lower --context-length."
        )

    def summary(self) -> str:
        """One log line: capacity, max context, concurrency, fragmentation.

        ``max concurrency`` counts requests of the full ``context_length``; when the pools hold
        none (0: the KV capacity is below the context length) the line says so and that shorter
        requests are still served (up to ``max_context`` tokens each, sharing the capacity, up to
        ``num_request_slots`` at once), so that a 0 is not read as "serves nothing"."""
        conc = f"max concurrency {self.max_concurrency} at {self.context_length} tokens"
        if self.max_concurrency == 0:
            conc += (
                f" (the pools' {self.kv_capacity_tokens} tokens hold no full-context request; shorter "
                f"requests are served, up to {self.max_context} tokens each, sharing them, "
                f"up to {self.num_request_slots} at once)"
            )
        return (
            f"KV pools ({self.kv_cache_dtype}{', fp4 indexer' if self.fp4_indexer else ''}): "
            f"{self.num_block_pages} block pages x {self.block_page_bytes} B, "
            f"{self.num_window_pages} window pages x {self.window_page_bytes} B, "
            f"{self.num_request_slots} request slots; KV capacity {self.kv_capacity_tokens} tokens, "
            f"max context {self.max_context}, {conc}, {self.total_bytes / GiB:.3f} GiB, "
            f"fragmentation {self.fragmentation_bytes} B ({100 * self.fragmentation_ratio:.2f}%)"
        )


def plan_kv_pools(
    model_config: ModelConfig,
    kv_cache_dtype: str | None,
    fp4_indexer: bool = False,
    page_size: int = 256,
    budget_bytes: int | None = None,
    max_total_tokens: int | None = None,
    context_length: int | None = None,
    max_running_requests: int | None = None,
    window_pages_per_request: int = 3,
    window_pages_per_block: float = 0.0,
    extra_window_pages: int = 0,
) -> KVPlan:
    """Size the KV pools (called by the runtime at start-up and by the planner CLI).

    Every running request holds ``ceil(L / page_size)`` block pages, one request slot and
    ``window_pages_per_request`` window pages (default 3: the two that cover its last 128
    positions while decoding, plus one for a cached resume point of the radix cache). With ``n``
    request slots and ``w = window_pages_per_request``::

        n = max_running_requests or max(1, budget // (blocks(L) * block + w * window + state))
        num_block_pages = (budget - n * (w * window + state)) // block_page_bytes

    or, with ``max_total_tokens`` instead of a budget, ``num_block_pages = floor(max_total_tokens /
    page_size)`` (SGLang rounds its token budget down to the page size:
    ``max_total_num_tokens // page_size * page_size``) and ``n = max(1, num_block_pages //
    blocks(L))``. ``max_total_tokens`` also caps the pages a budget allows. ``max_concurrency = min(n, num_block_pages // blocks(L))``.

    The runtime also keeps resume states of cached blocks (a window page per
    ``resume_interval`` cached blocks, radix cache) and the transient window pages of a prefill
    chunk: ``window_pages_per_block = r`` adds ``floor(r * num_block_pages)`` window pages (and,
    under a budget, makes a block page cost ``block + r * window``), ``extra_window_pages = e``
    adds ``e`` (taken from the budget first)::

        num_window_pages = w * n + floor(r * num_block_pages) + e

    Args:
        model_config: the model.
        kv_cache_dtype: ``bf16`` / ``fp32`` / ``fp8_e4m3`` / ``auto``.
        fp4_indexer: fp4 indexer keys.
        page_size: tokens per block page (256).
        budget_bytes: bytes available for KV (after weights and activations).
        max_total_tokens: token capacity to allocate (``--max-total-tokens``), rounded down to
            whole pages.
        context_length: request length concurrency is planned for (default: the model's
            ``max_position_embeddings``).
        max_running_requests: fixes the number of request slots instead of deriving it.
        window_pages_per_request: window pages planned per request slot.
        window_pages_per_block: window pages planned per block page (resume states; >= 0).
        extra_window_pages: window pages planned on top (>= 0).

    Raises:
        ValueError: if neither ``budget_bytes`` nor ``max_total_tokens`` is given, a value is
            out of range (``max_total_tokens`` below one page included), or the budget cannot
            hold one request slot plus one block page.
    """
    if budget_bytes is None and max_total_tokens is None:
        raise ValueError("plan_kv_pools: give budget_bytes or max_total_tokens")
    if budget_bytes is not None and budget_bytes <= 0:
        raise ValueError(f"budget_bytes: must be positive, got {budget_bytes}")
    if max_total_tokens is not None and max_total_tokens <= 0:
        raise ValueError(f"max_total_tokens: must be positive, got {max_total_tokens}")
    if max_total_tokens is not None and max_total_tokens < page_size:
        raise ValueError(
            f"max_total_tokens (--max-total-tokens): {max_total_tokens} is below one page of "
            f"{page_size} tokens (the KV pool is rounded down to whole pages)"
        )
    if window_pages_per_request < 1:
        raise ValueError(f"window_pages_per_request: must be >= 1, got {window_pages_per_request}")
    if window_pages_per_block < 0:
        raise ValueError(f"window_pages_per_block: must be >= 0, got {window_pages_per_block}")
    if extra_window_pages < 0:
        raise ValueError(f"extra_window_pages: must be >= 0, got {extra_window_pages}")
    if max_running_requests is not None and max_running_requests <= 0:
        raise ValueError(f"max_running_requests: must be positive, got {max_running_requests}")
    model_ctx = model_config.context_length
    ctx = model_ctx if context_length is None else int(context_length)
    if ctx <= 0:
        raise ValueError(f"context_length: must be positive, got {ctx}")
    lay = build_kv_layout(model_config, kv_cache_dtype, fp4_indexer, page_size)
    blk, win, st = lay.block_page_bytes, lay.window_page_bytes, lay.request_state_bytes
    per_req_fixed = window_pages_per_request * win + st
    blocks_per_req = -(-ctx // page_size)
    wpb = float(window_pages_per_block)
    blk_cost = blk + wpb * win  # a block page plus its share of resume-state window pages
    fixed = extra_window_pages * win + blk + win + st  # extra window pages + the dummy units

    if budget_bytes is not None:
        if max_running_requests is not None:
            n = max_running_requests
        else:
            n = max(1, int((budget_bytes - fixed) // (blocks_per_req * blk_cost + per_req_fixed)))
        num_blocks = int((budget_bytes - fixed - n * per_req_fixed) // blk_cost) if blk_cost else 0
        if max_total_tokens is not None:
            num_blocks = min(num_blocks, max_total_tokens // page_size)
        if num_blocks < 1:
            raise ValueError(
                f"budget_bytes: {budget_bytes} B cannot hold {n} request slot(s) "
                f"({per_req_fixed} B each), {extra_window_pages} extra window page(s) "
                f"({win} B each), the reserved page 0 of each page space ({blk + win + st} B) "
                f"plus one block page ({int(blk_cost)} B with its resume state); give the KV pools "
                "more memory (raise --mem-fraction-static) or need less of it (lower "
                "--max-running-requests, or --context-length when it sets the request slots)"
            )
    else:
        assert max_total_tokens is not None
        num_blocks = max_total_tokens // page_size
        n = max_running_requests or max(1, num_blocks // blocks_per_req)

    max_concurrency = min(n, num_blocks // blocks_per_req)
    max_context = min(ctx, num_blocks * page_size)
    num_windows = window_pages_per_request * n + int(wpb * num_blocks + 1e-9) + extra_window_pages
    total = num_blocks * blk + num_windows * win + n * st
    frag = num_blocks * lay.block_padding_bytes + num_windows * lay.window_padding_bytes

    fmt = lay.formats
    units = {PageSpace.BLOCK: num_blocks, PageSpace.WINDOW: num_windows}
    classes = []
    for c in lay.classes:
        pages = sum(
            units[lay.kinds[k].space] * lay.kinds[k].num_layers * lay.kinds[k].pages_per_unit for k in c.kinds
        )
        classes.append({"page_bytes": c.page_bytes, "kinds": [k.value for k in c.kinds], "num_pages": pages})
    m, mp = lay.csa_ratio, lay.hca_ratio
    main, indexer = fmt.main.entry_bytes, fmt.indexer.entry_bytes
    return KVPlan(
        kv_cache_dtype=fmt.kv_cache_dtype,
        fp4_indexer=fmt.fp4_indexer,
        page_size=page_size,
        entry_bytes={"main": main, "indexer": indexer},
        bytes_per_token_per_layer={
            "csa": (main + indexer) / m,
            "hca": main / mp,
            "sliding": 0.0,
            "window_bytes_per_layer": float(lay.sliding_window * main),
        },
        classes=classes,
        block_page_bytes=blk,
        window_page_bytes=win,
        request_state_bytes=st,
        num_block_pages=int(num_blocks),
        num_window_pages=int(num_windows),
        num_request_slots=int(n),
        kv_capacity_tokens=int(num_blocks * page_size),
        context_length=ctx,
        max_context=int(max_context),
        max_concurrency=int(max_concurrency),
        total_bytes=int(total),
        budget_bytes=budget_bytes,
        state_bytes=int(num_windows * lay.window_snapshot_bytes + n * st),
        fragmentation_bytes=int(frag),
        fragmentation_ratio=frag / total if total else 0.0,
        layout=lay,
        window_pages_per_request=window_pages_per_request,
        window_pages_per_block=wpb,
        extra_window_pages=extra_window_pages,
        dummy_bytes=int(blk + win + st),
    )
