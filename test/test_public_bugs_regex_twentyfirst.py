"""Public reports on regular expressions in constrained decoding: the ``regex`` sampling parameter
(vLLM's ``guided_regex`` / ``structured_outputs.regex`` map to it) and JSON-schema ``pattern`` /
``patternProperties`` keys.

Faults found here and fixed (``sampling/regex_dialect.py``):

* Unicode properties (``\\p{L}``, ``\\P{Lu}``, ``\\p{Greek}``) were refused by xgrammar ("not
  supported yet"), and inside a class (``[\\p{L}]``) read as the letters ``p{L}``; a schema
  ``pattern`` with one failed the meta-schema check (Python's ``re`` does not know them,
  ECMA-262 does): they are written as explicit ranges;
* ``(?i)`` / ``(?i:...)`` were refused: case variants are written out (``(?s)`` too);
* ``.`` matched a newline (Python's ``re`` and ECMA-262 do not);
* ``a^b`` compiled to the language ``{"ab"}`` (the anchor ignored) where no engine matches
  anything, and ``\\A`` / ``\\Z`` were read as the letters ``A`` / ``Z``;
* a counted repeat above 2**32 wrapped around (``a{4294967297}`` became ``a{1}``);
* an unknown letter escape (``\\Q``) was read as its letter; look-arounds and back-references are
  refused naming the construct and its position;
* a ``patternProperties`` key regex that matches ``"``, ``\\`` or a control character could not
  write them escaped in the object's key (as ``pattern`` values before them).

Oracles: Python's ``re`` and the ``regex`` package (``fullmatch``) on the strings the grammar
accepts or refuses, xgrammar's own matcher on the grammar the backend built, Python's ``json``
parser on the texts, and an in-process scheduler on the random test checkpoint.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

xgr = pytest.importorskip("xgrammar")
regex = pytest.importorskip("regex")

from grammar_backend_testutil import accepts as _accepts  # noqa: E402
from grammar_backend_testutil import ds_grammar_backend, grammar_for  # noqa: E402
from scheduler_testutil import assert_idle, drain, make_scheduler, submit  # noqa: E402
from sglang_v4.sampling.grammar import GrammarBackend  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def backend() -> GrammarBackend:
    return ds_grammar_backend()


def _check_regex(backend: GrammarBackend, pattern: str, samples: list[str], oracle: Any = regex) -> None:
    g = grammar_for(backend, regex=pattern)
    for s in samples:
        expected = oracle.fullmatch(pattern, s) is not None
        assert _accepts(g, s) == expected, (pattern, s, expected)


def _schema_string(pattern: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"v": {"type": "string", "pattern": pattern}},
        "required": ["v"],
        "additionalProperties": False,
    }


def _json_text(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def test_unicode_property_classes_in_regex_are_written_as_ranges(backend) -> None:
    # niklongstone/regex-reverse#14: "^[\p{L}\p{Mn} \-',.()0-9/]*$" (letters of any script) was
    # "not valid". Old code: xgrammar refused "\p{L}" outside a class ("Unicode character class
    # escape sequence is not supported yet") and read "[\p{L}]" as the letters p, {, L, }.
    pattern = r"^[\p{L}\p{Mn} \-',.()0-9/]*$"
    samples = [
        "Düsseldorf",
        "Москва (1147)",
        "北京市",
        "O'Neil-Smith, Jr.",
        "p{L}",
        "a!b",
        "x_y",
        "Ωμέγα 3/4",
    ]
    _check_regex(backend, pattern, samples)
    _check_regex(backend, r"\P{L}+", ["123", "!?", "a1", "é", "\u3000"])
    _check_regex(backend, r"\p{Greek}+|\p{Lu}", ["αβγ", "Ω", "É", "é", "ab"])


def test_case_insensitive_flag_is_expanded_to_letter_cases(backend) -> None:
    # mlc-ai/xgrammar#762 (Lark regex flags i / s / u): "(?i)" and "(?i:...)" were refused by the
    # regex compiler ("Group modifier flag is not supported yet"). Python's re reads them as
    # case-insensitive matching (Unicode simple case folding: "(?i)k" takes the Kelvin sign).
    _check_regex(backend, r"(?i)(yes|no|maybe)", ["yes", "YES", "No", "mAyBe", "yep", "nO!"], re)
    _check_regex(backend, r"(?i:ab)c[x-z]", ["ABcx", "aBcz", "abCx", "abcX"], re)
    _check_regex(backend, r"(?i)[^a-c]k", ["Dk", "Ak", "bK", "d\u212a", "zz"], re)
    _check_regex(backend, r"(?i)straße", ["STRAßE", "Straße", "strasse"], re)
    _check_regex(backend, r"(?i)[]a]+", ["]A]", "a]", "b"], re)


def test_dot_does_not_match_newline_unless_dotall(backend) -> None:
    # kokke/tiny-regex-c#41 (dot should not accept line terminators): Python's re and ECMA-262 read
    # "." as any character but a newline. Old code: xgrammar's "." took "\n", so ".+" let the model
    # write lines that re.fullmatch(".+", text) refuses. "(?s)" (DOTALL) lets it in.
    _check_regex(backend, r"a.b", ["axb", "a\nb", "a\rb", "a\u2028b"], re)
    _check_regex(backend, r"(?s)a.b", ["axb", "a\nb"], re)
    _check_regex(backend, r"[^x]+", ["a\nb", "x"], re)  # a negated class keeps the newline, as in re


def test_obvious_anchors_are_accepted_and_impossible_ones_refused(backend) -> None:
    # google/sre_yield#1: the anchors of "^(foo|bar)$" or "^^^" add nothing to a full match and
    # must be accepted. Old code: xgrammar also ignored "^" / "$" in the middle, so "a^b" took "ab"
    # although no engine matches anything there; it is now a 400 naming the anchor.
    _check_regex(backend, r"^(foo|bar)$", ["foo", "bar", "^foo$", "foobar"], re)
    _check_regex(backend, r"^^^foo$$", ["foo", "^foo"], re)
    _check_regex(backend, r"(^a|b)c$", ["ac", "bc", "c"], re)
    for pattern in (r"a^b", r"a$b", r"(x$)y"):
        assert re.search(pattern, "ab") is None and re.fullmatch(pattern, "xy") is None
        with pytest.raises(ValueError, match=r"^regex: .*anchor"):
            grammar_for(backend, regex=pattern)


def test_string_anchors_backslash_a_and_z_are_anchors_not_letters(backend) -> None:
    # skunkfrukt/xeger#7 lists "\A" / "\Z" among the anchors to parse. Old code: xgrammar read them
    # as the letters ("\Aabc\Z" took "AabcZ" and refused "abc").
    _check_regex(backend, r"\Aabc\Z", ["abc", "AabcZ"], re)
    _check_regex(backend, r"(\Aab|\Acd)\Z", ["ab", "cd", "Aab", "cdZ"], re)
    with pytest.raises(ValueError, match=r"^regex: .*'\\A'"):
        grammar_for(backend, regex=r"a\Ab")


@pytest.mark.parametrize(
    "pattern,construct",
    [
        (r"(?<=a)b", "look-behind"),
        (r"a(?!b)", "look-ahead"),
        (r"(a)\1", "back-reference"),
        (r"(?P<x>a)(?P=x)", "back-reference"),
        (r"\bword\b", "word boundary"),
        (r"\Qa.b\E", "unknown escape"),
        (r"(?m)^a$", "multi-line flag"),
        (r"(?>a)", "atomic group"),
    ],
)
def test_lookarounds_and_backreferences_refused_naming_the_construct(
    backend, pattern: str, construct: str
) -> None:
    # dottxt-ai/outlines#456: a regex with look-arounds is valid Python but no finite automaton
    # (a grammar) can enforce it; the client gets a 400 naming the field, the construct and where
    # it is. Old code: "\Q" was read as the letter Q (no error at all) and the others said
    # "Group modifier flag is not supported yet" or "Lookahead is not supported yet".
    with pytest.raises(ValueError) as e:
        grammar_for(backend, regex=pattern)
    message = str(e.value)
    assert message.startswith("regex: ") and construct in message and "position" in message, message
    assert "/project/" not in message and ".cc:" not in message


def test_counted_repeat_above_the_limit_is_refused_not_wrapped(backend) -> None:
    # BeRo1985/flre#9: "a{2147483647}" must not take the machine's memory; engines cap repeat
    # counts. Old code: xgrammar read counts as 32-bit ints, so "a{4294967297}" compiled to
    # "a{1}" (the request got "a"), "a{99999999999}" to a{1215752191}, and "a{2147483648}" failed
    # a C++ check. Python's re refuses counts above its own MAXREPEAT.
    with pytest.raises(OverflowError):
        re.compile("a{4294967297}")
    for pattern in ("a{4294967297}", "a{99999999999}", "[a-z]{0,2147483648}", "(ab){200001}"):
        with pytest.raises(ValueError, match=r"^regex: a repeat count above"):
            grammar_for(backend, regex=pattern)
    _check_regex(backend, "a{3}b{,2}", ["aaa", "aaab", "aaabb", "aaabbb", "aab"], regex)


def test_regex_with_escaped_range_compiles(backend) -> None:
    # vllm-project/vllm#15210: guided_regex "[\x00-\u2e7f]+" (escapes as regex text) failed to
    # compile after an upgrade ("Unclosed '['").
    _check_regex(backend, r"[\x00-\u2e7f]+", ["hello", "caf\u00e9", "\u2e80", "a\u2e7fb"], re)


def test_python_named_groups_comments_and_lazy_quantifiers_compile(backend) -> None:
    # mlc-ai/xgrammar#183 (regex converter: named and non-capturing groups, empty alternatives,
    # clear errors for unsupported features). Python's "(?P<name>...)" and "(?#...)" were refused
    # ("Group modifier flag"); lazy quantifiers match the same full strings as greedy ones.
    _check_regex(backend, r"(?P<year>\d{4})-(?#month)(?P<m>\d\d)", ["2024-05", "2024-5", "(?#month)"], re)
    _check_regex(backend, r"a+?b*?(c|)", ["a", "aab", "abbc", "b"], re)
    _check_regex(backend, r"x{2,3}?", ["x", "xx", "xxx", "xxxx"], re)


def test_invalid_regex_aborts_its_request_only(sched_model_dir: str) -> None:
    # vllm-project/vllm#17313: a client's invalid guided_regex crashed the engine. Here it is a
    # 400 naming the field for that request, and the request beside it is served.
    sched = make_scheduler(sched_model_dir)
    if not sched.grammar_enabled:
        pytest.skip("no grammar backend")
    submit(sched, "bad", [11, 12, 13], 4, sampling={"regex": "(?<=x)y"})
    submit(sched, "ci", [11, 12, 13], 6, ignore_eos=False, sampling={"regex": "(?i)(yes|no)"})
    submit(sched, "dot", [11, 12, 13], 6, sampling={"regex": ".{1,12}", "temperature": 1.0})
    res = drain(sched)
    bad = res["bad"]["finish"]
    assert bad["type"] == "abort" and bad["status_code"] == 400, bad
    assert bad["message"].startswith("regex: a look-behind"), bad
    text = sched.tokenizer.decode(res["ci"]["ids"], skip_special_tokens=True)
    assert re.fullmatch(r"(?i)(yes|no)", text), text
    text = sched.tokenizer.decode(res["dot"]["ids"], skip_special_tokens=True)
    assert "\n" not in text[:12]  # "." takes no newline (the output may stop mid-match at length)
    assert_idle(sched)


def test_schema_pattern_with_unicode_property_escapes(backend) -> None:
    # json-schema-org/JSON-Schema-Test-Suite#505: patterns are ECMA-262 with the "u" flag, where
    # "\p{digit}" takes the Bengali digits that "\d" (ASCII) does not. Old code: the meta-schema
    # check (Python's re) refused "\p{..}" as "not a 'regex'", and xgrammar could not compile it.
    # Oracle: the regex package; ECMA-262's "\d" is its ASCII reading.
    for pattern, samples, flags in [
        (r"^\p{digit}+$", ["42", "\u09ea\u09e8", "4a"], 0),
        (r"^\d+$", ["42", "\u09ea\u09e8"], regex.ASCII),
        (r"^\p{Letter}[\p{Letter} ]*$", ["Łódź", "São Paulo", "R2D2", " a"], 0),
    ]:
        g = grammar_for(backend, json_schema=json.dumps(_schema_string(pattern)))
        for s in samples:
            expected = regex.search(pattern, s, flags) is not None
            assert _accepts(g, _json_text({"v": s})) == expected, (pattern, s, expected)


def test_schema_pattern_case_insensitive_flag(backend) -> None:
    # jhthorsen/json-validator#90: a case-insensitive pattern written "(?i)whatever". Old code:
    # refused ("Group modifier flag is not supported yet").
    pattern = r"(?i)^(red|green)-\d$"
    g = grammar_for(backend, json_schema=json.dumps(_schema_string(pattern)))
    for s in ["red-1", "RED-2", "GrEeN-3", "blue-1", "red-x"]:
        assert _accepts(g, _json_text({"v": s})) == (re.search(pattern, s) is not None), s


def test_schema_pattern_digit_and_word_are_ascii_space_is_unicode(backend) -> None:
    # guidance-ai/llguidance#158: in a JSON-schema pattern "\d" and "\w" are ASCII, "\s" takes
    # every Unicode space (ECMA-262). Oracle: Python's re with re.ASCII for \d / \w, Unicode for \s.
    cases = [
        (r"^\d$", ["1", "\u09e7"], re.ASCII),
        (r"^\w$", ["L", "\u0141"], re.ASCII),
        (r"^\s$", ["\u2000", " "], 0),
    ]
    for pattern, samples, flags in cases:
        g = grammar_for(backend, json_schema=json.dumps(_schema_string(pattern)))
        for s in samples:
            expected = re.search(pattern, s, flags) is not None
            assert _accepts(g, _json_text({"v": s})) == expected, (pattern, s)


def test_pattern_properties_unicode_key_regex(backend) -> None:
    # jsonrainbow/json-schema#338 (Unicode support in patternProperties): the key regex
    # "^\p{L}+$" was refused as "not a 'regex'"; now the keys it allows are every letter word.
    schema = {
        "type": "object",
        "patternProperties": {r"^\p{L}+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    g = grammar_for(backend, json_schema=json.dumps(schema))
    for key in ["Größe", "名前", "a1", "x y"]:
        expected = regex.search(r"^\p{L}+$", key) is not None
        assert _accepts(g, _json_text({key: 1})) == expected, key


def test_pattern_properties_key_regex_matching_json_escaped_characters(backend) -> None:
    # The key of a JSON object is a JSON string (RFC 8259 section 4 / 7): a key regex matching '"',
    # '\' or a newline must let the key be written with its escapes, as a "pattern" value can
    # (guidance-ai/guidance#1008 fixed there). Old code: '{"a\"b": 1}' was refused for '^a"b$'
    # and '{"x\ny": 1}' for '^x\ny$': the keys the schema asks for could not be written at all.
    for key_regex, key in [('^a"b$', 'a"b'), ("^x\\ny$", "x\ny"), ("^[\\\\/]+$", "\\/\\")]:
        schema = {
            "type": "object",
            "patternProperties": {key_regex: {"type": "integer"}},
            "additionalProperties": False,
        }
        g = grammar_for(backend, json_schema=json.dumps(schema))
        text = json.dumps({key: 1})
        assert re.search(key_regex, json.loads(text).popitem()[0])
        assert _accepts(g, text), (key_regex, text)
        assert not _accepts(g, json.dumps({key + "z": 1})), key_regex
