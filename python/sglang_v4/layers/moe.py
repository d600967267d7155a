"""DeepSeek-V4 MoE block: hash or top-k router, routed experts, one shared expert (HF ``DeepseekV4SparseMoeBlock``).

Routing (paper §2.1; HF ``DeepseekV4TopKRouter`` / ``DeepseekV4HashRouter``): scores are
``sqrt(softplus(x @ W_gate^T))``; top-k selection uses ``scores + e_score_correction_bias``; the first
``hash_moe`` layers pick experts with a frozen ``tid2eid[token_id]`` table instead. The selected
scores are renormalised to sum to 1 and multiplied by ``routed_scaling_factor``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from sgl_kernel_v4 import ops
from sgl_kernel_v4.ref.moe import swiglu_clamped
from torch import nn

from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
from sglang_v4.layers.linear import Linear
from sglang_v4.layers.quantization import QuantConfig, expert_quant, linear_quant

FP4_GROUP = 32


class Router(nn.Module):
    """``weight [E, D]``; plus ``e_score_correction_bias [E]`` (top-k) or ``tid2eid [vocab, k]`` (hash)."""

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
    ) -> None:
        super().__init__()
        self.top_k, self.is_hash, self.scaling = top_k, is_hash, scaling
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
        """``x [T, D]``, ``input_ids [T]`` -> ``(topk_ids [T, k] int64, topk_weights [T, k] fp32)``."""
        # softplus in float64: on the CPU, which rows of a narrow [T, E] tensor torch evaluates with
        # its scalar tail code (an ulp off the vectorised one) depends on T; rounded from float64,
        # a token's scores (and so its routing) do not depend on the batch it is computed in
        logits = F.linear(x, self.weight)
        scores = F.softplus(logits.double()).sqrt().to(logits.dtype)
        if self.is_hash:
            ids = self.tid2eid[input_ids].long()
        else:
            ids = torch.topk(scores + self.e_score_correction_bias, self.top_k, dim=-1, sorted=False).indices
        w = scores.gather(1, ids)
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        return ids, (w * self.scaling).float()


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
    """Shared expert: SwiGLU with clamping (HF ``DeepseekV4MLP``)."""

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gu = torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)
        return self.down_proj(swiglu_clamped(gu, self.limit))


class SparseMoeBlock(nn.Module):
    """``forward(x [T, D], input_ids [T]) -> [T, D]`` = routed experts + shared expert.

    ``quant``: FP4 routed experts and an FP8 shared expert as published (``layers/quantization.py``).

    Tensor / expert parallel (``tp``, docs/PARALLELISM.md): the router is replicated and every
    rank sees every token; a rank holds the routed experts of its EP shard
    (``ParallelConfig.expert_range``), each sliced on the intermediate dim over the
    ``tp / ep`` ranks sharing the shard (``moe_inter_range``), and a ``1 / tp`` intermediate slice
    of the shared expert. It computes its experts' contributions (tokens routed elsewhere, hash
    layers included, get none) plus its shared-expert slice, and one all-reduce sums the ranks.

    Raises:
        ValueError: ``n_routed_experts`` not divisible by ``ep_size``, or an intermediate size not
            divisible by its slicing.
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
        )
        self.experts = Experts(
            self.num_local_experts,
            c.hidden_size,
            i1 - i0,
            c.swiglu_limit,
            dtype,
            device,
            expert_quant(quant),
        )
        self.shared_experts = SharedMLP(
            c.hidden_size, s1 - s0, c.swiglu_limit, dtype, device, linear_quant(quant)
        )

    def forward(self, x: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        ids, w = self.gate(x, input_ids)
        if self.num_local_experts != self.gate.weight.shape[0]:
            # expert parallel: this rank's experts as local ids, the others as -1 (skipped)
            local = ids - self.expert_start
            ids = torch.where(
                (local >= 0) & (local < self.num_local_experts), local, torch.full_like(local, -1)
            )
        return self.tp.all_reduce(self.experts(x, ids, w) + self.shared_experts(x))
