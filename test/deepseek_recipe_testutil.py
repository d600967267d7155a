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
