"""The runtime model driven directly for benchmarks: :class:`Bench` (dummy weights, page-allocating
request helper, timed prefill and decode with or without CUDA graphs), the FLOPs and active-weight
byte estimates behind the rooflines (:func:`prefill_flops`, :func:`active_bytes`). Used by
``bench_model.py``, ``bench_quant.py``, ``serving_overlap.py`` and ``longctx.py``.
"""

from __future__ import annotations

import statistics
import time

import torch
from timing import cuda_ms


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def prefill_flops(model: torch.nn.Module, mc, n: int) -> float:
    """FLOPs of a prefill of ``n`` tokens (one request from position 0), an estimate: 2 x the
    parameters each token multiplies (all but the embedding table and the LM head, routed experts
    weighted by ``k / E``) + attention ``4 H D`` per (query, key) over the window plus top-k (CSA)
    or all visible (HCA) compressed entries + indexer ``2 Hi di`` per (query, candidate); the LM
    head runs for the last token only."""
    hf = mc.hf
    E, k = hf.n_routed_experts, hf.num_experts_per_tok
    dense = exp = 0
    for name, p in model.named_parameters():
        if "embed_tokens" in name or name.startswith("lm_head"):
            continue
        if ".experts." in name:
            exp += p.numel()
        else:
            dense += p.numel()
    f = 2.0 * n * (dense + exp * k / E) + 2.0 * hf.hidden_size * hf.vocab_size
    pos = torch.arange(n, dtype=torch.float64)
    win = torch.clamp(pos + 1, max=hf.sliding_window)
    H, D = hf.num_attention_heads, hf.head_dim
    for t in hf.layer_types:
        keys = win.clone()
        if t == "compressed_sparse_attention":
            vis = torch.floor((pos + 1) / mc.csa_ratio)
            keys += torch.clamp(vis, max=hf.index_topk)
            f += float(2 * hf.index_n_heads * hf.index_head_dim * vis.sum())
        elif t == "heavily_compressed_attention":
            keys += torch.floor((pos + 1) / mc.hca_ratio)
        f += float(4 * H * D * keys.sum())
    return f


def decode_token(req: int, pos: int) -> int:
    """The token request ``req`` of a decode batch feeds at position ``pos``: distinct across the
    batch and across steps (a multiplicative hash into ``[2, 120000)``, the prompt range).

    Every request of a decode row continues the same prefilled source, so one shared token would give
    every row the same hidden state and the same routed experts: a batch of ``bs`` would read the
    expert weights of one token, not the ``E (1 - (1 - k/E)^bs)`` distinct experts a served batch of
    different tokens reads (:func:`active_bytes`)."""
    return 2 + (req * 2654435761 + pos * 40503 + 12345) % 119998


class Bench:
    """The runtime model (dummy weights: bf16, or FP8/FP4 with ``quantization="fp8"`` or a preset
    whose config says so) plus a page-allocating request helper."""

    def __init__(
        self,
        ctx_len: int,
        preset: str = "flash-8l-32e",
        device: str = "cuda",
        dtype: str = "bfloat16",
        quantization: str | None = None,
        max_total_tokens: int = 160 * 2048,
    ) -> None:
        from sglang_v4.configs.model_config import ModelConfig
        from sglang_v4.configs.presets import get_preset
        from sglang_v4.model_executor.model_runner import ModelRunner
        from sglang_v4.server_args import ServerArgs

        self.cfg = get_preset(preset)
        self.device = device
        self.mc = ModelConfig.from_dict(dict(self.cfg))
        self.page = 256
        sa = ServerArgs(
            device=device,
            dtype=dtype,
            page_size=self.page,
            max_total_tokens=max_total_tokens,
            max_running_requests=160,
            context_length=ctx_len,
            load_format="dummy",
            cuda_graph_max_bs=128,
            quantization=quantization,
        )
        self.runner = ModelRunner(self.mc, sa)
        self.pool = self.runner.pool
        self.graph_runner = self.runner.cuda_graph_runner

    # pages ---------------------------------------------------------------------------------
    def new_slot(self) -> int:
        s = self.pool.req_slots.alloc()
        assert s is not None
        self.pool.reset_req_state(s)
        return s

    def pages_for(self, end: int, blocks: list[int], wins: dict[int, int], start: int) -> None:
        while len(blocks) < -(-end // self.page):
            blocks += self.pool.block_alloc.alloc_or_raise(1)
        for k in range(max(0, (start - 127) // 128), (end - 1) // 128 + 1):
            if k not in wins:
                wins[k] = self.pool.window_alloc.alloc_or_raise(1)[0]

    def release(self, slot: int, blocks: list[int], wins: dict[int, int]) -> None:
        self.pool.block_alloc.free(blocks)
        self.pool.window_alloc.free(list(wins.values()))
        self.pool.req_slots.free(slot)

    # prefill ---------------------------------------------------------------------------------
    def prefill(self, n: int, seed: int = 0) -> tuple[float, tuple]:
        """One request of ``n`` tokens in one forward; returns (seconds, (slot, blocks, wins))."""
        from sglang_v4.model_executor.forward_batch import ReqForwardInput

        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(2, 120000, (n,), generator=g).tolist()
        slot, blocks, wins = self.new_slot(), [], {}
        self.pages_for(n, blocks, wins, 0)
        req = ReqForwardInput(slot, ids, 0, list(blocks), dict(wins), n - 1)
        sync()
        t = time.perf_counter()
        self.runner.forward([req])
        sync()
        dt = time.perf_counter() - t
        # keep only what decode reads (window spans >= (n - 127) // 128)
        lo = max(0, (n - 127) // 128)
        for k in [k for k in wins if k < lo]:
            self.pool.window_alloc.free([wins.pop(k)])
        return dt, (slot, blocks, wins)

    # decode ----------------------------------------------------------------------------------
    def decode_reqs(self, src: tuple, ctx: int, bs: int) -> list[dict]:
        """``bs`` requests continuing ``src`` (a prefilled request of ``ctx`` tokens)."""
        s_slot, s_blocks, s_wins = src
        p = self.pool
        out = []
        n_full = ctx // self.page
        for i in range(bs):
            slot = self.new_slot()
            p.copy_req_state(slot, s_slot)
            blocks = list(s_blocks[:n_full])
            wins = {k: v for k, v in s_wins.items() if k < ctx // 128}
            own_b, own_w = [], {}
            out.append(
                {
                    "slot": slot,
                    "blocks": blocks,
                    "wins": wins,
                    "own_b": own_b,
                    "own_w": own_w,
                    "pos": ctx,
                    "i": i,
                }
            )
        return out

    def step_inputs(self, reqs: list[dict]) -> list:
        """One decode input per request; each request feeds its own token (:func:`decode_token`)."""
        from sglang_v4.model_executor.forward_batch import ReqForwardInput

        ins = []
        for r in reqs:
            end = r["pos"] + 1
            while len(r["blocks"]) < -(-end // self.page):
                b = self.pool.block_alloc.alloc_or_raise(1)
                r["blocks"] += b
                r["own_b"] += b
            k = r["pos"] // 128
            if k not in r["wins"]:
                w = self.pool.window_alloc.alloc_or_raise(1)[0]
                r["wins"][k] = w
                r["own_w"][k] = w
            ins.append(
                ReqForwardInput(
                    r["slot"], [decode_token(r["i"], r["pos"])], r["pos"], r["blocks"], r["wins"], 0
                )
            )
        return ins

    def free_reqs(self, reqs: list[dict]) -> None:
        for r in reqs:
            self.pool.block_alloc.free(r["own_b"])
            self.pool.window_alloc.free(list(r["own_w"].values()))
            self.pool.req_slots.free(r["slot"])

    def decode(
        self, src: tuple, ctx: int, bs: int, graphs: bool, stream: bool, steps: int, warm: int
    ) -> dict:
        self.runner.cuda_graph_runner = self.graph_runner if graphs else None
        streams = self.runner.indexer_streams
        streams.set_enabled(stream)
        bound = streams.max_tokens
        streams.max_tokens = 1 << 30  # the row's setting, not the server's bound
        reqs = self.decode_reqs(src, ctx, bs)
        times = []
        try:
            for i in range(warm + steps):
                ins = self.step_inputs(reqs)
                sync()
                t = time.perf_counter()
                self.runner.forward(ins)
                sync()
                if i >= warm:
                    times.append((time.perf_counter() - t) * 1e3)
                for r in reqs:
                    r["pos"] += 1
            row = {"ms_step": round(statistics.median(times), 3), "tok_s": None, "steps": steps}
            row["tok_s"] = round(bs / row["ms_step"] * 1e3, 1)
            if graphs and self.graph_runner is not None and self.device == "cuda":
                gr = self.graph_runner
                key = gr.key_for(self.step_inputs(reqs))  # (bs, two_stream): every context
                if key is not None and key in gr.graphs:
                    g = gr.graphs[key]
                    row["replay_ms"] = round(statistics.median(cuda_ms(g.replay, 10, warm=1)), 3)
                row["graph_failed"] = gr.failed
        finally:
            self.free_reqs(reqs)
            self.runner.cuda_graph_runner = self.graph_runner
            streams.set_enabled(True)
            streams.max_tokens = bound
        return row


def active_bytes(model: torch.nn.Module, mc, n_tokens: int) -> dict[str, float]:
    """Weight bytes one decode step must read, in the format the weights are held in (FP8 / FP4
    bytes plus their scales when quantized): everything but the embedding table, the hash-routing
    table and the routed experts a batch of ``n_tokens`` does not touch (expected distinct experts
    per layer ``E (1 - (1 - k/E)^n)`` for uniform routing)."""
    hf = mc.hf
    E, k = hf.n_routed_experts, hf.num_experts_per_tok
    total = exp = emb = 0
    for name, p in model.state_dict().items():
        if name.endswith("tid2eid"):
            continue
        b = p.numel() * p.element_size()
        total += b
        if ".experts." in name:
            exp += b
        elif "embed_tokens" in name:
            emb += b
    touched = E * (1 - (1 - k / E) ** n_tokens)
    active = total - emb - exp * (1 - touched / E)
    return {"active_gb": active / 1e9, "experts_touched_per_layer": touched}
