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
from sglang_v4.model_executor.forward_batch_info import CompressPlan, ForwardBatch


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

        No step synchronises with the host, so the call is CUDA-graph capturable: padded windows
        carry ``win_out = -1`` (not written), padded requests ``-1`` rows (their reserved slot 0
        gets zeros) and padded snapshots write the dummy window page 0. Besides the two
        projections, the call is two ops (:func:`sgl_kernel_v4.ops.compress_windows_and_insert`,
        :func:`sgl_kernel_v4.ops.advance_compressor_state`): on CUDA, kernels that read the window
        and state rows in place (at most three launches for the pair);
        on the CPU, the torch reference building the row tables of :class:`CompressPlan`.

        Args:
            h: ``[T, D]`` attention input (normalised hidden states).
            fb: the batch; plan: its :class:`CompressPlan` for this ratio.
            st: the layer's state and output rows (``DSV4KVPool.compressor_state``).
            rope: ``(cos, sin)`` ``[J, r/2]`` at the windows' positions (compress rope).
        """
        kv_new = self.kv_proj(h)
        gate = self.gate_proj(h)
        state = (fb.req_pool_indices, st.buf_kv, st.buf_score, st.ovl_kv, st.ovl_score)
        if plan.win_rows.shape[0] > 0:
            ops.compress_windows_and_insert(
                kv_new, gate, self.position_bias, fb.positions, *state, plan.win_rows, plan.win_prev,
                self.kv_norm.weight, rope[0], rope[1], st.rows, plan.win_out, self.eps,
            )  # fmt: skip
        ops.advance_compressor_state(
            kv_new, gate, self.position_bias, fb.positions, *state, st.snap_kv, st.snap_score,
            plan.buf_rows, plan.ovl_rows, plan.snap_rows, plan.snap_pages,
        )  # fmt: skip


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
        fb: ForwardBatch,
        plan: CompressPlan,
        idx_rows: object,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """Top-k compressed entries per token.

        Args:
            h: ``[T, D]`` attention input; q_res: ``[T, q_lora_rank]`` normalised q latent.
            fb: the batch (its page table, request rows and token requests).
            plan: the CSA plan (``visible``: the entries each token scores; ``max_visible`` their
                bound).
            idx_rows: the indexer-key pool layer (float ``[N, di]`` or a quantized row view).
            cos, sin: ``[T, r/2]`` compress rope at the token positions.

        Returns:
            ``[T, topk]`` entry indices of the token's request, ascending, ``-1`` after them where
            fewer than ``topk`` entries are visible. Selection rule of ``ops.indexer_topk``: a
            higher score wins, equal scores go to the earlier entry, so a token selects the same
            entries in any batch, chunk or prefix-cache hit (docs/MODEL_NOTES.md, note 1).
        """
        T = h.shape[0]
        q = self.q_b_proj(q_res).view(T, self.n_heads, self.d)
        q = ops.apply_rope(q, cos, sin)
        w = self.scorer.weights_proj(h).float() * self.n_heads**-0.5
        assert fb.req_to_page is not None
        return ops.indexer_topk(
            q, w, idx_rows, plan.visible, fb.req_to_page, fb.req_pool_indices, fb.token_req,
            fb.page_size // plan.ratio, self.topk, self.d**-0.5, plan.max_visible,
        )  # fmt: skip


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
