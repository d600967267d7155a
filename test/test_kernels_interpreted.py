"""The Triton kernels' correctness tests, run under the interpreter in the fast tier.

The kernel test files (``test_kernels_*.py``) run on CUDA, or on the CPU only when
``TRITON_INTERPRET=1`` is set before Triton is imported; the test command of README.md does not set
it (it would slow every other test's import), so without this file the fast tier would skip every
kernel-vs-float64 comparison. This test runs a representative case of every kernel family (the
list of ``test_kernels_compile_all.REPRESENTATIVE``) plus the quantized cases (fp8 / fp4 indexer
keys, fp8 attention pools, the KV codec, the FP4 MoE's fp8 product) and the kernels fed
merged-projection column views in a subprocess under the interpreter, and requires them to pass,
not skip.

The run records every launch (``kernel_launch_record``); ``conftest.py`` starts it once, in the
background as soon as the session's tests are collected (the interpreter keeps one core busy for
a minute while the tests before these mostly wait on servers), the session fixture
``interpreted_kernel_tier`` waits for it, and ``test_kernels_entry_alignment`` compiles the
quantized-codec launches of the same recording for sm_90 instead of interpreting those kernel
tests a second time.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess

import pytest
from kernels_compile_testutil import REPRESENTATIVE

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")


def test_kernel_families_match_their_oracles_under_the_interpreter(
    interpreted_kernel_tier: tuple[subprocess.CompletedProcess[str], str],
) -> None:
    proc, _ = interpreted_kernel_tier
    out = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, out
    passed = int(m[1]) if (m := re.search(r"(\d+) passed", proc.stdout)) else 0
    # one skip is expected (a bf16-only attention case); everything else must have run
    assert passed >= len(REPRESENTATIVE) + 4 + 6 + 4, out
