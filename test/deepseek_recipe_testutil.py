"""DeepSeek's own request converter and response parser (the ``deepseek-recipe`` package) as the
oracle of what a chat request renders to and how a generated reply splits into content, reasoning
and tool calls. Import this module only after ``pytest.importorskip("deepseek_recipe")``."""

from __future__ import annotations

import copy
import json
from typing import Any

import deepseek_recipe as recipe


def recipe_body(body: dict[str, Any], thinking: bool) -> dict[str, Any]:
    """An OpenAI chat ``body`` as DeepSeek's converter takes it: our extension fields
    (``chat_template_kwargs``, ``stream``) dropped, the model named, thinking on or off."""
    b = {k: v for k, v in copy.deepcopy(body).items() if k not in ("chat_template_kwargs", "stream")}
    return {**b, "model": "DeepSeek-V4-Pro", "thinking": {"type": "enabled" if thinking else "disabled"}}


def recipe_prompt(body: dict[str, Any], thinking: bool, effort: str | None = "low") -> str:
    """DeepSeek's own prompt text for the OpenAI chat ``body`` (its converter, then its V4
    encoder), thinking on or off; effort ``"low"`` adds no instruction paragraph (the default
    profile's prompt), ``None`` leaves the converter's own default."""
    b = recipe_body(body, thinking)
    if effort is not None:
        b["reasoning_effort"] = effort
    req = recipe.ChatCompletionRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def recipe_message(
    body: dict[str, Any], reply: str, thinking: bool = False, finish: str = "stop"
) -> dict[str, Any]:
    """DeepSeek's response parser's ``choices[0].message`` (a JSON object) for the generated
    ``reply`` text of the request ``body``, the generation ended by ``finish`` (``"stop"``: EOS,
    ``"length"``: the token limit)."""
    req = recipe.ChatCompletionRequest(recipe_body(body, thinking)).convert(recipe.ConversionOptions())
    proc = recipe.StreamProcessor(
        recipe.ChatCompletionRequest.chunk_generator(req, "id", "m"), req.parsing_options
    )
    reason = {"stop": recipe.InferenceFinishReason.Stop, "length": recipe.InferenceFinishReason.Length}
    chunks = proc.push(recipe.InferenceChunk.ready(prompt_usage=recipe.PromptUsage(prompt_tokens=1)))
    chunks += proc.push(recipe.InferenceChunk.text(reply, 1))
    chunks += proc.push(recipe.InferenceChunk.finish(reason[finish]))
    chunks += proc.finish()
    resp = recipe.ChatCompletionResponse("id", "m", 0, 1, 0)
    for c in chunks:
        resp.accumulate(c)
    return json.loads(resp.to_json())["choices"][0]["message"]


def recipe_messages_prompt(body: dict[str, Any], thinking: bool = False) -> str:
    """DeepSeek's own prompt text (``deepseek-recipe``'s Messages converter and V4 encoder) of an
    Anthropic Messages request ``body`` (``max_tokens`` optional, as on ``count_tokens``), thinking
    on or off."""
    b = {"max_tokens": 1, **copy.deepcopy(body), "model": "DeepSeek-V4-Pro"}
    b["thinking"] = {"type": "enabled" if thinking else "disabled"}
    req = recipe.MessagesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def recipe_messages_response(
    body: dict[str, Any], reply: str, thinking: bool, finish: str = "stop"
) -> dict[str, Any]:
    """DeepSeek's own Messages response (``deepseek-recipe``'s Messages event generator and
    accumulator, a JSON object) for the generated ``reply`` text of the Messages request
    ``body``, the generation ended by EOS (``finish`` ``"stop"``) or by ``max_tokens``
    (``"length"``)."""
    b = {"max_tokens": 1, **copy.deepcopy(body), "model": "DeepSeek-V4-Pro"}
    b["thinking"] = {"type": "enabled" if thinking else "disabled"}
    req = recipe.MessagesRequest(b).convert(recipe.ConversionOptions())
    proc = recipe.StreamProcessor(recipe.MessagesRequest.chunk_generator(req, "id", "m"), req.parsing_options)
    reason = recipe.InferenceFinishReason.Stop if finish == "stop" else recipe.InferenceFinishReason.Length
    events = proc.push(recipe.InferenceChunk.ready(prompt_usage=recipe.PromptUsage(prompt_tokens=1)))
    events += proc.push(recipe.InferenceChunk.text(reply, 1))
    events += proc.push(recipe.InferenceChunk.finish(reason))
    events += proc.finish()
    resp = recipe.MessagesResponse("id", "m", 0, 1, 0)
    for e in events:
        resp.accumulate(e)
    return json.loads(resp.to_json())
