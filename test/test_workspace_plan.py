"""Forward workspace planning (``model_executor/workspace.py``): the maximal dummy forward runs at
full context on a scratch pool without touching a real request's state, the chunk is lowered while
its workspace does not fit, and start-up fails clearly when nothing fits. On CUDA (``gpu``) the
runner reserves the measured workspace before sizing the pools."""

from __future__ import annotations

import copy

import pytest
import torch
from dsv4_testutil import CONFIGS
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_executor.model_runner import ModelRunner
from sglang_v4.model_executor.workspace import WORKSPACE_MARGIN, dummy_requests, plan_workspace
from sglang_v4.server_args import ServerArgs

PAGE = 128


def _runner(device: str = "cpu", **kw) -> ModelRunner:
    mc = ModelConfig.from_dict(copy.deepcopy(CONFIGS["sliding_first"]))
    args = dict(device=device, dtype="float32" if device == "cpu" else "bfloat16", page_size=PAGE,
                max_running_requests=4, context_length=2048, load_format="dummy", random_seed=3)  # fmt: skip
    args.update(kw)
    return ModelRunner(mc, ServerArgs(**args))


def _plan_args(r: ModelRunner) -> dict:
    return dict(
        model=r.model,
        model_config=r.mc,
        builder_args=r._builder_args(),
        pool_args=dict(
            compute_dtype=r.dtype, device=r.device, kv_cache_dtype=r.kv_cache_dtype, fp4_indexer=r.fp4_indexer
        ),  # fmt: skip
        context_len=r.context_len,
        max_decode_bs=3,
    )


def test_dummy_batch_is_the_maximal_mixed_batch() -> None:
    mc = ModelConfig.from_dict(copy.deepcopy(CONFIGS["sliding_first"]))
    reqs = dummy_requests(mc, PAGE, 2048, 512, 3)
    assert [len(r.input_ids) for r in reqs] == [512, 1, 1, 1]
    assert all(r.prefix_len + len(r.input_ids) == 2048 for r in reqs)  # ends at the full context
    assert all(r.req_pool_idx == 0 and set(r.block_pages) == {0} for r in reqs)  # reserved slot / page
    assert all(len(r.block_pages) == 2048 // PAGE and set(r.window_pages.values()) == {0} for r in reqs)


def test_dummy_forward_runs_at_full_context_and_changes_no_request_state() -> None:
    r = _runner(max_total_tokens=4096)
    before = [t.clone() for t in r.pool.tensors()]
    runs: list[int] = []

    def measure(run) -> int:  # the real forward, a stand-in for the CUDA peak counter
        run()
        runs.append(1)
        return 1000

    plan = plan_workspace(chunk=256, budget_bytes=10**6, with_graphs=True, measure=measure, **_plan_args(r))
    assert len(runs) == 2  # the decode batch, then the mixed batch
    assert plan.chunked_prefill_size == 256 and not plan.lowered
    assert plan.prefill_bytes == plan.decode_bytes == 1000
    assert plan.reserved_bytes == int(2000 * (1 + WORKSPACE_MARGIN))
    assert all(torch.equal(a, b) for a, b in zip(before, r.pool.tensors()))  # a scratch pool only


def test_extend_graph_forward_measured_for_the_graph_pool() -> None:
    """With extend graphs, the graphs' pool is sized for the larger of the decode batch and the
    largest extend key's forward (its tokens over at most ``max_decode_bs`` requests)."""
    r = _runner(max_total_tokens=4096)
    shapes: list[list[int]] = []

    def model(fb, pool):
        shapes.append(list(fb.extend_lens))
        return r.model(fb, pool)

    peaks = iter([100, 700, 300])  # decode batch, extend key, mixed batch

    def measure(run) -> int:
        run()
        return next(peaks)

    args = _plan_args(r)
    args["model"] = model
    plan = plan_workspace(
        chunk=256, budget_bytes=10**6, with_graphs=True, measure=measure, graph_extend_tokens=64, **args
    )
    n_dec = args["max_decode_bs"]
    assert shapes[0] == [1] * n_dec
    assert sum(shapes[1]) == 64 and len(shapes[1]) == min(64, n_dec)  # the largest extend key
    assert plan.decode_bytes == 700 and plan.reserved_bytes == int(1000 * (1 + WORKSPACE_MARGIN))


def test_chunk_lowered_until_the_workspace_fits() -> None:
    r = _runner(max_total_tokens=4096)
    sizes = {"decode": 100}
    seen: list[int] = []

    def measure(run) -> int:
        if "decode" in sizes:
            return sizes.pop("decode")
        seen.append(len(seen))
        if len(seen) == 1:
            raise torch.OutOfMemoryError("dummy forward out of memory")
        return 800 if len(seen) == 2 else 300  # bytes of chunks 1024 (OOM), 512, 256

    plan = plan_workspace(chunk=1024, budget_bytes=1000, with_graphs=False, measure=measure, **_plan_args(r))
    assert plan.requested_chunk == 1024 and plan.chunked_prefill_size == 256 and plan.lowered
    assert plan.decode_bytes == 0 and plan.reserved_bytes == int(300 * (1 + WORKSPACE_MARGIN)) <= 500
    assert "lowered from 1024 to 256" in plan.summary()
    with pytest.raises(ValueError, match="forward workspace: a 128-token prefill chunk"):
        plan_workspace(
            chunk=512, budget_bytes=1000, with_graphs=False, measure=lambda run: 900, **_plan_args(r)
        )


def test_cpu_runner_keeps_the_planner_behaviour() -> None:
    r = _runner(max_total_tokens=4096, chunked_prefill_size=-1)
    assert r.workspace is None and r.max_total_tokens == 4096
    assert r.chunked_prefill_size == r.context_len  # -1: no chunking


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_runner_reserves_the_measured_workspace() -> None:
    r = _runner("cuda", context_length=8192, chunked_prefill_size=2048)
    ws = r.workspace
    assert ws is not None and ws.prefill_bytes > 0 and ws.reserved_bytes >= ws.prefill_bytes
    assert r.plan.budget_bytes is not None and r.plan.total_bytes <= r.plan.budget_bytes
    # the pools leave the workspace free: a maximal forward right after start-up fits
    free, _ = torch.cuda.mem_get_info()
    assert free >= ws.prefill_bytes
