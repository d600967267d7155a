"""JitWatch names what a compile after ready was specialised on (kernel, constexpr values, the
arguments specialised as multiples of 16), driven through Triton's own post-compile hook call
(``JITFunction._call_hook``, what a launch that compiles calls), not a hand-made argument dict.
Triton's own ``repr`` of the arguments came out as ``q_ptr: ()`` on the H200 (Triton 3.6), which
named no shape."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402


@triton.jit
def _probe_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)


def test_compile_after_ready_names_its_specialisation() -> None:
    from sglang_v4.model_executor.warmup import JitWatch
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    prev = knobs.runtime.jit_post_compile_hook
    try:
        watch = JitWatch()
        target = GPUTarget("cuda", 90, 32)
        opts = make_backend(target).parse_options({"num_warps": 4})
        sig = {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
        call = (knobs.runtime.jit_post_compile_hook, ("k", ("*fp32", "i32")), sig, target, 0, {(2,): 128}, opts,
                [{(0,): [["tt.divisibility", 16]]}], False)  # fmt: skip
        _probe_kernel._call_hook(*call)
        assert watch.before_ready == 1 and watch.after_ready == 0
        watch.mark_ready()
        _probe_kernel._call_hook(*call)
        assert watch.after_ready == 1
        line = watch.late[0]
        assert line.startswith("_probe_kernel[num_warps=4")
        assert "'BLOCK': 128" in line and "'x_ptr': [['tt.divisibility', 16]]" in line
    finally:
        knobs.runtime.jit_post_compile_hook = prev
