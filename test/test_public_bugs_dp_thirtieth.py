"""Public reports on data-parallel launch and rank pins, replayed on ``--dp-size`` (replicas
behind ``sglang-router``) and on a single server's one rank: launch options that cannot work,
each replica's GPUs and port, and a ``routed_dp_rank`` / ``data_parallel_rank`` /
``X-Data-Parallel-Rank`` pin outside ``[0, dp_size)``.

All unit-level, in this process (no replica, router or model is started).

Fault found here and fixed: ``--port 65535 --dp-size 2`` passed the argument check, and the
launcher's port probe took the replica ports ``65536`` / ``65537`` for free ones, so the group
started replicas that could never listen; the check now refuses it with a ``ValueError`` naming
``port`` and ``dp_size``.

Oracles: the TCP port range ``[1, 65535]`` (RFC 793's 16-bit port field), SGLang's documented
replica layout (replica ``i`` on ``port + 1 + i`` and GPUs ``base_gpu_id + i * tp_size ..``), and
SGLang's range for a pinned rank (``0 <= rank < dp_size``, messages naming the field), all
hand-derived.
"""

from __future__ import annotations

import json

import pytest
from sglang_v4.entrypoints.data_parallel import replica_args
from sglang_v4.entrypoints.dp_gateway import body_dp_rank
from sglang_v4.entrypoints.dp_rank_header import dp_rank_from_header
from sglang_v4.entrypoints.native_api import check_dp_rank
from sglang_v4.server_args import ServerArgs

pytestmark = pytest.mark.timeout(60)


def test_dp_launch_port_range_refused_before_start() -> None:
    """vllm-project/vllm#49124: an invalid data-parallel launch combination is refused up front
    with a ``ValueError`` naming the flags and values (not an assertion or a failure after the
    workers started). Here the replicas listen on ``port + 1 .. port + dp_size``; a TCP port is
    at most 65535, so ``port=65535, dp_size=2`` cannot work and ``port=65533, dp_size=2`` can."""
    with pytest.raises(ValueError) as ei:
        ServerArgs(device="cpu", port=65535, dp_size=2)
    msg = str(ei.value)
    assert "port" in msg and "dp_size" in msg and "65535" in msg, msg
    with pytest.raises(ValueError, match="port"):
        ServerArgs(device="cpu", port=65534, dp_size=2)  # replica 1 would be on 65536
    ok = ServerArgs(device="cpu", port=65533, dp_size=2)  # replicas on 65534, 65535
    assert [replica_args(ok, i).port for i in range(2)] == [65534, 65535]
    # a single server may use the top port (no replica ports)
    assert ServerArgs(device="cpu", port=65535).port == 65535
    # the other DP launch combinations stay refused, each naming its field
    for kw, field in (
        (dict(dp_size=0), "dp_size"),
        (dict(dp_size=2, router_policy="fastest"), "router_policy"),
    ):
        with pytest.raises(ValueError, match=field):
            ServerArgs(device="cpu", **kw)


def test_replicas_get_disjoint_gpus_and_their_own_rank() -> None:
    """sgl-project/sglang#4149: with TP > 1 and DP > 1 every DP shard was told it was DP rank 0
    and the shards' devices overlapped. Expected: each data-parallel worker is its own rank with
    its own ``tp_size`` GPUs. Hand-derived layout for ``tp_size=2, dp_size=3, base_gpu_id=1``:
    replica ``i`` on GPUs ``{1 + 2i, 2 + 2i}`` and port ``port + 1 + i``, each a one-rank server."""
    sa = ServerArgs(device="cpu", tp_size=2, dp_size=3, base_gpu_id=1, port=41000)
    reps = [replica_args(sa, i) for i in range(3)]
    gpus = [set(range(r.base_gpu_id, r.base_gpu_id + r.tp_size)) for r in reps]
    assert gpus == [{1, 2}, {3, 4}, {5, 6}]
    assert [r.port for r in reps] == [41001, 41002, 41003]
    assert all(r.dp_size == 1 and r.tp_size == 2 and r.dist_init_addr is None for r in reps)
    assert sa.port not in {r.port for r in reps}  # the front door keeps its own port


def test_gateway_out_of_range_body_pin_is_a_clear_error() -> None:
    """sgl-project/sglang#19762: a ``routed_dp_rank`` outside ``[0, dp_size)`` made the DP
    controller index past its workers (``IndexError``). Expected: a pinned rank is checked
    against ``dp_size`` and refused with an error naming the field; an in-range pin is kept."""
    for field in ("routed_dp_rank", "data_parallel_rank"):
        for bad, words in ((2, "less than dp_size: 2"), (7, "less than dp_size: 2"), (-1, "non-negative")):
            with pytest.raises(ValueError) as ei:
                body_dp_rank(json.dumps({"text": "hi", field: bad}).encode(), 2)
            assert field in str(ei.value) and words in str(ei.value)
        rank, fwd = body_dp_rank(json.dumps({"text": "hi", field: 1}).encode(), 2)
        # the replica behind the pin is one rank of its own: it gets rank 0, the text unchanged
        assert rank == 1 and json.loads(fwd) == {"text": "hi", field: 0}
    # no pin: nothing to route on
    assert body_dp_rank(b'{"text": "hi"}', 2) is None


def test_header_pin_checked_against_dp_size() -> None:
    """sgl-project/sglang#19762 (the header path of the same check): the rank a request names is
    valid only in ``[0, dp_size)``; a header value is read as an integer (``int``'s reading,
    spaces around allowed) and anything else is a 400-class error naming the header."""
    assert dp_rank_from_header(None, 4) is None
    assert dp_rank_from_header(" 3 ", 4) == 3
    for bad in ("4", "-1", "1.0", "", "one"):
        with pytest.raises(ValueError, match="X-Data-Parallel-Rank"):
            dp_rank_from_header(bad, 4)


def test_single_server_refuses_a_rank_it_does_not_have() -> None:
    """vllm-project/vllm#19227: a ``data_parallel_rank`` sent to an engine that is not a
    multi-rank DP setup is an error rather than silently ignored. Here a single server is one
    rank (``dp_size`` 1): rank 0 (or no pin) is served, rank 1 and -1 are refused naming the
    field, and a non-integer pin (``True``, ``"0"``, ``0.0``) is refused as not an integer."""
    for field in ("data_parallel_rank", "routed_dp_rank"):
        check_dp_rank(field, None)
        check_dp_rank(field, 0)
        for bad in (1, -1, True, "0", 0.0):
            with pytest.raises(ValueError, match=field):
                check_dp_rank(field, bad)
