"""Fuzzing the HTTP API: hypothesis-generated bodies for ``/generate``, ``/v1/completions`` and
``/v1/chat/completions`` against a real ``launch_server`` process (the fake scheduler of
``server_fixture``: the HTTP, validation, tokenizer-manager and detokenizer layers are the real
ones; the sampler is fuzzed in-process below, and on the real model in ``test_server_public_bugs``).

Bodies mix plausible values with wrong types, huge and negative numbers, deep nesting and odd
unicode; raw bodies add malformed JSON, NaN / Infinity literals, lone surrogates, invalid UTF-8,
10^5-deep nesting and oversized bodies. Every answer must be a 200 (a JSON body, or an SSE stream
ending in ``[DONE]`` whose error events are well-formed) or a 4xx with a JSON error in SGLang's
shape (native) or OpenAI's (``/v1``); never a 5xx, never a dropped connection; the server stays
healthy. Slow clients: a request head or body that does not arrive within the read timeout is cut
off (connection closed / 408) while other clients are served. Bounded: fixed example counts,
``derandomize=True``.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
import requests
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_fixture import fake_env, make_fake_model_dir, start_server
from sglang_v4.sampling.sampler import sample
from sglang_v4.sampling.sampling_params import SamplingParams

pytestmark = pytest.mark.timeout(600)

BODY_LIMIT = 256 * 1024
READ_TIMEOUT = 3
FUZZ = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("fuzz")
    env = fake_env(
        {
            "FAKE_STEP_SLEEP": "0",
            "SGLANG_V4_MAX_REQUEST_BODY_BYTES": str(BODY_LIMIT),
            "SGLANG_V4_REQUEST_READ_TIMEOUT": str(READ_TIMEOUT),
        }
    )
    h = start_server(["--model-path", str(make_fake_model_dir(root))], env, root / "server.log")
    yield h
    assert h.stop() == 0
    assert "Traceback" not in h.log(), h.log()[-5000:]


# ------------------------------------------------------------------------------------ strategies
ODD_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40
) | st.sampled_from(["", "\x00", "\u202e\u200b", "😀" * 20, "<｜end▁of▁sentence｜>", "\ufffd", "a" * 5000])
NUMBERS = st.one_of(
    st.integers(-5, 600),
    st.integers(-(2**80), 2**80),
    st.sampled_from([0, -1, 2**31, 2**63, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1e-320, 1e308, -1e308, 0.5, 2.0000001]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, ODD_TEXT)
JSON = st.recursive(
    SCALARS,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(ODD_TEXT, kids, max_size=4),
    max_leaves=10,
)


def _junk_or(plausible: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(plausible, plausible, JSON)


PROMPT_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=30
)
TOKEN_IDS = st.lists(st.integers(0, 129_279), min_size=1, max_size=8)

# Plausible values: in range, at the edges of the ranges, or just outside them.
SAMPLING_FIELDS: dict[str, st.SearchStrategy] = {
    "max_new_tokens": st.integers(-1, 8),
    "min_new_tokens": st.integers(-1, 4),
    "temperature": st.sampled_from([0.0, 1e-7, 0.5, 1.0, 2.0, 2.5, 1e6, -0.1]) | st.floats(0, 3),
    "top_p": st.sampled_from([1e-9, 0.5, 1.0, 0.0, 1.1]),
    "top_k": st.sampled_from([-1, 0, 1, 5, 129_280, 10**9, -2]),
    "min_p": st.sampled_from([0.0, 0.5, 1.0, 1.5, -0.1]),
    "frequency_penalty": st.floats(-2.5, 2.5),
    "presence_penalty": st.floats(-2.5, 2.5),
    "repetition_penalty": st.sampled_from([0.0, 0.5, 1.0, 2.0, 2.5]),
    "n": st.integers(0, 3),
    "stop": st.lists(PROMPT_TEXT, max_size=5) | PROMPT_TEXT | st.just(""),
    "stop_token_ids": st.lists(st.integers(-1, 129_281), max_size=3),
    "logit_bias": st.dictionaries(
        st.integers(-1, 129_281).map(str) | st.sampled_from(["a", "1.5", " 7", "007"]),
        st.sampled_from([-100, 100, 5.5, 101, -1e9]),
        max_size=3,
    ),
    "sampling_seed": st.integers(-(2**64), 2**64) | st.integers(0, 100),
    "ignore_eos": st.booleans(),
    "skip_special_tokens": st.booleans(),
    "no_stop_trim": st.booleans(),
    "stream_interval": st.integers(0, 3),
    "json_schema": st.just('{"type": "object"}'),
    "custom_params": JSON,
    "bogus_field": JSON,
}


@st.composite
def _mutated(draw: Any, base: dict[str, st.SearchStrategy], required: dict[str, st.SearchStrategy]) -> Any:
    """A body of required fields and some optional ones (plausible values), then 0-2 mutations:
    a field's value replaced by arbitrary JSON, a required field dropped, an unknown field added
    (nested ``sampling_params`` fields are mutated the same way), or the whole body replaced."""
    if draw(st.integers(0, 19)) == 0:
        return draw(JSON)
    body = {k: draw(v) for k, v in required.items()}
    for k in draw(st.lists(st.sampled_from(sorted(base)), max_size=6, unique=True)):
        body[k] = draw(base[k])
    for _ in range(draw(st.integers(0, 2))):
        target = body
        if isinstance(body.get("sampling_params"), dict) and draw(st.booleans()):
            target = body["sampling_params"]
        kind = draw(st.sampled_from(["junk", "junk", "drop", "extra"]))
        if kind == "extra":
            target[draw(ODD_TEXT)] = draw(JSON)
        elif target:
            key = draw(st.sampled_from(sorted(target)))
            if kind == "drop":
                del target[key]
            else:
                target[key] = draw(JSON | NUMBERS)
    return body


SAMPLING = st.fixed_dictionaries(
    {}, optional={k: v for k, v in SAMPLING_FIELDS.items() if k != "bogus_field"}
)
GENERATE = _mutated(
    {
        "sampling_params": SAMPLING | st.lists(SAMPLING, min_size=1, max_size=3),
        "rid": PROMPT_TEXT,
        "return_logprob": st.booleans(),
        "logprob_start_len": st.integers(-2, 5),
        "top_logprobs_num": st.integers(-1, 3),
        "token_ids_logprob": st.lists(st.integers(0, 5), max_size=2),
        "stream": st.booleans(),
        "priority": st.integers(-(2**64), 2**64),
        "image_data": JSON,
        "unknown": JSON,
    },
    {"text": PROMPT_TEXT | st.lists(PROMPT_TEXT, min_size=1, max_size=3) | ODD_TEXT},
) | _mutated({"sampling_params": SAMPLING, "stream": st.booleans()}, {"input_ids": TOKEN_IDS})

OPENAI_FIELDS: dict[str, st.SearchStrategy] = {
    "model": st.sampled_from(["default", "default", "nope"]),
    "max_tokens": st.integers(-1, 8) | st.none(),
    "max_completion_tokens": st.integers(-1, 8),
    "n": st.integers(0, 3),
    "temperature": SAMPLING_FIELDS["temperature"],
    "top_p": SAMPLING_FIELDS["top_p"],
    "top_k": SAMPLING_FIELDS["top_k"],
    "min_p": SAMPLING_FIELDS["min_p"],
    "frequency_penalty": SAMPLING_FIELDS["frequency_penalty"],
    "presence_penalty": SAMPLING_FIELDS["presence_penalty"],
    "repetition_penalty": SAMPLING_FIELDS["repetition_penalty"],
    "stop": SAMPLING_FIELDS["stop"],
    "stop_token_ids": SAMPLING_FIELDS["stop_token_ids"],
    "logit_bias": SAMPLING_FIELDS["logit_bias"],
    "seed": SAMPLING_FIELDS["sampling_seed"],
    "min_tokens": st.integers(-1, 4),
    "ignore_eos": st.booleans(),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
    "user": PROMPT_TEXT,
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}, {"type": "nope"}])
    | st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema": JSON}),
    "bogus": JSON,
}
COMPLETIONS = _mutated(
    {**OPENAI_FIELDS, "echo": st.booleans(), "logprobs": st.integers(-1, 21), "suffix": PROMPT_TEXT},
    {"prompt": PROMPT_TEXT | st.lists(PROMPT_TEXT, min_size=1, max_size=3) | TOKEN_IDS | ODD_TEXT},
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "user", "assistant", "tool", "developer", "wizard"])},
    optional={
        "content": PROMPT_TEXT
        | ODD_TEXT
        | st.none()
        | st.lists(
            st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": ODD_TEXT}),
            max_size=2,
        ),
        "name": PROMPT_TEXT,
    },
)
CHAT = _mutated(
    {
        **OPENAI_FIELDS,
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(-1, 21),
        "tools": JSON,
        "tool_choice": JSON,
        "reasoning_effort": st.sampled_from(["low", "high", "max"]) | ODD_TEXT,
        "chat_template_kwargs": st.fixed_dictionaries({}, optional={"thinking": st.booleans()}) | JSON,
        "continue_final_message": st.booleans(),
        "separate_reasoning": st.booleans(),
    },
    {"messages": st.lists(MESSAGE, min_size=1, max_size=3)},
)


# ------------------------------------------------------------------------------------ checks
def _check_error(body: Any, status: int, openai: bool) -> None:
    if openai:
        assert body["object"] == "error" and isinstance(body["message"], str) and body["code"] == status, body
    elif isinstance(body["error"], str):  # SGLang's contract refusal: an unknown sampling_params key
        assert status == 400 and body["error"].startswith("unknown field `"), body
    else:
        assert isinstance(body["error"]["message"], str), body


def _check(resp: requests.Response, openai: bool) -> None:
    status = resp.status_code
    assert status < 500, (status, resp.text[:2000])
    assert status in (200, 400, 404, 413), (status, resp.text[:500])
    if status != 200:
        _check_error(resp.json(), status, openai)
        return
    if not resp.headers.get("content-type", "").startswith("text/event-stream"):
        resp.json()
        return
    events = [b for b in resp.text.split("\n\n") if b]
    assert events[-1] == "data: [DONE]", events[-3:]
    for e in events[:-1]:
        payload = json.loads(e[len("data: ") :])
        if "error" in payload:
            err = payload["error"]
            assert isinstance(err["message"], str) and 400 <= int(err["code"]) < 500, err


def _post(server, path: str, body: Any) -> requests.Response:
    return requests.post(server.url + path, json=body, timeout=120)


@FUZZ
@given(body=GENERATE)
def test_fuzz_generate(server, body: Any) -> None:
    _check(_post(server, "/generate", body), openai=False)


@FUZZ
@given(body=COMPLETIONS)
def test_fuzz_completions(server, body: Any) -> None:
    _check(_post(server, "/v1/completions", body), openai=True)


@FUZZ
@given(body=CHAT)
def test_fuzz_chat_completions(server, body: Any) -> None:
    _check(_post(server, "/v1/chat/completions", body), openai=True)


RAW_BODIES = [
    b"",
    b"null",
    b"{not json",
    b'{"text": "a", "sampling_params": {"temperature": NaN}}',
    b'{"text": "a", "sampling_params": {"temperature": Infinity}}',
    b'{"text": "a", "sampling_params": {"max_new_tokens": 1e999}}',
    b'{"text": "\\ud800"}',
    b'{"text": "\xff\xfe invalid utf-8"}',
    b'{"text": "a", "text": 5}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"text": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"prompt": "a", "messages": [{"role": "user", "content": "\\udfff"}], "temperature": -Infinity}',
]


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions"])
def test_raw_bodies(server, path: str) -> None:
    for raw in RAW_BODIES:
        r = requests.post(
            server.url + path, data=raw, headers={"content-type": "application/json"}, timeout=60
        )
        if len(raw) > BODY_LIMIT:
            assert r.status_code == 413, raw[:50]
            _check_error(r.json(), 413, path.startswith("/v1/"))
        else:
            assert 400 <= r.status_code < 500, (raw[:80], r.status_code, r.text[:300])
            _check_error(r.json(), r.status_code, path.startswith("/v1/"))


def test_oversized_bodies_get_413_declared_or_chunked(server) -> None:
    """Both messages carry the status's reason phrase ``Payload Too Large``, which
    sgl-project/sglang:test/srt/openai_server/validation/test_request_body_validation.py::
    test_input_body_size_larger_than_maximum_allowed_payload_size_limit matches in the client's
    error text."""
    big = json.dumps({"text": "a" * (BODY_LIMIT + 10)}).encode()
    r = requests.post(
        server.url + "/generate", data=big, headers={"content-type": "application/json"}, timeout=60
    )
    msg = r.json()["error"]["message"]
    assert r.status_code == 413 and "larger than the limit" in msg and "Payload Too Large" in msg, msg

    def chunks():  # no Content-Length: chunked transfer encoding, counted as it arrives
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    r = requests.post(server.url + "/v1/completions", data=chunks(), timeout=60)
    assert r.status_code == 413 and r.json()["code"] == 413 and "Payload Too Large" in r.json()["message"]
    assert requests.get(server.url + "/health", timeout=30).status_code == 200


def _connect(server) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _read_all(s: socket.socket, limit_s: float) -> tuple[bytes, float]:
    t0 = time.time()
    data = b""
    s.settimeout(limit_s)
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return data, time.time() - t0
        data += chunk


def test_slow_clients_are_cut_off_and_do_not_block_others(server) -> None:
    head = _connect(server)  # a request head that never completes
    head.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
    body = _connect(server)  # a complete head, then a body that trickles and stops
    body.sendall(
        b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    idle = _connect(server)  # connects and sends nothing
    r = requests.post(
        server.url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2}}, timeout=30
    )
    assert r.status_code == 200  # others are served meanwhile
    got, waited = _read_all(body, 30)
    assert got.startswith(b"HTTP/1.1 408 ") and b"did not arrive within" in got
    assert waited < 25
    for s in (head, idle):
        got, waited = _read_all(s, 30)  # closed by the server (recv returns b"")
        assert got == b"" and waited < 25
    assert requests.get(server.url + "/health", timeout=30).status_code == 200


#: Every route that reads a JSON body (a client may leave any of them half-way through its body).
BODY_ROUTES = [
    "/generate", "/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages",
    "/v1/messages/count_tokens", "/v1/responses/input_tokens", "/v1/score", "/tokenize",
    "/detokenize", "/v1/batches", "/abort_request", "/pause_generation", "/continue_generation",
    "/update_weights_from_disk", "/get_weights_by_name", "/separate_reasoning", "/parse_function_call",
]  # fmt: skip


def test_client_gone_mid_body_is_quiet_on_every_route(server) -> None:
    """A client that closes its connection after part of a declared body, or sends a malformed
    chunk, ends its request without an ASGI error in the log (Starlette's ``ClientDisconnect``
    reached uvicorn as "Exception in ASGI application" with a traceback, once per such client)."""
    before = server.log()
    for path in BODY_ROUTES:
        s = _connect(server)  # 10 of the declared 100 bytes, then gone
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode())
        s.sendall(b'Content-Length: 100\r\n\r\n{"text": "')
        time.sleep(0.05)
        s.close()
        c = _connect(server)  # a chunk whose size line is not hexadecimal
        c.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        c.sendall(b'5\r\n{"a":\r\nzz\r\n')
        got, _ = _read_all(c, 10)
        assert got.startswith(b"HTTP/1.1 400 "), (path, got[:200])
    deadline = time.time() + 10  # the server sees each disconnect asynchronously
    while server.log().count("before sending its whole body") < len(BODY_ROUTES) and time.time() < deadline:
        time.sleep(0.1)
    new = server.log()[len(before) :]
    assert "Exception in ASGI application" not in new and "Traceback" not in new, new[-3000:]
    r = _post(server, "/generate", {"text": "ok", "sampling_params": {"max_new_tokens": 2}})
    assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 2


#: What ``sglang-router`` sends each replica at start-up to probe for gRPC: the HTTP/2 connection
#: preface (RFC 9113, section 3.4) and an empty SETTINGS frame.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@pytest.mark.parametrize("split", [None, 3, 15])
def test_http2_preface_is_closed_quietly(server, split: int | None) -> None:
    before = server.log().count("Invalid HTTP request received")
    s = _connect(server)
    parts = [H2_PREFACE] if split is None else [H2_PREFACE[:split], H2_PREFACE[split:]]
    for part in parts:
        s.sendall(part)
        time.sleep(0.05)
    got, waited = _read_all(s, 10)
    assert got == b"" and waited < 5  # closed, no HTTP/1.1 answer to an HTTP/2 client
    # HTTP/1.1 whose first bytes match the preface's ("P" of POST) and garbage still go to h11
    r = requests.post(server.url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 200
    g = _connect(server)
    g.sendall(b"PRX / HTTP/1.1\r\n\r\n")
    got, _ = _read_all(g, 10)
    assert got.startswith(b"HTTP/1.1 400 ")
    time.sleep(0.2)
    # only the garbage request is logged as invalid, not the HTTP/2 client
    assert server.log().count("Invalid HTTP request received") == before + 1


def test_server_healthy_after_fuzzing(server) -> None:
    assert requests.get(server.url + "/health", timeout=30).status_code == 200
    r = _post(server, "/generate", {"text": "ok", "sampling_params": {"max_new_tokens": 3}})
    assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 3


# ------------------------------------------------------------------------------------ sampler
@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    params=st.lists(st.fixed_dictionaries({}, optional=SAMPLING_FIELDS), min_size=1, max_size=3),
    data=st.data(),
)
def test_fuzz_sampler_accepts_what_validation_accepts(params: list[dict[str, Any]], data: Any) -> None:
    """Whatever ``SamplingParams`` validation accepts, the sampler turns into a valid token id
    (no exception, no NaN pick), also with extreme but valid logits."""
    vocab = 300
    ok = []
    for d in params:
        d = {k: v for k, v in d.items() if k not in ("bogus_field", "json_schema", "regex")}
        try:
            sp = SamplingParams.from_dict(d)
            sp.normalize(None)
            sp.verify(vocab)
        except (ValueError, TypeError):
            continue
        ok.append(sp)
    if not ok:
        return
    scale = data.draw(st.sampled_from([1.0, 1e4, 1e30]), label="logit scale")
    logits = torch.randn(len(ok), vocab, generator=torch.Generator().manual_seed(0)) * scale
    outs = [[1, 2, 3] for _ in ok]
    gens = [
        torch.Generator().manual_seed(sp.sampling_seed) if sp.sampling_seed is not None else None for sp in ok
    ]
    ids, lps = sample(logits, ok, outs, [[4, 5]] * len(ok), gens, eos_token_ids=[1], return_logprobs=True)
    assert ids.shape == (len(ok),) and bool(((ids >= 0) & (ids < vocab)).all())
    assert not torch.isnan(lps).any()
