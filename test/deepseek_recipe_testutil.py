"""DeepSeek's own request converter and response parser (the ``deepseek-recipe`` package) as the
oracle of what a chat request renders to and how a generated reply splits into content, reasoning
and tool calls. Import this module only after ``pytest.importorskip("deepseek_recipe")``."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import deepseek_recipe as recipe


def _ordered_ids(items: list[Any], prefix: str) -> None:
    """Rename, in place, the tool-call ids of ``items`` to ``{prefix}{n:06d}_{id}``, ``n`` counting
    ids in order of first appearance: OpenAI chat ``tool_calls[].id`` / ``tool_call_id``, Anthropic ``tool_use.id`` /
    ``tool_result.tool_use_id``, and a Responses item's ``call_id`` (``function_call`` and
    ``function_call_output`` alike; the item's own ``id`` is not sorted on and stays).

    DeepSeek's converter renders a turn's parallel calls, and their results, sorted by call id;
    the model wrote them in generation order, which is what a served prompt keeps (and what the
    prefix cache needs). Ids never reach the rendered prompt, so renaming them to names that sort
    in appearance order makes the converter render the calls in the order they were written,
    whatever ids a server or client chose (random ids would otherwise order them by chance).
    The renaming is one-to-one, so pairing (and a dangling or duplicate id) is kept, and the new
    name ends with the old one, so a converter error naming an id still names it; non-string and
    empty ids are left as they are, so the converter still sees (and rejects) them."""
    names: dict[str, str] = {}

    def rename(i: Any) -> Any:
        if not isinstance(i, str) or not i:
            return i
        return names.setdefault(i, f"{prefix}{len(names):06d}_{i}")

    for m in items:
        if not isinstance(m, dict):
            continue
        for c in m.get("tool_calls") or []:
            if isinstance(c, dict) and "id" in c:
                c["id"] = rename(c["id"])
        for key in ("tool_call_id", "call_id"):
            if key in m:
                m[key] = rename(m[key])
        content = m.get("content")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "tool_use" and "id" in part:
                part["id"] = rename(part["id"])
            elif isinstance(part, dict) and part.get("type") == "tool_result" and "tool_use_id" in part:
                part["tool_use_id"] = rename(part["tool_use_id"])


def ids_in_written_order(body: dict[str, Any], prefix: str = "call_") -> dict[str, Any]:
    """A deep copy of the request ``body`` (OpenAI chat or Anthropic Messages ``messages``, or a
    Responses ``input`` item list) whose tool-call ids are renamed by :func:`_ordered_ids`, so
    that DeepSeek's converter, which orders a turn's parallel calls by id, renders them in the
    order they were written. Every test handing a history to ``deepseek_recipe`` goes through
    this (or a helper below that calls it)."""
    b = copy.deepcopy(body)
    for key in ("messages", "input"):
        if isinstance(b.get(key), list):
            _ordered_ids(b[key], prefix)
    return b


def recipe_body(body: dict[str, Any], thinking: bool) -> dict[str, Any]:
    """An OpenAI chat ``body`` as DeepSeek's converter takes it: our extension fields
    (``chat_template_kwargs``, ``stream``) dropped, the model named, thinking on or off, tool-call
    ids renamed to sort in the order they were written (``_ordered_ids``)."""
    b = {k: v for k, v in ids_in_written_order(body).items() if k not in ("chat_template_kwargs", "stream")}
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


def recipe_prompt_ids(
    body: dict[str, Any], thinking: bool, tokenizer_json: str, effort: str = "low"
) -> list[int]:
    """DeepSeek's own prompt token ids for the OpenAI chat ``body`` (its converter, then its V4
    encoder's prompt encoding with the ``tokenizer.json`` at ``tokenizer_json``): the template's
    markup as special tokens, the request's text as plain text (a special-token spelling in it
    is text, except where the encoder replays it), as :func:`recipe_prompt` renders it."""
    b = {**recipe_body(body, thinking), "reasoning_effort": effort}
    req = recipe.ChatCompletionRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return _v4_encoding(tokenizer_json).encode(req.conversation)


@functools.cache
def _v4_encoding(tokenizer_json: str) -> Any:
    """DeepSeek's V4 prompt encoding over the ``tokenizer.json`` at ``tokenizer_json`` (loaded
    once per path: a second or more each time)."""
    return recipe.DeepseekV4Encoding().with_tokenizer(recipe.Tokenizer.from_file(tokenizer_json))


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
    b = {"max_tokens": 1, **ids_in_written_order(body, "toolu_"), "model": "DeepSeek-V4-Pro"}
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
    b = {"max_tokens": 1, **ids_in_written_order(body, "toolu_"), "model": "DeepSeek-V4-Pro"}
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


def recipe_responses_prompt(body: dict[str, Any], thinking: bool = False) -> str:
    """DeepSeek's own prompt text (``deepseek-recipe``'s Responses converter and V4 encoder) of a
    Responses request ``body``, ``thinking`` the converter's default thinking mode (the body's
    ``reasoning`` still decides where it has one), call ids renamed to sort in written order."""
    b = {**ids_in_written_order(body), "model": "DeepSeek-V4-Pro"}
    req = recipe.ResponsesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=thinking))
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def recipe_responses_reply(
    body: dict[str, Any], reply: str, finish: str = "stop"
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """DeepSeek's own Responses answer (``deepseek-recipe``'s Responses event generator, its
    request settings echoed, and accumulator) for the generated ``reply`` text of the Responses
    request ``body``, the generation ended by EOS (``finish`` ``"stop"``) or by
    ``max_output_tokens`` (``"length"``): the response (a JSON object) and its stream events
    (JSON objects, in order)."""
    rq = recipe.ResponsesRequest({**ids_in_written_order(body), "model": "DeepSeek-V4-Pro"})
    echo = rq.echo()
    req = rq.convert(recipe.ConversionOptions())
    gen = recipe.ResponsesRequest.chunk_generator(req, "id", "m").with_echo(echo)
    proc = recipe.StreamProcessor(gen, req.parsing_options)
    reason = recipe.InferenceFinishReason.Stop if finish == "stop" else recipe.InferenceFinishReason.Length
    events = proc.push(recipe.InferenceChunk.ready(prompt_usage=recipe.PromptUsage(prompt_tokens=1)))
    events += proc.push(recipe.InferenceChunk.text(reply, 1))
    events += proc.push(recipe.InferenceChunk.finish(reason))
    events += proc.finish()
    shown = [json.loads(e.to_json()) for e in events]  # before accumulate consumes them
    resp = recipe.ResponsesResponse("id", "m", 0, 1, 0)
    for e in events:
        resp.accumulate(e)
    return json.loads(resp.to_json()), shown
