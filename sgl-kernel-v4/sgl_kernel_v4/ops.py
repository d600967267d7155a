"""Backend table for the hot DeepSeek-V4 ops.

The model calls every hot op through this module. ``get_op(name, device)`` returns the Triton
implementation (``sgl_kernel_v4.triton.*``) when ``device`` is a CUDA device, Triton is importable
and the Triton path is not disabled; otherwise the torch reference (``sgl_kernel_v4.ref.*``).
The op table (the wrapper functions of this module give the canonical signatures; both backends
implement exactly those, the Triton ones additionally accept ``out=`` keyword-only output buffers
where noted in their docstrings):

1. ``rms_norm``
2. ``compress_and_insert`` (CSA / HCA compressor: pooling + norm + RoPE + compressed-pool write),
   ``compress_windows_and_insert`` (the same on windows read in place from the per-request state
   and the new rows), ``advance_compressor_state`` (the per-request state update)
3. ``apply_rope``, ``inv_rope_quant``
4. ``qnorm_rope_kv_insert`` (q norm + kv norm / RoPE + sliding-window insert)
5. ``sparse_attention``
6. ``indexer_topk``
7. ``hc_pre``, ``hc_post`` (mHC)
8. ``fused_moe``
9. ``fp8_linear`` (FP8 128x128 block-scaled weights: weight-only or per-1x128 activation quant)
10. ``fused_moe_fp4`` (routed experts with FP4 e2m1 weights and ue8m0 per-32 scales)
11. ``moe_route`` (MoE router: scores, top-k or hash selection, weight normalisation)
12. ``swiglu_clamped`` (the shared expert's clamped SwiGLU)

Shapes outside a Triton kernel's range run the torch reference instead, on the same device (a
config's shapes must not crash a GPU server): the wrappers below test the call's shapes with the
predicates of :data:`TRITON_SHAPE_LIMITS` (integer tests on ``.shape``, no device work) and pass
the result to :func:`get_op`. The limits: the RoPE / q-norm / compressor kernels need a head dim
``2 * 2^k`` (pairs tiled by a power of two), the compressor state a row width ``2^k``, the
indexer a power-of-two head dim >= 16 and mHC a power-of-two ``hc_mult``; e.g. ``head_dim`` 96 or
``hc_mult`` 3 run those ops through ``sgl_kernel_v4.ref`` (float KV pools only: the quantized
pool formats have no torch writer there, and their block layouts need multiples of 64 anyway).
:func:`triton_supports` answers the same question for tests and callers.

Precision of fp32 models: the Triton kernels multiply fp32 ``tl.dot`` operands in IEEE fp32 while
torch's fp32 matmuls exclude TF32 (``torch.backends.cuda.matmul.allow_tf32`` False, torch's
default; ``torch.set_float32_matmul_precision("high")`` or ``fp32_precision = "tf32"`` allow it),
so an fp32 model gets the products torch itself would give it, and TF32 where the user allows
TF32 (:func:`sgl_kernel_v4.triton._utils.ieee_f32_dots`, passed to the kernels as the constexpr
``IEEE``; bf16 / fp8 operands compile as before). mHC's projection keeps its own ``"tf32x3"``
(three TF32 products: fp32 accuracy).

Disabling Triton: set the environment variable ``SGLANG_V4_DISABLE_TRITON=1`` before the first
lookup, or call :func:`set_triton_enabled` (e.g. from a ``--disable-triton-kernels`` server flag).

Nothing here imports ``triton`` at import time: the Triton modules are imported lazily on the
first CUDA lookup, so ``import sgl_kernel_v4.ops`` works on a CPU-only machine without Triton.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "OP_NAMES",
    "TRITON_SHAPE_LIMITS",
    "get_op",
    "triton_supports",
    "set_triton_enabled",
    "triton_enabled",
    "triton_available",
    "rms_norm",
    "compress_and_insert",
    "compress_windows_and_insert",
    "advance_compressor_state",
    "apply_rope",
    "inv_rope_quant",
    "qnorm_rope_kv_insert",
    "sparse_attention",
    "indexer_topk",
    "hc_pre",
    "hc_post",
    "fused_moe",
    "fp8_linear",
    "fused_moe_fp4",
    "moe_route",
    "swiglu_clamped",
]

# op name -> module under sgl_kernel_v4.ref (the torch references, exact op-table signatures)
_REF_MODULES: dict[str, str] = {
    "rms_norm": "norm",
    "compress_and_insert": "compressor",
    "compress_windows_and_insert": "compressor_state",
    "advance_compressor_state": "compressor_state",
    "apply_rope": "rope",
    "inv_rope_quant": "rope",
    "qnorm_rope_kv_insert": "rope",
    "sparse_attention": "attention",
    "indexer_topk": "attention",
    "hc_pre": "mhc",
    "hc_post": "mhc",
    "fused_moe": "moe",
    "fp8_linear": "fp8_gemm",
    "fused_moe_fp4": "moe_fp4",
    "moe_route": "moe_router",
    "swiglu_clamped": "moe",
}

# op name -> module under sgl_kernel_v4.triton (only ops that have a Triton kernel)
_TRITON_MODULES: dict[str, str] = {
    "rms_norm": "norm",
    "compress_and_insert": "compressor",
    "compress_windows_and_insert": "compressor_state",
    "advance_compressor_state": "compressor_state",
    "apply_rope": "rope",
    "inv_rope_quant": "rope",
    "qnorm_rope_kv_insert": "rope",
    "sparse_attention": "attention",
    "indexer_topk": "indexer",
    "hc_pre": "mhc",
    "hc_post": "mhc_post",
    "fused_moe": "moe",
    "fp8_linear": "fp8_gemm",
    "fused_moe_fp4": "moe_fp4",
    "moe_route": "moe_router",
    "swiglu_clamped": "activation",
}

OP_NAMES: tuple[str, ...] = tuple(_REF_MODULES)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _pairs_pow2(d: int) -> bool:
    """``d = 2 * 2^k``: the RoPE / compressor kernels tile the ``d / 2`` channel pairs."""
    return d % 2 == 0 and _pow2(d // 2)


def _compress_windows_shapes(kv_new: torch.Tensor, gate: torch.Tensor, position_bias: torch.Tensor,
                             *args: Any) -> bool:  # fmt: skip
    X = position_bias.shape[-1]  # 2d (CSA: overlapping windows) or d (HCA)
    d = X // 2 if args[4] is not None else X  # args[4]: ovl_kv
    return _pow2(X) and _pairs_pow2(d)


#: op name -> ``predicate(*args)`` over the op-table arguments: True when the op's Triton kernel
#: supports the call's shapes (ops not listed: every shape). Integer tests only.
TRITON_SHAPE_LIMITS: dict[str, Callable[..., bool]] = {
    "apply_rope": lambda x, *_: _pairs_pow2(x.shape[-1]),
    "inv_rope_quant": lambda o, *_: _pairs_pow2(o.shape[-1]),
    "qnorm_rope_kv_insert": lambda q, *_: _pairs_pow2(q.shape[-1]),
    "compress_and_insert": lambda kv, *_: _pairs_pow2(kv.shape[-1]),
    "compress_windows_and_insert": _compress_windows_shapes,
    "advance_compressor_state": lambda kv_new, gate, position_bias, *_: _pow2(position_bias.shape[-1]),
    "indexer_topk": lambda q, *_: _pow2(q.shape[-1]) and q.shape[-1] >= 16,
    "hc_pre": lambda x, *_: _pow2(x.shape[1]),
    "hc_post": lambda block_out, residual, *_: _pow2(residual.shape[1]),
}


def triton_supports(name: str, *args: Any) -> bool:
    """Whether op ``name``'s Triton kernel supports the shapes of the op-table arguments ``args``
    (:data:`TRITON_SHAPE_LIMITS`); it does not look at the device or :func:`triton_enabled`.

    Raises:
        ValueError: ``name`` is not an op of the table.
    """
    if name not in _REF_MODULES:
        raise ValueError(f"name: unknown op {name!r}; expected one of {OP_NAMES}")
    check = TRITON_SHAPE_LIMITS.get(name)
    return True if check is None else bool(check(*args))


_triton_flag: bool | None = None  # None = decide from the environment
_cache: dict[tuple[str, str], Callable[..., Any]] = {}


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """True when the ``triton`` package can be imported and CUDA is available (decided once per
    process: :func:`get_op` runs ~85 times per forward, and ``torch.cuda.is_available`` asks the
    driver each time)."""
    return importlib.util.find_spec("triton") is not None and torch.cuda.is_available()


def triton_enabled() -> bool:
    """True when lookups on CUDA devices return Triton kernels.

    Off when ``SGLANG_V4_DISABLE_TRITON`` is set to ``1``/``true``/``yes`` (read at each call until
    :func:`set_triton_enabled` overrides it), or when Triton/CUDA is unavailable.
    """
    if _triton_flag is not None:
        return _triton_flag and triton_available()
    env = os.environ.get("SGLANG_V4_DISABLE_TRITON", "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return False
    return triton_available()


def set_triton_enabled(enabled: bool | None) -> None:
    """Force the Triton path on (``True``, if available) or off (``False``); ``None`` = environment.

    Clears the lookup cache so later :func:`get_op` calls see the change.
    """
    global _triton_flag
    _triton_flag = enabled
    _cache.clear()


def _load(package: str, module: str, name: str) -> Callable[..., Any]:
    mod = importlib.import_module(f"sgl_kernel_v4.{package}.{module}")
    return getattr(mod, name)


def get_op(name: str, device: torch.device | str, supported: bool = True) -> Callable[..., Any]:
    """Return the implementation of op ``name`` for tensors on ``device``.

    Args:
        name: one of :data:`OP_NAMES` (the op table in the module docstring).
        device: the device the op's inputs live on (``torch.device`` or a string like ``"cuda:0"``).
        supported: whether the Triton kernel supports the call's shapes (:func:`triton_supports`;
            the wrappers of this module pass it); False gives the torch reference.

    Returns:
        The Triton implementation on CUDA when :func:`triton_enabled` and ``supported``, else the
        torch reference ``sgl_kernel_v4.ref.<module>.<name>``.

    Raises:
        ValueError: ``name`` is not an op of the table.
    """
    if name not in _REF_MODULES:
        raise ValueError(f"name: unknown op {name!r}; expected one of {OP_NAMES}")
    dev_type = device.type if isinstance(device, torch.device) else torch.device(device).type
    use_triton = supported and dev_type == "cuda" and name in _TRITON_MODULES and triton_enabled()
    key = (name, "triton" if use_triton else "ref")
    fn = _cache.get(key)
    if fn is None:
        if use_triton:
            fn = _load("triton", _TRITON_MODULES[name], name)
        else:
            fn = _load("ref", _REF_MODULES[name], name)
        _cache[key] = fn
    return fn


# ---------------------------------------------------------------------------------------------
# Dispatching wrappers with the op-table signatures (device taken from the first tensor input).
# KV pools are passed as float ``[N, d]`` views or as quantized row views (``PagedRows`` or an
# object with ``paged()``); the Triton kernels read and write every pool format themselves.
# ---------------------------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim of ``x [T, D]``; see op table entry 1."""
    return get_op("rms_norm", x.device)(x, weight, eps)


def compress_and_insert(
    kv: torch.Tensor,
    score: torch.Tensor,
    norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pool_flat: Any,
    out_index: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """Softmax pooling + RMSNorm + RoPE + pool write (any pool format); see op table entry 2."""
    ok = _pairs_pow2(kv.shape[-1])
    return get_op("compress_and_insert", kv.device, ok)(
        kv, score, norm_weight, cos, sin, pool_flat, out_index, eps
    )


def compress_windows_and_insert(
    kv_new: torch.Tensor,
    gate: torch.Tensor,
    position_bias: torch.Tensor,
    positions: torch.Tensor,
    req_pool_indices: torch.Tensor,
    buf_kv: torch.Tensor,
    buf_score: torch.Tensor,
    ovl_kv: torch.Tensor | None,
    ovl_score: torch.Tensor | None,
    win_rows: torch.Tensor,
    win_prev: torch.Tensor,
    norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pool_flat: Any,
    win_out: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """``compress_and_insert`` of the windows a forward completes, their rows read from the
    compressor state and the new rows (score bias folded in); see op table entry 2 and
    :func:`sgl_kernel_v4.ref.compressor_state.compress_windows_and_insert`."""
    ok = _compress_windows_shapes(
        kv_new, gate, position_bias, positions, req_pool_indices, buf_kv, buf_score, ovl_kv
    )
    return get_op("compress_windows_and_insert", kv_new.device, ok)(
        kv_new, gate, position_bias, positions, req_pool_indices, buf_kv, buf_score, ovl_kv, ovl_score,
        win_rows, win_prev, norm_weight, cos, sin, pool_flat, win_out, eps,
    )  # fmt: skip


def advance_compressor_state(
    kv_new: torch.Tensor,
    gate: torch.Tensor,
    position_bias: torch.Tensor,
    positions: torch.Tensor,
    req_pool_indices: torch.Tensor,
    buf_kv: torch.Tensor,
    buf_score: torch.Tensor,
    ovl_kv: torch.Tensor | None,
    ovl_score: torch.Tensor | None,
    snap_kv: torch.Tensor | None,
    snap_score: torch.Tensor | None,
    buf_rows: torch.Tensor,
    ovl_rows: torch.Tensor,
    snap_rows: torch.Tensor,
    snap_pages: torch.Tensor,
) -> None:
    """In-place update of the per-request compressor state (partial window, CSA overlap half and
    resume snapshots); see op table entry 2 and
    :func:`sgl_kernel_v4.ref.compressor_state.advance_compressor_state`."""
    get_op("advance_compressor_state", kv_new.device, _pow2(position_bias.shape[-1]))(
        kv_new, gate, position_bias, positions, req_pool_indices, buf_kv, buf_score, ovl_kv, ovl_score,
        snap_kv, snap_score, buf_rows, ovl_rows, snap_rows, snap_pages,
    )  # fmt: skip


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved RoPE on the trailing ``2*cos.shape[-1]`` channels; see op table entry 3."""
    return get_op("apply_rope", x.device, _pairs_pow2(x.shape[-1]))(x, cos, sin)


def inv_rope_quant(o: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, fp8: bool = False) -> Any:
    """Inverse RoPE on the attention output (+ optional fp8 quant); see op table entry 3."""
    return get_op("inv_rope_quant", o.device, _pairs_pow2(o.shape[-1]))(o, cos, sin, fp8)


def qnorm_rope_kv_insert(
    q: torch.Tensor,
    kv: torch.Tensor,
    kv_norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    swa_flat: Any,
    swa_index: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q-norm + RoPE, kv norm + RoPE + window insert (any pool format); see op table entry 4."""
    op = get_op("qnorm_rope_kv_insert", q.device, _pairs_pow2(q.shape[-1]))
    return op(q, kv, kv_norm_weight, cos, sin, swa_flat, swa_index, eps)


def sparse_attention(
    q: torch.Tensor,
    swa_kv: Any,
    swa_pages: torch.Tensor,
    positions: torch.Tensor,
    window: int,
    sinks: torch.Tensor,
    scale: float,
    comp_kv: Any = None,
    comp_entries: torch.Tensor | None = None,
    comp_visible: torch.Tensor | None = None,
    req_to_page: torch.Tensor | None = None,
    req_rows: torch.Tensor | None = None,
    token_req: torch.Tensor | None = None,
    entries_per_page: int = 1,
    dense_prefix: list | None = None,
) -> torch.Tensor:
    """Paged shared-KV sparse attention with a per-head sink: each token over its sliding window
    and its selected (CSA) or visible (HCA) compressed entries, found through the page tables;
    see op table entry 5 and :func:`sgl_kernel_v4.ref.attention.sparse_attention`.

    ``dense_prefix``: the :class:`~sgl_kernel_v4.dense_prefix.PrefixSegment` runs of long prefill
    tokens whose compressed entries the Triton backend reads gathered once per call
    (:mod:`sgl_kernel_v4.triton.attention_prefix`; same math): HCA (``comp_visible``) attends them
    as dense products; CSA (``comp_entries``) over fp8 pools reads them decoded to bf16. The
    reference, and CSA over float pools, ignore it."""
    fn = get_op("sparse_attention", q.device)
    if dense_prefix and fn.__module__.endswith("triton.attention"):
        from sgl_kernel_v4.paged import as_paged
        from sgl_kernel_v4.triton import attention_prefix as ap

        tables = (req_to_page, req_rows, token_req, entries_per_page, dense_prefix)
        if comp_visible is not None:
            return ap.sparse_attention_dense_prefix(
                q, swa_kv, swa_pages, positions, window, sinks, scale, comp_kv, comp_visible, *tables
            )
        if comp_entries is not None and as_paged(comp_kv).codec == "fp8_main":
            return ap.sparse_attention_decoded_csa(
                q, swa_kv, swa_pages, positions, window, sinks, scale, comp_kv, comp_entries, *tables
            )
    return fn(
        q, swa_kv, swa_pages, positions, window, sinks, scale, comp_kv, comp_entries, comp_visible,
        req_to_page, req_rows, token_req, entries_per_page,
    )  # fmt: skip


def indexer_topk(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv: Any,
    visible: torch.Tensor,
    req_to_page: torch.Tensor,
    req_rows: torch.Tensor,
    token_req: torch.Tensor,
    entries_per_page: int,
    topk: int,
    scale: float,
    max_visible: int | None = None,
    dense_prefix: list | None = None,
) -> torch.Tensor:
    """Lightning-indexer scores over every visible entry (paged keys) + top-k entry indices; see
    op table entry 6 and :func:`sgl_kernel_v4.ref.attention.indexer_topk`. ``max_visible`` bounds
    ``visible`` (the Triton kernel's scratch width; ``None`` reads it from ``visible``).

    ``dense_prefix``: :class:`~sgl_kernel_v4.dense_prefix.PrefixSegment` runs of long prefill
    tokens; over fp4 keys the Triton backend scores them on a copy of their request's keys decoded
    once per call (:mod:`sgl_kernel_v4.triton.indexer_decoded`: the same selection, bit for bit).
    The reference, and other key formats, ignore it."""
    DI = q.shape[-1]
    fn = get_op("indexer_topk", q.device, _pow2(DI) and DI >= 16)
    args = (q, weights, idx_kv, visible, req_to_page, req_rows, token_req, entries_per_page, topk, scale)
    if fn.__module__.endswith(".triton.indexer"):
        if dense_prefix:
            from sgl_kernel_v4.paged import as_paged
            from sgl_kernel_v4.triton import indexer_decoded as idd

            segs = [s for s in dense_prefix if s.n_entries > topk]  # shorter rows are never scored
            if segs and as_paged(idx_kv).codec in idd.DECODED_CODECS:
                return idd.indexer_topk_decoded(*args, segs, max_visible=max_visible)
        return fn(*args, max_visible=max_visible)
    return fn(*args)


def hc_pre(
    x: torch.Tensor,
    fn: torch.Tensor,
    base: torch.Tensor,
    scale: torch.Tensor,
    sinkhorn_iters: int,
    eps: float,
    norm_eps: float,
    *,
    norm_weight: torch.Tensor | None = None,
    norm_weight_eps: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mHC pre: (collapsed, post, comb); see op table entry 7. With ``norm_weight`` (``[D]`` fp32)
    ``collapsed`` comes back through the block's RMSNorm (``norm_weight_eps``), fused on CUDA."""
    op = get_op("hc_pre", x.device, _pow2(x.shape[1]))
    if norm_weight is None:
        return op(x, fn, base, scale, sinkhorn_iters, eps, norm_eps)
    return op(x, fn, base, scale, sinkhorn_iters, eps, norm_eps, norm_weight=norm_weight,
              norm_weight_eps=norm_weight_eps)  # fmt: skip


def hc_post(
    block_out: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor
) -> torch.Tensor:
    """mHC post: ``post ⊗ out + combᵀ · residual``; see op table entry 7."""
    return get_op("hc_post", block_out.device, _pow2(residual.shape[1]))(block_out, residual, post, comb)


def fused_moe(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    swiglu_limit: float,
) -> torch.Tensor:
    """Routed experts with clamped SwiGLU, weighted sum over top-k; see op table entry 8."""
    return get_op("fused_moe", x.device)(x, w_gate_up, w_down, topk_ids, topk_weights, swiglu_limit)


def fp8_linear(
    x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, variant: str | None = None
) -> torch.Tensor:
    """FP8 block-scaled linear ``x @ (weight * weight_scale)^T`` (grouped for 3-D ``x``).

    ``x [T, K]`` or ``[T, G, K]``; ``weight [G*N, K]`` float8_e4m3fn; ``weight_scale
    [ceil(G*N/128), ceil(K/128)]`` float32; returns ``[T, G*N]`` in x's dtype. ``variant``: ``None``
    (Triton: weight-only for few tokens, activation-quantized above; reference: exact weight-only),
    ``"w8a16"``, ``"w8a8"`` or ``"w8a8_fused"`` (the decode kernel quantizing the activations
    itself; Triton, at most 64 tokens: ``SGLANG_V4_FP8_DECODE_VARIANT`` overrides ``None``'s
    choice). See :mod:`sgl_kernel_v4.ref.fp8_gemm`.
    """
    return get_op("fp8_linear", x.device)(x, weight, weight_scale, variant)


def fused_moe_fp4(
    x: torch.Tensor,
    w13: torch.Tensor,
    w13_scale: torch.Tensor,
    w2: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    swiglu_limit: float,
) -> torch.Tensor:
    """Routed experts over FP4 (e2m1 x ue8m0 per 32) weights, clamped SwiGLU, weighted top-k sum.

    ``x [T, D]``; ``w13 [E, 2I, D/2]`` / ``w2 [E, D, I/2]`` packed uint8 with ``[.., /32]`` uint8
    scales; returns ``[T, D]`` in x's dtype. See :mod:`sgl_kernel_v4.ref.moe_fp4`.
    """
    return get_op("fused_moe_fp4", x.device)(
        x, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights, swiglu_limit
    )


def moe_route(
    logits: torch.Tensor,
    e_score_correction_bias: torch.Tensor | None,
    tid2eid: torch.Tensor | None,
    input_ids: torch.Tensor | None,
    top_k: int,
    scaling: float,
    score_func: str = "sqrtsoftplus",
) -> tuple[torch.Tensor, torch.Tensor]:
    """MoE routing from the router logits ``[T, E]``: ``sqrt(softplus)`` (or, with
    ``score_func="sigmoid"``, ``sigmoid``) scores, the top-k of
    ``scores + e_score_correction_bias`` (ties: lower expert id) or hash ids ``tid2eid[input_ids]``,
    weights renormalised and scaled; returns ``(ids [T, k] int64, weights [T, k] fp32)``. See op
    table entry 11 and :mod:`sgl_kernel_v4.ref.moe_router` (exact rounding; Triton is bit-equal)."""
    return get_op("moe_route", logits.device)(
        logits, e_score_correction_bias, tid2eid, input_ids, top_k, scaling, score_func
    )


def swiglu_clamped(gate_up: torch.Tensor, limit: float) -> torch.Tensor:
    """``silu(clamp(gate, max=limit)) * clamp(up, -limit, limit)`` on ``gate_up [T, 2I] = [gate | up]``
    -> ``[T, I]`` in its dtype; see op table entry 12 and :func:`sgl_kernel_v4.ref.moe.swiglu_clamped`."""
    return get_op("swiglu_clamped", gate_up.device)(gate_up, limit)
