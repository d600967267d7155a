"""Where the host time of an eager (extend / mixed) step goes.

An in-process ``Scheduler`` (``flash-8l-32e``, dummy bf16 weights, overlap off) prefills prompts of
a few lengths after an untimed warm-up; for each one step is measured three ways:

* wall time of the step (``Scheduler.step``) and the CUDA time of its kernels (``torch.profiler``);
* Triton launches: how many ``JITFunction.run`` calls the step made and the host time spent inside
  them (binding the arguments, the specialisation key, the driver launch);
* the CPU operators with the most self time (torch ops, CUDA runtime / driver calls).

With ``--by-line`` it also writes ``DIR/kernels_by_line.md``: for one eager decode step at batch
sizes 1 and 8 (CUDA graphs off) and one 8-token extend step, every device op (a torch operator that
is not a view, counted by a ``TorchDispatchMode``) and every Triton launch, attributed to the line
of ``sglang_v4`` / ``sgl_kernel_v4`` code that issued it: the inventory behind "fewer kernels per
layer".

Usage: ``python benchmark/profile_step.py --out DIR [--lens 8,129,2048] [--by-line] [--dry]`` writes
``DIR/profile_step.md``. ``--dry``: CPU, the tiny preset (checks the script; timings mean nothing).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class LaunchCounter:
    """Counts ``triton.runtime.jit.JITFunction.run`` calls and the host seconds spent in them
    while active (a context manager)."""

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self.by_kernel: dict[str, list[float]] = {}

    def __enter__(self) -> LaunchCounter:
        try:
            from triton.runtime.jit import JITFunction
        except ImportError:  # no triton: nothing to count
            self._orig = None
            return self
        self._cls, self._orig = JITFunction, JITFunction.run
        counter = self

        def run(fn: Any, *args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return counter._orig(fn, *args, **kw)
            finally:
                dt = time.perf_counter() - t
                counter.calls += 1
                counter.seconds += dt
                row = counter.by_kernel.setdefault(fn.fn.__name__, [0, 0.0])
                row[0] += 1
                row[1] += dt

        JITFunction.run = run  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._orig is not None:
            self._cls.run = self._orig  # type: ignore[method-assign]


class OpsByLine:
    """Counts device ops per issuing source line while active (a context manager).

    A torch operator counts when it is not a view / metadata op (``OpOverload.is_view`` and the
    ``aten.detach`` / ``aten._to_copy``-free list below); a Triton launch counts once
    (``JITFunction.run``). Each is attributed to the innermost stack frame whose file lies in
    ``sglang_v4`` or ``sgl_kernel_v4``; ``by_line`` maps ``"file.py:LINE (function)"`` to
    ``[torch ops, Triton launches, {op name: count}]``.
    """

    _FREE = {"aten.detach", "aten.alias", "aten.lift_fresh", "aten.empty", "aten.empty_strided",
             "aten.empty_like", "aten.set_", "aten.resize_", "aten.is_nonzero", "aten._local_scalar_dense",
             "aten.sym_size", "aten.sym_stride", "aten.sym_numel"}  # fmt: skip

    def __init__(self) -> None:
        self.by_line: dict[str, list[Any]] = {}

    @staticmethod
    def _site() -> str:
        import traceback

        for fr in reversed(traceback.extract_stack()[:-2]):
            f = fr.filename.replace("\\", "/")
            if "/sglang_v4/" in f or "/sgl_kernel_v4/" in f:
                tail = (
                    f.split("/sglang_v4/")[-1]
                    if "/sglang_v4/" in f
                    else "k:" + f.split("/sgl_kernel_v4/")[-1]
                )
                return f"{tail}:{fr.lineno} ({fr.name})"
        return "(outside)"

    def _count(self, col: int, name: str) -> None:
        row = self.by_line.setdefault(self._site(), [0, 0, {}])
        row[col] += 1
        row[2][name] = row[2].get(name, 0) + 1

    def __enter__(self) -> OpsByLine:
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                name = str(func.overloadpacket).replace("aten::", "aten.")
                if not func.is_view and name not in OpsByLine._FREE:
                    counter._count(0, name)
                return func(*args, **(kwargs or {}))

        self._mode = _Mode()
        self._mode.__enter__()
        try:
            from triton.runtime.jit import JITFunction
        except ImportError:
            self._orig = None
            return self
        self._cls, self._orig = JITFunction, JITFunction.run

        def run(fn: Any, *args: Any, **kw: Any) -> Any:
            counter._count(1, fn.fn.__name__)
            return counter._orig(fn, *args, **kw)

        JITFunction.run = run  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._orig is not None:
            self._cls.run = self._orig  # type: ignore[method-assign]
        self._mode.__exit__(*exc)

    def table(self, title: str, top: int = 60) -> list[str]:
        """Markdown lines: totals, then the ``top`` lines by device ops."""
        tot_t = sum(r[0] for r in self.by_line.values())
        tot_k = sum(r[1] for r in self.by_line.values())
        out = ["", f"## {title}: {tot_t} torch ops + {tot_k} Triton launches", "",
               "| source line | torch ops | Triton | ops |", "|---|---:|---:|---|"]  # fmt: skip
        rows = sorted(self.by_line.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]
        for site, (t, k, names) in rows:
            ops = ", ".join(
                f"{n.replace('aten.', '')} {c}" for n, c in sorted(names.items(), key=lambda x: -x[1])[:6]
            )
            out.append(f"| {site} | {t} | {k} | {ops} |")
        return out


class MethodTimers:
    """Host seconds spent inside given methods while active (a context manager; re-entrant calls
    count once). ``targets``: ``{label: (class, method name)}``; ``seconds[label]`` after exit."""

    def __init__(self, targets: dict[str, tuple[type, str]]) -> None:
        self.targets = targets
        self.seconds = {k: 0.0 for k in targets}
        self._saved: list[tuple[type, str, Any]] = []

    def __enter__(self) -> MethodTimers:
        for label, (cls, name) in self.targets.items():
            orig = getattr(cls, name)
            self._saved.append((cls, name, orig))

            def wrap(*a: Any, _o: Any = orig, _l: str = label, **k: Any) -> Any:
                t = time.perf_counter()
                try:
                    return _o(*a, **k)
                finally:
                    self.seconds[_l] += time.perf_counter() - t

            setattr(cls, name, wrap)
        return self

    def __exit__(self, *exc: Any) -> None:
        for cls, name, orig in reversed(self._saved):
            setattr(cls, name, orig)


def host_breakdown(s: Any, ids: list[int], rid: str, sync: Any) -> dict[str, float]:
    """Milliseconds of one extend step of ``ids`` without the profiler: the whole step (to the
    device's completion), and host time inside the batch metadata build, the model forward call
    (launches only) and sampling."""
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
    from sglang_v4.managers.tp_worker import TpModelWorker
    from sglang_v4.model_executor.forward_batch import ForwardBatchBuilder
    from sglang_v4.model_executor.model_runner import ModelRunner
    from sglang_v4.sampling.sampling_params import SamplingParams

    sp = SamplingParams.from_dict({"max_new_tokens": 1, "temperature": 0, "ignore_eos": True})
    sp.normalize(None)
    s.add_request(TokenizedGenerateReqInput(rid=rid, input_text=None, input_ids=ids, sampling_params=sp))
    sync()
    targets = {
        "metadata": (ForwardBatchBuilder, "metadata"),
        "build": (ForwardBatchBuilder, "build"),
        "runner.forward": (ModelRunner, "forward"),
        "worker (forward+sample)": (TpModelWorker, "forward_batch_generation"),
    }
    with MethodTimers(targets) as mt:
        t = time.perf_counter()
        s.step()
        sync()
        wall = time.perf_counter() - t
    while s.has_work():
        s.step()
    return {"step wall": wall * 1e3, **{k: v * 1e3 for k, v in mt.seconds.items()}}


def cprofile_tables(pr: Any, heading: str, steps: int = 1, top: int = 35) -> list[str]:
    """Markdown tables of the functions in ``pr`` (a stopped ``cProfile.Profile``) with the most own
    (``tottime``) and cumulative host milliseconds, per step over ``steps`` steps; ``heading``
    starts each table's title (``"{heading}: functions by own host ms ..."``)."""
    import pstats

    rows = []
    for (f, line, name), (_cc, nc, tt, ct, _callers) in pstats.Stats(pr).stats.items():  # type: ignore[attr-defined]
        short = f.split("/python/")[-1].split("/sgl-kernel-v4/")[-1].split("site-packages/")[-1]
        rows.append((f"{short}:{line} ({name})", nc / steps, tt * 1e3 / steps, ct * 1e3 / steps))
    per = " per step" if steps > 1 else ""
    calls = "calls / step" if steps > 1 else "calls"
    out = [""]
    for key, title in ((2, "own"), (3, "cumulative")):
        out += [f"## {heading}: functions by {title} host ms{per} (cProfile)", "",
                f"| function | {calls} | own ms | cumulative ms |", "|---|---:|---:|---:|"]  # fmt: skip
        cf, mf = (".1f", ".3f") if steps > 1 else (".0f", ".2f")
        out += [f"| {r[0][:90]} | {r[1]:{cf}} | {r[2]:{mf}} | {r[3]:{mf}} |"
                for r in sorted(rows, key=lambda r: -r[key])[:top]]  # fmt: skip
        out.append("")
    return out


def cprofile_step(s: Any, ids: list[int], rid: str, sync: Any, top: int = 35) -> list[str]:
    """One more extend step of ``ids`` under ``cProfile``: markdown rows of the functions with the
    most own (``tottime``) and cumulative host milliseconds."""
    import cProfile

    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
    from sglang_v4.sampling.sampling_params import SamplingParams

    sp = SamplingParams.from_dict({"max_new_tokens": 1, "temperature": 0, "ignore_eos": True})
    sp.normalize(None)
    s.add_request(TokenizedGenerateReqInput(rid=rid, input_text=None, input_ids=ids, sampling_params=sp))
    sync()
    pr = cProfile.Profile()
    pr.enable()
    s.step()
    sync()
    pr.disable()
    while s.has_work():
        s.step()
    return cprofile_tables(pr, f"{len(ids)} tokens", top=top)


def decode_kernel_times(s: Any, sync: Any, bs: int, top: int = 40) -> list[str]:
    """One more eager decode step under ``torch.profiler``: its CUDA kernels by device time
    (markdown lines; the eager kernels are the ones a CUDA-graph replay runs)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        s.step()
        sync()
    kern = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    tot = sum(e.device_time_total for e in kern)
    n = sum(e.count for e in kern)
    out = ["", f"## decode step, batch size {bs}: {n} CUDA kernels, {tot / 1e3:.3f} ms of device time", "",
           "| kernel | calls | total us | us per call |", "|---|---:|---:|---:|"]  # fmt: skip
    for e in sorted(kern, key=lambda e: -e.device_time_total)[:top]:
        out.append(
            f"| {e.key[:80]} | {e.count} | {e.device_time_total:.1f} | {e.device_time_total / e.count:.2f} |"
        )
    return out


def by_line_report(
    sa_kwargs: dict[str, Any], dev: str, decode_bs: tuple[int, ...] = (1, 8), decode_ctx: int = 64
) -> list[str]:
    """Per-source-line device-op inventory of an eager decode step (batch sizes ``decode_bs``, each
    request ``decode_ctx`` tokens into its context) and an 8-token extend step on a fresh scheduler
    with CUDA graphs off. Returns markdown lines."""
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
    from sglang_v4.managers.scheduler import Scheduler
    from sglang_v4.sampling.sampling_params import SamplingParams
    from sglang_v4.server_args import ServerArgs

    s = Scheduler(ServerArgs(**{**sa_kwargs, "disable_cuda_graph": True}))
    vocab = s.runner.mc.hf.vocab_size
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    lines: list[str] = ["# Device ops by source line (`benchmark/profile_step.py --by-line`)"]

    def add(rid: str, n: int, new: int) -> None:
        ids = torch.randint(
            10, vocab - 1, (n,), generator=torch.Generator().manual_seed(hash(rid) % 1000)
        ).tolist()
        sp = SamplingParams.from_dict({"max_new_tokens": new, "temperature": 0, "ignore_eos": True})
        sp.normalize(None)
        s.add_request(TokenizedGenerateReqInput(rid=rid, input_text=None, input_ids=ids, sampling_params=sp))

    for bs in decode_bs:
        for rep in range(2):  # the first round compiles; the second is counted
            for i in range(bs):
                add(f"d{bs}-{rep}-{i}", decode_ctx + i, 6)
            s.step()  # the extend step
            sync()
            s.step()  # a first decode step (compiles)
            sync()
            if rep == 1:
                with OpsByLine() as c:
                    s.step()
                    sync()
                lines += c.table(f"decode step, batch size {bs}")
                if dev == "cuda":
                    lines += decode_kernel_times(s, sync, bs)
            while s.has_work():
                s.step()
    add("e-warm", 8, 1)
    while s.has_work():
        s.step()
    add("e", 8, 1)
    with OpsByLine() as c:
        s.step()
        sync()
    lines += c.table("extend step, 8 prompt tokens")
    while s.has_work():
        s.step()
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true")
    ap.add_argument("--lens", default="8,129,2048")
    ap.add_argument("--by-line", action="store_true", help="also write kernels_by_line.md")
    ap.add_argument("--cprofile", action="store_true", help="add the step's Python functions by host time")
    ap.add_argument("--kv-cache-dtype", default="auto", help="as the server flag (e.g. fp8_e4m3)")
    ap.add_argument("--enable-fp4-indexer", action="store_true")
    ap.add_argument("--decode-bs", default="1,8", help="--by-line: decode batch sizes")
    ap.add_argument("--decode-ctx", type=int, default=64, help="--by-line: decode context (tokens)")
    ap.add_argument("--preset", default="flash-8l-32e")
    a = ap.parse_args()
    decode_bs = tuple(int(x) for x in a.decode_bs.split(",") if x)
    os.makedirs(a.out, exist_ok=True)
    from longctx import make_model_dir, warm_up
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
    from sglang_v4.managers.scheduler import Scheduler
    from sglang_v4.sampling.sampling_params import SamplingParams
    from sglang_v4.server_args import ServerArgs

    dev = "cpu" if a.dry else "cuda"
    sa_kwargs: dict[str, Any] = dict(
        model_path=make_model_dir("tiny" if a.dry else a.preset),
        load_format="dummy",
        device=dev,
        dtype="float32" if a.dry else "bfloat16",
        context_length=4096 if a.dry else 1 << 17,
        max_running_requests=max(8, *decode_bs),
        cuda_graph_max_bs=max(8, *decode_bs),
        skip_warmup=True,
        disable_overlap_schedule=True,
        disable_radix_cache=True,
        kv_cache_dtype=a.kv_cache_dtype,
        enable_fp4_indexer=a.enable_fp4_indexer,
        # each length is one step (a longer prompt than the chunk would measure its first chunk)
        chunked_prefill_size=max([2048, *(int(x) for x in a.lens.split(",") if x)]),
        **({"max_total_tokens": 40000} if a.dry else {}),
    )
    if a.by_line:
        text = "\n".join(by_line_report(sa_kwargs, dev, decode_bs, a.decode_ctx)) + "\n"
        with open(os.path.join(a.out, "kernels_by_line.md"), "w", encoding="utf-8") as f:
            f.write(text)
        print(text)
        if dev == "cuda":
            torch.cuda.empty_cache()
    s = Scheduler(ServerArgs(**sa_kwargs))
    vocab = s.runner.mc.hf.vocab_size
    warm_up(s, vocab, 256 if a.dry else 2048, 2)
    lines = ["# Host time of one eager extend step (`benchmark/profile_step.py`)", ""]
    lines += ["| prompt tokens | step wall ms | CUDA kernel ms | kernels | Triton launches | ms in Triton launch |",
              "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    details: list[str] = []
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    for i, n in enumerate(int(x) for x in a.lens.split(",") if x):
        ids = torch.randint(10, vocab - 1, (n,), generator=torch.Generator().manual_seed(7 + i)).tolist()
        for rep in range(2):  # the first step of a length may compile; the second is measured
            sp = SamplingParams.from_dict({"max_new_tokens": 1, "temperature": 0, "ignore_eos": True})
            sp.normalize(None)
            s.add_request(TokenizedGenerateReqInput(rid=f"p{n}-{rep}", input_text=None, input_ids=ids,
                                                    sampling_params=sp))  # fmt: skip
            sync()
            if rep == 0:
                while s.has_work():
                    s.step()
                sync()
                continue
            with torch.profiler.profile() as prof, LaunchCounter() as lc:
                t = time.perf_counter()
                s.step()
                sync()
                wall = time.perf_counter() - t
            while s.has_work():
                s.step()
            # the same step again (radix cache off: the same work), timed without the profiler
            hb = host_breakdown(s, ids, f"h{n}", sync)
            details += ["", f"## {n} tokens: host ms without the profiler", "", "| part | ms |", "|---|---:|"]
            details += [f"| {k} | {v:.2f} |" for k, v in hb.items()]
            if a.cprofile:
                details += cprofile_step(s, ids, f"c{n}", sync)
            avg = prof.key_averages()
            kern = [e for e in avg if e.device_type == torch.autograd.DeviceType.CUDA]
            k_ms = sum(e.device_time_total for e in kern) / 1e3
            k_n = sum(e.count for e in kern)
            lines.append(
                f"| {n} | {wall * 1e3:.1f} | {k_ms:.2f} | {k_n} | {lc.calls} | {lc.seconds * 1e3:.1f} |"
            )
            cpu = sorted((e for e in avg if e.device_type == torch.autograd.DeviceType.CPU),
                         key=lambda e: -e.self_cpu_time_total)[:15]  # fmt: skip
            details += ["", f"## {n} tokens: CPU operators by self time", "", "| op | calls | self ms |",
                        "|---|---:|---:|"]  # fmt: skip
            details += [f"| {e.key[:60]} | {e.count} | {e.self_cpu_time_total / 1e3:.2f} |" for e in cpu]
            details += ["", f"## {n} tokens: CUDA kernels by device time", "",
                        "| kernel | calls | total us | share |", "|---|---:|---:|---:|"]  # fmt: skip
            for e in sorted(kern, key=lambda e: -e.device_time_total)[:25]:
                share = e.device_time_total / max(1e-9, k_ms * 1e3)
                details.append(f"| {e.key[:80]} | {e.count} | {e.device_time_total:.1f} | {share:.1%} |")
            top = sorted(lc.by_kernel.items(), key=lambda kv: -kv[1][1])[:12]
            details += ["", f"## {n} tokens: Triton launches by host time", "", "| kernel | calls | ms |",
                        "|---|---:|---:|"]  # fmt: skip
            details += [f"| {k} | {c} | {sec * 1e3:.2f} |" for k, (c, sec) in top]
    text = "\n".join(lines + details) + "\n"
    with open(os.path.join(a.out, "profile_step.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
