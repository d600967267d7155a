"""DeepSeek-V4 MoE block: hash or top-k router, routed experts, one shared expert (HF ``DeepseekV4SparseMoeBlock``).

Routing (paper §2.1; HF ``DeepseekV4TopKRouter`` / ``DeepseekV4HashRouter``): scores are
``sqrt(softplus(x @ W_gate^T))`` (``scoring_func = "sqrtsoftplus"``; ``"sigmoid"``: ``sigmoid(...)``); top-k selection uses ``scores + e_score_correction_bias``; the first
``hash_moe`` layers pick experts with a frozen ``tid2eid[token_id]`` table instead. The selected
scores are renormalised to sum to 1 and multiplied by ``routed_scaling_factor``. After the router
GEMM, all of it is one op (:func:`sgl_kernel_v4.ops.moe_route`: one Triton launch on CUDA, exact
rounding and tie rule in :mod:`sgl_kernel_v4.ref.moe_router`).

The shared expert's ``gate_proj`` / ``up_proj`` weights live in one ``[2I, D]`` tensor (they are
views of it: checkpoint names and loading unchanged), so its forward is one GEMM plus one clamped
SwiGLU launch (:func:`sgl_kernel_v4.ops.swiglu_clamped`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from sgl_kernel_v4 import ops
from torch import nn

from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
from sglang_v4.layers.linear import Linear, MergedLinear
from sglang_v4.layers.quantization import QuantConfig, expert_quant, linear_quant

FP4_GROUP = 32


def effective_swiglu_limit(swiglu_limit: float) -> float:
    """The SwiGLU clamp bound the experts apply for the config's ``swiglu_limit``.

    DeepSeek's reference ``Expert.forward`` clamps (``gate`` from above, ``up`` on both sides) only
    when ``swiglu_limit > 0``; zero or a negative value means no clamp, which is ``+inf`` here (the
    clamp ops then leave every value as is). A positive value is returned unchanged. (transformers'
    ``DeepseekV4Experts`` clamps unconditionally, so a limit of 0 there zeroes every expert.)

    Raises:
        ValueError: ``swiglu_limit`` is NaN.
    """
    limit = float(swiglu_limit)
    if math.isnan(limit):
        raise ValueError("swiglu_limit: must be a number, got nan")
    return limit if limit > 0 else math.inf


class Router(nn.Module):
    """``weight [E, D]``; plus ``e_score_correction_bias [E]`` (top-k) or ``tid2eid [vocab, k]`` (hash).
    ``score_func``: the config's ``scoring_func`` (``"sqrtsoftplus"`` or ``"sigmoid"``)."""

    def __init__(
        self,
        hidden: int,
        n_experts: int,
        top_k: int,
        is_hash: bool,
        vocab: int,
        scaling: float,
        dtype: torch.dtype,
        device: torch.device | str,
        score_func: str = "sqrtsoftplus",
    ) -> None:
        super().__init__()
        self.top_k, self.is_hash, self.scaling = top_k, is_hash, scaling
        self.score_func = score_func
        self.weight = nn.Parameter(
            torch.empty(n_experts, hidden, dtype=dtype, device=device), requires_grad=False
        )
        if is_hash:
            self.register_buffer("tid2eid", torch.zeros(vocab, top_k, dtype=torch.long, device=device))
        else:
            self.register_buffer(
                "e_score_correction_bias", torch.zeros(n_experts, dtype=torch.float32, device=device)
            )

    def forward(self, x: torch.Tensor, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [T, D]``, ``input_ids [T]`` -> ``(topk_ids [T, k] int64, topk_weights [T, k] fp32)``.

        Top-k layers list a token's experts in descending ``score + bias`` order, the lower expert
        id first among equal keys; hash layers in ``tid2eid``'s order. Scores are computed in
        float64 (a token's routing does not depend on its batch; :mod:`sgl_kernel_v4.ref.moe_router`).
        """
        logits = F.linear(x, self.weight)
        if self.is_hash:
            return ops.moe_route(
                logits, None, self.tid2eid, input_ids, self.top_k, self.scaling, self.score_func
            )
        return ops.moe_route(
            logits, self.e_score_correction_bias, None, None, self.top_k, self.scaling, self.score_func
        )


class Experts(nn.Module):
    """Routed experts packed as HF does: ``gate_up_proj [E, 2I, D]``, ``down_proj [E, D, I]``.

    ``quant="fp4"`` (V4's published expert format): ``gate_up_proj [E, 2I, D/2]`` and
    ``down_proj [E, D, I/2]`` uint8, two e2m1 values per byte along the input dim, with uint8 ue8m0
    exponent buffers ``gate_up_proj_scale_inv [E, 2I, D/32]`` / ``down_proj_scale_inv [E, D, I/32]``
    (one per 32 inputs); the forward is :func:`sgl_kernel_v4.ops.fused_moe_fp4`.

    ``forward(x [T, D], ids [T, k], weights [T, k])``: ids outside ``[0, E)`` contribute nothing
    (expert parallelism passes ``-1`` for the experts other ranks hold).

    Raises:
        ValueError: unknown ``quant``, or ``D`` / ``I`` not multiples of 32 with FP4; at the first
            FP4 forward, a scale byte above 128 (a scale over 2, outside what the FP4 kernel decodes
            exactly: ``sgl_kernel_v4.triton.fp4_tile``).
    """

    def __init__(
        self,
        n_experts: int,
        hidden: int,
        inter: int,
        limit: float,
        dtype: torch.dtype,
        device: torch.device | str,
        quant: str | None = None,
    ) -> None:
        super().__init__()
        self.limit, self.quant, self.act_dtype = limit, quant, dtype
        if quant is None:
            self.gate_up_proj = nn.Parameter(
                torch.empty(n_experts, 2 * inter, hidden, dtype=dtype, device=device), requires_grad=False
            )
            self.down_proj = nn.Parameter(
                torch.empty(n_experts, hidden, inter, dtype=dtype, device=device), requires_grad=False
            )
            return
        if quant != "fp4":
            raise ValueError(f"quant: expected None or 'fp4' for the routed experts, got {quant!r}")
        if hidden % FP4_GROUP or inter % FP4_GROUP:
            raise ValueError(
                f"FP4 experts need hidden ({hidden}) and moe_intermediate_size ({inter}) divisible by {FP4_GROUP}"
            )
        u8 = dict(dtype=torch.uint8, device=device)
        self.gate_up_proj = nn.Parameter(
            torch.empty(n_experts, 2 * inter, hidden // 2, **u8), requires_grad=False
        )
        self.down_proj = nn.Parameter(torch.empty(n_experts, hidden, inter // 2, **u8), requires_grad=False)
        self.register_buffer(
            "gate_up_proj_scale_inv", torch.empty(n_experts, 2 * inter, hidden // FP4_GROUP, **u8)
        )
        self.register_buffer("down_proj_scale_inv", torch.empty(n_experts, hidden, inter // FP4_GROUP, **u8))
        self._scales_checked = False

    def _check_fp4_scales(self) -> None:
        """Once, outside CUDA-graph capture (the first forward is an eager one): every ue8m0 byte
        is at most 128 (scale <= 2)."""
        if self._scales_checked or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            return
        for name in ("gate_up_proj_scale_inv", "down_proj_scale_inv"):
            top = int(getattr(self, name).max())
            if top > 128:
                raise ValueError(
                    f"{name}: scale byte {top} (2**{top - 127}) exceeds 128; FP4 expert scales must be <= 2"
                )
        self._scales_checked = True

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """``x [T, D]`` through the ``k`` experts ``ids [T, k]`` of each token, combined with
        ``weights [T, k]`` -> ``[T, D]`` (class docstring).

        Raises:
            ValueError: FP4, first forward: a scale byte above 128."""
        if self.quant == "fp4":
            self._check_fp4_scales()
            return ops.fused_moe_fp4(
                x.to(self.act_dtype),
                self.gate_up_proj,
                self.gate_up_proj_scale_inv,
                self.down_proj,
                self.down_proj_scale_inv,
                ids,
                weights,
                self.limit,
            )
        return ops.fused_moe(x, self.gate_up_proj, self.down_proj, ids, weights, self.limit)


class SharedMLP(nn.Module):
    """Shared expert: SwiGLU with clamping (HF ``DeepseekV4MLP``).

    ``gate_proj`` / ``up_proj`` keep their own ``Linear`` modules and state-dict names (what the
    checkpoint loader and the TP shard table address), but their weights are the two halves of one
    ``[2I, D]`` tensor (FP8: and their 128x128 block scales, when ``I % 128 == 0``), multiplied in
    one GEMM. The forward checks (on the host) that the halves still alias the fused tensor and
    otherwise multiplies them separately.
    """

    def __init__(
        self,
        hidden: int,
        inter: int,
        limit: float,
        dtype: torch.dtype,
        device: torch.device | str,
        quant: str | None = None,
    ) -> None:
        super().__init__()
        self.limit = limit
        self.gate_proj = Linear(hidden, inter, dtype, device, quant)
        self.up_proj = Linear(hidden, inter, dtype, device, quant)
        self.down_proj = Linear(inter, hidden, dtype, device, quant)
        # a plain attribute, not a module: the state dict / dummy init see only the two halves
        pair = [self.gate_proj, self.up_proj]
        self._merged = MergedLinear(pair) if MergedLinear.can_merge(pair) else None

    @property
    def _gate_up(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The fused ``(weight [2I, D], FP8 scale [2I/128, D/128] or None)``, or ``None`` when the
        halves are separate tensors (FP8 with ``I % 128 != 0``)."""
        return None if self._merged is None else (self._merged.weight, self._merged.scale)

    def gate_up(self, x: torch.Tensor) -> torch.Tensor:
        """``[gate_proj(x) | up_proj(x)]`` ``[T, 2I]``: one GEMM on the fused weight when it is
        still aliased, else two GEMMs and a concatenation."""
        if self._merged is not None:
            return self._merged.gemm(x)
        return torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, D] -> [T, D]``: ``down_proj(swiglu_clamped(gate_up(x), limit))``."""
        return self.down_proj(ops.swiglu_clamped(self.gate_up(x), self.limit))


class SparseMoeBlock(nn.Module):
    """``forward(x [T, D], input_ids [T]) -> [T, D]`` = routed experts + shared expert.

    ``quant``: FP4 routed experts and an FP8 shared expert as published (``layers/quantization.py``).

    Tensor / expert parallel (``tp``, docs/PARALLELISM.md): the router is replicated and every
    rank sees every token; a rank holds the routed experts of its EP shard
    (``ParallelConfig.expert_range``), each sliced on the intermediate dim over the
    ``tp / ep`` ranks sharing the shard (``moe_inter_range``), and a ``1 / tp`` intermediate slice
    of the shared expert. It computes its experts' contributions (tokens routed elsewhere, hash
    layers included, get none) plus its shared-expert slice, and one all-reduce sums the ranks.

    ``swiglu_limit`` of 0 or below disables the experts' clamp (:func:`effective_swiglu_limit`).

    Raises:
        ValueError: ``n_routed_experts`` not divisible by ``ep_size``, an intermediate size not
            divisible by its slicing, or a NaN ``swiglu_limit``.
    """

    def __init__(
        self,
        hf_config,
        layer_idx: int,
        dtype: torch.dtype,
        device: torch.device | str,
        quant: QuantConfig | None = None,
        tp: TPGroup | None = None,
    ) -> None:
        super().__init__()
        c = hf_config
        self.tp = tp if tp is not None else TPGroup(ParallelConfig())
        pc = self.tp.config
        self.expert_start, expert_stop = pc.expert_range(c.n_routed_experts)
        self.num_local_experts = expert_stop - self.expert_start
        i0, i1 = pc.moe_inter_range(c.moe_intermediate_size)
        s0, s1 = pc.tp_range(c.moe_intermediate_size, "moe_intermediate_size (shared expert, by --tp-size)")
        is_hash = c.mlp_layer_types[layer_idx] == "hash_moe"
        self.gate = Router(
            c.hidden_size,
            c.n_routed_experts,
            c.num_experts_per_tok,
            is_hash,
            c.vocab_size,
            c.routed_scaling_factor,
            dtype,
            device,
            c.scoring_func,
        )
        self.experts = Experts(
            self.num_local_experts,
            c.hidden_size,
            i1 - i0,
            effective_swiglu_limit(c.swiglu_limit),
            dtype,
            device,
            expert_quant(quant),
        )
        self.shared_experts = SharedMLP(
            c.hidden_size, s1 - s0, effective_swiglu_limit(c.swiglu_limit), dtype, device, linear_quant(quant)
        )

    def forward(self, x: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        """``x [T, D]`` (``input_ids [T]`` route the hash layers) -> routed experts' output plus the
        shared expert's ``[T, D]``; with expert parallelism this rank's experts only, summed over ranks."""
        ids, w = self.gate(x, input_ids)
        if self.num_local_experts != self.gate.weight.shape[0]:
            # expert parallel: this rank's experts as local ids, the others as -1 (skipped)
            local = ids - self.expert_start
            ids = torch.where(
                (local >= 0) & (local < self.num_local_experts), local, torch.full_like(local, -1)
            )
        return self.tp.all_reduce(self.experts(x, ids, w) + self.shared_experts(x))
