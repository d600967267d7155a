"""Deep but valid JSON schemas (150 nested objects / arrays) compile and constrain output.

Found in a new-user trial: a schema nested 99+ object levels (123+ array levels) was refused with
"maximum recursion depth exceeded", raised by the meta-schema check (``jsonschema`` recurses
several Python frames per level) before xgrammar, which compiles it, was ever asked. The check now
needs no deep Python recursion; malformed deep schemas are still refused naming the field and the
path. Oracle: ``json.loads`` and ``jsonschema.validate`` (the reference validator) on the output.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import jsonschema
import pytest
from sampling_grammar_testutil import _favour, _generate, backend_fixture, structural_fixture, tok_fixture  # noqa: F401 - fixtures
from sglang_v4.sampling.json_schema_rewrite import check_json_schema
from sglang_v4.sampling.sampling_params import SamplingParams

DEPTH = 150


@contextmanager
def deep_recursion() -> Iterator[None]:
    """Room for the oracle (``jsonschema`` recurses several frames per schema level)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def nested_objects(depth: int, leaf: dict) -> dict:
    s = leaf
    for _ in range(depth):
        s = {"type": "object", "properties": {"a": s}, "required": ["a"], "additionalProperties": False}
    return s


def nested_arrays(depth: int, leaf: dict) -> dict:
    s = leaf
    for _ in range(depth):
        s = {"type": "array", "items": s, "minItems": 1, "maxItems": 1}
    return s


@pytest.mark.parametrize("make", [nested_objects, nested_arrays], ids=["objects", "arrays"])
def test_deep_schema_compiles(backend, make) -> None:  # noqa: F811
    sp = SamplingParams(json_schema=json.dumps(make(DEPTH, {"type": "integer"})), temperature=0.7)
    assert backend.create(sp) is not None


@pytest.mark.slow
@pytest.mark.parametrize("make", [nested_objects, nested_arrays], ids=["objects", "arrays"])
def test_deep_schema_generates_valid_json(tok, backend, structural, make) -> None:  # noqa: F811
    schema = make(DEPTH, {"type": "integer", "minimum": 0, "maximum": 9})
    sp = SamplingParams(json_schema=json.dumps(schema), temperature=0.7)
    sp.verify(129280, allow_grammar=True)
    out = _generate(backend, sp, 3, _favour(tok, ["```", "Here"]), structural, max_steps=3000)
    value = json.loads(tok.decode(out[:-1]))
    with deep_recursion():
        jsonschema.validate(value, schema)


@pytest.mark.parametrize("make", [nested_objects, nested_arrays], ids=["objects", "arrays"])
def test_deep_malformed_schema_is_refused_naming_the_field(backend, make) -> None:  # noqa: F811
    schema = make(DEPTH, {"type": "nope"})
    with pytest.raises(jsonschema.SchemaError), deep_recursion():  # the oracle
        jsonschema.Draft202012Validator.check_schema(schema)
    sp = SamplingParams(json_schema=json.dumps(schema), temperature=0.7)
    with pytest.raises(ValueError) as e:
        backend.create(sp)
    msg = str(e.value)
    assert msg.startswith("json_schema: invalid grammar: invalid JSON schema at ") and "'nope'" in msg, msg
    assert "recursion" not in msg, msg


def test_chunked_check_reports_the_full_path() -> None:
    schema = nested_objects(60, {"anyOf": []})
    with pytest.raises(ValueError) as e:
        check_json_schema(schema)
    assert str(e.value) == f"invalid JSON schema at '{'properties/a/' * 60}anyOf': [] should be non-empty"
    check_json_schema(nested_objects(60, {"type": "string"}))  # and the valid one passes
