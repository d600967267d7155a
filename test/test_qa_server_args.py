"""QA: ``--tp-size 2`` was accepted and silently ignored (the server ran on one device, tp 1).

Nothing in the runtime reads ``tp_size`` yet, so a value other than 1 must be refused with an
error that names the field, as every other unsupported option is (CLI: argparse error, exit 2).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from server_fixture import REPO
from sglang_v4.server_args import ServerArgs


def test_tp_size_other_than_one_is_refused() -> None:
    assert ServerArgs(tp_size=1).tp_size == 1
    with pytest.raises(ValueError, match="tp_size"):
        ServerArgs(tp_size=2)


def test_cli_tp_size_two_exits_with_usage_error() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "sglang_v4.launch_server", "--tp-size", "2", "--port", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "tp_size" in p.stderr.splitlines()[-1]


@pytest.mark.parametrize("field", ["indexer_stream_max_bs", "cuda_graph_warmup_ctx"])
def test_gpu_bounds_reject_negative_and_non_int(field: str) -> None:
    """``--indexer-stream-max-bs`` / ``--cuda-graph-warmup-ctx``: 0 is legal (never / lazy only),
    a negative or non-integer value is refused naming the field."""
    assert getattr(ServerArgs(**{field: 0}), field) == 0
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=field):
            ServerArgs(**{field: bad})
