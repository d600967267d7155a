"""``/metrics`` after a known workload on the fake-model server (``--enable-metrics``): counter
and histogram deltas equal what the requests' own ``meta_info`` / ``usage`` report and the
number of requests sent, split by SGLang's ``is_streaming`` label; the exposition is read with
prometheus_client's own text parser (the oracle)."""

from __future__ import annotations

import json
import time
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families


def scrape(server: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``: ``(name, sorted labels without model_name)`` -> value."""
    text = requests.get(server.url + "/metrics", timeout=30).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            assert s.labels.pop("model_name") == "fake-v4", s
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def delta(after: dict, before: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_counters_follow_a_known_workload(secured_fake_server: Any) -> None:
    server = secured_fake_server
    before = scrape(server)
    metas: list[tuple[bool, dict[str, Any]]] = []
    for i, n in enumerate((3, 5, 1)):  # non-streaming /generate
        body = {"text": f"metrics workload {i} " * (i + 1), "sampling_params": {"max_new_tokens": n}}
        r = requests.post(server.url + "/generate", json=body, headers=server.headers(), timeout=60)
        r.raise_for_status()
        metas.append((False, r.json()["meta_info"]))
    for n in (4, 6):  # streaming /generate: the last event carries the final meta_info
        body = {"text": "metrics stream", "sampling_params": {"max_new_tokens": n}, "stream": True}
        with requests.post(
            server.url + "/generate", json=body, headers=server.headers(), stream=True, timeout=60
        ) as r:
            r.raise_for_status()
            events = [
                json.loads(x[5:]) for x in r.iter_lines() if x.startswith(b"data:") and x != b"data: [DONE]"
            ]
        metas.append((True, events[-1]["meta_info"]))
    # One OpenAI request: its usage block is the oracle.
    body = {"model": "fake-v4", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
    r = requests.post(server.url + "/v1/chat/completions", json=body, headers=server.headers(), timeout=60)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    metas.append((False, {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                          "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)}))  # fmt: skip

    deadline = time.time() + 30
    while True:  # the running gauge is refreshed from the scheduler on each scrape
        after = scrape(server)
        if after[("sglang:num_running_reqs", ())] == 0 or time.time() > deadline:
            break
        time.sleep(0.05)
    assert after[("sglang:num_running_reqs", ())] == 0 and after[("sglang:num_queue_reqs", ())] == 0

    for streaming in (False, True):
        mine = [m for s, m in metas if s == streaming]
        lab = {"is_streaming": "true" if streaming else "false"}
        got_prompt = delta(after, before, "sglang:prompt_tokens_total", **lab)
        assert got_prompt == sum(m["prompt_tokens"] for m in mine)
        got_gen = delta(after, before, "sglang:generation_tokens_total", **lab)
        assert got_gen == sum(m["completion_tokens"] for m in mine)
        assert delta(after, before, "sglang:num_requests_total", **lab) == len(mine)
        assert delta(after, before, "sglang:e2e_request_latency_seconds_count", **lab) == len(mine)
        assert delta(after, before, "sglang:time_to_first_token_seconds_count", **lab) == len(mine)
        multi = sum(1 for m in mine if m["completion_tokens"] > 1)
        assert delta(after, before, "sglang:request_time_per_output_token_seconds_count", **lab) == multi
    everything = [m for _, m in metas]
    assert delta(after, before, "sglang:prompt_tokens_histogram_count") == len(everything)
    assert delta(after, before, "sglang:prompt_tokens_histogram_sum") == sum(
        m["prompt_tokens"] for m in everything
    )
    assert delta(after, before, "sglang:generation_tokens_histogram_sum") == sum(
        m["completion_tokens"] for m in everything
    )
    cached = sum(m["cached_tokens"] for m in everything)
    assert delta(after, before, "sglang:cached_tokens_total", cache_source="device") == cached
    assert delta(after, before, "sglang:num_so_requests_total") == 0  # no grammar in any request
    assert delta(after, before, "sglang:num_aborted_requests_total") == 0
    # One inter-token observation per generated token after each request's first (a
    # non-streaming request's tokens after the first arrive in one message: c - 1 observations).
    gaps = sum(max(m["completion_tokens"] - 1, 0) for m in everything)
    assert delta(after, before, "sglang:inter_token_latency_seconds_count") == gaps
    # Static gauges of the KV pool and limits, against /get_server_info.
    info = requests.get(server.url + "/get_server_info", headers=server.headers(), timeout=30).json()
    assert after[("sglang:page_size", ())] == info["page_size"]
    assert after[("sglang:num_pages", ())] == info["kv_pool"]["total_pages"]
    assert after[("sglang:context_len", ())] == info["context_len"]
    assert after[("sglang:num_retracted_requests_total", ())] == 0
