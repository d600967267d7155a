"""A fake tokenizer manager whose reply is a function of the prompt, and the DSML tool call the
API-route tests script: shared by the Responses and Messages API tests (their oracle is the chat
route run on the same fake, so a reply must depend on the prompt ids the route rendered), and a
Messages reply's content blocks as dicts (:func:`blocks`); :class:`SlowTM`, the same fake silent
before its first output (the SSE keep-alive tests)."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from sglang_v4.managers.io_struct import GenerateReqInput

D = "｜DSML｜"
MODEL = "dsv4-test"
WORDS = ["alpha", " beta", " gamma", " delta", " epsilon", " zeta", " eta", " theta", " iota", " kappa"]
#: one ``get_weather`` call in DSML (what the model writes) and its arguments as JSON
CALL = (
    f'\n\n<{D}tool_calls>\n<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">Paris</{D}parameter>\n'
    f'<{D}parameter name="days" string="false">3</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
)
ARGS = {"city": "Paris", "days": 3}
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}


def prompt_reply(ids: list[int]) -> str:
    """A reply that is a function of the prompt (eight words picked by a CRC of the ids)."""
    h = zlib.crc32(json.dumps(ids).encode())
    return "".join(WORDS[(h >> (3 * k)) % len(WORDS)] for k in range(8)) + "."


class PromptTM:
    """Fake tokenizer manager: generates the tokens of ``reply(prompt_ids)`` (or a fixed text),
    finish ``stop`` (``length`` when ``max_new_tokens`` cuts it), cumulative text per token when
    streaming, like the real one (nothing generated, e.g. ``max_new_tokens`` 0: one output, the
    finish alone); a ``json_schema`` is compiled first (xgrammar), as the real one
    does before queueing. ``abort_after``: the output after that many tokens is an engine abort
    (``abort_reason``, SGLang's ``FINISH_ABORT`` dict; a 500 "engine failure" by default), the
    last output of a non-streamed request too. Records every request."""

    def __init__(
        self,
        tokenizer: Any,
        reply: str | Callable[[list[int]], str] = prompt_reply,
        abort_after: int | None = None,
        abort_reason: dict[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.context_len = 4096
        self.grammar_enabled = True
        self.reply = reply
        self.abort_after = abort_after
        self.abort_reason = abort_reason or {"type": "abort", "message": "engine failure", "status_code": 500}
        self.received: list[GenerateReqInput] = []

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        self.received.append(obj)
        schema = (obj.sampling_params or {}).get("json_schema")
        if schema is not None:
            import xgrammar

            try:
                xgrammar.Grammar.from_json_schema(schema)
            except (RuntimeError, ValueError) as e:
                raise ValueError(f"json_schema: invalid grammar: {e}") from None
        text = self.reply if isinstance(self.reply, str) else self.reply(list(obj.input_ids))
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        limit = (obj.sampling_params or {}).get("max_new_tokens")
        finish: dict[str, Any] = {"type": "stop", "matched": 1}
        if limit is not None and (limit < len(ids) or limit == 0):
            ids, finish = ids[:limit], {"type": "length", "length": limit}
        outs = []
        for j in range(1, len(ids) + 1):
            meta = {
                "id": "r",
                "finish_reason": finish if j == len(ids) else None,
                "prompt_tokens": len(obj.input_ids),
                "completion_tokens": j,
                "cached_tokens": 2,
            }
            if self.abort_after is not None and j > self.abort_after:
                meta["finish_reason"] = dict(self.abort_reason)
                outs.append({"text": "", "output_ids": [], "meta_info": meta})
                break
            outs.append({"text": self.tokenizer.decode(ids[:j]), "output_ids": ids[:j], "meta_info": meta})
        if not ids:  # nothing generated (``max_new_tokens`` 0, or an empty reply): the finish alone
            meta = {"id": "r", "finish_reason": finish, "prompt_tokens": len(obj.input_ids)}
            outs.append(
                {
                    "text": "",
                    "output_ids": [],
                    "meta_info": {**meta, "completion_tokens": 0, "cached_tokens": 2},
                }
            )
        if obj.stream:
            for o in outs:
                yield o
        else:
            yield outs[-1]


def blocks(m: Any) -> list[dict[str, Any]]:
    """A message's content blocks as dicts (the stream helper's parsed blocks without their
    ``parsed_output``)."""
    return [{k: v for k, v in b.model_dump().items() if k != "parsed_output"} for b in m.content]


class SlowTM(PromptTM):
    """:class:`PromptTM` whose streamed outputs start only after ``delay_s`` seconds of silence
    (a queued request or a long prefill); a text prompt (``/v1/completions``) is tokenized first,
    as the real one does. ``closed`` records each request's generator closing (the tokenizer
    manager aborts an unfinished request there; ``time.monotonic()`` seconds). ``step_s``: the
    pause before each output after the first (a slow decode step)."""

    def __init__(self, *args: Any, delay_s: float = 0.4, step_s: float = 0.0, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.delay_s = delay_s
        self.step_s = step_s
        self.closed: list[float] = []

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        try:
            if obj.input_ids is None:
                obj.input_ids = self.tokenizer.encode(obj.text)
            await asyncio.sleep(self.delay_s)
            n = 0
            async for out in super().generate_request(obj, request):
                if n and self.step_s:
                    await asyncio.sleep(self.step_s)
                n += 1
                yield out
        finally:
            self.closed.append(time.monotonic())
