"""A thirty-second set of public bug reports, replayed against the server's administration surface
in-process (``admin_app_testutil``: ``create_app`` with ``--api-key``, ``--enable-metrics``, two
served names, the OpenAI routes mounted, a scheduler that never answers): ``GET /v1/models/{model}``
for the names the API accepts besides the listed ids, the Prometheus page under concurrent
observations, and ``/abort_request`` with an empty or misspelled target and without the key.
Each test names its report.

Fault found and fixed: ``GET /v1/models/{model}`` answered a name the API accepts but does not
list (``"default"``, the model path, a served name with a trailing ``/``) with a card whose ``id``
was that name, a model id ``GET /v1/models`` never lists; it now answers with the listed card of
the served name it stands for (OpenAI's and Anthropic's shapes alike).

Oracles: ``GET /v1/models`` (a cold listing beside each retrieval) read through the ``openai``
client's own ``Model`` type; ``prometheus_client``'s own text parser (each series once per page,
no sample timestamps: the Prometheus text exposition format); the scheduler's inbox as seen by a
recorder standing for the socket (what an abort actually sends); SGLang's documented
``/abort_request`` body (``rid``, ``abort_all``, ``prefix``; unknown keys ignored).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_app_testutil import ADMIN_KEY, ADMIN_NAMES, admin_app_client

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    with admin_app_client(Path(tmp_path_factory.mktemp("r32admin"))) as pair:
        yield pair


class _Inbox:
    """Stands for the tokenizer manager's socket to the scheduler: records what is sent."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send_pyobj(self, obj: Any) -> None:
        self.sent.append(obj)


@pytest.fixture
def inbox(admin: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[_Inbox]:
    """The scheduler's inbox recorded, with two requests ``r32-a`` / ``r32-b`` in flight."""
    _, tm = admin
    rec = _Inbox()
    monkeypatch.setattr(tm, "_send", rec)
    for rid in ("r32-a", "r32-b"):
        monkeypatch.setitem(tm.rid_to_state, rid, object())
    yield rec


def _aborted(rec: _Inbox) -> list[str]:
    from sglang_v4.managers.io_struct import AbortReq

    return sorted(m.rid for m in rec.sent if isinstance(m, AbortReq))


# --------------------------------------------------------------------------- /v1/models/{model}
def _aliases(tm: Any) -> list[str]:
    """Names the API accepts that ``/v1/models`` does not list."""
    path = str(tm.server_args.model_path)
    return [f"{ADMIN_NAMES[0]}/", f"{ADMIN_NAMES[1]}/", "default", path, path + "/"]


def test_pollinations_13798_retrieving_an_accepted_alias_answers_the_listed_card(
    admin: tuple[Any, Any],
) -> None:
    """pollinations/pollinations#13798 (a retrieval by alias must resolve to the canonical model
    id, in the list's shape) and stulzq/azure-openai-proxy#76 (an ``id`` that is not the model's
    listed id breaks applications that use it). Expected: every name the API accepts retrieves
    a card equal to the card ``GET /v1/models`` lists for the served name it stands for (the
    same-named one, else the first), read through the ``openai`` client's ``Model`` type."""
    from openai.types import Model

    client, tm = admin
    listed = {c["id"]: c for c in client.get("/v1/models", headers=AUTH).json()["data"]}
    assert sorted(listed) == sorted(ADMIN_NAMES)
    expected = {
        f"{ADMIN_NAMES[0]}/": ADMIN_NAMES[0],
        f"{ADMIN_NAMES[1]}/": ADMIN_NAMES[1],
        "default": ADMIN_NAMES[0],
    }
    for alias in _aliases(tm):
        r = client.get(f"/v1/models/{alias}", headers=AUTH)
        assert r.status_code == 200, (alias, r.text)
        card = Model.model_validate(r.json())
        assert card.id in listed, (alias, card.id)
        assert card.id == expected.get(alias, ADMIN_NAMES[0]), alias
        assert r.json() == listed[card.id], alias


def test_bounty_challenge_14657_each_listed_id_retrieves_itself_anthropic_shape_too(
    admin: tuple[Any, Any],
) -> None:
    """BaseIntelligence/bounty-challenge#14657: ids listed by ``/models`` were not retrievable
    by ``/models/:id``. Expected: each listed id retrieves its own card, and in Anthropic's shape
    (``anthropic-version``) an accepted alias answers an id of Anthropic's own list too."""
    client, tm = admin
    for name in ADMIN_NAMES:
        r = client.get(f"/v1/models/{name}", headers=AUTH)
        assert r.status_code == 200 and r.json()["id"] == name
    ah = {**AUTH, "anthropic-version": "2023-06-01"}
    a_listed = {m["id"] for m in client.get("/v1/models", headers=ah).json()["data"]}
    assert a_listed == set(ADMIN_NAMES)
    for alias in _aliases(tm):
        r = client.get(f"/v1/models/{alias}", headers=ah)
        assert r.status_code == 200, (alias, r.text)
        assert r.json()["type"] == "model" and r.json()["id"] in a_listed, (alias, r.json()["id"])
    assert client.get("/v1/models/no-such-model", headers=AUTH).status_code == 404


# --------------------------------------------------------------------------- /metrics
def test_storj_7114_each_series_once_per_page_under_concurrent_observations(
    admin: tuple[Any, Any],
) -> None:
    """storj/storj#7114 (``/metrics`` had duplicate series: "Error on ingesting samples with
    different value but same timestamp") and dotnet/dotnet-monitor#13 (samples carrying their own
    timestamps, refused as out of order). Expected: while requests finish on other threads,
    every scrape parses with ``prometheus_client``'s parser, lists each series (name and label
    set) once, and carries no sample timestamp."""
    from prometheus_client.parser import text_string_to_metric_families

    client, tm = admin
    m = tm.metrics
    m.observe_ttft(0.05, is_streaming=True)
    m.observe_stages({"prefill_waiting": 0.01})
    stop = threading.Event()

    def traffic(streaming: bool) -> None:
        while not stop.is_set():
            m.observe_finished(7, 3, 0.2, cached_tokens=2, decode_s=0.1, is_streaming=streaming)
            m.observe_finished(5, 0, 0.1, aborted=True, is_streaming=streaming)
            stop.wait(0.002)

    workers = [threading.Thread(target=traffic, args=(s,)) for s in (True, False)]
    for w in workers:
        w.start()
    try:
        for _ in range(3):
            r = client.get("/metrics", headers={**AUTH, "X-Prometheus-Scrape-Timeout-Seconds": "0.05"})
            assert r.status_code == 200
            series: Counter[tuple[str, frozenset[tuple[str, str]]]] = Counter()
            for fam in text_string_to_metric_families(r.text):
                for s in fam.samples:
                    assert s.timestamp is None, s
                    series[(s.name, frozenset(s.labels.items()))] += 1
            assert series and [k for k, n in series.items() if n > 1] == []
            names = {name for name, _ in series}
            assert {"sglang:e2e_request_latency_seconds_count", "sglang:num_aborted_requests_total"} <= names
    finally:
        stop.set()
        for w in workers:
            w.join()


# --------------------------------------------------------------------------- /abort_request
@pytest.mark.parametrize(
    "body",
    [{"rid": ""}, {"rid": "", "prefix": True}, {"rid": None, "abort_all": False}, {}],
    ids=["empty", "empty-prefix", "null", "no-fields"],
)
def test_fastdeploy_7615_an_abort_naming_nothing_aborts_nothing(
    admin: tuple[Any, Any], inbox: _Inbox, body: dict[str, Any]
) -> None:
    """PaddlePaddle/FastDeploy#7615: an abort with ``abort_all`` false and no request ids still
    sent an abort message (which the engine then failed on). Expected (SGLang's
    ``/abort_request``: an empty ``rid`` names no request; an empty prefix is no prefix): 200, and
    nothing reaches the scheduler; the requests in flight are untouched. A prefix that names
    them aborts exactly them (the recorder sees aborts when there are some)."""
    client, tm = admin
    r = client.post("/abort_request", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    assert inbox.sent == [] and {"r32-a", "r32-b"} <= set(tm.rid_to_state)
    r = client.post("/abort_request", json={"rid": "r32-", "prefix": True}, headers=AUTH)
    assert r.status_code == 200 and _aborted(inbox) == ["r32-a", "r32-b"]


def test_fastdeploy_6992_a_misspelled_abort_flag_aborts_nothing_and_is_named(
    admin: tuple[Any, Any], inbox: _Inbox, caplog: pytest.LogCaptureFixture
) -> None:
    """PaddlePaddle/FastDeploy#6992: a body using ``stop_all`` where the server reads
    ``abort_all`` silently aborted nothing. Expected (SGLang's ``/abort_request`` ignores keys it
    does not know): nothing is aborted, and the server's log names the ignored key so the
    misspelling is found; the real flag then aborts every request in flight."""
    client, _ = admin
    with caplog.at_level(logging.WARNING):
        r = client.post("/abort_request", json={"stop_all": True}, headers=AUTH)
    assert r.status_code == 200 and inbox.sent == []
    assert any("stop_all" in rec.getMessage() for rec in caplog.records)
    r = client.post("/abort_request", json={"abort_all": True}, headers=AUTH)
    assert r.status_code == 200 and _aborted(inbox) == ["r32-a", "r32-b"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/abort_request", {"abort_all": True}),
        ("/abort_request", {"rid": "r32-a"}),
        ("/pause_generation", {"mode": "abort"}),
        ("/flush_cache", None),
        ("/start_profile", {}),
    ],
)
def test_vllm_55521_abort_and_control_routes_need_the_key(
    admin: tuple[Any, Any], inbox: _Inbox, path: str, body: dict[str, Any] | None
) -> None:
    """vllm-project/vllm#55521 (review: a new ``/abort_requests`` route was outside the API-key
    check, so anyone reaching the port could cancel every user's requests). Expected: with
    ``--api-key`` the abort and control routes answer 401 without the key or with a wrong one,
    and nothing reaches the scheduler."""
    client, tm = admin
    for headers in ({}, {"Authorization": "Bearer wrong-key"}):
        r = client.post(path, json=body, headers=headers)
        assert r.status_code == 401, (path, headers, r.text)
    assert inbox.sent == [] and {"r32-a", "r32-b"} <= set(tm.rid_to_state)
