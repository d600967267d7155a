"""Shared pieces of the compressor-state kernel tests: cases, dtypes, batch builders and the triton launch."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch
from kernel_testutil import DEVICE, dtypes
from sglang_v4.model_executor.forward_batch import ForwardBatch, ForwardBatchBuilder, ReqForwardInput

WINDOW = 128


@dataclass
class Case:
    """One compressor call: ratio ``m``, entry width ``d``, CSA overlap, block page size, requests
    ``(slot, prefix_len, new tokens)``, and the padded graph batch size (decode only) or None."""

    m: int
    d: int
    overlap: bool
    page_size: int
    reqs: list[tuple[int, int, int]]
    graph_bs: int | None = None


CASES = {
    "csa_decode": Case(4, 16, True, 16, [(1, 7, 1), (2, 15, 1), (3, 0, 1), (4, 30, 1), (5, 3, 1)]),
    "csa_extend": Case(4, 16, True, 16, [(1, 0, 37), (2, 5, 20), (3, 16, 3), (4, 2, 1), (6, 13, 4)]),
    "csa_graph_padded": Case(4, 32, True, 16, [(2, 15, 1), (4, 6, 1), (1, 31, 1)], graph_bs=6),
    "csa_main_shape": Case(4, 512, True, 256, [(1, 252, 9), (2, 3, 1)]),
    "csa_indexer_shape": Case(4, 128, True, 256, [(1, 255, 1), (3, 40, 7)]),
    "hca_decode": Case(128, 64, False, 256, [(1, 127, 1), (2, 300, 1), (3, 5, 1)]),
    "hca_extend": Case(128, 64, False, 256, [(1, 100, 200), (2, 0, 130), (3, 128, 5)]),
    "hca_graph_padded": Case(128, 64, False, 256, [(3, 255, 1)], graph_bs=3),
    "hca_main_shape": Case(128, 512, False, 256, [(1, 250, 9)]),
}


def _batch(case: Case) -> ForwardBatch:
    """The builder's batch (eager, or the padded static layout of a decode graph) on DEVICE."""
    ratios = (
        {"csa_ratio": case.m, "hca_ratio": None} if case.overlap else {"csa_ratio": None, "hca_ratio": case.m}
    )
    builder = ForwardBatchBuilder(case.page_size, WINDOW, device=DEVICE, **ratios)
    reqs = []
    for slot, p, n in case.reqs:
        end = p + n
        blocks = [1 + 40 * slot + i for i in range(-(-end // case.page_size))]
        spans = {k: 1 + 20 * slot + k for k in range(end // WINDOW + 1)}
        reqs.append(ReqForwardInput(slot, list(range(n)), p, blocks, spans, n - 1))
    if case.graph_bs is None:
        return builder.build(reqs)
    lay = builder.static_layout(case.graph_bs, 4096)
    host = torch.zeros(lay.size, dtype=torch.int64)
    lay.write(host.numpy(), builder.metadata(reqs, num_req_rows=case.graph_bs))
    bs = case.graph_bs
    return lay.views(host.to(DEVICE), [1] * bs, [0] * bs, [1] * bs)


def _inputs(case: Case, fb: ForwardBatch, seed: int, dtype: torch.dtype = torch.float32) -> dict:
    """Random new rows (kv_new / gate in ``dtype``, fp32 position_bias) and a random fp32 state
    for every slot."""
    gen = torch.Generator().manual_seed(seed)
    m, d = case.m, case.d
    X = 2 * d if case.overlap else d
    T, R, Wp = fb.positions.shape[0], 8, 200

    def rnd(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(DEVICE)

    def rnd_kv(*shape: int) -> torch.Tensor:  # the state holds kv values of the model dtype
        return rnd(*shape).to(dtype).float()

    st = {"buf_kv": rnd_kv(R, m, X), "buf_score": rnd(R, m, X, scale=2.0)}
    st["ovl_kv"] = rnd_kv(R, m, d) if case.overlap else None
    st["ovl_score"] = rnd(R, m, d, scale=2.0) if case.overlap else None
    st["snap_kv"] = rnd(Wp, m, d) if case.overlap else None
    st["snap_score"] = rnd(Wp, m, d) if case.overlap else None
    new = {"kv_new": rnd(T, X).to(dtype), "gate": rnd(T, X, scale=2.0).to(dtype), "position_bias": rnd(m, X)}
    return {"new": new, "state": st}


def _clone(st: dict) -> dict:
    return {k: None if v is None else v.clone() for k, v in st.items()}


def _triton(name: str):
    return getattr(importlib.import_module("sgl_kernel_v4.triton.compressor_state"), name)


def _compress_args(
    case: Case, fb: ForwardBatch, inp: dict, st: dict, pool: torch.Tensor, gen: torch.Generator
):
    plan = fb.csa if case.overlap else fb.hca
    J, r = plan.win_rows.shape[0], min(case.d, 16)
    cos, sin = (torch.rand(J, r // 2, generator=gen).to(DEVICE) for _ in range(2))
    w = (torch.rand(case.d, generator=gen) + 0.5).to(DEVICE)
    n = inp["new"]
    return (
        n["kv_new"], n["gate"], n["position_bias"], fb.positions, fb.req_pool_indices,
        st["buf_kv"], st["buf_score"], st["ovl_kv"], st["ovl_score"], plan.win_rows, plan.win_prev,
        w, cos, sin, pool, plan.win_out, 1e-6,
    )  # fmt: skip


# bf16 runs under the interpreter too (no tl.dot here)
DTYPES = sorted({*dtypes(), torch.bfloat16}, key=str)
