"""Public reports on data-parallel launch and rank pins, replayed on ``--dp-size`` (replicas
behind ``sglang-router``) and on a single server's one rank: launch options that cannot work,
each replica's GPUs and port, and a ``routed_dp_rank`` / ``data_parallel_rank`` /
``X-Data-Parallel-Rank`` pin outside ``[0, dp_size)``.

All in this process, no model: the launch check, the replica layout and the rank checks called
directly, and one ``--dp-size 2`` gateway served from a thread in front of a router stub that
records what reaches it (its replicas unreachable).

Fault found here and fixed: ``--port 65535 --dp-size 2`` passed the argument check, and the
launcher's port probe took the replica ports ``65536`` / ``65537`` for free ones, so the group
started replicas that could never listen; the check now refuses it with a ``ValueError`` naming
``port`` and ``dp_size``, and the port probe reports a port outside ``[1, 65535]``.

Oracles: the TCP port range ``[1, 65535]`` (RFC 793's 16-bit port field), SGLang's documented
replica layout (replica ``i`` on ``port + 1 + i`` and GPUs ``base_gpu_id + i * tp_size ..``), and
SGLang's range for a pinned rank (``0 <= rank < dp_size``, messages naming the field), all
hand-derived; the ``openai`` client's error classes for the gateway's answers.
"""

from __future__ import annotations

import json

import openai
import pytest
import requests
from aiohttp import web
from aiohttp_serve_testutil import free_port, serve_aiohttp
from sglang_v4.entrypoints.data_parallel import replica_args
from sglang_v4.entrypoints.dp_gateway import GATEWAY_SERVER_OPTIONS, body_dp_rank, create_gateway_app
from sglang_v4.entrypoints.dp_rank_header import dp_rank_from_header
from sglang_v4.entrypoints.native_api import check_dp_rank
from sglang_v4.server_args import ServerArgs
from sglang_v4.utils import bind_error

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
    # the launcher's free-port probe: a port past 65535 is not free (getaddrinfo wrapped 65536 to
    # 0, any port, so the probe passed), 65535 itself is an ordinary port
    for bad in (65536, 65537, 0, -1):
        assert (bind_error("127.0.0.1", bad) or "").startswith("port:"), bad
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


def test_deprecated_pin_name_is_an_alias_and_the_new_name_wins() -> None:
    """sgl-project/sglang#19268: ``data_parallel_rank`` was renamed ``routed_dp_rank`` and kept as
    a deprecated alias. Expected: either name alone pins the same rank, and with both set the
    new name's rank is the one used (the alias only fills an unset ``routed_dp_rank``)."""
    for field in ("routed_dp_rank", "data_parallel_rank"):
        assert body_dp_rank(json.dumps({"text": "hi", field: 2}).encode(), 3)[0] == 2
    rank, fwd = body_dp_rank(json.dumps({"routed_dp_rank": 1, "data_parallel_rank": 2}).encode(), 3)
    assert rank == 1
    # the replica is one rank of its own: neither name may make it refuse the request
    assert json.loads(fwd) == {"routed_dp_rank": 0, "data_parallel_rank": 0}
    rank, _ = body_dp_rank(json.dumps({"routed_dp_rank": None, "data_parallel_rank": 2}).encode(), 3)
    assert rank == 2


def test_unset_rank_is_not_rank_zero() -> None:
    """ai-dynamo/dynamo#8000: an unresolved DP rank was carried as ``0``, so requests that named
    no rank were all treated as pinned to rank 0. Expected: no pin (field absent or ``null``,
    header absent) leaves the choice to the load balancer."""
    for body in ({"text": "hi"}, {"text": "hi", "routed_dp_rank": None, "data_parallel_rank": None}):
        assert body_dp_rank(json.dumps(body).encode(), 4) is None
    assert dp_rank_from_header(None, 4) is None


def test_huge_rank_does_not_alias_a_small_one() -> None:
    """vllm-project/vllm#51178: a requested rank too large for the engine identity must be
    refused rather than truncated to another rank. Expected: ``2**64 + 1`` (``1`` modulo
    ``2**64``) and ``2**16 + 1`` are refused, in the body and in the header, never served as
    rank 1."""
    for huge in (2**64 + 1, 2**16 + 1):
        with pytest.raises(ValueError, match="less than dp_size: 2"):
            body_dp_rank(json.dumps({"routed_dp_rank": huge}).encode(), 2)
        with pytest.raises(ValueError, match="X-Data-Parallel-Rank"):
            dp_rank_from_header(str(huge), 2)
        with pytest.raises(ValueError, match="routed_dp_rank"):
            check_dp_rank("routed_dp_rank", huge)


def test_gateway_refuses_a_rank_past_its_replicas_with_a_400() -> None:
    """vllm-project/vllm#32314: ``X-data-parallel-rank: 2`` on a server with two local DP ranks
    indexed past its engines and answered ``500 Internal Server Error``. Expected: a 400 saying the
    rank is out of range, nothing dispatched. Here on the ``--dp-size 2`` gateway (its router a
    stub that records what reaches it, its replicas unreachable): the header and the body pin,
    on an OpenAI route (the ``openai`` client's ``BadRequestError``) and on ``/generate``."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({})

    router = web.Application()
    router.router.add_route("*", "/{tail:.*}", record)
    router_url, stop_router = serve_aiohttp(router)
    replicas = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    url, stop_gateway = serve_aiohttp(create_gateway_app(router_url, replicas), **GATEWAY_SERVER_OPTIONS)
    try:
        oa = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError) as ei:
            oa.completions.create(model="m", prompt="hi", extra_headers={"X-data-parallel-rank": "2"})
        assert "less than dp_size: 2" in ei.value.message, ei.value.message
        with pytest.raises(openai.BadRequestError) as ei:
            oa.completions.create(model="m", prompt="hi", extra_body={"routed_dp_rank": 2})
        assert "routed_dp_rank" in ei.value.message, ei.value.message
        r = requests.post(url + "/generate", json={"text": "hi", "data_parallel_rank": 5}, timeout=10)
        assert r.status_code == 400, r.text
        assert "data_parallel_rank" in r.json()["error"]["message"]
        assert seen == []  # none reached the router
    finally:
        stop_gateway()
        stop_router()
