"""The twenty-third set of public bug reports on SGLang's native API (``/generate``'s sampling
parameters and their validation, parallel sampling, aborts, the SGLang frontend), replayed against
sglang-v4.

Fixture: conftest's session ``held_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over; a ``[hold]`` prompt runs until it is aborted). Oracles:
SGLang 0.5.23's own ``SamplingParams`` (installed in the venv) for which stop patterns are valid,
SGLang's frontend (``sglang.lang``) as the client, ``FAKE_TEXT`` through the DeepSeek-V4 tokenizer
(``transformers``), transformers' ``MinNewTokensLengthLogitsProcessor`` for the ``min_new_tokens``
mask, and single non-streamed requests (cold runs) for the entries of a streamed batch.

Fault fixed here: a ``stop_regex`` pattern longer than SGLang's 256-byte limit was accepted
(sgl-project/sglang#37029); it is now a 400 on ``/generate`` and the OpenAI routes, and a
``ValueError`` from the ``Engine``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from server_fixture import (
    ServerHandle,
    fake_output_ids,
    fake_output_text,
    in_background,
    wait_running_reqs,
)

pytestmark = pytest.mark.timeout(240)
HOLD = "[hold]"  # FakeScheduler's FAKE_HOLD_ON_TEXT: such a request runs until it is aborted


@pytest.fixture(scope="module")
def server(held_fake_server: ServerHandle) -> ServerHandle:
    """conftest's session fake-model server (``[hold]`` prompts held until aborted)."""
    return held_fake_server


def _post(server: ServerHandle, path: str, body: dict[str, Any]) -> requests.Response:
    """POST ``body`` as JSON to ``path``."""
    return requests.post(server.url + path, json=body, timeout=60)


def _gen(server: ServerHandle, body: dict[str, Any]) -> Any:
    """The JSON answer of ``/generate``; asserts HTTP 200."""
    r = _post(server, "/generate", body)
    assert r.status_code == 200, r.text
    return r.json()


def _sglang_accepts(tok: Any, **sp: Any) -> bool:
    """Whether SGLang 0.5.23's ``SamplingParams`` (``verify`` then ``normalize`` with the
    DeepSeek-V4 tokenizer, as its tokenizer manager runs them) accepts these parameters."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    try:
        p = SamplingParams(**sp)
        p.verify(vocab_size=129280)
        p.normalize(tok)
    except ValueError:
        return False
    return True


def _error_message(r: requests.Response) -> str:
    """The message of a native (``{"error": {"message"}}``) or OpenAI (``{"message"}``) error."""
    body = r.json()
    err = body.get("error")
    if isinstance(err, dict):
        return str(err.get("message", ""))
    return str(body.get("message", err))


# ----------------------------------------------------------------------------- stop bounds
@pytest.mark.parametrize(
    "pattern",
    [
        "a" * 256,  # 256 bytes: at the limit
        "a" * 257,
        "é" * 128,  # 256 bytes in UTF-8
        "é" * 129,  # 258 bytes, though only 129 characters
        "[0-9]{3}" + "x" * 260,
    ],
)
def test_sglang_37029_stop_regex_byte_limit(server: ServerHandle, tok: Any, pattern: str) -> None:
    """sgl-project/sglang#37029 (stop strings and ``stop_regex`` patterns bounded: at most 32 of
    each, and each pattern at most 256 bytes in UTF-8, since every pattern is searched on every
    decode step). Oracle: SGLang 0.5.23's ``SamplingParams`` accepts or refuses the same pattern.
    Expected: ``/generate`` and ``/v1/completions`` answer 200 exactly where SGLang accepts, else a
    400 naming ``stop_regex``; the server keeps serving."""
    ok = _sglang_accepts(tok, stop_regex=pattern, max_new_tokens=2)
    assert ok == (len(pattern.encode("utf-8")) <= 256)
    r = _post(
        server, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2, "stop_regex": pattern}}
    )
    assert (r.status_code == 200) == ok, r.text
    if not ok:
        assert r.status_code == 400 and "stop_regex" in _error_message(r)
    body = {"model": "dsv4-test", "prompt": "hi", "max_tokens": 2, "stop_regex": pattern}
    r = _post(server, "/v1/completions", body)
    assert (r.status_code == 200) == ok, r.text
    if not ok:
        assert r.status_code == 400 and "stop_regex" in _error_message(r)
    assert (
        _gen(server, {"text": "hi", "sampling_params": {"max_new_tokens": 1}})["meta_info"][
            "completion_tokens"
        ]
        == 1
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stop", [f"s{i}" for i in range(32)]),
        ("stop", [f"s{i}" for i in range(33)]),
        ("stop", "just one"),
        ("stop_regex", [f"r{i}" for i in range(32)]),
        ("stop_regex", [f"r{i}" for i in range(33)]),
        ("stop_regex", "r[0-9]"),
    ],
)
def test_sglang_37029_stop_count_limits(server: ServerHandle, tok: Any, field: str, value: Any) -> None:
    """sgl-project/sglang#37029 (the count bounds, a bare string counting as one). Oracle:
    SGLang 0.5.23's ``SamplingParams``. Expected: 200 where SGLang accepts, else a 400 naming the
    field."""
    ok = _sglang_accepts(tok, **{field: value, "max_new_tokens": 2})
    r = _post(server, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2, field: value}})
    assert (r.status_code == 200) == ok, r.text
    if not ok:
        assert r.status_code == 400 and field in _error_message(r)


# ----------------------------------------------------------------------------- degenerate n / stop
@pytest.mark.parametrize("n", [0, -1])
@pytest.mark.parametrize("batch", [False, True])
def test_sglang_28858_zero_samples_refused(server: ServerHandle, n: int, batch: bool) -> None:
    """sgl-project/sglang#28858 (``n < 1`` on native ``/generate`` made an empty batch: the
    request answered nothing instead of failing). Expected: a 400 naming ``n``, for a single prompt
    and for a batch, and the next request is served."""
    text: Any = ["a", "b"] if batch else "a"
    r = _post(server, "/generate", {"text": text, "sampling_params": {"max_new_tokens": 2, "n": n}})
    assert r.status_code == 400, r.text
    assert "n must be" in _error_message(r)
    assert (
        _gen(server, {"text": "a", "sampling_params": {"max_new_tokens": 1}})["meta_info"][
            "completion_tokens"
        ]
        == 1
    )


@pytest.mark.parametrize("stop", ["", [""], ["Stop", ""]])
def test_sglang_28858_empty_stop_string_refused(server: ServerHandle, stop: Any) -> None:
    """sgl-project/sglang#28858 (an empty stop string ended every generation at once: Python's
    ``"" in text`` holds for every text, checked here). Expected: a 400 naming ``stop`` from
    ``/generate`` and ``/v1/completions``."""
    assert all("" in t for t in ("", "x", " The quick"))
    r = _post(server, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2, "stop": stop}})
    assert r.status_code == 400 and "stop" in _error_message(r), r.text
    r = _post(
        server, "/v1/completions", {"model": "dsv4-test", "prompt": "hi", "max_tokens": 2, "stop": stop}
    )
    assert r.status_code == 400 and "stop" in _error_message(r), r.text


# ----------------------------------------------------------------------------- parallel sampling
def test_sglang_259_streamed_batch_with_n_equals_cold_runs(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#259 (streaming a batch of prompts / parallel samples). Expected: one
    stream for 2 prompts x ``n=2`` carries indexes 0..3 (prompt-major, as SGLang numbers them),
    each index's last chunk equal (text, ids, ``prompt_tokens``) to the same prompt sent alone
    without streaming (a cold run), and its ids the fake model's first tokens (oracle: the
    tokenizer)."""
    prompts = ["Hello there", "The capital of France is"]
    sp = {"max_new_tokens": 4, "temperature": 0, "n": 2}
    r = requests.post(
        server.url + "/generate",
        json={"text": prompts, "sampling_params": sp, "stream": True},
        stream=True,
        timeout=60,
    )
    assert r.status_code == 200
    last: dict[int, Any] = {}
    for line in r.iter_lines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            ev = json.loads(line[6:])
            last[ev["index"]] = ev
    assert sorted(last) == [0, 1, 2, 3]
    for i, prompt in enumerate(prompts):
        cold = _gen(server, {"text": prompt, "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
        for j in range(2):
            got = last[i * 2 + j]
            assert got["text"] == cold["text"] == fake_output_text(tok, 4)
            assert got["output_ids"] == cold["output_ids"] == fake_output_ids(tok, 4)
            assert (
                got["meta_info"]["prompt_tokens"]
                == cold["meta_info"]["prompt_tokens"]
                == len(tok.encode(prompt))
            )


# ----------------------------------------------------------------------------- aborts
def test_sglang_5966_aborted_request_answers_instead_of_hanging(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#5966 (``/abort_request`` for an ongoing request: the waiting
    ``/generate`` call must return, not hang). Expected: a held non-streamed request aborted by
    ``rid`` answers 200 with SGLang's abort ``finish_reason``, the tokens generated so far (the
    fake model's first ones), and the server serves the next request."""
    rid = "r23-abort-plain"
    t, box = in_background(_gen, server, {"text": f"{HOLD} go", "rid": rid, "sampling_params": {}})
    wait_running_reqs(server, 1)
    assert _post(server, "/abort_request", {"rid": rid}).status_code == 200
    t.join(30)
    assert not t.is_alive()
    out = box["out"]
    meta = out["meta_info"]
    assert meta["id"] == rid and meta["finish_reason"]["type"] == "abort"
    assert out["output_ids"] == fake_output_ids(tok, meta["completion_tokens"])
    assert (
        _gen(server, {"text": "a", "sampling_params": {"max_new_tokens": 1}})["meta_info"][
            "completion_tokens"
        ]
        == 1
    )


# ----------------------------------------------------------------------------- frontend
def test_sglang_62_frontend_choices_with_default_temperature(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#62 (an ``sgl.gen(..., choices=[...])`` after a plain ``sgl.gen`` with a
    stop string failed in the frontend: ``temperature`` was ``None``). Client: SGLang 0.5.23's own
    frontend over ``RuntimeEndpoint``. Expected: the program runs, the plain generation is the fake
    model's first 10 tokens (no ``END`` in them), and the selection is one of the choices."""
    import sglang as sgl

    backend = sgl.RuntimeEndpoint(server.url)

    @sgl.function
    def program(s: Any, question: str) -> None:
        s += "Q: " + question + "\n"
        s += "A: " + sgl.gen("car", max_tokens=10, stop="END") + "\n"
        s += "Pick: " + sgl.gen("hero", choices=["batman", "superman"])

    state = program.run(question="What is the fastest car?", backend=backend)
    assert state.error() is None
    assert state["car"] == fake_output_text(tok, 10)
    assert state["hero"] in ("batman", "superman")


# ----------------------------------------------------------------------------- min_new_tokens
def test_sglang_31972_min_new_tokens_masks_config_eos_without_tokenizer_eos() -> None:
    """sgl-project/sglang#31972 / #31378 (the ``min_new_tokens`` mask was built from the
    tokenizer's ``eos_token_id`` alone: ``None`` crashed it, and the model config's EOS ids were
    not masked). Expected: with a tokenizer that has no EOS (and with none at all), the stop set is
    ``config.json``'s ``eos_token_id`` list, and the mask matches transformers'
    ``MinNewTokensLengthLogitsProcessor`` over those ids, before and after the minimum."""
    import torch
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.managers.stop_tokens import stop_token_ids
    from sglang_v4.sampling.penalties import apply_penalties
    from sglang_v4.sampling.sampling_params import SamplingParams
    from transformers import MinNewTokensLengthLogitsProcessor

    class _NoEosTokenizer:
        eos_token_id = None
        eos_token = None

    mc = ModelConfig.from_dict({"vocab_size": 50, "eos_token_id": [1, 7]})
    eos = stop_token_ids(mc, _NoEosTokenizer())
    assert eos == stop_token_ids(mc, None) == {1, 7}
    prompt = [3, 4, 5]
    params = SamplingParams(min_new_tokens=3, max_new_tokens=8)
    params.verify(vocab_size=50)
    for n_out in range(5):
        torch.manual_seed(n_out)
        logits = torch.randn(1, 50)
        output = list(range(10, 10 + n_out))
        want = MinNewTokensLengthLogitsProcessor(len(prompt), 3, sorted(eos))(
            torch.tensor([prompt + output]), logits.clone()
        )
        got = apply_penalties(logits.clone(), [params], [output], [prompt], eos_token_ids=eos)
        assert torch.equal(torch.isinf(got), torch.isinf(want)), n_out
        assert torch.equal(got[torch.isfinite(got)], want[torch.isfinite(want)]), n_out


# ----------------------------------------------------------------------------- logprob texts
def test_sglang_24447_logprob_texts_keep_special_tokens_per_token(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#24447 (logprob token texts decoded one id at a time, with
    ``skip_special_tokens=False``, for the prompt, top-k and ``token_ids_logprob`` entries alike;
    transformers 5's ``batch_decode`` of a flat list joins the ids into one string). Oracle: the
    tokenizer's ``decode([id], skip_special_tokens=False)`` of each id. Expected: every text of
    ``input_token_logprobs``, ``input_token_ids_logprobs``, ``output_token_ids_logprobs`` and
    ``output_top_logprobs`` is its own id's decoding (the BOS / EOS / pad markers kept), and the
    first prompt position's logprob is ``None``."""
    ids = [0, 1, 2, 100000, 5]
    want_ids = [0, 1]
    out = _gen(
        server,
        {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 2},
            "return_logprob": True,
            "logprob_start_len": 0,
            "return_text_in_logprobs": True,
            "top_logprobs_num": 2,
            "token_ids_logprob": want_ids,
        },
    )
    meta = out["meta_info"]

    def text(i: int) -> str:
        return tok.decode([i], skip_special_tokens=False)

    assert text(0) != "" and text(1) != ""  # special tokens, not skipped
    entries = meta["input_token_logprobs"]
    assert [e[1] for e in entries] == ids
    assert [e[2] for e in entries] == [text(i) for i in ids]
    assert entries[0][0] is None
    positions = [p for p in meta["input_token_ids_logprobs"] if p] + meta["output_token_ids_logprobs"]
    assert len(positions) == len(ids) - 1 + 2
    for pos in positions:
        assert [e[1] for e in pos] == want_ids
        assert [e[2] for e in pos] == [text(i) for i in want_ids]
    for pos in meta["output_top_logprobs"]:
        assert len(pos) == 2 and [e[2] for e in pos] == [text(e[1]) for e in pos]


def test_sglang_1495_frontend_choice_logprobs_carry_token_text(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#1495 (the frontend's ``select`` asks for ``return_text_in_logprobs``, so
    each choice's ``input_token_logprobs`` read as ``(logprob, id, text)``; SGLang's
    ``choices_logprob`` example). Client: SGLang 0.5.23's frontend over ``RuntimeEndpoint``.
    Expected: the selection is one of the choices; for each choice, the entries after the first
    are the choice's own tokens (oracle: the tokenizer, the choice encoded after a space), each
    text the decoding of its id, and ``normalized_prompt_logprobs`` is their mean."""
    import sglang as sgl

    choices = ["calculator", "search engine"]

    @sgl.function
    def tool_use(s: Any, question: str) -> None:
        s += "To answer this question: " + question + ", "
        s += "I need to use a " + sgl.gen("tool", choices=choices)

    state = tool_use.run(question="What is 5 + 5?", backend=sgl.RuntimeEndpoint(server.url))
    assert state["tool"] in choices
    meta = state.get_meta_info("tool")
    assert len(meta["input_token_logprobs"]) == len(choices)
    for choice, entries, norm in zip(
        choices, meta["input_token_logprobs"], meta["normalized_prompt_logprobs"]
    ):
        full = tok.encode("I need to use a " + choice, add_special_tokens=False)
        head = tok.encode("I need to use a", add_special_tokens=False)
        assert full[: len(head)] == head
        assert [e[1] for e in entries[1:]] == full[len(head) :]
        assert all(e[2] == tok.decode([e[1]]) for e in entries)
        vals = [e[0] for e in entries[1:]]
        assert norm == pytest.approx(sum(vals) / len(vals))


# ----------------------------------------------------------------------------- per-request seed
def test_sglang_1335_per_request_seed_is_batch_invariant(sched_model_dir: str) -> None:
    """sgl-project/sglang#1335 (a per-request random seed: the same request and seed reproduce
    their tokens whatever else runs). Oracle: cold runs, each request alone on a fresh scheduler.
    Expected: on the real tiny model (temperature 1), a seeded request sampled in one batch with two
    others (one with the same seed and prompt, one with another seed) gives the tokens of its cold
    run, the twin gives the same tokens, the other its own cold run's, and the two seeds differ."""
    from scheduler_testutil import drain, make_scheduler, submit

    prompt = [5, 17, 33, 2, 90, 41]
    sampling = {"temperature": 1.0, "top_p": 1.0, "sampling_seed": 1234}
    other = {"temperature": 1.0, "top_p": 1.0, "sampling_seed": 99}
    cold = {}
    for name, sp in (("a", sampling), ("c", other)):
        s = make_scheduler(sched_model_dir)
        submit(s, name, prompt, 12, sampling=sp)
        cold[name] = drain(s)[name]["ids"]
    s = make_scheduler(sched_model_dir)
    submit(s, "a", prompt, 12, sampling=sampling)
    submit(s, "b", prompt, 12, sampling=sampling)
    submit(s, "c", prompt, 12, sampling=other)
    res = drain(s)
    assert len(cold["a"]) == 12
    assert cold["a"] != cold["c"]  # the seed drives the sampling (temperature 1 is not greedy)
    assert res["a"]["ids"] == res["b"]["ids"] == cold["a"]
    assert res["c"]["ids"] == cold["c"]


# ----------------------------------------------------------------------------- EOS in the text
@pytest.mark.parametrize("stream", [False, True])
def test_tensorrt_llm_14336_trailing_eos_hidden_without_skip_special_tokens(
    server: ServerHandle, tok: Any, stream: bool
) -> None:
    """NVIDIA/TensorRT-LLM#14336 (with ``skip_special_tokens=False`` the EOS that ended the
    generation leaked into the text). Oracle: the fake model's scripted output (``FAKE_SCRIPT``
    then EOS) decoded by the tokenizer, trimmed of the matched stop token as SGLang 0.5.23's
    detokenizer does unless ``no_stop_trim``. Expected: the text (non-streamed, or the last stream
    chunk) is the script without the EOS marker; with ``no_stop_trim`` the marker is kept only when
    special tokens are not skipped; ``output_ids`` always end with the EOS id."""
    from server_fixture import FAKE_EOS, FAKE_SCRIPT, FAKE_SCRIPT_TAG

    ids = tok.encode(FAKE_SCRIPT, add_special_tokens=False) + [FAKE_EOS]
    eos_text = tok.decode([FAKE_EOS], skip_special_tokens=False)
    assert eos_text  # the marker is a visible string when special tokens are kept
    for skip, no_trim in ((False, False), (False, True), (True, True), (True, False)):
        sp = {"max_new_tokens": 256, "skip_special_tokens": skip, "no_stop_trim": no_trim}
        body = {"text": f"{FAKE_SCRIPT_TAG} go", "sampling_params": sp, "stream": stream}
        if stream:
            r = requests.post(server.url + "/generate", json=body, stream=True, timeout=60)
            assert r.status_code == 200
            chunks = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith(b"data: {")]
            out = chunks[-1]
        else:
            out = _gen(server, body)
        kept = ids if no_trim else ids[:-1]
        assert out["output_ids"] == ids
        assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": FAKE_EOS}
        assert out["text"] == tok.decode(kept, skip_special_tokens=skip), (skip, no_trim)
        assert out["text"].endswith(eos_text) == (no_trim and not skip)
