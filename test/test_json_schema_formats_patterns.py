"""``format: "date"`` / ``"date-time"`` / ``"time"`` answers are real calendar values.

xgrammar's built-in format regexes take any day 01-31 in every month, so the embedded model
answered a pydantic ``datetime.date`` field with ``"2661-11-31"`` (a ``ValidationError`` in the
client's own ``parse``). ``normalize_json_schema`` now gives those formats an exact pattern. Oracle: Python's
``datetime`` parsers (RFC 3339 / ISO 8601 calendar rules), never the pattern itself; each text is
checked against xgrammar's grammar of the rewritten schema.

Also a ``pattern`` with an optional group (``^\\d+(\\.\\d+)?$``, a decimal): xgrammar's grammar of
it took the group's tail without its head; the rewritten pattern matches as Python's ``re`` does.
The same holds for the regexes that match object keys (``patternProperties``, ``propertyNames``).
"""

from __future__ import annotations

import datetime
import json

import pytest

xgr = pytest.importorskip("xgrammar")

from sglang_v4.sampling.json_schema_rewrite import normalize_json_schema  # noqa: E402


def _grammar(fmt: str) -> object:
    schema = normalize_json_schema({"type": "string", "format": fmt})
    return xgr.Grammar.from_json_schema(json.dumps(schema))


def _accepts(grammar: object, value: str) -> bool:
    from xgrammar.testing import _is_grammar_accept_string

    return _is_grammar_accept_string(grammar, json.dumps(value))


def _is_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_datetime(text: str) -> bool:
    """RFC 3339 ``date-time``: Python's ISO 8601 reading, with the ``T`` separator and the offset
    that RFC 3339 requires and Python does not."""
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except ValueError:
        return False
    return text[10:11] == "T" and parsed.tzinfo is not None


def _is_time(text: str) -> bool:
    """RFC 3339 ``full-time``: Python's reading, with the offset RFC 3339 requires."""
    try:
        parsed = datetime.time.fromisoformat(text)
    except ValueError:
        return False
    return parsed.tzinfo is not None


# leap and common years, the century rules (1900 not leap, 2000 leap), both ends of the range
YEARS = ("0001", "0400", "1900", "2000", "2023", "2024", "2661", "9999")
DATES = [f"{y}-{m:02d}-{d:02d}" for y in YEARS for m in range(0, 14) for d in (0, 1, 28, 29, 30, 31, 32)] + [
    "0000-01-01",
    "2024-1-01",
    "2024-01-1",
    "12024-01-01",
]


def test_date_format_accepts_exactly_the_calendar_dates() -> None:
    grammar = _grammar("date")
    wrong = [d for d in DATES if _accepts(grammar, d) != _is_date(d)]
    assert not wrong, wrong[:10]


TIMES = [
    f"{h}:{mi}:{s}{frac}{off}"
    for h in ("00", "23", "24")
    for mi in ("00", "59", "60")
    for s in ("00", "59", "60")
    for frac in ("", ".5", ".123456")
    for off in ("Z", "+05:30", "-23:59", "+24:00")
]


def test_date_time_format_accepts_only_valid_datetimes() -> None:
    grammar = _grammar("date-time")
    texts = [f"{d}T{t}" for d in ("2023-02-28", "2023-02-29", "2024-02-29", "2661-11-31") for t in TIMES[::7]]
    texts += ["2024-02-29T12:00:00Z", "2023-11-31T12:00:00Z", "2024-02-29 12:00:00Z", "2024-02-29T12:00:00"]
    texts += ["2024-02-29T12:00:001234Z", "2024-02-29T12:00:00.1234Z"]
    wrong = [t for t in texts if _accepts(grammar, t) != _is_datetime(t)]
    assert not wrong, wrong[:10]
    assert _accepts(grammar, "2024-02-29T23:59:59.5+05:30")
    # RFC 3339 time-secfrac is "." 1*DIGIT (Python reads the bare dot too)
    assert not _accepts(grammar, "2024-02-29T12:00:00.Z")


def test_time_format_accepts_only_valid_times() -> None:
    grammar = _grammar("time")
    texts = TIMES + ["12:00:00", "12:00", "12:00:001234Z", "12:00:00.1234Z"]
    wrong = [t for t in texts if _accepts(grammar, t) != _is_time(t)]
    assert not wrong, wrong[:10]
    assert not _accepts(grammar, "12:00:00.Z")


def test_format_with_length_bound_is_left_for_the_refusal() -> None:
    node = {"type": "string", "format": "date", "maxLength": 9}  # a date has ten characters
    assert normalize_json_schema(node) == node
    other = {"type": "string", "format": "email"}
    assert normalize_json_schema(other) == other


# ------------------------------------------------------------ optional groups in a ``pattern``
PATTERNS = [
    r"^a(\.\d+)?$",  # a decimal's fraction: xgrammar 0.2.9 took "a1"
    r"^a(?:\.\d+)?$",
    r"^(\.\d+)?a$",
    r"^a(\.\d+)??$",
    r"^a(x(\.\d+)?)?$",
    r"^a(x|\.\d+)?$",
    r"^a\.?\d+$",
    r"^[)?]a(\.x+)?$",  # ")?" inside a class and escaped stay as they are
    r"^\)?a(1x*)?$",
]
ALPHABET = "ax.1)?"


@pytest.mark.parametrize("pattern", PATTERNS)
def test_pattern_with_optional_group_matches_like_python_re(pattern: str) -> None:
    import itertools
    import re

    grammar = xgr.Grammar.from_json_schema(
        json.dumps(normalize_json_schema({"type": "string", "pattern": pattern}))
    )
    texts = ["".join(t) for n in range(4) for t in itertools.product(ALPHABET, repeat=n)]
    wrong = [t for t in texts if _accepts(grammar, t) != bool(re.search(pattern, t))]
    assert not wrong, wrong[:10]


# ------------------------------------------- the same fault in regexes that match object keys
KEY_PATTERNS = [r"^a(\.\d+)?$", r"^a(x(\.\d+)?)?$", r"^(\.\d+)?a$"]


def _key_texts() -> list[str]:
    import itertools

    return ["".join(t) for n in range(4) for t in itertools.product("ax.1", repeat=n)]


@pytest.mark.parametrize("pattern", KEY_PATTERNS)
@pytest.mark.parametrize("where", ["patternProperties", "propertyNames"])
def test_key_regex_with_optional_group_matches_like_python_re(pattern: str, where: str) -> None:
    """``patternProperties`` keys (and ``propertyNames``' ``pattern``) are regexes xgrammar
    compiles into the object's key grammar, with the optional-group fault of a ``pattern``
    (``^a(\\.\\d+)?$`` took the key ``"a1"``). A one-key object is accepted exactly when Python's
    ``re`` matches its key (the patterns are anchored: ``re.fullmatch`` of the body) and the
    ``jsonschema`` package finds the object valid under the original schema; the value under
    ``patternProperties`` carries the same pattern, checked the same way."""
    import re

    jsonschema = pytest.importorskip("jsonschema")
    if where == "patternProperties":
        schema = {
            "type": "object",
            "patternProperties": {pattern: {"type": "string", "pattern": pattern}},
            "additionalProperties": False,
        }
    else:
        schema = {
            "type": "object",
            "propertyNames": {"pattern": pattern},
            "additionalProperties": {"type": "string"},
        }
    grammar = xgr.Grammar.from_json_schema(json.dumps(normalize_json_schema(schema)))
    body = pattern[1:-1]

    from xgrammar.testing import _is_grammar_accept_string

    wrong = []
    values = ["a", "a1"] if where == "patternProperties" else ["a1"]
    for key in _key_texts():
        for value in values:
            text = json.dumps({key: value})
            want = re.fullmatch(body, key) is not None and (
                where == "propertyNames" or re.fullmatch(body, value) is not None
            )
            assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)) == want, text
            if _is_grammar_accept_string(grammar, text) != want:
                wrong.append(text)
    assert not wrong, wrong[:10]


def test_pattern_properties_keys_that_become_one_regex_are_joined() -> None:
    """Two ``patternProperties`` keys with one match set once rewritten (``(X)?`` and ``(X|)``):
    JSON Schema applies both subschemas to a matching key, so the rewritten key carries both."""
    schema = {
        "type": "object",
        "patternProperties": {r"^a(\.\d+)?$": {"type": "integer"}, r"^a(\.\d+|)$": {"minimum": 0}},
    }
    out = normalize_json_schema(schema)["patternProperties"]
    assert out == {r"^a(\.\d+|)$": {"type": "integer", "minimum": 0}}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"type": "string", "maxLength": 2}, {"type": "string", "maxLength": 4}),
        ({"type": "integer", "minimum": 3}, {"type": "number", "minimum": 1, "maximum": 5}),
        ({"enum": [1, 2, 3, "x"]}, {"enum": ["x", 3, 4]}),
    ],
)
def test_pattern_properties_keys_that_become_one_regex_keep_both_subschemas(
    first: dict, second: dict
) -> None:
    """The join of two ``patternProperties`` keys that become one regex is the ``allOf`` of their
    subschemas even where both set a keyword (the tighter bound, the common types / values), not
    the second alone. Oracle: the ``jsonschema`` package on the original schema, per value."""
    jsonschema = pytest.importorskip("jsonschema")
    from xgrammar.testing import _is_grammar_accept_string

    schema = {
        "type": "object",
        "patternProperties": {r"^a(\.\d+)?$": first, r"^a(\.\d+|)$": second},
        "additionalProperties": False,
    }
    grammar = xgr.Grammar.from_json_schema(json.dumps(normalize_json_schema(schema)))
    wrong = []
    for value in ["", "ab", "abc", "abcd", "abcde", 0, 1, 2, 3, 4, 5, 6, 3.5, "x", "y"]:
        text = json.dumps({"a": value})
        want = jsonschema.Draft202012Validator(schema).is_valid({"a": value})
        if _is_grammar_accept_string(grammar, text) != want:
            wrong.append((text, want))
    assert not wrong, wrong


def test_pattern_properties_keys_that_become_one_regex_with_clashing_patterns_are_refused() -> None:
    """Two value ``pattern`` regexes cannot be written as one for xgrammar: a ValueError naming
    the field and both keys, rather than a grammar that drops one of them."""
    schema = {
        "type": "object",
        "patternProperties": {r"^a(b)?$": {"pattern": "^x"}, r"^a(b|)$": {"pattern": "y$"}},
    }
    with pytest.raises(
        ValueError, match=r"patternProperties: keys '\^a\(b\)\?\$' and '\^a\(b\|\)\$'.*'pattern'"
    ):
        normalize_json_schema(schema)
