"""KV compressors of CSA / HCA layers and the lightning indexer, on the paged pools.

Math: paper §2.3.1 (CSA, overlapped windows of ``2m`` slots with stride ``m = 4``, lightning
indexer) and §2.3.2 (HCA, non-overlapping ``m' = 128``); reference file HF
``modeling_deepseek_v4.py`` (``DeepseekV4CSACompressor``, ``DeepseekV4HCACompressor``,
``DeepseekV4Indexer``). The HF port keeps growing tensors per request; here every completed window
is pooled once and written into the compressed pool, and the partial window plus the previous
window's "Ca" half live in the pool's per-request state
(:mod:`sglang_v4.mem_cache.compressor_state`), so any split of a sequence into
prefill chunks and decode steps gives the same entries.
"""

from __future__ import annotations

import torch
from sgl_kernel_v4 import ops
from torch import nn

from sglang_v4.layers.layernorm import RMSNorm
from sglang_v4.layers.linear import Linear
from sglang_v4.mem_cache.compressor_state import CompressorState
from sglang_v4.model_executor.forward_batch import CompressPlan, ForwardBatch


def _gather(tab: torch.Tensor, idx: torch.Tensor, fill: float) -> torch.Tensor:
    """``tab[idx]`` with ``idx == -1`` rows set to ``fill``. tab ``[N, X]``, idx ``[...]`` -> ``[..., X]``."""
    out = tab[idx.clamp(min=0)]
    return out.masked_fill((idx < 0).unsqueeze(-1), fill)


class Compressor(nn.Module):
    """One compressor: ``kv_proj``/``gate_proj`` (``D -> X``), ``position_bias`` (``ape``, ``[m, X]`` fp32),
    ``kv_norm`` (``[d]`` fp32). ``overlap=True`` is the CSA layout (``X = 2d``: Ca | Cb halves).
    """

    def __init__(
        self,
        hidden: int,
        d: int,
        ratio: int,
        overlap: bool,
        eps: float,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        super().__init__()
        x = 2 * d if overlap else d
        self.d, self.ratio, self.overlap, self.eps = d, ratio, overlap, eps
        self.kv_proj = Linear(hidden, x, dtype, device)
        self.gate_proj = Linear(hidden, x, dtype, device)
        self.position_bias = nn.Parameter(
            torch.empty(ratio, x, dtype=torch.float32, device=device), requires_grad=False
        )
        self.kv_norm = RMSNorm(d, eps, device)

    def run(
        self,
        h: torch.Tensor,
        fb: ForwardBatch,
        plan: CompressPlan,
        st: CompressorState,
        rope: tuple[torch.Tensor, torch.Tensor],
    ) -> None:
        """Pool the windows completed by this forward into ``st.rows`` and advance the state.

        On CUDA (or with ``fb.graph_safe``) no step synchronises with the host, so the
        call is CUDA-graph capturable: padded windows carry ``win_out = -1`` (not written) and
        padded snapshots write the dummy window page 0.

        Args:
            h: ``[T, D]`` attention input (normalised hidden states).
            fb: the batch; plan: its :class:`CompressPlan` for this ratio.
            st: the layer's state and output rows (``DSV4KVPool.compressor_state``).
            rope: ``(cos, sin)`` ``[J, r/2]`` at the windows' positions (compress rope).
        """
        m, d = self.ratio, self.d
        slots = fb.req_pool_indices
        B = slots.shape[0]
        kv_new = self.kv_proj(h)
        score_new = self.gate_proj(h).float() + self.position_bias[fb.positions % m]
        X = kv_new.shape[-1]
        tab_kv = torch.cat([st.buf_kv[slots].view(B * m, X), kv_new.float()], dim=0)
        tab_sc = torch.cat([st.buf_score[slots].view(B * m, X), score_new], dim=0)
        J = plan.win_rows.shape[0]
        if J > 0:
            if self.overlap:
                assert st.ovl_kv is not None and st.ovl_score is not None
                ca_kv = torch.cat([st.ovl_kv[slots].view(B * m, d), tab_kv[:, :d]], dim=0)
                ca_sc = torch.cat([st.ovl_score[slots].view(B * m, d), tab_sc[:, :d]], dim=0)
                kv_w = torch.cat([_gather(ca_kv, plan.win_prev, 0.0), tab_kv[plan.win_rows][..., d:]], dim=1)
                sc_w = torch.cat(
                    [_gather(ca_sc, plan.win_prev, float("-inf")), tab_sc[plan.win_rows][..., d:]], dim=1
                )
            else:
                kv_w = tab_kv[plan.win_rows]
                sc_w = tab_sc[plan.win_rows]
            ops.compress_and_insert(
                kv_w.to(kv_new.dtype),
                sc_w,
                self.kv_norm.weight,
                rope[0],
                rope[1],
                st.rows,
                plan.win_out,
                self.eps,
            )
        # advance the per-request state
        st.buf_kv[slots] = _gather(tab_kv, plan.buf_rows, 0.0)
        st.buf_score[slots] = _gather(tab_sc, plan.buf_rows, 0.0)
        if self.overlap and J > 0:
            assert st.ovl_kv is not None and st.ovl_score is not None
            if h.is_cuda or fb.graph_safe:
                # no host synchronisation (CUDA graphs): requests without a new window write
                # their old overlap back instead of being filtered out by a boolean mask
                has = (plan.ovl_rows[:, 0] >= 0)[:, None, None]
                rows = plan.ovl_rows.clamp(min=0)
                st.ovl_kv[slots] = torch.where(has, tab_kv[rows][..., :d], st.ovl_kv[slots])
                st.ovl_score[slots] = torch.where(has, tab_sc[rows][..., :d], st.ovl_score[slots])
            else:
                has = plan.ovl_rows[:, 0] >= 0
                rows = plan.ovl_rows[has]
                st.ovl_kv[slots[has]] = tab_kv[rows][..., :d]
                st.ovl_score[slots[has]] = tab_sc[rows][..., :d]
            if plan.snap_rows.shape[0] > 0 and st.snap_kv is not None and st.snap_score is not None:
                st.snap_kv[plan.snap_pages] = tab_kv[plan.snap_rows][..., :d]
                st.snap_score[plan.snap_pages] = tab_sc[plan.snap_rows][..., :d]


class Scorer(nn.Module):
    """``weights_proj: [Hi, D]`` (HF ``DeepseekV4IndexerScorer``)."""

    def __init__(self, hidden: int, n_heads: int, dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        self.weights_proj = Linear(hidden, n_heads, dtype, device)


class Indexer(Compressor):
    """Lightning indexer (paper §2.3.1 eqs. 13-17): a 128-d overlapped compressor feeding the indexer
    key pool, ``q_b_proj`` (``q_lora_rank -> Hi * di``; FP8 with ``q_b_quant="fp8"``, as published)
    and ``scorer.weights_proj``."""

    def __init__(
        self,
        hf_config,
        ratio: int,
        dtype: torch.dtype,
        device: torch.device | str,
        q_b_quant: str | None = None,
    ) -> None:
        c = hf_config
        super().__init__(c.hidden_size, c.index_head_dim, ratio, True, c.rms_norm_eps, dtype, device)
        self.n_heads, self.topk = c.index_n_heads, c.index_topk
        self.q_b_proj = Linear(c.q_lora_rank, c.index_n_heads * c.index_head_dim, dtype, device, q_b_quant)
        self.scorer = Scorer(c.hidden_size, c.index_n_heads, dtype, device)

    def select(
        self,
        h: torch.Tensor,
        q_res: torch.Tensor,
        plan: CompressPlan,
        idx_flat: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """Top-k compressed entries per token.

        Args:
            h: ``[T, D]`` attention input; q_res: ``[T, q_lora_rank]`` normalised q latent.
            plan: the CSA plan (its ``candidates [T, C]`` are the visible entries' flat slots).
            idx_flat: ``[N, di]`` indexer-key pool of this layer.
            cos, sin: ``[T, r/2]`` compress rope at the token positions.

        Returns:
            ``[T, topk]`` flat slots in the main CSA pool, in entry order, ``-1`` after them where
            fewer than ``topk`` entries are visible. Selection rule of ``ops.indexer_topk``: a
            higher score wins, equal scores go to the earlier entry, so a token selects the same
            entries in any batch, chunk or prefix-cache hit (docs/MODEL_NOTES.md, note 1).
        """
        T = h.shape[0]
        q = self.q_b_proj(q_res).view(T, self.n_heads, self.d)
        q = ops.apply_rope(q, cos, sin)
        w = self.scorer.weights_proj(h).float() * self.n_heads**-0.5
        pos = ops.indexer_topk(q, w, idx_flat, plan.candidates, self.topk, self.d**-0.5)
        sel = (
            plan.candidates.gather(1, pos.clamp(min=0))
            if plan.candidates.shape[1]
            else torch.full_like(pos, -1)
        )
        return torch.where(pos >= 0, sel, torch.full_like(sel, -1))


class CSACompressor(Compressor):
    """CSA main compressor (``2 * head_dim`` projections, overlap) with its :class:`Indexer`
    (``indexer_q_b_quant``: the format of the indexer's ``q_b_proj``)."""

    def __init__(
        self,
        hf_config,
        ratio: int,
        dtype: torch.dtype,
        device: torch.device | str,
        indexer_q_b_quant: str | None = None,
    ) -> None:
        c = hf_config
        super().__init__(c.hidden_size, c.head_dim, ratio, True, c.rms_norm_eps, dtype, device)
        self.indexer = Indexer(c, ratio, dtype, device, indexer_q_b_quant)


class HCACompressor(Compressor):
    """HCA compressor (``head_dim`` projections, no overlap, no indexer)."""

    def __init__(self, hf_config, ratio: int, dtype: torch.dtype, device: torch.device | str) -> None:
        c = hf_config
        super().__init__(c.hidden_size, c.head_dim, ratio, False, c.rms_norm_eps, dtype, device)
