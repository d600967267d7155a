"""Start-up warm-up: compile every kernel variant serving will hit before the server is ready.

A Triton kernel is compiled once per *specialisation*: its ``tl.constexpr`` arguments (tile sizes
and flags the wrappers pick from shapes) and, for every plain integer argument, whether it equals
1 or is a multiple of 16. What the wrappers of ``sgl_kernel_v4.triton`` pick from shapes:

==================  ==============================================================================
kernel              specialises on
==================  ==============================================================================
sparse attention    ``T`` (tokens): head block 16 / 64 (``T >= 128``), key tile 16 (``T <= 4``) /
                    64 / 32 (``T >= 128``); one split or several (the split count itself is a
                    runtime argument); one or two key sources (sliding window only, or with CSA /
                    HCA entries)
indexer             tokens per scoring program (1 up to 256 tokens, 2 above); split counts,
                    scratch-block offsets and candidate counts are runtime arguments and the
                    scratch rows are padded to 64 entries, so contexts add no variant
fused MoE           tiles by pairs per local expert ``T * top_k / E`` (bf16: <= 16, <= 64, more;
                    FP4: pair mode up to ``max(top_k, E / 4)`` pairs, then <= 16, <= 32, <= 96,
                    more): boundaries that move with ``E``, so the grid adds the first token count
                    of each class (:func:`moe_token_counts`); pair counts are runtime arguments;
                    the align sort by pairs (at least 256, then powers of two up to 4,096)
mHC, norms, RoPE,   the row count ``T`` (and ``B`` for the compressor) as integers; the mHC
compressor          projection tile by ``T`` (16 tokens per program, 128 from 1,024 tokens off the
                    decode path: ``PREFILL_MIX_MIN_T``)
==================  ==============================================================================

So the variants are a product of token-count classes and context classes. :func:`warmup_kernels`
runs one dummy forward per point of that grid (token counts 1..``--chunked-prefill-size`` across
every class boundary, each with an odd twin; contexts at every power of two up to what the pool
can hold (at most :data:`WARMUP_MAX_CONTEXT`), each with an odd twin; decode batches of several
requests and a mixed batch), runs the long-prefill attention paths once per tile class up to the
server's longest request (:mod:`sglang_v4.model_executor.warmup_long_context`: the dense HCA path's
tiles follow the entry count; synthetic calls, no long-context forward), captures the decode and
extend CUDA graphs (``--cuda-graph-warmup-ctx``), and runs the sampler once per path (greedy,
top-k / top-p / min-p, penalties, logprobs). Dummy forwards use pages and a request slot taken
from the pool and returned (nothing else exists yet), so no real request's state is touched.

``test/test_kernels_specialisation.py`` sweeps decode and extend shapes through the attention,
indexer, mHC and MoE wrappers and bounds the variants each compiles, so a new shape-dependent
constexpr or integer specialisation shows up on the CPU. What the grid misses shows up at run time: :class:`JitWatch` counts Triton compiles through
Triton's post-compile hook and, once the server is ready, logs each further compile with the
kernel's specialisation (``get_server_info()["jit"]``). The device benchmark reports that count.

On CPU nothing is compiled (the torch references run), so the warm-up returns at once: it must stay
cheap, every server test pays it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

import torch

from sglang_v4.model_executor.forward_batch_info import ReqForwardInput
from sglang_v4.server_args import ServerArgs

logger = logging.getLogger(__name__)

#: Token counts of the dummy forwards (capped by the chunk size): every class boundary of the table
#: in the module docstring and an odd twin of each.
WARMUP_TOKEN_COUNTS = (
    1,
    2,
    3,
    4,
    5,
    8,
    16,
    17,
    31,
    48,
    63,
    64,
    65,
    96,
    127,
    128,
    129,
    256,
    257,
    384,
    512,
    1024,
    1025,
)


def describe_compile(hook_kwargs: dict[str, Any]) -> str:
    """One line naming a compile from the arguments of Triton's post-compile hook: the kernel, its
    options and what it was specialised on (constexpr values and the integer / pointer arguments
    specialised as multiples of 16 or as 1), so a compile after ready says which shape caused it.
    Falls back to Triton's own ``repr``; at most 800 characters."""
    fn = hook_kwargs.get("fn")
    comp = hook_kwargs.get("compile") or {}
    name = getattr(fn, "name", None)
    if name is None or not isinstance(comp, dict):
        return str(hook_kwargs.get("repr", "?"))[:800]
    params = [getattr(p, "name", "?") for p in getattr(getattr(fn, "jit_function", None), "params", [])]

    def arg(path: Any) -> str:  # Triton keys arguments by index paths: (2,) -> the third parameter
        i = path[0] if isinstance(path, tuple) and path else path
        return params[i] if isinstance(i, int) and i < len(params) else str(path)

    consts = {arg(k): v for k, v in (comp.get("constants") or {}).items()}
    configs = comp.get("configs") or [{}]
    spec = {arg(k): v for k, v in (configs[0] or {}).items()} if configs else {}
    text = (
        f"{name}[num_warps={comp.get('num_warps')}, num_stages={comp.get('num_stages')}] "
        f"constexprs={consts} specialised={spec}"
    )
    return text[:800]


class JitWatch:
    """Counts Triton compiles (``triton.knobs.runtime.jit_post_compile_hook``), chaining any hook
    already installed. After :meth:`mark_ready` every compile is logged as a warning.

    Attributes:
        before_ready / after_ready: compile counts.
        late: ``repr`` of the kernels compiled after ready (at most 64 kept).
    """

    def __init__(self) -> None:
        self.before_ready = 0
        self.after_ready = 0
        self.late: list[str] = []
        self.ready = False
        self.installed = False
        try:
            from triton import knobs
        except Exception:  # noqa: BLE001 - no Triton: nothing compiles
            return
        prev = knobs.runtime.jit_post_compile_hook

        def hook(*args: Any, **kwargs: Any) -> Any:
            self._count(describe_compile(kwargs))
            return prev(*args, **kwargs) if prev is not None else None

        knobs.runtime.jit_post_compile_hook = hook
        self.installed = True

    def _count(self, what: str) -> None:
        if not self.ready:
            self.before_ready += 1
            return
        self.after_ready += 1
        if len(self.late) < 64:
            self.late.append(what)
        logger.warning("Triton compile after ready (%d so far): %s", self.after_ready, what)

    def mark_ready(self) -> None:
        """The server is ready: compiles from now on are counted as late and logged."""
        self.ready = True

    def info(self) -> dict[str, Any]:
        """``{"watching", "compiles_before_ready", "compiles_after_ready", "late"}``."""
        return {
            "watching": self.installed,
            "compiles_before_ready": self.before_ready,
            "compiles_after_ready": self.after_ready,
            "late": list(self.late),
        }


class _DummyReqs:
    """Request slots and pages borrowed from the pool for dummy forwards, returned by :meth:`free`.
    The requests of one dummy batch share their pages (their KV writes are garbage nobody reads)."""

    def __init__(self, runner: Any) -> None:
        self.pool = runner.pool
        self.ps = runner.page_size
        self.window = runner.mc.sliding_window
        self.slots: list[int] = []
        self.blocks: list[int] = []
        self.windows: list[int] = []

    def make(self, bs: int, n_tokens: int, ctx: int, vocab: int) -> list[ReqForwardInput] | None:
        """``bs`` requests each extending ``n_tokens`` tokens up to position ``ctx`` (None when the
        pool is short of slots or pages)."""
        pool, W = self.pool, self.window
        start = ctx - n_tokens
        lo = max(0, (start - W + 1) // W)
        spans = list(range(lo, (ctx - 1) // W + 1))
        blocks = pool.block_alloc.alloc(-(-ctx // self.ps))
        wins = pool.window_alloc.alloc(len(spans))
        self.blocks += blocks or []
        self.windows += wins or []
        if blocks is None or wins is None or pool.req_slots.available < bs:
            return None
        out = []
        ids = [(7 * i + 3) % vocab for i in range(n_tokens)]
        for _ in range(bs):
            slot = pool.req_slots.alloc()
            self.slots.append(slot)
            pool.reset_req_state(slot)
            out.append(ReqForwardInput(slot, ids, start, blocks, dict(zip(spans, wins)), n_tokens - 1))
        return out

    def free(self) -> None:
        for s in self.slots:
            self.pool.reset_req_state(s)
            self.pool.req_slots.free(s)
        self.pool.block_alloc.free(self.blocks)
        self.pool.window_alloc.free(self.windows)
        self.slots, self.blocks, self.windows = [], [], []


#: Largest context of the dummy forwards. The paged kernels' specialisations stop depending on the
#: context well below it: the attention's split count follows the batch shape and the layer's key
#: capacity (top-k, or the page table's width: constant per server), not the context, and the
#: indexer top-k's block (``next_pow2(C)``, ``C = context // 4``) stops growing at 8,192 / 16,384
#: candidates (contexts of 32k / 64k), the chunked path taking over from there; so the contexts
#: above only add forwards whose cost grows with the context (a warm-up to 1M-token contexts kept
#: an H200 server from being ready within 212 s). The dense HCA path's tiles do follow the context
#: (its entry count): :mod:`sglang_v4.model_executor.warmup_long_context` runs them directly.
WARMUP_MAX_CONTEXT = 131072


def warmup_grid(
    chunk: int, max_ctx: int, window: int, moe_tokens: Iterable[int] = ()
) -> list[tuple[int, int, int]]:
    """The dummy forwards: ``(num_requests, tokens per request, context)`` triples.

    Token counts: :data:`WARMUP_TOKEN_COUNTS` up to ``chunk`` plus ``chunk`` itself; contexts: every
    power of two from ``window`` up to ``max_ctx`` and an odd twin (``+ 5``); decode batches of
    2..64 requests; one request per point otherwise. ``moe_tokens`` (:func:`moe_token_counts`): token
    counts whose MoE tile class depends on the model's expert count, run once each (at the smallest
    context that holds them), since the MoE kernels do not depend on the context.
    """
    tokens = sorted({t for t in WARMUP_TOKEN_COUNTS if t <= chunk} | {chunk})
    ctxs: list[int] = []
    c = window
    while c <= max_ctx:
        ctxs += [c] + ([c + 5] if c + 5 <= max_ctx else [])
        c *= 2
    grid = []
    for ctx in ctxs:
        for t in tokens:
            if t <= ctx:
                grid.append((1, t, ctx))
        for bs in (2, 4, 8, 16, 32, 64):
            grid.append((bs, 1, ctx))
    seen = {t for bs, t, _ in grid if bs == 1}
    for t in sorted(set(moe_tokens)):
        fits = [c for c in ctxs if c >= t]
        if t <= chunk and t not in seen and fits:
            grid.append((1, t, fits[0]))
    return grid


def moe_token_counts(model: torch.nn.Module, top_k: int, max_tokens: int) -> list[int]:
    """Token counts reaching every tile class of the routed-expert GEMMs of ``model``: the classes
    follow the (token, expert) pairs per local expert, so their boundaries move with the expert
    count (160 experts of ``flash-43l``: the 64-row tiles begin at 854 tokens, a count the fixed
    :data:`WARMUP_TOKEN_COUNTS` grid reaches only at 1,024, whose pair count is a multiple of 16:
    before the pair counts were runtime arguments, a 1,032-token step compiled after ready).
    Returns ``[]`` for a model without routed experts."""
    from sgl_kernel_v4.triton.moe_fp4 import tile_class_token_counts

    kinds: set[tuple[int, bool]] = set()  # (local experts, FP4): every MoE layer of a model shares one
    for mod in model.modules():
        w = getattr(mod, "gate_up_proj", None)
        if isinstance(w, torch.Tensor) and w.dim() == 3 and hasattr(mod, "quant"):
            kinds.add((int(w.shape[0]), getattr(mod, "quant", None) == "fp4"))
    out: set[int] = set()
    for n_experts, fp4 in kinds:
        out.update(tile_class_token_counts(n_experts, top_k, max_tokens, fp4))
    return sorted(out)


def _warm_sampler(runner: Any, vocab: int) -> None:
    """Run each sampling path once on random logits (greedy, temperature with top-k / top-p /
    min-p, penalties with a seeded generator, logprobs and their top-k)."""
    from sglang_v4.sampling.sampler import sample, top_logprobs
    from sglang_v4.sampling.sampling_params import SamplingParams

    dev = runner.device
    g = torch.Generator(device=dev).manual_seed(0)
    logits = torch.randn(4, vocab, device=dev, generator=g)
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.7, top_k=20, top_p=0.9),
        SamplingParams(temperature=1.0, top_p=0.8, min_p=0.05),
        SamplingParams(temperature=1.0, repetition_penalty=1.1, frequency_penalty=0.5, presence_penalty=0.5),
    ]
    for p in params:
        p.normalize(None)
    out = sample(logits, params, [[1, 2]] * 4, [[3]] * 4, [None, None, None, g], return_logprobs=True)
    top_logprobs(out[1], 5)  # type: ignore[index]


def _warm_long_context(runner: Any, stats: dict[str, Any]) -> None:
    """The long-prefill paths' tile classes up to the server's longest request
    (:mod:`sglang_v4.model_executor.warmup_long_context`), which the grid's contexts stop short of."""
    from sglang_v4.model_executor.warmup_long_context import model_heads, warmup_long_context

    heads = model_heads(runner.model)
    if heads is None:
        return
    try:
        calls = warmup_long_context(runner.pool, heads, min(runner.context_len, runner.max_total_tokens))
        stats["long_context_calls"] = sum(calls.values())
    except torch.OutOfMemoryError:
        stats["oom"] = stats.get("oom", 0) + 1
        torch.cuda.empty_cache()


def warmup_kernels(
    runner: Any, server_args: ServerArgs, force: bool = False, max_context: int | None = None
) -> dict[str, Any]:
    """Compile before ready (module docstring): dummy forwards over :func:`warmup_grid`, the
    decode and extend CUDA graphs, the sampling paths. Installs the runner's :class:`JitWatch`
    (``runner.jit_info()``).

    Args:
        runner: the model runner (nothing else may use its pool yet).
        server_args: ``cuda_graph_warmup_ctx`` is read (``chunked_prefill_size`` only for a runner
            without its resolved ``chunked_prefill_size``).
        force: run the grid on CPU too (tests; otherwise a no-op there).
        max_context: cap on the contexts of the grid (default: what the context length and the
            pool allow).

    Returns:
        ``{"forwards", "graphs", "seconds", "compiles"}`` (zeros when skipped on CPU), on CUDA also
        ``"long_context_calls"`` (:func:`_warm_long_context`).
    """
    stats: dict[str, Any] = {"forwards": 0, "graphs": 0, "seconds": 0.0, "compiles": 0}
    if runner.device.type != "cuda" and not force:
        return stats
    t0 = time.perf_counter()
    watch = JitWatch()
    runner.jit_info = watch.info
    mc = runner.mc
    vocab = mc.vocab_size
    # the chunk the scheduler serves: the runner's, resolved from ``--chunked-prefill-size`` (``-1``:
    # the context) and lowered to the window reserve and the forward workspace
    chunk = int(getattr(runner, "chunked_prefill_size", 0) or 0)
    if chunk <= 0:
        chunk = int(server_args.chunked_prefill_size or 2048)
        if chunk <= 0:
            chunk = 8192
    max_ctx = min(runner.context_len, runner.max_total_tokens, WARMUP_MAX_CONTEXT) - 1
    if max_context is not None:
        max_ctx = min(max_ctx, max_context)
    dummy = _DummyReqs(runner)
    graphs = runner.cuda_graph_runner
    saved, runner.cuda_graph_runner = graphs, None  # eager forwards: graphs are captured below

    def run(reqs: list[ReqForwardInput] | None) -> None:
        try:
            if reqs:
                runner.forward(reqs)
                stats["forwards"] += 1
        except torch.OutOfMemoryError:
            # serving this shape would fail the same way (and recover); the warm-up goes on
            stats["oom"] = stats.get("oom", 0) + 1
            if runner.device.type == "cuda":
                torch.cuda.empty_cache()
        finally:
            dummy.free()

    try:
        moe_tokens = moe_token_counts(runner.model, int(getattr(mc.hf, "num_experts_per_tok", 0) or 1), chunk)
        for bs, t, ctx in warmup_grid(chunk, max_ctx, mc.sliding_window, moe_tokens):
            run(dummy.make(bs, t, ctx, vocab))
        # a mixed batch: a prompt chunk and decode tokens of other requests
        part = dummy.make(1, min(chunk, 256), 1024, vocab)
        dec = dummy.make(3, 1, 1024, vocab)
        run(part + dec if part and dec else None)
        if runner.device.type == "cuda":
            _warm_long_context(runner, stats)
        _warm_sampler(runner, vocab)
    finally:
        dummy.free()
        runner.cuda_graph_runner = saved
    if graphs is not None and server_args.cuda_graph_warmup_ctx > 0:
        stats["graphs"] = graphs.capture_all()  # decode and extend keys, each serving every context
    if runner.device.type == "cuda":
        torch.cuda.synchronize(runner.device)
    stats["seconds"] = time.perf_counter() - t0
    stats["compiles"] = watch.before_ready
    watch.mark_ready()
    logger.info(
        "Warm-up: %d dummy forwards, %d long-context calls, %d CUDA graphs (decode + extend), "
        "%d Triton compiles in %.1f s",
        stats["forwards"],
        stats.get("long_context_calls", 0),
        stats["graphs"],
        stats["compiles"],
        stats["seconds"],
    )
    return stats
