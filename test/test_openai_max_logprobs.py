"""vLLM's ``--max-logprobs`` on the OpenAI routes, and ``prompt_logprobs`` next to the output's own
logprobs, through FastAPI's TestClient on the fake tokenizer manager of ``test_openai_api``.

Oracles: vLLM's documented rule and its 400 messages (``--max-logprobs``, default 20, ``-1`` the
vocabulary size; ``SamplingParams``' "Requested sample / prompt logprobs of N, which is greater
than max allowed: M"; its request validators for a negative ``top_logprobs`` / ``logprobs``), the
``openai`` client's own parsing of the answers, and what reached the engine (the fake records each
``GenerateReqInput``).
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest
from openai_fake_tm import FakeTM
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from sglang_v4.managers.io_struct import GenerateReqInput, TokenizedGenerateReqInput
from sglang_v4.managers.tokenization import TokenizationMixin
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.server_args import ServerArgs
from transformers import PreTrainedTokenizerFast

MSGS = [{"role": "user", "content": "Hi"}]


def _refused(call: Any, param: str) -> str:
    with pytest.raises(openai.BadRequestError) as ei:
        call()
    assert ei.value.body["param"] == param, ei.value.body
    return ei.value.message


def test_default_bound_is_vllms_20_on_every_field(tok: PreTrainedTokenizerFast) -> None:
    tm = FakeTM(tok)
    c = _oai(_client(tm))
    vocab = len(tok)
    chat = lambda **kw: c.chat.completions.create(model="dsv4-test", messages=MSGS, max_tokens=2, **kw)  # noqa: E731
    comp = lambda **kw: c.completions.create(model="dsv4-test", prompt="Hi", max_tokens=2, **kw)  # noqa: E731
    msg = _refused(lambda: chat(logprobs=True, top_logprobs=21), "top_logprobs")
    assert "Requested sample logprobs of 21, which is greater than max allowed: 20" in msg
    msg = _refused(lambda: chat(logprobs=True, top_logprobs=-1), "top_logprobs")  # -1: the vocabulary
    assert f"Requested sample logprobs of {vocab}, which is greater than max allowed: 20" in msg
    assert "must be a positive value or -1" in _refused(
        lambda: chat(logprobs=True, top_logprobs=-2), "top_logprobs"
    )
    assert "`logprobs` must be set to true" in _refused(lambda: chat(top_logprobs=2), "top_logprobs")
    msg = _refused(lambda: comp(logprobs=100), "logprobs")
    assert "Requested sample logprobs of 100, which is greater than max allowed: 20" in msg
    msg = _refused(lambda: comp(logprobs=-1), "logprobs")  # -1: the vocabulary (vllm-project/vllm#46175)
    assert f"Requested sample logprobs of {vocab}, which is greater than max allowed: 20" in msg
    assert "must be a positive value or -1" in _refused(lambda: comp(logprobs=-2), "logprobs")
    msg = _refused(lambda: comp(extra_body={"prompt_logprobs": 21}), "prompt_logprobs")
    assert "Requested prompt logprobs of 21, which is greater than max allowed: 20" in msg
    n = len(tm.received)
    out = chat(logprobs=True, top_logprobs=20)  # the bound itself
    assert out.choices[0].logprobs is not None and tm.received[-1].top_logprobs_num == 20
    chat(top_logprobs=0)  # vLLM: a count of 0 needs no `logprobs`
    comp(logprobs=20)
    assert len(tm.received) == n + 3  # the refused ones never reached the engine


def test_max_logprobs_flag_moves_the_bound(tok: PreTrainedTokenizerFast) -> None:
    tm = FakeTM(tok)
    c = _oai(_client(tm, max_logprobs=5))
    chat = lambda **kw: c.chat.completions.create(model="dsv4-test", messages=MSGS, max_tokens=2, **kw)  # noqa: E731
    comp = lambda **kw: c.completions.create(model="dsv4-test", prompt="Hi", max_tokens=2, **kw)  # noqa: E731
    for call, param, kind in (
        (lambda: chat(logprobs=True, top_logprobs=6), "top_logprobs", "sample"),
        (lambda: comp(logprobs=6), "logprobs", "sample"),
        (lambda: comp(extra_body={"prompt_logprobs": 6}), "prompt_logprobs", "prompt"),
        (lambda: chat(extra_body={"prompt_logprobs": 6}), "prompt_logprobs", "prompt"),
    ):
        assert f"Requested {kind} logprobs of 6, which is greater than max allowed: 5" in _refused(
            call, param
        )
    chat(logprobs=True, top_logprobs=5)
    assert tm.received[-1].top_logprobs_num == 5
    # -1: the vocabulary size is the bound, and a request's -1 asks for the whole vocabulary
    tm = FakeTM(tok)
    c = _oai(_client(tm, max_logprobs=-1))
    c.chat.completions.create(model="dsv4-test", messages=MSGS, max_tokens=1, logprobs=True, top_logprobs=50)
    assert tm.received[-1].top_logprobs_num == 50
    c.chat.completions.create(model="dsv4-test", messages=MSGS, max_tokens=1, logprobs=True, top_logprobs=-1)
    assert tm.received[-1].top_logprobs_num == len(tok)
    c.completions.create(model="dsv4-test", prompt="Hi", max_tokens=1, logprobs=100)
    assert tm.received[-1].top_logprobs_num == 100


def test_max_logprobs_flag_parses_and_is_checked() -> None:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert ServerArgs.from_cli_args(parser.parse_args(["--device", "cpu"])).max_logprobs == 20
    args = parser.parse_args(["--device", "cpu", "--max-logprobs", "-1"])
    assert ServerArgs.from_cli_args(args).max_logprobs == -1
    with pytest.raises(ValueError, match=r"^max_logprobs must be an integer >= 0, or -1"):
        ServerArgs(device="cpu", max_logprobs=-2)


def test_prompt_logprobs_alone_returns_no_output_logprobs(tok: PreTrainedTokenizerFast) -> None:
    """vLLM: ``prompt_logprobs`` asks for the prompt's logprobs only; without ``logprobs`` the
    choices carry none (``logprobs: null``), and with them the output keeps the request's own top
    count (the engine computes the larger one for both)."""
    tm = FakeTM(tok)
    c = _oai(_client(tm))
    out = c.completions.create(
        model="dsv4-test", prompt="Hi", max_tokens=2, extra_body={"prompt_logprobs": 5}
    )
    assert out.choices[0].logprobs is None
    assert out.choices[0].model_extra["prompt_logprobs"][0] is None  # asked for: answered
    out = c.chat.completions.create(
        model="dsv4-test", messages=MSGS, max_tokens=2, extra_body={"prompt_logprobs": 5}
    )
    assert out.choices[0].logprobs is None and out.model_extra["prompt_logprobs"][0] is None
    out = c.chat.completions.create(
        model="dsv4-test",
        messages=MSGS,
        max_tokens=2,
        logprobs=True,
        top_logprobs=1,
        extra_body={"prompt_logprobs": 5},
    )
    assert tm.received[-1].top_logprobs_num == 5
    assert out.choices[0].logprobs is not None
    assert [len(t.top_logprobs) for t in out.choices[0].logprobs.content] == [1, 1]
    out = c.completions.create(
        model="dsv4-test", prompt="Hi", max_tokens=2, logprobs=1, extra_body={"prompt_logprobs": 5}
    )
    lp = out.choices[0].logprobs
    assert lp is not None and lp.top_logprobs is not None
    # OpenAI's legacy rule: the top ``logprobs`` candidates plus the sampled token
    assert all(1 <= len(t) <= 2 for t in lp.top_logprobs)


def test_whole_vocabulary_top_logprobs_keeps_every_candidate(tok: PreTrainedTokenizerFast) -> None:
    """``top_logprobs: -1`` (the whole vocabulary, under ``--max-logprobs -1``) returns every
    candidate the engine computed, streamed or not, for every sample (``n``): the fake engine's
    top lists hold 2 entries per position, so each position's ``top_logprobs`` has 2 (a ``-1``
    read as a slice end would drop the last one)."""
    tm = FakeTM(tok)
    c = _oai(_client(tm, max_logprobs=-1))
    kw: dict[str, Any] = dict(model="dsv4-test", messages=MSGS, max_tokens=2, logprobs=True, top_logprobs=-1)
    out = c.chat.completions.create(n=2, **kw)
    for choice in out.choices:
        assert choice.logprobs is not None and choice.logprobs.content
        assert [len(t.top_logprobs) for t in choice.logprobs.content] == [2] * len(choice.logprobs.content)
    streamed = [
        len(t.top_logprobs)
        for chunk in c.chat.completions.create(stream=True, **kw)
        for ch in chunk.choices
        if ch.logprobs is not None and ch.logprobs.content
        for t in ch.logprobs.content
    ]
    assert streamed == [2] * len(out.choices[0].logprobs.content)


class _VolumeGuardTM(FakeTM):
    """The fake engine with the tokenizer manager's own logprob-volume guard in front
    (``TokenizationMixin._check_logprob_volume`` on the request's items and samples)."""

    scheduler_info = SimpleNamespace(max_total_num_tokens=0)

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        obj.normalize_batch_and_arguments()
        subs = (
            [obj]
            if obj.is_single
            else [obj[j] for j in range(obj.batch_size) for _ in range(obj.parallel_sample_num)]
        )
        items = []
        for s in subs:
            ids = list(s.input_ids) if s.input_ids is not None else self.tokenizer.encode(s.text)
            items.append(
                TokenizedGenerateReqInput(
                    rid=str(s.rid),
                    input_text=None,
                    input_ids=ids,
                    sampling_params=SamplingParams.from_dict(s.sampling_params),
                    return_logprob=bool(s.return_logprob),
                    logprob_start_len=-1 if s.logprob_start_len is None else s.logprob_start_len,
                    top_logprobs_num=int(s.top_logprobs_num or 0),
                    token_ids_logprob=s.token_ids_logprob,
                )
            )
        TokenizationMixin._check_logprob_volume(self, items)  # type: ignore[arg-type]
        async for out in super().generate_request(obj, request):
            yield out


def test_logprob_volume_refusal_names_the_routes_field(
    tok: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``--max-logprobs 20`` a request meets the engine's bound on its logprob values
    (``SGLANG_V4_MAX_LOGPROB_ENTRIES``); its 400 on the OpenAI routes names the field the client
    sent (chat ``top_logprobs``, completions ``logprobs``, ``prompt_logprobs`` when that set the
    count), in the message and in ``param`` as the ``openai`` client parses them, never
    ``/generate``'s ``top_logprobs_num``. Oracle: the arithmetic of positions x (1 + count)."""
    monkeypatch.setenv("SGLANG_V4_MAX_LOGPROB_ENTRIES", "100")
    tm = _VolumeGuardTM(tok)
    c = _oai(_client(tm, max_logprobs=-1))
    chat = lambda **kw: c.chat.completions.create(model="dsv4-test", messages=MSGS, **kw)  # noqa: E731
    comp = lambda **kw: c.completions.create(model="dsv4-test", prompt="Hi", **kw)  # noqa: E731
    # 4 output positions x (1 + 30) = 124 > 100
    for call, param in (
        (lambda: chat(max_tokens=4, logprobs=True, top_logprobs=30), "top_logprobs"),
        (lambda: chat(max_tokens=4, logprobs=True, top_logprobs=30, stream=True), "top_logprobs"),
        (lambda: comp(max_tokens=4, logprobs=30), "logprobs"),
        (lambda: comp(max_tokens=4, logprobs=30, stream=True), "logprobs"),
        (lambda: chat(max_tokens=4, extra_body={"prompt_logprobs": 30}), "prompt_logprobs"),
        (lambda: comp(max_tokens=4, logprobs=1, extra_body={"prompt_logprobs": 30}), "prompt_logprobs"),
    ):
        msg = _refused(call, param)
        assert f"400 - {param}: the request asks" in msg and "top_logprobs_num" not in msg, msg
        assert "SGLANG_V4_MAX_LOGPROB_ENTRIES" in msg and "at most 100 " in msg, msg
    # 3 x 31 = 93 fits
    out = chat(max_tokens=3, logprobs=True, top_logprobs=30)
    assert out.choices[0].logprobs is not None
    comp(max_tokens=3, logprobs=30)
