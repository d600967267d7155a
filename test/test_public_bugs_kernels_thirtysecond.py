"""A thirty-second set of public bug reports, replayed against the Triton kernels of
``sgl_kernel_v4.triton``: the FP8 block-scaled linear (w8a16 / w8a8) at ``N`` and ``K`` no
multiple of 128 with a distinct scale per block, one token and no token; the FP4 routed experts
with empty experts, one token per expert and unsorted routing; the sparse attention with sinks
when a token's leading top-k entries are all ``-1`` padding, when it has no key at all, and with
NaN rows in the pools that no valid entry names; the indexer top-k when a token sees fewer entries
than ``k`` (none, or a negative count) and the score selection with fewer finite scores than ``k``
or a crowd of ties at the threshold.

Fixture: the kernels on CUDA, or on the CPU under ``TRITON_INTERPRET=1`` (``kernel_testutil``;
tiny shapes, the interpreter is slow). In a CPU run without the interpreter,
:func:`test_cases_under_the_interpreter` runs them in a pytest subprocess with
``TRITON_INTERPRET=1`` and requires every one to pass.
Oracles: float64 written here or in ``quant_testutil`` / ``kernels_attention_testutil``: the
block-dequantized product ``x @ (w * s)^T`` (activations built exactly representable on the e4m3
grid, so the w8a8 quantization is lossless); HF ``DeepseekV4Experts`` on the float64-decoded FP4
experts; softmax attention with sinks over each token's key list; the definition of the top-k
(the larger score first, equal scores to the lower position, ``-1`` after the valid ones).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch
from kernel_testutil import DEVICE
from kernels_attention_testutil import make_case, oracle, run
from quant_testutil import fp4_weight64, fp8_weight64, moe64, random_fp4_experts

KERNEL = pytest.mark.skipif(DEVICE is None, reason="needs CUDA and triton, or TRITON_INTERPRET=1")


def _exact_activations(T: int, K: int, gen: torch.Generator) -> torch.Tensor:
    """``[T, K]`` fp32 activations that the per-1x128 e4m3 quantization keeps exactly: every group
    holds ``+-448 * 2**g`` once (its amax, so its power-of-two scale is ``2**g``) and e4m3 values
    times ``2**g`` elsewhere."""
    x = (torch.randn(T, K, generator=gen) * 64).clamp(-440, 440).to(torch.float8_e4m3fn).float()
    for g in range(-(-K // 128)):
        x[:, g * 128] = 448.0
        x[:, g * 128 : (g + 1) * 128] *= 2.0 ** (g - 3)
    return x


@KERNEL
@pytest.mark.parametrize("variant", ["w8a16", "w8a8"])
def test_fp8_linear_scale_block_per_128_rows_and_columns(variant: str) -> None:
    """vllm-project/vllm#49596: an FP8 block GEMM with ``N = 448`` read the weight scale of
    columns ``112..127`` from block 1 (group width ``N / n_blocks`` instead of 128), and
    mlc-ai/TIRx-kernels#5: every K step used the first K block's scale. Here ``N = 200`` and
    ``K = 320`` (partial last blocks both ways), every 128x128 block has its own power-of-two scale,
    and one token, three tokens and no token must give ``x @ (w * s)^T`` (oracle: float64)."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    gen = torch.Generator().manual_seed(32)
    N, K = 200, 320
    w = (torch.randn(N, K, generator=gen) * 32).clamp(-448, 448).to(torch.float8_e4m3fn)
    s = torch.tensor([[2.0**-6, 2.0**-2, 2.0**-9], [2.0**-4, 2.0**-8, 2.0**-1]])
    w64 = fp8_weight64(w, s)
    for T in (1, 3):
        x = _exact_activations(T, K, gen)
        y = fp8_linear(x.to(DEVICE), w.to(DEVICE), s.to(DEVICE), variant)
        want = x.double() @ w64.T
        assert y.shape == (T, N) and y.dtype == torch.float32
        err = ((y.double().cpu() - want).norm(dim=1) / want.norm(dim=1)).max().item()
        assert err < 1e-5, (T, err)
    empty = fp8_linear(torch.empty(0, K, device=DEVICE), w.to(DEVICE), s.to(DEVICE), variant)
    assert empty.shape == (0, N)


@KERNEL
def test_fp4_moe_empty_experts_one_token_each_unsorted_routing() -> None:
    """NVIDIA-NeMo/Automodel#532: a routed expert that received no token crashed the grouped MoE
    (a tensor built with the wrong shape for a zero-token expert). Here 6 experts of which 3 get no
    token, each used expert one token, ids in descending (unsorted) order and a ``-1`` slot; one
    token routed nowhere must give zeros (oracle: HF ``DeepseekV4Experts`` in float64 on the
    decoded FP4 weights, ``quant_testutil.moe64``)."""
    from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4

    gen = torch.Generator().manual_seed(532)
    E, D, I = 6, 64, 64  # noqa: E741
    w13, s13, w2, s2 = random_fp4_experts(E, D, I, gen)
    x = torch.randn(4, D, generator=gen)
    ids = torch.tensor([[5, -1], [3, -1], [1, -1], [-1, -1]])
    wts = torch.tensor([[0.7, 0.3], [1.0, 0.5], [0.25, 0.0], [0.5, 0.5]])
    got = fused_moe_fp4(*(t.to(DEVICE) for t in (x, w13, s13, w2, s2, ids, wts)), 10.0)
    want = moe64(x, fp4_weight64(w13, s13), fp4_weight64(w2, s2), ids, wts, 10.0)
    assert got.shape == (4, D) and torch.isfinite(got).all()
    assert torch.equal(got[3].cpu(), torch.zeros(D))
    err = ((got[:3].double().cpu() - want[:3]).norm(dim=1) / want[:3].norm(dim=1)).max().item()
    assert err < 1e-4, err


@KERNEL
def test_sparse_attention_leading_entries_all_padding_and_nan_elsewhere() -> None:
    """vllm-project/vllm#48364: a sparse-MLA kernel NaN-poisoned a row whose first 16 top-k entries
    were all ``-1`` (``exp2(-inf - -inf)``) although valid entries followed; radixark/miles#2079:
    a row of only ``-1`` entries divided 0/0; flashinfer-ai/flashinfer#5193: NaN cache rows outside
    the valid selection must not reach the output. Here tokens without window keys whose first 48
    of 64 entries are ``-1``, one token with no key at all (its output is 0: only the sink), and
    every pool row that no valid key names set to NaN (oracle: float64 attention with sinks over
    each token's key list)."""
    gen = torch.Generator().manual_seed(48364)
    case = make_case(4, 1, 16, 64, "csa", torch.float32, gen)
    T, n = case["entries"].shape
    case["swa_pages"][:] = -1
    ent = torch.full((T, n), -1, dtype=torch.long)
    ent[0, 48:] = torch.randperm(64, generator=gen)[:16]
    ent[1, 63] = 5
    ent[2, 50:] = torch.arange(14)
    case["entries"] = ent  # token 3: all -1
    comp = case["comp"].clone()
    keep = torch.zeros(comp.shape[0], dtype=torch.bool)
    for t in range(T):
        row = case["req_to_page"][int(case["req_rows"][int(case["token_req"][t])])]
        for w in ent[t][ent[t] >= 0].tolist():
            if int(row[w // case["e"]]) >= 0:
                keep[int(row[w // case["e"]]) * case["e"] + w % case["e"]] = True
    comp[~keep] = float("nan")
    swa = torch.full_like(case["swa"], float("nan"))
    case["comp"] = comp
    want = oracle(case, swa.double(), comp.double())
    got = run(case, swa.to(DEVICE), comp.to(DEVICE)).double().cpu()
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert torch.equal(got[3], torch.zeros_like(got[3]))


def _indexer_pool(visible: list[int], topk: int, gen: torch.Generator) -> tuple:
    """One request over two full pages of 64 entries; returns the kernel's arguments."""
    T, H, D, e = len(visible), 2, 32, 64
    return (
        torch.randn(T, H, D, generator=gen),
        torch.rand(T, H, generator=gen),
        torch.randn(4 * e, D, generator=gen),
        torch.tensor(visible),
        torch.tensor([[2, 0]], dtype=torch.int32),
        torch.tensor([0]),
        torch.zeros(T, dtype=torch.long),
        e,
        topk,
        D**-0.5,
    )


@KERNEL
def test_indexer_topk_fewer_visible_entries_than_k() -> None:
    """NVIDIA-NeMo/Automodel#3035: the DSA indexer's ``topk(logits, 2048)`` crashed when a packed
    sequence had fewer keys than ``index_topk``; the fix keeps the width and pads with ``-1``; and
    sgl-project/sglang#31123: a negative (padded) length must give ``-1`` in every slot. Here
    ``topk = 16`` and tokens seeing 0, 1, 5, 16 and -3 entries: each row is its visible entries in
    ascending order, then ``-1`` (oracle: the definition; with at most ``k`` entries all are
    kept)."""
    from sgl_kernel_v4.triton.indexer import indexer_topk

    gen = torch.Generator().manual_seed(3035)
    visible = [0, 1, 5, 16, -3]
    args = _indexer_pool(visible, 16, gen)
    dev_args = [a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args]
    for short_rows in (True, False):
        got = indexer_topk(*dev_args, short_rows=short_rows).cpu()
        assert got.shape == (5, 16) and got.dtype == torch.int64
        for t, v in enumerate(visible):
            n = max(v, 0)
            want = list(range(n)) + [-1] * (16 - n)
            assert got[t].tolist() == want, (short_rows, t, got[t].tolist())


def _topk64(row: torch.Tensor, k: int) -> list[int]:
    """The definition: positions of the ``k`` largest finite scores (larger first, equal scores to
    the lower position), ascending, then ``-1``."""
    vals = row.double().tolist()
    valid = [i for i, v in enumerate(vals) if v != float("-inf")]
    best = sorted(valid, key=lambda i: (-vals[i], i))[:k]
    return sorted(best) + [-1] * (k - len(best))


@KERNEL
@pytest.mark.parametrize("select_impl", ["fused", "radix", "bitsearch"])
def test_topk_from_scores_few_finite_and_crowded_ties(select_impl: str) -> None:
    """NVIDIA/cudnn-frontend#410: a varlen top-k counted out-of-range ``-inf`` lanes as candidates
    when a row had fewer finite values than ``top_k`` (threshold ``-inf``) and overflowed; and
    sgl-project/sglang#36807: a radix top-k returned wrong sets when the threshold bucket held
    more candidates than its buffer. Here rows of 160 scores with 3 finite values, none, all
    ``-inf`` but one, and 130 ties at the k-th value, ``k = 32`` (oracle: the definition)."""
    from sgl_kernel_v4.triton.indexer import topk_from_scores

    gen = torch.Generator().manual_seed(410)
    C, k = 160, 32
    s = torch.full((4, C), float("-inf"))
    s[0, [7, 90, 159]] = torch.tensor([0.5, -2.0, 0.5])
    s[2, 0] = -1e30
    s[3] = torch.randn(C, generator=gen) - 10.0
    s[3, torch.randperm(C, generator=gen)[:130]] = 1.25
    s[3, [3, 150]] = torch.tensor([2.0, 3.0])
    got = topk_from_scores(s.to(DEVICE), k, select_impl=select_impl).cpu()
    assert got.shape == (4, k)
    for t in range(4):
        assert got[t].tolist() == _topk64(s[t], k), t


def test_cases_under_the_interpreter() -> None:
    """Without CUDA or ``TRITON_INTERPRET=1`` the kernel cases above skip here (Triton picks the
    interpreter when a kernel is defined, at import): this runs them in a pytest subprocess with
    ``TRITON_INTERPRET=1`` and requires all of them to pass, none skipped."""
    if DEVICE is not None:
        pytest.skip("the cases ran in this process")
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_V4_LAUNCH_LOG"}
    env["TRITON_INTERPRET"] = "1"
    own = [here, os.path.join(root, "python"), os.path.join(root, "sgl-kernel-v4")]
    env["PYTHONPATH"] = os.pathsep.join([*own, *filter(None, [os.environ.get("PYTHONPATH")])])
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "-rs"]
    cmd += [os.path.abspath(__file__), "-k", "not under_the_interpreter"]
    proc = subprocess.run(cmd, cwd=here, env=env, capture_output=True, text=True)
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert re.search(r"\b8 passed\b", tail) and "skipped" not in tail, tail
