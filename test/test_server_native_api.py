"""Native HTTP API of the real server process (``launch_server``) over a model-free scheduler.

The scheduler is ``server_fixture.FakeScheduler`` (emits the tokens of ``FAKE_TEXT`` in order), so
the expected texts are computed here independently with the tokenizer: the tests check the
tokenizer manager, ZMQ wiring, detokenizer, HTTP layer, SSE format and error handling.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
import requests
from server_fixture import (
    FAKE_CONTEXT_LEN,
    FAKE_TEXT,
    FAKE_VOCAB,
    fake_output_text,
    hf_auto_tokenizer,
    hold_until_tag,
    sse_events,
)

pytestmark = pytest.mark.timeout(300)
HOLD = "[hold]"  # FakeScheduler's FAKE_HOLD_ON_TEXT: such a request runs until it is aborted


@pytest.fixture(scope="module")
def model_dir(shared_fake_model_dir: Path) -> Path:
    """The model directory of conftest's ``held_fake_server``."""
    return shared_fake_model_dir


@pytest.fixture(scope="module")
def server(held_fake_server):  # noqa: ANN001, ANN201 - a server_fixture.ServerHandle
    """conftest's session fake-model server on :func:`model_dir` with default flags (``[hold]``
    prompts held until aborted; every wait here is on a condition, none on the fake model's step
    time)."""
    return held_fake_server


@pytest.fixture(scope="module")
def tok():
    return hf_auto_tokenizer()


def expected_text(tok, n: int) -> str:
    return fake_output_text(tok, n)


def gen(server, body, **kw) -> requests.Response:
    return requests.post(server.url + "/generate", json=body, timeout=60, **kw)


# ----------------------------------------------------------------------------- happy paths
def test_generate_single_text(server, tok):
    r = gen(server, {"text": "Hello there", "sampling_params": {"max_new_tokens": 20, "temperature": 0}})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["text"] == expected_text(tok, 20)
    assert out["output_ids"] == [tok.encode(FAKE_TEXT)[i] for i in range(20)]
    m = out["meta_info"]
    assert m["finish_reason"] == {"type": "length", "length": 20}
    assert m["prompt_tokens"] == len(tok.encode("Hello there"))
    assert m["completion_tokens"] == 20 and m["cached_tokens"] == 0
    assert isinstance(m["id"], str) and m["e2e_latency"] > 0


def test_generate_input_ids_and_batch_order(server, tok):
    r = gen(server, {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3}, "rid": "ids-single"})
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["prompt_tokens"] == 3 and r.json()["meta_info"]["id"] == "ids-single"
    # Batch of input_ids with different lengths, n=2: outputs grouped by prompt (SGLang order).
    r = gen(server, {"input_ids": [[1, 2], [3, 4, 5, 6]], "sampling_params": {"max_new_tokens": 4, "n": 2}})
    assert r.status_code == 200, r.text
    outs = r.json()
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [2, 2, 4, 4]
    assert len({o["meta_info"]["id"] for o in outs}) == 4
    assert all(o["text"] == expected_text(tok, 4) for o in outs)
    # Batch of texts with per-item sampling params.
    r = gen(
        server,
        {
            "text": ["a", "b c d"],
            "sampling_params": [{"max_new_tokens": 2}, {"max_new_tokens": 5}],
            "rid": ["x", "y"],
        },
    )
    outs = r.json()
    assert [o["meta_info"]["id"] for o in outs] == ["x", "y"]
    assert [o["meta_info"]["completion_tokens"] for o in outs] == [2, 5]


def test_streaming_cumulative_and_done(server, tok, tmp_path: Path):
    # held after its first token until the file exists (read the first event, then created): the
    # stream has a chunk before the last one however a loaded machine merges outputs
    release = tmp_path / "release"
    body = {
        "text": f"Hi {hold_until_tag(release)}",
        "sampling_params": {"max_new_tokens": 24},
        "stream": True,
    }
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r, release)
    assert events[-1] == "[DONE]" and events[0]["text"] == expected_text(tok, 1)
    chunks = events[:-1]
    assert len(chunks) >= 2
    texts = [c["text"] for c in chunks]
    for a, b in zip(texts, texts[1:]):
        assert b.startswith(a)  # cumulative
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert texts[-1] == expected_text(tok, 24)
    # No chunk ever shows a replacement character from a split multi-byte character.
    assert all("\ufffd" not in t for t in texts)


def test_batch_streaming_has_index(server):
    body = {"text": ["a", "b"], "sampling_params": {"max_new_tokens": 3}, "stream": True}
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    finals = [e for e in events[:-1] if e["meta_info"]["finish_reason"] is not None]
    assert sorted(e["index"] for e in finals) == [0, 1]


def test_stop_string_trim_and_no_trim(server, tok):
    full = expected_text(tok, 30)
    stop = "fox"
    assert stop in full
    r = gen(server, {"text": "x", "sampling_params": {"max_new_tokens": 30, "stop": stop}})
    out = r.json()
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == full[: full.index(stop)]
    r = gen(
        server, {"text": "x", "sampling_params": {"max_new_tokens": 30, "stop": [stop], "no_stop_trim": True}}
    )
    assert r.json()["text"] == full[: full.index(stop) + len(stop)]
    # Streaming never shows text that the final (trimmed) text does not start with.
    body = {"text": "x", "sampling_params": {"max_new_tokens": 30, "stop": "jumps over"}, "stream": True}
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as resp:
        chunks = sse_events(resp)[:-1]
    final = chunks[-1]["text"]
    assert final == full[: full.index("jumps over")]
    assert all(final.startswith(c["text"]) for c in chunks)


def test_stop_token_ids_trimmed_from_text(server, tok):
    stop_id = tok.encode(" zebra")[0]
    r = gen(server, {"text": "x", "sampling_params": {"max_new_tokens": 10, "stop_token_ids": [stop_id]}})
    out = r.json()
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}
    assert out["output_ids"][-1] == stop_id and len(out["output_ids"]) == 4
    assert out["text"] == expected_text(tok, 3)


def test_logprobs_format(server, tok):
    body = {
        "text": "Hello world again",
        "sampling_params": {"max_new_tokens": 3},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 2,
        "return_text_in_logprobs": True,
    }
    m = gen(server, body).json()["meta_info"]
    prompt = tok.encode("Hello world again")
    assert [e[1] for e in m["input_token_logprobs"]] == prompt
    assert m["input_token_logprobs"][0][0] is None
    assert [e[2] for e in m["input_token_logprobs"]] == [tok.decode([t]) for t in prompt]
    assert len(m["output_token_logprobs"]) == 3
    assert all(e[0] == -0.25 for e in m["output_token_logprobs"])
    assert len(m["output_top_logprobs"]) == 3 and len(m["output_top_logprobs"][0]) == 2
    assert m["output_top_logprobs"][0][1][:2] == [-0.1, 1]
    # Without return_text_in_logprobs the text slot is null; default start = output only.
    m = gen(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2}, "return_logprob": True}).json()[
        "meta_info"
    ]
    assert all(e[2] is None for e in m["output_token_logprobs"])
    assert "output_top_logprobs" not in m
    assert "output_token_ids_logprobs" not in m


def test_token_ids_logprob_format(server, tok):
    """SGLang's ``token_ids_logprob`` (was a 400 "not supported"): ``input_token_ids_logprobs`` /
    ``output_token_ids_logprobs`` hold, per position, ``[logprob, token_id, text]`` for each asked
    id in its order (``None`` for the first prompt position); a batch takes one list per prompt.
    Values are the fake scheduler's (-1 - 0.001 * id, exact through JSON); texts from the HF
    tokenizer."""
    tids = [5, 1000, 7]
    body = {
        "text": "Hello world again",
        "sampling_params": {"max_new_tokens": 3},
        "return_logprob": True,
        "logprob_start_len": 0,
        "token_ids_logprob": tids,
        "return_text_in_logprobs": True,
    }
    want = [[-1.0 - 0.001 * t, t, tok.decode([t])] for t in tids]
    for stream in (False, True):
        if stream:
            m = sse_events(gen(server, {**body, "stream": True}, stream=True))[-2]["meta_info"]
        else:
            m = gen(server, body).json()["meta_info"]
        n_prompt = len(tok.encode("Hello world again"))
        assert m["input_token_ids_logprobs"][0] is None
        assert m["input_token_ids_logprobs"][1:] == [want] * (n_prompt - 1)
        assert m["output_token_ids_logprobs"] == [want] * 3
    batch = {
        "text": ["a", "b"],
        "sampling_params": {"max_new_tokens": 2},
        "return_logprob": True,
        "token_ids_logprob": [[3], [4, 9]],
    }
    out = gen(server, batch).json()
    assert [o["meta_info"]["output_token_ids_logprobs"] for o in out] == [
        [[[-1.0 - 0.001 * t, t, None] for t in ids]] * 2 for ids in ([3], [4, 9])
    ]


# ----------------------------------------------------------------------------- bad input
BAD_BODIES = [
    ({"text": 123}, "text must be"),
    ({"text": "a", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
    ({"text": "a", "sampling_params": {"temperature": "hot"}}, "temperature"),
    ({"text": "a", "sampling_params": {"n": 100000}}, "n must be"),
    ({"text": "a", "sampling_params": {"top_p": 0}}, "top_p"),
    ({"text": ""}, "empty"),
    ({"input_ids": []}, "empty"),
    ({"input_ids": [1, FAKE_VOCAB + 5]}, "outside the vocabulary"),
    ({"input_ids": [1, -3]}, "outside the vocabulary"),
    ({"input_ids": [1] * (FAKE_CONTEXT_LEN + 10)}, "context length"),
    ({"input_ids": [1] * 100, "sampling_params": {"max_new_tokens": FAKE_CONTEXT_LEN}}, "context length"),
    ({"input_ids": [1, 2.5]}, "input_ids must be"),
    ({"text": "a", "input_ids": [1]}, "exactly one"),
    ({}, "exactly one"),
    ({"text": "a", "stream": "yes"}, "stream must be"),
    ({"text": "a", "image_data": "http://x/y.png"}, "not supported"),
    ({"text": "a", "return_logprob": True, "logprob_start_len": 50}, "logprob_start_len"),
    ({"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 1}]}, "batch size"),
    ({"text": "a", "sampling_params": {"json_schema": "{}"}}, "not supported"),
    ([1, 2, 3], "JSON object"),
    ({"text": "a", "priority": 1 << 70}, "priority"),
    ({"text": "a", "priority": "high"}, "priority"),
    ({"text": "a", "return_logprob": True, "token_ids_logprob": [FAKE_VOCAB]}, "token_ids_logprob"),
    ({"text": "a", "return_logprob": True, "token_ids_logprob": [True]}, "token_ids_logprob"),
    ({"text": "a", "return_logprob": True, "token_ids_logprob": "5"}, "token_ids_logprob"),
    ({"text": ["a", "b"], "return_logprob": True, "token_ids_logprob": {"x": 1}}, "token_ids_logprob"),
    ({"text": ["a", "b"], "return_logprob": True, "token_ids_logprob": 5}, "token_ids_logprob"),
    ({"text": ["a", "b"], "return_logprob": True, "token_ids_logprob": [[1], [2], [3]]}, "token_ids_logprob"),
]


@pytest.mark.parametrize("body,needle", BAD_BODIES, ids=[str(i) for i in range(len(BAD_BODIES))])
def test_bad_input_gets_400(server, body, needle):
    for stream in (False, True):
        if stream and isinstance(body, dict):
            body = {**body, "stream": body.get("stream", True)}
        r = requests.post(server.url + "/generate", json=body, timeout=30)
        assert r.status_code == 400, (body, r.status_code, r.text)
        msg = r.json()["error"]["message"]
        assert needle.lower() in msg.lower(), msg


#: Batches whose one entry is bad, each with the entry as the client sent it (the oracle: its
#: index in the request) and a phrase the message kept from before.
BAD_BATCH_ENTRIES = [
    ({"text": ["a", 5, "c"]}, "text[1]", "text must be"),
    ({"input_ids": [[1, 2], [3, "x"]]}, "input_ids[1][1]", "input_ids must be"),
    ({"input_ids": [[1, 2], 7]}, "input_ids[1]", "input_ids must be"),
    ({"input_ids": [[1, 2], [3], []]}, "input_ids[2]", "every prompt must contain at least one token"),
    ({"input_ids": [[1, 2], [1, FAKE_VOCAB + 5]]}, "input_ids[1]", "outside the vocabulary"),
    ({"input_ids": [[1], [2], [1] * (FAKE_CONTEXT_LEN + 10)]}, "input_ids[2]", "context length"),
    ({"text": ["a", "b", ""]}, "text[2]", "empty"),
    ({"text": ["a", "word " * 4000]}, "text[1]", "context length"),
    # n > 1: the engine's requests are grouped by prompt, the name is the prompt's index as sent
    ({"input_ids": [[1, 2], [1, -3]], "sampling_params": {"n": 2}}, "input_ids[1]", "outside the vocabulary"),
    # per-entry sampling parameters: the entry whose parameters are bad
    ({"text": ["a", "b"], "sampling_params": [{}, {"top_p": 0}]}, "text[1]", "top_p"),
]  # fmt: skip


@pytest.mark.parametrize(
    "body,entry,kept", BAD_BATCH_ENTRIES, ids=[str(i) for i in range(len(BAD_BATCH_ENTRIES))]
)
def test_bad_batch_entry_is_named(server, body, entry, kept):
    """A ``/generate`` batch whose one entry is bad: the 400 names that entry (``text[2]``,
    ``input_ids[1][1]``), streamed or not, so a client with many prompts can find it; the message
    keeps what it said before (appended to, not replaced) and the status. A single prompt (also
    with ``n > 1``) is not called a batch entry."""
    for stream in (False, True):
        r = requests.post(server.url + "/generate", json={**body, "stream": stream}, timeout=60)
        assert r.status_code == 400, (body, r.status_code, r.text)
        msg = r.json()["error"]["message"]
        assert re.search(re.escape(entry) + r"(?![\[\d])", msg) and kept.lower() in msg.lower(), msg
    single = {"input_ids": [1, FAKE_VOCAB + 5], "sampling_params": {"n": 2}}
    r = requests.post(server.url + "/generate", json=single, timeout=60)
    assert r.status_code == 400 and "batch entry" not in r.json()["error"]["message"], r.text


def test_malformed_json_and_server_keeps_serving(server, tok):
    r = requests.post(
        server.url + "/generate",
        data=b'{"text": "a", ',
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400 and "Malformed JSON" in r.json()["error"]["message"]
    r = gen(server, {"text": "still alive?", "sampling_params": {"max_new_tokens": 5}})
    assert r.status_code == 200 and r.json()["text"] == expected_text(tok, 5)
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


# ----------------------------------------------------------------------------- other endpoints
def test_info_endpoints(server, model_dir):
    for path in ("/model_info", "/get_model_info"):
        m = requests.get(server.url + path, timeout=10).json()
        assert m["model_path"] == str(model_dir) and m["tokenizer_path"] == str(model_dir)
        assert m["is_generation"] is True and m["model_type"] == "deepseek_v4"
    for path in ("/server_info", "/get_server_info"):
        s = requests.get(server.url + path, timeout=10).json()
        assert s["page_size"] == 256 and s["context_len"] == FAKE_CONTEXT_LEN
        assert "kv_pool" in s and s["internal_states"][0]["kv_pool"] == s["kv_pool"]
    assert requests.get(server.url + "/health_generate", timeout=30).status_code == 200
    r = requests.post(server.url + "/flush_cache", timeout=10)
    assert r.status_code == 200 and r.text.startswith("Cache flushed")
    assert requests.get(server.url + "/metrics", timeout=10).status_code == 404  # metrics off


def _used_pages(server) -> int:
    return requests.get(server.url + "/server_info", timeout=10).json()["kv_pool"]["used_pages"]


def _wait_running(server, n: int = 1) -> None:
    deadline = time.time() + 30
    while time.time() < deadline and _server_info(server)["num_running_reqs"] < n:
        time.sleep(0.05)
    assert _server_info(server)["num_running_reqs"] >= n


def _server_info(server) -> dict:
    return requests.get(server.url + "/server_info", timeout=10).json()


def test_client_disconnect_mid_stream_returns_pages(server):
    idle = _used_pages(server)
    # a held request (see FakeScheduler) runs until it is aborted, however slow this machine is
    body = {"text": f"{HOLD} long one", "sampling_params": {"max_new_tokens": 400}, "stream": True}
    r = requests.post(server.url + "/generate", json=body, stream=True, timeout=60)
    lines = r.iter_lines()  # kept referenced: a dropped generator closes the connection
    first = next(line for line in lines if line)
    assert json.loads(first[len(b"data: ") :])["meta_info"]["finish_reason"] is None
    assert _used_pages(server) > idle  # the request holds pages while it runs
    r.close()  # client goes away
    deadline = time.time() + 30
    while time.time() < deadline and _used_pages(server) != idle:
        time.sleep(0.1)
    assert _used_pages(server) == idle


def test_abort_request_endpoint(server):
    results: dict[str, object] = {}

    def run() -> None:
        results["out"] = gen(
            server,
            {"text": f"{HOLD} abort me", "rid": "to-abort", "sampling_params": {"max_new_tokens": 450}},
        )

    t = threading.Thread(target=run)
    t.start()
    _wait_running(server)  # an abort that came before the request would find nothing to abort
    r = requests.post(server.url + "/abort_request", json={"rid": "to-abort"}, timeout=10)
    assert r.status_code == 200
    t.join(30)
    out = results["out"].json()  # type: ignore[union-attr]
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert out["meta_info"]["completion_tokens"] < 450
    assert requests.post(server.url + "/abort_request", data=b"[1]", timeout=10).status_code == 400


def test_flush_cache_refused_while_running(server):
    # a held request runs until it is aborted: with a plain 480-token request, a client stalled
    # for 5 s on a loaded machine let it finish before the flush arrived. Closing the stream
    # aborts it.
    body = {"text": f"{HOLD} busy", "sampling_params": {"max_new_tokens": 480}, "stream": True}
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
        lines = r.iter_lines()  # kept referenced: a dropped generator closes the connection
        first = next(lines)
        f = requests.post(server.url + "/flush_cache", timeout=10)
        assert f.status_code == 400, first
    deadline = time.time() + 30
    while (
        time.time() < deadline and requests.post(server.url + "/flush_cache", timeout=10).status_code != 200
    ):
        time.sleep(0.1)
    assert requests.post(server.url + "/flush_cache", timeout=10).status_code == 200


# ----------------------------------------------------------------------------- api key + metrics
@pytest.fixture(scope="module")
def secured(secured_fake_server):
    """The session's fake-model server with an API key, ``--enable-metrics`` and
    ``--served-model-name fake-v4`` (conftest ``secured_fake_server``)."""
    return secured_fake_server


def test_api_key(secured):
    body = {"text": "a", "sampling_params": {"max_new_tokens": 2}}
    assert requests.post(secured.url + "/generate", json=body, timeout=30).status_code == 401
    bad = {"Authorization": "Bearer wrong"}
    r = requests.post(secured.url + "/generate", json=body, headers=bad, timeout=30)
    assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
    assert requests.get(secured.url + "/model_info", timeout=30).status_code == 401
    r = requests.post(secured.url + "/generate", json=body, headers=secured.headers(), timeout=30)
    assert r.status_code == 200
    assert requests.get(secured.url + "/health", timeout=30).status_code == 200  # probes stay open
    m = requests.get(secured.url + "/model_info", headers=secured.headers(), timeout=30).json()
    assert m["served_model_name"] == "fake-v4"


def _metric(text: str, name: str) -> float:
    """The sum of ``name``'s samples over its label sets (``is_streaming``, ...); 0 when it has
    none (a labelled counter never incremented has no sample)."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_metrics(secured):
    from prometheus_client.parser import text_string_to_metric_families

    before = requests.get(secured.url + "/metrics", timeout=30).text
    gen_before = _metric(before, "sglang:generation_tokens_total")
    body = {"text": "count me", "sampling_params": {"max_new_tokens": 7}}
    requests.post(
        secured.url + "/generate", json=body, headers=secured.headers(), timeout=30
    ).raise_for_status()
    text = requests.get(secured.url + "/metrics", timeout=30).text
    families = {f.name for f in text_string_to_metric_families(text)}  # a real Prometheus parser
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
        "sglang:gen_throughput",
        "sglang:time_to_first_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:e2e_request_latency_seconds",
        "sglang:prompt_tokens",
        "sglang:generation_tokens",
        "sglang:cached_tokens",
        "sglang:num_requests",
        "sglang:num_aborted_requests",
        "sglang:time_per_output_token_seconds",
        "sglang:num_used_tokens",
        "sglang:max_total_num_tokens",
    ):
        assert name in families, name
    assert _metric(text, "sglang:generation_tokens_total") == gen_before + 7
    assert _metric(text, "sglang:num_requests_total") == _metric(before, "sglang:num_requests_total") + 1
    ttft = "sglang:time_to_first_token_seconds_count"
    assert _metric(text, ttft) == _metric(before, ttft) + 1
    assert _metric(text, "sglang:gen_throughput") == 123.0  # FakeScheduler.get_metrics value
    assert 'model_name="fake-v4"' in text


def test_sse_payloads_are_json(server):
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}, "stream": True}
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
        raw = r.content.decode()
    blocks = [b for b in raw.split("\n\n") if b]
    assert blocks[-1] == "data: [DONE]"
    for b in blocks[:-1]:
        assert b.startswith("data: ")
        json.loads(b[len("data: ") :])


def test_client_disconnect_non_streaming_returns_pages(server):
    import socket
    from urllib.parse import urlparse

    idle = _used_pages(server)
    u = urlparse(server.url)
    body = json.dumps({"text": f"{HOLD} go away", "sampling_params": {"max_new_tokens": 450}}).encode()
    req = (
        f"POST /generate HTTP/1.1\r\nHost: {u.hostname}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(req)
        _wait_running(server)
        assert _used_pages(server) > idle
    # The held request never ends by itself: the pages come back only if the server notices the
    # disconnect and aborts it.
    deadline = time.time() + 30
    while time.time() < deadline and _used_pages(server) != idle:
        time.sleep(0.1)
    assert _used_pages(server) == idle


def test_abort_all(server):
    outs: list[dict] = []

    def run(i: int) -> None:
        outs.append(
            gen(server, {"text": f"{HOLD} abort all {i}", "sampling_params": {"max_new_tokens": 450}}).json()
        )

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    _wait_running(server, 3)
    assert (
        requests.post(server.url + "/abort_request", json={"abort_all": True}, timeout=10).status_code == 200
    )
    for t in threads:
        t.join(30)
    assert len(outs) == 3
    assert all(o["meta_info"]["finish_reason"]["type"] == "abort" for o in outs)


@pytest.fixture(scope="module")
def incremental_server(incremental_fake_server):  # noqa: ANN001, ANN201 - a server_fixture.ServerHandle
    """conftest's session fake-model server on :func:`model_dir` with
    ``--incremental-streaming-output``."""
    return incremental_fake_server


def test_incremental_streaming_output(incremental_server, tok, tmp_path: Path):
    """SGLang's ``--incremental-streaming-output`` (was refused at start-up): each stream chunk
    carries only its new text, ``output_ids`` and output logprobs; prompt logprobs stay whole.
    Oracle: the same request not streamed (joined chunks equal it) and the HF tokenizer's text."""
    # the stream is held after its first token until the file exists (created once its first
    # event is read): two chunks or more to join, however a loaded machine merges outputs; the
    # same request unstreamed then runs unheld (the file exists)
    release = tmp_path / "release"
    body = {
        "text": f"Hello world again {hold_until_tag(release)}",
        "sampling_params": {"max_new_tokens": 12},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 2,
        "token_ids_logprob": [4],
    }
    chunks = sse_events(gen(incremental_server, {**body, "stream": True}, stream=True), release)
    whole = gen(incremental_server, body).json()
    assert whole["text"] == expected_text(tok, 12)
    assert chunks[-1] == "[DONE]" and len(chunks) >= 3 and len(chunks[0]["output_ids"]) == 1
    chunks = chunks[:-1]
    assert "".join(c["text"] for c in chunks) == whole["text"]
    assert [i for c in chunks for i in c["output_ids"]] == whole["output_ids"]
    for key in ("output_token_logprobs", "output_top_logprobs", "output_token_ids_logprobs"):
        assert [e for c in chunks for e in c["meta_info"][key]] == whole["meta_info"][key], key
    for c in chunks:
        assert len(c["meta_info"]["output_token_logprobs"]) == len(c["output_ids"])
        assert c["meta_info"]["input_token_logprobs"] == whole["meta_info"]["input_token_logprobs"]
    assert chunks[-1]["meta_info"]["completion_tokens"] == 12
    # a batch: each index is sliced on its own
    batch = {"text": ["a", "b"], "sampling_params": {"max_new_tokens": 5}, "stream": True}
    per: dict[int, list[int]] = {0: [], 1: []}
    texts: dict[int, str] = {0: "", 1: ""}
    for c in sse_events(gen(incremental_server, batch, stream=True))[:-1]:
        per[c["index"]] += c["output_ids"]
        texts[c["index"]] += c["text"]
    assert all(len(v) == 5 for v in per.values()) and texts == {
        0: expected_text(tok, 5),
        1: expected_text(tok, 5),
    }
