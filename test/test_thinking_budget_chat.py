"""``thinking_token_budget`` on ``/v1/chat/completions`` in thinking mode (vLLM's field; vLLM's
tests/entrypoints/openai/chat_completion/test_thinking_token_budget*.py): the reasoning the client
parses holds at most ``budget`` tokens and the token after it is ``</think>``; budget 0 puts
``</think>`` first; a budget larger than ``max_tokens`` leaves the reply as it was.

Served by the embedded model with overlap scheduling (the shared ``more_bugs_server``) and, in
the slow tier, without it (``--disable-overlap-schedule``); streamed and not, ``n = 2``.

Oracles: the client's own parse (``reasoning_content`` / ``content`` of the answer and of the
joined stream deltas), the tokenizer (the ids ``return_token_ids`` gives decode to that reasoning
and the ``</think>`` id follows them), and the same request without a budget (greedy: the
reasoning up to the budget is the unbounded reasoning's first tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from public_bugs_testutil import MODEL, post, sse, think_end_id
from server_fixture import ServerHandle, real_env, start_server

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
MAX = 12
MSGS = [{"role": "user", "content": "Why is the sky blue? Think it through."}]
BODY: dict[str, Any] = {
    "model": MODEL,
    "messages": MSGS,
    "max_tokens": MAX,
    "temperature": 0,
    "chat_template_kwargs": {"thinking": True},
    "return_token_ids": True,
}


@pytest.fixture(scope="module")
def no_overlap_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The embedded model served with ``--disable-overlap-schedule``."""
    log: Path = tmp_path_factory.mktemp("think_budget") / "server.log"
    h = start_server(
        ["--device", "cpu", "--context-length", "1024", "--disable-overlap-schedule"],
        real_env(),
        log,
        timeout_s=300,
    )
    yield h
    assert h.stop() == 0, h.log()[-3000:]


def _check(
    mtok: Any, end: int, reasoning: str | None, ids: list[int], budget: int, free_ids: list[int]
) -> None:
    """The reply's reasoning (client's parse) and ids obey the budget (module docstring)."""
    reasoning = reasoning or ""
    k = ids.index(end) if end in ids else len(ids)
    assert k <= budget, (budget, k, ids)
    assert mtok.decode(ids[:k]) == reasoning, (reasoning, ids)
    assert len(mtok.encode(reasoning, add_special_tokens=False)) <= budget or ids[:k] == free_ids[:k]
    if budget < MAX and end not in free_ids[:budget]:
        assert k == budget and ids[:k] == free_ids[:k], (ids, free_ids)
        assert ids[k] == end  # the token after the reasoning is </think>
    if budget >= MAX:
        assert ids == free_ids  # nothing to bound within max_tokens


def _run(server: ServerHandle, mtok: Any) -> None:
    end = think_end_id(mtok)
    free = post(server, CHAT, BODY).json()
    free_ids = free["choices"][0]["token_ids"]
    assert len(free_ids) == MAX and end not in free_ids[:6], free_ids  # the model thinks on its own
    for budget in (0, 1, 5, MAX + 8):
        body = {**BODY, "thinking_token_budget": budget, "n": 2}
        r = post(server, CHAT, body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["usage"]["completion_tokens"] == 2 * MAX  # the forced token is an output token
        for ch in out["choices"]:
            msg = ch["message"]
            _check(mtok, end, msg.get("reasoning_content"), ch["token_ids"], budget, free_ids)
        # streamed: the joined deltas parse to the same reasoning and answer
        chunks = sse(server, CHAT, body)
        for i, ch in enumerate(out["choices"]):
            deltas = [c2["delta"] for c in chunks for c2 in c["choices"] if c2["index"] == i]
            ids = [
                t
                for c in chunks
                for c2 in c["choices"]
                if c2["index"] == i
                for t in c2.get("token_ids") or []
            ]
            reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
            content = "".join(d.get("content") or "" for d in deltas)
            assert ids == ch["token_ids"], (budget, ids)
            assert reasoning == (ch["message"].get("reasoning_content") or "")
            assert content == (ch["message"].get("content") or "")
            _check(mtok, end, reasoning, ids, budget, free_ids)


def test_budget_with_overlap(more_bugs_server: ServerHandle, mtok: Any) -> None:
    _run(more_bugs_server, mtok)


@pytest.mark.slow
def test_budget_without_overlap(no_overlap_server: ServerHandle, mtok: Any) -> None:
    _run(no_overlap_server, mtok)


def test_budget_outside_thinking_mode_and_unlimited(more_bugs_server: ServerHandle, mtok: Any) -> None:
    """With thinking off there is no reasoning to bound (vLLM accepts the field): the reply is the
    one without a budget; -1 is unlimited."""
    plain = {**BODY, "chat_template_kwargs": {"thinking": False}}
    want = post(more_bugs_server, CHAT, plain).json()["choices"][0]["token_ids"]
    got = post(more_bugs_server, CHAT, {**plain, "thinking_token_budget": 0}).json()["choices"][0][
        "token_ids"
    ]
    assert got == want
    free = post(more_bugs_server, CHAT, BODY).json()["choices"][0]["token_ids"]
    r = post(more_bugs_server, CHAT, {**BODY, "thinking_token_budget": -1})
    assert r.json()["choices"][0]["token_ids"] == free
