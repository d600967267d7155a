"""Batch input lines keep integers past the 64-bit range exact.

A body line decoded with orjson alone turned ``123456789012345678901234567`` into the float
``1.2345678901234568e+26``, so a range error quoted a rounded value. Oracle: Python's own integer
literal (RFC 8259 leaves the range to the parser; the standard library's ``json`` is exact).
"""

from __future__ import annotations

import json

from sglang_v4.entrypoints.openai.batch_input import parse_batch_input

BIG = 123456789012345678901234567


def test_batch_line_body_keeps_a_big_integer_exact() -> None:
    line = {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"messages": [{"role": "user", "content": "x"}], "seed": BIG},
    }
    lines, errors = parse_batch_input(json.dumps(line).encode() + b"\n", "/v1/chat/completions")
    assert not errors, errors
    seed = lines[0].body["seed"]
    assert type(seed) is int and seed == BIG, seed
