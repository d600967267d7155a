"""DeepSeek-V4 attention on the paged tri-structured KV (paper §2.3; HF ``DeepseekV4Attention``).

Per token: ``q = q_b(rmsnorm(q_a(x)))`` with a per-head unweighted RMSNorm and RoPE; one shared
512-d K=V vector ``kv = rope(rmsnorm(kv_proj(x)))`` written to the sliding-window pool. Keys are the
last ``sliding_window`` raw KV (query included) plus, in CSA layers, the indexer's top-k compressed
entries, and in HCA layers every visible compressed entry; a learned per-head sink logit joins the
softmax. The attention and indexer kernels find every key through the page tables
(``fb.swa_pages``, ``fb.req_to_page``), in the pool's own format (bf16 / fp32, or fp8 entries and
fp8 / fp4 indexer keys). The output's rope slice is rotated back by ``-position``, then the grouped O projection.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from sgl_kernel_v4 import ops
from sgl_kernel_v4.dense_prefix import dense_prefix_enabled, dense_prefix_segments
from torch import nn

from sglang_v4.configs.model_config import CSA, HCA, ModelConfig
from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
from sglang_v4.layers.compressor import CSACompressor, HCACompressor
from sglang_v4.layers.layernorm import RMSNorm
from sglang_v4.layers.linear import GroupedLinear, Linear, MergedLinear
from sglang_v4.layers.quantization import QuantConfig, linear_quant
from sglang_v4.mem_cache.kv_spec import KVKind
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.forward_batch_info import ForwardBatch


@dataclass
class RopeCache:
    """cos/sin computed once per forward: per token for both rope types, per completed window per ratio."""

    tok: dict[str, tuple[torch.Tensor, torch.Tensor]]
    win: dict[int, tuple[torch.Tensor, torch.Tensor]]


class DSV4Attention(nn.Module):
    """Attention block of one layer; parameter names follow HF (``q_a_proj``, ``q_a_norm``, ``q_b_proj``,
    ``kv_proj``, ``kv_norm``, ``o_a_proj``, ``o_b_proj``, ``sinks``, ``compressor``); with ``quant`` the
    five projections and the indexer's ``q_b_proj`` hold FP8 block-scaled weights, as published.

    Tensor parallel (``tp``, docs/PARALLELISM.md): a rank holds ``n_heads / tp`` query heads
    (``q_b_proj`` rows, ``sinks``) and the ``o_groups / tp`` output groups they feed (``o_a_proj``
    rows, ``o_b_proj`` columns), and the output is summed over the ranks (one all-reduce). The
    single shared K=V head, the compressors and the indexer are replicated: every rank computes
    the same KV and keeps the same pools.

    Merged input projection (SGLang's ``fused_qkv_a_proj_with_mqa``): every projection that reads
    ``x`` and is replicated across TP ranks shares one weight tensor
    (:class:`~sglang_v4.layers.linear.MergedLinear`; names, loading and FP8 block scales
    unchanged), multiplied in one GEMM: ``q_a_proj`` and ``kv_proj`` (FP8 only where
    ``q_lora_rank`` and ``head_dim`` are multiples of 128), plus the compressor's ``kv_proj`` /
    ``gate_proj`` when they have the same format (an unquantized model; with FP8 the compressor's
    bf16 pair is its own merged GEMM). The indexer's ``kv_proj`` / ``gate_proj`` /
    ``scorer.weights_proj`` are one GEMM inside the indexer branch (its own stream).

    Raises:
        ValueError: ``o_groups`` or ``num_attention_heads`` not divisible by the TP size.
    """

    def __init__(
        self,
        model_config: ModelConfig,
        layer_idx: int,
        dtype: torch.dtype,
        device: torch.device | str,
        quant: QuantConfig | None = None,
        tp: TPGroup | None = None,
    ) -> None:
        super().__init__()
        c = model_config.hf
        self.mc = model_config
        self.tp = tp if tp is not None else TPGroup(ParallelConfig())
        self.layer_idx = layer_idx
        self.layer_type = c.layer_types[layer_idx]
        self.rope_kind = "compress" if self.layer_type in (CSA, HCA) else "main"
        self.head_dim, self.eps = c.head_dim, c.rms_norm_eps
        g0, g1 = self.tp.config.tp_range(c.o_groups, "o_groups (by --tp-size)")
        # whole query heads per rank: a config with fewer heads than output groups (a transformers
        # tiny model has 4 heads over 8 groups) left some ranks none
        self.tp.config.tp_range(c.num_attention_heads, "num_attention_heads (by --tp-size)")
        self.o_groups = g1 - g0  # this rank's output groups and their heads
        self.n_heads = c.num_attention_heads * self.o_groups // c.o_groups
        fp8 = linear_quant(quant)
        self.q_a_proj = Linear(c.hidden_size, c.q_lora_rank, dtype, device, fp8)
        self.q_a_norm = RMSNorm(c.q_lora_rank, c.rms_norm_eps, device)
        self.q_b_proj = Linear(c.q_lora_rank, self.n_heads * self.head_dim, dtype, device, fp8)
        self.kv_proj = Linear(c.hidden_size, self.head_dim, dtype, device, fp8)
        self.kv_norm = RMSNorm(self.head_dim, c.rms_norm_eps, device)
        self.o_a_proj = GroupedLinear(
            c.num_attention_heads * self.head_dim // c.o_groups,
            self.o_groups * c.o_lora_rank,
            self.o_groups,
            dtype,
            device,
            fp8,
        )
        self.o_b_proj = Linear(self.o_groups * c.o_lora_rank, c.hidden_size, dtype, device, fp8)
        self.sinks = nn.Parameter(
            torch.empty(self.n_heads, dtype=torch.float32, device=device), requires_grad=False
        )
        self.compressor: nn.Module | None
        if self.layer_type == CSA:
            self.compressor = CSACompressor(c, model_config.csa_ratio, dtype, device, fp8)
        elif self.layer_type == HCA:
            self.compressor = HCACompressor(c, model_config.hca_ratio, dtype, device)
        else:
            self.compressor = None
        # plain attribute (not a module): the state dict sees only the HF-named slices
        self._qkv_a: MergedLinear | None = None
        self._n_comp_proj = 0  # compressor projections inside self._qkv_a (0 or 2)
        group = [self.q_a_proj, self.kv_proj]
        if self.compressor is not None:
            with_comp = group + [self.compressor.kv_proj, self.compressor.gate_proj]
            if MergedLinear.can_merge(with_comp):
                group, self._n_comp_proj = with_comp, 2
                self.compressor.release_merge()
        if MergedLinear.can_merge(group):
            self._qkv_a = MergedLinear(group)

    def _project_input(
        self, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """``x [T, D]`` -> ``(q_a_proj(x), kv_proj(x), (compressor kv, gate) or None)``: one GEMM
        when merged (column views of its output), else one per projection."""
        if self._qkv_a is None:
            return self.q_a_proj(x), self.kv_proj(x), None
        outs = self._qkv_a(x)
        comp_proj = (outs[2], outs[3]) if self._n_comp_proj else None
        return outs[0], outs[1], comp_proj

    def forward(self, x: torch.Tensor, fb: ForwardBatch, pool: DSV4KVPool, rc: RopeCache) -> torch.Tensor:
        """``x [T, D]`` (normalised) -> ``[T, D]``; reads and writes the pool for this layer.

        With ``fb.indexer_stream`` (a ``torch.cuda.Stream``, set by the CUDA model runner) the
        indexer branch of a CSA layer (indexer compressor + scoring + top-k) runs on
        that stream, overlapping the q/kv norm-RoPE-insert and the main compressor on the current
        stream; both branches write disjoint pool state, and the main stream waits for the
        indexer before the sparse attention. Works eagerly and under CUDA-graph capture.
        """
        T = x.shape[0]
        cos, sin = rc.tok[self.rope_kind]
        q_a, kv, comp_proj = self._project_input(x)
        q_res = self.q_a_norm(q_a)
        ix_stream = fb.indexer_stream if isinstance(self.compressor, CSACompressor) else None
        sel: torch.Tensor | None = None
        main_stream = None
        if ix_stream is not None:
            main_stream = torch.cuda.current_stream(x.device)
            ix_stream.wait_stream(main_stream)  # x and q_res are ready
            with torch.cuda.stream(ix_stream):
                sel = self._indexer_branch(x, q_res, fb, pool, rc, cos, sin)
        q = self.q_b_proj(q_res).view(T, self.n_heads, self.head_dim)
        swa = pool.rows(KVKind.SWA, self.layer_idx)
        q, _ = ops.qnorm_rope_kv_insert(q, kv, self.kv_norm.weight, cos, sin, swa, fb.swa_write, self.eps)
        comp: dict = {}
        if isinstance(self.compressor, CSACompressor):
            plan = fb.csa
            assert plan is not None
            st = pool.compressor_state(KVKind.CSA_MAIN, self.layer_idx)
            self.compressor.run(x, fb, plan, st, rc.win[plan.ratio], comp_proj)
            if ix_stream is None:
                sel = self._indexer_branch(x, q_res, fb, pool, rc, cos, sin)
            else:
                assert main_stream is not None and sel is not None
                main_stream.wait_stream(ix_stream)
                if not torch.cuda.is_current_stream_capturing():
                    sel.record_stream(main_stream)  # allocated on the indexer stream
            assert sel is not None
            comp = dict(comp_kv=st.rows, comp_entries=sel, entries_per_page=fb.page_size // plan.ratio)
            if x.is_cuda and not fb.graph_safe and dense_prefix_enabled():
                if not torch.cuda.is_current_stream_capturing():  # fp8 pools: entries decoded once
                    comp["dense_prefix"] = dense_prefix_segments(
                        fb.extend_lens, fb.prefix_lens, plan.ratio, 256, 0
                    )
        elif isinstance(self.compressor, HCACompressor):
            plan = fb.hca
            assert plan is not None
            st = pool.compressor_state(KVKind.HCA, self.layer_idx)
            self.compressor.run(x, fb, plan, st, rc.win[plan.ratio], comp_proj)
            comp = dict(
                comp_kv=st.rows, comp_visible=plan.visible, entries_per_page=fb.page_size // plan.ratio
            )
            if x.is_cuda and not fb.graph_safe and dense_prefix_enabled():
                # long prefill runs attend their shared entries as dense products (host lengths
                # only; never inside a CUDA graph, whose batch is a padded stand-in)
                if not torch.cuda.is_current_stream_capturing():
                    comp["dense_prefix"] = dense_prefix_segments(fb.extend_lens, fb.prefix_lens, plan.ratio)
        if comp:
            comp.update(req_to_page=fb.req_to_page, req_rows=fb.req_pool_indices, token_req=fb.token_req)
        o = ops.sparse_attention(
            q, swa, fb.swa_pages, fb.positions, fb.window, self.sinks, self.head_dim**-0.5, **comp
        )
        o = ops.inv_rope_quant(o, cos, sin, False)
        o = self.o_a_proj(o.reshape(T, self.o_groups, -1))
        return self.tp.all_reduce(self.o_b_proj(o))

    def _indexer_branch(
        self,
        x: torch.Tensor,
        q_res: torch.Tensor,
        fb: ForwardBatch,
        pool: DSV4KVPool,
        rc: RopeCache,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """CSA indexer: compress this forward's completed windows into the indexer-key pool, then
        score the visible entries and return the ``[T, topk]`` selected entry indices (-1 = none)."""
        assert isinstance(self.compressor, CSACompressor)
        plan = fb.csa
        assert plan is not None
        st = pool.compressor_state(KVKind.CSA_INDEXER, self.layer_idx)
        ix = self.compressor.indexer
        kv_new, gate, weights = ix.project_all(x)  # one GEMM, on this branch's stream
        ix.run(x, fb, plan, st, rc.win[plan.ratio], (kv_new, gate))
        return ix.select(x, q_res, fb, plan, st.rows, cos, sin, weights)
