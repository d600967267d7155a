"""MoE router (Triton): scores, top-k (or hash) selection and weight normalisation in one launch.

Op-table entry ``moe_route`` (``sgl_kernel_v4/ops.py``); the math and the exact rounding are those
of the torch reference :mod:`sgl_kernel_v4.ref.moe_router` (HF ``DeepseekV4TopKRouter`` /
``DeepseekV4HashRouter``), reproduced bit for bit:

* ``score = L(sqrt(softplus(float64(logit))))`` with libdevice ``exp`` / ``log1p`` and a
  round-to-nearest square root in float64 (the functions torch's CUDA float64 softplus calls;
  under ``TRITON_INTERPRET=1``, which has no libdevice, ``log1p`` is evaluated from ``log`` to a
  few float64 ulp, which the rounding to float32 then absorbs); ``scoring_func = "sigmoid"``:
  ``L(1 / (1 + exp(-float64(logit))))`` (libdevice ``exp``; a round-to-nearest float64 division);
* top-k over ``float32(score) + bias`` by ``k`` arg-max passes, each taking the lowest expert id
  among equal keys (``tie_break_left``) and masking it out: descending key order, lower id first;
* slot-order float32 sum, ``L(max(s, tiny(L)))``, a round-to-nearest division (``div_rn``) and the
  scaling, each rounded to the logits dtype ``L`` as torch's ops do.

One program routes ``BLOCK_T`` tokens over all ``E <= 4096`` experts (one ``[BLOCK_T, BLOCK_E]``
tile); no host synchronisation, static shapes: CUDA-graph capturable.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from sgl_kernel_v4.ref.moe_router import NAN_KEY, check_score_func, sum_floor
from sgl_kernel_v4.triton._round import round_as
from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2

__all__ = ["moe_route"]

_MAX_EXPERTS = 4096
_NAN_KEY = tl.constexpr(NAN_KEY)
_TILE = 512  # elements of one program's [BLOCK_T, BLOCK_E] tile (float64 scores in registers): small, so
# a decode batch is spread over several programs (at E = 160 a [8, 256] tile took 17 us on an H200)


@triton.jit(do_not_specialize=["T"])  # the batch's token count
def _moe_route_kernel(
    logits_ptr,
    stride_lt,
    bias_ptr,
    tid2eid_ptr,
    input_ids_ptr,
    ids_ptr,
    w_ptr,
    T,
    E,
    scaling,
    floor,
    TOPK: tl.constexpr,
    HASH: tl.constexpr,
    SIGMOID: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_K: tl.constexpr,
    LIBDEVICE: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    rm = rows < T
    cols = tl.arange(0, BLOCK_E)
    cm = cols < E
    m2 = rm[:, None] & cm[None, :]
    x = tl.load(logits_ptr + rows[:, None].to(tl.int64) * stride_lt + cols[None, :], mask=m2, other=0.0)
    xd = x.to(tl.float64)
    if SIGMOID:
        en = libdevice.exp(-xd) if LIBDEVICE else tl.exp(-xd)
        r = 1.0 / (1.0 + en)
    else:
        if LIBDEVICE:  # CUDA: the libdevice functions torch's CUDA float64 softplus calls
            lp = libdevice.log1p(libdevice.exp(xd))
        else:  # interpreter (no libdevice): log1p(y) = log(u) * y / (u - 1), u = 1 + y (a few ulp)
            y = tl.exp(xd)
            u = 1.0 + y
            lp = tl.where(u == 1.0, y, tl.log(u) * (y / (u - 1.0)))
        sp = tl.where(xd > 20.0, xd, lp)  # torch softplus (beta 1, threshold 20)
        if LIBDEVICE:
            r = libdevice.sqrt(sp)  # __nv_sqrt: correctly rounded, as torch's float64 sqrt
        else:
            r = tl.sqrt(sp)  # numpy: correctly rounded
    # float64 -> float32 -> L: torch's double -> bf16 / fp16 cast goes through float32 too
    score = round_as(r.to(tl.float32), x)
    nan = score != score  # a NaN logit: never preferred, weight 0 (module docstring of the reference)
    score = tl.where(nan, 0.0, score)
    kk = tl.arange(0, BLOCK_K)
    ids = tl.zeros([BLOCK_T, BLOCK_K], tl.int64)
    wsel = tl.zeros([BLOCK_T, BLOCK_K], tl.float32)
    acc = tl.zeros([BLOCK_T], tl.float32)
    if HASH:
        tok = tl.load(input_ids_ptr + rows, mask=rm, other=0).to(tl.int64)
        for j in tl.static_range(TOPK):
            e = tl.load(tid2eid_ptr + tok * TOPK + j, mask=rm, other=0).to(tl.int64)
            wj = tl.sum(tl.where(cols[None, :] == e[:, None], score, 0.0), 1)  # one non-zero: exact
            acc = acc + wj
            ids = tl.where(kk[None, :] == j, e[:, None], ids)
            wsel = tl.where(kk[None, :] == j, wj[:, None], wsel)
    else:
        bias = tl.load(bias_ptr + cols, mask=cm, other=0.0)
        key = tl.where(nan | (bias != bias)[None, :], _NAN_KEY, score + bias[None, :])
        key = tl.where(m2, key, float("-inf"))
        for j in tl.static_range(TOPK):
            e = tl.argmax(key, 1, tie_break_left=True)
            hit = cols[None, :] == e[:, None]
            wj = tl.sum(tl.where(hit, score, 0.0), 1)
            key = tl.where(hit, float("-inf"), key)
            acc = acc + wj
            ids = tl.where(kk[None, :] == j, e[:, None].to(tl.int64), ids)
            wsel = tl.where(kk[None, :] == j, wj[:, None], wsel)
    s = round_as(acc, x)
    d = round_as(tl.maximum(s, floor), x)
    q = round_as(tl.math.div_rn(wsel, d[:, None]), x)
    out = round_as(q * scaling, x)
    km = rm[:, None] & (kk[None, :] < TOPK)
    offs = rows[:, None].to(tl.int64) * TOPK + kk[None, :]
    tl.store(ids_ptr + offs, ids, mask=km)
    tl.store(w_ptr + offs, out, mask=km)


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def moe_route(
    logits: torch.Tensor,
    e_score_correction_bias: torch.Tensor | None,
    tid2eid: torch.Tensor | None,
    input_ids: torch.Tensor | None,
    top_k: int,
    scaling: float,
    score_func: str = "sqrtsoftplus",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert ids and routing weights of each token (op table ``moe_route``), one launch.

    Args:
        logits: ``[T, E]`` router logits (bf16 / fp16 / fp32, last dim contiguous), ``E <= 4096``.
        e_score_correction_bias: ``[E]`` float selection bias (top-k layers), or ``None`` (hash).
        tid2eid: ``[vocab, k]`` int expert table (hash layers), or ``None``.
        input_ids: ``[T]`` int token ids (hash layers), or ``None``.
        top_k: experts per token ``k`` (at most ``E`` for top-k layers).
        scaling: ``routed_scaling_factor``.
        score_func: ``scoring_func``: ``"sqrtsoftplus"`` or ``"sigmoid"``.

    Returns:
        ``(topk_ids [T, k] int64, topk_weights [T, k] fp32)``, bit-equal to
        :func:`sgl_kernel_v4.ref.moe_router.moe_route` (ids in descending key order, the lower
        expert id first among equal keys; hash layers in ``tid2eid``'s column order).

    Raises:
        ValueError: as the reference, or an unsupported dtype / ``E`` / layout.
    """
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError(f"logits: expected [T, E] with a contiguous last dim, got {tuple(logits.shape)}")
    if logits.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"logits: expected bf16 / fp16 / fp32, got {logits.dtype}")
    if (e_score_correction_bias is None) == (tid2eid is None):
        raise ValueError("moe_route: give exactly one of e_score_correction_bias (top-k) and tid2eid (hash)")
    check_score_func(score_func)
    T, E = logits.shape
    if not 0 < E <= _MAX_EXPERTS or top_k <= 0:
        raise ValueError(
            f"moe_route: expected 0 < E <= {_MAX_EXPERTS} and top_k > 0, got E={E}, top_k={top_k}"
        )
    is_hash = tid2eid is not None
    if is_hash:
        assert tid2eid is not None
        if input_ids is None or input_ids.shape != (T,) or tid2eid.dim() != 2 or tid2eid.shape[1] != top_k:
            raise ValueError(
                f"hash routing: expected input_ids [{T}] and tid2eid [vocab, {top_k}], got "
                f"{None if input_ids is None else tuple(input_ids.shape)} and {tuple(tid2eid.shape)}"
            )
        tid2eid, input_ids = tid2eid.contiguous(), input_ids.contiguous()
        bias = logits  # unused placeholder pointer
    else:
        assert e_score_correction_bias is not None
        if e_score_correction_bias.shape != (E,) or top_k > E:
            raise ValueError(
                f"top-k routing: expected bias [{E}] and 0 < top_k <= {E}, got "
                f"{tuple(e_score_correction_bias.shape)} and {top_k}"
            )
        bias = e_score_correction_bias.float().contiguous()
        tid2eid = input_ids = bias  # unused placeholder pointers
    ids = torch.empty((T, top_k), dtype=torch.int64, device=logits.device)
    weights = torch.empty((T, top_k), dtype=torch.float32, device=logits.device)
    if T == 0:
        return ids, weights
    block_e = next_power_of_2(E)
    block_t = max(1, min(_TILE // block_e, 16))  # independent of T: one variant per (E, k, dtype)
    _moe_route_kernel[(cdiv(T, block_t),)](
        logits, logits.stride(0), bias, tid2eid, input_ids, ids, weights, T, E, float(scaling),
        sum_floor(logits.dtype),
        TOPK=top_k, HASH=is_hash, SIGMOID=score_func == "sigmoid", BLOCK_T=block_t, BLOCK_E=block_e,
        BLOCK_K=next_power_of_2(top_k), LIBDEVICE=logits.is_cuda and not _interpreted(), num_warps=4,
    )  # fmt: skip
    return ids, weights
