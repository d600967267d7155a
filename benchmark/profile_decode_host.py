"""Where a served decode step's time goes at batch sizes 1 / 16 / 32: the scheduler loop as the
server runs it (CUDA graphs, overlap on and off), without HTTP.

Under ``bench_serving`` (flash-8l-32e, 1k in / 512 out) the server's pure decode steps (its log's
generation throughput with nothing prefilling) took about the model runner's step at batch 1 but
~1.5x it at 16 and 32 (``benchmark/RESULTS.md``): time that grows with the batch outside the CUDA
graph. This drives :class:`~sglang_v4.managers.scheduler.Scheduler` directly with ``--batch-sizes``
requests of ``--input-len`` random tokens each, greedy, decoding together, and for each batch size
and overlap on / off reports per decode step (median over ``--steps`` steps after a warm-up):

* ``step ms``: wall time of ``Scheduler.step`` (the loop's period: with overlap the device runs
  behind, so this is the rate the loop sustains);
* host ms inside the scheduler's parts (``get_next_batch``, ``_launch``, ``_resolve`` (the wait for
  the result and its processing), ``process_batch_result``, ``stream_output``) and the worker's
  (``ForwardBatchBuilder.build``, ``ModelRunner.forward`` (metadata, input copies, graph replay
  launch), ``TpModelWorker.forward_batch_generation`` (forward + sampling + host copies));
* ``device ms``: CUDA-event time of the same steps with overlap off (each step waits for its
  result, so the events bracket one step's device work plus its launch gaps);

and writes the top functions of ``--cprofile-steps`` steps (overlap off, the largest batch) by
own and cumulative host time. Outputs ``DIR/profile_decode_host.md``.

Usage: ``python benchmark/profile_decode_host.py --out DIR`` (GPU, flash-8l-32e, dummy bf16);
``--dry``: CPU, the tiny preset, small sizes (checks the plumbing).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _targets() -> dict[str, tuple[type, str]]:
    from sglang_v4.managers.scheduler import Scheduler
    from sglang_v4.managers.tp_worker import TpModelWorker
    from sglang_v4.model_executor.forward_batch import ForwardBatchBuilder
    from sglang_v4.model_executor.model_runner import ModelRunner

    return {
        "get_next_batch": (Scheduler, "get_next_batch"),
        "_launch": (Scheduler, "_launch"),
        "_resolve (wait + process)": (Scheduler, "_resolve"),
        "process_batch_result": (Scheduler, "process_batch_result"),
        "stream_output": (Scheduler, "stream_output"),
        "ForwardBatchBuilder.build": (ForwardBatchBuilder, "build"),
        "ModelRunner.forward": (ModelRunner, "forward"),
        "worker (forward + sample)": (TpModelWorker, "forward_batch_generation"),
    }


def _scheduler(a: argparse.Namespace, overlap: bool) -> Any:
    from longctx import make_model_dir
    from sglang_v4.managers.scheduler import Scheduler
    from sglang_v4.server_args import ServerArgs

    return Scheduler(
        ServerArgs(
            model_path=make_model_dir(a.preset),
            load_format="dummy",
            device=a.device,
            dtype="float32" if a.dry else "bfloat16",
            context_length=a.input_len + a.steps * 4 + 4096,
            max_running_requests=max(a.batch_sizes),
            cuda_graph_max_bs=max(a.batch_sizes),
            skip_warmup=True,
            disable_overlap_schedule=not overlap,
            disable_radix_cache=True,
            **({"max_total_tokens": 64 * 1024} if a.dry else {}),
        )
    )


def _add(s: Any, bs: int, a: argparse.Namespace, tag: str) -> None:
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
    from sglang_v4.sampling.sampling_params import SamplingParams

    vocab = s.runner.mc.hf.vocab_size
    g = torch.Generator().manual_seed(bs)
    for i in range(bs):
        ids = torch.randint(10, vocab - 1, (a.input_len,), generator=g).tolist()
        sp = SamplingParams.from_dict({"max_new_tokens": 10**6, "temperature": 0, "ignore_eos": True})
        sp.normalize(None)
        s.add_request(TokenizedGenerateReqInput(rid=f"{tag}{bs}-{i}", input_text=None, input_ids=ids,
                                                sampling_params=sp))  # fmt: skip


def _drain(s: Any) -> None:
    for r in list(s.running) + list(s.waiting):
        s.abort_request(r.rid)
    for _ in range(1000):
        if not s.has_work():
            return
        s.step()


def measure(s: Any, bs: int, a: argparse.Namespace, overlap: bool, sync: Any) -> dict[str, float]:
    """Median per-step milliseconds of ``a.steps`` decode steps of ``bs`` requests (module
    docstring)."""
    from profile_step import MethodTimers

    _add(s, bs, a, "o" if overlap else "n")
    while s.waiting or any(not r.output_ids for r in s.running):
        s.step()
    for _ in range(a.warmup_steps):
        s.step()
    sync()
    walls: list[float] = []
    parts: list[dict[str, float]] = []
    dev: list[float] = []
    for _ in range(a.steps):
        ev = None
        if a.device == "cuda" and not overlap:
            ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ev[0].record()
        with MethodTimers(_targets()) as mt:
            t = time.perf_counter()
            s.step()
            walls.append((time.perf_counter() - t) * 1e3)
        if ev is not None:
            ev[1].record()
            ev[1].synchronize()
            dev.append(ev[0].elapsed_time(ev[1]))
        parts.append({k: v * 1e3 for k, v in mt.seconds.items()})
    sync()
    row = {"step ms": statistics.median(walls)}
    # with overlap the worker's calls run on its thread, across steps: timed with overlap off only
    worker = ("ForwardBatchBuilder.build", "ModelRunner.forward", "worker (forward + sample)")
    row |= {k: statistics.median(p[k] for p in parts) for k in parts[0] if not (overlap and k in worker)}
    row["min tokens out"] = min(len(r.output_ids) for r in s.running)
    if dev:
        row["device ms"] = statistics.median(dev)
    _drain(s)
    return row


def cprofile_rows(s: Any, bs: int, a: argparse.Namespace, top: int = 30) -> list[str]:
    from profile_step import cprofile_tables

    _add(s, bs, a, "p")
    while s.waiting or any(not r.output_ids for r in s.running):
        s.step()
    for _ in range(a.warmup_steps):
        s.step()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(a.cprofile_steps):
        s.step()
    pr.disable()
    _drain(s)
    return cprofile_tables(pr, f"batch {bs}, overlap off", steps=a.cprofile_steps, top=top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="CPU, tiny preset, small sizes")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=None)
    ap.add_argument("--input-len", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--warmup-steps", type=int, default=None)
    ap.add_argument("--cprofile-steps", type=int, default=None)
    ap.add_argument("--preset", default=None)
    a = ap.parse_args(argv)
    dry = a.dry
    for k, v in dict(batch_sizes=[1, 4] if dry else [1, 16, 32], input_len=32 if dry else 1024,
                     steps=4 if dry else 40, warmup_steps=2 if dry else 10, cprofile_steps=2 if dry else 10,
                     preset="tiny" if dry else "flash-8l-32e").items():  # fmt: skip
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.device = "cpu" if dry else "cuda"
    if dry:
        torch.set_num_threads(1)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    os.makedirs(a.out, exist_ok=True)
    lines = [f"# A served decode step's host time (`benchmark/profile_decode_host.py`, {a.preset}, "
             f"{a.input_len} tokens in, median of {a.steps} steps)", ""]  # fmt: skip
    table: list[tuple[int, bool, dict[str, float]]] = []
    for overlap in (True, False):
        s = _scheduler(a, overlap)
        for bs in a.batch_sizes:
            table.append((bs, overlap, measure(s, bs, a, overlap, sync)))
            print(bs, overlap, table[-1][2], flush=True)
        if not overlap:
            prof = cprofile_rows(s, max(a.batch_sizes), a)
        s.worker_client.shutdown()
        del s
    cols = list(dict.fromkeys(k for _, _, r in table for k in r))
    lines += ["| batch | overlap | " + " | ".join(cols) + " |", "|---:|---|" + "---:|" * len(cols)]
    for bs, ov, r in table:
        lines.append(f"| {bs} | {'on' if ov else 'off'} | " + " | ".join(
            f"{r[c]:.3f}" if c in r else "-" for c in cols) + " |")  # fmt: skip
    text = "\n".join(lines + prof) + "\n"
    with open(os.path.join(a.out, "profile_decode_host.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
