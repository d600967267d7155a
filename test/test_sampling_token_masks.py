"""``sampling/token_masks.py``: the token sequences a ``bad_words`` entry bans.

Oracle: vLLM's rule as its ``SamplingParams`` states it (the word with its leading whitespace
dropped; the same word after one space only when it is a new word token: as many tokens, a
different first token), applied here to a stand-in tokenizer whose encodings are written out.
"""

from __future__ import annotations

import pytest
from sglang_v4.sampling.token_masks import bad_word_token_ids


class _Tok:
    """A tokenizer whose ``encode`` is a fixed table (``add_special_tokens`` must be False)."""

    def __init__(self, table: dict[str, list[int]]) -> None:
        self.table = table

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        assert add_special_tokens is False
        return self.table[text]


@pytest.mark.parametrize(
    "table,word,want",
    [
        # the spaced form is a new one-token word: both are banned
        ({"cat": [7], " cat": [9]}, "cat", [[7], [9]]),
        # a leading space in the request is dropped first
        ({"cat": [7], " cat": [9]}, "  cat", [[7], [9]]),
        # the spaced form splits differently (another length): the plain form only (vLLM)
        ({"Banana": [3, 4], " Banana": [5]}, "Banana", [[3, 4]]),
        # the spaced form starts with the same token: the plain form only
        ({"xy": [1, 2], " xy": [1, 3]}, "xy", [[1, 2]]),
    ],
    ids=["new-word", "leading-space", "other-length", "same-first-token"],
)
def test_bad_word_forms_follow_vllms_rule(
    table: dict[str, list[int]], word: str, want: list[list[int]]
) -> None:
    assert bad_word_token_ids(_Tok(table), [word]) == want


def test_bad_word_repeats_are_kept_once_and_bad_entries_are_refused() -> None:
    tok = _Tok({"cat": [7], " cat": [9]})
    assert bad_word_token_ids(tok, ["cat", " cat"]) == [[7], [9]]
    with pytest.raises(ValueError, match="bad_words"):
        bad_word_token_ids(tok, [""])
    with pytest.raises(ValueError, match="bad_words"):
        bad_word_token_ids(tok, [3])  # type: ignore[list-item]
