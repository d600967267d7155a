"""Public reports on regular expressions in constrained decoding, thirty-second set: what the
class escapes ``\\d \\w \\s`` (and ``\\D \\W \\S``) take in the ``regex`` parameter, the ``(?a)`` /
``(?u)`` flags, and possessive quantifiers.

Faults found here and fixed:

* ``\\d \\w \\s`` reached xgrammar as ECMA-262 reads them, whatever flag was set: ``\\w`` refused
  ``"é"`` and ``\\d`` the Arabic-Indic digits that Python's ``re`` takes, ``\\s`` took U+FEFF and
  refused U+001C / U+0085, ``(?a)\\s`` took U+00A0 and ``(?u)\\w`` stayed ASCII. They are now
  Python's reading, under ``re.ASCII`` by default (``\\d`` is ``[0-9]``, as SGLang's and vLLM's
  grammar backends read it) and Unicode under ``(?u)``, written as explicit ranges read from ``re``
  (``sampling/regex_class_escapes.py``, ``sampling/regex_dialect.py``); a JSON-schema ``pattern``
  keeps ECMA-262's reading;
* a possessive quantifier (``a*+``, Python 3.11) was refused with xgrammar's "Two consecutive
  repetition modifiers" message; it is refused by name (``ValueError`` naming ``regex``);
* ``(?-a)`` was taken silently; Python refuses it, so does the backend.

Fixture: the grammar backend over DeepSeek-V4's tokenizer (``grammar_backend_testutil``), no
server. Oracles: Python's ``re.fullmatch`` (with ``re.ASCII`` unless the pattern sets ``(?u)``,
:func:`_oracle`) on hand-picked strings and on every code point below
U+0800, against xgrammar's own matcher of the grammar the backend built; Python's own errors.
"""

from __future__ import annotations

import json
import re

import pytest

xgr = pytest.importorskip("xgrammar")

from grammar_backend_testutil import accepts as _accepts  # noqa: E402
from grammar_backend_testutil import ds_grammar_backend, grammar_for  # noqa: E402
from sglang_v4.sampling.grammar import GrammarBackend  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _oracle(pattern: str, s: str) -> bool:
    """Python's full match of the served reading: ``re.ASCII`` unless the pattern asks ``(?u)``."""
    return re.fullmatch(pattern, s, 0 if pattern.startswith("(?u)") else re.ASCII) is not None


def _check(backend: GrammarBackend, pattern: str, samples: list[str]) -> None:
    """The grammar of ``regex=pattern`` takes exactly the samples :func:`_oracle` takes; both
    outcomes occur among the samples (the check is not vacuous)."""
    g = grammar_for(backend, regex=pattern)
    seen = set()
    for s in samples:
        expected = _oracle(pattern, s)
        seen.add(expected)
        assert _accepts(g, s) == expected, (pattern, s, expected)
    assert seen == {True, False}, (pattern, seen)


def test_word_escape_takes_accented_letters_as_python_does(backend: GrammarBackend) -> None:
    """google/re2#91: ``\\w`` did not match ``"Voilà"`` (RE2 and ECMA-262 are ASCII there). Under
    ``(?u)`` the ``regex`` parameter is Python's Unicode reading: ``(?u)\\w+`` refused ``"Voilà"``
    and ``"日本"``. Without it ``\\w`` / ``\\d`` stay ASCII (``re.ASCII``), as SGLang's and vLLM's
    grammar backends read them. Oracle: ``re.fullmatch``."""
    _check(backend, r"(?u)\w+", ["Voilà", "日本", "naïve_1", "a-b", "a b", ""])
    _check(backend, r"(?u)\d{2}", ["42", "٤٢", "４２", "4a", "½1"])
    _check(backend, r"\w+", ["Voila", "Voilà", "日本", "naive_1"])
    _check(backend, r"\d{2}", ["42", "٤٢", "４２", "4a"])


def test_inline_ascii_flag_restricts_class_escapes(backend: GrammarBackend) -> None:
    """firasdib/Regex101#2003: the inline flag ``(?a)`` did not work — ``(?a)\\w+`` must take
    ``"hello"`` and not ``"你好hello"``. Old code: ``(?a)`` changed nothing and ``(?a)\\s`` took the
    no-break space U+00A0, which Python's ASCII ``\\s`` (``[ \\t\\n\\r\\f\\v]``) refuses.
    Oracle: ``re.fullmatch``."""
    _check(backend, r"(?a)\w+", ["hello", "你好hello", "é"])
    _check(backend, r"(?a)\s", [" ", "\t", "\xa0", "\u2003", "\x1c"])
    _check(backend, r"(?u)\w+", ["hello", "你好", "-"])


def test_scoped_ascii_flag(backend: GrammarBackend) -> None:
    """mrabarnett/mrab-regex#572: the scoped flag ``(?a:\\d)`` did not restrict ``\\d`` to ASCII
    (``"９"`` matched). In Python's ``re`` it does, and only inside the group. Oracle:
    ``re.fullmatch``."""
    _check(backend, r"(?u)(?a:\d)\d", ["99", "9９", "９9", "９９"])


def test_turning_off_ascii_flag_is_refused(backend: GrammarBackend) -> None:
    """mrabarnett/mrab-regex#575: ``(?-a:\\d)`` — the ``regex`` package took it, Python's ``re``
    refuses it ("cannot turn off flags 'a', 'u' and 'L'"). Old code took it silently; it is a
    ``ValueError`` naming the field and the position. Oracle: ``re.compile``'s error."""
    for pattern in (r"(?-a:\d)", r"(?au)\d"):
        with pytest.raises(re.error):
            re.compile(pattern)
        with pytest.raises(ValueError, match=r"^regex: .* at position 0 "):
            grammar_for(backend, regex=pattern)


def test_unicode_and_ascii_space_disagree_as_in_python(backend: GrammarBackend) -> None:
    """python/cpython#90027: Unicode and ASCII ``\\s`` disagree on U+001C..U+001F. Old code read
    ``\\s`` as ECMA-262 white space: it refused U+001C and U+0085 and took U+FEFF, unlike Python in
    either mode. Oracle: ``re.fullmatch`` over every code point below U+0800, the Unicode spaces
    above it, U+FEFF and a full-width digit."""
    spaces = [0x1680, *range(0x2000, 0x200C), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF]
    for pattern in (
        r"(?u)\s",
        r"(?u)\S",
        r"(?u)[^\s]",
        r"(?u)\d",
        r"(?u)[\W\d]",
        r"\s",
        r"(?a)\S",
        r"[\W\d]",
    ):
        g = grammar_for(backend, regex=pattern)
        for c in [*range(0x800), *spaces, 0xFF19]:
            expected = _oracle(pattern, chr(c))
            assert _accepts(g, chr(c)) == expected, (pattern, hex(c), expected)


def test_word_escape_leaves_variation_selector_out(backend: GrammarBackend) -> None:
    """mrabarnett/mrab-regex#451: the ``regex`` package's ``\\w`` takes U+FE0F (a mark), Python's
    ``re`` does not. The ``regex`` parameter follows ``re``. Oracle: ``re.fullmatch``."""
    assert re.fullmatch(r"\w", "\ufe0f") is None
    _check(backend, r"(?u)\w+", ["a\ufe0f", "ab"])


def test_negated_class_of_escapes_takes_accented_letters(backend: GrammarBackend) -> None:
    """mrabarnett/mrab-regex#272: ``[^\\W0-9_]+ Rego`` (letters only) must take ``"Fundació
    Rego"``. Old code: ``\\W`` was ASCII inside the class, so ``"ó"`` was refused. The empty class
    ``[^\\s\\S]`` still takes nothing. Oracle: ``re.fullmatch``."""
    _check(backend, r"(?u)[^\W0-9_]+ Rego", ["Fundació Rego", "Fundaci0 Rego", "Ñandú Rego", "_ Rego"])
    with pytest.raises(ValueError, match=r"^regex: "):
        grammar_for(backend, regex=r"[a-\d]")  # Python: "bad character range a-\d"


def test_possessive_quantifier_is_refused_by_name(backend: GrammarBackend) -> None:
    """sihlfall/vba-regex#5 (and DataDog/java-reggie#42): possessive quantifiers were taken as
    greedy ones, giving false matches (``a++a`` matched ``"aaa"``; no engine with possessive
    quantifiers does). Python 3.11 reads them; a constrained decoder cannot (the matched text
    must be given back to the rest). Old code: xgrammar's "Two consecutive repetition modifiers".
    Now a ``ValueError`` naming ``regex``, the quantifier and its position. Oracle: Python."""
    assert re.fullmatch(r"a++a", "aaa") is None  # possessive: nothing is given back
    for pattern, shown in ((r"a++a", "+"), (r"xa*+", "*"), (r"b{2}+", "{2}"), (r"c?+", "?")):
        with pytest.raises(ValueError, match=rf"^regex: a possessive quantifier '{re.escape(shown)}\+'"):
            grammar_for(backend, regex=pattern)
    _check(backend, r"a+(\+)?", ["a+", "aa", "+"])  # an escaped "+" after a repeat is a letter


def test_schema_pattern_keeps_ecma_reading(backend: GrammarBackend) -> None:
    """guidance-ai/llguidance#158 (the other side): a JSON-schema ``pattern`` is ECMA-262, where
    ``\\w`` is ASCII; only the ``regex`` parameter takes Python's reading. Oracle: ``re`` with
    ``re.ASCII``."""
    schema = {"type": "string", "pattern": r"^\w+$"}
    g = grammar_for(backend, json_schema=json.dumps(schema))
    for s in ["abc", "é"]:
        assert _accepts(g, json.dumps(s)) == (re.fullmatch(r"\w+", s, re.ASCII) is not None), s
