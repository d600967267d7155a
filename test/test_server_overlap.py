"""The real server started twice on the embedded model, overlap scheduling on (the default) and off
(``--disable-overlap-schedule``): the same concurrent mixed requests get the same greedy outputs.

Oracle: the server without overlap (whose outputs the real-model tests tie to HF transformers).
The requests run at once so that steps mix prefills and decodes: different prompt and output
lengths, a shared long prefix (a radix-cache hit for the later ones), streaming, ``n = 2``, a stop
string, a stop token, output logprobs (compared at 1e-4: the forward is not batch-invariant), and an
abort of a streaming request. The overlap server also gets a device out-of-memory error injected
into its 40th forward (during the concurrent load): it retracts that step's requests, goes on
serving, and its outputs still match. After the load both servers hold no request pages.
"""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path
from typing import Any

import pytest
import requests
from server_fixture import ServerHandle, real_env, sse_events, start_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SHARED = "DeepSeek-V4 caches compressed KV in pages of 256 tokens. " * 40


def _bodies(stop_str: str, stop_tok: int) -> list[dict[str, Any]]:
    greedy = {"temperature": 0, "ignore_eos": True}
    return [
        {"text": "The capital of France is", "sampling_params": {**greedy, "max_new_tokens": 12}},
        {"text": SHARED + "Q1", "sampling_params": {**greedy, "max_new_tokens": 6}, "return_logprob": True},
        {"text": SHARED + "Q2", "sampling_params": {**greedy, "max_new_tokens": 9}},
        {"text": "1, 2, 3, 4,", "sampling_params": {**greedy, "max_new_tokens": 15}, "stream": True},
        {"text": "def fibonacci(n):", "sampling_params": {**greedy, "max_new_tokens": 7, "n": 2}},
        {"text": "你好", "sampling_params": {**greedy, "max_new_tokens": 10, "stop": [stop_str]}},
        {
            "text": "Once upon a time",
            "sampling_params": {"temperature": 0, "max_new_tokens": 10, "stop_token_ids": [stop_tok]},
        },
    ]


def _pick_stops(url: str) -> tuple[str, int]:
    """A stop string (a piece of the text of ``你好``'s 5th-7th output tokens) and a stop token
    (the 4th output token of ``Once upon a time``), from runs without stops."""
    greedy = {"temperature": 0, "ignore_eos": True, "max_new_tokens": 10}
    a = _post(url, {"text": "你好", "sampling_params": greedy})["output_ids"]
    b = _post(url, {"text": "Once upon a time", "sampling_params": greedy})["output_ids"]
    from sglang_v4.tools.default_model import ensure_default_model
    from sglang_v4.utils import get_tokenizer

    text = get_tokenizer(ensure_default_model()).decode(a[4:7]).replace("\ufffd", "")
    assert text.strip()
    return text[: max(1, len(text) // 2)], b[3]


def _post(url: str, body: dict[str, Any]) -> Any:
    r = requests.post(url + "/generate", json=body, timeout=600, stream=bool(body.get("stream")))
    assert r.status_code == 200, r.text
    if body.get("stream"):
        events = [e for e in sse_events(r) if e != "[DONE]"]
        return events[-1]
    return r.json()


def _abort_stream(url: str) -> int:
    """Start a long streaming request and close it after two chunks (the server aborts it)."""
    body = {
        "text": "Count:",
        "sampling_params": {"temperature": 0, "ignore_eos": True, "max_new_tokens": 400},
    }
    with requests.post(url + "/generate", json={**body, "stream": True}, stream=True, timeout=600) as r:
        n = 0
        for line in r.iter_lines():
            if line:
                n += 1
            if n >= 2:
                break
    return n


def _run(server: ServerHandle, stops: tuple[str, int]) -> list[Any]:
    bodies = _bodies(*stops)
    # one request first so the shared prefix is cached for the later ones
    first = _post(server.url, bodies[1])
    with cf.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(_post, server.url, b) for b in bodies]
        aborted = ex.submit(_abort_stream, server.url)
        outs = [f.result() for f in futs]
        assert aborted.result() == 2
    return [first, *outs]


def _idle_pages(server: ServerHandle) -> int:
    requests.post(server.url + "/flush_cache", timeout=60)
    return requests.get(server.url + "/server_info", timeout=60).json()["kv_pool"]["block_pages"]["used"]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, list[Any]]:
    env = real_env()
    out: dict[Any, Any] = {}
    stops = None
    for overlap in (True, False):
        args = [] if overlap else ["--disable-overlap-schedule"]
        log: Path = tmp_path_factory.mktemp("overlap") / f"server_{overlap}.log"
        oom = {"SGLANG_V4_TEST_OOM_FORWARDS": "40"} if overlap else {"SGLANG_V4_TEST_OOM_FORWARDS": ""}
        h = start_server(args, env | oom, log, timeout_s=300)
        try:
            info = requests.get(h.url + "/server_info", timeout=60).json()
            assert info["enable_overlap_schedule"] is overlap
            stops = stops or _pick_stops(h.url)
            out[overlap] = _run(h, stops)
            assert _idle_pages(h) == 0, h.log()[-3000:]
            info = requests.get(h.url + "/server_info", timeout=60).json()
            assert info["num_oom_errors"] == (1 if overlap else 0), h.log()[-3000:]
            assert requests.get(h.url + "/health", timeout=60).status_code == 200
        finally:
            assert h.stop() == 0, h.log()[-3000:]
    return out


def test_overlap_server_matches_normal(results: dict[bool, list[Any]]) -> None:
    on, off = results[True], results[False]
    assert len(on) == len(off)
    for a, b in zip(on, off):
        items_a = a if isinstance(a, list) else [a]
        items_b = b if isinstance(b, list) else [b]
        for x, y in zip(items_a, items_b):
            assert x["output_ids"] == y["output_ids"]
            assert x["text"] == y["text"]
            assert x["meta_info"]["finish_reason"] == y["meta_info"]["finish_reason"]
            if "output_token_logprobs" in y["meta_info"]:
                la = [e[0] for e in x["meta_info"]["output_token_logprobs"]]
                lb = [e[0] for e in y["meta_info"]["output_token_logprobs"]]
                assert la == pytest.approx(lb, abs=1e-4)
    # the shared prefix was served from the cache on both
    assert on[2]["meta_info"]["cached_tokens"] == off[2]["meta_info"]["cached_tokens"] > 0
    assert on[6]["meta_info"]["finish_reason"]["type"] == "stop"  # the stop string
    assert on[7]["meta_info"]["finish_reason"]["type"] == "stop"  # the stop token
