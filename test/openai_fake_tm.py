"""The fake tokenizer manager of the OpenAI route tests and the clients over it: SGLang-shaped
outputs of a fixed reply (cumulative text when streaming, logprobs, batches, ``n``), an in-process
app of the OpenAI router, the ``openai`` client over it, and an SSE reader.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import openai
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.managers.io_struct import GenerateReqInput

#: the DeepSeek-V4 chat template's special tokens: begin / end of sentence, user and assistant turns
B, E, U, A = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"


class FakeTM:
    """Yields SGLang-shaped outputs like the real TokenizerManager (cumulative text when streaming,
    a list for non-streamed batches, ``index`` on streamed batch items, prompt-major n order)."""

    def __init__(self, tokenizer: Any, reply: str = "Hello there, general Kenobi.") -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.context_len = 4096
        self.reply = reply
        self.received: list[GenerateReqInput] = []

    def _output(self, sub: GenerateReqInput, k: int) -> list[dict[str, Any]]:
        sp = sub.sampling_params or {}
        ids = self.tokenizer.encode(self.reply + (f" #{k}" if k else ""), add_special_tokens=False)
        limit = sp.get("max_new_tokens")
        finish = {"type": "stop", "matched": 1}
        if limit is not None and limit < len(ids):
            ids, finish = ids[:limit], {"type": "length", "length": limit}
        prompt_ids = list(sub.input_ids) if sub.input_ids is not None else self.tokenizer.encode(sub.text)
        n_prompt = len(prompt_ids)
        dec = self.tokenizer.decode
        outs = []
        # a request of no token (``max_new_tokens`` 0) still ends with one output, as the real
        # manager's: empty text and ids, ``finish_reason`` ``length`` 0
        for j in range(1, len(ids) + 1) if ids else [0]:
            meta: dict[str, Any] = {
                "id": sub.rid,
                "finish_reason": finish if j == len(ids) else None,
                "prompt_tokens": n_prompt,
                "completion_tokens": j,
                "cached_tokens": 3,
            }
            if sub.return_logprob:
                meta["output_token_logprobs"] = [
                    [-0.5 * (i + 1), t, self.tokenizer.decode([t])] for i, t in enumerate(ids[:j])
                ]
                # the prompt's own ids, each with its text as the tokenizer decodes it alone
                meta["input_token_logprobs"] = [
                    [None if i == 0 else -1.0, t, dec([t])] for i, t in enumerate(prompt_ids)
                ]
                if sub.top_logprobs_num:
                    meta["output_top_logprobs"] = [
                        [[-0.5 * (i + 1), t, dec([t])], [-9.0, 5, dec([5])]][: sub.top_logprobs_num]
                        for i, t in enumerate(ids[:j])
                    ]
            outs.append({"text": self.tokenizer.decode(ids[:j]), "output_ids": ids[:j], "meta_info": meta})
        return outs

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        self.received.append(obj)
        obj.normalize_batch_and_arguments()
        if obj.is_single:
            outs = self._output(obj, 0)
            if obj.stream:
                for o in outs:
                    yield o
            else:
                yield outs[-1]
            return
        bs, n = obj.batch_size, obj.parallel_sample_num
        order = [k * bs + i for i in range(bs) for k in range(n)]
        per = [self._output(obj[j], pos % n) for pos, j in enumerate(order)]
        if not obj.stream:
            yield [p[-1] for p in per]
            return
        for step in range(max(len(p) for p in per)):
            for idx, p in enumerate(per):
                if step < len(p):
                    yield dict(p[step], index=idx)


def app_client(tm: FakeTM, **args: Any) -> TestClient:
    """A ``TestClient`` over an app serving the OpenAI router on ``tm``; ``args`` override the
    server arguments (served name ``dsv4-test``, no API key, no cache report)."""
    sa = SimpleNamespace(
        served_model_name="dsv4-test",
        model_path=None,
        api_key=None,
        enable_cache_report=False,
        context_length=None,
    )
    for k, v in args.items():
        setattr(sa, k, v)
    app = FastAPI()
    app.include_router(create_openai_router(tm, sa))
    return TestClient(app)


def oai_client(client: TestClient, key: str = "none") -> openai.OpenAI:
    """The ``openai`` client over ``client`` (API key ``key``, no retries)."""
    return openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=client, max_retries=0)


def sse_data_events(resp: Any) -> list[Any]:
    """The ``data:`` payloads of an SSE response's text: JSON objects, then the string ``"[DONE]"``."""
    events = []
    for line in resp.text.split("\n"):
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events
