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

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

HERE = os.path.dirname(os.path.abspath(__file__))
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


def record_pytest(node_ids: list[str], log: str) -> None:
    """Run the given kernel tests under the interpreter, recording their launches to ``log``."""
    env = _env(True)
    env["SGLANG_V4_LAUNCH_LOG"] = log
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "kernel_launch_record"]
    proc = subprocess.run(cmd + node_ids, cwd=HERE, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


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
