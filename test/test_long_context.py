"""Long context on the CPU: bounded memory (no tokens x candidates structure) and exact prefix-cache
hits on long prefixes.

* The reference ops read the paged pools through page tables in bounded blocks of tokens: the
  indexer at 2,048 tokens x 65,536 visible entries and the HCA attention at 4,096 tokens x 8,192
  entries stay under 512 MiB (dense ``[T, C]`` lists alone would take 1 GiB; the gathered keys
  8 GiB), measured as the growth of a fresh subprocess's peak RSS.
* A 64k-token prefix on the ``tiny`` preset (its indexer narrowed to 2 heads x 64 dims so the
  float64 reference scoring of the 537M (query, entry) pairs fits CI), prefilled in 8,192-token
  chunks: the peak RSS of the last chunk (16k entries per token) is within a bound of the second
  chunk's (4k), and a request served from the 64k cached prefix gives the cold run's tokens and
  logprobs (fp32, 1e-4). An 8k-token prefix runs the same check quickly, in the test process (it
  measures no RSS, so it needs no fresh interpreter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _run_child(*args: str, timeout: int = 1800) -> dict:
    """Run this file as a script in a fresh interpreter (its own peak RSS); its JSON result."""
    env = dict(os.environ, SGLANG_V4_CPU_THREADS="1")
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "test_long_context.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=HERE,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_reference_indexer_memory_is_bounded() -> None:
    res = _run_child("indexer")
    assert res["dense_bytes"] >= 2**30  # what per-token candidate lists would have taken
    # blocks of GATHER_BUDGET float64 scores (64 MiB) and their einsum / top-k temporaries: far under
    # the dense candidate list alone (1 GiB), and its float64 scores (1 GiB)
    assert res["growth_mib"] < 512, res
    assert res["rows_ok"]


@pytest.mark.slow  # ~22 s on two cores
def test_reference_attention_memory_is_bounded() -> None:
    res = _run_child("attention")
    assert res["gathered_bytes"] >= 8 * 2**30  # the gathered keys of every token at once
    assert res["growth_mib"] < 512, res
    assert res["finite"]


def test_prefix_hit_equals_cold_8k(tmp_path) -> None:
    res = _child_hit(8192, 4096, str(tmp_path))
    assert res["cached"] == 8192
    assert res["same_ids"] and res["max_lp_diff"] <= 1e-4, res


def test_reference_indexer_blocks_bound_token_entry_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference indexer's top-k selection holds ~40 bytes of temporaries per (token, entry)
    of a block whatever the head count, so its blocks bound tokens x entries, not only heads x
    tokens x entries. With 2 heads (the long-context test model) blocks of 256 tokens let those
    temporaries grow with the context (256 x 16k entries: ~160 MiB at 64k tokens, the process
    peak RSS rising by ~450-750 MiB over a 64k prompt's chunks)."""
    import torch
    from sgl_kernel_v4.ref import attention as ref

    shapes: list[tuple[int, int]] = []
    real = ref.select_topk

    def spy(scores: torch.Tensor, valid: torch.Tensor, topk: int) -> torch.Tensor:
        shapes.append(tuple(scores.shape))
        return real(scores, valid, topk)

    monkeypatch.setattr(ref, "select_topk", spy)
    T, C, H, di, e = 300, 40000, 2, 8, 64
    pool = torch.randn(C + e, di)
    r2p = torch.arange(C // e + 1)[None, :].int()
    vis = torch.full((T,), C)
    sel = ref.indexer_topk(torch.randn(T, H, di), torch.randn(T, H), pool, vis, r2p,
                           torch.zeros(1, dtype=torch.int64), torch.zeros(T, dtype=torch.int64), e, 16, 0.3)  # fmt: skip
    assert sel.shape == (T, 16) and bool((sel >= 0).all())
    assert sum(t for t, _ in shapes) == T
    assert max(t * n for t, n in shapes) <= ref.GATHER_BUDGET // 16, shapes


@pytest.mark.slow
def test_prefix_hit_equals_cold_64k_bounded_memory() -> None:
    res = _run_child("hit", "65536", "8192", timeout=3600)
    assert res["cached"] == 65536
    assert res["same_ids"] and res["max_lp_diff"] <= 1e-4, res
    peaks = res["chunk_peak_mib"]  # process peak RSS after each prefill chunk
    assert len(peaks) >= 8
    # From the second chunk on (the first forward's one-time allocations are behind) the last
    # chunk, scoring 4x the entries of the second, adds little: 27 and 153 MiB in two runs on a
    # 2-core machine (allocator fragmentation varies); before the indexer's blocks bounded
    # tokens x entries, 450 and 750 MiB.
    assert peaks[-1] - peaks[1] < 256, peaks


# ------------------------------------------------------------------ the child process


def _peak_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _child_indexer() -> dict:
    import torch
    from sgl_kernel_v4.ref.attention import indexer_topk

    torch.manual_seed(0)
    T, C, H, di, e = 2048, 65536, 2, 16, 64
    pool = torch.randn(C + e, di)
    req_to_page = torch.randperm(C // e + 1)[None, : C // e].int()
    rows, treq = torch.zeros(1, dtype=torch.int64), torch.zeros(T, dtype=torch.int64)
    vis = torch.arange(C - T + 1, C + 1)  # the last 2k tokens of a 256k-token prompt
    q, w = torch.randn(T, H, di), torch.randn(T, H)
    base = _peak_mib()
    sel = indexer_topk(q, w, pool, vis, req_to_page, rows, treq, e, 16, di**-0.5)
    ok = bool((sel >= 0).all() and (sel[:, 1:] > sel[:, :-1]).all() and (sel < vis[:, None]).all())
    return dict(growth_mib=_peak_mib() - base, rows_ok=ok, dense_bytes=T * C * 8)


def _child_attention() -> dict:
    import torch
    from sgl_kernel_v4.ref.attention import sparse_attention

    torch.manual_seed(0)
    # HCA attention: every token over its window + up to 8k visible entries (a 1M context / 128)
    T, D, H, W, e = 4096, 64, 2, 128, 2
    swa, comp = torch.randn(64 * W, D), torch.randn(8192 + e, D)
    r2p = torch.randperm(4097)[None, :4096].int()
    rows, treq = torch.zeros(1, dtype=torch.int64), torch.zeros(T, dtype=torch.int64)
    pos = torch.arange(1 << 20, (1 << 20) + T) - T
    pages = torch.randint(0, 64, (T, 2))
    q = torch.randn(T, H, D)
    base = _peak_mib()
    out = sparse_attention(q, swa, pages, pos, W, torch.zeros(H), D**-0.5, comp, None, (pos + 1) // 128, r2p,
                           rows, treq, e)  # fmt: skip
    return dict(growth_mib=_peak_mib() - base, finite=bool(torch.isfinite(out).all()),
                gathered_bytes=T * (W + 8192) * D * 4)  # fmt: skip


def _child_hit(prefix: int, chunk: int, root: str | None = None) -> dict:
    """A ``prefix``-token prompt prefilled cold in ``chunk``-token chunks, then again from the cached
    prefix (checkpoint written under ``root``, a new temporary directory by default)."""
    import tempfile

    from dsv4_testutil import random_ids
    from scheduler_testutil import submit
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.tools.make_checkpoint import write_checkpoint

    cfg = get_preset("tiny")
    cfg.update(index_n_heads=2, index_head_dim=64)  # CPU time of the float64 reference scoring
    model_dir = write_checkpoint(
        root or tempfile.mkdtemp(), fmt="hf", weights="fp32", seed=1, config_dict=cfg
    )
    from scheduler_testutil import make_scheduler

    s = make_scheduler(model_dir, max_total_tokens=prefix + 4096, chunked_prefill_size=chunk,
                       context_length=prefix + 1024)  # fmt: skip
    # The pools are allocated lazily by the OS (zero pages): write them once so the RSS peaks below
    # measure the forward's transient memory, not the KV pages the prompt fills (~0.7 GiB here).
    for t in s.pool.tensors():
        t.zero_()  # memset: every page written
    base = random_ids(prefix, seed=prefix, vocab=20000)
    prompt = base + random_ids(40, seed=1, vocab=20000)
    res: dict[str, dict] = {}
    peaks: list[float] = []

    def run(rid: str) -> dict:
        submit(s, rid, prompt, 4, return_logprob=True, logprob_start_len=-1)
        while s.has_work():
            out = s.step()
            peaks.append(_peak_mib())
            for i, r in enumerate(out.rids if out else []):
                d = res.setdefault(r, {"ids": [], "lp": []})
                d["ids"] += out.output_ids[i]
                d["lp"] += out.output_token_logprobs_val[i]
                d["cached"] = out.cached_tokens[i]
        return res[rid]

    cold = run("cold")
    n_chunk_steps = len(peaks)
    hit = run("hit")
    return dict(
        cached=hit["cached"],
        same_ids=hit["ids"] == cold["ids"],
        max_lp_diff=max(abs(a - b) for a, b in zip(hit["lp"], cold["lp"])),
        chunk_peak_mib=peaks[: n_chunk_steps - 3],  # the prefill steps (then 3 decode steps)
    )


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    import torch

    torch.set_num_threads(int(os.environ.get("SGLANG_V4_CPU_THREADS", "1")))
    mode = sys.argv[1]
    if mode == "hit":
        result = _child_hit(int(sys.argv[2]), int(sys.argv[3]))
    else:
        result = _child_indexer() if mode == "indexer" else _child_attention()
    print(json.dumps(result))
