"""MoE router reference: routing weights and expert ids from the router logits (op ``moe_route``).

Math from HF ``DeepseekV4TopKRouter`` / ``DeepseekV4HashRouter`` (paper §2.1):
``scores = sqrt(softplus(logits))`` (``scoring_func = "sqrtsoftplus"``, V4's) or ``sigmoid(logits)``
(``"sigmoid"``; HF applies ``ACT2FN[scoring_func]``); a top-k layer selects the ``k`` experts with the largest
``scores + e_score_correction_bias``, a hash layer takes ``tid2eid[input_ids]``; the selected
scores are renormalised to sum to 1 and multiplied by ``routed_scaling_factor``.

The exact arithmetic (the Triton kernel ``sgl_kernel_v4.triton.moe_router`` reproduces it bit for
bit) in the logits dtype ``L`` (bf16 / fp16 / fp32):

* ``score = L(sqrt(softplus(float64(logit))))`` (torch's softplus: ``x`` above 20, else
  ``log1p(exp(x))``), or ``L(1 / (1 + exp(-float64(logit))))`` for ``sigmoid``. In float64 so that a token's scores do not depend on its batch (torch's CPU
  kernels evaluate the rows of a narrow ``[T, E]`` tensor with vectorised or scalar-tail code
  depending on ``T``, an ulp apart in float32).
* selection key ``float32(score) + bias`` (float32, as torch promotes ``L + float32``); the top-k
  is in descending key order and **ties go to the lower expert id** (torch.topk's tie order is
  unspecified on CUDA; here it is a stable descending sort). A NaN score (a NaN logit, e.g. a
  CUDA-graph padding row's) or NaN bias gets the key :data:`NAN_KEY`, below every real key and
  above the taken ones, and weight 0: the ids stay distinct and in range and the weights finite
  (an all-NaN row routes to experts ``0 .. k-1`` with weight 0).
* ``s = L(w_0 + w_1 + ... + w_{k-1})`` accumulated in float32 in slot order (slot 0 first: the
  top-k order above, or ``tid2eid``'s column order for hash layers); ``d = L(max(s, tiny(L)))``
  (:func:`sum_floor`): DeepSeek's reference ``Gate.forward`` divides by ``s`` itself, so a row
  whose selected scores are all tiny (logits near -100: ``s ~ 1e-21``) keeps weights summing to
  the scaling, and the floor (the smallest normal value of ``L``: ``2 ** -126`` for bf16 / fp32)
  only turns a row whose selected scores all underflow to 0 (a hash layer selects them
  regardless) into zero weights instead of ``0 / 0 = NaN``. HF adds ``1e-20`` to ``s`` instead: the same value for every ``s`` above
  ~2e-13, but it shrinks the weights of rows below that;
  ``weight_j = float32(L(L(w_j / d) * scaling))`` (every ``L(...)`` a round-to-nearest-even of a
  float32 result, as torch's bf16 / fp16 ops compute in float32).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: Selection key of a NaN score: below any real ``score + bias`` (a finite floor, so a row's NaN
#: experts still rank by id after its real ones).
NAN_KEY = -1e30
#: ``scoring_func`` values (HF ``DeepseekV4Config.scoring_func``) this op computes.
SCORE_FUNCS = ("sqrtsoftplus", "sigmoid")


def sum_floor(dtype: torch.dtype) -> float:
    """Floor of the sum of the selected scores before dividing: ``torch.finfo(dtype).tiny``, the
    smallest normal value of the logits dtype (``2 ** -126`` for bf16 / fp32). DeepSeek's reference
    divides by the sum itself; HF ``DeepseekV4TopKRouter`` adds ``1e-20``."""
    return float(torch.finfo(dtype).tiny)


def check_score_func(score_func: str) -> None:
    """Raises ValueError (naming ``scoring_func``) unless ``score_func`` is one of :data:`SCORE_FUNCS`."""
    if score_func not in SCORE_FUNCS:
        raise ValueError(f"scoring_func: expected one of {SCORE_FUNCS}, got {score_func!r}")


def router_scores(logits: torch.Tensor, score_func: str = "sqrtsoftplus") -> torch.Tensor:
    """``sqrt(softplus(logits))`` (or ``sigmoid(logits)``) computed in float64 and rounded to
    ``logits.dtype`` (``[T, E]``).

    Raises:
        ValueError: ``score_func`` not one of :data:`SCORE_FUNCS`.
    """
    check_score_func(score_func)
    if score_func == "sigmoid":
        return (1.0 / (1.0 + torch.exp(-logits.double()))).to(logits.dtype)
    return F.softplus(logits.double()).sqrt().to(logits.dtype)


def topk_lower_id_wins(keys: torch.Tensor, k: int) -> torch.Tensor:
    """Indices ``[T, k]`` int64 of the ``k`` largest entries of each row of ``keys [T, E]``, in
    descending order; among equal keys the lower index comes first (stable descending sort)."""
    return torch.sort(keys, dim=-1, descending=True, stable=True).indices[:, :k]


def normalize_weights(w: torch.Tensor, scaling: float) -> torch.Tensor:
    """``[T, k]`` selected scores (dtype ``L``) -> fp32 routing weights ``w / max(sum, tiny) * scaling``,
    with the rounding of the module docstring (slot-order float32 sum)."""
    acc = w[:, 0].float()
    for j in range(1, w.shape[1]):
        acc = acc + w[:, j].float()
    s = acc.to(w.dtype).unsqueeze(-1)
    return ((w / s.clamp_min(sum_floor(w.dtype))) * scaling).float()


def moe_route(
    logits: torch.Tensor,
    e_score_correction_bias: torch.Tensor | None,
    tid2eid: torch.Tensor | None,
    input_ids: torch.Tensor | None,
    top_k: int,
    scaling: float,
    score_func: str = "sqrtsoftplus",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert ids and routing weights of each token.

    Args:
        logits: ``[T, E]`` router logits ``x @ W_gate^T`` (bf16 / fp16 / fp32).
        e_score_correction_bias: ``[E]`` fp32 selection bias (top-k layers), or ``None`` for a hash layer.
        tid2eid: ``[vocab, k]`` int expert table (hash layers), or ``None``.
        input_ids: ``[T]`` int token ids (hash layers), or ``None``.
        top_k: experts per token ``k``.
        scaling: ``routed_scaling_factor``.
        score_func: ``scoring_func``: ``"sqrtsoftplus"`` or ``"sigmoid"``.

    Returns:
        ``(topk_ids [T, k] int64, topk_weights [T, k] fp32)``; see the module docstring for the
        exact arithmetic and the tie rule.

    Raises:
        ValueError: an unknown ``score_func``, neither or both of ``e_score_correction_bias`` and ``tid2eid`` given, a hash
            layer without ``input_ids``, or inconsistent shapes.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits: expected [T, E], got {tuple(logits.shape)}")
    if (e_score_correction_bias is None) == (tid2eid is None):
        raise ValueError("moe_route: give exactly one of e_score_correction_bias (top-k) and tid2eid (hash)")
    T, E = logits.shape
    scores = router_scores(logits, score_func)
    if tid2eid is not None:
        if input_ids is None or input_ids.shape != (T,) or tid2eid.dim() != 2 or tid2eid.shape[1] != top_k:
            raise ValueError(
                f"hash routing: expected input_ids [{T}] and tid2eid [vocab, {top_k}], got "
                f"{None if input_ids is None else tuple(input_ids.shape)} and {tuple(tid2eid.shape)}"
            )
        ids = tid2eid[input_ids].long()
    else:
        assert e_score_correction_bias is not None
        if e_score_correction_bias.shape != (E,) or not 0 < top_k <= E:
            raise ValueError(
                f"top-k routing: expected bias [{E}] and 0 < top_k <= {E}, got "
                f"{tuple(e_score_correction_bias.shape)} and {top_k}"
            )
        keys = scores.float() + e_score_correction_bias.float()
        ids = topk_lower_id_wins(torch.where(keys.isnan(), NAN_KEY, keys), top_k)
    if T == 0:
        return ids, torch.zeros(0, top_k, dtype=torch.float32, device=logits.device)
    return ids, normalize_weights(torch.where(scores.isnan(), 0.0, scores).gather(1, ids), scaling)
