"""Shared pieces of the sparse-attention kernel tests: the window, random paged cases and the float64 oracle."""

from __future__ import annotations

import torch
from kernel_testutil import DEVICE

W = 128


def slot_lists(case: dict, t: int) -> list[int]:
    """Every key slot of token ``t`` by the definitions (``sgl_kernel_v4.paged`` docstring):
    ``("swa", slot)`` then ``("comp", slot)`` pairs, as Python lists."""
    p = int(case["pos"][t])
    prev, cur = (int(x) for x in case["swa_pages"][t])
    keys = []
    for k in range(p - W + 1, p + 1):
        page = cur if k >= 0 and k // W == p // W else prev
        if k >= 0 and page >= 0:
            keys.append(("swa", page * W + k % W))
    if case.get("comp") is not None:
        e = case["e"]
        row = case["req_to_page"][int(case["req_rows"][int(case["token_req"][t])])].tolist()
        if case["entries"] is not None:
            ents = [int(w) for w in case["entries"][t] if int(w) >= 0]
        else:
            ents = list(range(int(case["visible"][t])))
        for w in ents:
            if row[w // e] >= 0:
                keys.append(("comp", row[w // e] * e + w % e))
    return keys


def oracle(case: dict, swa64: torch.Tensor, comp64: torch.Tensor | None) -> torch.Tensor:
    """float64 HF eager attention with sinks over each token's key list."""
    q = case["q"].double().cpu()
    T, H, D = q.shape
    out = torch.zeros(T, H, D, dtype=torch.float64)
    sinks = case["sinks"].double().cpu()
    for t in range(T):
        ks = [swa64[s] if src == "swa" else comp64[s] for src, s in slot_lists(case, t)]  # type: ignore[index]
        if not ks:
            continue
        k = torch.stack(ks)  # [K, D]
        logits = torch.cat([q[t] @ k.T * case["scale"], sinks[:, None]], 1)
        p = torch.softmax(logits, 1)[:, :-1]
        out[t] = p @ k
    return out


def make_case(
    T: int, H: int, D: int, n_comp: int, mode: str, dtype: torch.dtype, gen: torch.Generator, e: int = 64
) -> dict:
    """Paged inputs: two requests, random window pages (some -1), random block pages (some
    missing), positions up to ``n_comp * 4``; ``mode`` ``"csa"`` (``n_comp`` top-k entries with
    holes), ``"hca"`` (every entry below a random visible count up to ``n_comp``) or ``"swa"``."""
    n_wp, n_bp = 12, max(8, 2 * (n_comp // e + 2))
    swa = torch.randn(n_wp * W, D, generator=gen)
    comp = torch.randn(n_bp * e, D, generator=gen)
    P = n_comp // e + 2
    req_to_page = torch.stack([torch.randperm(n_bp, generator=gen)[:P] for _ in range(3)]).int()
    req_to_page[0, -1] = -1
    req_rows = torch.tensor([2, 0])
    token_req = (torch.arange(T) >= T // 2).long()
    pos = torch.randint(0, 4 * n_comp + 200, (T,), generator=gen)
    swa_pages = torch.randint(0, n_wp, (T, 2), generator=gen)
    swa_pages[torch.rand(T, 2, generator=gen) < 0.15] = -1
    if T > 1:
        swa_pages[-1] = -1  # a dead row: no key at all
    case = dict(
        q=torch.randn(T, H, D, generator=gen).to(dtype),
        sinks=torch.randn(H, generator=gen) * 2,
        scale=D**-0.5,
        pos=pos,
        swa_pages=swa_pages,
        swa=swa.to(dtype),
        comp=None,
        entries=None,
        visible=None,
        req_to_page=req_to_page,
        req_rows=req_rows,
        token_req=token_req,
        e=e,
    )
    if mode != "swa":
        case["comp"] = comp.to(dtype)
        if mode == "csa":
            ent = torch.randint(0, n_comp, (T, n_comp), generator=gen)
            ent[torch.rand(T, n_comp, generator=gen) < 0.2] = -1
            case["entries"] = ent
        else:
            case["visible"] = torch.randint(0, n_comp + 1, (T,), generator=gen)
        if T > 1:
            if mode == "csa":
                case["entries"][-1] = -1
            else:
                case["visible"][-1] = 0
    return case


def run(case: dict, swa, comp, **kw) -> torch.Tensor:
    from sgl_kernel_v4.triton.attention import sparse_attention

    d = {k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in case.items()}
    extra = {}
    if comp is not None:
        extra = dict(
            comp_kv=comp,
            comp_entries=d["entries"],
            comp_visible=d["visible"],
            req_to_page=d["req_to_page"],
            req_rows=d["req_rows"],
            token_req=d["token_req"],
            entries_per_page=case["e"],
        )
    return sparse_attention(
        d["q"], swa, d["swa_pages"], d["pos"], W, d["sinks"], case["scale"], **extra, **kw
    )
