"""``resolve_logprob_start_len``: SGLang's ``logprob_start_len`` rules plus the prompt-logprob
default of a request that generates nothing (see its docstring)."""

from __future__ import annotations

import pytest
from sglang_v4.managers.tokenization import RequestError, resolve_logprob_start_len


@pytest.mark.parametrize(
    ("value", "return_logprob", "max_new_tokens", "expected"),
    [
        (None, False, 0, -1),
        (None, True, 16, -1),
        (None, True, None, -1),
        (None, True, 0, 0),  # nothing generated: prompt logprobs from position 0
        (-1, True, 0, -1),  # explicit -1 stays output-only, as in SGLang
        (0, True, 4, 0),
        (4, True, 4, 4),  # the last prompt position
        (5, True, 4, -1),  # == prompt length: accepted, no prompt logprobs
    ],
)
def test_resolve(value: int | None, return_logprob: bool, max_new_tokens: int | None, expected: int) -> None:
    got = resolve_logprob_start_len(value, 5, return_logprob=return_logprob, max_new_tokens=max_new_tokens)
    assert got == expected


@pytest.mark.parametrize("value", [6, -2, 1.0, True, "0"])
def test_resolve_rejects(value: object) -> None:
    with pytest.raises(RequestError, match="logprob_start_len"):
        resolve_logprob_start_len(value, 5, return_logprob=True, max_new_tokens=0)
