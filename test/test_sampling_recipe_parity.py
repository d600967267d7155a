"""Seeded random sampling fields of chat completions, Responses and Anthropic Messages requests,
served in process (the engine request read back from a fake tokenizer manager), must resolve as
DeepSeek's own converter (``deepseek-recipe``'s ``InferenceOptions``) resolves them: the same
refusals (a 400 naming a refused field), and for an accepted request the same ``temperature``,
``top_p``, output limit, ``logprobs`` / ``top_logprobs`` count and ``seed`` handed to the sampler.

SGLang serves DeepSeek-V4 through the converter for the prompt and the reply only: the body it
hands over carries messages, thinking, tools, ``tool_choice``, ``response_format`` and a named
``reasoning_effort``, never a sampling field, and its sampler reads the request's own fields.
What the converter's sampling policy does beyond that is DeepSeek's hosted API, and this server
follows SGLang there; so the random sets leave out, each on purpose:

* thinking mode's forced ``temperature`` / ``top_p`` 1.0: the oracle runs with thinking off,
  whatever the request's mode (the served values must not depend on it);
* the converter's defaults for an unset field (``temperature`` / ``top_p`` 1.0, ``max_tokens``
  8192 / 65536 / 131072): an unset field stays unset in the request handed on, and the server's
  ``--sampling-defaults`` fill it (the checkpoint's ``generation_config.json`` by default, as in
  SGLang); an unset output limit is the room the context leaves;
* the converter's ``max_tokens`` ceiling 393216 (the context check refuses an over-long request
  here) and its floor 1 on chat and Messages (``max_tokens: 0`` prefills the prompt and generates
  nothing: prompt scoring, Anthropic's cache pre-warm);
* a negative chat ``seed`` (the converter refuses it; ``-1`` leaves the request unseeded and any
  other value seeds it, as on vLLM) and ``top_logprobs: -1`` (vLLM's "the vocabulary", refused
  above the bound 20 anyway);
* ``top_logprobs: 0`` without ``logprobs`` on chat (the converter refuses it, vLLM's rule does
  not: nothing is reported either way);
* ``n`` above 1 (the converter serves one choice only);
* a Responses ``top_logprobs`` without ``include: ["message.output_text.logprobs"]`` (the
  converter reports logprobs from ``top_logprobs`` alone; OpenAI, vLLM and SGLang only with the
  ``include``), and a Responses ``seed`` (a sampling extra this server takes as on chat; the
  converter drops it);
* a Messages ``temperature`` in (1, 2] (Anthropic's documented range is [0, 1]; the converter
  takes OpenAI's [0, 2]) and ``top_k`` (the converter has none).

One converter quirk is mapped rather than left out: it ignores chat ``max_completion_tokens``
(only ``max_tokens`` reaches its options), which OpenAI documents as the current name of the
field, so a body with ``max_completion_tokens`` goes to the oracle as ``max_tokens``.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

import deepseek_recipe as recipe  # noqa: E402
from anthropic_testutil import make_clients  # noqa: E402
from fake_prompt_tm import MODEL, PromptTM  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

ROUTES = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
INCLUDE_LOGPROBS = ["message.output_text.logprobs"]
MSGS = [{"role": "user", "content": "hi"}]


def _temperature(rng: random.Random, top: float, bad: set[str]) -> Any:
    """A ``temperature``: in [0, ``top``] (edges too), or, one time in eight, out of [0, 2]."""
    if rng.random() < 0.125:
        bad.add("temperature")
        return rng.choice([2.0 + rng.uniform(0.001, 3.0), -rng.uniform(0.001, 1.0)])
    return rng.choice([0.0, top, round(rng.uniform(0.0, top), 3)])


def _top_p(rng: random.Random, bad: set[str]) -> Any:
    """A ``top_p``: in (0, 1], or, one time in eight, 0, below it or above 1."""
    if rng.random() < 0.125:
        bad.add("top_p")
        return rng.choice([0.0, 1.0 + rng.uniform(0.001, 1.0), -rng.uniform(0.001, 1.0)])
    return rng.choice([1.0, round(rng.uniform(0.001, 1.0), 3)])


def _limit(rng: random.Random, field: str, bad: set[str], floor: int = 1) -> int:
    """An output limit: 1..4000, or, one time in eight, below ``floor``."""
    if rng.random() < 0.125:
        bad.add(field)
        return rng.randint(-50, floor - 1)
    return rng.randint(1, 4000)


def _fields(rng: random.Random, api: str) -> tuple[dict[str, Any], set[str]]:
    """``(fields, bad)``: random sampling fields of an ``api`` request (each present or not, and
    ``None`` at times, as a client that cannot leave a field out sends it) and the names of
    those out of both servers' ranges (module docstring for what is left out)."""
    bad: set[str] = set()
    f: dict[str, Any] = {}
    if rng.random() < 0.6:
        f["temperature"] = (
            None if rng.random() < 0.1 else _temperature(rng, 1.0 if api == "messages" else 2.0, bad)
        )
    if rng.random() < 0.5:
        f["top_p"] = None if rng.random() < 0.1 else _top_p(rng, bad)
    if api == "messages":
        f["max_tokens"] = _limit(rng, "max_tokens", bad, floor=0)
        return f, bad
    if api == "responses":
        if rng.random() < 0.6:
            f["max_output_tokens"] = _limit(rng, "max_output_tokens", bad)
        if rng.random() < 0.4:
            count = rng.randint(0, 20)
            if rng.random() < 0.15:
                bad.add("top_logprobs")
                count = rng.randint(21, 30)
            f.update(top_logprobs=count, include=INCLUDE_LOGPROBS)
        return f, bad
    if rng.random() < 0.6:
        key = rng.choice(["max_tokens", "max_completion_tokens"])
        f[key] = _limit(rng, key, bad, floor=0)
    if rng.random() < 0.5:
        f["logprobs"] = rng.choice([True, False])
    if rng.random() < 0.4:
        count = rng.randint(0 if f.get("logprobs") else 1, 20)
        if rng.random() < 0.15:
            count = rng.randint(21, 30)
        if count > 20 or not f.get("logprobs"):
            bad.add("top_logprobs")
        f["top_logprobs"] = count
    if rng.random() < 0.4:
        if rng.random() < 0.15:
            bad.add("seed")
            f["seed"] = rng.randint(2**63, 2**64 - 1)
        else:
            f["seed"] = rng.choice([0, 2**63 - 1, rng.randint(0, 2**63 - 1)])
    return f, bad


def recipe_sampling(api: str, fields: dict[str, Any]) -> dict[str, Any] | None:
    """DeepSeek's converter's resolved sampling options of an ``api`` request with ``fields``
    (thinking off, so no mode forces a value; ``max_completion_tokens`` handed over as
    ``max_tokens``): ``temperature``, ``top_p``, ``max_tokens``, ``logprobs``, ``top_logprobs``
    and ``seed`` (``None`` where unset), or ``None`` when it refuses the request."""
    f = dict(fields)
    if "max_completion_tokens" in f:
        f["max_tokens"] = f.pop("max_completion_tokens")
    body: dict[str, Any] = {"model": "DeepSeek-V4-Pro", **f}
    if api == "responses":
        body["input"] = "hi"
        cls: Any = recipe.ResponsesRequest
    else:
        body.update(messages=MSGS, thinking={"type": "disabled"})
        cls = recipe.ChatCompletionRequest if api == "chat" else recipe.MessagesRequest
    try:
        o = cls(body).convert(recipe.ConversionOptions(default_thinking_mode=False)).inference_options
    except (recipe.ConversionError, ValueError, OverflowError):
        return None
    return {
        "temperature": o.temperature,
        "top_p": o.top_p,
        "max_tokens": o.max_tokens,
        "logprobs": o.logprobs,
        "top_logprobs": o.top_logprobs,
        "seed": o.seed,
    }


@pytest.fixture(scope="module")
def served(tok: PreTrainedTokenizerFast) -> tuple[PromptTM, TestClient]:
    """The fake tokenizer manager and an app serving the OpenAI and Anthropic routes over it."""
    tm = PromptTM(tok, reply="ok")
    _, _, tc = make_clients(tm)
    return tm, tc


def serve(
    served: tuple[PromptTM, TestClient], api: str, fields: dict[str, Any], thinking: bool
) -> tuple[int, dict[str, Any], Any]:
    """``(status, response JSON, engine request or None)`` of an ``api`` request with ``fields``,
    thinking on or off."""
    tm, tc = served
    body: dict[str, Any] = {"model": MODEL, **fields}
    if api == "responses":
        body.update(input="hi", reasoning={"effort": "high" if thinking else "none"})
    else:
        body["messages"] = MSGS
    if api == "chat":
        body["chat_template_kwargs"] = {"thinking": thinking}
    elif api == "messages":
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024} if thinking else {"type": "disabled"}
    tm.received.clear()
    r = tc.post(ROUTES[api], json=body)
    return r.status_code, r.json(), (tm.received[0] if tm.received else None)


def _refused_field(api: str, resp: dict[str, Any]) -> str:
    """The text of a 400 that names the refused field: OpenAI's ``param``, or the start of an
    Anthropic error's message (``"temperature: must be ..."``)."""
    err = resp.get("error") or {}
    if api == "messages":
        return err.get("message", "")
    return str(err.get("param") or resp.get("param"))


def _check(api: str, fields: dict[str, Any], bad: set[str], want: dict[str, Any] | None, got: Any) -> None:
    status, resp, req = got
    case = (api, fields)
    if want is None:
        assert status == 400, (case, resp)
        assert any(_refused_field(api, resp).startswith(name) for name in bad), (case, bad, resp)
        return
    assert status == 200 and not bad, (case, resp)
    sp = req.sampling_params
    for key in ("temperature", "top_p"):
        if fields.get(key) is None:
            assert sp.get(key) is None, (case, key, sp)  # the server's default (module docstring)
        else:  # the converter holds it as a 32-bit float
            assert math.isclose(sp[key], want[key], rel_tol=1e-6, abs_tol=1e-9), (case, key, sp, want)
    assert sp.get("max_new_tokens") == want["max_tokens"], (case, sp, want)
    if api != "messages":
        assert req.return_logprob == want["logprobs"], (case, req.return_logprob, want)
        assert req.top_logprobs_num == (want["top_logprobs"] or 0), (case, req.top_logprobs_num, want)
    if api == "chat":
        assert sp.get("sampling_seed") == want["seed"], (case, sp, want)


@pytest.mark.parametrize("api", list(ROUTES))
@pytest.mark.parametrize("seed", range(2))
def test_random_sampling_fields_resolve_as_deepseek_recipe(
    served: tuple[PromptTM, TestClient], api: str, seed: int
) -> None:
    """100 requests per seed and route, thinking on or off: the served request refuses what the
    converter refuses (a 400 naming a refused field) and hands the sampler the converter's values."""
    rng = random.Random(f"{api}-{seed}")
    for _ in range(100):
        fields, bad = _fields(rng, api)
        _check(api, fields, bad, recipe_sampling(api, fields), serve(served, api, fields, rng.random() < 0.5))


def test_max_completion_tokens_wins_over_max_tokens(served: tuple[PromptTM, TestClient]) -> None:
    """Both chat limits set: OpenAI documents ``max_tokens`` as the deprecated name of
    ``max_completion_tokens``, and SGLang's sampler reads ``max_completion_tokens or max_tokens``;
    the converter keeps ``max_tokens`` (the quirk the random set maps around)."""
    both = {"max_tokens": 5, "max_completion_tokens": 7}
    assert (recipe_sampling("chat", {"max_tokens": 5}) or {})["max_tokens"] == 5
    status, resp, req = serve(served, "chat", both, False)
    assert status == 200, resp
    assert req.sampling_params["max_new_tokens"] == 7


def test_thinking_mode_keeps_the_requested_temperature(served: tuple[PromptTM, TestClient]) -> None:
    """The converter forces ``temperature`` and ``top_p`` to 1.0 in thinking mode (DeepSeek's
    hosted API); SGLang does not hand the converter's sampling options to its sampler, and this
    server too samples with the request's values in either mode."""
    fields = {"temperature": 0.25, "top_p": 0.5, "max_tokens": 8}
    body = {"model": "DeepSeek-V4-Pro", "messages": MSGS, "thinking": {"type": "enabled"}, **fields}
    forced = recipe.ChatCompletionRequest(body).convert(recipe.ConversionOptions()).inference_options
    assert (forced.temperature, forced.top_p) == (1.0, 1.0)
    for api in ("chat", "messages"):
        status, resp, req = serve(served, api, fields, True)
        assert status == 200, resp
        assert (req.sampling_params["temperature"], req.sampling_params["top_p"]) == (0.25, 0.5), api


def test_refusals_are_json_errors(served: tuple[PromptTM, TestClient]) -> None:
    """Every field the converter refuses on its own range is a 400 in the route family's error
    shape naming that field (one field wrong at a time)."""
    cases = {
        "chat": {"temperature": 2.5, "top_p": 0.0, "top_logprobs": 21, "seed": 2**63, "max_tokens": -1},
        "responses": {"temperature": -1.0, "top_p": 1.5, "max_output_tokens": 0},
        "messages": {"temperature": 2.5, "top_p": 0.0, "max_tokens": -1},
    }
    for api, wrong in cases.items():
        for name, value in wrong.items():
            fields = {name: value, **({"logprobs": True} if name == "top_logprobs" else {})}
            if api == "messages" and name != "max_tokens":
                fields["max_tokens"] = 8
            assert recipe_sampling(api, fields) is None, (api, fields)
            status, resp, _ = serve(served, api, fields, False)
            assert status == 400 and _refused_field(api, resp).startswith(name), (api, fields, resp)
            json.dumps(resp)  # a JSON body, not a traceback page
