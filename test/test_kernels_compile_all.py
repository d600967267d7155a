"""Every Triton kernel launch the CPU kernel tests make compiles for Hopper (sm_90).

The CPU tier runs the kernels under ``TRITON_INTERPRET=1`` (numpy), which never calls the
compiler: a kernel can pass there and be refused on the H200 (a non-constexpr module global read
in a jit function, ``tl.multiple_of`` on a constexpr int, a layout or shared-memory demand the
backend rejects). These tests run kernel tests under the interpreter while recording each launch
with Triton's own CUDA launch binder (``kernel_launch_record``), then compile every distinct
(kernel, signature, constexprs, divisibility, options) with ``triton.compile(..., target=
GPUTarget("cuda", 90, 32))`` in a process without the interpreter (ptxas ships with Triton).

- ``test_kernel_launches_compile_for_sm90`` (slow: minutes on a small CPU box, mostly the
  interpreter and ptxas): a representative subset of the kernel
  tests (one or two small cases per kernel family, fp32 as the CPU runs them) plus the bf16
  serving calls of ``test_kernels_vs_ref`` recorded without executing (the interpreter has no
  bf16 ``tl.dot``), so the compiled signatures include the ``*bf16`` ones the GPU sees; also
  checks that every kernel the package launches was recorded, and that the listed serving launches
  (``_SERVING_LAUNCHES``: the indexer's scoring kernels on bf16 queries over each key format, the
  radix selection at the serving cap) are among them.
- ``test_all_cpu_kernel_test_launches_compile`` (slow): every launch of the whole CPU kernel
  test files.
- ``test_launched_kernels_named_where_defined`` (fast): the launched-kernel list names each kernel
  by its defining module, as the records do.
- ``test_checker_fails_on_broken_probe_kernels`` (fast): kernels that run fine under the interpreter
  but that the compiler refuses are reported by the checker (it can fail).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from kernels_compile_testutil import HERE, REPRESENTATIVE, _env, compile_log, record_script

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

KERNEL_PKG = os.path.join(os.path.dirname(HERE), "sgl-kernel-v4", "sgl_kernel_v4", "triton")

KERNEL_TEST_FILES = [
    "test_kernels_attention.py",
    "test_kernels_attention_splits.py",
    "test_kernels_compressor.py",
    "test_kernels_compressor_state.py",
    "test_kernels_fp8_gemm.py",
    "test_kernels_indexer.py",
    "test_kernels_indexer_ties.py",
    "test_kernels_indexer_radix.py",
    "test_kernels_mhc.py",
    "test_kernels_moe.py",
    "test_kernels_moe_align.py",
    "test_kernels_moe_fp4.py",
    "test_kernels_moe_router.py",
    "test_kernels_rope.py",
    "test_kernels_sampling.py",
]

# bf16 serving calls: the ``*_vs_ref`` tests of test_kernels_vs_ref with GPU shapes, recorded dry
# (the kernels do not run, so the comparisons are neutralised; the launches are what counts).
_BF16_DRY = """
import sys, torch
import kernel_launch_record as klr
import test_kernels_vs_ref as v
v.rel_err = lambda a, b: 0.0
with klr.record_launches(dry=True) as recs:
    for name in sorted(n for n in dir(v) if n.startswith("test_") and n.endswith("_vs_ref")):
        torch.manual_seed(0)
        try:
            getattr(v, name)("cpu")
        except AssertionError:
            pass  # outputs are not computed in a dry run
klr.dump(recs, sys.argv[1])
"""

# launches serving makes that the recording must contain (kernel, argument types, constexprs): the
# indexer's decode scoring kernel on bf16 queries over bf16 / fp8 / fp4 keys (codecs 0 / 2 / 3), the
# extend scoring kernel (the default ``indexer.EXTEND_SCORE``) on the same, and the radix selection (fused filter + final,
# and the two-launch radix final) at the serving candidate cap
_SERVING_LAUNCHES = [
    *(
        (f"sgl_kernel_v4.triton.{mod}", {"q_ptr": "*bf16"}, {"CODEC": codec, "DI": 128})
        for mod in ("indexer_score:_score_decode_kernel", "indexer_score_extend:_score_extend_kernel")
        for codec in (0, 2, 3)
    ),
    ("sgl_kernel_v4.triton.indexer_select:_filter_final_kernel", {}, {"CAP": 4096, "BLOCK_K2": 512}),
    ("sgl_kernel_v4.triton.indexer_select:_final_kernel", {}, {"RADIX": True, "CAP": 4096, "BLOCK_K2": 512}),
]


def _matches(rec: dict, fn: str, sig: dict, consts: dict) -> bool:
    """Whether launch record ``rec`` is of kernel ``fn`` with these argument types and constexprs."""
    import kernel_launch_record as klr

    named = klr.named_constexprs(rec)
    return (
        rec["fn"] == fn
        and all(rec["signature"].get(k) == v for k, v in sig.items())
        and all(named.get(k) == v for k, v in consts.items())
    )


def record_pytest(node_ids: list[str], log: str) -> None:
    """Run the given kernel tests under the interpreter, recording their launches to ``log``."""
    env = _env(True)
    env["SGLANG_V4_LAUNCH_LOG"] = log
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "kernel_launch_record"]
    proc = subprocess.run(cmd + node_ids, cwd=HERE, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def launched_kernels() -> set[str]:
    """``module:name`` of every kernel the package launches (``name[grid](...)`` in its source),
    ``module`` being where the kernel is defined (as the launch records name it: a module may
    launch a kernel it imports from another, e.g. ``indexer`` launches ``indexer_select``'s)."""
    import importlib

    out = set()
    for fname in os.listdir(KERNEL_PKG):
        if fname.endswith(".py"):
            with open(os.path.join(KERNEL_PKG, fname), encoding="utf-8") as f:
                src = f.read()
            module = importlib.import_module(f"sgl_kernel_v4.triton.{fname[:-3]}")
            for name in re.findall(r"\b(_\w+_kernel)\[", src):
                fn = getattr(module, name).fn  # JITFunction or InterpretedFunction: the Python function
                out.add(f"{fn.__module__}:{fn.__qualname__}")
    return out


@pytest.mark.slow
def test_kernel_launches_compile_for_sm90(tmp_path) -> None:
    import kernel_launch_record as klr

    log = str(tmp_path / "launches.pkl")
    record_pytest(REPRESENTATIVE, log)
    record_script(_BF16_DRY, log)
    records = klr.load(log)
    recorded = {r["fn"] for r in records}
    assert launched_kernels() - recorded == set(), "kernels never launched by the recorded tests"
    assert any("*bf16" in r["signature"].values() for r in records)
    missing = [want for want in _SERVING_LAUNCHES if not any(_matches(r, *want) for r in records)]
    assert not missing, f"serving launches not recorded: {missing}"
    rc, report = compile_log(log)
    assert rc == 0, report


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the whole interpreted kernel tier, then ~120 cold compiles
def test_all_cpu_kernel_test_launches_compile(tmp_path) -> None:
    log = str(tmp_path / "launches.pkl")
    record_pytest(KERNEL_TEST_FILES, log)
    rc, report = compile_log(log)
    assert rc == 0, report


def test_launched_kernels_named_where_defined() -> None:
    """The kernels the package launches are named by their defining module, as the launch records
    name them: a kernel launched from a module that imports it (the indexer's selection and decode
    scoring kernels) is the same kernel, not one that no test launches."""
    import importlib

    names = launched_kernels()
    assert "sgl_kernel_v4.triton.indexer_select:_keys_from_scores_kernel" in names
    assert "sgl_kernel_v4.triton.indexer_score:_score_decode_kernel" in names
    for name in names:
        module, qualname = name.split(":")
        assert getattr(importlib.import_module(module), qualname).fn.__module__ == module, name


_PROBE = """
import triton
import triton.language as tl

LIMIT = 7  # a plain module global: the interpreter reads it, the compiler refuses it


@triton.jit
def reads_plain_global(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offs + LIMIT, mask=offs < n)


@triton.jit
def multiple_of_constexpr(x_ptr, n, BLOCK: tl.constexpr):
    b = tl.multiple_of(BLOCK, 16)
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offs + b, mask=offs < n)


@triton.jit
def fine(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offs, mask=offs < n)
"""

_PROBE_RUN = """
import sys, torch
import kernel_launch_record as klr
import compile_probe_kernels as p
x = torch.zeros(32, dtype=torch.int32)
with klr.record_launches() as recs:
    for k in (p.reads_plain_global, p.multiple_of_constexpr, p.fine):
        k[(1,)](x, 20, BLOCK=32)
assert x[:20].tolist() == list(range(20)) and x[20:].eq(0).all()  # they all ran in the interpreter
klr.dump(recs, sys.argv[1])
"""


def test_checker_fails_on_broken_probe_kernels(tmp_path, monkeypatch) -> None:
    (tmp_path / "compile_probe_kernels.py").write_text(_PROBE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    log = str(tmp_path / "launches.pkl")
    record_script(_PROBE_RUN, log)
    rc, report = compile_log(log)
    assert rc != 0
    assert "3 distinct launches, 2 failed" in report, report
    failed = set(re.findall(r"^FAIL compile_probe_kernels:(\w+)", report, re.M))
    assert failed == {"reads_plain_global", "multiple_of_constexpr"}, report
