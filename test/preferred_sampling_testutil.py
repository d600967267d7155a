"""Shared stand-ins of the ``--preferred-sampling-params`` tests: a fake tokenizer manager whose
requests go through the real ``TokenizationMixin._tokenize_one`` (where the server's preferred
parameters are merged under the request's), and an in-process app of the OpenAI and Anthropic
routers over it, with the clients the tests read it with.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anthropic
import openai
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai_fake_tm import FakeTM
from sglang_v4.entrypoints.anthropic import create_anthropic_router
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.entrypoints.route_errors import install_route_error_handler
from sglang_v4.managers.control_struct import SchedulerReadyInfo
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.managers.tokenization import TokenizationMixin

#: the served model name of the stand-in app
MODEL = "dsv4-test"


class MergingTM(FakeTM, TokenizationMixin):
    """``FakeTM`` whose requests first go through the real ``_tokenize_one`` (the merge of
    ``--preferred-sampling-params``, the checks); the merged ``SamplingParams`` of each request
    are kept in :attr:`merged` and the reply is cut at their ``max_new_tokens``."""

    def __init__(self, tokenizer: Any, server_args: Any) -> None:
        super().__init__(tokenizer)
        self.server_args = server_args
        self.grammar_enabled = False
        self.max_req_input_len = self.context_len - 1
        self.scheduler_info = SchedulerReadyInfo(
            status="ready",
            max_total_num_tokens=1 << 20,
            max_req_input_len=self.context_len - 1,
            context_len=self.context_len,
            vocab_size=self.vocab_size,
        )
        self.merged: list[Any] = []

    async def generate_request(self, obj: GenerateReqInput, request: Any = None):  # noqa: ANN201
        obj.normalize_batch_and_arguments()
        tokenized = self._tokenize_one(obj)
        self.merged.append(tokenized.sampling_params)
        limit = tokenized.sampling_params.max_new_tokens
        obj.sampling_params = {**(obj.sampling_params or {}), "max_new_tokens": limit}
        self.received.append(obj)
        for out in self._output(obj, 0):
            if obj.stream:
                yield out
        if not obj.stream:
            yield out


def preferred_app(
    tok: Any, preferred: dict[str, Any] | None, model_path: str | None = None
) -> tuple[MergingTM, TestClient]:
    """A ``MergingTM`` started with ``preferred`` as ``--preferred-sampling-params`` (and
    ``--sampling-defaults model`` over ``model_path``), and a ``TestClient`` on an app serving the
    OpenAI and Anthropic routers on it."""
    sa = SimpleNamespace(
        served_model_name=MODEL,
        api_key=None,
        enable_cache_report=False,
        context_length=None,
        preferred_sampling_params=preferred,
        allow_auto_truncate=False,
        model_path=model_path,
        sampling_defaults="model",
    )
    tm = MergingTM(tok, sa)
    app = FastAPI()
    install_route_error_handler(app)
    router = create_openai_router(tm, sa)
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    return tm, TestClient(app)


def openai_of(tc: TestClient) -> openai.OpenAI:
    """The ``openai`` client on ``tc`` (no retries)."""
    return openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=tc, max_retries=0)


def anthropic_of(tc: TestClient) -> anthropic.Anthropic:
    """The ``anthropic`` client on ``tc`` (no retries)."""
    return anthropic.Anthropic(base_url="http://testserver", api_key="none", http_client=tc, max_retries=0)
