"""DeepSeek-V4 causal LM on the runtime's paged KV (DSV4_MODEL.md; paper §2).

Module and parameter names mirror HF ``transformers.DeepseekV4ForCausalLM`` exactly, so an
HF-named state dict loads with ``load_state_dict`` (the loader maps DeepSeek's official names to
these). The forward is written once over a :class:`ForwardBatch` of flat tokens (extend, decode or
mixed), with hot ops from ``sgl_kernel_v4`` (torch references on CPU).

Layer (HF ``DeepseekV4DecoderLayer``): mHC pre -> RMSNorm -> attention -> mHC post; mHC pre ->
RMSNorm -> MoE -> mHC post. Model: embedding expanded to ``hc_mult`` streams, layers, hyper-head
collapse, final RMSNorm, LM head.

Tensor / expert parallel (a :class:`~sglang_v4.distributed.parallel_state.TPGroup` of more than one
rank; docs/PARALLELISM.md): attention heads and output groups, the shared expert's intermediate
dim, the routed experts (by EP shard, then intermediate slice) and the LM head's vocabulary rows
are split; everything else (embedding, mHC, norms, router, compressors, indexer, the shared K=V
projection) is replicated. Per layer one all-reduce after the attention output and one after the
MoE; the LM head's logits are all-gathered. :meth:`DeepseekV4ForCausalLM.weight_shards` is the
table of which weight is split how (the loader and the dummy initialiser read it).
"""

from __future__ import annotations

import torch
from sgl_kernel_v4 import ops
from torch import nn

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
from sglang_v4.distributed.sharding import TensorShard
from sglang_v4.layers.attention import DSV4Attention, RopeCache
from sglang_v4.layers.layernorm import RMSNorm
from sglang_v4.layers.linear import Linear
from sglang_v4.layers.mhc import HyperConnection, HyperHead
from sglang_v4.layers.moe import SparseMoeBlock
from sglang_v4.layers.quantization import QuantConfig
from sglang_v4.layers.rotary_embedding import RotaryTables
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.forward_batch_info import ForwardBatch


class DecoderLayer(nn.Module):
    """One DeepSeek-V4 block; ``forward(x [T, n, D]) -> [T, n, D]``."""

    def __init__(
        self,
        mc: ModelConfig,
        layer_idx: int,
        dtype: torch.dtype,
        device: torch.device | str,
        quant: QuantConfig | None = None,
        tp: TPGroup | None = None,
    ) -> None:
        super().__init__()
        c = mc.hf
        self.self_attn = DSV4Attention(mc, layer_idx, dtype, device, quant, tp)
        self.mlp = SparseMoeBlock(c, layer_idx, dtype, device, quant, tp)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, device)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, device)
        self.attn_hc = HyperConnection(
            c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters, c.hc_eps, c.rms_norm_eps, device
        )
        self.ffn_hc = HyperConnection(
            c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters, c.hc_eps, c.rms_norm_eps, device
        )

    def forward(self, x: torch.Tensor, fb: ForwardBatch, pool: DSV4KVPool, rc: RopeCache) -> torch.Tensor:
        """``x [T, n, D]`` (``n`` hyper-connection copies) through attention and the MoE, each between
        the hyper-connection's collapse (``pre``) and expansion (``hc_post``) -> ``[T, n, D]``."""
        h, post, comb = self.attn_hc.pre(x, self.input_layernorm)  # collapse + RMSNorm
        a = self.self_attn(h, fb, pool, rc)
        x = ops.hc_post(a, x, post, comb)
        h, post, comb = self.ffn_hc.pre(x, self.post_attention_layernorm)
        m = self.mlp(h, fb.input_ids)
        return ops.hc_post(m, x, post, comb)


def _is_meta(device: torch.device | str) -> bool:
    """Whether ``device`` is the meta device (tensors with shapes and dtypes but no data)."""
    return torch.device(device).type == "meta"


class DeepseekV4Model(nn.Module):
    """Embedding, layers, hyper-head and final norm (HF ``DeepseekV4Model`` names)."""

    def __init__(
        self,
        mc: ModelConfig,
        dtype: torch.dtype,
        device: torch.device | str,
        quant: QuantConfig | None = None,
        tp: TPGroup | None = None,
    ) -> None:
        super().__init__()
        c = mc.hf
        self.hc_mult = c.hc_mult
        # On the meta device (shapes only: the checkpoint check, the weight-bytes plan) the
        # embedding gets its tensor as is: ``nn.Embedding``'s random init of a meta tensor runs
        # through ``torch._refs``, whose first use imports ``torch._dynamo`` (~1.5 s of CPU).
        meta = (
            torch.empty(c.vocab_size, c.hidden_size, dtype=dtype, device="meta") if _is_meta(device) else None
        )
        self.embed_tokens = nn.Embedding(
            c.vocab_size, c.hidden_size, _weight=meta, dtype=dtype, device=device
        )
        self.embed_tokens.weight.requires_grad_(False)
        self.layers = nn.ModuleList(
            [DecoderLayer(mc, i, dtype, device, quant, tp) for i in range(c.num_hidden_layers)]
        )
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps, device)
        self.hc_head = HyperHead(c.hc_mult, c.hidden_size, c.hc_eps, c.rms_norm_eps, device)


class DeepseekV4ForCausalLM(nn.Module):
    """The runtime model.

    Args:
        model_config: parsed config.
        dtype: weight / activation dtype (``torch.float32`` or ``torch.bfloat16``); the tensors HF
            keeps in fp32 (mHC, norms, sinks, ``position_bias``, router bias) stay fp32.
        device: where the weights live.
        quant: weights kept quantized (FP8 linears / FP4 routed experts as DeepSeek publishes them,
            ``layers/quantization.py``); ``None``: every weight in ``dtype``.
        tp: this rank's tensor-parallel group (``None``: one rank, the whole model). The LM head
            holds ``vocab_size / tp`` rows and :meth:`forward` all-gathers the logits, so every
            rank returns the full ``[K, vocab]``.

    Raises:
        ValueError: a dimension the layout cannot split evenly (``o_groups``, ``vocab_size``,
            intermediate sizes by ``tp``; ``n_routed_experts`` by ``ep``), naming it.
    """

    def __init__(
        self,
        model_config: ModelConfig,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        quant: QuantConfig | None = None,
        tp: TPGroup | None = None,
    ) -> None:
        super().__init__()
        self.mc = model_config
        self.dtype = dtype
        self.quant = quant
        self.tp = tp if tp is not None else TPGroup(ParallelConfig())
        self.parallel = self.tp.config
        self.model = DeepseekV4Model(model_config, dtype, device, quant, self.tp)
        v0, v1 = self.parallel.tp_range(model_config.vocab_size, "vocab_size (LM head rows, by --tp-size)")
        self.lm_head = Linear(model_config.hidden_size, v1 - v0, dtype, device)
        self.rope = RotaryTables(model_config, device)

    def _rope_cache(self, fb: ForwardBatch) -> RopeCache:
        plans = [p for p in (fb.csa, fb.hca) if p is not None]
        tabs = self.rope.cos_sin_many([fb.positions] + [p.win_pos for p in plans])
        return RopeCache(tok=tabs[0], win={p.ratio: t["compress"] for p, t in zip(plans, tabs[1:])})

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch, pool: DSV4KVPool) -> torch.Tensor:
        """Run the batch; writes its KV into ``pool``.

        The layers find every key through the batch's page tables (``fb.swa_pages``,
        ``fb.req_to_page``); no per-token key list is made.

        Returns:
            ``[K, vocab]`` fp32 logits of the rows ``fb.logits_indices``.
        """
        x = self.model.embed_tokens(fb.input_ids)
        x = x.unsqueeze(1).expand(-1, self.model.hc_mult, -1).contiguous()
        rc = self._rope_cache(fb)
        for layer in self.model.layers:
            x = layer(x, fb, pool, rc)
        x = x[fb.logits_indices]
        h = self.model.norm(self.model.hc_head(x))
        return self.tp.all_gather(self.lm_head(h), dim=-1).float()

    def weight_shards(self) -> dict[str, TensorShard]:
        """Which weights this rank holds a part of, and which part (HF names; scales follow their
        weight; unlisted tensors are replicated). Shapes are logical (FP4 values, not bytes).

        =====================================  =========================================================
        weight                                 this rank keeps
        =====================================  =========================================================
        ``self_attn.q_b_proj.weight``          rows of its heads (``n_heads / tp`` x ``head_dim``)
        ``self_attn.sinks``                    its heads
        ``self_attn.o_a_proj.weight``          rows of its output groups (``o_groups / tp``)
        ``self_attn.o_b_proj.weight``          columns of its output groups
        ``mlp.shared_experts.{gate,up}_proj``  rows ``moe_intermediate_size / tp``
        ``mlp.shared_experts.down_proj``       the matching columns
        ``mlp.experts.gate_up_proj``           experts of its EP shard; gate and up rows of its
                                               intermediate slice (``/ (tp / ep)``)
        ``mlp.experts.down_proj``              experts of its EP shard; columns of its slice
        ``lm_head.weight``                     rows ``vocab_size / tp``
        =====================================  =========================================================
        """
        pc, c = self.parallel, self.mc.hf
        if pc.tp_size == 1:
            return {}
        H, hd, G, R = c.num_attention_heads, c.head_dim, c.o_groups, c.o_lora_rank
        D, inter, E = c.hidden_size, c.moe_intermediate_size, c.n_routed_experts
        g0, g1 = pc.tp_range(G, "o_groups")
        h0, h1 = g0 * H // G, g1 * H // G
        s0, s1 = pc.tp_range(inter, "moe_intermediate_size")
        e0, e1 = pc.expert_range(E)
        i0, i1 = pc.moe_inter_range(inter)
        v0, v1 = pc.tp_range(c.vocab_size, "vocab_size")
        rows = TensorShard.split
        out: dict[str, TensorShard] = {"lm_head.weight": rows((c.vocab_size, D), 0, (v0, v1))}
        for i in range(c.num_hidden_layers):
            a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
            out[a + "q_b_proj.weight"] = rows((H * hd, c.q_lora_rank), 0, (h0 * hd, h1 * hd))
            out[a + "sinks"] = rows((H,), 0, (h0, h1))
            out[a + "o_a_proj.weight"] = rows((G * R, H * hd // G), 0, (g0 * R, g1 * R))
            out[a + "o_b_proj.weight"] = rows((D, G * R), 1, (g0 * R, g1 * R))
            for p in ("gate_proj", "up_proj"):
                out[m + f"shared_experts.{p}.weight"] = rows((inter, D), 0, (s0, s1))
            out[m + "shared_experts.down_proj.weight"] = rows((D, inter), 1, (s0, s1))
            gate_up = rows((E, 2 * inter, D), 0, (e0, e1))
            down = rows((E, D, inter), 0, (e0, e1))
            if (i0, i1) != (0, inter):
                gate_up = gate_up.and_split(1, (i0, i1), (inter + i0, inter + i1))
                down = down.and_split(2, (i0, i1))
            out[m + "experts.gate_up_proj"] = gate_up
            out[m + "experts.down_proj"] = down
        return {k: v for k, v in out.items() if not v.is_full}
