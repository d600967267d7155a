"""Shared helpers for the model-parity tests: tiny configs, twin models (HF oracle + ours), and a
minimal page-allocating driver that runs sequences through the runtime model in chosen chunks.

The oracle is ``transformers.DeepseekV4ForCausalLM`` run once over the whole sequence with no
cache (its "stateless single-shot" mode), fp32 on CPU.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.forward_batch import ReqForwardInput, build_forward_batch
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.make_checkpoint import make_random_state_dict

if TYPE_CHECKING:  # imported where used: the TP rank processes that import this module skip it
    from transformers import DeepseekV4ForCausalLM as HFModel

SL, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"

# index_n_heads >= 16: with few indexer heads many candidates score exactly 0 (all ReLUs off) and
# HF's top-k between tied scores is arbitrary (ours follows one rule, tested against cold runs in
# test_radix_indexer_ties.py); 16 heads make exact ties negligible, so these configs compare with HF.
BASE: dict[str, Any] = dict(
    model_type="deepseek_v4",
    vocab_size=1000,
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=2,
    head_dim=128,
    partial_rotary_factor=0.5,
    q_lora_rank=32,
    o_groups=2,
    o_lora_rank=16,
    index_n_heads=16,
    index_head_dim=64,
    index_topk=8,
    n_routed_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    sliding_window=128,
    max_position_embeddings=65536,
)

CONFIGS: dict[str, dict[str, Any]] = {
    # sliding-first schedule, plain rope, top-k below the number of entries
    "sliding_first": dict(
        BASE, layer_types=[SL, CSA, HCA, CSA], mlp_layer_types=["hash_moe", "moe", "moe", "moe"]
    ),
    # HCA-first (V4-Pro style bootstrap), YaRN on the compress rope
    "hca_first_yarn": dict(
        BASE,
        layer_types=[HCA, HCA, CSA, HCA],
        mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"],
        rope_parameters={
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 16384,
            "beta_fast": 32,
            "beta_slow": 1,
        },
    ),
    # index_topk above the number of entries ever available in these tests
    "topk_large": dict(
        BASE,
        layer_types=[CSA, SL, CSA, HCA],
        mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        index_topk=512,
    ),
}


@dataclass
class Twin:
    """HF oracle and runtime model with the same random weights."""

    name: str
    cfg: dict[str, Any]
    mc: ModelConfig
    hf: HFModel
    ours: DeepseekV4ForCausalLM
    state: dict[str, torch.Tensor] = field(repr=False, default_factory=dict)
    #: :func:`hf_logprobs_memo`'s results by token sequence
    hf_memo: dict[tuple[int, ...], torch.Tensor] = field(repr=False, compare=False, default_factory=dict)


def make_twin(name: str, seed: int = 0, cfg: dict[str, Any] | None = None) -> Twin:
    """Twins of ``CONFIGS[name]`` (or of ``cfg`` when given; ``name`` then only labels it)."""
    cfg = copy.deepcopy(CONFIGS[name] if cfg is None else cfg)
    mc = ModelConfig.from_dict(copy.deepcopy(cfg))
    state = make_random_state_dict(copy.deepcopy(cfg), seed)
    from transformers import DeepseekV4Config
    from transformers import DeepseekV4ForCausalLM as HFModel

    hf_cfg = DeepseekV4Config(**{k: v for k, v in copy.deepcopy(cfg).items() if k != "model_type"})
    hf = HFModel(hf_cfg).eval()
    hf.load_state_dict(state)
    ours = DeepseekV4ForCausalLM(mc)
    ours.load_state_dict(state, strict=True)
    return Twin(name, cfg, mc, hf, ours, state)


@torch.no_grad()
def hf_logprobs(twin: Twin, ids: list[int]) -> torch.Tensor:
    """``[L, V]`` fp32 log-probabilities of the oracle, one forward over the whole sequence."""
    out = twin.hf(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(out, dim=-1)


def hf_logprobs_memo(twin: Twin, ids: list[int]) -> torch.Tensor:
    """:func:`hf_logprobs` remembered per twin and token sequence (a copy of the stored tensor), for
    modules that check several runtime schedules of one sequence against the same oracle. Only for
    twins whose HF weights are never changed after their first call."""
    key = tuple(ids)
    if key not in twin.hf_memo:
        twin.hf_memo[key] = hf_logprobs(twin, ids)
    return twin.hf_memo[key].clone()


@torch.no_grad()
def hf_greedy(twin: Twin, ids: list[int], n: int) -> list[int]:
    """Greedy continuation by the oracle (full forward per step, no cache)."""
    seq = list(ids)
    for _ in range(n):
        seq.append(int(twin.hf(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(ids) :]


class Driver:
    """Allocates pages and runs requests through the runtime model (no scheduler, no radix cache).

    ``page_size``: tokens per block page (a multiple of the model's compress rates and
    ``sliding_window``); ``device``: where the pool and batches live (the model's device)."""

    def __init__(
        self,
        twin: Twin,
        num_block_pages: int = 128,
        num_window_pages: int = 512,
        max_reqs: int = 32,
        page_size: int = 256,
        device: str = "cpu",
    ) -> None:
        self.twin, self.device = twin, device
        self.page_size, self.window = page_size, twin.mc.sliding_window
        self.pool = DSV4KVPool(
            twin.mc, page_size, num_block_pages, num_window_pages, max_reqs, torch.float32, device
        )
        self.state: dict[int, dict[str, Any]] = {}

    def new_req(self) -> int:
        slot = self.pool.req_slots.alloc()
        assert slot is not None
        self.pool.reset_req_state(slot)
        self.state[slot] = {"blocks": [], "wins": {}, "done": 0}
        return slot

    def _pages(self, slot: int, end: int) -> ReqForwardInput | None:
        st = self.state[slot]
        ps, W = self.page_size, self.window
        while len(st["blocks"]) < -(-end // ps):
            st["blocks"] += self.pool.block_alloc.alloc_or_raise(1)
        lo = max(0, (st["done"] - W + 1) // W)
        for k in range(lo, (end - 1) // W + 1):
            if k not in st["wins"]:
                st["wins"][k] = self.pool.window_alloc.alloc_or_raise(1)[0]
        return None

    def step(self, work: list[tuple[int, list[int]]]) -> list[torch.Tensor]:
        """One mixed forward: ``work`` = [(slot, new token ids)]. Returns per request the
        ``[n, V]`` log-probabilities of its new positions."""
        inputs = []
        for slot, ids in work:
            st = self.state[slot]
            self._pages(slot, st["done"] + len(ids))
            inputs.append(ReqForwardInput(slot, ids, st["done"], st["blocks"], st["wins"], 0))
        mc = self.twin.mc
        fb = build_forward_batch(
            inputs,
            self.page_size,
            self.window,
            mc.csa_ratio if mc.csa_layers else None,
            mc.hca_ratio if mc.hca_layers else None,
            self.device,
        )
        logits = self.twin.ours(fb, self.pool)
        outs, off = [], 0
        for (slot, ids), c in zip(work, fb.logits_counts):
            outs.append(torch.log_softmax(logits[off : off + c], dim=-1))
            off += c
            st = self.state[slot]
            st["done"] += len(ids)
            # drop window pages that left the window (the runtime frees them the same way)
            lo = max(0, (st["done"] - self.window + 1) // self.window)
            for k in [k for k in st["wins"] if k < lo]:
                self.pool.window_alloc.free([st["wins"].pop(k)])
        return outs

    def release(self, slot: int) -> None:
        st = self.state.pop(slot)
        self.pool.block_alloc.free(st["blocks"])
        self.pool.window_alloc.free(list(st["wins"].values()))
        self.pool.req_slots.free(slot)

    def run_chunked(self, ids: list[int], chunk: int) -> torch.Tensor:
        """All ``[L, V]`` log-probabilities of one sequence computed in chunks of ``chunk`` tokens."""
        slot = self.new_req()
        outs = []
        for s in range(0, len(ids), chunk):
            outs.append(self.step([(slot, ids[s : s + chunk])])[0])
        self.release(slot)
        return torch.cat(outs)

    def greedy(self, ids: list[int], n: int, chunk: int = 1 << 30) -> list[int]:
        """Prefill (in chunks) then ``n`` greedy decode steps."""
        slot = self.new_req()
        last = None
        for s in range(0, len(ids), chunk):
            last = self.step([(slot, ids[s : s + chunk])])[0]
        assert last is not None
        out = [int(last[-1].argmax())]
        while len(out) < n:
            out.append(int(self.step([(slot, [out[-1]])])[0][-1].argmax()))
        self.release(slot)
        return out


def random_ids(n: int, seed: int, vocab: int = 1000) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()
