"""Public reports on regular expressions in constrained decoding, twenty-second set: end anchors
inside a full-match regex, a regex answer after the reasoning, and the request field a regex
error names.

Faults found here and fixed:

* an end anchor with text after it on one path (``(a$|b)c``) was refused as a whole, though the
  language is well defined (``{"bc"}``: in Python's ``re.fullmatch`` the ``a$`` branch is dead);
  ``$`` before a final newline (``a$\\n`` takes ``"a\\n"``), an anchor in a repeated group
  (``(a$)*`` takes ``""`` and ``"a"`` only) likewise: the anchors are now written out of the
  regex (``sampling/regex_end_anchor.py``); a regex no text can match (``$abc``) is still a 400;
* a ``regex`` answer after the reasoning (thinking mode), and a ``{"type": "regex"}`` format in a
  structural tag, reached xgrammar untranslated: ``.`` took a newline, ``\\p{Lu}`` and ``(?i)``
  were refused, ``(a$|b)c`` took ``"ac"`` (``sampling/structural_tag.py``);
* an empty ``guided_regex`` / ``structured_outputs.regex`` was a 400 naming ``regex``, a field
  the client never sent (``entrypoints/openai/request_sampling.py``);
* a NUL character in a regex (``"\\u0000"`` in the request's JSON) was refused by xgrammar: it
  is written as an escape (``sampling/regex_dialect.py``).

Oracles: Python's ``re`` and the ``regex`` package (``fullmatch``) on every short string over a
small alphabet, xgrammar's own matcher on the grammar the backend built, and the field the client
sent (OpenAI's ``param``).
"""

from __future__ import annotations

import itertools
import json
import re
from types import SimpleNamespace
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
regex = pytest.importorskip("regex")

from grammar_backend_testutil import accepts as _accepts  # noqa: E402
from grammar_backend_testutil import ds_grammar_backend, grammar_for  # noqa: E402
from sglang_v4.sampling.grammar import Grammar, GrammarBackend  # noqa: E402
from sglang_v4.sampling.structural_tag import after_reasoning_structural_tag  # noqa: E402

pytestmark = pytest.mark.timeout(180)

#: every string of up to four characters over ``a b c \\n``
STRINGS = [""] + ["".join(t) for n in range(1, 5) for t in itertools.product("abc\n", repeat=n)]


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _check_language(backend: GrammarBackend, pattern: str) -> None:
    """The ``regex`` grammar of ``pattern`` takes exactly the strings of :data:`STRINGS` that
    ``re.fullmatch`` takes."""
    g = grammar_for(backend, regex=pattern)
    matched = 0
    for s in STRINGS:
        expected = re.fullmatch(pattern, s) is not None
        matched += expected
        assert _accepts(g, s) == expected, (pattern, s, expected)
    assert matched > 0  # the oracle takes something: the check is not vacuous


def test_dead_branch_after_end_anchor_is_dropped(backend: GrammarBackend) -> None:
    """guidance-ai/llguidance#66 (fixed by #82, "regex anchoring semantics"): an anchor inside a
    regex is an assertion, not a letter and not a reason to refuse. ``(a$|b)c`` was a 400 ("text
    after an end anchor"); its language is ``{"bc"}``. Oracle: ``re.fullmatch`` over every short
    string, on xgrammar's matcher."""
    assert [s for s in STRINGS if re.fullmatch(r"(a$|b)c", s)] == ["bc"]
    for pattern in (r"(a$|b)c", r"(a$|b)c?", r"(?:x$|a)b*", r"(a$|b){2,3}", r"a(b$)?c?"):
        _check_language(backend, pattern)


def test_end_anchor_in_a_repeated_group(backend: GrammarBackend) -> None:
    """guidance-ai/llguidance#82: an anchor inside a repeated group ends the repetition. Old
    code dropped the anchor: ``(a$)*`` took ``"aa"``, which ``re.fullmatch`` does not (the second
    iteration follows an end anchor). Oracle: ``re.fullmatch``."""
    assert re.fullmatch(r"(a$)*", "aa") is None and re.fullmatch(r"(a$)*", "a")
    for pattern in (r"(a$)*", r"(a$|b)*", r"(a$)+b?", r"($|a)*b?", r"(ab$|c)+"):
        _check_language(backend, pattern)


def test_dollar_matches_before_a_final_newline(backend: GrammarBackend) -> None:
    """dotnet/dotnet-api-docs#5422: ``$`` matches at the end *or before a final newline* (Python,
    .NET and PCRE agree), ``\\Z`` only at the very end. So ``a$\\n`` takes ``"a\\n"`` and
    ``a\\Z\\n`` nothing. Old code: both were a 400. Oracle: ``re.fullmatch``."""
    assert re.fullmatch("a$\n", "a\n") and re.fullmatch(r"(a\Z|b)\n?", "a\n") is None
    for pattern in ("a$\n", r"(a$|b)\n?", r"(a\Z|b)\n?", r"(a$\n?)*", r"a(b$)?\n"):
        _check_language(backend, pattern)


def test_regex_no_text_can_match_is_refused_naming_the_anchor(backend: GrammarBackend) -> None:
    """VirusTotal/yara#647: ``$abc`` (an end anchor before text) matched ``"abc"``, as xgrammar
    reads it still. No string matches it in Python's ``re``; it is a 400 naming the anchor and its
    position, while ``c|$abc`` (one live branch) compiles to ``{"c"}``. Oracle: ``re.search`` /
    ``re.fullmatch``."""
    for pattern, pos in ((r"$abc", 0), (r"a\Z\n", 1), (r"(x$)y", 2)):
        assert not any(re.search(pattern, s) for s in STRINGS + ["abc", "xy"])
        with pytest.raises(ValueError, match=rf"^regex: .*end anchor.* at position {pos} "):
            grammar_for(backend, regex=pattern)
    _check_language(backend, r"c|$abc")
    g = grammar_for(backend, regex=r"c|$abc")
    assert _accepts(g, "c") and not _accepts(g, "abc")


def test_dollar_ending_an_alternative_inside_a_group(backend: GrammarBackend) -> None:
    """microsoft/STL#5362: a ``$`` that ends an alternative inside a group (``(ab$|cd)``) is an
    anchor, and text may follow the group on the other branch. Oracle: ``re.fullmatch`` and the
    ``regex`` package agree on every string."""
    for pattern in (r"(ab$|cd)(ab)?", r"(?:ab$|c)\n?c?", r"((a$)|b)(c|$)"):
        _check_language(backend, pattern)
        for s in STRINGS:
            assert (re.fullmatch(pattern, s) is None) == (regex.fullmatch(pattern, s) is None)


def test_anchor_translation_matches_python_on_random_regexes() -> None:
    """guidance-ai/llguidance#82 (its "TODO: maybe some tests"): the written-out regex against
    Python's ``re.fullmatch`` on random regexes of anchors, groups, alternatives and repeats,
    every string of up to four characters. Oracle: ``re.fullmatch`` of the regex as sent."""
    import random

    from sglang_v4.sampling.regex_dialect import translate_regex

    rng = random.Random(22)

    def gen(depth: int = 0) -> str:
        r = rng.random()
        if depth > 3 or r < 0.3:
            return rng.choice(["a", "b", "\\n", "$", "\\Z", "[ab]", "[^a]"])
        if r < 0.55:
            return gen(depth + 1) + gen(depth + 1)
        if r < 0.7:
            return f"({gen(depth + 1)}|{gen(depth + 1)})"
        return f"({gen(depth + 1)})" + rng.choice(["*", "+", "?", "{2}", "{0,2}", "{1,}"])

    strings = [""] + ["".join(t) for n in range(1, 5) for t in itertools.product("ab\n", repeat=n)]
    checked = 0
    for _ in range(400):
        pattern = gen()
        if "$" not in pattern and "\\Z" not in pattern:
            continue
        language = [s for s in strings if re.fullmatch(pattern, s)]
        try:
            written = translate_regex(pattern, "regex")
        except ValueError as e:
            assert "no text can match" in str(e) and not language, pattern
            continue
        assert "$" not in written and "\\Z" not in written, (pattern, written)
        assert [s for s in strings if re.fullmatch(written, s)] == language, (pattern, written)
        checked += 1
    assert checked > 100


def _after_reasoning(backend: GrammarBackend, pattern: str) -> Grammar:
    return grammar_for(backend, structural_tag=after_reasoning_structural_tag("regex", pattern))


def test_regex_answer_after_reasoning_is_translated(backend: GrammarBackend) -> None:
    """ai-dynamo/dynamo#9006: guided decoding with thinking on -- the ``regex`` must constrain the
    answer after ``</think>``, with the same meaning as without thinking. Old code handed the raw
    regex to xgrammar inside the structural tag: ``a.b`` took ``"a\\nb"``, ``\\p{Lu}+`` and
    ``(?i)ab`` were refused, ``(a$|b)c`` took ``"ac"``. Oracle: the ``regex`` package's
    ``fullmatch`` of the answer, on xgrammar's matcher after a free reasoning."""
    cases = [
        (r"a.b", ["a\nb", "axb", "ab"]),
        (r"\p{Lu}+", ["ABC", "Ab", "ÉÀ", ""]),
        (r"(?i)ab", ["AB", "aB", "ab", "ac"]),
        (r"(a$|b)c", ["ac", "bc", "a"]),
    ]
    for pattern, answers in cases:
        g = _after_reasoning(backend, pattern)
        for answer in answers:
            expected = regex.fullmatch(pattern, answer) is not None
            assert _accepts(g, "why not</think>" + answer) == expected, (pattern, answer)


def test_structural_tag_regex_format_is_translated(backend: GrammarBackend) -> None:
    """ai-dynamo/dynamo#9006 (the same grammar as a client's own structural tag): a
    ``{"type": "regex"}`` format reads its pattern as the ``regex`` parameter does. Oracle: the
    ``regex`` package's ``fullmatch`` of the tag's content."""
    pattern = r"[\p{Greek}]+.x"
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "tag",
            "begin": "<a>",
            "content": {"type": "regex", "pattern": pattern},
            "end": "</a>",
        },
    }
    g = grammar_for(backend, structural_tag=json.dumps(tag))
    for content in ("αβ-x", "αβ\nx", "ab-x"):
        assert _accepts(g, f"<a>{content}</a>") == (regex.fullmatch(pattern, content) is not None), content
    tag["format"]["content"]["pattern"] = "a(?=b)"
    with pytest.raises(ValueError, match=r"^structural_tag: invalid grammar: pattern: a look-ahead"):
        grammar_for(backend, structural_tag=json.dumps(tag))


def test_invalid_regex_is_a_client_error_naming_the_problem(backend: GrammarBackend) -> None:
    """vllm-project/vllm#19270: ``guided_regex: "foo**"`` crashed the server. Python's ``re``
    refuses it too ("multiple repeat"): a ``ValueError`` (the scheduler's 400) naming the regex
    field and the problem, and the backend compiles the next request. Oracle: ``re.compile``."""
    with pytest.raises(re.error):
        re.compile("foo**")
    with pytest.raises(ValueError, match=r"^regex: invalid grammar: .*repetition"):
        grammar_for(backend, regex="foo**")
    assert _accepts(grammar_for(backend, regex="fo+"), "foo")


# ------------------------------------------------------------------ the field a 400 names


def _openai_client(tm: Any) -> Any:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sglang_v4.entrypoints.openai import create_openai_router

    sa = SimpleNamespace(served_model_name="m", model_path=None, api_key=None, enable_cache_report=False)
    app = FastAPI()
    app.include_router(create_openai_router(tm, sa))
    return TestClient(app)


@pytest.fixture(scope="module")
def regex_tm(tok: Any, backend: GrammarBackend) -> Any:
    """A fake tokenizer manager that compiles a request's grammar with the real backend before
    generating, as the scheduler does (its ``ValueError`` is the request's 400)."""
    from fake_prompt_tm import PromptTM

    class RegexTM(PromptTM):
        async def generate_request(self, obj: Any, request: Any = None) -> Any:
            fields = {
                k: v for k, v in (obj.sampling_params or {}).items() if k in ("regex", "structural_tag")
            }
            if fields:
                grammar_for(backend, **fields)
            async for out in super().generate_request(obj, request):
                yield out

    return RegexTM(tok, reply="ab")


@pytest.mark.parametrize(
    "path,extra,field",
    [
        ("/v1/chat/completions", {"guided_regex": "a(?=b)"}, "guided_regex"),
        ("/v1/completions", {"guided_regex": "a(?=b)"}, "guided_regex"),
        ("/v1/completions", {"structured_outputs": {"regex": "a(?=b)"}}, "structured_outputs"),
        ("/v1/chat/completions", {"regex": "a(?=b)"}, "regex"),
        ("/v1/chat/completions", {"guided_regex": ""}, "guided_regex"),
        ("/v1/completions", {"structured_outputs": {"regex": ""}}, "structured_outputs"),
    ],
)
def test_regex_error_names_the_field_the_client_sent(
    regex_tm: Any, path: str, extra: dict[str, Any], field: str
) -> None:
    """vllm-project/vllm#7390: an invalid guided regex gave a bad error description. The 400 names
    the field the client sent (``guided_regex``, ``structured_outputs``), not SGLang's internal
    ``regex``; old code said ``regex must not be empty`` with ``param: "regex"`` for an empty
    ``guided_regex``. Oracle: the request's own field (OpenAI's ``param``)."""
    body = {"model": "m", "max_tokens": 4, **extra}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"})
    r = _openai_client(regex_tm).post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field, err
    assert err["message"].startswith(field), err
    if field != "regex":
        assert not err["message"].startswith("regex"), err


@pytest.mark.parametrize(
    "pattern", ["\x00|a", "a\\\x00b", "[^\x00]+", "(?i)[\x00a]b", "[\x00-\u2e7f]+", "a\x00$"]
)
def test_nul_character_in_a_regex_matches_nul(backend: GrammarBackend, pattern: str) -> None:
    """mawww/kakoune#4460: "a literal NUL character in a regex should match NUL". xgrammar refuses
    any NUL in a regex ("The regex must not contain null characters", mlc-ai/xgrammar#850), so a
    JSON request with ``"\\u0000"`` in its regex was a 400 although Python's ``re`` compiles it.
    Oracle: ``re.fullmatch`` on strings with and without NUL."""
    g = grammar_for(backend, regex=pattern)
    for s in ("\x00", "a", "a\x00b", "\x00b", "Ab", "abc", "a\x00", "\x00\x00"):
        assert _accepts(g, s) == (re.fullmatch(pattern, s) is not None), (pattern, s)


@pytest.mark.parametrize("pattern", [r"a(^b|c)", r"(^a)*", r"(^a|b)c", r"(\Aa|b)+", r"c|(^a)?b"])
def test_start_anchor_after_text_on_one_path(backend: GrammarBackend, pattern: str) -> None:
    """guidance-ai/llguidance#82 (the start side): ``a(^b|c)`` was a 400 though its language is
    ``{"ac"}``, and ``(^a)*`` took ``"aa"`` (the second iteration's ``^`` follows text, so
    ``re.fullmatch`` refuses it). Start anchors are written out by reading the regex backwards.
    Oracle: ``re.fullmatch`` over every short string."""
    _check_language(backend, pattern)
