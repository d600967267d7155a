"""QA: parallelism flags. ``--tp-size 2`` was once accepted and silently ignored; now it runs two
ranks (test_tp_server.py), and a layout the runtime cannot run is refused with an error that names
the field, as every other bad option is (CLI: argparse error, exit 2).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from server_fixture import REPO
from sglang_v4.server_args import ServerArgs


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(tp_size=0), "tp_size"),
        (dict(tp_size=2, ep_size=3), "ep_size"),
        (dict(tp_size=3, nnodes=2, dist_init_addr="127.0.0.1:5000"), "nnodes"),
        (dict(tp_size=2, nnodes=2), "dist_init_addr"),
        (dict(tp_size=2, nnodes=2, node_rank=2, dist_init_addr="127.0.0.1:5000"), "node_rank"),
        (dict(tp_size=2, dist_init_addr="nohost"), "dist_init_addr"),
        (dict(dp_size=0), "dp_size"),
        (dict(router_policy="fastest"), "router_policy"),
    ],
)
def test_bad_parallel_layouts_are_refused(kw: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ServerArgs(device="cpu", **kw)


def test_parallel_layouts_are_accepted() -> None:
    sa = ServerArgs(device="cpu", tp_size=4, ep_size=2, nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:5000")
    assert (sa.tp_size, sa.ep_size, sa.nnodes, sa.node_rank) == (4, 2, 2, 1)


def test_cli_bad_ep_size_exits_with_usage_error() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "sglang_v4.launch_server", "--tp-size", "2", "--ep-size", "3", "--port", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "ep_size" in p.stderr.splitlines()[-1]


@pytest.mark.parametrize(
    "field", ["indexer_stream_max_bs", "cuda_graph_warmup_ctx", "cuda_graph_max_extend_tokens"]
)
def test_gpu_bounds_reject_negative_and_non_int(field: str) -> None:
    """``--indexer-stream-max-bs`` / ``--cuda-graph-warmup-ctx`` / ``--cuda-graph-max-extend-tokens``:
    0 is legal (never / lazy only / decode graphs only),
    a negative or non-integer value is refused naming the field."""
    assert getattr(ServerArgs(**{field: 0}), field) == 0
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=field):
            ServerArgs(**{field: bad})


def test_cuda_graph_max_extend_tokens_flag() -> None:
    """``--cuda-graph-max-extend-tokens`` reaches the field (default 1024; 0 turns extend graphs off)."""
    import argparse

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert (
        ServerArgs.from_cli_args(parser.parse_args(["--device", "cpu"])).cuda_graph_max_extend_tokens == 1024
    )
    sa = ServerArgs.from_cli_args(
        parser.parse_args(["--device", "cpu", "--cuda-graph-max-extend-tokens", "0"])
    )
    assert sa.cuda_graph_max_extend_tokens == 0


def test_random_seed_range_is_torchs() -> None:
    """``--random-seed`` takes what ``torch.manual_seed`` takes (the scheduler seeds torch with it):
    a seed past ``2**64 - 1`` or below ``-2**63`` used to pass the checks and kill the scheduler
    after launch ("Overflow when unpacking long long"); it is now a ValueError naming the field."""
    import torch

    for ok in (-(2**63), 0, 2**64 - 1):
        torch.manual_seed(ok)  # the oracle: torch accepts it
        assert ServerArgs(device="cpu", random_seed=ok).random_seed == ok
    for bad in (2**64, -(2**63) - 1):
        with pytest.raises((ValueError, RuntimeError, OverflowError)):
            torch.manual_seed(bad)  # the oracle: torch refuses it
        with pytest.raises(ValueError, match="random_seed"):
            ServerArgs(device="cpu", random_seed=bad)
    torch.manual_seed(0)


def test_blank_served_model_name_is_refused() -> None:
    """A whitespace-only ``--served-model-name`` would be an id no client can send back; it is
    refused like an empty name in a list."""
    with pytest.raises(ValueError, match="served_model_name"):
        ServerArgs(device="cpu", served_model_name="   ")
