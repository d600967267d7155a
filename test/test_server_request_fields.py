"""Request fields ``/generate`` does not know, as SGLang 0.5.23 treats them.

* A top-level field of a later SGLang version is ignored (SGLang parses the body into its
  ``GenerateReqInput`` dataclass, which drops undeclared keys) and named in one warning of the
  server log. Oracle: a cold run, the same request without the field, on the same server (the fast
  tests run the model-free FakeScheduler; the slow one the embedded model's real forward, greedy).
* A misspelt ``sampling_params`` key is SGLang's 400 ``{"error": "unknown field ..."}``. Oracle:
  SGLang's own contract check (``sglang.srt.entrypoints.api_contract.generate_contract_error``,
  from the installed ``sglang`` package) on the same body.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
from server_fixture import sse_events

pytestmark = pytest.mark.timeout(300)

#: Fields no SGLang version has (yet): a client of a later version may send such fields.
FUTURE_FIELDS: dict[str, Any] = {
    "return_future_stats": True,
    "future_options": {"mode": "x", "level": 3},
    "x_trace": [1, 2, 3],
}
#: The expected-keys part of SGLang's message: ``unknown field `k`, expected one of `a`, `b`...``.
_EXPECTED_SEP = ", expected one of "


@pytest.fixture(scope="module")
def server(plain_fake_server):  # noqa: ANN201 - a server_fixture.ServerHandle
    """The session's fake-model server (conftest ``plain_fake_server``)."""
    return plain_fake_server


def _generate(server: Any, body: dict[str, Any]) -> Any:
    """The answer of a ``/generate`` that must succeed: the JSON object, or a stream's events."""
    r = requests.post(server.url + "/generate", json=body, timeout=60, stream=bool(body.get("stream")))
    assert r.status_code == 200, r.text
    if not body.get("stream"):
        return r.json()
    # How many chunks a stream has depends on timing (the detokenizer merges the tokens that
    # arrived since its last send); SGLang's chunks are cumulative, so the last one before
    # ``[DONE]`` carries the whole answer.
    events = sse_events(r)
    assert events[-1] == "[DONE]" and len(events) >= 2, events
    return events[-2]


def _comparable(out: Any) -> Any:
    """An answer without what differs between two runs of one request (ids, timings)."""
    if isinstance(out, list):
        return [_comparable(o) for o in out]
    if not isinstance(out, dict):
        return out
    meta = {k: v for k, v in out["meta_info"].items() if k not in ("id", "e2e_latency")}
    meta = {k: v for k, v in meta.items() if not k.endswith(("_time", "_latency", "_delay", "_ts"))}
    return {**out, "meta_info": meta}


@pytest.mark.parametrize(
    "body",
    [
        {"text": "Hello there", "sampling_params": {"max_new_tokens": 7}},
        {"text": ["one", "two"], "sampling_params": {"max_new_tokens": 5}},
        {"input_ids": [10, 11, 12], "sampling_params": {"max_new_tokens": 6}, "stream": True},
        {"text": "logprobs", "sampling_params": {"max_new_tokens": 3}, "return_logprob": True},
    ],
    ids=["text", "batch", "stream-ids", "logprob"],
)
def test_future_top_level_field_gives_the_answer_without_it(server, body: dict[str, Any]) -> None:
    """A body with fields of a later SGLang version answers what the same body without them
    answers (the cold run), and the server log names the fields it ignored."""
    cold = _generate(server, body)
    with_future = _generate(server, {**body, **FUTURE_FIELDS})
    assert _comparable(with_future) == _comparable(cold)
    deadline = time.time() + 30
    while "future_options" not in server.log() and time.time() < deadline:
        time.sleep(0.1)
    warned = [line for line in server.log().splitlines() if "ignored unknown field" in line]
    assert any(all(k in line for k in FUTURE_FIELDS) for line in warned), warned[-3:]


@pytest.fixture(scope="module")
def contract_error() -> Any:
    """SGLang 0.5.23's ``/generate`` contract check: the 400 message of a body, or None."""
    api_contract = pytest.importorskip("sglang.srt.entrypoints.api_contract")
    return api_contract.generate_contract_error


@pytest.mark.parametrize(
    "body",
    [
        {"text": "hi", "sampling_params": {"max_new_tokens": 4, "temprature": 0.5}},
        {"text": "hi", "sampling_params": {"top-p": 0.9}, "stream": True},
        {"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 2}, {"max_tokens": 2}]},
        {"input_ids": [5, 6], "sampling_params": {"max_new_token": 2, "stop_token": [3]}},
    ],
    ids=["temprature", "stream", "batch", "two-unknown"],
)
def test_misspelt_sampling_key_gets_sglangs_answer(server, contract_error: Any, body: dict[str, Any]) -> None:
    """SGLang refuses an unknown ``sampling_params`` key at its contract gate: 400 with the body
    ``{"error": "unknown field `KEY`, expected one of ..."}``, naming the first unknown key, the
    same on a stream request. The keys this server lists include every key SGLang lists. The
    server serves on unchanged."""
    want = contract_error(body)
    assert want is not None and want.startswith("unknown field `")
    r = requests.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 400 and r.headers["content-type"] == "application/json", r.text
    got = r.json()
    assert set(got) == {"error"} and isinstance(got["error"], str), got
    assert got["error"].split(_EXPECTED_SEP)[0] == want.split(_EXPECTED_SEP)[0]
    listed = set(got["error"].split(_EXPECTED_SEP)[1].split(", "))
    assert set(want.split(_EXPECTED_SEP)[1].split(", ")) <= listed
    out = _generate(server, {"text": "still fine", "sampling_params": {"max_new_tokens": 3}})
    assert out["meta_info"]["completion_tokens"] == 3


def test_sglang_only_sampling_keys(server, contract_error: Any) -> None:
    """SGLang's ``watermark`` and ``choice`` keys (in its contract, not implemented here): unset
    they change nothing (the answer is the cold run's), set they are a 400 naming the key."""
    body = {"text": "keys", "sampling_params": {"max_new_tokens": 4}}
    unset = {"max_new_tokens": 4, "watermark": None, "choice": []}
    assert contract_error({**body, "sampling_params": unset}) is None  # SGLang accepts the body too
    cold = _generate(server, body)
    assert _comparable(_generate(server, {**body, "sampling_params": unset})) == _comparable(cold)
    for key, value in (("watermark", {"enabled": True}), ("choice", ["yes", "no"])):
        r = requests.post(
            server.url + "/generate", json={**body, "sampling_params": {key: value}}, timeout=60
        )
        assert r.status_code == 400 and f"sampling_params.{key}" in r.json()["error"]["message"], r.text


@pytest.mark.slow
def test_future_fields_on_the_real_model(embedded_model_server) -> None:
    """The same on the embedded model's real forward: a greedy request with fields of a later
    SGLang version generates the cold run's tokens."""
    body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    cold = _generate(embedded_model_server, body)
    out = _generate(embedded_model_server, {**body, **FUTURE_FIELDS})
    assert out["output_ids"] == cold["output_ids"] and out["text"] == cold["text"]
