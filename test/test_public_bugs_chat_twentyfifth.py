"""A twenty-fifth set of public bug reports, replayed against ``POST /v1/chat/completions``
without tools: request parameters as OpenAI clients send them (``stop`` as a string or a list,
``max_completion_tokens`` next to ``max_tokens``, ``response_format: {"type": "text"}``,
``top_logprobs`` bounds, ``logit_bias``, ``stream_options``, ``store`` / ``metadata``,
``modalities`` / ``audio``), a replayed assistant ``refusal``, non-text content parts (image,
audio) on a text-only model, and the thinking switch sent as ``chat_template_kwargs``.

Fixed here: ``modalities: ["audio"]`` (or ``["text", "audio"]``, or an ``audio`` output object)
was answered 200 with text alone, the audio request silently dropped; it is a 400 naming the
field (vllm-project/vllm-omni#4719), ``["text"]`` being served as before. An assistant
message's ``refusal`` (a refused answer replayed with ``content: null``) was dropped, leaving an
empty assistant turn; it is the turn's text, as a ``refusal`` content part already was
(openai/openai-agents-js#1524). The other reports passed as-is; their tests are regression
guards.

The routes run in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier); the
prompt and sampling parameters a request produces are read back from the engine request the fake
receives. Oracles: the ``openai`` client (its request parameter types, its errors, its response
and chunk types), SGLang 0.5.23's own ``SamplingParams`` in the venv, DeepSeek's own request
converter and V4 encoder (``deepseek-recipe``), OpenAI's documented field ranges, the DeepSeek-V4
tokenizer's ids, and a cold run of the same conversation without the field under test.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from transformers import PreTrainedTokenizerFast

openai = pytest.importorskip("openai")
pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_prompt  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

CHAT = "/v1/chat/completions"
MODEL = "dsv4-test"
HI = [{"role": "user", "content": "Hi"}]
REPLY = "Hello there, general Kenobi."


def _post(tm: FakeTM, body: dict[str, Any], **args: Any) -> Any:
    return _client(tm, **args).post(CHAT, json={"model": MODEL, "messages": HI, **body})


def _served(tok: PreTrainedTokenizerFast, body: dict[str, Any], **args: Any) -> tuple[str, dict[str, Any]]:
    """The prompt text ``body`` renders and the sampling parameters of its engine request, the
    request answered with 200 in the ``openai`` client's ``ChatCompletion`` shape."""
    tm = FakeTM(tok)
    r = _post(tm, body, **args)
    assert r.status_code == 200, r.text
    ChatCompletion.model_validate(r.json())
    (req,) = tm.received
    text = req.text if req.text is not None else tok.decode(req.input_ids)
    return text, dict(req.sampling_params or {})


def _assert_400(tm: FakeTM, r: Any, param: str) -> None:
    """A 400 in OpenAI's error shape naming ``param``, no engine request made."""
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert err.get("param") == param, err
    assert tm.received == []


# --------------------------------------------------------------------------- sampling fields


@pytest.mark.parametrize("stop", ["STOP", ["STOP"], ["STOP", "User:"]], ids=["string", "list1", "list2"])
def test_rapid_mlx_2358_stop_as_a_string_or_a_list(tok: PreTrainedTokenizerFast, stop: Any) -> None:
    """raullenchai/Rapid-MLX#2358 (``"stop": "STOP"`` was a 400 "Input should be a valid list"
    while ``["STOP"]`` worked) and lm-sys/FastChat#1923 (a list broke a worker that took a
    string). OpenAI's ``stop`` is a string or a list of strings; both forms are served and reach
    the engine as the same stop strings. Oracle: the ``openai`` client accepts both forms, and
    SGLang 0.5.23's own ``SamplingParams`` normalises the engine request's ``stop`` to the list
    the request meant."""
    tm = FakeTM(tok)
    answer = _oai(_client(tm)).chat.completions.create(model=MODEL, messages=HI, stop=stop)
    assert answer.choices[0].message.content == REPLY
    from sglang.srt.sampling.sampling_params import SamplingParams as SGLangSamplingParams

    (req,) = tm.received
    ref = SGLangSamplingParams(stop=req.sampling_params["stop"])
    ref.normalize(tok)
    assert ref.stop_strs == ([stop] if isinstance(stop, str) else stop)


def test_void_128_max_completion_tokens_is_served_and_caps_the_answer(tok: PreTrainedTokenizerFast) -> None:
    """voideditor/void#128: a server refused ``max_completion_tokens`` (``extra_forbidden``), the
    name OpenAI's API uses now that ``max_tokens`` is deprecated for chat. It is served and caps
    the answer: 3 completion tokens, ``finish_reason`` ``"length"``, the reply's first 3 tokens;
    sent with ``max_tokens`` it wins, as vLLM reads the pair (``max_completion_tokens or
    max_tokens``). Oracle: the ``openai`` client's parameter and ``ChatCompletion``, the
    tokenizer's ids of the reply."""
    ids = tok.encode(REPLY, add_special_tokens=False)
    assert len(ids) > 5
    for extra in ({"max_completion_tokens": 3}, {"max_tokens": 5, "max_completion_tokens": 3}):
        tm = FakeTM(tok)
        answer = _oai(_client(tm)).chat.completions.create(model=MODEL, messages=HI, **extra)
        choice = answer.choices[0]
        assert answer.usage is not None and answer.usage.completion_tokens == 3, extra
        assert choice.finish_reason == "length"
        assert choice.message.content == tok.decode(ids[:3])


def test_openai_agents_js_835_response_format_text_is_plain_text(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-agents-js#835: providers refused ``response_format: {"type": "text"}``, the
    OpenAI default that clients send explicitly. It is served as no format at all: the same prompt
    as the cold run without the field and no grammar on the engine request. Oracle: the cold run;
    the ``openai`` client's ``ResponseFormatText`` parameter."""
    cold_prompt, cold_sp = _served(tok, {})
    prompt, sp = _served(tok, {"response_format": {"type": "text"}})
    assert prompt == cold_prompt
    assert sp == cold_sp
    assert not any(sp.get(k) for k in ("json_schema", "regex", "ebnf", "structural_tag"))
    answer = _oai(_client(FakeTM(tok))).chat.completions.create(
        model=MODEL, messages=HI, response_format={"type": "text"}
    )
    assert answer.choices[0].message.content == REPLY


@pytest.mark.parametrize("top", [21, 16384])
def test_textgen_7657_top_logprobs_above_twenty_is_400(tok: PreTrainedTokenizerFast, top: int) -> None:
    """oobabooga/textgen#7657: unbounded ``top_logprobs`` (16384 in the report) was forwarded and
    blew up the response. OpenAI documents ``top_logprobs`` as an integer between 0 and 20: more
    is a 400 naming the field before any engine work, and 20 is served with 20 slots asked of the
    engine. Oracle: OpenAI's documented range; the ``openai`` client raises ``BadRequestError``."""
    tm = FakeTM(tok)
    _assert_400(tm, _post(tm, {"logprobs": True, "top_logprobs": top}), "top_logprobs")
    with pytest.raises(openai.BadRequestError):
        _oai(_client(tm)).chat.completions.create(model=MODEL, messages=HI, logprobs=True, top_logprobs=top)
    assert tm.received == []
    ok = FakeTM(tok)
    answer = _oai(_client(ok)).chat.completions.create(
        model=MODEL, messages=HI, logprobs=True, top_logprobs=20
    )
    (req,) = ok.received
    assert req.top_logprobs_num == 20
    assert answer.choices[0].logprobs is not None and answer.choices[0].logprobs.content


def test_sglang_6579_logit_bias_reaches_the_sampler_and_is_bounded(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#6579 (``logit_bias`` was accepted and ignored, so a banned token was
    still generated). OpenAI's ``logit_bias`` maps token ids (JSON string keys) to a bias in
    [-100, 100]; the engine request carries exactly that map, and a bias out of range or a key
    that is not a token id is a 400 naming ``logit_bias``. Oracle: OpenAI's documented field; the
    DeepSeek-V4 tokenizer's id of the banned word."""
    (rice,) = tok.encode(" rice", add_special_tokens=False)
    tm = FakeTM(tok)
    _oai(_client(tm)).chat.completions.create(model=MODEL, messages=HI, logit_bias={str(rice): -100})
    (req,) = tm.received
    assert {int(k): float(v) for k, v in req.sampling_params["logit_bias"].items()} == {rice: -100.0}
    for bad in ({str(rice): 150}, {str(rice): -100.5}, {"rice": -100}, {str(len(tok) + 10**6): 1}):
        tm = FakeTM(tok)
        _assert_400(tm, _post(tm, {"logit_bias": bad}), "logit_bias")


# --------------------------------------------------------------------------- content parts


def test_tgi_2565_image_part_on_a_text_only_model_fails_explicitly(tok: PreTrainedTokenizerFast) -> None:
    """huggingface/text-generation-inference#2565 (an ``image_url`` part sent to a text-only model
    was answered as if the image had been seen) and vllm-project/vllm-ascend#10426 (the same
    request was a 500 Internal Server Error). It is a 400 naming the part, before any engine work,
    streamed or not, and the server keeps answering. Oracle: the ``openai`` client raises
    ``BadRequestError`` (not ``InternalServerError``); a cold request on the same app succeeds."""
    parts = [
        {"type": "text", "text": "Describe this image in one sentence."},
        {"type": "image_url", "image_url": {"url": "https://example.com/liberty.jpg"}},
    ]
    msgs = [{"role": "user", "content": parts}]
    tm = FakeTM(tok)
    client = _client(tm)
    for stream in (False, True):
        r = client.post(CHAT, json={"model": MODEL, "messages": msgs, "stream": stream})
        _assert_400(tm, r, "messages[0].content[1]")
        with pytest.raises(openai.BadRequestError):
            _oai(client).chat.completions.create(model=MODEL, messages=msgs, stream=stream)
    assert tm.received == []
    assert client.post(CHAT, json={"model": MODEL, "messages": HI}).status_code == 200


def test_openai_python_2454_input_audio_part_refused_not_dropped(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-python#2454 (``input_audio`` parts, part of OpenAI's chat content types, were
    refused by a parser that knew only text and images) and unslothai/unsloth#10255 (a backend
    that cannot hear stripped the audio and answered the text alone -- "a plausible reply to a
    question about audio nobody heard"). On this text-only model the part is a 400 naming it, not
    dropped. Oracle: the ``openai`` client's ``ChatCompletionContentPartInputAudioParam`` request
    raises ``BadRequestError``; no engine request is made."""
    parts = [
        {"type": "text", "text": "What is said here?"},
        {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}},
    ]
    msgs = [{"role": "user", "content": parts}]
    tm = FakeTM(tok)
    _assert_400(tm, _client(tm).post(CHAT, json={"model": MODEL, "messages": msgs}), "messages[0].content[1]")
    with pytest.raises(openai.BadRequestError):
        _oai(_client(tm)).chat.completions.create(model=MODEL, messages=msgs)
    assert tm.received == []


# --------------------------------------------------------------------------- output types


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"modalities": ["audio"]}, "modalities[0]"),
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "modalities[1]"),
        ({"modalities": ["video"]}, "modalities[0]"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ],
    ids=["audio", "text-audio", "video", "audio-object"],
)
def test_vllm_omni_4719_unsupported_output_modality_is_400(
    tok: PreTrainedTokenizerFast, extra: dict[str, Any], param: str
) -> None:
    """vllm-project/vllm-omni#4719: a request for an output modality the model cannot produce was
    answered 200 (the request silently dropped); the report's expected behaviour is a 400 saying
    the modality is not supported. This model generates text only: audio (or any other non-text
    output, or OpenAI's ``audio`` output settings) is a 400 naming the field, streamed or not,
    before any engine work. Oracle: the report's stated expected value; the ``openai`` client's
    ``modalities`` / ``audio`` parameters raise ``BadRequestError``."""
    for stream in (False, True):
        tm = FakeTM(tok)
        r = _post(tm, {**extra, "stream": stream})
        _assert_400(tm, r, param)
        assert not r.headers.get("content-type", "").startswith("text/event-stream")
    tm = FakeTM(tok)
    with pytest.raises(openai.BadRequestError):
        _oai(_client(tm)).chat.completions.create(model=MODEL, messages=HI, **extra)
    assert tm.received == []


def test_vllm_omni_4719_text_modality_is_the_default(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm-omni#4719's other half: ``modalities: ["text"]`` (OpenAI's default, sent
    explicitly by clients) is served exactly as the request without it. Oracle: the cold run."""
    assert _served(tok, {"modalities": ["text"]}) == _served(tok, {})
    answer = _oai(_client(FakeTM(tok))).chat.completions.create(model=MODEL, messages=HI, modalities=["text"])
    assert answer.choices[0].message.content == REPLY


# --------------------------------------------------------------------------- stored fields, usage


def test_langchaingo_1484_metadata_without_store_is_served(tok: PreTrainedTokenizerFast) -> None:
    """tmc/langchaingo#1484: a ``metadata`` object sent without ``store: true`` was a 400 ("The
    'metadata' parameter is only allowed when 'store' is enabled"); the report's expected result
    is that the call succeeds. This server stores no chat completions: ``metadata`` and ``store``
    (either value) are accepted and change nothing. Oracle: the report's expected value; the cold
    run's prompt and sampling parameters."""
    cold = _served(tok, {})
    for extra in (
        {"metadata": {"feature": "support", "team": "ai"}},
        {"store": True, "metadata": {"feature": "support"}},
        {"store": False},
    ):
        assert _served(tok, extra) == cold, extra
    answer = _oai(_client(FakeTM(tok))).chat.completions.create(
        model=MODEL, messages=HI, metadata={"feature": "support"}
    )
    assert answer.choices[0].message.content == REPLY


def test_kthena_202_stream_usage_only_when_asked(tok: PreTrainedTokenizerFast) -> None:
    """volcano-sh/kthena#202: token usage was added to a stream the client had not asked it of.
    OpenAI's ``stream_options.include_usage``: only when true, one extra chunk before ``[DONE]``
    carries ``usage`` (its ``choices`` empty) and every other chunk has ``usage`` null; absent or
    false, no chunk carries usage. Oracle: OpenAI's documented field; the ``openai`` client's
    ``ChatCompletionChunk``; the tokenizer's count of the reply's tokens."""
    n_reply = len(tok.encode(REPLY, add_special_tokens=False))
    for opts in (None, {"include_usage": False}):
        body: dict[str, Any] = {"stream": True} if opts is None else {"stream": True, "stream_options": opts}
        r = _post(FakeTM(tok), body)
        assert r.status_code == 200, r.text
        events = sse_data_events(r)
        assert events[-1] == "[DONE]"
        chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
        assert chunks and all(c.usage is None for c in chunks), opts
    r = _post(FakeTM(tok), {"stream": True, "stream_options": {"include_usage": True}})
    events = sse_data_events(r)
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    with_usage = [c for c in chunks if c.usage is not None]
    assert with_usage == [chunks[-1]]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == n_reply


# --------------------------------------------------------------------------- thinking switch


@pytest.mark.parametrize(
    ("kwargs", "default", "thinking"),
    [
        ({"enable_thinking": False}, {"thinking": True}, False),
        ({"thinking": False}, {"thinking": True}, False),
        ({"enable_thinking": True}, None, True),
    ],
    ids=["enable_thinking-off-over-default-on", "thinking-off-over-default-on", "enable_thinking-on"],
)
def test_localai_11674_enable_thinking_false_is_not_dropped(
    tok: PreTrainedTokenizerFast, kwargs: dict[str, Any], default: dict[str, Any] | None, thinking: bool
) -> None:
    """mudler/LocalAI#11674: ``enable_thinking: false`` was silently dropped, so thinking could be
    switched on but never off. Sent as ``chat_template_kwargs``, the switch decides the prompt both
    ways, also over a server default of thinking on (SGLang's ``--default-chat-template-kwargs``).
    Oracle: DeepSeek's own request converter and V4 encoder's prompt with thinking off / on."""
    body = {"messages": HI}
    args = {} if default is None else {"default_chat_template_kwargs": default}
    prompt, _ = _served(tok, {"chat_template_kwargs": kwargs}, **args)
    assert prompt == recipe_prompt(body, thinking=thinking)


# --------------------------------------------------------------------------- replayed history


def test_openai_agents_js_1524_replayed_refusal_keeps_its_text(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-agents-js#1524: a replayed assistant refusal lost its text (only text parts
    were mapped), leaving an empty assistant turn in the history; the fix maps a refusal to text.
    An assistant message as the ``openai`` client types it (``ChatCompletionAssistantMessageParam``
    with ``content: null`` and ``refusal``, the shape of a refused answer sent back) renders as the
    same turn with the refusal as its text, and text content with a ``refusal`` beside it renders as
    the text then a refusal part. Oracle: the cold run with the text given as content (a string, or
    OpenAI's text and refusal content parts), and DeepSeek's own converter and V4 encoder for the
    string form."""
    from openai.types.chat import ChatCompletionAssistantMessageParam

    said = "I can't help with that."
    refused: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": None, "refusal": said}
    again = {"role": "user", "content": "Why not?"}
    cold = {"messages": [*HI, {"role": "assistant", "content": said}, again]}
    for thinking in (False, True):
        kw = {"chat_template_kwargs": {"thinking": thinking}}
        prompt, _ = _served(tok, {"messages": [*HI, refused, again], **kw})
        assert prompt == _served(tok, {**cold, **kw})[0] == recipe_prompt(cold, thinking=thinking)
    both = {"role": "assistant", "content": "Here is a part.", "refusal": said}
    parts = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Here is a part."}, {"type": "refusal", "refusal": said}],
    }
    assert _served(tok, {"messages": [*HI, both, again]}) == _served(tok, {"messages": [*HI, parts, again]})
