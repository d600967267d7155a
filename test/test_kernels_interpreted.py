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
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from kernels_compile_testutil import HERE, REPRESENTATIVE, _env

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

QUANTIZED = [
    "test_kernels_indexer.py::test_indexer_topk_quantized_keys",
    "test_kernels_attention.py::test_paged_attention_fp8_pools",
    "test_kernels_kv_codec.py",
    "test_kernels_compressor_state.py::test_compress_windows_quantized_pools",
    "test_kernels_moe_fp4_fp8.py::test_fp8_product_vs_float64[shift-pair-fused-dsplit1]",
    "test_kernels_moe_fp4_fp8.py::test_e4m3_decode_every_byte",
    # the opt-in word decodes of the FP8 linear and the FP4 MoE (every e4m3 code through the dot)
    "test_kernels_fp8_gemm.py::test_w8a16_words_every_code_through_the_mma",
    "test_kernels_moe_fp4.py::test_decode_variants_vs_float64[fused_dsplit1_words]",
    # the opt-in indexer scoring form with the head sum as a second dot, two tokens per dot
    "test_kernels_indexer_extend.py::test_extend_topk_exact_with_short_rows[None-keys_wdot_pairs-2-64-4-2-8]",
]
#: the consumers of merged-projection outputs on column views (6 cases)
MERGED_VIEWS = ["test_kernels_merged_views.py"]


@dataclass
class InterpretedTierRun:
    """The interpreted kernel cases running in a pytest subprocess (:func:`start_interpreted_tier`).

    Attributes:
        proc: the subprocess (its stdout and stderr go to files in ``workdir``).
        workdir: the directory of its output files and of the launch recording.
        log: the pickle of recorded launches (``kernel_launch_record.load`` reads it).
    """

    proc: subprocess.Popen[bytes]
    workdir: Path
    log: str

    def wait(self, timeout_s: float = 1200.0) -> subprocess.CompletedProcess[str]:
        """Wait for the run to end (killed after ``timeout_s`` seconds from now, then
        ``subprocess.TimeoutExpired``); the finished process with its stdout / stderr as text. It
        does not check the outcome."""
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        out, err = ((self.workdir / name).read_text(errors="replace") for name in ("stdout", "stderr"))
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)

    def stop(self) -> None:
        """Kill the run if it is still going (the session ended without waiting for it)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_interpreted_tier(workdir: Path) -> InterpretedTierRun:
    """Start the interpreted kernel cases (:data:`REPRESENTATIVE`, :data:`QUANTIZED`,
    :data:`MERGED_VIEWS`) in a pytest subprocess under ``TRITON_INTERPRET=1``, recording every
    launch to ``workdir / "launches.pkl"``; it runs while the caller goes on (``conftest.py``
    starts it once the session's tests are collected, so that it overlaps them)."""
    log = str(workdir / "launches.pkl")
    env = _env(True)
    env["SGLANG_V4_LAUNCH_LOG"] = log
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "kernel_launch_record"]
    cmd += ["-rs", *REPRESENTATIVE, *QUANTIZED, *MERGED_VIEWS]
    with open(workdir / "stdout", "wb") as out, open(workdir / "stderr", "wb") as err:
        proc = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=out, stderr=err)
    return InterpretedTierRun(proc, workdir, log)


def test_kernel_families_match_their_oracles_under_the_interpreter(
    interpreted_kernel_tier: tuple[subprocess.CompletedProcess[str], str],
) -> None:
    proc, _ = interpreted_kernel_tier
    out = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, out
    passed = int(m[1]) if (m := re.search(r"(\d+) passed", proc.stdout)) else 0
    # one skip is expected (a bf16-only attention case); everything else must have run
    assert passed >= len(REPRESENTATIVE) + 4 + 6 + 4, out
