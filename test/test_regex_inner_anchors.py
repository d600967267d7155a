"""A start anchor and an end anchor both inside a full-match regex (``(^a|b)(c$|d)``).

Fault found here and fixed: such a regex was refused as a whole (a 400, "a start anchor and an
end anchor both inside the regex"), though its language is well defined in Python's
``re.fullmatch`` (an older rule had accepted ``(^a|b)c$``-like cases). The end anchors are now
written out first, with ``^`` kept as a letter, then the start anchors by reading the result
backwards; the paths that drop (a ``^`` after an end anchor) can only match ``""`` or ``"\\n"``,
which are put back (``sampling/regex_dialect.py``). A regex no text can match is still a 400.

Oracles: Python's ``re.fullmatch`` of the regex as sent, over every short string of a small
alphabet with ``\\n``; xgrammar's own matcher on the grammar the backend built.
"""

from __future__ import annotations

import itertools
import random
import re

import pytest

xgr = pytest.importorskip("xgrammar")

from grammar_backend_testutil import VOCAB, ds_grammar_backend  # noqa: E402
from grammar_backend_testutil import accepts as _accepts  # noqa: E402
from sglang_v4.sampling.grammar import Grammar, GrammarBackend  # noqa: E402
from sglang_v4.sampling.regex_dialect import translate_regex  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402

pytestmark = pytest.mark.timeout(180)

#: every string of up to four characters over ``a b c d \\n``
STRINGS = [""] + ["".join(t) for n in range(1, 5) for t in itertools.product("abcd\n", repeat=n)]


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _grammar(backend: GrammarBackend, pattern: str) -> Grammar:
    sp = SamplingParams(regex=pattern)
    sp.verify(VOCAB, allow_grammar=True)
    g = backend.create(sp)
    assert g is not None
    return g


@pytest.mark.parametrize(
    "pattern",
    [
        r"(^a|b)(c$|d)",
        r"(^a|b)(c$|d)c?",
        r"(\Aa|b)+(c\Z|d)\n?",
        r"(^|a)($|b)",
        r"(a$|^)(^b|c)",
        r"(\n$|^a)(^\n|b)",
        r"(a|$^\n?)b?",
        r"(^a$|b)*c?",
    ],
)
def test_start_and_end_anchor_inside_on_xgrammar(backend: GrammarBackend, pattern: str) -> None:
    """``(^a|b)(c$|d)`` was a 400 though ``re.fullmatch`` takes ``"ac"``, ``"ad"``, ``"bc"`` and
    ``"bd"``. The grammar takes exactly what ``re.fullmatch`` takes, on xgrammar's own matcher,
    over every string of up to four characters (``\\n`` included)."""
    g = _grammar(backend, pattern)
    matched = 0
    for s in STRINGS:
        expected = re.fullmatch(pattern, s) is not None
        matched += expected
        assert _accepts(g, s) == expected, (pattern, s, expected)
    assert matched > 0


def test_dead_paths_of_both_kinds_are_dropped() -> None:
    """A ``^`` after text and a ``$`` before text on one branch kill that branch only:
    ``(a^b|c)(d$e|f)`` is ``cf``. Oracle: ``re.fullmatch``."""
    pattern = r"(a^b|c)(d$e|f)"
    strings = [""] + ["".join(t) for n in range(1, 5) for t in itertools.product("abcdef\n", repeat=n)]
    assert [s for s in strings if re.fullmatch(pattern, s)] == ["cf"]
    written = translate_regex(pattern, "regex")
    assert [s for s in strings if re.fullmatch(written, s)] == ["cf"]


@pytest.mark.parametrize("pattern", [r"(a^|$b)c", r"(x$)(^y)", r"a(^b)(c$)d"])
def test_both_kinds_no_text_can_match_is_refused(backend: GrammarBackend, pattern: str) -> None:
    """A regex with both anchor kinds that no text matches is still a 400 naming the anchors.
    Oracle: ``re.search`` finds nothing on any short string."""
    strings = STRINGS + ["".join(t) for n in range(1, 5) for t in itertools.product("xy", repeat=n)]
    assert not any(re.search(pattern, s) for s in strings)
    with pytest.raises(ValueError, match=r"^regex: .*anchor.*no text can match"):
        _grammar(backend, pattern)


def test_only_empty_or_newline_after_anchors(backend: GrammarBackend) -> None:
    """A ``^`` after an end anchor holds only where nothing precedes it: ``$^\\n?`` takes
    ``""`` and ``"\\n"``, ``\\Z^`` only ``""``. Oracle: ``re.fullmatch``, on xgrammar's
    matcher."""
    for pattern in (r"(a|$^\n?)", r"(a|\Z^)b?"):
        g = _grammar(backend, pattern)
        for s in STRINGS:
            assert _accepts(g, s) == (re.fullmatch(pattern, s) is not None), (pattern, s)


def test_both_anchor_kinds_match_python_on_random_regexes() -> None:
    """Random regexes (seeded) of letters, ``\\n``, classes, ``^`` / ``\\A`` and ``$`` / ``\\Z``,
    groups, alternatives and repeats, each with both anchor kinds: the written-out regex has no
    anchor and takes, among every string of up to five characters over ``a b \\n``, exactly what
    ``re.fullmatch`` of the regex as sent takes; a refusal only where that is nothing."""
    rng = random.Random(2024)

    def gen(depth: int = 0) -> str:
        r = rng.random()
        if depth > 3 or r < 0.3:
            return rng.choice(["a", "b", "\\n", "$", "\\Z", "^", "\\A", "[ab]", "[^a]"])
        if r < 0.55:
            return gen(depth + 1) + gen(depth + 1)
        if r < 0.7:
            return f"({gen(depth + 1)}|{gen(depth + 1)})"
        return f"({gen(depth + 1)})" + rng.choice(["*", "+", "?", "{2}", "{0,2}", "{1,}"])

    strings = [""] + ["".join(t) for n in range(1, 6) for t in itertools.product("ab\n", repeat=n)]
    checked = refused = 0
    for _ in range(2000):
        pattern = gen()
        if not (("^" in pattern or "\\A" in pattern) and ("$" in pattern or "\\Z" in pattern)):
            continue
        language = [s for s in strings if re.fullmatch(pattern, s)]
        try:
            written = translate_regex(pattern, "regex")
        except ValueError as e:
            assert "no text can match" in str(e) and not language, (pattern, str(e))
            refused += 1
            continue
        assert not re.search(r"\$|\\[AZ]|(?<!\[)\^", written), (pattern, written)
        assert [s for s in strings if re.fullmatch(written, s)] == language, (pattern, written)
        checked += 1
    assert checked > 300 and refused > 20
