"""HTTP-level repros against a real server on the embedded default model (small KV pool).

The server runs with ``--max-total-tokens 512`` (two 256-token block pages) so that limits are
cheap to reach. Oracles: SGLang's documented bounds and the numbers given on the command line.
"""

from __future__ import annotations

import pytest
import requests
from server_fixture import ServerHandle, real_env, start_server

POOL_TOKENS = 512

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    env = real_env()
    h = start_server(
        ["--max-total-tokens", str(POOL_TOKENS), "--skip-warmup"],
        env,
        tmp_path_factory.mktemp("qa") / "server.log",
        timeout_s=300,
    )
    yield h
    assert h.stop() == 0, h.log()[-3000:]


def _admitted_prompt_tokens(server: ServerHandle) -> int:
    """The prompt tokens of every request the scheduler has admitted to run (the radix cache's
    hit statistics count each at admission): unchanged by a request refused up front."""
    return int(requests.get(server.url + "/server_info", timeout=30).json()["radix_cache"]["prompt_tokens"])


def test_prompt_larger_than_pool_is_400_up_front(server: ServerHandle) -> None:
    info = requests.get(server.url + "/server_info", timeout=30).json()
    assert info["max_total_num_tokens"] == POOL_TOKENS
    assert info["max_req_input_len"] == POOL_TOKENS - 1
    admitted = _admitted_prompt_tokens(server)
    r = requests.post(
        server.url + "/generate",
        json={"input_ids": [7] * (POOL_TOKENS + 10), "sampling_params": {"max_new_tokens": 2}},
        timeout=60,
    )
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"]
    assert "KV cache pool" in msg and str(POOL_TOKENS) in msg, msg
    # up front: the scheduler never admitted it (a state, where a time bound raced a loaded machine)
    assert _admitted_prompt_tokens(server) == admitted
    pool = requests.get(server.url + "/server_info", timeout=30).json()["kv_pool"]
    assert pool["block_pages"]["used"] == 0  # nothing was prefilled or cached


def test_prompt_plus_max_new_tokens_larger_than_pool_is_400_up_front(server: ServerHandle) -> None:
    # Found by hand: a 500-token prompt with max_new_tokens=30 on a 512-token pool generated 12
    # tokens, then failed with "The KV cache pool is too small" and the 12 tokens were lost. As
    # with the context length (SGLang rejects prompt + max_new_tokens >= context_len up front),
    # the pool bounds the whole request.
    for path, body in (
        (
            "/generate",
            {"input_ids": [9] * 500, "sampling_params": {"max_new_tokens": 30, "ignore_eos": True}},
        ),
        ("/v1/completions", {"prompt": [9] * 500, "max_tokens": 30}),
    ):
        admitted = _admitted_prompt_tokens(server)
        r = requests.post(server.url + path, json=body, timeout=60)
        assert r.status_code == 400, r.text
        text = r.text
        assert "KV cache pool" in text and str(POOL_TOKENS) in text, text
        assert _admitted_prompt_tokens(server) == admitted  # refused before any token ran
    pool = requests.get(server.url + "/server_info", timeout=30).json()["kv_pool"]
    assert pool["block_pages"]["used"] == 0


def test_omitted_max_new_tokens_is_the_default_capped_to_the_room(server: ServerHandle) -> None:
    # SGLang's /generate checks only a max_new_tokens the request sets; an omitted one is the
    # default (128) and the scheduler caps it to what the prompt leaves (a prompt near the limit
    # gets a short answer with finish_reason length, not a 400). Oracle: the arithmetic of the
    # pool size and the prompt length given here; the default is SamplingParams' documented 128.
    for prompt_len, expect in ((100, 128), (440, POOL_TOKENS - 440), (POOL_TOKENS - 1, 1)):
        r = requests.post(
            server.url + "/generate",
            json={"input_ids": [9] * prompt_len, "sampling_params": {"ignore_eos": True, "temperature": 0}},
            timeout=120,
        )
        assert r.status_code == 200, (prompt_len, r.text)
        meta = r.json()["meta_info"]
        assert meta["finish_reason"] == {"type": "length", "length": expect}, (prompt_len, meta)
        assert meta["completion_tokens"] == expect
    # a value the request sets is still checked, and a prompt with no room left is still a 400
    for sp, n in (({"max_new_tokens": 128}, 440), ({}, POOL_TOKENS)):
        r = requests.post(
            server.url + "/generate", json={"input_ids": [9] * n, "sampling_params": sp}, timeout=60
        )
        assert r.status_code == 400, (sp, n, r.text)
    requests.post(server.url + "/flush_cache", timeout=30)


def test_unbounded_generation_stops_at_pool_capacity_with_length(server: ServerHandle) -> None:
    # max_new_tokens=None means "until the context ends" (SGLang); with a pool smaller than the
    # context, the request must end with finish_reason length at the pool's capacity, not fail.
    r = requests.post(
        server.url + "/generate",
        json={"input_ids": [9] * 500, "sampling_params": {"max_new_tokens": None, "ignore_eos": True}},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    meta = r.json()["meta_info"]
    assert meta["finish_reason"]["type"] == "length", meta
    assert meta["prompt_tokens"] == 500
    assert 1 <= meta["completion_tokens"] and meta["prompt_tokens"] + meta["completion_tokens"] <= POOL_TOKENS
    requests.post(server.url + "/flush_cache", timeout=30)


def test_prompt_plus_max_new_tokens_equal_to_the_pool_is_served(server: ServerHandle) -> None:
    # Found by attack: a 1022-token prompt with max_new_tokens=2 on a 1024-token pool was a 400
    # "Requested token count exceeds the KV cache pool of 1024 tokens. You requested a total of
    # 1024 tokens", while the same prompt with max_new_tokens omitted was served 2 tokens (the
    # scheduler caps it to min(context, pool) - prompt). The last sampled token is never written
    # to the KV cache, so prompt + completion == pool fits, as prompt + completion == context
    # does. Oracle: the pool arithmetic, and the omitted-max_new_tokens answer of the same prompt.
    for prompt_len in (POOL_TOKENS - 2, POOL_TOKENS - 1):
        ids = [9 + i % 50 for i in range(prompt_len)]
        room = POOL_TOKENS - prompt_len
        answers = []
        for sp in ({"max_new_tokens": room}, {}):
            r = requests.post(
                server.url + "/generate",
                json={"input_ids": ids, "sampling_params": {**sp, "ignore_eos": True, "temperature": 0}},
                timeout=120,
            )
            assert r.status_code == 200, (prompt_len, sp, r.text)
            meta = r.json()["meta_info"]
            assert meta["finish_reason"] == {"type": "length", "length": room}, meta
            answers.append(r.json()["output_ids"])
        assert answers[0] == answers[1] and len(answers[0]) == room
        r = requests.post(
            server.url + "/v1/completions",
            json={"prompt": ids, "max_tokens": room, "temperature": 0, "ignore_eos": True},
            timeout=120,
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == room, r.text
        # one more token than the pool holds is still refused up front
        r = requests.post(
            server.url + "/generate",
            json={"input_ids": ids, "sampling_params": {"max_new_tokens": room + 1}},
            timeout=60,
        )
        assert r.status_code == 400, r.text
        msg = r.json()["error"]["message"]
        assert f"total of {POOL_TOKENS + 1} tokens" in msg and f"pool of {POOL_TOKENS} tokens" in msg, msg
    requests.post(server.url + "/flush_cache", timeout=30)


def test_auto_truncate_cuts_max_new_tokens_to_what_the_pool_holds() -> None:
    # --allow-auto-truncate cuts max_new_tokens to the room the prompt leaves; on a server whose
    # KV pool is smaller than the context that room is pool - prompt (prompt + completion ==
    # pool is served, as the check above), not one token less. Oracle: the pool arithmetic.
    from types import SimpleNamespace

    from sglang_v4.managers.tokenization import TokenizationMixin

    host = SimpleNamespace(
        context_len=4096,
        max_req_input_len=POOL_TOKENS - 1,
        scheduler_info=SimpleNamespace(max_total_num_tokens=POOL_TOKENS),
    )
    for prompt_len, asked, want_len, want_new in (
        (POOL_TOKENS - 2, 100, POOL_TOKENS - 2, 2),
        (POOL_TOKENS - 1, 5, POOL_TOKENS - 1, 1),
        (POOL_TOKENS + 50, 5, POOL_TOKENS - 1, 1),
        (100, 50, 100, 50),  # fits: untouched
    ):
        raw = {"max_new_tokens": asked}
        ids = TokenizationMixin._fit_to_context(host, list(range(prompt_len)), raw)  # type: ignore[arg-type]
        assert (len(ids), raw["max_new_tokens"]) == (want_len, want_new), (prompt_len, asked)


def test_logprob_volume_is_bounded_up_front(server: ServerHandle) -> None:
    # Found by attack: top_logprobs_num may be anything up to the vocabulary (129280, as SGLang),
    # so one /generate of an 800-token prompt with logprob_start_len 0 asked for 10^8 logprob
    # values; 4.2M of them already took 130 MB of JSON and 1.2 GB of server memory, so it would
    # have exhausted the host. Requests with more than 20 candidates per position are bounded by
    # SGLANG_V4_MAX_LOGPROB_ENTRIES (2**23) values over all their prompts and samples; narrower
    # ones (all of OpenAI's) are not. Oracle: the arithmetic of positions x values per position.
    from sglang_v4.managers.tokenization import DEFAULT_MAX_LOGPROB_ENTRIES as LIMIT

    vocab = 129280
    ids = [9 + i % 50 for i in range(400)]
    refused = [
        # 400 prompt positions + 1 output position, 1 + vocab values each
        ("/generate", {"input_ids": ids, "return_logprob": True, "logprob_start_len": 0,
                       "top_logprobs_num": vocab, "sampling_params": {"max_new_tokens": 1}}),
        # a batch whose items each fit: 100 x (50 + 34) positions x 1001 values
        ("/generate", {"input_ids": [ids[:50]] * 100, "return_logprob": True, "logprob_start_len": 0,
                       "top_logprobs_num": 1000, "sampling_params": {"max_new_tokens": 34}}),
        # n samples count too: 8 x 250 output positions x 5001 values
        ("/generate", {"input_ids": ids[:10], "return_logprob": True, "top_logprobs_num": 5000,
                       "sampling_params": {"max_new_tokens": 250, "n": 8}}),
        # /v1/score: 2000 items x 1 position x (1 + 5000 labels)
        ("/v1/score", {"query": ids[:5], "items": [[7]] * 2000, "label_token_ids": list(range(5000))}),
    ]  # fmt: skip
    assert 400 * vocab > LIMIT and 100 * 84 * 1001 > LIMIT and 8 * 250 * 5001 > LIMIT
    assert 2000 * 5001 > LIMIT
    for path, body in refused:
        admitted = _admitted_prompt_tokens(server)
        r = requests.post(server.url + path, json=body, timeout=60)
        assert r.status_code == 400, (path, r.text[:300])
        assert "SGLANG_V4_MAX_LOGPROB_ENTRIES" in r.text and str(LIMIT) in r.text, r.text[:500]
        assert _admitted_prompt_tokens(server) == admitted, path  # refused before it ran
    info = requests.get(server.url + "/server_info", timeout=30).json()
    assert info["kv_pool"]["req_slots"]["used"] == 0 and info["num_queue_reqs"] == 0
    # narrow (20 candidates) over every position, and wide but small, are served in full
    r = requests.post(
        server.url + "/generate",
        json={"input_ids": ids, "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 20,
              "sampling_params": {"max_new_tokens": 2}},
        timeout=120,
    )  # fmt: skip
    assert r.status_code == 200, r.text[:300]
    meta = r.json()["meta_info"]
    assert len(meta["input_top_logprobs"]) == 400 and all(
        len(t) == 20 for t in meta["input_top_logprobs"][1:]
    )
    r = requests.post(
        server.url + "/generate",
        json={"input_ids": ids[:5], "return_logprob": True, "top_logprobs_num": vocab,
              "sampling_params": {"max_new_tokens": 2}},
        timeout=120,
    )  # fmt: skip
    assert r.status_code == 200, r.text[:300]
    assert [len(t) for t in r.json()["meta_info"]["output_top_logprobs"]] == [vocab, vocab]
    r = requests.post(
        server.url + "/v1/score",
        json={"query": ids[:5], "items": [[7], [8]], "label_token_ids": list(range(5000))},
        timeout=120,
    )
    assert r.status_code == 200 and [len(s) for s in r.json()["scores"]] == [5000, 5000], r.text[:300]
    requests.post(server.url + "/flush_cache", timeout=30)
