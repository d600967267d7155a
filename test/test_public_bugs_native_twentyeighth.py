"""The twenty-eighth set of public bug reports on SGLang's native API, replayed against
sglang-v4: ``sampling_params`` validation (out-of-range values and non-JSON ``NaN`` /
``Infinity`` answered 400 naming the field, the boundary values accepted; a streamed request
whose ``min_new_tokens`` exceeds ``max_new_tokens`` refused with HTTP 400 before any stream
starts), a batch of prompts with ``n > 1`` (one answer per prompt and sample, prompt-major),
``token_ids_logprob`` (the requested ids' logprobs at every position, with their texts),
echoed prompt logprobs asked twice for one prompt (the second, which a prefix cache may serve,
still covers the whole prompt) and the server-info fields a gateway reads
(``max_total_num_tokens``, ``version`` on both ``/get_server_info`` and ``/server_info``).

Fixture: conftest's session ``held_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over). Oracles: the DeepSeek-V4 tokenizer through
``transformers`` (conftest's ``tok``: prompt ids, counts and each id's text), the package
version read by ``importlib.metadata``, the page arithmetic of the server's own KV pool report,
the first run of a prompt (cold) for the second, and the reports' stated expected values.
Every report here passed as it was and is kept as a regression test.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest
import requests
from server_fixture import ServerHandle, fake_output_ids

pytestmark = pytest.mark.timeout(240)
PROMPTS = ["The capital of France is", "def fib(n):\n    return"]


@pytest.fixture(scope="module")
def server(held_fake_server: ServerHandle) -> ServerHandle:
    """conftest's session fake-model server."""
    return held_fake_server


def _post(server: ServerHandle, body: dict[str, Any] | str) -> requests.Response:
    """``POST /generate`` with ``body`` (a dict sent as JSON, a string sent as the raw body)."""
    if isinstance(body, str):
        headers = {"content-type": "application/json"}
        return requests.post(server.url + "/generate", data=body, headers=headers, timeout=60)
    return requests.post(server.url + "/generate", json=body, timeout=60)


def _gen(server: ServerHandle, body: dict[str, Any]) -> Any:
    """The JSON answer of ``/generate``; asserts HTTP 200."""
    r = _post(server, body)
    assert r.status_code == 200, r.text
    return r.json()


def _ids(tok: Any, text: str) -> list[int]:
    """``text``'s token ids without special tokens (``transformers``)."""
    return list(tok.encode(text, add_special_tokens=False))


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", -3), ("top_p", 0), ("top_p", 7), ("top_k", 0), ("min_p", 2), ("max_new_tokens", -1)],
)
def test_freetoken_223_out_of_range_sampling_param_is_a_400_naming_it(
    server: ServerHandle, field: str, value: float
) -> None:
    """FlashML-org/FreeToken#223: ``temperature=-3``, ``top_p=0``, ``top_p=7``, ``top_k=0`` went
    through to the sampler. Expected: HTTP 400 in SGLang's error shape whose message names the
    offending parameter; the server still answers the next request."""
    r = _post(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2, field: value}})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and field in err["message"]
    _gen(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 1}})


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_freetoken_223_non_finite_temperature_is_a_400(server: ServerHandle, literal: str) -> None:
    """FlashML-org/FreeToken#223 (``NaN`` / ``inf`` temperatures reached the engine). ``NaN``
    and ``Infinity`` are not JSON (RFC 8259 has no such number). Expected: HTTP 400, not a 500
    and not a generation."""
    raw = '{"text": "Hi", "sampling_params": {"max_new_tokens": 2, "temperature": ' + literal + "}}"
    r = _post(server, raw)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == 400


@pytest.mark.parametrize(("field", "value"), [("temperature", 0), ("top_p", 1), ("top_k", -1), ("top_k", 1)])
def test_freetoken_223_boundary_sampling_values_are_accepted(
    server: ServerHandle, tok: Any, field: str, value: float
) -> None:
    """FlashML-org/FreeToken#223's boundary matrix: ``temperature=0``, ``top_p=1``, ``top_k=-1``
    (off) and ``top_k=1`` are valid. Expected: HTTP 200 with the asked number of tokens."""
    out = _gen(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 3, field: value}})
    assert out["output_ids"] == fake_output_ids(tok, 3)
    assert out["meta_info"]["completion_tokens"] == 3


def test_fms_guardrails_146_streamed_min_above_max_is_a_400_before_the_stream(server: ServerHandle) -> None:
    """foundation-model-stack/fms-guardrails-orchestrator#146: ``min_new_tokens`` 80 above
    ``max_new_tokens`` 50 on a streamed request came back as an SSE error event with code 500.
    Expected: a validation error, HTTP 400, as JSON (no event stream opened), naming
    ``min_new_tokens``."""
    body = {"text": "Hi", "stream": True, "sampling_params": {"max_new_tokens": 50, "min_new_tokens": 80}}
    r = _post(server, body)
    assert r.status_code == 400, r.text
    assert not r.headers["content-type"].startswith("text/event-stream")
    assert "min_new_tokens" in r.json()["error"]["message"]


def test_sglang_11048_batch_with_n_is_prompt_major_list(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#11048: with ``sampling_params.n`` 2 the answer shape changed between
    versions (one object, or one text). Expected (SGLang's batch contract): a flat list of
    ``len(prompts) * n`` answers, the ``n`` samples of the first prompt first, each with its own
    prompt's ``prompt_tokens`` and its own id; a single prompt with ``n`` 2 is a list of 2."""
    outs = _gen(server, {"text": PROMPTS, "sampling_params": {"max_new_tokens": 3, "n": 2, "temperature": 0}})
    assert isinstance(outs, list) and len(outs) == 4
    want = [len(_ids(tok, p)) for p in PROMPTS for _ in range(2)]
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == want
    assert all(o["output_ids"] == fake_output_ids(tok, 3) for o in outs)
    assert len({o["meta_info"]["id"] for o in outs}) == 4
    single = _gen(server, {"text": PROMPTS[0], "sampling_params": {"max_new_tokens": 3, "n": 2}})
    assert isinstance(single, list) and len(single) == 2


def test_sglang_jax_13_token_ids_logprob_at_every_position(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang-jax#13 (``token_ids_logprob`` among the ``/generate`` logprob
    options). Expected: ``output_token_ids_logprobs`` has one entry per generated token, each
    listing exactly the requested ids in the order asked, with a finite logprob and, with
    ``return_text_in_logprobs``, each id's text as the tokenizer decodes it."""
    asked = [_ids(tok, " Paris")[0], _ids(tok, " London")[0], 13]
    out = _gen(
        server,
        {
            "text": PROMPTS[0],
            "sampling_params": {"max_new_tokens": 3},
            "return_logprob": True,
            "token_ids_logprob": asked,
            "return_text_in_logprobs": True,
        },
    )
    per_pos = out["meta_info"]["output_token_ids_logprobs"]
    assert len(per_pos) == 3
    for entries in per_pos:
        assert [e[1] for e in entries] == asked
        assert all(isinstance(e[0], float) and e[0] <= 0.0 for e in entries)
        assert [e[2] for e in entries] == [tok.decode([t]) for t in asked]


def test_sieval_21_echoed_prompt_logprobs_survive_a_cached_prefix(server: ServerHandle, tok: Any) -> None:
    """scitix/sieval#21: echoed prompt logprobs (``logprob_start_len`` 0) came back truncated
        when the prompt's prefix was already cached, so perplexity scoring needed
        ``--disable-radix-cache``. Expected: the same prompt asked twice (the second run finds its
    prefix cached where the server caches prefixes) gives, both times, one
        ``input_token_logprobs`` entry per prompt token (ids in order, the first without a logprob)
        and the same values."""
    ids = _ids(tok, PROMPTS[1])
    body = {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": 1},
        "return_logprob": True,
        "logprob_start_len": 0,
    }
    cold, warm = _gen(server, body), _gen(server, body)
    for out in (cold, warm):
        entries = out["meta_info"]["input_token_logprobs"]
        assert [e[1] for e in entries] == ids
        assert entries[0][0] is None and all(isinstance(e[0], float) for e in entries[1:])
    assert warm["meta_info"]["input_token_logprobs"] == cold["meta_info"]["input_token_logprobs"]


def test_smg_817_server_info_reports_capacity_and_version(server: ServerHandle) -> None:
    """smg-project/smg#817 (``max_total_num_tokens`` is a field of ``/get_server_info`` that
    gateways read) and gpustack/gpustack#3982 (the backend version is read from ``/server_info``
    on new SGLang, ``/get_server_info`` on old). Expected: both paths answer 200 with the
    package's version; ``max_total_num_tokens`` is a positive integer equal to the KV pool's
    pages times the page size the server reports."""
    old = requests.get(server.url + "/get_server_info", timeout=30)
    new = requests.get(server.url + "/server_info", timeout=30)
    assert old.status_code == new.status_code == 200
    want = importlib.metadata.version("sglang-v4")
    assert old.json()["version"] == new.json()["version"] == want
    info = old.json()
    cap = info["max_total_num_tokens"]
    assert isinstance(cap, int) and not isinstance(cap, bool) and cap > 0
    pool = info["internal_states"][0]["kv_pool"]
    assert cap == pool["total_pages"] * info["page_size"]
