"""Shared pieces of the kernel compile / launch-record tests: the test directory, the representative interpreted cases, the subprocess environment, and the launch recording and compile-log runners."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))


# small cases covering every kernel family (paged sparse attention csa/swa + fp8 pools, HCA,
# indexer scoring + histogram/threshold top-k on bf16/fp8/fp4 keys, compressor and its in-place
# window / state kernels, rope / norm / qnorm-rope-kv insert, mHC (decode and legacy finish),
# bf16 MoE and its chunked pair layout, FP8 GEMMs (the three variants, split-K, act quant), FP4
# MoE, the MoE router (top-k + hash) and the shared expert's SwiGLU, both bf16, the sampler's
# temperature scaling and bare NaN / +inf limit).
REPRESENTATIVE = [
    "test_kernels_attention.py::test_paged_attention_matches_fp64[dtype0-5-12-128-45-csa]",
    "test_kernels_attention.py::test_paged_attention_fp8_pools",
    "test_kernels_attention_prefix.py::test_dense_prefix_matches_fp64[40-8-128-300-1073741824-64-64-triton]",
    "test_kernels_attention_prefix.py::test_dense_prefix_matches_fp64[24-16-64-1000-1073741824-64-64-gemm]",
    "test_kernels_attention_prefix.py::test_dense_prefix_matches_fp64[24-16-64-1000-1073741824-64-64-gemm-tiles]",
    "test_kernels_compressor.py::test_compress_and_insert[dtype0-5-5-64-16-False]",
    "test_kernels_compressor.py::test_compress_and_insert[dtype0-1-8-128-64-True]",
    "test_kernels_compressor_state.py::test_compress_windows_match_unfused_and_reference[dtype1-csa_decode]",
    "test_kernels_compressor_state.py::test_compress_windows_match_unfused_and_reference[dtype1-hca_decode]",
    "test_kernels_compressor_state.py::test_advance_state_matches_reference[dtype1-csa_decode]",
    "test_kernels_compressor_state.py::test_advance_state_matches_reference[dtype1-hca_decode]",
    "test_kernels_fp8_gemm.py::test_fp8_linear_vs_float64[dtype0-w8a16-5-2-32-256]",
    "test_kernels_fp8_gemm.py::test_fp8_linear_vs_float64[dtype0-w8a8-5-2-32-256]",
    "test_kernels_fp8_gemm.py::test_w8a16_split_k[2]",
    "test_kernels_fp8_gemm.py::test_w8a8_fused_vs_float64[dtype0-17-2-96-384-cfg1]",
    "test_kernels_fp8_gemm.py::test_act_quant_vs_float64[3-300]",
    "test_kernels_indexer.py::test_topk_from_scores_exact[2-1-100-16]",
    "test_kernels_indexer.py::test_indexer_topk_quantized_keys",
    "test_kernels_indexer_ties.py::test_triton_topk_tie_rule[2-40-64-1]",
    "test_kernels_indexer_short.py::test_short_and_long_rows_in_one_batch[True-None-None-None]",
    "test_kernels_indexer_extend.py::test_extend_topk_exact_with_short_rows[None-keys-2-64-4-2]",
    "test_kernels_indexer_extend.py::test_extend_topk_exact_with_short_rows[None-keys_split-2-32-4-2]",
    "test_kernels_indexer_decoded.py::test_gathered_keys_are_the_codec_decode_with_missing_pages_marked",
    "test_kernels_indexer_radix.py::test_large_threshold_bin_with_ties[256-fused]",
    "test_kernels_indexer_radix.py::test_large_threshold_bin_with_ties[None-radix]",
    "test_kernels_indexer_radix.py::test_large_threshold_bin_with_ties[None-bitsearch]",
    "test_kernels_mhc.py::test_hc_pre[dtype0-5-2-256]",
    "test_kernels_mhc.py::test_hc_post[dtype0-7-2-300]",
    "test_kernels_mhc.py::test_hc_pre_decode_and_legacy_paths[dtype0-True-33-2-64]",
    "test_kernels_moe.py::test_fused_moe[dtype0-1-256-128-8-6]",
    "test_kernels_moe_align.py::test_chunks_random_ids[100-8-16-16]",
    "test_kernels_moe_fp4.py::test_both_layouts_any_batch",
    "test_kernels_moe_fp4.py::test_split_and_fused_edge_cases",
    "test_kernels_moe_router.py::test_moe_route_kernel_bit_equal[37-256-6-dtype1]",
    "test_kernels_moe_router.py::test_moe_route_kernel_sigmoid_bit_equal[37-256-6-dtype1]",
    "test_kernels_moe_router.py::test_swiglu_clamped_kernel_vs_reference[37-320-0-dtype1]",
    "test_kernels_rope.py::test_apply_and_inverse_rope[dtype0-4-3-64-16]",
    "test_kernels_rope.py::test_qnorm_rope_kv_insert[dtype0-5-3-128-32]",
    "test_kernels_rope.py::test_rms_norm[dtype0-True-3-1000]",
    "test_kernels_sampling.py::test_scale_by_temperature_kernel_bit_equal_and_float64[1.0-40]",
    "test_kernels_sampling.py::test_finite_limit_kernel_bit_equal",
]


def _env(interpret: bool) -> dict:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env.pop("SGLANG_V4_LAUNCH_LOG", None)
    env.pop("SGLANG_V4_LAUNCH_DRY", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    # this checkout's sources first: a relative PYTHONPATH would resolve against the child's cwd
    # (test/) and the child would import an installed copy of the packages instead
    root = os.path.dirname(HERE)
    own = [HERE, os.path.join(root, "python"), os.path.join(root, "sgl-kernel-v4")]
    env["PYTHONPATH"] = os.pathsep.join([*own, *filter(None, [env.get("PYTHONPATH")])])
    return env


def record_script(code: str, log: str) -> None:
    """Run ``code`` (given ``log`` as argv[1]) under the interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", code, log], cwd=HERE, env=_env(True), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def compile_log(log: str) -> tuple[int, str]:
    """Compile every distinct launch of ``log`` for sm_90 (no interpreter); (returncode, report)."""
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "kernel_launch_record.py"), log],
        cwd=HERE,
        env=_env(False),
        capture_output=True,
        text=True,
    )
    return proc.returncode, proc.stdout[-20000:] + proc.stderr[-4000:]


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

    def publish(self) -> threading.Thread:
        """Write the exit status to ``workdir / "returncode"`` (atomically) once the run ends, from
        a daemon thread (returned): other processes that share ``workdir`` (the workers of
        ``pytest -n``) wait for it with :func:`wait_published`."""

        def write() -> None:
            code = self.proc.wait()
            tmp = self.workdir / "returncode.tmp"
            tmp.write_text(str(code))
            os.replace(tmp, self.workdir / "returncode")

        t = threading.Thread(target=write, daemon=True)
        t.start()
        return t


def wait_published(workdir: Path, timeout_s: float = 1200.0) -> subprocess.CompletedProcess[str]:
    """The result of a run started by another process in ``workdir`` and published there
    (:meth:`InterpretedTierRun.publish`): its exit status, stdout and stderr as text (``args`` is
    the directory). It does not check the outcome.

    Raises:
        TimeoutError: no exit status after ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while not (workdir / "returncode").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the interpreted tier in {workdir} did not end in {timeout_s} s")
        time.sleep(0.2)
    code = int((workdir / "returncode").read_text())
    out, err = ((workdir / name).read_text(errors="replace") for name in ("stdout", "stderr"))
    return subprocess.CompletedProcess([str(workdir)], code, out, err)


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
