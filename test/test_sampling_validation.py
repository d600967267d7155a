"""Every sampling / OpenAI parameter is checked against its documented range.

OpenAI's API reference: ``temperature`` in [0, 2], ``top_p`` in (0, 1], ``n`` >= 1,
``presence_penalty`` / ``frequency_penalty`` in [-2, 2], ``logprobs`` (completions) and
``top_logprobs`` (chat) in [0, 20], ``logit_bias`` values in [-100, 100] with valid token ids as
keys, ``stop`` sequences (OpenAI documents at most 4; SGLang and vLLM take longer lists, and so do
both APIs here, up to the native cap of 32), ``max_tokens`` >= 0, ``seed`` an integer. SGLang's native
ranges (its ``sampling_params.py``): ``temperature`` >= 0, ``top_p`` in (0, 1], ``top_k`` -1 or
>= 1, ``min_p`` in [0, 1], penalties in [-2, 2], ``repetition_penalty`` in (0, 2],
``min_new_tokens`` in [0, max_new_tokens], ``max_new_tokens`` >= 0. Each value just outside a bound
gets a 400 in OpenAI's error shape naming the field (``param``), each bound itself a 200; the
native API's message names the field. Wrong JSON types are refused, not coerced (pydantic strict),
except the two numbers SGLang's and vLLM's lax validation read without doubt: 0 / 1 for a boolean
and an integral float for an integer. One exception on the OpenAI routes: ``top_k`` 0 means the
whole vocabulary there (vLLM's rule), so only values below -1 are refused.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from openai_fake_tm import FakeTM  # the tokenizer fixture `tok` comes from conftest.py
from openai_fake_tm import app_client as _client
from sglang_v4.sampling.sampling_params import SamplingParams

CHAT_MSG = [{"role": "user", "content": "hi"}]

# (field, bad values, good values) shared by both OpenAI routes
COMMON: list[tuple[str, list[Any], list[Any]]] = [
    ("temperature", [-0.1, 2.01], [0, 2, 0.7]),
    ("top_p", [0, -0.5, 1.01], [1e-9, 1]),
    ("n", [0, -1], [1, 2]),
    ("presence_penalty", [-2.01, 2.01], [-2, 2]),
    ("frequency_penalty", [-2.01, 2.01], [-2, 2]),
    (
        "logit_bias",
        [{"5": 100.5}, {"5": -101}, {"999999": 1}, {"-1": 1}, {"abc": 1}, {"1.5": 1}],
        [{"5": 100}, {"5": -100}],
    ),
    ("stop", [["a"] * 33, [""]], [["a", "b", "c", "d"], ["a", "b", "c", "d", "e", "f"], ["s"] * 32, "x"]),
    ("max_tokens", [-1], [1, 3]),  # 0 (prompt scoring) is served end to end in test_server_public_bugs
    ("seed", ["7", 7.5, True], [7, -(2**63)]),
    # 0 is the whole vocabulary on the OpenAI routes (vLLM's rule), a 400 on /generate (SGLang's)
    ("top_k", [-2], [-1, 0, 1]),
    ("min_p", [-0.1, 1.1], [0, 1]),
    ("repetition_penalty", [0, 2.01], [0.5, 2]),
    ("min_tokens", [-1], [0]),
    # Found by hand: a stop_regex that Python's re cannot compile was accepted, then raised inside
    # the scheduler loop on the first generated token and took the whole server down (503 for every
    # later request). Oracle: re.compile's own verdict on each pattern.
    ("stop_regex", ["(", ["a+", "(b"], "[z-a]", "", ["a"] * 33], ["a+", ["x", "y[0-9]{2}"], r"\bend\b"]),
]


def _body(route: str, field: str, value: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "dsv4-test", "max_tokens": 3, field: value}
    if route == "/v1/completions":
        body["prompt"] = "hello"
    else:
        body["messages"] = CHAT_MSG
    return body


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("field,bad,good", COMMON, ids=[c[0] for c in COMMON])
def test_openai_ranges(tok, route: str, field: str, bad: list[Any], good: list[Any]) -> None:  # noqa: F811
    c = _client(FakeTM(tok))
    for v in bad:
        r = c.post(route, json=_body(route, field, v))
        assert r.status_code == 400, (field, v, r.text)
        j = r.json()
        assert j["object"] == "error" and j["code"] == 400 and j["type"] == "BadRequestError"
        assert j["param"] == field or field in j["message"], (field, v, j)
    for v in good:
        r = c.post(route, json=_body(route, field, v))
        assert r.status_code == 200, (field, v, r.text)


def test_completions_logprobs_and_chat_top_logprobs(tok) -> None:  # noqa: F811
    c = _client(FakeTM(tok))
    for v, status in [(-1, 400), (21, 400), (0, 200), (20, 200)]:
        r = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "logprobs": v})
        assert r.status_code == status, (v, r.text)
        if status == 400:
            assert r.json()["param"] == "logprobs"
        body = {"messages": CHAT_MSG, "max_tokens": 2, "logprobs": True, "top_logprobs": v}
        r = c.post("/v1/chat/completions", json=body)
        assert r.status_code == status, (v, r.text)
        if status == 400:
            assert r.json()["param"] == "top_logprobs"


def test_wrong_types_are_refused_not_coerced(tok) -> None:  # noqa: F811
    c = _client(FakeTM(tok))
    for field, v in [
        ("temperature", "0.5"),
        ("temperature", True),
        ("max_tokens", "16"),
        ("max_tokens", 16.5),
        ("echo", 2),
        ("echo", "true"),
    ]:
        r = c.post("/v1/completions", json={"prompt": "x", field: v})
        assert r.status_code == 400 and r.json()["param"] == field, (field, v, r.text)
    r = c.post("/v1/chat/completions", json={"messages": CHAT_MSG, "stream": "yes"})
    assert r.status_code == 400 and r.json()["param"] == "stream"


def test_integral_numbers_are_read_as_sglang_and_vllm_read_them(tok) -> None:  # noqa: F811
    """SGLang and vLLM validate in pydantic's lax mode: ``"logprobs": 1`` is ``true`` and
    ``"max_tokens": 16.0`` is 16 there. The same bodies here give the same answer as the bodies
    written with the exact types (the oracle), on both routes and inside nested fields."""
    c = _client(FakeTM(tok))
    cases = [
        ("/v1/chat/completions", {"logprobs": 1, "top_logprobs": 2.0, "max_tokens": 4.0, "n": 1.0},
         {"logprobs": True, "top_logprobs": 2, "max_tokens": 4, "n": 1}),
        ("/v1/chat/completions", {"stream": 0, "seed": 7.0}, {"stream": False, "seed": 7}),
        ("/v1/completions", {"echo": 1, "logprobs": 1.0, "max_tokens": 3.0}, {"echo": True, "logprobs": 1, "max_tokens": 3}),
    ]  # fmt: skip
    for route, lax, exact in cases:
        got, want = (c.post(route, json={**_body(route, "max_tokens", 3), **b}) for b in (lax, exact))
        assert got.status_code == want.status_code == 200, (lax, got.text, want.text)
        strip = ("id", "created")
        g, w = ({k: v for k, v in r.json().items() if k not in strip} for r in (got, want))
        assert g == w, (lax, g, w)


def test_non_finite_json_numbers_are_refused(tok) -> None:  # noqa: F811
    c = _client(FakeTM(tok))
    for raw in (b'{"prompt": "x", "temperature": NaN}', b'{"prompt": "x", "logit_bias": {"5": Infinity}}'):
        r = c.post("/v1/completions", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400 and "Invalid JSON" in r.json()["message"]


# ------------------------------------------------------------------------------------ native
NATIVE: list[tuple[str, list[Any], list[Any]]] = [
    ("temperature", [-0.1, math.inf, math.nan], [0, 5.0]),
    ("top_p", [0, 1.01, math.nan], [1e-9, 1]),
    ("top_k", [0, -2], [-1, 1, 10**9]),
    ("min_p", [-0.1, 1.1], [0, 1]),
    ("frequency_penalty", [-2.01, 2.01, math.nan], [-2, 2]),
    ("presence_penalty", [-2.01, 2.01], [-2, 2]),
    ("repetition_penalty", [0, 2.01], [1e-3, 2]),
    ("max_new_tokens", [-1], [0, 10, None]),
    ("n", [0, 129], [1, 128]),
    (
        "logit_bias",
        [{"5": math.nan}, {"5": math.inf}, {"5": 100.5}, {"x": 1}, {True: 1}, {"5": "1"}],
        [{"5": -100}, {5: 3}],
    ),
    ("sampling_seed", [2**63, -(2**63) - 1, 1.5], [0, 2**63 - 1, -(2**63)]),
    ("stop", [[""], ["a"] * 33], [["a"] * 32]),
    ("stop_regex", ["(", ["ok", "*"], "x{2,1}", [""], ["a"] * 33], ["a+", ["(?i)stop", "[0-9]+$"]]),
]


@pytest.mark.parametrize("field,bad,good", NATIVE, ids=[c[0] for c in NATIVE])
def test_native_sampling_params_ranges(field: str, bad: list[Any], good: list[Any]) -> None:
    for v in bad:
        with pytest.raises(ValueError) as e:
            sp = SamplingParams.from_dict({field: v})
            sp.normalize(None)
            sp.verify(vocab_size=1000)
        assert field in str(e.value), (field, v, str(e.value))
    for v in good:
        sp = SamplingParams.from_dict({field: v})
        sp.normalize(None)
        sp.verify(vocab_size=1000)


@pytest.mark.parametrize("pattern", ["(", "a)", "[z-a]", "x{2,1}", "*", "(?P<n>a)(?P<n>b)", "\\"])
def test_stop_regex_verdict_is_re_compile(pattern: str) -> None:
    """Every pattern re refuses is a ValueError naming stop_regex at admission (not later)."""
    import re

    with pytest.raises(re.error):
        re.compile(pattern)
    sp = SamplingParams.from_dict({"stop_regex": pattern})
    sp.normalize(None)
    with pytest.raises(ValueError, match="stop_regex"):
        sp.verify(vocab_size=1000)


def test_min_new_tokens_bounded_by_max_new_tokens() -> None:
    with pytest.raises(ValueError, match="min_new_tokens"):
        SamplingParams(min_new_tokens=5, max_new_tokens=4).verify()
    SamplingParams(min_new_tokens=4, max_new_tokens=4).verify()
