"""DeepSeek-V4 causal LM on the runtime's paged KV (DSV4_MODEL.md; paper §2).

Module and parameter names mirror HF ``transformers.DeepseekV4ForCausalLM`` exactly, so an
HF-named state dict loads with ``load_state_dict`` (the loader maps DeepSeek's official names to
these). The forward is written once over a :class:`ForwardBatch` of flat tokens (extend, decode or
mixed), with hot ops from ``sgl_kernel_v4`` (torch references on CPU).

Layer (HF ``DeepseekV4DecoderLayer``): mHC pre -> RMSNorm -> attention -> mHC post; mHC pre ->
RMSNorm -> MoE -> mHC post. Model: embedding expanded to ``hc_mult`` streams, layers, hyper-head
collapse, final RMSNorm, LM head.
"""

from __future__ import annotations

import torch
from sgl_kernel_v4 import ops
from torch import nn

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.layers.attention import DSV4Attention, RopeCache
from sglang_v4.layers.layernorm import RMSNorm
from sglang_v4.layers.linear import Linear
from sglang_v4.layers.mhc import HyperConnection, HyperHead
from sglang_v4.layers.moe import SparseMoeBlock
from sglang_v4.layers.quantization import QuantConfig
from sglang_v4.layers.rotary_embedding import RotaryTables
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.forward_batch import ForwardBatch


class DecoderLayer(nn.Module):
    """One DeepSeek-V4 block; ``forward(x [T, n, D]) -> [T, n, D]``."""

    def __init__(
        self,
        mc: ModelConfig,
        layer_idx: int,
        dtype: torch.dtype,
        device: torch.device | str,
        quant: QuantConfig | None = None,
    ) -> None:
        super().__init__()
        c = mc.hf
        self.self_attn = DSV4Attention(mc, layer_idx, dtype, device, quant)
        self.mlp = SparseMoeBlock(c, layer_idx, dtype, device, quant)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, device)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, device)
        self.attn_hc = HyperConnection(
            c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters, c.hc_eps, c.rms_norm_eps, device
        )
        self.ffn_hc = HyperConnection(
            c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters, c.hc_eps, c.rms_norm_eps, device
        )

    def forward(self, x: torch.Tensor, fb: ForwardBatch, pool: DSV4KVPool, rc: RopeCache) -> torch.Tensor:
        collapsed, post, comb = self.attn_hc.pre(x)
        a = self.self_attn(self.input_layernorm(collapsed), fb, pool, rc)
        x = ops.hc_post(a, x, post, comb)
        collapsed, post, comb = self.ffn_hc.pre(x)
        m = self.mlp(self.post_attention_layernorm(collapsed), fb.input_ids)
        return ops.hc_post(m, x, post, comb)


class DeepseekV4Model(nn.Module):
    """Embedding, layers, hyper-head and final norm (HF ``DeepseekV4Model`` names)."""

    def __init__(
        self,
        mc: ModelConfig,
        dtype: torch.dtype,
        device: torch.device | str,
        quant: QuantConfig | None = None,
    ) -> None:
        super().__init__()
        c = mc.hf
        self.hc_mult = c.hc_mult
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, dtype=dtype, device=device)
        self.embed_tokens.weight.requires_grad_(False)
        self.layers = nn.ModuleList(
            [DecoderLayer(mc, i, dtype, device, quant) for i in range(c.num_hidden_layers)]
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
    """

    def __init__(
        self,
        model_config: ModelConfig,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        quant: QuantConfig | None = None,
    ) -> None:
        super().__init__()
        self.mc = model_config
        self.dtype = dtype
        self.quant = quant
        self.model = DeepseekV4Model(model_config, dtype, device, quant)
        self.lm_head = Linear(model_config.hidden_size, model_config.vocab_size, dtype, device)
        self.rope = RotaryTables(model_config, device)

    def _rope_cache(self, fb: ForwardBatch) -> RopeCache:
        tok = {k: self.rope.cos_sin(k, fb.positions) for k in ("main", "compress")}
        win = {}
        for plan in (fb.csa, fb.hca):
            if plan is not None:
                win[plan.ratio] = self.rope.cos_sin("compress", plan.win_pos)
        return RopeCache(tok=tok, win=win)

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
        return self.lm_head(h).float()
