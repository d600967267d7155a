"""ModelRunner: owns the model weights and the KV pool, runs one forward per scheduler step.

Weights come from a checkpoint directory (``load_format="auto"``, official or HF names, FP8/FP4
dequantized on load; ``sglang_v4.model_loader``) or are initialised randomly on the device
(``load_format="dummy"``, as SGLang and vLLM call it, for benchmarks). The KV pool is sized from
``--max-total-tokens`` or, on CUDA, from ``--mem-fraction-static`` of the free memory after the
weights are loaded.
"""

from __future__ import annotations

import logging
import math
import time

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.forward_batch import ForwardBatch, ReqForwardInput, build_forward_batch
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@torch.no_grad()
def init_dummy_weights(model: torch.nn.Module, seed: int = 0) -> None:
    """Deterministic random weights, generated on the weights' device (``--load-format dummy``).

    Matrices get ``N(0, 1/fan_in)``; 1-D norm weights are ~1; mHC scales 1; biases, sinks and
    position biases small; the hash-routing table ``tid2eid`` a random choice of distinct experts.
    """
    gen_dev = next(model.parameters()).device
    g = torch.Generator(device=gen_dev).manual_seed(seed)
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if name.endswith("tid2eid"):
            vocab, k = p.shape
            n_exp = model.mc.hf.n_routed_experts
            r = torch.rand(vocab, n_exp, generator=g, device=gen_dev)
            p.copy_(r.argsort(dim=-1)[:, :k])
            continue
        if not p.is_floating_point():
            continue
        if p.dim() >= 2:
            p.copy_(
                torch.randn(p.shape, generator=g, device=gen_dev, dtype=torch.float32)
                / math.sqrt(p.shape[-1])
            )
        elif "norm" in name or name.endswith("scale"):
            p.copy_(1.0 + 0.05 * torch.randn(p.shape, generator=g, device=gen_dev))
        else:
            p.copy_(0.1 * torch.randn(p.shape, generator=g, device=gen_dev))


class ModelRunner:
    """Model + KV pool.

    Args:
        model_config: the parsed config.
        model_path: checkpoint directory (ignored with ``load_format="dummy"``).
        device: ``"cpu"`` or ``"cuda"``.
        dtype: ``"float32"`` or ``"bfloat16"``.
        page_size: tokens per logical block.
        max_total_tokens: KV capacity in tokens (block pages x page_size); ``None`` = from memory.
        max_running_requests: request slots.
        context_len: longest sequence.
        load_format: ``"auto"`` or ``"dummy"``.
        mem_fraction_static: fraction of free device memory for the KV pool when
            ``max_total_tokens`` is not given (CUDA).
        seed: seed of dummy weights.
    """

    def __init__(
        self,
        model_config: ModelConfig,
        model_path: str | None,
        device: str,
        dtype: str,
        page_size: int,
        max_total_tokens: int | None,
        max_running_requests: int,
        context_len: int,
        load_format: str = "auto",
        mem_fraction_static: float | None = None,
        seed: int = 0,
    ) -> None:
        self.mc = model_config
        self.device = torch.device(device)
        self.dtype = _DTYPES[dtype]
        self.page_size = page_size
        t0 = time.perf_counter()
        self.model = DeepseekV4ForCausalLM(model_config, self.dtype, self.device)
        if load_format == "dummy":
            init_dummy_weights(self.model, seed)
        else:
            from sglang_v4.model_loader.loader import load_weights_into

            if model_path is None:
                raise ValueError("model_path: required unless load_format='dummy'")
            load_weights_into(self.model, model_path, dtype=None, progress=True)
        self.model.eval()
        logger.info(
            "Model loaded in %.1f s (%s, %s, load_format=%s)",
            time.perf_counter() - t0,
            device,
            dtype,
            load_format,
        )
        self.max_running_requests = max_running_requests
        self.context_len = context_len
        self.max_total_tokens = self._size_pool(max_total_tokens, mem_fraction_static)
        num_block_pages = self.max_total_tokens // page_size
        window = model_config.sliding_window
        # one resume state per cached block + the live windows of running requests (3 spans each)
        # + the transient pages of a prefill chunk
        num_window_pages = num_block_pages + 4 * max_running_requests + 64
        self.pool = DSV4KVPool(
            model_config,
            page_size,
            num_block_pages,
            num_window_pages,
            max_running_requests,
            context_len,
            self.dtype,
            self.device,
        )
        logger.info(
            "KV pool: %d block pages (%d tokens), %d window pages of %d positions, %d request slots, %.1f MiB",
            num_block_pages,
            self.max_total_tokens,
            num_window_pages,
            window,
            max_running_requests,
            self.pool.memory_bytes() / 2**20,
        )

    def _bytes_per_block_page(self) -> int:
        mc = self.mc
        es = torch.tensor([], dtype=self.dtype).element_size()
        per_page = self.page_size
        csa = len(mc.csa_layers) * (per_page // mc.csa_ratio) * (mc.head_dim + mc.index_head_dim) * es
        hca = len(mc.hca_layers) * (per_page // mc.hca_ratio) * mc.head_dim * es
        window = mc.num_layers * mc.sliding_window * mc.head_dim * es
        snap = len(mc.csa_layers) * mc.csa_ratio * (mc.head_dim + mc.index_head_dim) * 2 * 4
        return csa + hca + window + snap  # a block page plus its resume state

    def _size_pool(self, max_total_tokens: int | None, mem_fraction: float | None) -> int:
        if max_total_tokens is not None:
            tokens = max_total_tokens
        elif self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = free * (mem_fraction if mem_fraction is not None else 0.85)
            tokens = int(budget // self._bytes_per_block_page()) * self.page_size
        else:
            tokens = max(self.context_len, 4 * self.page_size)
            tokens = min(tokens, 131072)
        tokens = max(self.page_size, (tokens // self.page_size) * self.page_size)
        return tokens

    def kv_plan_info(self) -> dict:
        """KV sizing facts for ``get_server_info()["kv_plan"]`` (capacity, fragmentation, ...)."""
        return {"kv_capacity_tokens": self.max_total_tokens, "fragmentation_bytes": 0}

    def build_batch(self, reqs: list[ReqForwardInput]) -> ForwardBatch:
        mc = self.mc
        return build_forward_batch(
            reqs,
            self.page_size,
            mc.sliding_window,
            mc.csa_ratio if mc.csa_layers else None,
            mc.hca_ratio if mc.hca_layers else None,
            self.device,
        )

    def forward(self, reqs: list[ReqForwardInput]) -> tuple[ForwardBatch, torch.Tensor]:
        """Build the batch and run the model. Returns the batch and ``[K, vocab]`` fp32 logits."""
        fb = self.build_batch(reqs)
        logits = self.model(fb, self.pool)
        return fb, logits
