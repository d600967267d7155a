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
from sgl_kernel_v4.dense_prefix import dense_prefix_enabled, dense_prefix_segments
from torch import nn

from sglang_v4.layers.layernorm import RMSNorm
from sglang_v4.layers.linear import Linear, MergedLinear
from sglang_v4.mem_cache.compressor_state import CompressorState
from sglang_v4.model_executor.forward_batch_info import CompressPlan, ForwardBatch


class Compressor(nn.Module):
    """One compressor: ``kv_proj``/``gate_proj`` (``D -> X``), ``position_bias`` (``ape``, ``[m, X]`` fp32),
    ``kv_norm`` (``[d]`` fp32). ``overlap=True`` is the CSA layout (``X = 2d``: Ca | Cb halves).

    ``kv_proj`` / ``gate_proj`` read the same input: with ``merge`` their weights are the two row
    halves of one ``[2X, D]`` tensor (:class:`~sglang_v4.layers.linear.MergedLinear`; names and
    loading unchanged) and :meth:`project` is one GEMM. The attention block may take the pair into
    its own merged input projection (:meth:`release_merge`) and pass the outputs to :meth:`run`.
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
        merge: bool = True,
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
        pair = [self.kv_proj, self.gate_proj]
        self._merged = MergedLinear(pair) if merge and MergedLinear.can_merge(pair) else None

    def release_merge(self) -> None:
        """Forget this compressor's merged ``[kv_proj | gate_proj]`` tensor (frees it once an owner
        re-merged the two weights into its own; :meth:`project` then runs one GEMM per layer
        unless the caller passes the projections to :meth:`run`)."""
        self._merged = None

    def project(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``h [T, D]`` -> ``(kv_proj(h), gate_proj(h))``, each ``[T, X]`` (one GEMM when merged;
        then column views of its ``[T, 2X]`` output)."""
        if self._merged is not None:
            kv, gate = self._merged(h)
            return kv, gate
        return self.kv_proj(h), self.gate_proj(h)

    def run(
        self,
        h: torch.Tensor,
        fb: ForwardBatch,
        plan: CompressPlan,
        st: CompressorState,
        rope: tuple[torch.Tensor, torch.Tensor],
        proj: tuple[torch.Tensor, torch.Tensor] | None = None,
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
            proj: ``(kv_proj(h), gate_proj(h))`` ``[T, X]`` each (last dim contiguous) when the
                caller computed them in a merged GEMM; ``None``: :meth:`project`.
        """
        kv_new, gate = self.project(h) if proj is None else proj
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
    and ``scorer.weights_proj``.

    ``kv_proj``, ``gate_proj`` and ``scorer.weights_proj`` all read ``h``: their weights are row
    slices of one ``[2 * 2di + Hi, D]`` tensor, and :meth:`project_all` is one GEMM."""

    def __init__(
        self,
        hf_config,
        ratio: int,
        dtype: torch.dtype,
        device: torch.device | str,
        q_b_quant: str | None = None,
    ) -> None:
        c = hf_config
        super().__init__(
            c.hidden_size, c.index_head_dim, ratio, True, c.rms_norm_eps, dtype, device, merge=False
        )
        self.n_heads, self.topk = c.index_n_heads, c.index_topk
        self.q_b_proj = Linear(c.q_lora_rank, c.index_n_heads * c.index_head_dim, dtype, device, q_b_quant)
        self.scorer = Scorer(c.hidden_size, c.index_n_heads, dtype, device)
        group = [self.kv_proj, self.gate_proj, self.scorer.weights_proj]
        self._merged = MergedLinear(group) if MergedLinear.can_merge(group) else None

    def project(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(kv_proj(h), gate_proj(h))`` (:meth:`project_all` without the scorer weights)."""
        kv, gate, _ = self.project_all(h)
        return kv, gate

    def project_all(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``h [T, D]`` -> ``(kv_proj(h) [T, 2di], gate_proj(h) [T, 2di], weights_proj(h) [T, Hi])``:
        column views of one GEMM when merged, else three GEMMs."""
        if self._merged is not None:
            kv, gate, w = self._merged(h)
            return kv, gate, w
        return self.kv_proj(h), self.gate_proj(h), self.scorer.weights_proj(h)

    def select(
        self,
        h: torch.Tensor,
        q_res: torch.Tensor,
        fb: ForwardBatch,
        plan: CompressPlan,
        idx_rows: object,
        cos: torch.Tensor,
        sin: torch.Tensor,
        weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Top-k compressed entries per token.

        Args:
            h: ``[T, D]`` attention input; q_res: ``[T, q_lora_rank]`` normalised q latent.
            fb: the batch (its page table, request rows and token requests).
            plan: the CSA plan (``visible``: the entries each token scores; ``max_visible`` their
                bound).
            idx_rows: the indexer-key pool layer (float ``[N, di]`` or a quantized row view).
            cos, sin: ``[T, r/2]`` compress rope at the token positions.
            weights: ``scorer.weights_proj(h)`` ``[T, Hi]`` when the caller computed it (merged with
                the compressor's projections, :meth:`project_all`); ``None``: computed here.

        Returns:
            ``[T, topk]`` entry indices of the token's request, ascending, ``-1`` after them where
            fewer than ``topk`` entries are visible. Selection rule of ``ops.indexer_topk``: a
            higher score wins, equal scores go to the earlier entry, so a token selects the same
            entries in any batch, chunk or prefix-cache hit (docs/MODEL_NOTES.md, note 1).
        """
        T = h.shape[0]
        q = self.q_b_proj(q_res).view(T, self.n_heads, self.d)
        q = ops.apply_rope(q, cos, sin)
        if weights is None:
            weights = self.scorer.weights_proj(h)
        w = weights.float() * self.n_heads**-0.5
        assert fb.req_to_page is not None
        segs = None
        if h.is_cuda and not fb.graph_safe and dense_prefix_enabled():
            if not torch.cuda.is_current_stream_capturing():  # fp4 keys: decoded once per call
                segs = dense_prefix_segments(fb.extend_lens, fb.prefix_lens, plan.ratio, 256, 0)
        return ops.indexer_topk(
            q, w, idx_rows, plan.visible, fb.req_to_page, fb.req_pool_indices, fb.token_req,
            fb.page_size // plan.ratio, self.topk, self.d**-0.5, plan.max_visible, dense_prefix=segs,
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
